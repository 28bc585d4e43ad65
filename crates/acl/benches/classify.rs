//! ACL classification benchmark: 300K synthetic rules, skewed and uniform traffic.
//!
//! Measures, in one run and one thread (= per core): packets per second (best of three
//! passes) and per-packet p50/p99 latency for the cut tree and the tuple space, each alone and
//! behind the per-thread hot-flow table, the tuple space's hot-rule tier and batched lookups,
//! and the linear-scan baseline on a subsample; the five-tuple part of the rules against DPDK's
//! `rte_acl` when it is installed; the same on rules that all pin their addresses
//! (`synth::specific_rules`); plus build times and the time to apply a 100-rule update to a
//! shadow copy and publish it.
//!
//! The cut tree is measured one packet per call and in bursts of 64 (`classify_batch`, whose
//! tree walks are interleaved); `rte_acl` likewise, and the ratios printed compare like with
//! like.
//!
//! `cargo bench -p rdx-acl --bench classify` (env `ACL_BENCH_RULES` overrides the rule count;
//! `ACL_BENCH_ONLY_TREE=1` skips the tuple-space rows and `rte_acl`; `ACL_BENCH_QUICK=1`
//! runs only the cut tree on the first rule set and its five-tuple part against `rte_acl`,
//! a few minutes less; `ACL_BENCH_FIVE=1` runs only the cut tree against `rte_acl` on the
//! five-tuple parts of both rule sets, both mixes, in well under a minute).

use std::hint::black_box;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::{Duration, Instant};

use rdx_acl::classify::{Classifier, CutTree, FlowCache, HotTier, Layered, LinearScan, TupleSpace};
use rdx_acl::compile::RuleSet;
use rdx_acl::craft;
use rdx_acl::engine::{Engine, Verdict};
use rdx_acl::field::Field;
use rdx_acl::packet::LinkType;
use rdx_acl::policy::Action;
use rdx_acl::rule::{AddrRange, PacketKey, Rule};
use rdx_acl::synth::{self, Mix};

const PACKETS: usize = 400_000;
const LATENCY_SAMPLE: usize = 100_000;
const LINEAR_SAMPLE: usize = 300;
const HOT_CAPACITY: usize = 64;
const HOT_REFRESH: u64 = 1 << 22;
const FLOW_SLOTS: usize = 1024;

struct Result {
    mpps: f64,
    p50_ns: f64,
    p99_ns: f64,
    mean_ns: f64,
    max_ns: f64,
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)] as f64
}

/// CPU time this thread has run: throughput per core, even while other processes preempt it.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Timed passes over the traffic per measurement; the fastest is reported.
const PASSES: usize = 3;

/// Packets in one batched call.
const BURST: usize = 64;

/// Throughput over all packets, then per-packet latency over a sample (timer cost subtracted).
fn measure(
    packets: &[PacketKey],
    mut classify: impl FnMut(&PacketKey) -> Option<u32>,
    timer_ns: f64,
) -> Result {
    // Best of three passes: other engineers' processes share this machine's caches, and the
    // least disturbed pass is the closest to what the code itself costs.
    let elapsed = (0..PASSES)
        .map(|_| {
            let start = thread_cpu_time();
            let mut acc = 0u64;
            for k in packets {
                acc = acc.wrapping_add(classify(k).map_or(0, u64::from));
            }
            let elapsed = thread_cpu_time() - start;
            black_box(acc);
            elapsed
        })
        .min()
        .unwrap_or_default();
    let mut lat: Vec<u64> = packets
        .iter()
        .take(LATENCY_SAMPLE)
        .map(|k| {
            let t = Instant::now();
            black_box(classify(black_box(k)));
            t.elapsed().as_nanos() as u64
        })
        .collect();
    lat.sort_unstable();
    let mean_ns = lat.iter().sum::<u64>() as f64 / lat.len() as f64 - timer_ns;
    Result {
        mean_ns,
        max_ns: *lat.last().unwrap_or(&0) as f64,
        mpps: packets.len() as f64 / elapsed.as_secs_f64() / 1e6,
        p50_ns: (percentile(&lat, 0.50) - timer_ns).max(0.0),
        p99_ns: (percentile(&lat, 0.99) - timer_ns).max(0.0),
    }
}

/// Throughput of batched calls ([`BURST`] packets each) and the latency of a whole burst: no
/// packet of a burst is decided before the burst's time has passed.
fn measure_batch(
    packets: &[PacketKey],
    mut classify: impl FnMut(&[PacketKey], &mut [Option<u32>]),
    timer_ns: f64,
) -> Result {
    let mut out = vec![None; BURST];
    let elapsed = (0..PASSES)
        .map(|_| {
            let start = thread_cpu_time();
            let mut acc = 0u64;
            for burst in packets.chunks(BURST) {
                classify(burst, &mut out[..burst.len()]);
                acc = acc.wrapping_add(out.iter().map(|o| o.map_or(0, u64::from)).sum::<u64>());
            }
            let elapsed = thread_cpu_time() - start;
            black_box(acc);
            elapsed
        })
        .min()
        .unwrap_or_default();
    let mut lat: Vec<u64> = packets[..LATENCY_SAMPLE]
        .chunks_exact(BURST)
        .map(|burst| {
            let t = Instant::now();
            classify(black_box(burst), &mut out);
            t.elapsed().as_nanos() as u64
        })
        .collect();
    lat.sort_unstable();
    let mean_ns = lat.iter().sum::<u64>() as f64 / lat.len() as f64 - timer_ns;
    Result {
        mean_ns,
        max_ns: *lat.last().unwrap_or(&0) as f64,
        mpps: packets.len() as f64 / elapsed.as_secs_f64() / 1e6,
        p50_ns: (percentile(&lat, 0.50) - timer_ns).max(0.0),
        p99_ns: (percentile(&lat, 0.99) - timer_ns).max(0.0),
    }
}

/// Frames per engine measurement.
const ENGINE_FRAMES: usize = 100_000;

/// Mpps of `pass` (which decides `n` frames), best of [`PASSES`] by thread CPU time.
/// The first `ENGINE_FRAMES` keys as RoCEv2 frames, for the engine rows.
fn engine_frames(packets: &[PacketKey]) -> Vec<Vec<u8>> {
    packets[..ENGINE_FRAMES]
        .iter()
        .map(|k| craft::roce_frame(k).expect("synthetic keys have frames"))
        .collect()
}

/// Mpps/core of `engine` on `frames`, one per call and through `process_batch`.
fn engine_rates(engine: &mut Engine, frames: &[Vec<u8>]) -> (f64, f64) {
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let mut verdicts: Vec<Verdict> = Vec::new();
    let one = measure_frames(frames.len(), || {
        for f in &refs {
            black_box(engine.process(LinkType::Ethernet, f));
        }
    });
    let batched = measure_frames(frames.len(), || {
        engine.process_batch(LinkType::Ethernet, &refs, &mut verdicts);
        black_box(&verdicts);
    });
    (one, batched)
}

fn measure_frames(n: usize, mut pass: impl FnMut()) -> f64 {
    let best = (0..PASSES)
        .map(|_| {
            let start = thread_cpu_time();
            pass();
            thread_cpu_time() - start
        })
        .min()
        .unwrap_or_default();
    n as f64 / best.as_secs_f64() / 1e6
}

fn timer_overhead() -> f64 {
    let mut v: Vec<u64> = (0..100_000)
        .map(|_| {
            let t = Instant::now();
            t.elapsed().as_nanos() as u64
        })
        .collect();
    v.sort_unstable();
    percentile(&v, 0.5)
}

fn burst_row(name: &str, r: &Result) {
    println!(
        "  {name:<38} {:>7.3} Mpps/core  burst of {BURST}: p50 {:>6.0} ns  p99 {:>6.0} ns  ({:.0} ns per packet at p50)",
        r.mpps,
        r.p50_ns,
        r.p99_ns,
        r.p50_ns / BURST as f64
    );
}

fn row(name: &str, r: &Result) {
    println!(
        "  {name:<38} {:>7.3} Mpps/core  p50 {:>6.0} ns  p99 {:>6.0} ns  mean {:>6.0} ns  max {:>8.0} ns",
        r.mpps, r.p50_ns, r.p99_ns, r.mean_ns, r.max_ns
    );
}

fn main() {
    let n_rules: usize = std::env::var("ACL_BENCH_RULES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300_000);
    let timer_ns = timer_overhead();
    if std::env::var("ACL_BENCH_FIVE").is_ok_and(|v| v == "1") {
        five_only(n_rules, timer_ns);
        return;
    }
    println!("rdx-acl classify benchmark: {n_rules} rules, {PACKETS} packets per mix, 1 thread");
    println!("(throughput = packets / this thread's CPU time, i.e. per core even on a shared machine; the rte_acl harness measures the same way)");
    println!(
        "(latency = per-packet Instant pairs minus the timer's own median cost, {timer_ns:.0} ns)"
    );

    let t = Instant::now();
    let rules = synth::rules(n_rules, 1);
    let gen_time = t.elapsed();
    let t = Instant::now();
    let table = TupleSpace::new(rules.clone());
    let build = t.elapsed();
    let stats = table.stats();
    println!(
        "generate {:.1} ms, build tuple space {:.1} ms: {} tuples, largest bucket {}",
        ms(gen_time),
        ms(build),
        stats.tuples,
        stats.max_bucket
    );

    let t = Instant::now();
    let tree = CutTree::new(rules.clone());
    let tree_build = t.elapsed();
    let ts = tree.stats();
    println!(
        "build cut tree {:.1} ms: {} priority tiers, {} trees, {} nodes, {} leaves, {} rule references (x{:.2} per rule), largest leaf {}, depth {}, {:.1} MB",
        ms(tree_build),
        ts.tiers,
        ts.groups,
        ts.nodes,
        ts.leaves,
        ts.entries,
        ts.entries as f64 / n_rules.max(1) as f64,
        ts.max_leaf,
        ts.max_depth,
        ts.bytes as f64 / 1e6
    );
    let only_tree = std::env::var("ACL_BENCH_ONLY_TREE").is_ok_and(|v| v == "1");
    let quick = std::env::var("ACL_BENCH_QUICK").is_ok_and(|v| v == "1");
    let t = Instant::now();
    let layered = Layered::new(rules.clone());
    println!(
        "build layered (cut-tree first tier + tuple space) {:.1} ms",
        ms(t.elapsed())
    );

    let linear = LinearScan::new(&rules);
    // rte_acl's build time and memory grow steeply with rule count; the comparison uses the
    // five-tuple part of the first RTE_RULES rules (traffic is drawn from all of them).
    let five = five_tuple_rules(&rules[..rules.len().min(RTE_RULES)]);
    let five_table = TupleSpace::new(five.clone());
    let five_tree = CutTree::new(five.clone());
    let five_layered = Layered::new(five.clone());
    let harness = if only_tree { None } else { build_rte_harness() };
    // The per-packet pipeline (parse, CM state, cut tree) on frames crafted from the traffic.
    let rule_set = RuleSet {
        policy_names: (0..rules.len()).map(|i| format!("r{i}")).collect(),
        rules: rules.clone(),
        default: Action::Deny,
    };
    let mut engine = Engine::new(rule_set.clone());
    let mut engine_flow = Engine::new(rule_set).with_flow_cache(FLOW_SLOTS);
    for (label, mix) in [
        (
            "skewed (80% on 64 hot flows)",
            Mix::Skewed {
                hot_pct: 80,
                flows: 64,
            },
        ),
        ("uniform", Mix::Uniform),
    ] {
        let packets = synth::traffic(&rules, PACKETS, mix, 2);
        let matched = packets
            .iter()
            .take(10_000)
            .filter(|k| table.classify(k).is_some())
            .count();
        println!(
            "traffic {label}: {:.0}% of packets match a rule",
            matched as f64 / 100.0
        );

        // Agreement on the linear subsample before timing anything.
        let sample = &packets[..LINEAR_SAMPLE];
        for k in sample {
            assert_eq!(
                tree.classify(k),
                linear.classify(k),
                "cut tree disagrees with linear scan"
            );
        }
        let cut = measure(&packets, |k| tree.classify(k), timer_ns);
        let mut tree_cache = FlowCache::new(FLOW_SLOTS);
        for k in sample {
            assert_eq!(
                tree_cache.classify(&tree, k),
                linear.classify(k),
                "flow cache over the cut tree disagrees"
            );
        }
        tree_cache.flush();
        let before_tc = tree_cache.stats();
        let cut_flow = measure(&packets, |k| tree_cache.classify(&tree, k), timer_ns);
        let after_tc = tree_cache.stats();
        let mut out = vec![None; packets.len()];
        tree.classify_batch(&packets, &mut out);
        for (k, got) in sample.iter().zip(&out) {
            assert_eq!(*got, linear.classify(k), "batched cut tree disagrees");
        }
        let cut_batch = measure_batch(&packets, |b, o| tree.classify_batch(b, o), timer_ns);
        let mut batch_tree_cache = FlowCache::new(FLOW_SLOTS);
        let cut_flow_batch = measure_batch(
            &packets,
            |b, o| batch_tree_cache.classify_batch(&tree, b, o),
            timer_ns,
        );
        let mut tw = [0u64; 5];
        for k in &packets[..LATENCY_SAMPLE] {
            let (_, w) = tree.classify_counting(k);
            tw[4] += w.tiers as u64;
            tw[0] += w.trees as u64;
            tw[1] += w.nodes as u64;
            tw[2] += w.entries as u64;
            tw[3] += w.full_checks as u64;
        }
        let per = |x: u64| x as f64 / LATENCY_SAMPLE as f64;
        println!(
            "  cut-tree work per packet: {:.2} tiers, {:.1} trees walked, {:.1} nodes, {:.1} leaf entries checked, {:.2} full rule checks",
            per(tw[4]),
            per(tw[0]),
            per(tw[1]),
            per(tw[2]),
            per(tw[3])
        );
        for k in sample {
            assert_eq!(layered.classify(k), linear.classify(k), "layered disagrees");
        }
        let lay = measure(&packets, |k| layered.classify(k), timer_ns);
        let mut lay_cache = FlowCache::new(FLOW_SLOTS);
        let lay_flow = measure(&packets, |k| lay_cache.classify(&layered, k), timer_ns);
        row("cut tree", &cut);
        row(
            &format!("cut tree + hot-flow table ({FLOW_SLOTS})"),
            &cut_flow,
        );
        burst_row("cut tree, batched", &cut_batch);
        burst_row("cut tree + hot-flow table, batched", &cut_flow_batch);
        row("layered", &lay);
        row(
            &format!("layered + hot-flow table ({FLOW_SLOTS})"),
            &lay_flow,
        );
        let frames = engine_frames(&packets);
        let (one, batched) = engine_rates(&mut engine, &frames);
        let (one_flow, batched_flow) = engine_rates(&mut engine_flow, &frames);
        println!(
            "  engine (parse, CM, cut tree), {ENGINE_FRAMES} frames: one per call {one:.3} Mpps/core, process_batch {batched:.3} (x{:.2}); with the hot-flow table {one_flow:.3}, batched {batched_flow:.3} (x{:.2})",
            batched / one,
            batched_flow / one_flow
        );
        let tc_hits = after_tc.hits - before_tc.hits;
        println!(
            "  hot-flow table over the cut tree: {:.1}% of packets answered from it",
            100.0 * tc_hits as f64 / (tc_hits + after_tc.misses - before_tc.misses).max(1) as f64
        );
        if only_tree {
            continue;
        }
        if quick {
            rte_compare(
                &harness,
                &five,
                (&five_table, &five_tree, &five_layered),
                &packets,
                timer_ns,
                quick,
            );
            continue;
        }
        let mut check_tier = HotTier::new(HOT_CAPACITY, 1024);
        for k in sample {
            let want = linear.classify(k);
            assert_eq!(
                table.classify(k),
                want,
                "tuple space disagrees with linear scan"
            );
            assert_eq!(
                check_tier.classify(&table, k),
                want,
                "hot tier disagrees with linear scan"
            );
        }

        let tss = measure(&packets, |k| table.classify(k), timer_ns);
        let mut work = [0u64; 3];
        let mut worst = 0u32;
        for k in &packets[..LATENCY_SAMPLE] {
            let (_, w) = table.classify_counting(k);
            work[0] += w.tuples as u64;
            work[1] += w.entries as u64;
            work[2] += w.full_checks as u64;
            worst = worst.max(w.entries);
        }
        let per = |x: u64| x as f64 / LATENCY_SAMPLE as f64;
        println!(
            "  tuple-space work per packet: {:.1} tuples probed, {:.1} bucket entries, {:.1} full rule checks (most entries: {worst})",
            per(work[0]),
            per(work[1]),
            per(work[2])
        );
        let mut tier = HotTier::new(HOT_CAPACITY, HOT_REFRESH);
        for k in &packets[..65_536] {
            tier.classify(&table, k);
        }
        let t = Instant::now();
        tier.refresh(&table);
        let refresh = t.elapsed();
        let before = tier.stats();
        let hot = measure(&packets, |k| tier.classify(&table, k), timer_ns);
        let after = tier.stats();
        let hits = after.hot_hits - before.hot_hits;
        let total = hits + after.misses - before.misses;
        let mut cache = FlowCache::new(FLOW_SLOTS);
        for k in sample {
            assert_eq!(
                cache.classify(&table, k),
                linear.classify(k),
                "flow cache disagrees with linear scan"
            );
        }
        cache.flush();
        let before_cache = cache.stats();
        let flow = measure(&packets, |k| cache.classify(&table, k), timer_ns);
        let after_cache = cache.stats();
        let mut out = vec![None; packets.len()];
        table.classify_batch(&packets, &mut out);
        for (k, got) in packets[..LINEAR_SAMPLE].iter().zip(&out) {
            assert_eq!(*got, linear.classify(k), "batched lookup disagrees");
        }
        let batched = measure_batch(&packets, |b, o| table.classify_batch(b, o), timer_ns);
        let mut batch_cache = FlowCache::new(FLOW_SLOTS);
        let batched_flow = measure_batch(
            &packets,
            |b, o| batch_cache.classify_batch(&table, b, o),
            timer_ns,
        );
        let lin = measure(sample, |k| linear.classify(k), timer_ns);
        row("tuple space", &tss);
        row("tuple space + hot-rule tier", &hot);
        row(
            &format!("tuple space + hot-flow table ({FLOW_SLOTS})"),
            &flow,
        );
        burst_row("tuple space, batched", &batched);
        burst_row("tuple space + hot-flow table, batched", &batched_flow);
        row(
            &format!("linear scan ({LINEAR_SAMPLE}-packet sample)"),
            &lin,
        );
        println!(
            "  hot-rule tier: {} rules hot (scanned: {}), {:.1}% of packets decided by it, refresh {:.1} ms ({} candidates rejected)",
            tier.hot_rules().len(),
            tier.enabled(),
            100.0 * hits as f64 / total.max(1) as f64,
            ms(refresh),
            after.rejected
        );
        let flow_hits = after_cache.hits - before_cache.hits;
        let flow_total = flow_hits + after_cache.misses - before_cache.misses;
        println!(
            "  hot-flow table: {:.1}% of packets answered from it",
            100.0 * flow_hits as f64 / flow_total.max(1) as f64
        );
        println!(
            "  speedup over tuple space: hot-rule tier x{:.2}, hot-flow table x{:.2}, batched x{:.2}, batched + hot-flow table x{:.2}; tuple space x{:.0} over linear scan",
            hot.mpps / tss.mpps,
            flow.mpps / tss.mpps,
            batched.mpps / tss.mpps,
            batched_flow.mpps / tss.mpps,
            tss.mpps / lin.mpps
        );

        rte_compare(
            &harness,
            &five,
            (&five_table, &five_tree, &five_layered),
            &packets,
            timer_ns,
            false,
        );
    }
    if quick {
        return;
    }

    // A 100-rule update: rules at random priorities change; built into a shadow copy, then
    // published by one pointer swap (what the rdx `tx` flip will do with the region's slot).
    let updates: Vec<_> = {
        let fresh = synth::rules(100, 99);
        let mut rng = synth::Rng::new(5);
        fresh
            .into_iter()
            .map(|mut r| {
                let p = rng.below(n_rules as u64) as u32;
                r.priority = p;
                r.policy = p;
                r
            })
            .collect()
    };
    let t = Instant::now();
    let mut shadow = table.clone();
    let clone = t.elapsed();
    // Five rounds of 100 changed rules on the shadow; the median is reported.
    let mut applies: Vec<Duration> = (0..5u64)
        .map(|round| {
            let mut batch = updates.clone();
            for u in &mut batch {
                u.va_lo = u.va_lo.wrapping_add(round);
            }
            let t = Instant::now();
            shadow.replace_rules(&batch);
            t.elapsed()
        })
        .collect();
    applies.sort_unstable();
    let apply = applies[applies.len() / 2];
    let live = AtomicPtr::new(Box::into_raw(Box::new(table)));
    let t = Instant::now();
    let old = live.swap(Box::into_raw(Box::new(shadow)), Ordering::AcqRel);
    let flip = t.elapsed();
    // SAFETY: both pointers came from Box::into_raw above and no reader holds them.
    unsafe {
        drop(Box::from_raw(old));
        drop(Box::from_raw(live.load(Ordering::Acquire)));
    }
    let t = Instant::now();
    let mut rebuilt_rules = rules;
    for u in &updates {
        rebuilt_rules[u.priority as usize] = *u;
    }
    let rebuilt = TupleSpace::new(rebuilt_rules.clone());
    let rebuild = t.elapsed();
    black_box(rebuilt);
    println!(
        "100-rule update, tuple space: apply to shadow {:.3} ms (median of 5) + publish {:.3} us (shadow copy made ahead: {:.1} ms; full rebuild instead: {:.1} ms)",
        ms(apply),
        flip.as_secs_f64() * 1e6,
        ms(clone),
        ms(rebuild)
    );

    specific_section(n_rules, &harness, timer_ns);

    // The same update on the cut tree: leaves change, nodes never do.
    let t = Instant::now();
    let mut tree_shadow = tree.clone();
    let tree_clone = t.elapsed();
    let mut tree_applies: Vec<Duration> = (0..5u64)
        .map(|round| {
            let mut batch = updates.clone();
            for u in &mut batch {
                u.va_lo = u.va_lo.wrapping_add(round);
            }
            let t = Instant::now();
            tree_shadow.replace_rules(&batch);
            t.elapsed()
        })
        .collect();
    tree_applies.sort_unstable();
    // The last round's rules are the ones `rebuilt_rules` would need; check the shadow
    // against the oracle on fresh traffic before reporting.
    let mut final_rules = rebuilt_rules;
    for u in &updates {
        let mut u = *u;
        u.va_lo = u.va_lo.wrapping_add(4);
        final_rules[u.priority as usize] = u;
    }
    let oracle = LinearScan::new(&final_rules);
    for k in synth::traffic(&final_rules, LINEAR_SAMPLE, Mix::Uniform, 17).iter() {
        assert_eq!(
            tree_shadow.classify(k),
            oracle.classify(k),
            "updated cut tree disagrees"
        );
    }
    let live = AtomicPtr::new(Box::into_raw(Box::new(tree)));
    let t = Instant::now();
    let old = live.swap(Box::into_raw(Box::new(tree_shadow)), Ordering::AcqRel);
    let tree_flip = t.elapsed();
    // SAFETY: both pointers came from Box::into_raw above and no reader holds them.
    unsafe {
        drop(Box::from_raw(old));
        drop(Box::from_raw(live.load(Ordering::Acquire)));
    }
    println!(
        "100-rule update, cut tree: apply to shadow {:.3} ms (median of 5, max {:.3} ms) + publish {:.3} us (shadow copy made ahead: {:.1} ms; full build: {:.1} ms)",
        ms(tree_applies[tree_applies.len() / 2]),
        ms(tree_applies[tree_applies.len() - 1]),
        tree_flip.as_secs_f64() * 1e6,
        ms(tree_clone),
        ms(tree_build)
    );

    let mut layered_shadow = layered.clone();
    let mut layered_applies: Vec<Duration> = (0..5u64)
        .map(|round| {
            let mut batch = updates.clone();
            for u in &mut batch {
                u.va_lo = u.va_lo.wrapping_add(round);
            }
            let t = Instant::now();
            layered_shadow.replace_rules(&batch);
            t.elapsed()
        })
        .collect();
    layered_applies.sort_unstable();
    for k in synth::traffic(&final_rules, LINEAR_SAMPLE, Mix::Uniform, 17).iter() {
        assert_eq!(
            layered_shadow.classify(k),
            oracle.classify(k),
            "updated layered disagrees"
        );
    }
    println!(
        "100-rule update, layered: apply to shadow {:.3} ms (median of 5, max {:.3} ms)",
        ms(layered_applies[layered_applies.len() / 2]),
        ms(layered_applies[layered_applies.len() - 1]),
    );
}

/// The cut tree against the tuple space and rte_acl on rules that all pin their addresses
/// ([`synth::specific_rules`]), where packets are decided anywhere in the table rather than
/// by the broad rules near the top of [`synth::rules`].
fn specific_section(n_rules: usize, harness: &Option<std::path::PathBuf>, timer_ns: f64) {
    let rules = synth::specific_rules(n_rules, 3);
    let t = Instant::now();
    let tree = CutTree::new(rules.clone());
    let tree_build = t.elapsed();
    let ts = tree.stats();
    let table = TupleSpace::new(rules.clone());
    let linear = LinearScan::new(&rules);
    println!(
        "specific rules ({n_rules}, every sip a /24 or /32, every dip a /32): cut tree build {:.1} ms, {} tiers, {} trees, x{:.2} rule references per rule, largest leaf {}, {:.1} MB",
        ms(tree_build),
        ts.tiers,
        ts.groups,
        ts.entries as f64 / n_rules.max(1) as f64,
        ts.max_leaf,
        ts.bytes as f64 / 1e6
    );
    let five = five_tuple_rules(&rules[..rules.len().min(RTE_RULES)]);
    let five_table = TupleSpace::new(five.clone());
    let five_tree = CutTree::new(five.clone());
    let five_layered = Layered::new(five.clone());
    let layered = Layered::new(rules.clone());
    let mut engine = Engine::new(RuleSet {
        policy_names: (0..rules.len()).map(|i| format!("r{i}")).collect(),
        rules: rules.clone(),
        default: Action::Deny,
    });
    for (label, mix) in [
        (
            "skewed (80% on 64 hot flows)",
            Mix::Skewed {
                hot_pct: 80,
                flows: 64,
            },
        ),
        ("uniform", Mix::Uniform),
    ] {
        let packets = synth::traffic(&rules, PACKETS, mix, 4);
        let mut answers: Vec<u32> = packets[..10_000]
            .iter()
            .map(|k| tree.classify(k).unwrap_or(u32::MAX))
            .collect();
        answers.sort_unstable();
        println!(
            "traffic {label} over specific rules: deciding rule p10 {} p50 {} p90 {}",
            answers[1_000], answers[5_000], answers[9_000]
        );
        for k in &packets[..LINEAR_SAMPLE] {
            assert_eq!(tree.classify(k), linear.classify(k), "cut tree disagrees");
            assert_eq!(
                table.classify(k),
                linear.classify(k),
                "tuple space disagrees"
            );
        }
        let mut tw = [0u64; 3];
        for k in &packets[..LATENCY_SAMPLE] {
            let (_, w) = tree.classify_counting(k);
            tw[0] += w.tiers as u64;
            tw[1] += w.trees as u64;
            tw[2] += w.entries as u64;
        }
        let per = |x: u64| x as f64 / LATENCY_SAMPLE as f64;
        println!(
            "  cut-tree work per packet: {:.2} tiers, {:.1} trees walked, {:.1} leaf entries checked",
            per(tw[0]),
            per(tw[1]),
            per(tw[2])
        );
        let cut = measure(&packets, |k| tree.classify(k), timer_ns);
        let mut cache = FlowCache::new(FLOW_SLOTS);
        let cut_flow = measure(&packets, |k| cache.classify(&tree, k), timer_ns);
        let mut out = vec![None; LINEAR_SAMPLE];
        tree.classify_batch(&packets[..LINEAR_SAMPLE], &mut out);
        for (k, got) in packets.iter().zip(&out) {
            assert_eq!(*got, linear.classify(k), "batched cut tree disagrees");
        }
        let cut_batch = measure_batch(&packets, |b, o| tree.classify_batch(b, o), timer_ns);
        let mut batch_cache = FlowCache::new(FLOW_SLOTS);
        let cut_flow_batch = measure_batch(
            &packets,
            |b, o| batch_cache.classify_batch(&tree, b, o),
            timer_ns,
        );
        let tss = measure(&packets, |k| table.classify(k), timer_ns);
        for k in &packets[..LINEAR_SAMPLE] {
            assert_eq!(layered.classify(k), linear.classify(k), "layered disagrees");
        }
        let lay = measure(&packets, |k| layered.classify(k), timer_ns);
        let mut lay_cache = FlowCache::new(FLOW_SLOTS);
        let lay_flow = measure(&packets, |k| lay_cache.classify(&layered, k), timer_ns);
        row("cut tree", &cut);
        row(
            &format!("cut tree + hot-flow table ({FLOW_SLOTS})"),
            &cut_flow,
        );
        burst_row("cut tree, batched", &cut_batch);
        burst_row("cut tree + hot-flow table, batched", &cut_flow_batch);
        row("layered", &lay);
        row(
            &format!("layered + hot-flow table ({FLOW_SLOTS})"),
            &lay_flow,
        );
        row("tuple space", &tss);
        let (one, batched) = engine_rates(&mut engine, &engine_frames(&packets));
        println!(
            "  engine (parse, CM, cut tree), {ENGINE_FRAMES} frames: one per call {one:.3} Mpps/core, process_batch {batched:.3} (x{:.2})",
            batched / one
        );
        rte_compare(
            harness,
            &five,
            (&five_table, &five_tree, &five_layered),
            &packets,
            timer_ns,
            false,
        );
    }
}

/// `ACL_BENCH_FIVE=1`: only the cut tree against `rte_acl` on the five-tuple parts of both
/// rule sets, both traffic mixes (what the `rte_acl` targets are about, in a few minutes).
fn five_only(n_rules: usize, timer_ns: f64) {
    println!("rdx-acl classify benchmark, five-tuple parts only: traffic from {n_rules} rules, {PACKETS} packets per mix, 1 thread");
    let harness = build_rte_harness();
    for (set, rules) in [
        ("first set", synth::rules(n_rules, 1)),
        ("specific set", synth::specific_rules(n_rules, 3)),
    ] {
        let five = five_tuple_rules(&rules[..rules.len().min(RTE_RULES)]);
        let t = Instant::now();
        let tree = CutTree::new(five.clone());
        let build = t.elapsed();
        let ts = tree.stats();
        println!(
            "{set}: five-tuple cut tree build {:.1} ms, {} trees, {} nodes, x{:.2} rule references per rule, largest leaf {}, {:.1} MB",
            ms(build),
            ts.groups,
            ts.nodes,
            ts.entries as f64 / five.len().max(1) as f64,
            ts.max_leaf,
            ts.bytes as f64 / 1e6
        );
        let (table, layered) = (TupleSpace::new(Vec::new()), Layered::new(Vec::new()));
        for (label, mix, seed) in [
            (
                "skewed",
                Mix::Skewed {
                    hot_pct: 80,
                    flows: 64,
                },
                2,
            ),
            ("uniform", Mix::Uniform, 2),
        ] {
            // The same seeds as the full run's traffic (2 for the first set, 4 for specific).
            let seed = if set == "first set" { seed } else { 4 };
            let packets = synth::traffic(&rules, PACKETS, mix, seed);
            println!("traffic {label} ({set})");
            rte_compare(
                &harness,
                &five,
                (&table, &tree, &layered),
                &packets,
                timer_ns,
                true,
            );
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

const MAPPED: u128 = 0xffff << 32;

/// The five-tuple part of each rule (addresses, ports); every other field left open.
fn five_tuple_rules(rules: &[Rule]) -> Vec<Rule> {
    rules
        .iter()
        .map(|r| {
            let mut f = Rule::any(r.action(), r.policy, r.priority);
            let keep = (1 << Field::Sip.index())
                | (1 << Field::Dip.index())
                | (1 << Field::Sport.index())
                | (1 << Field::Dport.index());
            f.absent_ok = (f.absent_ok & !keep) | (r.absent_ok & keep);
            f.sip = r.sip;
            f.dip = r.dip;
            (f.sport_lo, f.sport_hi, f.dport_lo, f.dport_hi) =
                (r.sport_lo, r.sport_hi, r.dport_lo, r.dport_hi);
            f
        })
        .collect()
}

/// (IPv4 address, prefix length) of a rule's address range: a mapped IPv4 prefix or "any".
fn v4_prefix(a: &AddrRange) -> (u32, u32) {
    match a.prefix_len() {
        Some(len) if len >= 96 && a.lo() >> 32 == MAPPED >> 32 => (a.lo() as u32, len - 96),
        _ => (0, 0),
    }
}

/// Compiles the rte_acl harness against Debian's librte-acl23 if it is installed.
fn build_rte_harness() -> Option<std::path::PathBuf> {
    let lib = std::path::Path::new("/usr/lib/x86_64-linux-gnu");
    let (acl, eal) = (lib.join("librte_acl.so.23"), lib.join("librte_eal.so.23"));
    if !acl.exists() || !eal.exists() {
        println!("rte_acl: not installed (apt-get install librte-acl23 librte-eal23): comparison skipped");
        return None;
    }
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("rte_acl_harness");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/rte_acl_harness.c");
    let status = std::process::Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .arg(&acl)
        .arg(&eal)
        .status();
    match status {
        Ok(s) if s.success() => Some(out),
        other => {
            println!("rte_acl: harness did not compile ({other:?}): comparison skipped");
            None
        }
    }
}

const RTE_CHECK: usize = 500;
const RTE_RULES: usize = 100_000;

/// Runs the five-tuple part of the rules and traffic through rte_acl and through our tuple
/// space, after checking that both pick the same rules on a sample.
fn rte_compare(
    harness: &Option<std::path::PathBuf>,
    five: &[Rule],
    (table, tree, layered): (&TupleSpace, &CutTree, &Layered),
    packets: &[PacketKey],
    timer_ns: f64,
    tree_only: bool,
) {
    let Some(harness) = harness else {
        return;
    };
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let mut rb = (five.len() as u32).to_le_bytes().to_vec();
    for r in five {
        let (sip, sip_len) = v4_prefix(&r.sip);
        let (dip, dip_len) = v4_prefix(&r.dip);
        for v in [sip, sip_len, dip, dip_len] {
            rb.extend_from_slice(&v.to_le_bytes());
        }
        for v in [r.sport_lo, r.sport_hi, r.dport_lo, r.dport_hi] {
            rb.extend_from_slice(&v.to_le_bytes());
        }
    }
    let mut pb = (packets.len() as u32).to_le_bytes().to_vec();
    for k in packets {
        pb.extend_from_slice(&[17, 0, 0, 0]);
        pb.extend_from_slice(&(k.sip as u32).to_be_bytes());
        pb.extend_from_slice(&(k.dip as u32).to_be_bytes());
        pb.extend_from_slice(&k.sport.to_be_bytes());
        pb.extend_from_slice(&k.dport.to_be_bytes());
    }
    let (rules_path, pkts_path) = (dir.join("rte_rules.bin"), dir.join("rte_packets.bin"));
    std::fs::write(&rules_path, rb).expect("write rules");
    std::fs::write(&pkts_path, pb).expect("write packets");
    let out = std::process::Command::new(harness)
        .arg(&rules_path)
        .arg(&pkts_path)
        .arg(RTE_CHECK.to_string())
        .output()
        .expect("run harness");
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        println!(
            "rte_acl: harness failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return;
    }
    let value = |key: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(f64::NAN)
    };
    let picks: Vec<i64> = text
        .lines()
        .filter(|l| !l.contains(' '))
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let oracle = LinearScan::new(five);
    let agree = packets
        .iter()
        .zip(&picks)
        .filter(|(k, &pick)| oracle.classify(k).map_or(-1, i64::from) == pick)
        .count();
    for k in &packets[..RTE_CHECK] {
        assert_eq!(
            tree.classify(k),
            oracle.classify(k),
            "five-tuple cut tree disagrees"
        );
    }
    for k in packets[..RTE_CHECK].iter().filter(|_| !tree_only) {
        assert_eq!(
            layered.classify(k),
            oracle.classify(k),
            "five-tuple layered disagrees"
        );
    }
    let mut out = vec![None; packets.len()];
    tree.classify_batch(packets, &mut out);
    for (k, got) in packets[..RTE_CHECK].iter().zip(&out) {
        assert_eq!(
            *got,
            oracle.classify(k),
            "five-tuple cut tree, batched, disagrees"
        );
    }
    let ours_tree = measure(packets, |k| tree.classify(k), timer_ns);
    let ours_tree_batched = measure_batch(packets, |b, o| tree.classify_batch(b, o), timer_ns);
    let mut work = [0u64; 4];
    for k in &packets[..LATENCY_SAMPLE] {
        let (_, w) = tree.classify_counting(k);
        work[0] += w.tiers as u64;
        work[1] += w.trees as u64;
        work[2] += w.nodes as u64;
        work[3] += w.entries as u64;
    }
    let per = |x: u64| x as f64 / LATENCY_SAMPLE as f64;
    println!(
        "  five-tuple part ({} rules): rte_acl build {:.0} ms; rte_acl and linear scan agree on {agree}/{} packets",
        five.len(),
        value("build_ms"),
        picks.len()
    );
    println!(
        "  five-tuple cut-tree work per packet: {:.2} tiers, {:.1} trees walked, {:.1} nodes, {:.1} leaf entries checked",
        per(work[0]),
        per(work[1]),
        per(work[2]),
        per(work[3])
    );
    let (rte_single, rte_burst) = (value("single_mpps"), value("burst_mpps"));
    row("cut tree, five-tuple rules", &ours_tree);
    burst_row("cut tree, five-tuple rules, batched", &ours_tree_batched);
    let rte_rows = || {
        println!(
            "  {:<38} {:>7.3} Mpps/core  p50 {:>6.0} ns  p99 {:>6.0} ns",
            "DPDK rte_acl, 1 packet per call",
            rte_single,
            value("p50_ns"),
            value("p99_ns"),
        );
        println!(
            "  {:<38} {:>7.3} Mpps/core",
            "DPDK rte_acl, bursts of 64", rte_burst
        );
    };
    if !tree_only {
        let ours_layered = measure(packets, |k| layered.classify(k), timer_ns);
        let ours = measure(packets, |k| table.classify(k), timer_ns);
        let ours_batched = measure_batch(packets, |b, o| table.classify_batch(b, o), timer_ns);
        row("layered, five-tuple rules", &ours_layered);
        row("tuple space, five-tuple rules", &ours);
        burst_row("tuple space, five-tuple rules, batched", &ours_batched);
        rte_rows();
        println!(
            "  against rte_acl, 1 packet per call: cut tree x{:.2}, layered x{:.2}, tuple space x{:.2}",
            ours_tree.mpps / rte_single,
            ours_layered.mpps / rte_single,
            ours.mpps / rte_single
        );
        println!(
            "  against rte_acl, bursts of 64: cut tree x{:.2}, tuple space x{:.2}",
            ours_tree_batched.mpps / rte_burst,
            ours_batched.mpps / rte_burst
        );
    } else {
        rte_rows();
        println!(
            "  against rte_acl: 1 packet per call, cut tree x{:.2}; bursts of 64, cut tree x{:.2}",
            ours_tree.mpps / rte_single,
            ours_tree_batched.mpps / rte_burst
        );
    }
}
