//! Broadcast against real host processes (`rdx-test-host fleet`): a transactional update of several
//! nodes, refusals before anything is written, and recovery after the control plane is
//! killed (SIGKILL) at every phase.

mod common;

use rdx_fleet::{broadcast, recover, FleetError, Options, Plan, RecoverOptions};
use rdx_test_support::{HostProcess, ScratchDir, ShmPath};
use std::path::Path;

/// An `rdx-test-host fleet` declaring `hooks`, removed (process and region) on drop.
fn host(tag: &str, hooks: &[&str]) -> HostProcess {
    let region = ShmPath::new(&format!("fleet-test-{tag}"));
    HostProcess::start("fleet", region, hooks)
}

/// `(r0, out)` of one request.
fn request(host: &mut HostProcess, hook: &str) -> (u64, u64) {
    host.run(&format!("{hook} 0"))
}

fn state_dir(tag: &str) -> ScratchDir {
    ScratchDir::new(&format!("fleet-state-{tag}"))
}

/// One update of `on_request` on every host to `stamp_v{version}`, in `class`.
fn plan_text(hosts: &[&HostProcess], version: u32, class: Option<&str>) -> String {
    let addresses: Vec<String> = hosts.iter().map(|h| h.address()).collect();
    common::stamp_plan("n", &addresses, version, class.unwrap_or("default"), false)
}

fn plan_for(hosts: &[&HostProcess], version: u32, class: Option<&str>) -> Plan {
    Plan::from_yaml(&plan_text(hosts, version, class), Path::new(".")).unwrap()
}

#[test]
fn broadcast_updates_every_node_or_none() {
    let mut hosts: Vec<HostProcess> = (0..3)
        .map(|i| host(&format!("all{i}"), &["on_request"]))
        .collect();
    let dir = state_dir("all");
    let refs: Vec<&HostProcess> = hosts.iter().collect();
    let r1 = broadcast(&plan_for(&refs, 1, None), &Options::new(dir.path())).unwrap();
    assert_eq!(r1.updates.len(), 3);
    assert!(r1.updates.iter().all(|u| u.version == 1));
    for h in &mut hosts {
        assert_eq!(request(h, "on_request"), (1, 1));
    }
    let refs: Vec<&HostProcess> = hosts.iter().collect();
    let dry = Options {
        dry_run: true,
        ..Options::new(dir.path())
    };
    let d = broadcast(&plan_for(&refs, 2, None), &dry).unwrap();
    assert!(d.dry_run && d.intent_log.is_none());
    for h in &mut hosts {
        assert_eq!(request(h, "on_request"), (1, 1), "a dry run writes nothing");
    }
    let refs: Vec<&HostProcess> = hosts.iter().collect();
    // With a registry, every node's CodeFlow records what the broadcast published.
    let registry = rdx_control::registry::Registry::open(&dir.path().join("registry")).unwrap();
    let recording = Options {
        history: Some(registry.clone()),
        ..Options::new(dir.path())
    };
    let r2 = broadcast(&plan_for(&refs, 2, None), &recording).unwrap();
    assert!(r2.unrecorded.is_empty());
    for i in 0..3 {
        let history = registry
            .history(&format!("n{i}"), Some("on_request"))
            .unwrap();
        assert_eq!(history.len(), 1, "node n{i}");
        assert_eq!(
            (
                history[0].action,
                history[0].version,
                history[0].program.as_str()
            ),
            (rdx_control::registry::HistoryAction::Deploy, 2, "stamp_v2")
        );
    }
    assert!(r2
        .updates
        .iter()
        .all(|u| (u.previous_version, u.version) == (1, 2)));
    assert!(r2.timings.hold_us > 0.0 && r2.timings.hold_us < r2.timings.commit_us);
    for h in &mut hosts {
        assert_eq!(request(h, "on_request"), (2, 2));
    }
    assert!(rdx_fleet::intent::pending(dir.path()).unwrap().is_empty());
}

#[test]
fn a_hook_missing_on_one_node_or_a_rejecting_class_writes_nothing() {
    let mut a = host("miss-a", &["on_request"]);
    let b = host("miss-b", &["on_other"]);
    let dir = state_dir("miss");
    broadcast(&plan_for(&[&a], 1, None), &Options::new(dir.path())).unwrap();
    let before = common::active_word(&a.address());
    match broadcast(&plan_for(&[&a, &b], 2, None), &Options::new(dir.path())) {
        Err(FleetError::HookMissing { node, hook }) => {
            assert_eq!((node.as_str(), hook.as_str()), ("n1", "on_request"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(common::active_word(&a.address()), before);
    assert_eq!(request(&mut a, "on_request"), (1, 1));
    // The `tight` class allows no helpers; stamp_v2 looks up a map.
    match broadcast(
        &plan_for(&[&a], 2, Some("tight")),
        &Options::new(dir.path()),
    ) {
        Err(FleetError::Rejected { node, reason, .. }) => {
            assert_eq!(node, "n0");
            assert!(!reason.is_empty());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(request(&mut a, "on_request"), (1, 1));
    let cf = rdx_control::create_codeflow(&a.address(), Default::default()).unwrap();
    assert_eq!(cf.versions_readonly("on_request").unwrap().len(), 1);
}

/// Child side of the crash test: runs a broadcast that SIGKILLs itself at a phase.
#[test]
#[ignore = "run by killed_control_plane_is_recovered_at_every_phase"]
fn crash_child() {
    let plan = Plan::load(Path::new(&std::env::var("FLEET_PLAN").unwrap())).unwrap();
    let opts = Options {
        crash_at: Some(std::env::var("FLEET_CRASH").unwrap().parse().unwrap()),
        ..Options::new(std::env::var("FLEET_STATE").unwrap())
    };
    broadcast(&plan, &opts).unwrap();
    unreachable!("the broadcast should have killed this process");
}

#[test]
fn killed_control_plane_is_recovered_at_every_phase() {
    use rdx_region::layout::{active_version, ACTIVE_HOLD};
    for (phase, forward) in common::CRASH_PHASES {
        let mut hosts: Vec<HostProcess> = (0..3)
            .map(|i| host(&format!("crash-{phase}-{i}"), &["on_request"]))
            .collect();
        let dir = state_dir(&format!("crash-{phase}"));
        let refs: Vec<&HostProcess> = hosts.iter().collect();
        broadcast(&plan_for(&refs, 1, None), &Options::new(dir.path())).unwrap();
        let plan_path = dir.join("plan.yaml");
        let text = plan_text(&hosts.iter().collect::<Vec<_>>(), 2, None);
        std::fs::write(&plan_path, text).unwrap();
        let env = [
            ("FLEET_PLAN", plan_path.as_os_str()),
            ("FLEET_STATE", dir.path().as_os_str()),
        ];
        common::crash_at("crash_child", phase, &env);
        let words: Vec<u64> = hosts
            .iter()
            .map(|h| common::active_word(&h.address()))
            .collect();
        // (One hook, so one release level: after the first level nothing is held.)
        if ["held", "decided", "committed", "first-flip"].contains(&phase) {
            assert!(
                words.iter().any(|w| w & ACTIVE_HOLD != 0),
                "{phase}: a hook is held after the crash: {words:x?}"
            );
        }
        // Another control plane takes each lease meanwhile (and is refused on the held
        // hook): what the dead broadcast prepared must survive it for the roll forward.
        for h in &hosts {
            let mut cf = rdx_control::create_codeflow(&h.address(), Default::default()).unwrap();
            if ["held", "decided", "committed", "first-flip"].contains(&phase) {
                let ext = common::extension("stamp_v1");
                let e = cf
                    .deploy("on_request", &ext, Some("default"), None)
                    .unwrap_err();
                assert!(
                    matches!(e, rdx_control::ControlError::Held { .. }),
                    "{phase}: {e}"
                );
            } else {
                cf.mutual_excl().unwrap();
            }
            cf.release().unwrap();
        }
        let names: Vec<String> = (0..hosts.len()).map(|i| format!("n{i}")).collect();
        let addresses: Vec<String> = hosts.iter().map(|h| h.address()).collect();
        let nodes: Vec<(&str, &str)> = names
            .iter()
            .zip(&addresses)
            .map(|(n, a)| (n.as_str(), a.as_str()))
            .collect();
        common::recover_one(dir.path(), &nodes, phase, forward);
        let want = if forward { 2 } else { 1 };
        for h in &mut hosts {
            let w = common::active_word(&h.address());
            assert_eq!(w & ACTIVE_HOLD, 0, "{phase}: still held");
            assert_eq!(active_version(w), want, "{phase}");
            assert_eq!(
                request(h, "on_request"),
                (want as u64, want as u64),
                "{phase}"
            );
            let cf = rdx_control::create_codeflow(&h.address(), Default::default()).unwrap();
            let held: Vec<u32> = cf
                .versions_readonly("on_request")
                .unwrap()
                .iter()
                .map(|v| v.version)
                .collect();
            assert_eq!(
                held,
                if forward { vec![2, 1] } else { vec![1] },
                "{phase}: prepared-but-unpublished code freed, published code kept"
            );
        }
        assert!(
            recover(&RecoverOptions::new(dir.path()))
                .unwrap()
                .is_empty(),
            "{phase}"
        );
    }
}

#[test]
fn a_session_stays_attached_between_broadcasts_and_holds_the_leases() {
    let mut hosts: Vec<HostProcess> = (0..2)
        .map(|i| host(&format!("sess{i}"), &["on_request"]))
        .collect();
    let dir = state_dir("sess");
    let mut session = rdx_fleet::Session::new();
    for v in [1, 2, 1] {
        let refs: Vec<&HostProcess> = hosts.iter().collect();
        let r = session
            .broadcast(&plan_for(&refs, v, None), &Options::new(dir.path()))
            .unwrap();
        assert!(r.updates.iter().all(|u| u.program == format!("stamp_v{v}")));
        for h in &mut hosts {
            assert_eq!(request(h, "on_request"), (v as u64, v as u64));
        }
    }
    // Between broadcasts the session keeps every node's lease: another control plane is
    // refused before anything is written.
    let refs: Vec<&HostProcess> = hosts.iter().collect();
    match broadcast(&plan_for(&refs, 2, None), &Options::new(dir.path())) {
        Err(FleetError::Aborted(e)) => assert!(
            matches!(
                *e,
                FleetError::Node {
                    source: rdx_control::ControlError::LeaseHeld { .. },
                    ..
                }
            ),
            "{e}"
        ),
        other => panic!("expected the session's lease to refuse, got {other:?}"),
    }
    for h in &mut hosts {
        assert_eq!(
            request(h, "on_request"),
            (1, 1),
            "the refused broadcast wrote nothing"
        );
    }
    session.release().unwrap();
    let refs: Vec<&HostProcess> = hosts.iter().collect();
    broadcast(&plan_for(&refs, 2, None), &Options::new(dir.path())).unwrap();
    for h in &mut hosts {
        assert_eq!(request(h, "on_request"), (2, 2));
    }
    assert!(rdx_fleet::intent::pending(dir.path()).unwrap().is_empty());
}

/// The decision node's host dies with the broadcast's coordinator: with a copy of the
/// decision on the others (killed after the copies) recovery follows it; with none (killed
/// right after the commit point) it waits, and aborts only with `force`.
#[test]
fn without_the_decision_node_recovery_follows_a_copy_or_waits() {
    use rdx_region::layout::{active_version, ACTIVE_HOLD};
    for (phase, outcome) in [("committed", "rolled_forward"), ("decided", "undecided")] {
        let mut hosts: Vec<HostProcess> = (0..3)
            .map(|i| host(&format!("nodecider-{phase}-{i}"), &["on_request"]))
            .collect();
        let dir = state_dir(&format!("nodecider-{phase}"));
        let refs: Vec<&HostProcess> = hosts.iter().collect();
        broadcast(&plan_for(&refs, 1, None), &Options::new(dir.path())).unwrap();
        let plan_path = dir.join("plan.yaml");
        std::fs::write(&plan_path, plan_text(&refs, 2, None)).unwrap();
        let env = [
            ("FLEET_PLAN", plan_path.as_os_str()),
            ("FLEET_STATE", dir.path().as_os_str()),
        ];
        common::crash_at("crash_child", phase, &env);
        // The decision node (the plan's first) is gone with its region.
        drop(hosts.remove(0));
        let elsewhere = state_dir(&format!("nodecider-{phase}-elsewhere"));
        let nodes: Vec<rdx_fleet::plan::NodeSpec> = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| rdx_fleet::plan::NodeSpec {
                name: format!("n{}", i + 1),
                address: h.address(),
            })
            .collect();
        let mut opts = RecoverOptions {
            nodes,
            ..RecoverOptions::new(elsewhere.path())
        };
        let rec = recover(&opts).unwrap();
        assert_eq!(rec.len(), 1, "{phase}: {rec:?}");
        assert_eq!(rec[0].outcome, outcome, "{phase}: {:?}", rec[0].actions);
        let want = if outcome == "undecided" {
            for h in &hosts {
                let w = common::active_word(&h.address());
                assert_ne!(w & ACTIVE_HOLD, 0, "{phase}: nothing moves undecided");
            }
            opts.force = true;
            let rec = recover(&opts).unwrap();
            assert_eq!(
                rec[0].outcome, "rolled_back",
                "{phase}: {:?}",
                rec[0].actions
            );
            1
        } else {
            2
        };
        for h in &mut hosts {
            let w = common::active_word(&h.address());
            assert_eq!(w & ACTIVE_HOLD, 0, "{phase}: still held");
            assert_eq!(active_version(w), want, "{phase}");
            assert_eq!(request(h, "on_request"), (want as u64, want as u64));
        }
    }
}

/// Recovery leaves an update alone while its control plane (a process of this machine)
/// lives, and decides it once that process is gone.
#[test]
fn recovery_waits_for_a_live_coordinator() {
    use rdx_fleet::record::{self, Decision, NodeIntent};
    let h = host("live-coordinator", &["on_request"]);
    let mut coordinator = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let t = rdx_control::node::connect(&h.address()).unwrap();
    let incarnation = t
        .read_u64(rdx_region::layout::offsets::HEADER_INCARNATION)
        .unwrap();
    let intent = NodeIntent {
        id: "live-1".into(),
        decision: Decision::Prepared,
        settled: false,
        incarnation,
        coordinator: rdx_control::lease::holder_record(coordinator.id()),
        holder: rdx_control::lease::new_holder_id(),
        participants: 1,
        is_decider: true,
        node_name: "n0".into(),
        decider_address: h.address(),
        slots: Vec::new(),
    };
    record::write(t.as_ref(), "n0", &intent).unwrap();
    let elsewhere = state_dir("live-coordinator-elsewhere");
    let opts = RecoverOptions {
        nodes: vec![rdx_fleet::plan::NodeSpec {
            name: "n0".into(),
            address: h.address(),
        }],
        ..RecoverOptions::new(elsewhere.path())
    };
    let rec = recover(&opts).unwrap();
    assert_eq!(rec[0].outcome, "left_running", "{rec:?}");
    let now = record::read(t.as_ref()).unwrap().unwrap();
    assert_eq!((now.decision, now.settled), (Decision::Prepared, false));
    coordinator.kill().unwrap();
    coordinator.wait().unwrap();
    let rec = recover(&opts).unwrap();
    assert_eq!(rec[0].outcome, "rolled_back", "{rec:?}");
    let now = record::read(t.as_ref()).unwrap().unwrap();
    assert_eq!((now.decision, now.settled), (Decision::Aborted, true));
    assert!(recover(&opts).unwrap().is_empty());
}
