//! The enforcement program end to end: verified by rdx's verifier, JIT-compiled, deployed
//! with a compiled policy into a gateway's `acl_packet` hook, and run on real frames. The
//! native engine of `rdx-acl` is the oracle: every frame must get the same verdict, the same
//! deciding rule and policy (or default, or the same malformed reason), and the program's
//! counters must equal the engine's.

#![cfg(target_arch = "x86_64")]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdx_acl::compile::{compile, RuleSet};
use rdx_acl::enforce::Outcome;
use rdx_acl::engine::Engine;
use rdx_acl::packet::LinkType;
use rdx_acl::policy::{parse, Action};
use rdx_acl::{api, craft, pcap, synth};
use rdx_acl_gateway::Gateway;
use support::Applier;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn region(tag: &str) -> PathBuf {
    PathBuf::from(format!(
        "/dev/shm/rdx-acl-gateway-test-{}-{tag}",
        std::process::id()
    ))
}

/// CM capacity of the program's `acl_cm` map, so that the oracle's table fills alike.
const CM_CAPACITY: usize = rdx_acl::enforce::CM_CAPACITY;

/// The large rule set of the tests (the benchmark uses 300,000).
const BIG: usize = 20_000;

fn labels(path: &Path) -> Vec<bool> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| l.split(' ').nth(1) == Some("attack"))
        .collect()
}

fn check_against_engine(
    gw: &Gateway,
    applier: &Applier,
    rules: &RuleSet,
    generation: u64,
    link: LinkType,
    frames: &[Vec<u8>],
) -> Vec<Outcome> {
    let before = applier.stats();
    let hook = gw.hook().unwrap();
    let mut engine = Engine::new(rules.clone()).with_cm_capacity(CM_CAPACITY);
    let mut outcomes = Vec::new();
    for (i, frame) in frames.iter().enumerate() {
        let d = Gateway::decide(&hook, link, frame);
        let want = Outcome::from(&engine.process(link, frame));
        assert_eq!(d.outcome, want, "frame {i}: eBPF program vs native engine");
        assert_eq!(d.generation, generation, "frame {i}");
        outcomes.push(d.outcome);
    }
    let after = applier.stats();
    let c = engine.counters();
    let cm = engine.cm_counters();
    assert_eq!(after.packets - before.packets, c.packets);
    assert_eq!(after.allowed - before.allowed, c.allowed);
    assert_eq!(after.denied - before.denied, c.denied);
    assert_eq!(after.not_rdma - before.not_rdma, c.not_rdma);
    assert_eq!(after.default_hits - before.default_hits, c.default_hits);
    for (i, (a, b)) in after.malformed.iter().zip(before.malformed).enumerate() {
        assert_eq!(a - b, c.malformed[i], "malformed counter {i}");
    }
    assert_eq!(after.cm_created - before.cm_created, cm.created);
    assert_eq!(after.cm_removed - before.cm_removed, cm.removed);
    assert_eq!(
        after.cm_unknown_connection - before.cm_unknown_connection,
        cm.unknown_connection
    );
    assert_eq!(after.cm_table_full - before.cm_table_full, cm.table_full);
    assert_eq!(after.uninspected - before.uninspected, c.uninspected);
    outcomes
}

#[test]
fn attack_traces_are_decided_by_the_extension_exactly_as_by_the_native_engine() {
    let gw = Gateway::new(Some(&region("attacks"))).unwrap();
    let mut applier = Applier::attach(gw.region_path());

    // Nothing deployed: the gateway fails closed.
    let trace = pcap::read(&repo().join("crates/acl/tests/data/attacks.pcap")).unwrap();
    let d = Gateway::decide(&gw.hook().unwrap(), trace.link, &trace.packets[0]);
    assert_eq!(d.outcome.action, Action::Deny);

    for (policy, name) in [("server.acl", "attacks"), ("ib.acl", "ib")] {
        let set = api::load(&repo().join("tools/acl-traffic/policies").join(policy)).unwrap();
        let rules = compile(&set).unwrap();
        let generation = rdx_acl::enforce::content_generation(&rules);
        applier.apply(&rules, generation);
        let data = repo().join("crates/acl/tests/data");
        let trace = pcap::read(&data.join(format!("{name}.pcap"))).unwrap();
        let mut frames = trace.packets.clone();
        if name == "attacks" {
            // Then the trace again with bytes flipped and frames cut, CM messages included:
            // every parser path and CM lookup of the program against the engine's.
            let mut rng = synth::Rng::new(3);
            for _ in 0..3 {
                for f in &trace.packets {
                    let mut f = f.clone();
                    for _ in 0..1 + rng.below(3) {
                        let at = rng.below(f.len() as u64) as usize;
                        f[at] ^= 1 << rng.below(8);
                    }
                    if rng.chance(20) {
                        f.truncate(rng.below(f.len() as u64) as usize);
                    }
                    frames.push(f);
                }
            }
        }
        let outcomes = check_against_engine(&gw, &applier, &rules, generation, trace.link, &frames);
        let attack = labels(&data.join(format!("{name}.labels")));
        let outcomes = &outcomes[..trace.packets.len()];
        assert_eq!(attack.len(), outcomes.len());
        for (i, (o, a)) in outcomes.iter().zip(attack).enumerate() {
            let want = if a { Action::Deny } else { Action::Allow };
            assert_eq!(o.action, want, "{name} frame {i}");
        }
    }
}

#[test]
fn synthetic_rules_and_traffic_agree_with_the_engine() {
    let gw = Gateway::new(Some(&region("synth"))).unwrap();
    let mut applier = Applier::attach(gw.region_path());
    // The last set is decided deep in two-tier trees (20,000 rules, beyond the 2,048 a
    // linear scan in the program could hold); its skewed traffic repeats flows, so the
    // threads' hot-flow tables answer most frames.
    for (n, seed, mix) in [
        (300usize, 11u64, synth::Mix::Uniform),
        (2048, 12, synth::Mix::Uniform),
        (BIG, 13, synth::Mix::Uniform),
        (
            BIG,
            14,
            synth::Mix::Skewed {
                hot_pct: 80,
                flows: 64,
            },
        ),
    ] {
        let synthetic = if n == BIG {
            synth::specific_rules(n, seed)
        } else {
            synth::rules(n, seed)
        };
        let rules = RuleSet {
            policy_names: (0..synthetic.len()).map(|i| format!("r{i}")).collect(),
            rules: synthetic,
            default: Action::Deny,
        };
        applier.apply(&rules, seed);
        let mut frames: Vec<Vec<u8>> = synth::traffic(&rules.rules, 1500, mix, seed + 100)
            .iter()
            .map(|k| craft::roce_frame(k).unwrap())
            .collect();
        // Frames near no rule, and cut frames, for the default and malformed paths.
        let mut rng = synth::Rng::new(seed);
        for i in 0..200 {
            let mut f = frames[i].clone();
            f[30] ^= rng.next_u64() as u8;
            if i % 3 == 0 {
                f.truncate(20 + rng.below(40) as usize);
            }
            frames.push(f);
        }
        check_against_engine(&gw, &applier, &rules, seed, LinkType::Ethernet, &frames);
    }
}

/// Leaves longer than an inline leaf reference holds (1,023 entries): 1,200 rules that differ
/// only in their opcode, which no tree node cuts, so each tier is one leaf (the first of
/// 1,024 entries, named by its index; the second of 176, named inline). Every frame is decided
/// by the program exactly as by the native engine.
#[test]
fn long_leaves_agree_with_the_engine() {
    let gw = Gateway::new(Some(&region("long"))).unwrap();
    let mut applier = Applier::attach(gw.region_path());
    let mut text = String::new();
    let mut names = Vec::new();
    for i in 0..1200u32 {
        text.push_str(&format!(
            "policy p{i} {{ predicate = match(opcode = {}) action = {} }}\n",
            i % 0x15,
            if (i / 0x15) % 2 == 0 { "deny" } else { "allow" }
        ));
        names.push(format!("p{i}"));
    }
    text.push_str(&format!("apply({})\ndefault deny\n", names.join(", ")));
    let rules = compile(&parse(&text).unwrap()).unwrap();
    let tree = rdx_acl::classify::CutTree::new(rules.rules.clone());
    let longest = (0..tree.tier_count())
        .flat_map(|t| {
            let v = tree.tier_view(t);
            (0..v.leaf_count()).map(move |l| v.leaf(l).1)
        })
        .max()
        .unwrap();
    assert!(longest > 1023, "longest leaf {longest}");
    applier.apply(&rules, 15);
    let frames: Vec<Vec<u8>> = synth::traffic(&rules.rules, 600, synth::Mix::Uniform, 16)
        .iter()
        .map(|k| craft::roce_frame(k).unwrap())
        .collect();
    check_against_engine(&gw, &applier, &rules, 15, LinkType::Ethernet, &frames);
}

/// `n` rules that differ only in their opcode (so they share one leaf per tier).
fn opcode_only_rules(n: u32) -> RuleSet {
    let mut text = String::new();
    let mut names = Vec::new();
    for i in 0..n {
        text.push_str(&format!(
            "policy p{i} {{ predicate = match(opcode = {}) action = allow }}\n",
            i % 0x15
        ));
        names.push(format!("p{i}"));
    }
    text.push_str(&format!("apply({})\ndefault deny\n", names.join(", ")));
    compile(&parse(&text).unwrap()).unwrap()
}

/// A CNP frame (opcode 0x81): its opcode is past the compact entries' 64, so every entry
/// of a leaf it reaches needs the full rule check.
fn cnp_frame() -> Vec<u8> {
    let ep = craft::Endpoints {
        sip: "10.0.1.7".parse().unwrap(),
        dip: "10.0.1.105".parse().unwrap(),
        sport: 50000,
    };
    let bth = craft::Bth {
        opcode: 0x81,
        dest_qp: 0x42,
        psn: 0,
    };
    craft::roce(&ep, bth, &[], &[0; 16])
}

/// The worst case a policy can cost per frame is bounded when it is deployed: the longest
/// opcode-only leaf the bound accepts is decided within the budget even by a CNP frame
/// (every entry checked in full), and a longer one is refused with the reason. Deployed
/// anyway, such a leaf makes the run spend its budget: the frame is denied by the hook's
/// default and counted as budget-exhausted (the hook's failed runs, `rdx acl stats`).
#[test]
fn worst_case_frames_fit_the_budget_or_the_policy_is_refused() {
    use rdx_acl::enforce::{self, EnforceError};
    let gw = Gateway::new(Some(&region("budget"))).unwrap();
    let mut applier = Applier::attach(gw.region_path());
    let hook = gw.hook().unwrap();
    let frame = cnp_frame();
    // Compiled once; the first `n` rules are the policy of `n` rules.
    let all = opcode_only_rules(2500);
    let first = |n: u32| RuleSet {
        rules: all.rules[..n as usize].to_vec(),
        policy_names: all.policy_names[..n as usize].to_vec(),
        default: all.default,
    };
    let bound = |n: u32| {
        let tree = rdx_acl::classify::CutTree::new(first(n).rules);
        enforce::worst_case(&tree).instructions
    };
    // The largest accepted leaf, by bisection on the bound.
    let (mut lo, mut hi) = (1u32, 2500u32);
    while lo + 1 < hi {
        let mid = (lo + hi) / 2;
        if bound(mid) <= enforce::BUDGET {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    assert!(lo > 1000, "the bound accepts only {lo} opcode-only rules");
    let accepted = first(lo);
    applier.apply(&accepted, 21);
    let d = Gateway::decide(&hook, LinkType::Ethernet, &frame);
    assert_eq!(
        (d.generation, d.outcome.cause),
        (21, rdx_acl::enforce::OutcomeCause::Default),
        "a frame at the bound ({lo} rules) ran out of budget: the costs are too low"
    );
    let before = applier.budget_exhausted();

    let refused = all;
    let err = enforce::image(&refused).map(|_| ()).unwrap_err();
    assert!(matches!(err, EnforceError::OverBudget(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("budget of 2000000") && msg.contains("leaf of"),
        "{msg}"
    );
    applier.deploy_raw(&refused, 0, 22, |_| true, |_| ());
    let d = Gateway::decide(&hook, LinkType::Ethernet, &frame);
    assert_eq!(d.outcome.action, Action::Deny);
    assert_eq!(
        d.outcome.cause,
        rdx_acl::enforce::OutcomeCause::Unknown(u32::MAX),
        "{d:?}"
    );
    assert_eq!(applier.budget_exhausted(), before + 1);
}

/// A native InfiniBand CM message from LID `slid` to LID `dlid`, with a GRH when `gids` is
/// given.
fn ib_cm(
    slid: u16,
    dlid: u16,
    gids: Option<(u128, u128)>,
    kind: rdx_acl::field::CmType,
    local: u32,
    remote: u32,
    qpn: u32,
) -> Vec<u8> {
    let bth = craft::Bth {
        opcode: 0x64, // UD SEND_ONLY to QP1
        dest_qp: 1,
        psn: 0,
    };
    craft::infiniband(
        slid,
        dlid,
        gids,
        bth,
        &craft::deth(craft::GSI_QKEY, 1),
        &craft::cm_mad(kind, local, remote, qpn),
    )
}

/// A connection set up between LIDs 5 and 7 (no GRH) is not found by a third party whose GRH
/// names the GIDs `8000::5` and `8000::7`: its RTU and DREQ are of no known connection and
/// denied, in the program as in the engine.
#[test]
fn lid_connections_are_not_found_by_a_gid_of_the_same_bits() {
    use rdx_acl::field::CmType;
    let gw = Gateway::new(Some(&region("ib-collision"))).unwrap();
    let mut applier = Applier::attach(gw.region_path());
    let rules = compile(
        &parse(
            "policy orphan { predicate = match(type in {RTU, DREQ, DREP}) & !match(lQPN in [0, 0xffffff]) action = deny }\n\
             apply(orphan)\ndefault allow\n",
        )
        .unwrap(),
    )
    .unwrap();
    applier.apply(&rules, 5);
    let forged = Some(((1u128 << 127) | 5, (1u128 << 127) | 7));
    let frames = vec![
        ib_cm(5, 7, None, CmType::ConnectRequest, 7, 0, 0x100),
        ib_cm(7, 5, None, CmType::ConnectReply, 9, 7, 0x200),
        ib_cm(66, 7, forged, CmType::ReadyToUse, 7, 9, 0),
        ib_cm(66, 7, forged, CmType::DisconnectRequest, 7, 9, 0x200),
        ib_cm(5, 7, None, CmType::ReadyToUse, 7, 9, 0),
    ];
    let outcomes = check_against_engine(&gw, &applier, &rules, 5, LinkType::InfiniBand, &frames);
    let actions: Vec<Action> = outcomes.iter().map(|o| o.action).collect();
    use Action::{Allow, Deny};
    assert_eq!(actions, [Allow, Allow, Deny, Deny, Allow], "{outcomes:?}");
}

/// The program's connection table holds as many connections as the engine's: past 4,096
/// (the program's old size) both still create connections, and past the capacity both
/// count the REQ as table-full. A REQ retransmitted after the REP does not reset the
/// connection: the RTU after it finds both QPNs.
#[test]
fn cm_tables_fill_alike_and_retransmitted_reqs_keep_the_connection() {
    use rdx_acl::field::CmType;
    let gw = Gateway::new(Some(&region("cm-capacity"))).unwrap();
    let mut applier = Applier::attach(gw.region_path());
    let rules = compile(
        &parse(
            "policy orphan { predicate = match(type in {RTU, DREQ, DREP}) & !match(lQPN in [0, 0xffffff]) action = deny }\n\
             apply(orphan)\ndefault allow\n",
        )
        .unwrap(),
    )
    .unwrap();
    applier.apply(&rules, 6);
    let ep = |from: u32, to: u32| craft::Endpoints {
        sip: std::net::Ipv4Addr::from(0x0a00_0000 + from).into(),
        dip: std::net::Ipv4Addr::from(0x0a00_0000 + to).into(),
        sport: 4791,
    };
    let mad = |from: u32, to: u32, kind: CmType, local: u32, remote: u32, qpn: u32| {
        let bth = craft::Bth {
            opcode: 0x64,
            dest_qp: 1,
            psn: 0,
        };
        craft::roce(
            &ep(from, to),
            bth,
            &craft::deth(craft::GSI_QKEY, 1),
            &craft::cm_mad(kind, local, remote, qpn),
        )
    };
    let mut frames = vec![
        mad(1, 2, CmType::ConnectRequest, 7, 0, 0x100),
        mad(2, 1, CmType::ConnectReply, 9, 7, 0x200),
        mad(1, 2, CmType::ConnectRequest, 7, 0, 0x100),
        mad(1, 2, CmType::ReadyToUse, 7, 9, 0),
    ];
    let connections = CM_CAPACITY as u32 + 8;
    for c in 0..connections {
        frames.push(mad(3, 2, CmType::ConnectRequest, 1000 + c, 0, 0x300));
    }
    // An RTU for a connection past 4,096 (created by both), one past the capacity (by none).
    let (late, refused) = (4_500, connections - 1);
    frames.push(mad(2, 3, CmType::ConnectReply, 50, 1000 + late, 0x400));
    frames.push(mad(3, 2, CmType::ReadyToUse, 1000 + late, 50, 0));
    frames.push(mad(2, 3, CmType::ConnectReply, 51, 1000 + refused, 0x400));
    frames.push(mad(3, 2, CmType::ReadyToUse, 1000 + refused, 51, 0));
    let outcomes = check_against_engine(&gw, &applier, &rules, 6, LinkType::Ethernet, &frames);
    assert_eq!(outcomes[3].action, Action::Allow, "{:?}", outcomes[3]);
    let n = outcomes.len();
    assert_eq!(
        outcomes[n - 3].action,
        Action::Allow,
        "{:?}",
        outcomes[n - 3]
    );
    assert_eq!(
        outcomes[n - 1].action,
        Action::Deny,
        "{:?}",
        outcomes[n - 1]
    );
    // The first connection and CM_CAPACITY + 8 more: 9 REQs found the table full.
    assert_eq!(applier.stats().cm_table_full, 9);
}

/// RDMA in the shapes that used to pass as "not RDMA": behind legacy TPIDs and IPv6 AH the
/// rules see it (a `WRITE` deny denies it); RoCE v1, VXLAN, IPsec and unwalked IPv6
/// extension headers are decided by the policy's default. The program decides every shape
/// as the engine does.
#[test]
fn evasive_shapes_are_decided_by_the_rules_or_the_default() {
    use craft::evasion;
    let gw = Gateway::new(Some(&region("evasion"))).unwrap();
    let mut applier = Applier::attach(gw.region_path());
    let bth = craft::Bth {
        opcode: 0x0a, // RDMA_WRITE_ONLY
        dest_qp: 0x77,
        psn: 1,
    };
    let ep = |sip: &str, dip: &str| craft::Endpoints {
        sip: sip.parse().unwrap(),
        dip: dip.parse().unwrap(),
        sport: 49152,
    };
    let v4 = craft::roce(
        &ep("10.0.1.7", "10.0.1.105"),
        bth,
        &craft::reth(0x5000, 2, 8),
        &[0; 8],
    );
    let v6 = craft::roce(
        &ep("fe80::1", "fe80::2"),
        bth,
        &craft::reth(0x5000, 2, 8),
        &[0; 8],
    );
    let inspected = [
        evasion::tagged(&v4, 0x9100),
        evasion::tagged(&v4, 0x9200),
        evasion::tagged(&v4, 0x9300),
        evasion::ipv6_extension(&v6, 51, 16),
    ];
    let uninspected = [
        evasion::roce_v1(&v4),
        evasion::vxlan(&v4),
        evasion::ipv4_protocol(&v4, 50),
        evasion::ipv4_protocol(&v4, 51),
        evasion::ipv6_extension(&v6, 50, 8),
        evasion::ipv6_extension(&v6, 135, 8),
        evasion::ipv6_extension(&v6, 139, 16),
        evasion::ipv6_extension(&v6, 254, 8),
    ];
    let frames: Vec<Vec<u8>> = inspected.iter().chain(&uninspected).cloned().collect();
    for (generation, default) in [(7, "deny"), (8, "allow")] {
        let rules = compile(
            &parse(&format!(
                "policy no_writes {{ predicate = match(opcode in {{WRITE}}) action = deny }}\n\
                 apply(no_writes)\ndefault {default}\n"
            ))
            .unwrap(),
        )
        .unwrap();
        applier.apply(&rules, generation);
        let outcomes = check_against_engine(
            &gw,
            &applier,
            &rules,
            generation,
            LinkType::Ethernet,
            &frames,
        );
        for (i, o) in outcomes.iter().enumerate() {
            if i < inspected.len() {
                assert_eq!(
                    o.cause,
                    rdx_acl::enforce::OutcomeCause::Policy { policy: 0, rule: 0 },
                    "frame {i}"
                );
            } else {
                assert_eq!(
                    o.cause,
                    rdx_acl::enforce::OutcomeCause::Default,
                    "frame {i}"
                );
                let want = if default == "deny" {
                    Action::Deny
                } else {
                    Action::Allow
                };
                assert_eq!(o.action, want, "frame {i}");
            }
        }
    }
}

/// A decision slot a control plane never wrote (the maps start zeroed, and action 0 is
/// allow), and a rule index at or past the control block's rule count, deny: an image
/// inconsistent with its control block fails closed.
#[test]
fn unwritten_or_out_of_range_decisions_deny() {
    let gw = Gateway::new(Some(&region("decisions"))).unwrap();
    let mut applier = Applier::attach(gw.region_path());
    let rules = compile(
        &parse(
            "policy open { predicate = match(dQPN = 0x100) action = allow }
apply(open)
default deny
",
        )
        .unwrap(),
    )
    .unwrap();
    let ep = craft::Endpoints {
        sip: "10.0.1.7".parse().unwrap(),
        dip: "10.0.1.105".parse().unwrap(),
        sport: 50000,
    };
    let bth = craft::Bth {
        opcode: 0x0a, // RDMA_WRITE_ONLY
        dest_qp: 0x100,
        psn: 1,
    };
    let frame = craft::roce(&ep, bth, &craft::reth(0x1000, 1, 8), &[0; 8]);
    let hook = gw.hook().unwrap();

    // Consistent: the rule allows.
    applier.deploy_raw(&rules, 0, 1, |_| true, |_| ());
    let d = Gateway::decide(&hook, LinkType::Ethernet, &frame);
    assert_eq!(
        (d.generation, d.outcome.action),
        (1, Action::Allow),
        "{d:?}"
    );
    // Bank 1 never had its decisions written: the matching rule's slot is zero.
    applier.deploy_raw(
        &rules,
        1,
        2,
        |w| w.map != rdx_acl::enforce::DECISIONS_MAP,
        |_| (),
    );
    let d = Gateway::decide(&hook, LinkType::Ethernet, &frame);
    assert_eq!((d.generation, d.outcome.action), (2, Action::Deny), "{d:?}");
    // Everything written, but the control block counts no rule: the match is out of range.
    applier.deploy_raw(
        &rules,
        0,
        3,
        |_| true,
        |ctl| ctl[32..36].copy_from_slice(&0u32.to_le_bytes()),
    );
    let d = Gateway::decide(&hook, LinkType::Ethernet, &frame);
    assert_eq!((d.generation, d.outcome.action), (3, Action::Deny), "{d:?}");
}

/// Policies A and B of 100 rules each that disagree on every probe frame: under A, rule `i`
/// (`dQPN = i`) allows even QPNs; under B the rules come in the opposite order and allow odd
/// ones. A frame decided by half of each would carry one image's generation with the other's
/// rule index or verdict. `filler` synthetic rules follow the 100 in both, so that swapping
/// A and B is a 100-rule in-place update of a large classifier (the bank flip path).
fn consistent_update_policies(filler: usize) -> (RuleSet, RuleSet) {
    let policy = |reverse: bool, allow_even: bool| {
        let mut text = String::new();
        let mut names = Vec::new();
        let order: Vec<u32> = if reverse {
            (0..100).rev().collect()
        } else {
            (0..100).collect()
        };
        for i in order {
            let allow = (i % 2 == 0) == allow_even;
            text.push_str(&format!(
                "policy q{i} {{ predicate = match(dQPN = {}) & match(opcode in {{WRITE, READ}}) action = {} }}\n",
                0x100 + i,
                if allow { "allow" } else { "deny" }
            ));
            names.push(format!("q{i}"));
        }
        text.push_str(&format!("apply({})\ndefault deny\n", names.join(", ")));
        let mut set = compile(&parse(&text).unwrap()).unwrap();
        let base = set.rules.len() as u32;
        for (k, mut r) in synth::specific_rules(filler, 41).into_iter().enumerate() {
            r.priority = base + k as u32;
            r.policy = base + k as u32;
            set.rules.push(r);
            set.policy_names.push(format!("f{k}"));
        }
        set
    };
    (policy(false, true), policy(true, false))
}

#[test]
fn policy_updates_under_traffic_never_mix_two_rule_sets() {
    swaps_under_traffic("update", 0);
}

#[test]
fn updates_of_a_large_classifier_flip_banks_without_mixing_rule_sets() {
    swaps_under_traffic("update-big", BIG);
}

fn swaps_under_traffic(tag: &str, filler: usize) {
    let gw = Arc::new(Gateway::new(Some(&region(tag))).unwrap());
    let mut applier = Applier::attach(gw.region_path());
    let (a, b) = consistent_update_policies(filler);
    let (gen_a, gen_b) = (0xa, 0xb);
    let frames: Vec<Vec<u8>> = (0..100u32)
        .map(|i| {
            let ep = craft::Endpoints {
                sip: "10.0.1.7".parse().unwrap(),
                dip: "10.0.1.105".parse().unwrap(),
                sport: 50000,
            };
            let bth = craft::Bth {
                opcode: 0x0a, // RDMA_WRITE_ONLY
                dest_qp: 0x100 + i,
                psn: i,
            };
            craft::roce(&ep, bth, &craft::reth(0x1000, 1, 8), &[0; 8])
        })
        .collect();
    let oracle = |rules: &RuleSet| -> Vec<Outcome> {
        let mut e = Engine::new(rules.clone());
        frames
            .iter()
            .map(|f| Outcome::from(&e.process(LinkType::Ethernet, f)))
            .collect()
    };
    let (want_a, want_b) = (oracle(&a), oracle(&b));
    for (x, y) in want_a.iter().zip(&want_b) {
        assert_ne!(x, y, "the two policies must disagree on every probe");
    }
    applier.apply(&a, gen_a);

    let stop = Arc::new(AtomicBool::new(false));
    let decided = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..2)
        .map(|t| {
            let (gw, stop, decided) = (gw.clone(), stop.clone(), decided.clone());
            let frames = frames.clone();
            let (want_a, want_b) = (want_a.clone(), want_b.clone());
            std::thread::spawn(move || {
                let hook = gw.hook().unwrap();
                let mut seen_b = 0u64;
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let d = Gateway::decide(&hook, LinkType::Ethernet, &frames[i % 100]);
                    let want = match d.generation {
                        0xa => &want_a,
                        0xb => &want_b,
                        g => panic!("frame decided by unknown generation {g:#x}: {d:?}"),
                    };
                    assert_eq!(
                        d.outcome,
                        want[i % 100],
                        "frame {} gen {:#x}",
                        i % 100,
                        d.generation
                    );
                    seen_b += (d.generation == 0xb) as u64;
                    decided.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                seen_b
            })
        })
        .collect();

    let wait_for = |n: u64| {
        let start = Instant::now();
        let target = decided.load(Ordering::Relaxed) + n;
        while decided.load(Ordering::Relaxed) < target {
            assert!(start.elapsed() < Duration::from_secs(60), "workers stalled");
            std::thread::yield_now();
        }
    };
    wait_for(200);
    let mut times = Vec::new();
    for round in 0..6 {
        let (rules, generation) = if round % 2 == 0 {
            (&b, gen_b)
        } else {
            (&a, gen_a)
        };
        let (_, took) = applier.apply_timed(rules, generation);
        // Same length and default: the shadow tree is updated in place and only the records
        // the 100 rules touch (plus what the inactive bank missed) are written.
        assert!(took.in_place || filler == 0, "round {round}");
        times.push(took.visible());
        wait_for(200);
    }
    stop.store(true, Ordering::Relaxed);
    let seen_b: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(seen_b > 0, "no frame was decided under the new policy");
    times.sort();
    eprintln!(
        "100-rule policy swaps under traffic: {} frames decided, median write+publish {:?} (benchmark: cargo bench -p rdx-acl-gateway)",
        decided.load(Ordering::Relaxed),
        times[times.len() / 2]
    );
}

struct Process {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
    region: PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.region);
    }
}

impl Process {
    fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        l.trim().to_string()
    }

    fn ask(&mut self, cmd: &str) -> String {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
        self.line()
    }
}

#[test]
fn the_gateway_binary_decides_pcap_and_udp_frames_with_the_deployed_policy() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_acl-gateway"))
        .args(["--udp", "127.0.0.1:0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut p = Process {
        child,
        out,
        region: PathBuf::new(),
    };
    p.region = PathBuf::from(p.line().strip_prefix("region ").unwrap());
    let udp: std::net::SocketAddr = p.line().strip_prefix("udp ").unwrap().parse().unwrap();

    let mut applier = Applier::attach(&p.region);
    let set = api::load(&repo().join("tools/acl-traffic/policies/server.acl")).unwrap();
    let rules = compile(&set).unwrap();
    applier.apply(&rules, 7);

    let trace_path = repo().join("crates/acl/tests/data/attacks.pcap");
    let report = api::run_trace(rules.clone(), &pcap::read(&trace_path).unwrap());
    let c = &report.counters;
    let done = p.ask(&format!("pcap {}", trace_path.display()));
    assert!(
        done.starts_with(&format!(
            "done packets {} allowed {} denied {} ",
            c.packets, c.allowed, c.denied
        )),
        "{done}"
    );

    // The same frames through the socket (a fresh engine: CM state continues in the
    // gateway, so compare totals only against the program's own decision counts).
    let trace = pcap::read(&trace_path).unwrap();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    for f in &trace.packets {
        socket.send_to(f, udp).unwrap();
    }
    let start = Instant::now();
    let total = 2 * trace.packets.len();
    loop {
        let stats = p.ask("stats");
        let packets: usize = stats
            .split_whitespace()
            .nth(2)
            .and_then(|n| n.parse().ok())
            .unwrap();
        if packets == total {
            assert!(stats.contains(" failed_closed 0"), "{stats}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "UDP frames not all decided: {stats}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(applier.stats().packets, total as u64);
    assert_eq!(p.ask("bogus").split(' ').next(), Some("error"));
}
