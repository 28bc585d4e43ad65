//! Policies in the JANUS paper's notation (`tests/data/paper-style.acl`: `= any` wildcards,
//! `[lo, inf]`, `in PREFIX`, integer GIDs), compiled and run by the native engine on RoCEv2,
//! InfiniBand and CM traffic, against a reference that evaluates each policy as
//! `docs/acl.md` defines the notation: a wildcard holds whether or not the packet carries the
//! field, a value constraint on a field the packet lacks does not hold, `inf` is the field's
//! largest value and an integer GID is the GID's big-endian value.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use rdx_acl::compile::compile;
use rdx_acl::craft::{self, Bth, Endpoints};
use rdx_acl::engine::{Cause, Engine};
use rdx_acl::field::CmType;
use rdx_acl::packet::LinkType;
use rdx_acl::policy::{self, Action};

const POLICY_FILE: &str = "tests/data/paper-style.acl";

/// A packet's fields as the document defines them (`None`: the packet does not carry it).
/// Addresses and GIDs are 128-bit, IPv4 as `::ffff:a.b.c.d`; `cm` is the message type's
/// attribute ID less 0x10 (`type`).
#[derive(Clone, Copy, Debug, Default)]
struct Fields {
    sip: Option<u128>,
    dip: Option<u128>,
    sport: Option<u128>,
    dport: Option<u128>,
    slid: Option<u128>,
    dlid: Option<u128>,
    sgid: Option<u128>,
    dgid: Option<u128>,
    cm_type: Option<u128>,
    lqpn: Option<u128>,
    dqpn: Option<u128>,
    opcode: Option<u128>,
    va: Option<u128>,
    cm_forged: Option<u128>,
}

/// The paper's constraints, written out: a value constraint needs the field.
fn is(v: Option<u128>, want: u128) -> bool {
    v == Some(want)
}
fn within(v: Option<u128>, lo: u128, hi: u128) -> bool {
    v.is_some_and(|v| lo <= v && v <= hi)
}
fn one_of(v: Option<u128>, set: &[u128]) -> bool {
    v.is_some_and(|v| set.contains(&v))
}
fn in_v4_prefix(v: Option<u128>, net: [u8; 4], len: u32) -> bool {
    let net = v4(net);
    let host = u128::MAX >> (96 + len);
    v.is_some_and(|v| v & !host == net)
}
/// `match(f = any)`: true on every packet, carried or not; kept as a call so that the
/// reference reads like the policy file.
fn any(_: Option<u128>) -> bool {
    true
}

const INF_VA: u128 = u64::MAX as u128;
const INF_QPN: u128 = 0xff_ffff;
const INF_LID: u128 = 0xffff;
const READ: &[u128] = &[0x0c, 0x0d, 0x0e, 0x0f, 0x10];
const WRITE: &[u128] = &[
    0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b,
];
const CAS_FAA: &[u128] = &[0x13, 0x14];

/// `tests/data/paper-style.acl`, policy by policy, in apply order.
fn reference(p: &Fields) -> (Option<usize>, Action) {
    let policies: [(bool, Action); 7] = [
        (
            in_v4_prefix(p.sip, [10, 0, 4, 0], 24)
                && is(p.dip, v4([10, 0, 9, 1]))
                && any(p.sport)
                && is(p.dport, 4791)
                && one_of(p.opcode, READ)
                && within(p.dqpn, 0x100, 0x1ff)
                && within(p.va, 0x10000, INF_VA)
                && any(p.lqpn)
                && any(p.sgid),
            Action::Allow,
        ),
        (
            one_of(p.opcode, CAS_FAA)
                && !in_v4_prefix(p.sip, [10, 0, 4, 0], 24)
                && within(p.va, 0, INF_VA)
                && any(p.dqpn)
                && any(p.sport),
            Action::Deny,
        ),
        (
            one_of(p.sgid, &[100, 200])
                && is(p.dgid, 500)
                && any(p.slid)
                && any(p.dlid)
                && any(p.opcode)
                && any(p.dqpn),
            Action::Allow,
        ),
        (
            one_of(p.cm_type, &[0, 4])
                && in_v4_prefix(p.sip, [10, 0, 0, 0], 8)
                && any(p.lqpn)
                && any(p.dqpn)
                && is(p.cm_forged, 0),
            Action::Allow,
        ),
        (
            is(p.cm_type, 5) && within(p.dqpn, 0x100, INF_QPN) && any(p.lqpn),
            Action::Deny,
        ),
        (
            one_of(p.opcode, WRITE)
                && within(p.va, 0, 0xffff)
                && any(p.sip)
                && any(p.sgid)
                && any(p.slid),
            Action::Deny,
        ),
        (
            within(p.slid, 1, INF_LID) && !within(p.sgid, 0, u128::MAX) && any(p.opcode),
            Action::Allow,
        ),
    ];
    match policies.iter().position(|(holds, _)| *holds) {
        Some(i) => (Some(i), policies[i].1),
        None => (None, Action::Deny),
    }
}

fn v4(a: [u8; 4]) -> u128 {
    u128::from(Ipv4Addr::from(a).to_ipv6_mapped())
}

/// Extension headers for the data opcodes used here, and whether they carry a VA.
fn data_ext(opcode: u8, va: u64) -> (Vec<u8>, bool) {
    match opcode {
        0x0a | 0x0c | 0x2a => (craft::reth(va, 7, 64), true),
        0x13 | 0x14 => (craft::atomic_eth(va, 7, 1, 0), true),
        0x10 | 0x11 => (craft::aeth(0, 1), false),
        _ => (Vec::new(), false),
    }
}

const DATA_OPCODES: [u8; 8] = [0x04, 0x0a, 0x0c, 0x10, 0x11, 0x13, 0x14, 0x2a];
const QPNS: [u32; 4] = [0x0ff, 0x100, 0x1ff, 0x200];
const VAS: [u64; 4] = [0, 0xffff, 0x10000, u64::MAX];

/// Every combination of the values the policies turn on, as (link, frame, fields).
fn traffic() -> Vec<(LinkType, Vec<u8>, Fields)> {
    let mut out = Vec::new();
    // RoCEv2 data over IPv4 and IPv6.
    let hosts: [IpAddr; 5] = [
        Ipv4Addr::new(10, 0, 4, 7).into(),
        Ipv4Addr::new(10, 0, 5, 7).into(),
        Ipv4Addr::new(192, 168, 1, 1).into(),
        Ipv4Addr::new(10, 0, 9, 1).into(),
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1).into(),
    ];
    let addr = |a: IpAddr| match a {
        IpAddr::V4(v) => u128::from(v.to_ipv6_mapped()),
        IpAddr::V6(v) => u128::from(v),
    };
    for sip in hosts {
        for dip in hosts {
            if sip.is_ipv4() != dip.is_ipv4() {
                continue;
            }
            for sport in [49152u16, 4791] {
                for opcode in DATA_OPCODES {
                    for dqpn in QPNS {
                        for va in VAS {
                            let (ext, has_va) = data_ext(opcode, va);
                            if !has_va && va != 0 {
                                continue;
                            }
                            let ep = Endpoints { sip, dip, sport };
                            let bth = Bth {
                                opcode,
                                dest_qp: dqpn,
                                psn: 1,
                            };
                            let frame = craft::roce(&ep, bth, &ext, &[0; 8]);
                            let fields = Fields {
                                sip: Some(addr(sip)),
                                dip: Some(addr(dip)),
                                sport: Some(sport.into()),
                                dport: Some(4791),
                                sgid: Some(addr(sip)),
                                dgid: Some(addr(dip)),
                                opcode: Some(opcode.into()),
                                dqpn: Some(dqpn.into()),
                                va: has_va.then_some(va.into()),
                                ..Fields::default()
                            };
                            out.push((LinkType::Ethernet, frame, fields));
                        }
                    }
                }
            }
        }
    }
    // Native InfiniBand data, with and without a GRH; GIDs by integer.
    let gids = [
        None,
        Some((100, 500)),
        Some((200, 500)),
        Some((100, 501)),
        Some((300, 500)),
        Some((v4([10, 0, 4, 7]), 500)),
    ];
    for slid in [0u16, 1, 0xffff] {
        for g in gids {
            for opcode in DATA_OPCODES {
                for dqpn in [0x0ffu32, 0x100] {
                    for va in [0u64, 0x10000] {
                        let (ext, has_va) = data_ext(opcode, va);
                        if !has_va && va != 0 {
                            continue;
                        }
                        let bth = Bth {
                            opcode,
                            dest_qp: dqpn,
                            psn: 1,
                        };
                        let frame = craft::infiniband(slid, 9, g, bth, &ext, &[0; 8]);
                        let fields = Fields {
                            slid: Some(slid.into()),
                            dlid: Some(9),
                            sgid: g.map(|(s, _)| s),
                            dgid: g.map(|(_, d)| d),
                            opcode: Some(opcode.into()),
                            dqpn: Some(dqpn.into()),
                            va: has_va.then_some(va.into()),
                            ..Fields::default()
                        };
                        out.push((LinkType::InfiniBand, frame, fields));
                    }
                }
            }
        }
    }
    // CM messages over RoCEv2, each decided on a fresh connection table: a REQ carries
    // the requester's QPN (lQPN), a DREQ the QPN to disconnect (dQPN); an RTU of no known
    // connection carries neither.
    for sip in [[10u8, 0, 4, 7], [10, 200, 0, 1], [192, 168, 1, 1]] {
        for (kind, type_value) in [
            (CmType::ConnectRequest, 0u128),
            (CmType::ReadyToUse, 4),
            (CmType::DisconnectRequest, 5),
        ] {
            for qpn in [0x0ffu32, 0x100, 0xff_ffff] {
                for src_qp in [1u32, 7] {
                    let ep = Endpoints {
                        sip: Ipv4Addr::from(sip).into(),
                        dip: Ipv4Addr::new(10, 0, 9, 1).into(),
                        sport: 4791,
                    };
                    let bth = Bth {
                        opcode: 0x64,
                        dest_qp: 1,
                        psn: 1,
                    };
                    let mut l4 = craft::deth(craft::GSI_QKEY, src_qp);
                    l4.extend(craft::cm_mad(kind, 0x1234, 0x5678, qpn));
                    let frame = craft::roce(&ep, bth, &l4, &[]);
                    let fields = Fields {
                        sip: Some(v4(sip)),
                        dip: Some(v4([10, 0, 9, 1])),
                        sport: Some(4791),
                        dport: Some(4791),
                        sgid: Some(v4(sip)),
                        dgid: Some(v4([10, 0, 9, 1])),
                        cm_type: Some(type_value),
                        lqpn: (kind == CmType::ConnectRequest).then_some(qpn.into()),
                        dqpn: (kind == CmType::DisconnectRequest).then_some(qpn.into()),
                        opcode: Some(0x64),
                        cm_forged: Some((src_qp != 1).into()),
                        ..Fields::default()
                    };
                    out.push((LinkType::Ethernet, frame, fields));
                }
            }
        }
    }
    out
}

#[test]
fn paper_style_policies_decide_as_the_reference() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(POLICY_FILE);
    let src = std::fs::read_to_string(&path).unwrap();
    let set = policy::parse(&src).unwrap_or_else(|e| panic!("{POLICY_FILE}:{e}"));
    assert!(set.warnings.is_empty(), "{:?}", set.warnings);
    assert_eq!(set.policies.len(), 7);
    let rules = compile(&set).unwrap();

    let traffic = traffic();
    let mut decided_by = [0usize; 8];
    let mut failures = Vec::new();
    let mut data_path = Engine::new(rules.clone());
    for (link, frame, fields) in &traffic {
        // Each CM message on a fresh connection table: CM state is not what this test is
        // about (data packets neither read nor change it).
        let verdict = if fields.cm_type.is_some() {
            Engine::new(rules.clone()).process(*link, frame)
        } else {
            data_path.process(*link, frame)
        };
        let got = match verdict.cause {
            Cause::Policy { policy, .. } => Some(policy as usize),
            Cause::Default => None,
            other => panic!("{fields:?}: not classified ({other:?})"),
        };
        let want = reference(fields);
        if (got, verdict.action) != want {
            failures.push(format!(
                "{fields:x?}: engine {:?} {:?}, reference {:?} {:?}",
                got, verdict.action, want.0, want.1
            ));
        }
        decided_by[want.0.unwrap_or(7)] += 1;
    }
    assert!(
        failures.is_empty(),
        "{} of {} frames differ, first: {:#?}",
        failures.len(),
        traffic.len(),
        &failures[..failures.len().min(5)]
    );
    // Every policy and the default decide some of the traffic, so none is vacuous.
    assert!(
        decided_by.iter().all(|&n| n > 0),
        "frames decided per policy (default last): {decided_by:?}"
    );
    eprintln!(
        "{} frames, decided per policy (default last): {decided_by:?}",
        traffic.len()
    );
}

/// The wildcards are what let the paper's rules reach packets that lack the fields they
/// leave open: `low_writes` writes `sip = any`, `sGID = any` and `sLID = any`, and still
/// denies a low write over native InfiniBand without a GRH (no sip, no sGID) and over RoCEv2
/// (no sLID). Written as `[0, inf]` ranges instead, it would require all three fields.
#[test]
fn wildcards_reach_packets_without_the_field() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(POLICY_FILE);
    let src = std::fs::read_to_string(path).unwrap();
    let rules = compile(&policy::parse(&src).unwrap()).unwrap();
    let bth = Bth {
        opcode: 0x0a,
        dest_qp: 0x100,
        psn: 1,
    };
    let ext = craft::reth(0x40, 7, 64);
    let ib = craft::infiniband(0, 9, None, bth, &ext, &[0; 8]);
    let ep = Endpoints {
        sip: Ipv4Addr::new(10, 0, 5, 7).into(),
        dip: Ipv4Addr::new(10, 0, 9, 1).into(),
        sport: 49152,
    };
    let roce = craft::roce(&ep, bth, &ext, &[0; 8]);
    let low_writes = 5;
    for (link, frame) in [(LinkType::InfiniBand, ib), (LinkType::Ethernet, roce)] {
        let verdict = Engine::new(rules.clone()).process(link, &frame);
        assert_eq!(verdict.action, Action::Deny);
        assert!(
            matches!(verdict.cause, Cause::Policy { policy, .. } if policy == low_writes),
            "{link:?}: {verdict:?}"
        );
    }

    let narrowed = src.replace("match(sip = any)", "match(sip in [::, inf])");
    let rules = compile(&policy::parse(&narrowed).unwrap()).unwrap();
    let ib = craft::infiniband(0, 9, None, bth, &ext, &[0; 8]);
    let verdict = Engine::new(rules).process(LinkType::InfiniBand, &ib);
    assert_eq!(
        verdict.cause,
        Cause::Default,
        "a full range needs the field"
    );
}

/// The `acl_policy` fuzz target's seeds (`fuzz/seeds/acl_policy/`) reach the notation: each
/// `ok-*` seed parses and compiles to an image that round-trips,
/// as the target checks; each `err-*` seed is refused with a positioned error. A seed that
/// stopped parsing would leave the fuzzer mutating error paths only.
#[test]
fn fuzz_seeds_reach_the_notation() {
    use rdx_acl::compile::RuleImage;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/acl_policy");
    let mut seen = (0, 0);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let src = std::fs::read_to_string(&path).unwrap();
        if name.starts_with("ok-") {
            let set = policy::parse(&src).unwrap_or_else(|e| panic!("{name}:{e}"));
            let rules = compile(&set).unwrap();
            let back = RuleImage::from_bytes(&RuleImage::to_bytes(&rules)).unwrap();
            assert_eq!(back.rules, rules.rules, "{name}");
            seen.0 += 1;
        } else if name.starts_with("err-") {
            let e = policy::parse(&src).expect_err(&name);
            assert!(e.line > 0 && e.col > 0, "{name}: {e}");
            seen.1 += 1;
        }
    }
    assert!(seen.0 >= 4 && seen.1 >= 4, "seeds found: {seen:?}");
    let all: String = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    for construct in [
        "= any)",
        ", inf]",
        " in 10.0.4.0/24",
        "sGID in {100",
        "dGID = 500",
    ] {
        assert!(all.contains(construct), "no seed has `{construct}`");
    }
}

/// The `acl_policy` fuzz target's property, on stable and in every test run: the seeds,
/// mutated token by token with the dictionary's tokens (substituted, inserted, deleted or
/// repeated), parse to a policy or a positioned error, never a panic, and what parses
/// compiles to an image that round-trips. Both outcomes must be reached.
#[test]
fn mutated_seeds_parse_or_fail_cleanly() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    use rdx_acl::compile::{rule_count, RuleImage};

    /// Words (letters, digits, `_ . :`) and single other characters, whitespace dropped.
    fn tokens_of(text: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut in_word = false;
        for c in text.chars() {
            let word_char = c.is_ascii_alphanumeric() || "_.:".contains(c);
            if word_char && in_word {
                out.last_mut().expect("a word in progress").push(c);
            } else if !c.is_whitespace() {
                out.push(c.to_string());
            }
            in_word = word_char;
        }
        out
    }

    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    let mut seeds: Vec<Vec<String>> = std::fs::read_dir(fuzz.join("acl_policy"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .map(|s| {
            let without_comments: Vec<&str> =
                s.lines().map(|l| l.split('#').next().unwrap()).collect();
            tokens_of(&without_comments.join("\n"))
        })
        .collect();
    seeds.sort();
    let dictionary: Vec<String> = std::fs::read_to_string(fuzz.join("acl_policy.dict"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            l.strip_prefix('"')?
                .strip_suffix('"')
                .map(str::trim)
                .map(str::to_owned)
        })
        .collect();
    assert!(dictionary.len() > 30, "dictionary: {dictionary:?}");

    let mutation = (0u8..4, 0.0f64..1.0, 0..dictionary.len());
    let case = (0..seeds.len(), proptest::collection::vec(mutation, 0..3));
    let config = Config {
        cases: 2000,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let outcomes = std::cell::Cell::new((0, 0));
    TestRunner::new_with_rng(config, rng)
        .run(&case, |(seed, mutations)| {
            let mut toks = seeds[seed].clone();
            for (kind, at, token) in mutations {
                let at = ((toks.len() as f64) * at) as usize;
                let token = dictionary[token].clone();
                let is_word = |t: &str| t.starts_with(|c: char| c.is_ascii_alphanumeric());
                match kind {
                    // A word for a word, a sign for a sign: keeps the shape more often
                    // than not, so that the parser's later stages are reached.
                    0 | 1 if at < toks.len() && is_word(&toks[at]) == is_word(&token) => {
                        toks[at] = token
                    }
                    0 | 1 => toks.insert(at, token),
                    2 if at < toks.len() => drop(toks.remove(at)),
                    _ if at < toks.len() => toks.insert(at, toks[at].clone()),
                    _ => {}
                }
            }
            let text = toks.join(" ");
            let (mut parsed, mut refused) = outcomes.get();
            match policy::parse(&text) {
                Err(e) => {
                    refused += 1;
                    prop_assert!(e.line > 0 && e.col > 0, "{e}");
                }
                Ok(set) => {
                    parsed += 1;
                    if rule_count(&set) <= 50_000 {
                        if let Ok(rules) = compile(&set) {
                            let image = RuleImage::to_bytes(&rules);
                            let back = RuleImage::from_bytes(&image).unwrap();
                            prop_assert_eq!(back.rules, rules.rules);
                        }
                    }
                }
            }
            outcomes.set((parsed, refused));
            Ok(())
        })
        .unwrap();
    let (parsed, refused) = outcomes.get();
    assert!(
        parsed > 200 && refused > 200,
        "parsed {parsed}, refused {refused}"
    );
}
