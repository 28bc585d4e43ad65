//! The ACL as an rdx extension, measured in one run against its native baselines:
//!
//! - per-frame cost at the gateway's `acl_packet` hook (bpf/acl/enforce.c, verified,
//!   JIT-compiled and deployed by the control plane) against the native pipeline of rdx-acl
//!   (parse, CM state, cut-tree classifier) and against native parsing plus the linear
//!   scan (the algorithm the program runs), on synthetic rule sets and traffic;
//! - the time to replace a 100-rule policy by another (write code and rule section, then the
//!   publishing compare-and-swap), with a thread deciding frames meanwhile.
//!
//! `cargo bench -p rdx-acl-gateway --bench enforce`

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdx_acl::classify::{Classifier, LinearScan};
use rdx_acl::compile::{compile, RuleSet};
use rdx_acl::engine::Engine;
use rdx_acl::packet::{self, LinkType, Parsed};
use rdx_acl::policy::{parse, Action};
use rdx_acl::rule::PacketKey;
use rdx_acl::{craft, synth};
use rdx_acl_gateway::Gateway;
use support::Applier;

const FRAMES: usize = 4000;

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

/// Runs `f` on every frame: Mpps of the best of three passes, then p50/p99 of per-frame times
/// (clock pairs, their own median cost subtracted).
fn measure(name: &str, frames: &[Vec<u8>], mut f: impl FnMut(&[u8]) -> bool) {
    let mut sink = 0u64;
    for fr in frames.iter().take(200) {
        sink += f(fr) as u64;
    }
    // Best of three passes: the machine is shared, and the best pass is the least disturbed.
    let mut mpps: f64 = 0.0;
    for _ in 0..3 {
        let t = Instant::now();
        for fr in frames {
            sink += f(fr) as u64;
        }
        mpps = mpps.max(frames.len() as f64 / t.elapsed().as_secs_f64() / 1e6);
    }
    let mut clock = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        clock.push(t.elapsed().as_nanos() as u64);
    }
    clock.sort_unstable();
    let overhead = clock[clock.len() / 2];
    let mut lat: Vec<u64> = frames
        .iter()
        .map(|fr| {
            let t = Instant::now();
            sink += f(fr) as u64;
            (t.elapsed().as_nanos() as u64).saturating_sub(overhead)
        })
        .collect();
    lat.sort_unstable();
    println!(
        "  {name:<44} {mpps:>8.3} Mpps  p50 {:>8} ns  p99 {:>8} ns",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99)
    );
    std::hint::black_box(sink);
}

fn synthetic(n: usize, seed: u64) -> RuleSet {
    let rules = synth::rules(n, seed);
    RuleSet {
        policy_names: (0..rules.len()).map(|i| format!("r{i}")).collect(),
        rules,
        default: Action::Deny,
    }
}

fn per_frame(gw: &Gateway, applier: &mut Applier) {
    for (n, seed) in [(100usize, 21u64), (2048, 22)] {
        let rules = synthetic(n, seed);
        applier.apply(&rules, seed);
        for (mix_name, mix) in [
            ("uniform", synth::Mix::Uniform),
            (
                "skewed (80% on 64 flows)",
                synth::Mix::Skewed {
                    hot_pct: 80,
                    flows: 64,
                },
            ),
        ] {
            let frames: Vec<Vec<u8>> = synth::traffic(&rules.rules, FRAMES, mix, seed + 1)
                .iter()
                .map(|k| craft::roce_frame(k).expect("RoCEv2 data frame"))
                .collect();
            println!("{n} rules, {FRAMES} frames, {mix_name}:");
            let hook = gw.hook().unwrap();
            measure("rdx extension at the hook (eBPF, JIT)", &frames, |f| {
                Gateway::decide(&hook, LinkType::Ethernet, f).outcome.action == Action::Allow
            });
            let mut engine = Engine::new(rules.clone());
            measure("native engine (cut tree)", &frames, |f| {
                engine.process(LinkType::Ethernet, f).action == Action::Allow
            });
            let mut cached = Engine::new(rules.clone()).with_flow_cache(1024);
            measure("native engine + hot-flow table (1024)", &frames, |f| {
                cached.process(LinkType::Ethernet, f).action == Action::Allow
            });
            let scan = LinearScan::new(&rules.rules);
            measure("native parse + linear scan", &frames, |f| {
                let Ok(Parsed::Rdma(info)) = packet::parse(LinkType::Ethernet, f) else {
                    return false;
                };
                rules.action_of(scan.classify(&PacketKey::from_packet(&info))) == Action::Allow
            });
        }
    }
}

fn hundred_rules(offset: u32) -> RuleSet {
    let mut text = String::new();
    let mut names = Vec::new();
    for i in 0..100u32 {
        text.push_str(&format!(
            "policy p{i} {{ predicate = match(sip = 10.{}.{}.0/24) & match(dQPN = {}) & match(opcode in {{WRITE, READ}}) action = {} }}\n",
            (i + offset) / 256,
            (i + offset) % 256,
            0x100 + i + offset,
            if i % 2 == 0 { "allow" } else { "deny" }
        ));
        names.push(format!("p{i}"));
    }
    text.push_str(&format!("apply({})\ndefault deny\n", names.join(", ")));
    compile(&parse(&text).unwrap()).unwrap()
}

fn update(gw: &Arc<Gateway>, applier: &mut Applier) {
    let (a, b) = (hundred_rules(0), hundred_rules(1000));
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (gw, stop) = (gw.clone(), stop.clone());
        let frame = craft::roce_frame(&synth::traffic(&a.rules, 1, synth::Mix::Uniform, 5)[0])
            .expect("frame");
        std::thread::spawn(move || {
            let hook = gw.hook().unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                Gateway::decide(&hook, LinkType::Ethernet, &frame);
                n += 1;
            }
            n
        })
    };
    let compiled = applier.compiled().clone();
    let rounds = 30;
    let mut total = Vec::new();
    let mut publish = Vec::new();
    for round in 0..rounds {
        let rules = if round % 2 == 0 { &b } else { &a };
        let ext = applier.extension(rules, round as u64 + 1);
        let t = Instant::now();
        let prepared = applier
            .cf
            .prepare_prog(rdx_acl::enforce::HOOK, &ext, &compiled)
            .unwrap();
        let tp = Instant::now();
        applier.cf.tx(vec![prepared]).unwrap();
        publish.push(tp.elapsed());
        total.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    let decided = worker.join().unwrap();
    total.sort();
    publish.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "100-rule policy update ({rounds} applies alternating two policies, {} rules each, a thread deciding frames meanwhile: {decided} frames):",
        a.rules.len()
    );
    println!(
        "  write code + rule section, then publish   median {:>8.1} us  p90 {:>8.1} us  max {:>8.1} us   (target < 1000 us)",
        us(total[rounds / 2]),
        us(total[rounds * 9 / 10]),
        us(total[rounds - 1])
    );
    println!(
        "  of which tx (fence, lease check, CAS)      median {:>8.1} us",
        us(publish[rounds / 2])
    );
}

fn main() {
    let path = std::path::PathBuf::from(format!(
        "/dev/shm/rdx-acl-gateway-bench-{}",
        std::process::id()
    ));
    let gw = Arc::new(Gateway::new(Some(&path)).expect("gateway"));
    let mut applier = Applier::attach(gw.region_path());
    println!("rdx-acl enforcement benchmark: acl-gateway, one deciding thread, wall-clock rates");
    per_frame(&gw, &mut applier);
    update(&gw, &mut applier);
}
