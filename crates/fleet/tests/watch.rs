//! Rollback on fault with a real host: a one-hop chain (`rdx-test-host fleet --forward`) under
//! continuous traffic runs stamp_v1, the watcher marks it good, a faulty release
//! (stamp_fault, which exhausts its instruction budget on every run) is deployed, and the
//! watcher rolls the hook back to v1 from the failure counter it reads remotely. When the
//! deployer still holds the node's lease after publishing the faulty version, the watcher
//! waits for the lease and rolls back once it is given back.

mod common;

use common::chain::{Chain, Response};
use common::{extension, spawn_watcher};
use rdx_control::{create_codeflow, node::hook_status, AttachOptions, CodeFlow, Published};
use rdx_fleet::watch::{Event, Rollback};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// A one-hop chain running stamp_v1, and the control plane that deployed it (its lease
/// given back).
fn chain_on_v1(tag: &str) -> (Chain, CodeFlow, u32) {
    let chain = Chain::start(tag, 1, 100);
    let mut cf = create_codeflow(&chain.address(0), AttachOptions::default()).unwrap();
    let v1 = cf
        .deploy("on_request", &extension("stamp_v1"), Some("default"), None)
        .unwrap()
        .version;
    cf.release().unwrap();
    (chain, cf, v1)
}

fn deploy_fault(cf: &mut CodeFlow) -> Published {
    cf.deploy(
        "on_request",
        &extension("stamp_fault"),
        Some("default"),
        None,
    )
    .unwrap()
}

fn expect_good(rx: &Receiver<Event>, v1: u32) {
    match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
        Event::Good { version, .. } => assert_eq!(version, v1),
        other => panic!("{other:?}"),
    }
}

fn expect_rollback(rx: &Receiver<Event>, faulty: u32) -> Rollback {
    loop {
        match rx.recv_timeout(Duration::from_secs(10)).unwrap() {
            Event::RolledBack(r) => break r,
            Event::Good { version, .. } => assert_ne!(version, faulty),
            other => panic!("{other:?}"),
        }
    }
}

/// The hook runs v1 again, counted its failures, and every request got v1's stamp or,
/// while the faulty version ran, none (the hook's default); the last ones run v1 again.
fn check_after_rollback(cf: &CodeFlow, v1: u32, rollback: &Rollback, responses: &[Response]) {
    let status = hook_status(
        cf.transport(),
        &cf.view().info,
        cf.view().hook("on_request").unwrap().index,
    )
    .unwrap();
    assert_eq!(status.version, v1);
    assert!(status.failures >= rollback.window_failures && status.failures > 0);
    assert!(responses.iter().all(|r| r.stamps == 1 || r.stamps == 0));
    assert!(
        responses.iter().any(|r| r.stamps == 0),
        "the fault was seen"
    );
    assert!(responses.iter().rev().take(50).all(|r| r.stamps == 1));
}

#[test]
fn a_faulting_release_is_rolled_back_to_the_last_good_version() {
    let (mut chain, mut cf, v1) = chain_on_v1("watch");
    let address = chain.address(0);
    let traffic = chain.traffic(16);
    traffic.wait_for(100);
    let (watcher, rx) = spawn_watcher(&address, Duration::from_micros(500));
    expect_good(&rx, v1);
    let faulty = deploy_fault(&mut cf);
    let deployed_at = Instant::now();
    cf.release().unwrap();
    let rollback = expect_rollback(&rx, faulty.version);
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
    check_after_rollback(&cf, v1, &rollback, &responses);
}

/// The deployer keeps its lease for a while after publishing the faulty version (as a slow
/// or descheduled `rdx deploy` does between its publish and its release): the watcher sees
/// the failures but writes nothing under another control plane's lease, gives up on
/// nothing, and rolls back as soon as the lease is given back.
#[test]
fn a_rollback_waits_for_the_deployers_lease() {
    let (mut chain, mut cf, v1) = chain_on_v1("watch-lease");
    let address = chain.address(0);
    let index = cf.view().hook("on_request").unwrap().index;
    let traffic = chain.traffic(16);
    traffic.wait_for(100);
    let (watcher, rx) = spawn_watcher(&address, Duration::from_micros(500));
    expect_good(&rx, v1);
    let faulty = deploy_fault(&mut cf);
    // Held until the watcher has had every chance to judge the faulty version: 100 failed
    // runs (it judges from 2) and 500 ms of sampling every 0.5 ms.
    let held = Instant::now();
    loop {
        let s = hook_status(cf.transport(), &cf.view().info, index).unwrap();
        assert_eq!(s.version, faulty.version, "changed under our lease");
        if s.failures >= 100 && held.elapsed() >= Duration::from_millis(500) {
            break;
        }
        assert!(held.elapsed() < Duration::from_secs(20), "{s:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    match rx.try_recv() {
        Err(TryRecvError::Empty) => {}
        other => panic!("while the deployer held the lease the watcher reported {other:?}"),
    }
    cf.release().unwrap();
    let released = Instant::now();
    let rollback = expect_rollback(&rx, faulty.version);
    traffic.wait_for(100);
    let responses = traffic.stop();
    watcher.join().unwrap();

    assert_eq!(
        (rollback.from_version, rollback.to_version),
        (faulty.version, v1)
    );
    assert!(
        rollback
            .reason
            .contains("for another control plane's lease"),
        "the wait is reported: {}",
        rollback.reason
    );
    println!(
        "lease given back to rollback: {:.0} us ({})",
        (rollback.at.unwrap() - released).as_secs_f64() * 1e6,
        rollback.reason
    );
    check_after_rollback(&cf, v1, &rollback, &responses);
}
