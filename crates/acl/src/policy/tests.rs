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

// ---------------------------------------------------------------------------------------
// The JANUS paper's notation: `= any` wildcards, `[lo, inf]`, `in PREFIX`, integer GIDs.

fn kind_of(src: &str) -> ErrorKind {
    parse(src).unwrap_err().kind
}

fn one_policy(predicate: &str) -> PolicySet {
    parse(&format!(
        "policy p {{ predicate = {predicate} action = deny }} apply(p) default allow"
    ))
    .unwrap_or_else(|e| panic!("{predicate}: {e}"))
}

fn denies(set: &PolicySet, pairs: &[(Field, u128)]) -> bool {
    set.evaluate(&values(pairs)).1 == Action::Deny
}

/// `match(f = any)` is a wildcard on every field, as the paper writes them: it holds on
/// every packet, whether the packet carries the field or not.
#[test]
fn any_is_a_wildcard_on_every_field_present_or_absent() {
    for field in Field::ALL {
        let set = one_policy(&format!("match({field} = any)"));
        assert!(denies(&set, &[]), "{field} = any on a packet without it");
        assert!(denies(&set, &[(field, 0)]), "{field} = any on value 0");
        assert!(
            denies(&set, &[(field, field.max())]),
            "{field} = any on its maximum"
        );
        assert!(set.warnings.is_empty(), "{field}: {:?}", set.warnings);
        // Its negation matches nothing, which the checker says.
        let never = one_policy(&format!("!match({field} = any)"));
        assert!(!denies(&never, &[(field, 1)]));
        assert!(never.warnings[0].message.contains("can never match"));
    }
    // A paper-style conjunction: wildcards on most fields, one real constraint.
    let set = one_policy(
        "match(sip = any) & match(sport = any) & match(lQPN = any) & match(dQPN = any) & \
         match(sGID = any) & match(opcode in {WRITE})",
    );
    assert!(
        denies(&set, &[(Field::Opcode, 0x0a)]),
        "no addresses, no QPNs"
    );
    assert!(denies(
        &set,
        &[(Field::Opcode, 0x0a), (Field::Sip, v4("10.0.0.1"))]
    ));
    assert!(!denies(&set, &[(Field::Opcode, 0x0c)]));
}

/// A wildcard written twice, or next to a constraint on the same field, changes nothing;
/// `any` inside a set or range, or after `in`, is an error that says how to write it.
#[test]
fn repeated_and_misplaced_any() {
    let twice = one_policy("match(sport = any) & match(sport = any)");
    assert_eq!(twice.policies[0].cubes, vec![Cube::any()]);
    let with = one_policy("match(sport = any) & match(sport = 7)");
    assert_eq!(
        with.policies[0].cubes,
        one_policy("match(sport = 7)").policies[0].cubes
    );
    for bad in [
        "match(sport in {any})",
        "match(sport in {5, any})",
        "match(sport in [any, 5])",
        "match(sport in [5, any])",
        "match(sip in any)",
    ] {
        let src = format!("policy p {{ predicate = {bad} action = deny }}");
        let e = parse(&src).unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::MisplacedAny { field: e_field(&e) },
            "{bad}"
        );
        assert!(e.to_string().contains("= any)`"), "{e}");
    }
    let e = parse("policy p { predicate = match(sport = any any) action = deny }").unwrap_err();
    assert!(e.to_string().contains("`)` to close"), "{e}");
}

fn e_field(e: &PolicyError) -> Field {
    match e.kind {
        ErrorKind::MisplacedAny { field } | ErrorKind::MisplacedInf { field } => field,
        ref other => panic!("not a misplaced keyword: {other}"),
    }
}

/// `[lo, inf]` runs to the field's largest value; a range still requires the field to be
/// present (it is a constraint on a value), unlike `= any`.
#[test]
fn inf_closes_a_range_at_the_fields_maximum() {
    let set = one_policy("match(VA in [0, inf])");
    assert!(denies(&set, &[(Field::Va, 0)]));
    assert!(denies(&set, &[(Field::Va, u64::MAX as u128)]));
    assert!(!denies(&set, &[]), "no VA: a range does not hold");
    let set = one_policy("match(dQPN in [0x100, inf])");
    assert!(denies(&set, &[(Field::DQpn, 0xff_ffff)]));
    assert!(!denies(&set, &[(Field::DQpn, 0xff)]));
    // From an IPv4 address, `inf` is the top of IPv4, not of the IPv6 space above it;
    // from an IPv6 address or an integer GID, the all-ones address.
    for lo in ["10.0.0.0", "::ffff:10.0.0.0"] {
        let set = one_policy(&format!("match(sGID in [{lo}, inf])"));
        assert!(denies(&set, &[(Field::SGid, v4("10.0.0.0"))]));
        assert!(denies(&set, &[(Field::SGid, v4("255.255.255.255"))]));
        assert!(!denies(&set, &[(Field::SGid, v4("9.255.255.255"))]));
        assert!(!denies(&set, &[(Field::SGid, u128::MAX)]), "{lo}");
        assert!(!denies(&set, &[(Field::SGid, 0xfe80 << 112)]), "{lo}");
    }
    for lo in ["fe80::", "0", "100"] {
        let set = one_policy(&format!("match(dGID in [{lo}, inf])"));
        assert!(denies(&set, &[(Field::DGid, u128::MAX)]), "{lo}");
    }
    // `inf` is nothing but that upper bound: not a value, not a lower bound, no arithmetic.
    for bad in [
        "match(VA = inf)",
        "match(VA in {inf})",
        "match(VA in [inf, inf])",
        "match(VA in [inf, 5])",
    ] {
        let src = format!("policy p {{ predicate = {bad} action = deny }}");
        let e = parse(&src).unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::MisplacedInf { field: Field::Va },
            "{bad}"
        );
        assert!(e.to_string().contains("[lo, inf]"), "{e}");
    }
    assert_eq!(
        kind_of("policy p { predicate = match(VA in [0, inf-1]) action = deny }"),
        ErrorKind::UnexpectedChar('-')
    );
    assert!(matches!(
        kind_of("policy p { predicate = match(VA in [0, infinity]) action = deny }"),
        ErrorKind::BadValue { .. }
    ));
    // An empty range is refused whatever its bounds are written as.
    assert_eq!(
        kind_of("policy p { predicate = match(VA in [5, 3]) action = deny }"),
        ErrorKind::EmptyRange { field: Field::Va }
    );
}

/// `match(sip in 10.0.4.0/24)`: prefix membership, the same set as `= 10.0.4.0/24`.
#[test]
fn in_takes_a_prefix_for_address_fields() {
    let set = one_policy("match(sip in 10.0.4.0/24)");
    assert_eq!(
        set.policies[0].cubes,
        one_policy("match(sip = 10.0.4.0/24)").policies[0].cubes
    );
    assert!(denies(&set, &[(Field::Sip, v4("10.0.4.200"))]));
    assert!(!denies(&set, &[(Field::Sip, v4("10.0.5.1"))]));
    assert!(!denies(&set, &[]), "no sip: not in the prefix");
    let v6 = one_policy("match(dGID in fe80::/64)");
    let fe = u128::from("fe80::7".parse::<std::net::Ipv6Addr>().unwrap());
    assert!(denies(&v6, &[(Field::DGid, fe)]));
    // A bare address is its own full-length prefix.
    let host = one_policy("match(dip in 10.0.4.9)");
    assert!(denies(&host, &[(Field::Dip, v4("10.0.4.9"))]));
    assert!(!denies(&host, &[(Field::Dip, v4("10.0.4.8"))]));
    // /0 is every address of the family, and only present ones: an IPv4 /0 is the
    // IPv4-mapped block, not IPv6 outside it.
    let all4 = one_policy("match(sip in 0.0.0.0/0)");
    assert!(denies(&all4, &[(Field::Sip, v4("255.255.255.255"))]));
    assert!(!denies(&all4, &[(Field::Sip, fe)]));
    assert!(!denies(&all4, &[]));
    let all6 = one_policy("match(sip in ::/0)");
    assert!(denies(&all6, &[(Field::Sip, fe)]) && denies(&all6, &[(Field::Sip, 0)]));
    // Lengths past the family's width are refused.
    for bad in ["10.0.0.0/33", "::/129", "10.0.0.0/-1", "10.0.0.0/0x8"] {
        let src = format!("policy p {{ predicate = match(sip in {bad}) action = deny }}");
        assert!(parse(&src).is_err(), "{bad}");
    }
    // `in` with a single bare value is for addresses only.
    let e = parse("policy p { predicate = match(sport in 5) action = deny }").unwrap_err();
    assert!(e.to_string().contains("`{` or `[` after `in`"), "{e}");
}

/// A prefix with host bits set is refused with the prefix it probably meant.
#[test]
fn host_bits_error_suggests_the_network() {
    let e =
        parse("policy p {\n predicate = match(sip in 10.0.4.1/24)\n action = deny }").unwrap_err();
    assert_eq!((e.line, e.col), (2, 27));
    assert_eq!(
        e.kind,
        ErrorKind::HostBitsSet {
            field: Field::Sip,
            value: "10.0.4.1/24".into(),
            len: 24,
            suggestion: "10.0.4.0/24".into(),
        }
    );
    assert!(e.to_string().contains("did you mean `10.0.4.0/24`?"), "{e}");
    let e = parse("policy p { predicate = match(sGID = fe80::1:2/96) action = deny }").unwrap_err();
    assert!(e.to_string().contains("did you mean `fe80::/96`?"), "{e}");
    let e =
        parse("policy p { predicate = match(dip in {10.0.0.0/8, 192.168.1.77/16}) action = deny }")
            .unwrap_err();
    assert!(
        e.to_string().contains("did you mean `192.168.0.0/16`?"),
        "{e}"
    );
}

/// GIDs as plain integers, as the paper writes them: the integer is the GID's 128-bit
/// big-endian value, so `dGID = 500` is the GID `::1f4` (low bytes 0x01 0xf4).
#[test]
fn integer_gids_are_the_gids_big_endian_value() {
    let set = one_policy("match(sGID in {100, 200}) | match(dGID = 500)");
    assert!(denies(&set, &[(Field::SGid, 100)]));
    assert!(denies(&set, &[(Field::SGid, 200)]));
    assert!(!denies(&set, &[(Field::SGid, 150)]));
    assert!(denies(&set, &[(Field::DGid, 500)]));
    assert!(!denies(&set, &[(Field::DGid, 100)]));
    assert_eq!(
        set.policies[0].cubes,
        one_policy("match(sGID in {::64, ::c8}) | match(dGID = ::1f4)").policies[0].cubes
    );
    let gid = u128::from_be_bytes([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xf4]);
    assert!(denies(&set, &[(Field::DGid, gid)]));
    // Not an IPv4 address: 167772161 is ::a00:1, not ::ffff:10.0.0.1.
    let n = one_policy("match(sGID = 167772161)");
    assert!(!denies(&n, &[(Field::SGid, v4("10.0.0.1"))]));
    // Hexadecimal, ranges and the full 128 bits; one more does not fit.
    let max = u128::MAX.to_string();
    let set = one_policy(&format!("match(sGID in [0x10, {max}])"));
    assert!(denies(&set, &[(Field::SGid, u128::MAX)]));
    assert!(!denies(&set, &[(Field::SGid, 0xf)]));
    let over = "340282366920938463463374607431768211456";
    let e = parse(&format!(
        "policy p {{ predicate = match(dGID = {over}) action = deny }}"
    ))
    .unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    let e = parse("policy p { predicate = match(dGID = 0x1_0000_0000_0000_0000_0000_0000_0000_0000) action = deny }").unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    // An integer GID takes no prefix (the IPv6 form does), and integers are not IP addresses.
    let e = parse("policy p { predicate = match(sGID = 256/120) action = deny }").unwrap_err();
    assert!(e.to_string().contains("`::100/LEN`"), "{e}");
    let e = parse("policy p { predicate = match(sGID = 1.2) action = deny }").unwrap_err();
    assert!(e.to_string().contains("not a GID"), "{e}");
    let e = parse("policy p { predicate = match(sip = 100) action = deny }").unwrap_err();
    assert!(e.to_string().contains("not an IPv4 or IPv6 address"), "{e}");
}

/// The field names as the paper spells them, and a near miss named in the error.
#[test]
fn field_names_in_the_papers_spelling() {
    for name in [
        "sip", "dip", "sport", "dport", "sLID", "dLID", "sGID", "dGID", "type", "lQPN", "dQPN",
        "opcode", "VA",
    ] {
        one_policy(&format!("match({name} = any)"));
    }
    // Case is significant (one spelling per field) and no two fields differ only in case,
    // so a case slip has exactly one suggestion.
    let mut folded: Vec<String> = Field::ALL.iter().map(|f| f.name().to_lowercase()).collect();
    folded.sort();
    folded.dedup();
    assert_eq!(folded.len(), FIELD_COUNT);
    let e = parse("policy p { predicate = match(sgid = 100) action = deny }").unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::UnknownField {
            name: "sgid".into(),
            suggestion: Some("sGID")
        }
    );
    assert!(e.to_string().contains("did you mean `sGID`?"), "{e}");
    let e = parse("policy p { predicate = match(lqpn = any) action = deny }").unwrap_err();
    assert!(e.to_string().contains("did you mean `lQPN`?"), "{e}");
    let e = parse("policy p { predicate = match(tenant = 1) action = deny }").unwrap_err();
    assert!(!e.to_string().contains("did you mean"), "{e}");
}

/// `apply(...)` of an undefined policy names the nearest defined one.
#[test]
fn undefined_policy_in_apply_suggests_the_nearest_name() {
    let src = "policy allow_tenant_a { predicate = any action = allow }
               policy deny_atomics { predicate = match(opcode in {ATOMIC}) action = deny }
               apply(deny_atomic, allow_tenant_a)";
    let e = parse(src).unwrap_err();
    assert_eq!((e.line, e.col), (3, 22));
    assert_eq!(
        e.kind,
        ErrorKind::UnknownPolicy {
            name: "deny_atomic".into(),
            suggestion: Some("deny_atomics".into())
        }
    );
    assert!(
        e.to_string().ends_with(
            "apply(...) names `deny_atomic`, which is not defined; did you mean `deny_atomics`?"
        ),
        "{e}"
    );
    let e = parse("policy a { predicate = any action = deny } apply(zzzzzz)").unwrap_err();
    assert!(e.to_string().ends_with("which is not defined"), "{e}");
}
