//! The attack scenarios of tools/acl-traffic/gen.py against the policies in
//! tools/acl-traffic/policies/: every attack packet is denied, every benign one allowed.

use std::path::{Path, PathBuf};
use std::process::Command;

use rdx_acl::api;
use rdx_acl::engine::Cause;
use rdx_acl::packet::MalformedReason;
use rdx_acl::policy::Action;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn policy(name: &str) -> PathBuf {
    repo().join("tools/acl-traffic/policies").join(name)
}

struct Label {
    attack: bool,
    scenario: String,
    what: String,
}

fn labels(path: &Path) -> Vec<Label> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let mut parts = l.splitn(4, ' ');
            let _index = parts.next().unwrap();
            let kind = parts.next().unwrap();
            Label {
                attack: kind == "attack",
                scenario: parts.next().unwrap().to_owned(),
                what: parts.next().unwrap_or("").to_owned(),
            }
        })
        .collect()
}

fn check_trace(policy_file: &str, trace: &str) -> api::TestReport {
    let report = api::test(&policy(policy_file), &data(&format!("{trace}.pcap"))).unwrap();
    let labels = labels(&data(&format!("{trace}.labels")));
    assert_eq!(report.verdicts.len(), labels.len());
    let mut failures = Vec::new();
    for (v, l) in report.verdicts.iter().zip(&labels) {
        let want = if l.attack {
            Action::Deny
        } else {
            Action::Allow
        };
        if v.action != want {
            failures.push(format!(
                "packet {} ({} {}: {}) got {} by {}",
                v.index,
                if l.attack { "attack" } else { "benign" },
                l.scenario,
                l.what,
                v.action,
                v.reason
            ));
        }
        if l.scenario == "malformed" {
            assert!(
                matches!(v.cause, Cause::Malformed(_)),
                "packet {} should be malformed: {}",
                v.index,
                v.reason
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    report
}

#[test]
fn roce_attacks_are_denied_and_benign_traffic_allowed() {
    let report = check_trace("server.acl", "attacks");
    let labels = labels(&data("attacks.labels"));
    for scenario in [
        "atomic-exhaustion",
        "connect-exhaustion",
        "fraudulent-disconnect",
        "mr-injection",
        "mr-unauthorised",
        "malformed",
    ] {
        assert!(
            labels.iter().any(|l| l.scenario == scenario && l.attack),
            "trace lacks {scenario}"
        );
    }
    let c = &report.counters;
    // The frame cut inside the RETH no longer holds what its IP header claims.
    assert_eq!(c.malformed[MalformedReason::BadIpHeader as usize], 1);
    assert_eq!(c.malformed[MalformedReason::BadUdpLength as usize], 1);
    assert_eq!(c.malformed[MalformedReason::UnknownOpcode as usize], 1);
    assert_eq!(c.allowed + c.denied, c.packets);
    // Two connections created, B's removed by its DREP; the flood left nothing behind.
    assert_eq!(report.cm.created, 2);
    assert_eq!(report.cm.removed, 1);
    let text = report.to_string();
    assert!(text.contains("policy.cm_connect_others"), "{text}");
}

#[test]
fn infiniband_attacks_are_denied_and_benign_traffic_allowed() {
    let report = check_trace("ib.acl", "ib");
    assert_eq!(report.counters.malformed_total(), 1);
}

#[test]
fn the_policies_check_cleanly() {
    for f in ["server.acl", "ib.acl"] {
        let r = api::check(&policy(f)).unwrap();
        assert!(r.set.warnings.is_empty(), "{f}: {:?}", r.set.warnings);
    }
}

/// The committed traces are exactly what the generator writes (when scapy is installed;
/// Debian package python3-scapy).
#[test]
fn committed_traces_match_the_generator() {
    let python = ["/usr/bin/python3", "python3"].into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import scapy.contrib.roce"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let Some(python) = python else {
        eprintln!("scapy not installed: skipping regeneration (committed traces still tested)");
        return;
    };
    let out = std::env::temp_dir().join(format!("rdx-acl-gen-{}", std::process::id()));
    let status = Command::new(python)
        .arg(repo().join("tools/acl-traffic/gen.py"))
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    for f in ["attacks.pcap", "attacks.labels", "ib.pcap", "ib.labels"] {
        let fresh = std::fs::read(out.join(f)).unwrap();
        let committed = std::fs::read(data(f)).unwrap();
        assert!(fresh == committed, "{f} differs from gen.py's output: regenerate with tools/acl-traffic/gen.py crates/acl/tests/data");
    }
    std::fs::remove_dir_all(&out).unwrap();
}

/// The shipped server policy's orphan check per message type: a stranger's REP for a
/// connection nobody requested is denied (its lQPN is its own, so the check looks at the
/// table's dQPN), and the server's REJ of a client's REQ, before any REP, is allowed (the
/// server has no QPN in the table yet; the client's is there).
#[test]
fn server_policy_denies_a_strangers_rep_and_allows_the_servers_early_rej() {
    use rdx_acl::craft::{self, Bth, Endpoints};
    use rdx_acl::field::CmType;
    use rdx_acl::packet::LinkType;
    let rules = rdx_acl::compile::compile(&api::load(&policy("server.acl")).unwrap()).unwrap();
    let mad = |from: &str, to: &str, kind: CmType, local: u32, remote: u32, qpn: u32| {
        let ep = Endpoints {
            sip: from.parse().unwrap(),
            dip: to.parse().unwrap(),
            sport: 4791,
        };
        let bth = Bth {
            opcode: 0x64,
            dest_qp: 1,
            psn: 0,
        };
        craft::roce(
            &ep,
            bth,
            &craft::deth(craft::GSI_QKEY, 1),
            &craft::cm_mad(kind, local, remote, qpn),
        )
    };
    let mut e = rdx_acl::engine::Engine::new(rules);
    let (server, client) = ("10.0.0.10", "10.0.1.1");
    let rep = mad("10.0.1.66", server, CmType::ConnectReply, 5, 77, 0x900);
    assert_eq!(e.process(LinkType::Ethernet, &rep).action, Action::Deny);
    let req = mad(client, server, CmType::ConnectRequest, 7, 0, 0x100);
    assert_eq!(e.process(LinkType::Ethernet, &req).action, Action::Allow);
    let rej = mad(server, client, CmType::ConnectReject, 9, 7, 0);
    assert_eq!(e.process(LinkType::Ethernet, &rej).action, Action::Allow);
}
