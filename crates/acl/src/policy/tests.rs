use super::*;
use crate::field::FIELD_COUNT;

const ISSUE_EXAMPLE: &str = r#"
# The example from the design issue.
policy p1 {
    predicate = match(sip = 10.0.1.101) & match(dip = 10.0.1.105) & match(dport = 4791) &
                match(type in {ConnectRequest, ConnectReply}) & match(dQPN in {200, 500})
    action = allow
}
policy p3 {
    predicate = match(sip = 10.0.1.0/24) & match(opcode in {READ}) &
                match(VA in [0x1000, 0x2000])
    action = deny
}
apply(p1, p3)
"#;

fn values(pairs: &[(Field, u128)]) -> [Option<u128>; FIELD_COUNT] {
    let mut v = [None; FIELD_COUNT];
    for (f, x) in pairs {
        v[f.index()] = Some(*x);
    }
    v
}

fn v4(s: &str) -> u128 {
    u128::from(s.parse::<std::net::Ipv4Addr>().unwrap().to_ipv6_mapped())
}

#[test]
fn issue_example_parses_and_evaluates() {
    let set = parse(ISSUE_EXAMPLE).unwrap();
    assert_eq!(set.policies.len(), 2);
    assert_eq!(set.default, Action::Allow);
    assert!(set.warnings.is_empty(), "{:?}", set.warnings);
    let read = values(&[
        (Field::Sip, v4("10.0.1.7")),
        (Field::Opcode, 0x0c),
        (Field::Va, 0x1800),
    ]);
    assert_eq!(set.evaluate(&read), (Some(1), Action::Deny));
    let outside = values(&[
        (Field::Sip, v4("10.0.2.7")),
        (Field::Opcode, 0x0c),
        (Field::Va, 0x1800),
    ]);
    assert_eq!(set.evaluate(&outside), (None, Action::Allow));
    let rep = values(&[
        (Field::Sip, v4("10.0.1.101")),
        (Field::Dip, v4("10.0.1.105")),
        (Field::Dport, 4791),
        (Field::CmType, 3),
        (Field::DQpn, 500),
    ]);
    assert_eq!(set.evaluate(&rep), (Some(0), Action::Allow));
}

#[test]
fn negation_of_absent_field_is_true() {
    let set = parse(
        "policy a { predicate = !match(VA in [0, 0xffff]) action = deny } apply(a) default allow",
    )
    .unwrap();
    assert_eq!(
        set.evaluate(&values(&[])).1,
        Action::Deny,
        "no VA: not in range"
    );
    assert_eq!(set.evaluate(&values(&[(Field::Va, 5)])).1, Action::Allow);
    assert_eq!(
        set.evaluate(&values(&[(Field::Va, 0x10000)])).1,
        Action::Deny
    );
}

#[test]
fn operators_precedence_and_parentheses() {
    // & binds tighter than |.
    let set = parse(
        "policy a { predicate = match(sport = 1) | match(sport = 2) & match(dport = 3) action = deny }
         apply(a)",
    )
    .unwrap();
    assert_eq!(set.evaluate(&values(&[(Field::Sport, 1)])).1, Action::Deny);
    assert_eq!(set.evaluate(&values(&[(Field::Sport, 2)])).1, Action::Allow);
    let set = parse(
        "policy a { predicate = (match(sport = 1) | match(sport = 2)) & match(dport = 3) action = deny }
         apply(a)",
    )
    .unwrap();
    assert_eq!(set.evaluate(&values(&[(Field::Sport, 1)])).1, Action::Allow);
    assert_eq!(
        set.evaluate(&values(&[(Field::Sport, 2), (Field::Dport, 3)]))
            .1,
        Action::Deny
    );
}

#[test]
fn ipv6_gids_and_default_deny() {
    let set = parse(
        "policy a { predicate = match(sip in {fe80::/64, 10.0.0.0/8}) | match(dGID = fe80::1) action = allow }
         apply(a)
         default deny",
    )
    .unwrap();
    let fe = u128::from("fe80::99".parse::<std::net::Ipv6Addr>().unwrap());
    assert_eq!(set.evaluate(&values(&[(Field::Sip, fe)])).1, Action::Allow);
    assert_eq!(
        set.evaluate(&values(&[(Field::Sip, v4("10.9.9.9"))])).1,
        Action::Allow
    );
    assert_eq!(
        set.evaluate(&values(&[(Field::Sip, v4("11.0.0.1"))])).1,
        Action::Deny
    );
    let one = u128::from("fe80::1".parse::<std::net::Ipv6Addr>().unwrap());
    assert_eq!(
        set.evaluate(&values(&[(Field::DGid, one)])).1,
        Action::Allow
    );
}

fn error_at(src: &str) -> (u32, u32, String) {
    let e = parse(src).unwrap_err();
    (e.line, e.col, e.to_string())
}

#[test]
fn errors_name_line_and_column() {
    let (l, c, m) = error_at("policy a {\n  predicate = match(spot = 1)\n  action = deny\n}");
    assert_eq!((l, c), (2, 21), "{m}");
    assert!(m.contains("unknown field `spot`"), "{m}");
    let (l, c, m) = error_at("policy a {\n  predicate = match(sport = 70000)\n  action = deny }");
    assert_eq!((l, c), (2, 29), "{m}");
    assert!(m.contains("out of range"), "{m}");
    let (l, c, m) = error_at("policy a { predicate = match(sip = 10.0.1.1/24) action = deny }");
    assert_eq!((l, c), (1, 36), "{m}");
    assert!(m.contains("host bits"), "{m}");
    let (_, _, m) = error_at("policy a { predicate = match(opcode = FOO) action = deny }");
    assert!(m.contains("opcode"), "{m}");
    let (l, c, m) = error_at("policy a { predicate = any action = deny }\napply(a, b)");
    assert_eq!((l, c), (2, 10), "{m}");
    assert!(m.contains("`b`"), "{m}");
    let (_, _, m) = error_at("policy a { predicate = any }");
    assert!(m.contains("no `action`"), "{m}");
    let (l, c, m) = error_at("policy a { predicate = match(VA in [5, 1]) action = deny }");
    assert_eq!((l, c), (1, 36), "{m}");
    let (l, c, _) = error_at("policy a { predicate = any action = deny } $");
    assert_eq!((l, c), (1, 44));
    let (_, _, m) = error_at("policy a { predicate = match(sport = 1) & action = deny }");
    assert!(m.contains("expected `match(...)`"), "{m}");
    let (_, _, m) = error_at(
        "policy a { predicate = any action = deny } policy a { predicate = any action = deny }",
    );
    assert!(m.contains("already defined"), "{m}");
}

#[test]
fn shadowed_policies_are_warned() {
    let set = parse(
        "policy wide { predicate = match(sip = 10.0.0.0/8) action = deny }
         policy narrow { predicate = match(sip = 10.1.0.0/16) & match(opcode in {WRITE}) action = allow }
         policy other { predicate = match(sip = 11.0.0.0/8) action = allow }
         policy split1 { predicate = match(dport in [0, 100]) action = allow }
         policy split2 { predicate = match(dport in [101, 65535]) action = deny }
         policy covered { predicate = match(dport in [50, 200]) action = deny }
         apply(wide, narrow, other, split1, split2, covered)",
    )
    .unwrap();
    let msgs: Vec<String> = set.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("`narrow` is shadowed") && m.contains("`wide`")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter().any(|m| m.contains("`covered` is shadowed")),
        "{msgs:?}"
    );
    assert!(
        !msgs.iter().any(|m| m.contains("`other` is shadowed")),
        "{msgs:?}"
    );
    assert_eq!(msgs.len(), 2, "{msgs:?}");
}

#[test]
fn never_matching_and_unapplied_policies_are_warned() {
    let set = parse(
        "policy a { predicate = match(sport = 1) & !match(sport = 1) action = deny }
         policy b { predicate = any action = deny }
         apply(a)",
    )
    .unwrap();
    assert_eq!(set.warnings.len(), 2, "{:?}", set.warnings);
}

#[test]
fn names_and_numbers_for_opcodes_and_types() {
    let set = parse(
        "policy a { predicate = match(opcode in {CAS, FAA, 0x0c, RDMA_WRITE_ONLY}) action = deny }
         policy b { predicate = match(type in {DREQ, 6}) & match(cmForged = true) action = deny }
         apply(a, b)",
    )
    .unwrap();
    for op in [0x13u128, 0x14, 0x0c, 0x0a] {
        assert_eq!(
            set.evaluate(&values(&[(Field::Opcode, op)])).1,
            Action::Deny
        );
    }
    assert_eq!(
        set.evaluate(&values(&[(Field::Opcode, 0x0b)])).1,
        Action::Allow
    );
    assert_eq!(
        set.evaluate(&values(&[(Field::CmType, 5), (Field::CmForged, 1)]))
            .1,
        Action::Deny
    );
    assert_eq!(
        set.evaluate(&values(&[(Field::CmType, 5), (Field::CmForged, 0)]))
            .1,
        Action::Allow
    );
}

#[test]
fn too_complex_predicates_are_rejected() {
    // !(a1&b1 | a2&b2 | ...) multiplies out to 2^n conjunctions.
    let mut terms = Vec::new();
    for i in 0..13 {
        terms.push(format!("(match(sport = {i}) & match(dport = {i}))"));
    }
    let src = format!(
        "policy a {{ predicate = !({}) action = deny }} apply(a)",
        terms.join(" | ")
    );
    let e = parse(&src).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::TooComplex { .. }), "{e}");
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let src = format!(
        "policy a {{ predicate = {}any{} action = deny }}",
        "(!".repeat(10_000),
        ")".repeat(10_000)
    );
    let e = parse(&src).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::TooDeep(_)), "{e}");
    let ok = format!(
        "policy a {{ predicate = {}any{} action = deny }} apply(a)",
        "(".repeat(30),
        ")".repeat(30)
    );
    assert!(parse(&ok).is_ok());
}

/// The shadowing proofs of a file share one work budget (thousands of overlapping policies
/// each spending the per-policy budget took minutes): once it is spent, later policies are
/// not checked and one warning says from which on. Here with a small budget.
#[test]
fn the_shadowing_proof_has_a_budget_per_file() {
    let mut t = String::new();
    let mut names = Vec::new();
    for i in 0..80 {
        t.push_str(&format!(
            "policy p{i} {{ predicate = match(dQPN in [{i}, {}]) & match(sport in [{}, 60000]) action = deny }}\n",
            i + 500,
            i % 700
        ));
        names.push(format!("p{i}"));
    }
    t.push_str(&format!("apply({})\n", names.join(", ")));
    let stopped = |set: &PolicySet| {
        set.warnings
            .iter()
            .filter(|w| w.message.contains("shadowing not checked from"))
            .count()
    };
    assert_eq!(stopped(&parse(&t).unwrap()), 0);
    let small = parse_with_shadow_budget(&t, 2_000).unwrap();
    assert_eq!(stopped(&small), 1, "{:?}", small.warnings);
}
