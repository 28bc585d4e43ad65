//! Elite builds through a real hook: the runtime in this process, the control plane
//! deploying into its region (generic build, then elite build plus fallback image), every
//! figure measured in the same run.
//!
//! Workload: `bpf/deopt/request_classify.c` on the `on_request` hook (context
//! `{ value, out }`), traffic following the profile = values 1..999 (doubled); a request
//! that leaves it = value 0, whose branch the elite build guards.
//!
//! 1. Time per run through `Hook::run`, generic JIT code against elite code, on
//!    profile-following traffic.
//! 2. Synchronous handover in the runtime: a run that fails its guard (exit, state in the
//!    thread's `DeoptRunState`, the rest of the run in the fallback image) against the
//!    generic build on the same request.
//! 3. The handover alone: a build with one guard, on the program's last conditional jump,
//!    that fails for every request (exit, state check, a few interpreted instructions)
//!    against the generic build on the same request.
//! 4. Queued mode (`rdx_runtime::queued`): the hook until it answers "deferred" (exit,
//!    copy and rebase, image looked up in the cache, push) while the fallback worker thread
//!    drains the queue.
//! 5. Throughput as the guard-failure rate rises (0%, 10%, 25%, 50%): generic, elite
//!    synchronous, elite queued (the hook's rate, and the rate until the worker finished
//!    every queued run).
//!
//! `cargo bench -p rdx-deopt --bench host`. Wall-clock medians of batches.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rdx_control::{create_codeflow, AttachOptions, CodeFlow, Extension};
use rdx_jit::{branch_sites, Expect, Speculation};
use rdx_runtime::queued::{ContextLayout, FallbackWorker, QueuedFallback};
use rdx_runtime::Hook;
use rdx_test_support::{eim, LocalHost, ShmPath, ValueOut};

/// The hook's answer for a queued run.
const DEFERRED: u64 = 0xdefe_44ed;

const BATCH: usize = 2048;
const BATCHES: usize = 41;

/// Median nanoseconds per request over batches of `values` (cycled).
fn per_run(hook: &Hook<'_>, values: &[u64]) -> f64 {
    let mut samples: Vec<f64> = (0..BATCHES)
        .map(|b| {
            let start = Instant::now();
            for i in 0..BATCH {
                let mut c = ValueOut {
                    value: values[(b * BATCH + i) % values.len()],
                    out: 0,
                };
                black_box(hook.run(black_box(&mut c)));
            }
            start.elapsed().as_nanos() as f64 / BATCH as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[BATCHES / 2]
}

/// Median nanoseconds per request through the queued hook, and per request until the
/// worker finished every run the batch queued (`completed` counts finished runs).
fn per_run_queued(w: &FallbackWorker<'_>, completed: &AtomicU64, values: &[u64]) -> (f64, f64) {
    let mut hook_ns = Vec::new();
    let mut drained_ns = Vec::new();
    for b in 0..BATCHES {
        let target = completed.load(Ordering::Acquire);
        let mut queued = 0u64;
        let start = Instant::now();
        for i in 0..BATCH {
            let mut c = ValueOut {
                value: values[(b * BATCH + i) % values.len()],
                out: 0,
            };
            if black_box(w.run(black_box(&mut c))) == DEFERRED {
                queued += 1;
            }
        }
        let answered = start.elapsed();
        // Yield rather than spin: on a small machine the worker needs this core.
        while completed.load(Ordering::Acquire) < target + queued {
            std::thread::yield_now();
        }
        let drained = start.elapsed();
        hook_ns.push(answered.as_nanos() as f64 / BATCH as f64);
        drained_ns.push(drained.as_nanos() as f64 / BATCH as f64);
    }
    hook_ns.sort_by(f64::total_cmp);
    drained_ns.sort_by(f64::total_cmp);
    (hook_ns[BATCHES / 2], drained_ns[BATCHES / 2])
}

fn publish(cf: &mut CodeFlow, ext: &Extension, speculation: Option<Speculation>) -> usize {
    let checked = cf.validate_code(ext, "on_request", None).unwrap();
    let (compiled, guards) = match speculation {
        Some(s) => {
            let (c, stats) = cf.jit_compile_elite(ext, &checked, s).unwrap();
            (c, stats.guards)
        }
        None => (cf.jit_compile_code(ext, &checked, None).unwrap(), 0),
    };
    let p = cf.prepare_prog("on_request", ext, &compiled).unwrap();
    cf.tx(vec![p]).unwrap();
    guards
}

/// `n` requests, `fail_per_mille` of them value 0 (spread evenly), the rest 1..999.
fn traffic(n: usize, fail_per_mille: usize) -> Vec<u64> {
    (0..n)
        .map(|i| {
            let fail = (i * fail_per_mille) / 1000 != ((i + 1) * fail_per_mille) / 1000;
            if fail {
                0
            } else {
                1 + (i as u64 * 7919) % 999
            }
        })
        .collect()
}

fn main() {
    let region = ShmPath::new("deopt-bench");
    let builder = LocalHost::builder(
        &region,
        &eim::on_request(&["map_lookup_elem", "map_update_elem"]),
    )
    .code_size(4 << 20);
    let rt = LocalHost::with(region, builder);
    let hook = rt.hook("on_request").unwrap();
    let obj = rdx_bpf::loader::load(&rdx_testdata::object("deopt/request_classify")).unwrap();
    let ext = Extension::from_object(&obj, None).unwrap();
    let mut cf = create_codeflow(&rt.address(), AttachOptions::default()).unwrap();

    // The profile of traffic 1..999: each conditional jump's direction on it, found by
    // publishing a one-guard build per jump and seeing whether a hot request deoptimises.
    let mut guards = Speculation::default();
    for pc in branch_sites(ext.insns()) {
        let one = Speculation {
            guards: [(pc, Expect::Taken)].into_iter().collect(),
        };
        publish(&mut cf, &ext, Some(one));
        let before = hook.stats().deopts;
        hook.run(&mut ValueOut { value: 5, out: 0 });
        let expect = if hook.stats().deopts > before {
            Expect::NotTaken
        } else {
            Expect::Taken
        };
        guards.guards.insert(pc, expect);
    }

    let hot = traffic(4096, 0);
    publish(&mut cf, &ext, None);
    let generic_hot = per_run(&hook, &hot);
    let generic_cold = per_run(&hook, &[0]);
    let generic_rates: Vec<f64> = [0, 100, 250, 500]
        .iter()
        .map(|&r| 1e3 / per_run(&hook, &traffic(4096, r)))
        .collect();

    let n_guards = publish(&mut cf, &ext, Some(guards.clone()));
    let before = hook.stats();
    let elite_hot = per_run(&hook, &hot);
    let after = hook.stats();
    assert_eq!(
        after.deopts, before.deopts,
        "profile-following traffic deoptimised"
    );
    let elite_cold = per_run(&hook, &[0]);
    let after_cold = hook.stats();
    assert!(after_cold.deopts - after.deopts >= (BATCH * BATCHES) as u64);
    assert_eq!(after_cold.failures, before.failures, "a resumed run failed");
    let elite_rates: Vec<f64> = [0, 100, 250, 500]
        .iter()
        .map(|&r| 1e3 / per_run(&hook, &traffic(4096, r)))
        .collect();

    // Queued mode on the same elite build.
    let completed = Arc::new(AtomicU64::new(0));
    let done = completed.clone();
    let mut cfg = QueuedFallback::new(ContextLayout::plain(16), DEFERRED);
    cfg.capacity = 2 * BATCH;
    cfg.packet_slot = 64;
    let worker = rt
        .queued_fallback("on_request", cfg, move |c| {
            assert!(c.result.is_some(), "a queued run failed");
            done.fetch_add(1, Ordering::Release);
        })
        .unwrap();
    let (queued_cold, queued_cold_drained) = per_run_queued(&worker, &completed, &[0]);
    let queued_rates: Vec<(f64, f64)> = [0, 100, 250, 500]
        .iter()
        .map(|&r| {
            let (h, d) = per_run_queued(&worker, &completed, &traffic(4096, r));
            (1e3 / h, 1e3 / d)
        })
        .collect();
    drop(worker);
    assert_eq!(hook.stats().failures, before.failures, "a run failed");

    // The handover alone: one guard, on the last conditional jump value 5 reaches, failing
    // for it.
    let mut last_guard = None;
    for &pc in branch_sites(ext.insns()).iter().rev() {
        let wrong_way = match guards.guards.get(&pc) {
            Some(Expect::Taken) => Expect::NotTaken,
            _ => Expect::Taken,
        };
        let only = Speculation {
            guards: [(pc, wrong_way)].into_iter().collect(),
        };
        publish(&mut cf, &ext, Some(only));
        let d0 = hook.stats().deopts;
        hook.run(&mut ValueOut { value: 5, out: 0 });
        if hook.stats().deopts > d0 {
            last_guard = Some(per_run(&hook, &[5]));
            assert!(hook.stats().deopts - d0 > (BATCH * BATCHES) as u64);
            break;
        }
    }
    let last_guard = last_guard.expect("a guard value 5 reaches");
    publish(&mut cf, &ext, None);
    let generic_5 = per_run(&hook, &[5]);

    println!(
        "request_classify through Hook::run ({} slots, {n_guards} guards), medians of {BATCHES} batches of {BATCH}",
        ext.insns().len()
    );
    println!("| measurement | ns per run |");
    println!("| --- | --- |");
    println!("| generic JIT, profile-following traffic | {generic_hot:.1} |");
    println!(
        "| elite JIT, profile-following traffic (0 deoptimisations) | {elite_hot:.1} ({:.2}x) |",
        elite_hot / generic_hot
    );
    println!("| generic JIT, request the profile never saw (value 0) | {generic_cold:.1} |");
    println!(
        "| elite JIT, same request: guard fails, run finished in the fallback image | {elite_cold:.1} |"
    );
    println!(
        "| synchronous deoptimisation in the runtime (difference) | {:.1} |",
        elite_cold - generic_cold
    );
    println!("| generic JIT, value 5 | {generic_5:.1} |");
    println!(
        "| one guard on the last jump, failing (value 5): exit, state check, 3 slots interpreted | {last_guard:.1} |"
    );
    println!(
        "| synchronous handover alone (difference) | {:.1} |",
        last_guard - generic_5
    );
    println!(
        "| queued: hook until it answers \"deferred\" (value 0; exit, copy, rebase, push) | {queued_cold:.1} |"
    );
    println!(
        "| queued: queued state transfer, less the generic run (difference) | {:.1} |",
        queued_cold - generic_cold
    );
    println!(
        "| queued: per request until the worker finished the batch | {queued_cold_drained:.1} |"
    );
    println!();
    println!(
        "| guard failures | generic (M runs/s) | elite sync (M runs/s) | elite queued, hook (M runs/s) | elite queued, drained (M runs/s) | sync / generic | queued hook / generic |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (i, rate) in ["0%", "10%", "25%", "50%"].iter().enumerate() {
        println!(
            "| {rate} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2}x | {:.2}x |",
            generic_rates[i],
            elite_rates[i],
            queued_rates[i].0,
            queued_rates[i].1,
            elite_rates[i] / generic_rates[i],
            queued_rates[i].0 / generic_rates[i]
        );
    }
    drop(cf);
    rt.teardown(std::time::Duration::from_millis(100)).unwrap();
    rt.unlink().unwrap();
}
