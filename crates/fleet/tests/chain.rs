//! Consistency across a chain of four host processes (A -> B -> C -> D) under continuous
//! traffic: each hop stamps its extension's version into the request, so a request that
//! met the old version at one hop and the new one at another is visible in its stamps.
//!
//! A broadcast whose plan declares the flow A -> D (hold A, drain, flip all, release) must
//! produce no mixed request. A rolling update (node after node, the plain deploy path) is
//! run on the same chain under the same traffic and its mixed requests are reported.

mod common;

use common::chain::{tally, Chain};
use common::{extension, rolling_update, stamp_plan};
use rdx_control::{create_codeflow, AttachOptions};
use rdx_fleet::{broadcast, Options, Plan};
use rdx_test_support::ScratchDir;
use std::path::Path;

const HOPS: usize = 4;
/// Requests kept in flight by the traffic generator.
const IN_FLIGHT: u64 = 64;
/// Responses awaited before and after an update. Up to `IN_FLIGHT` of those counted after
/// it can still be old ones that left the last hook before the flip but reached the
/// harness after the update returned, so each version is only guaranteed
/// `WINDOW - IN_FLIGHT` responses.
const WINDOW: u64 = 300;

fn plan(chain: &Chain, version: u32, flow: bool) -> Plan {
    let addresses: Vec<String> = (0..HOPS).map(|i| chain.address(i)).collect();
    let text = stamp_plan("h", &addresses, version, "default", flow);
    Plan::from_yaml(&text, Path::new(".")).unwrap()
}

fn state_dir(tag: &str) -> ScratchDir {
    ScratchDir::new(&format!("fleet-chain-{tag}"))
}

#[test]
fn broadcast_leaves_no_mixed_request_where_a_rolling_update_does_not_promise_it() {
    // A generous hold timeout: on a loaded 2-core machine the drain may take milliseconds,
    // and a caller that gave up on the hold would run the old version at A.
    let mut chain = Chain::start("consistency", HOPS, 2000);
    let dir = state_dir("consistency");
    broadcast(&plan(&chain, 1, false), &Options::new(dir.path())).unwrap();
    let v2 = plan(&chain, 2, true);

    let traffic = chain.traffic(IN_FLIGHT);
    traffic.wait_for(WINDOW);
    let report = broadcast(&v2, &Options::new(dir.path())).unwrap();
    traffic.wait_for(WINDOW);
    let responses = traffic.stop();
    let t = tally(&responses, HOPS);
    println!(
        "broadcast under traffic: {} requests, {} mixed, {} waited in the bubble \
         (bubble {:.0} us, drain {:.0} us); stamps {:?}",
        t.requests, t.mixed, t.waited, report.timings.hold_us, report.timings.drain_us, t.by_stamps
    );
    assert_eq!(t.mixed, 0, "mixed-version requests under a broadcast");
    assert!(
        t.by_stamps
            .get(&1111)
            .is_some_and(|&n| n as u64 >= WINDOW - IN_FLIGHT)
            && t.by_stamps
                .get(&2222)
                .is_some_and(|&n| n as u64 >= WINDOW - IN_FLIGHT),
        "traffic ran before and after the update: {:?}",
        t.by_stamps
    );
    // Requests in arrival order: every old one before every new one.
    let first_new = responses.iter().position(|r| r.stamps == 2222).unwrap();
    assert!(responses[first_new..].iter().all(|r| r.stamps == 2222));

    // Rolling update back to v1, node after node, every node compiled before the first deploy.
    let ext = extension("stamp_v1");
    let mut cfs: Vec<_> = (0..HOPS)
        .map(|i| create_codeflow(&chain.address(i), AttachOptions::default()).unwrap())
        .collect();
    let traffic = chain.traffic(IN_FLIGHT);
    traffic.wait_for(WINDOW);
    rolling_update(&mut cfs, &ext);
    traffic.wait_for(WINDOW);
    let t = tally(&traffic.stop(), HOPS);
    println!(
        "rolling update under traffic: {} requests, {} mixed; stamps {:?}",
        t.requests, t.mixed, t.by_stamps
    );
    assert!(t
        .by_stamps
        .get(&1111)
        .is_some_and(|&n| n as u64 >= WINDOW - IN_FLIGHT));
    for cf in &mut cfs {
        cf.release().unwrap();
    }
}

#[test]
fn a_flow_that_never_drains_aborts_the_broadcast_with_nothing_visible() {
    // The exit hop's extension was attached after traffic had run through the entry, so
    // its run counter never catches up: the drain gives up and nothing changes anywhere.
    let mut chain = Chain::start("nodrain", HOPS, 200);
    let dir = state_dir("nodrain");
    let first_three = {
        let mut p = plan(&chain, 1, false);
        p.nodes.truncate(HOPS - 1);
        p
    };
    broadcast(&first_three, &Options::new(dir.path())).unwrap();
    let traffic = chain.traffic(8);
    traffic.wait_for(50);
    let before = traffic.stop();
    assert!(
        before.iter().all(|r| r.stamps == 111),
        "the exit hop runs nothing yet"
    );
    let mut last = plan(&chain, 1, false);
    last.nodes.drain(..HOPS - 1);
    broadcast(&last, &Options::new(dir.path())).unwrap();
    match broadcast(&plan(&chain, 2, true), &Options::new(dir.path())) {
        Err(rdx_fleet::FleetError::Aborted(e)) => assert!(
            matches!(*e, rdx_fleet::FleetError::DrainTimeout { .. }),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
    let traffic = chain.traffic(8);
    traffic.wait_for(50);
    let after = traffic.stop();
    assert!(
        after.iter().all(|r| r.stamps == 1111),
        "nothing new visible"
    );
}
