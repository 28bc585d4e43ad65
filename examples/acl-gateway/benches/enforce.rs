//! The ACL as an rdx extension, measured in one run against its native baselines:
//!
//! - per-frame cost at the gateway's `acl_packet` hook (bpf/acl/enforce.c, verified,
//!   JIT-compiled and deployed by the control plane: the cut tree walked in XState behind a
//!   per-thread hot-flow table) against the native pipeline of rdx-acl (parse, CM state, cut
//!   tree, with and without its hot-flow table) and against native parsing plus the linear
//!   scan (on a subsample of the frames where the scan is slow), on synthetic rule sets of
//!   100, 2,048 and 300,000 rules, uniform and skewed traffic;
//! - the time to make a 100-rule change visible: a 100-rule policy replaced by another, and
//!   100 rules of the 300,000-rule set replaced in place (shadow tree and image updated,
//!   changed records written into the inactive bank, code and control block written, then
//!   the publishing compare-and-swap), with a thread deciding frames meanwhile.
//!
//! `cargo bench -p rdx-acl-gateway --bench enforce`; `-- --quick` runs the 300K sets only
//! with the extension (with `ACL_BENCH_PROFILE=1`, 3 s per mix, for `perf record`);
//! `-- --update` only the update timings; `ACL_BENCH_BIG=N` changes the large set's size;
//! `ACL_BENCH_PASSES=N` takes each rate as the best of N passes (default 3; more steadies
//! the rates on a busy machine); `ACL_ENFORCE_OBJECT=FILE` measures another build of
//! `bpf/acl/enforce.c` (with this build's map layout), for before/after pairs in one session.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdx_acl::classify::{Classifier, CutTree, LinearScan};
use rdx_acl::compile::{compile, RuleSet};
use rdx_acl::engine::Engine;
use rdx_acl::packet::{self, LinkType, Parsed};
use rdx_acl::policy::{parse, Action};
use rdx_acl::rule::{PacketKey, Rule};
use rdx_acl::{craft, synth};
use rdx_acl_gateway::Gateway;
use support::{Applier, ApplyTimes};

fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

/// Passes over the frames per rate: `ACL_BENCH_PASSES` (default 3).
fn passes() -> usize {
    std::env::var("ACL_BENCH_PASSES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1)
}

/// Runs `f` on every frame: Mpps of the best of [`passes`] passes, then p50/p99 of
/// per-frame times (clock pairs, their own median cost subtracted). Returns the Mpps.
fn measure(name: &str, frames: &[Vec<u8>], mut f: impl FnMut(&[u8]) -> bool) -> f64 {
    let mut sink = 0u64;
    for fr in frames.iter().take(200) {
        sink += f(fr) as u64;
    }
    // Best of the passes: the machine is shared, and the best pass is the least disturbed.
    let mut mpps: f64 = 0.0;
    for _ in 0..passes() {
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
        "  {name:<46} {mpps:>9.4} Mpps  p50 {:>8} ns  p99 {:>8} ns",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99)
    );
    std::hint::black_box(sink);
    mpps
}

fn named(rules: Vec<rdx_acl::rule::Rule>) -> RuleSet {
    RuleSet {
        policy_names: (0..rules.len()).map(|i| format!("r{i}")).collect(),
        rules,
        default: Action::Deny,
    }
}

struct Set {
    label: String,
    rules: RuleSet,
    seed: u64,
    frames: usize,
}

fn per_frame(gw: &Gateway, applier: &mut Applier, set: &Set, quick: bool) {
    let rules = &set.rules;
    let t = Instant::now();
    let (_, times) = applier.apply_timed(rules, set.seed);
    println!(
        "{}: deployed in {:.1} ms (tree and image built {:.1} ms, {:.1} MB written into the bank)",
        set.label,
        t.elapsed().as_secs_f64() * 1e3,
        times.shadow.as_secs_f64() * 1e3,
        times.bytes as f64 / 1e6
    );
    // The walk's work per frame, as the native tree counts it (the program does the same).
    let tree = (rules.rules.len() > 10_000).then(|| CutTree::new(rules.rules.clone()));
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
        let keys = synth::traffic(&rules.rules, set.frames, mix, set.seed + 1);
        let frames: Vec<Vec<u8>> = keys
            .iter()
            .map(|k| craft::roce_frame(k).expect("RoCEv2 data frame"))
            .collect();
        println!("{}, {} frames, {mix_name}:", set.label, frames.len());
        if let Some(tree) = &tree {
            let mut w = [0u64; 5];
            for k in &keys {
                let (_, t) = tree.classify_counting(k);
                for (a, b) in
                    w.iter_mut()
                        .zip([t.tiers, t.trees, t.nodes, t.entries, t.full_checks])
                {
                    *a += b as u64;
                }
            }
            let n = keys.len() as f64;
            println!(
                "  tree work per frame without the hot-flow table: {:.2} tiers, {:.2} trees, {:.2} nodes, {:.2} leaf entries, {:.3} full rule checks",
                w[0] as f64 / n,
                w[1] as f64 / n,
                w[2] as f64 / n,
                w[3] as f64 / n,
                w[4] as f64 / n
            );
        }
        let hook = gw.hook().unwrap();
        let ext = measure(
            "rdx extension at the hook (eBPF, JIT, hot flows)",
            &frames,
            |f| Gateway::decide(&hook, LinkType::Ethernet, f).outcome.action == Action::Allow,
        );
        if quick {
            // For `perf record`: the extension alone, long enough to dominate the profile.
            if std::env::var("ACL_BENCH_PROFILE").is_ok() {
                let t = Instant::now();
                let mut sink = 0u64;
                while t.elapsed() < Duration::from_secs(3) {
                    for f in &frames {
                        sink += (Gateway::decide(&hook, LinkType::Ethernet, f).outcome.action
                            == Action::Allow) as u64;
                    }
                }
                std::hint::black_box(sink);
            }
            continue;
        }
        let mut engine = Engine::new(rules.clone());
        let native = measure("native engine (cut tree)", &frames, |f| {
            engine.process(LinkType::Ethernet, f).action == Action::Allow
        });
        drop(engine);
        let mut cached = Engine::new(rules.clone()).with_flow_cache(1024);
        let native_hot = measure("native engine + hot-flow table (1024)", &frames, |f| {
            cached.process(LinkType::Ethernet, f).action == Action::Allow
        });
        drop(cached);
        let scan = LinearScan::new(&rules.rules);
        let sample = if rules.rules.len() > 10_000 {
            500
        } else {
            frames.len()
        };
        let linear = measure(
            &format!("native parse + linear scan ({sample} frames)"),
            &frames[..sample],
            |f| {
                let Ok(Parsed::Rdma(info)) = packet::parse(LinkType::Ethernet, f) else {
                    return false;
                };
                rules.action_of(scan.classify(&PacketKey::from_packet(&info))) == Action::Allow
            },
        );
        println!(
            "  extension against: native engine x{:.2}, native + hot flows x{:.2}, linear scan x{:.2}",
            ext / native,
            ext / native_hot,
            ext / linear
        );
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

/// 100 rules (spread over the table) of `a` replaced by other synthetic rules, as in-place
/// updates (`priority` names the slot), and the updates that put the originals back.
fn hundred_replaced(a: &RuleSet, seed: u64) -> (Vec<Rule>, Vec<Rule>) {
    let other = synth::rules(100, seed);
    let n = a.rules.len();
    let mut to_b = Vec::new();
    let mut to_a = Vec::new();
    for (k, mut r) in other.into_iter().enumerate() {
        let p = (k * (n / 100) + 37) % n;
        r.priority = p as u32;
        r.policy = a.rules[p].policy;
        to_b.push(r);
        to_a.push(a.rules[p]);
    }
    (to_b, to_a)
}

/// Applies two rule sets (or two in-place changes) alternately while a thread decides
/// frames of `a`.
fn update(
    gw: &Arc<Gateway>,
    applier: &mut Applier,
    label: &str,
    a: &RuleSet,
    mut step: impl FnMut(&mut Applier, usize) -> ApplyTimes,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (gw, stop) = (gw.clone(), stop.clone());
        let frames: Vec<Vec<u8>> = synth::traffic(&a.rules, 64, synth::Mix::Uniform, 5)
            .iter()
            .map(|k| craft::roce_frame(k).expect("frame"))
            .collect();
        std::thread::spawn(move || {
            let hook = gw.hook().unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                Gateway::decide(
                    &hook,
                    LinkType::Ethernet,
                    &frames[n as usize % frames.len()],
                );
                n += 1;
            }
            n
        })
    };
    let (_, first) = applier.apply_timed(a, 1);
    println!(
        "{label}: first deploy {:.1} ms visible, then the other bank filled in {:.1} ms",
        first.visible().as_secs_f64() * 1e3,
        first.catch_up.as_secs_f64() * 1e3
    );
    let rounds = 30;
    let mut times: Vec<ApplyTimes> = Vec::new();
    for round in 0..rounds {
        times.push(step(applier, round));
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    let decided = worker.join().unwrap();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let stat = |name: &str, f: &dyn Fn(&ApplyTimes) -> Duration| {
        let mut v: Vec<Duration> = times.iter().map(f).collect();
        v.sort();
        println!(
            "  {name:<44} median {:>8.1} us  p90 {:>8.1} us  max {:>8.1} us",
            us(v[v.len() / 2]),
            us(v[v.len() * 9 / 10]),
            us(v[v.len() - 1])
        );
    };
    let in_place = times.iter().filter(|t| t.in_place).count();
    let mut bytes: Vec<usize> = times.iter().map(|t| t.bytes).collect();
    bytes.sort();
    println!(
        "{label} ({rounds} applies alternating two rule sets of {} rules, {in_place} in place, median {:.1} KB written per apply before publishing; a thread deciding frames meanwhile: {decided} frames):",
        a.rules.len(),
        bytes[bytes.len() / 2] as f64 / 1e3
    );
    stat("visible: shadow + bank write + publish", &|t| t.visible());
    stat("  shadow tree and image updated", &|t| t.shadow);
    if in_place > 0 {
        stat("    of which the tree (CutTree::replace_rules)", &|t| {
            t.tree
        });
        stat("    of which the image (TreeImage::apply)", &|t| {
            t.shadow.saturating_sub(t.tree)
        });
    }
    stat("  changed records written into the bank", &|t| t.write);
    stat("  code + control block written, then tx", &|t| t.publish);
    stat("old bank released (epoch wait, reclaim)", &|t| t.release);
    stat("then caught up (off the update's path)", &|t| t.catch_up);
    println!("  (target: visible < 1000 us)");
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let only_update = std::env::args().any(|a| a == "--update");
    let big: usize = std::env::var("ACL_BENCH_BIG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300_000);
    let path = std::path::PathBuf::from(format!(
        "/dev/shm/rdx-acl-gateway-bench-{}",
        std::process::id()
    ));
    let gw = Arc::new(Gateway::new(Some(&path)).expect("gateway"));
    let mut applier = Applier::attach(gw.region_path());
    println!("rdx-acl enforcement benchmark: acl-gateway, one deciding thread, wall-clock rates");
    let mut sets = Vec::new();
    if !quick {
        for (n, seed) in [(100usize, 21u64), (2048, 22)] {
            sets.push(Set {
                label: format!("{n} rules"),
                rules: named(synth::rules(n, seed)),
                seed,
                frames: 4000,
            });
        }
    }
    sets.push(Set {
        label: format!("{big} rules"),
        rules: named(synth::rules(big, 23)),
        seed: 23,
        frames: 20_000,
    });
    sets.push(Set {
        label: format!("{big} specific rules"),
        rules: named(synth::specific_rules(big, 24)),
        seed: 24,
        frames: 20_000,
    });
    for set in sets.iter().filter(|_| !only_update) {
        per_frame(&gw, &mut applier, set, quick);
    }
    if quick {
        return;
    }
    let (a, b) = (hundred_rules(0), hundred_rules(1000));
    update(
        &gw,
        &mut applier,
        "100-rule policy replaced by another",
        &a,
        |applier, round| {
            let rules = if round % 2 == 0 { &b } else { &a };
            applier.apply_timed(rules, round as u64 + 2).1
        },
    );
    let a = &sets[sets.len() - 2].rules;
    let (to_b, to_a) = hundred_replaced(a, 77);
    update(
        &gw,
        &mut applier,
        &format!("100 of {big} rules replaced in place"),
        a,
        |applier, round| {
            let changes = if round % 2 == 0 { &to_b } else { &to_a };
            applier
                .update_timed(changes, round as u64 + 2)
                .expect("in place")
                .1
        },
    );
}
