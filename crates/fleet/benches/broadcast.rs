//! Broadcast to 16 host processes against a rolling update (one node at a time), in one
//! run: total time, prepare, the hold bubble, the flip, the intent log's fsyncs; and the
//! rolling update's inconsistency window (first node on the new version to last).
//!
//! Then a chain of four host processes (A -> B -> C -> D) under continuous traffic, each
//! hop stamping its version into the request: mixed-version requests, requests that waited
//! at a held hook and the bubble, for a broadcast that drains the flow A -> D, a broadcast
//! without the flow, and a rolling update (node after node), in the same run.
//!
//! Then `rdx watch`'s fault-to-rollback time and a live migration's time.
//!
//! `cargo bench -p rdx-fleet --bench broadcast`

#[path = "../tests/common/mod.rs"]
mod common;

use common::{chain, extension, rolling_update, spawn_watcher, stamp_plan};

use rdx_control::{create_codeflow, AttachOptions, Extension};
use rdx_fleet::{broadcast, Options, Plan, Session};
use rdx_test_support::{HostProcess, ScratchDir, ShmPath};
use std::path::Path;
use std::time::Instant;

/// An `rdx-test-host fleet` with `on_request` (process and region removed on drop).
fn host(tag: &str) -> HostProcess {
    let region = ShmPath::new(&format!("fleet-bench-{tag}"));
    HostProcess::start("fleet", region, &["on_request"])
}

const NODES: usize = 16;
const ROUNDS: usize = 10;

#[derive(Default)]
struct Phases {
    check: Vec<f64>,
    total: Vec<f64>,
    prep: Vec<f64>,
    hold: Vec<f64>,
    flip: Vec<f64>,
    log: Vec<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let hosts: Vec<HostProcess> = (0..NODES).map(|i| host(&i.to_string())).collect();
    let addresses: Vec<String> = hosts.iter().map(|h| h.address()).collect();
    let state = ScratchDir::new("fleet-bench-state");
    let plan = |v: u32| {
        let text = stamp_plan("n", &addresses, v, "default", false);
        Plan::from_yaml(&text, Path::new(".")).unwrap()
    };
    let opts = Options::new(state.path());
    broadcast(&plan(1), &opts).expect("warm-up broadcast");
    // The same broadcasts with every intent record fdatasync'ed (what a plan with a node on
    // another machine gets), then with records written to the page cache only (every node is
    // shared memory on this machine: the default). Alternating, so load drifts hit both.
    let machine = Options {
        durability: Some(rdx_fleet::intent::Durability::Machine),
        ..Options::new(state.path())
    };
    // Then the page-cache log from a control plane that stays attached between broadcasts
    // (a `Session`: leases, allocator tables and map names kept). It holds every node's
    // lease, so its rounds cannot interleave with one-shot control planes: they run after.
    let mut synced = Phases::default();
    let mut unsynced = Phases::default();
    let mut warm = Phases::default();
    let mut session = Session::new();
    for r in 0..3 * ROUNDS + 1 {
        let v = 1 + (r as u32 / 2 % 2);
        let rep = match r {
            r if r < 2 * ROUNDS && r % 2 == 0 => broadcast(&plan(v), &machine),
            r if r < 2 * ROUNDS => broadcast(&plan(v), &opts),
            _ => session.broadcast(&plan(v), &opts),
        }
        .expect("broadcast");
        let into = match r {
            r if r < 2 * ROUNDS && r % 2 == 0 => &mut synced,
            r if r < 2 * ROUNDS => &mut unsynced,
            r if r == 2 * ROUNDS => continue, // the session's first broadcast attaches
            _ => &mut warm,
        };
        into.total.push(rep.timings.commit_us);
        into.prep.push(rep.timings.prepare_us);
        into.check.push(rep.timings.check_us);
        into.hold.push(rep.timings.hold_us);
        into.flip.push(rep.timings.flip_us);
        into.log.push(rep.timings.log_us);
    }

    session.release().expect("release the session's leases");
    // Rolling update: attach, validate and compile first (as broadcast's check does), then
    // deploy node after node; the window is first publish to last publish.
    let exts: Vec<Extension> = ["stamp_v1", "stamp_v2"].map(extension).into();
    let mut cfs: Vec<_> = addresses
        .iter()
        .map(|a| create_codeflow(a, AttachOptions::default()).unwrap())
        .collect();
    let mut window = vec![];
    for r in 0..ROUNDS {
        let ext = &exts[r % 2];
        window.push(rolling_update(&mut cfs, ext).as_secs_f64() * 1e6);
    }
    for cf in &mut cfs {
        cf.release().unwrap();
    }

    for (what, p) in [
        ("intent records fdatasync'ed (durability: machine)", &synced),
        (
            "intent records in the page cache (durability: process, the shm default)",
            &unsynced,
        ),
        (
            "page-cache log, control plane attached between broadcasts (Session)",
            &warm,
        ),
    ] {
        println!("broadcast to {NODES} host processes (shm), {what}, median of {ROUNDS}:");
        for (row, samples) in [
            (
                "check (attach, verify, compile; before the total)",
                &p.check,
            ),
            ("total (prepare..release) ", &p.total),
            ("prepare                  ", &p.prep),
            ("hold bubble              ", &p.hold),
            ("flip (inside the bubble) ", &p.flip),
            ("intent log writes        ", &p.log),
        ] {
            println!("  {row} {:9.1} us", median(samples.clone()));
        }
    }
    println!(
        "ratio: one-shot / session total (page-cache log) = {:.1}x",
        median(unsynced.total.clone()) / median(warm.total.clone()).max(1e-3)
    );
    let flip = unsynced.flip.clone();
    println!("rolling update, node after node, median of {ROUNDS}:");
    println!(
        "  inconsistency window      {:9.1} us (first node new .. last node new)",
        median(window.clone())
    );
    println!(
        "ratio: rolling window / broadcast flip = {:.1}x",
        median(window) / median(flip).max(1e-3)
    );
    drop(hosts);
    chain_phase(state.path(), &exts);
    watch_phase();
    migrate_phase(state.path(), &exts[0]);
}

const WATCH_ROUNDS: usize = 5;

/// `rdx watch`'s fault-to-rollback time: a host under continuous traffic runs stamp_v1, a
/// faulty release (budget exhausted on every run) is deployed, the watcher (polling every
/// 200 us) rolls it back.
fn watch_phase() {
    use rdx_fleet::watch::Event;
    let mut c = chain::Chain::start("bench-watch", 1, 100);
    let address = c.address(0);
    let (good, faulty) = (extension("stamp_v1"), extension("stamp_fault"));
    let mut cf = create_codeflow(&address, AttachOptions::default()).unwrap();
    cf.deploy("on_request", &good, Some("default"), None)
        .unwrap();
    cf.release().unwrap();
    let traffic = c.traffic(16);
    let (mut from_deploy, mut bound, mut detect) = (vec![], vec![], vec![]);
    for _ in 0..WATCH_ROUNDS {
        traffic.wait_for(100);
        let (watcher, rx) = spawn_watcher(&address, std::time::Duration::from_micros(200));
        assert!(matches!(rx.recv().unwrap(), Event::Good { .. }));
        cf.deploy("on_request", &faulty, Some("default"), None)
            .unwrap();
        let deployed = Instant::now();
        cf.release().unwrap();
        let r = loop {
            if let Event::RolledBack(r) = rx.recv().unwrap() {
                break r;
            }
        };
        watcher.join().unwrap();
        from_deploy.push((r.at.unwrap() - deployed).as_secs_f64() * 1e6);
        bound.push(r.fault_to_rollback_us);
        detect.push(r.rollback_us);
    }
    traffic.stop();
    println!(
        "rdx watch, faulty release under traffic, polling every 200 us, median of {WATCH_ROUNDS}:"
    );
    println!(
        "  deploy of the faulty version .. rollback done   {:9.1} us",
        median(from_deploy)
    );
    println!(
        "  last clean sample .. rollback done             {:9.1} us",
        median(bound)
    );
    println!(
        "  threshold crossed .. rollback done             {:9.1} us",
        median(detect)
    );
}

const HOPS: usize = 4;
const CHAIN_ROUNDS: usize = 6;

/// Broadcast (with and without draining the flow) against a rolling update on a chain of
/// four hosts under continuous traffic.
fn chain_phase(state: &Path, exts: &[Extension]) {
    let mut c = chain::Chain::start("bench", HOPS, 2000);
    let addresses: Vec<String> = (0..HOPS).map(|i| c.address(i)).collect();
    let plan = |v: u32, flow: bool| {
        let text = stamp_plan("h", &addresses, v, "default", flow);
        Plan::from_yaml(&text, Path::new(".")).unwrap()
    };
    let opts = Options::new(state);
    broadcast(&plan(1, false), &opts).expect("chain warm-up");
    let mut version = 1;
    let mut next = || {
        version = 3 - version;
        version
    };
    struct Row {
        requests: usize,
        mixed: usize,
        waited: usize,
        bubble: Vec<f64>,
        drain: Vec<f64>,
        window: Vec<f64>,
    }
    let mut run = |kind: &str| -> Row {
        let mut row = Row {
            requests: 0,
            mixed: 0,
            waited: 0,
            bubble: vec![],
            drain: vec![],
            window: vec![],
        };
        for _ in 0..CHAIN_ROUNDS {
            let v = next();
            let traffic = c.traffic(64);
            traffic.wait_for(200);
            match kind {
                "rolling" => {
                    let ext = &exts[v as usize - 1];
                    let mut cfs: Vec<_> = addresses
                        .iter()
                        .map(|a| create_codeflow(a, AttachOptions::default()).unwrap())
                        .collect();
                    row.window
                        .push(rolling_update(&mut cfs, ext).as_secs_f64() * 1e6);
                    for cf in &mut cfs {
                        cf.release().unwrap();
                    }
                }
                _ => {
                    let rep = broadcast(&plan(v, kind == "drain"), &opts).expect("broadcast");
                    row.bubble.push(rep.timings.hold_us);
                    row.drain.push(rep.timings.drain_us);
                }
            }
            traffic.wait_for(200);
            let t = chain::tally(&traffic.stop(), HOPS);
            row.requests += t.requests;
            row.mixed += t.mixed;
            row.waited += t.waited;
        }
        row
    };
    let drained = run("drain");
    let undrained = run("no-drain");
    let rolling = run("rolling");
    println!(
        "chain of {HOPS} hosts under continuous traffic (64 requests in flight), \
         {CHAIN_ROUNDS} updates each:"
    );
    println!(
        "  broadcast, flow A->D drained  {:6} requests, {:4} mixed, {:3} waited at a held hook; \
         bubble {:.0} us (drain {:.0} us), median",
        drained.requests,
        drained.mixed,
        drained.waited,
        median(drained.bubble),
        median(drained.drain)
    );
    println!(
        "  broadcast, no flow declared   {:6} requests, {:4} mixed, {:3} waited at a held hook; \
         bubble {:.0} us, median",
        undrained.requests,
        undrained.mixed,
        undrained.waited,
        median(undrained.bubble)
    );
    println!(
        "  rolling update, A then B..D   {:6} requests, {:4} mixed; inconsistency window \
         {:.0} us, median",
        rolling.requests,
        rolling.mixed,
        median(rolling.window)
    );
}

const MIGRATE_ROUNDS: usize = 6;

/// Live migration of stamp_v1 and its `hits` map between two hosts, back and forth.
fn migrate_phase(state: &Path, ext: &Extension) {
    use rdx_fleet::migrate::migrate;
    use rdx_fleet::plan::NodeSpec;
    let hosts: Vec<(HostProcess, NodeSpec)> = ["s", "t"]
        .iter()
        .map(|name| {
            let h = host(&format!("mig-{name}"));
            let node = NodeSpec {
                name: name.to_string(),
                address: h.address(),
            };
            (h, node)
        })
        .collect();
    let mut cf = create_codeflow(&hosts[0].1.address, AttachOptions::default()).unwrap();
    cf.deploy("on_request", ext, Some("default"), None).unwrap();
    cf.release().unwrap();
    let opts = Options::new(state);
    let (mut total, mut freeze, mut copy) = (vec![], vec![], vec![]);
    for r in 0..MIGRATE_ROUNDS {
        let (from, to) = (&hosts[r % 2].1, &hosts[1 - r % 2].1);
        let rep = migrate(from, to, "on_request", ext, Some("default"), &opts).expect("migrate");
        total.push(rep.timings.total_us);
        freeze.push(rep.timings.freeze_us);
        copy.push(rep.timings.copy_us);
    }
    println!(
        "live migration of stamp_v1 and its map between two hosts, median of {MIGRATE_ROUNDS}:"
    );
    println!("  total (prepare..release)  {:9.1} us", median(total));
    println!("  source frozen (bubble)    {:9.1} us", median(freeze));
    println!("  map copy, inside it       {:9.1} us", median(copy));
}
