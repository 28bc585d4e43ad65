//! Rollback on fault with a real host: a one-hop chain (`fleet-host --forward`) under
//! continuous traffic runs stamp_v1, the watcher marks it good, a faulty release
//! (stamp_fault, which exhausts its instruction budget on every run) is deployed, and the
//! watcher rolls the hook back to v1 from the failure counter it reads remotely.

mod common;

use common::chain::Chain;
use common::{extension, spawn_watcher};
use rdx_control::{create_codeflow, ExtSpec};
use rdx_fleet::watch::Event;
use std::time::{Duration, Instant};

#[test]
fn a_faulting_release_is_rolled_back_to_the_last_good_version() {
    let mut chain = Chain::start("watch", 1, 100);
    let address = chain.address(0);
    let mut cf = create_codeflow(&address, ExtSpec::default()).unwrap();
    let v1 = cf
        .deploy("on_request", &extension("stamp_v1"), Some("default"), None)
        .unwrap()
        .version;
    cf.release().unwrap();

    let traffic = chain.traffic(16);
    traffic.wait_for(100);
    let (watcher, rx) = spawn_watcher(&address, Duration::from_micros(500));
    match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
        Event::Good { version, .. } => assert_eq!(version, v1),
        other => panic!("{other:?}"),
    }
    let faulty = cf
        .deploy(
            "on_request",
            &extension("stamp_fault"),
            Some("default"),
            None,
        )
        .unwrap();
    let deployed_at = Instant::now();
    cf.release().unwrap();
    let rollback = loop {
        match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
            Event::RolledBack(r) => break r,
            Event::Good { version, .. } => assert_ne!(version, faulty.version),
            other => panic!("{other:?}"),
        }
    };
    let rolled_back_at = rollback.at.unwrap();
    traffic.wait_for(100);
    let responses = traffic.stop();
    watcher.join().unwrap();

    assert_eq!(
        (rollback.from_version, rollback.to_version),
        (faulty.version, v1)
    );
    println!(
        "fault to rollback: {:.0} us from the deploy of the faulty version ({:.0} us from the \
         last clean sample, {:.0} us from detection); {} failures in {} runs",
        (rolled_back_at - deployed_at).as_secs_f64() * 1e6,
        rollback.fault_to_rollback_us,
        rollback.rollback_us,
        rollback.window_failures,
        rollback.window_runs
    );
    let status = rdx_control::node::hook_status(
        cf.transport(),
        &cf.view().info,
        cf.view().hook("on_request").unwrap().index,
    )
    .unwrap();
    assert_eq!(status.version, v1);
    assert!(status.failures >= rollback.window_failures && status.failures > 0);
    // Every request got v1's stamp or, while the faulty version ran, none (the hook's
    // default); the last ones run v1 again.
    assert!(responses.iter().all(|r| r.stamps == 1 || r.stamps == 0));
    assert!(
        responses.iter().any(|r| r.stamps == 0),
        "the fault was seen"
    );
    assert!(responses.iter().rev().take(50).all(|r| r.stamps == 1));
}
