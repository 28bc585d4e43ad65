//! Elite against generic JIT code, and what deoptimising costs, in one run.
//!
//! Workload: `bpf/deopt/flow_events.c` (XDP; array, hash and ring-buffer maps; a BPF-to-BPF
//! call) on IPv4/UDP frames to port 53 from four sources. Its profile comes from the
//! instrumented (scouting) build on that traffic; the elite artifact is compiled from it.
//!
//! 1. Time per run of elite and generic code on traffic that follows the profile.
//! 2. State transfer: synchronous (elite code stops at its first guard, the interpreter
//!    takes over and finishes) and queued (state plus copies of context and packet into the
//!    fallback queue, pointers rebased, until the hook can answer "deferred"), each split
//!    into its parts.
//! 3. Throughput as the guard-failure rate rises from 0% to 50% (TCP frames mixed in: the
//!    profile saw none, so the protocol check is a guard), generic JIT code as the baseline,
//!    elite synchronous and elite queued (a worker thread drains the queue meanwhile).
//!
//! Timings are wall-clock medians of batches; run it on a quiet machine for figures worth
//! quoting (`cargo bench -p rdx-deopt --bench deopt`).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Vm};
use rdx_bpf::isa::Insn;
use rdx_bpf::maps::MapSet;
use rdx_deopt::host::{native_symbols, LowPacket};
use rdx_deopt::queue::DeferredRun;
use rdx_deopt::{BranchProfile, ContextLayout, EliteTier, FallbackQueue, Outcome, Policy};
use rdx_jit::{
    Arch, BranchCounters, Build, CompileOptions, Compiler, ExecutableCode, Expect, Symbol,
};
use rdx_region::abi::{DeoptRunState, RunState, RunStatus};

const BATCH: usize = 512;
const BATCHES: usize = 41;

fn udp(src: u8, dport: u16, proto: u8) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    let tail = [0x5au8; 32];
    let total = (20 + 8 + tail.len()) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0, 10, 0, 0, src, 10, 0, 0, 1]);
    f.extend_from_slice(&1234u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&((8 + tail.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&tail);
    f
}

/// `n` frames, `fail_per_mille` of them TCP (spread evenly).
fn traffic(n: usize, fail_per_mille: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let tcp = (i * fail_per_mille) / 1000 != ((i + 1) * fail_per_mille) / 1000;
            udp((i % 4) as u8, 53, if tcp { 6 } else { 17 })
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Median ns per item of `f` over batches of `BATCH` items; `between` runs untimed after
/// each batch.
fn per_run(mut f: impl FnMut(usize), mut between: impl FnMut()) -> f64 {
    let mut samples = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let t = Instant::now();
        for i in 0..BATCH {
            f(i);
        }
        samples.push(t.elapsed().as_nanos() as f64 / BATCH as f64);
        between();
    }
    median(samples)
}

fn drain(maps: &MapSet) {
    for m in maps.iter() {
        if let Some(rb) = m.ringbuf() {
            rb.consume();
        }
    }
}

struct Loaded {
    object: rdx_bpf::program::Object,
    insns: Vec<Insn>,
}

fn compile(insns: &[Insn], opts: &CompileOptions, syms: &MapSet) -> ExecutableCode {
    let (a, _) = Compiler::new(opts.arch)
        .unwrap()
        .compile(insns, opts)
        .unwrap();
    ExecutableCode::load_bytes(&a.to_bytes(), &native_symbols(syms)).unwrap()
}

fn main() {
    let host = Arch::host().expect("supported host");
    let object = rdx_bpf::loader::load(&rdx_testdata::object("deopt/flow_events")).unwrap();
    let insns = object.programs[0].insns.clone();
    let w = Loaded { object, insns };
    let mut low = LowPacket::new(1 << 16).unwrap();
    let hot = traffic(BATCH, 0);

    // ---- scouting ----
    let sites = rdx_jit::branch_sites(&w.insns);
    let mut counters = vec![0u64; 2 * sites.len()];
    let maps = MapSet::new(&w.object.maps).unwrap();
    let mut syms = native_symbols(&maps);
    syms.insert(Symbol::Var("profile".into()), counters.as_mut_ptr() as u64);
    let profile_counters = BranchCounters {
        symbol: Symbol::Var("profile".into()),
    };
    let opts = CompileOptions::new(host, Build::Scouting(profile_counters));
    let (a, _) = Compiler::new(host)
        .unwrap()
        .compile(&w.insns, &opts)
        .unwrap();
    let scout = ExecutableCode::load_bytes(&a.to_bytes(), &syms).unwrap();
    for p in &hot {
        low.set(p);
        let mut ctx = low.xdp_md();
        // SAFETY: real xdp_md for the packet; counters outlive the code.
        unsafe { scout.call(ctx.as_mut_ptr(), &mut RunState::new(0)) };
    }
    drop(scout);
    let bytes: Vec<u8> = counters.iter().flat_map(|c| c.to_le_bytes()).collect();
    let profile = BranchProfile::from_counters(&w.insns, &bytes).unwrap();
    let spec = profile.speculation(&Policy {
        min_runs: 64,
        cold_share: 0.0,
    });

    let mut elite_opts = CompileOptions::new(host, Build::Elite(spec.clone()));
    elite_opts.verify_ir = false;
    let mut generic_opts = CompileOptions::new(host, Build::Generic);
    generic_opts.verify_ir = false;
    let (ea, es) = Compiler::new(host)
        .unwrap()
        .compile(&w.insns, &elite_opts)
        .unwrap();
    let (ga, _) = Compiler::new(host)
        .unwrap()
        .compile(&w.insns, &generic_opts)
        .unwrap();
    println!(
        "flow_events: {} insns, {} conditional jumps, profile of {} runs: {} guards, {} slots dropped; code {} bytes elite vs {} generic",
        w.insns.len(),
        sites.len(),
        hot.len(),
        es.guards,
        es.dropped_insns,
        ea.code.len(),
        ga.code.len()
    );

    // ---- 1. elite vs generic on profile-following traffic ----
    let gmaps = MapSet::new(&w.object.maps).unwrap();
    let generic = compile(&w.insns, &generic_opts, &gmaps);
    let emaps = MapSet::new(&w.object.maps).unwrap();
    let elite = compile(&w.insns, &elite_opts, &emaps);
    let evm = Arc::new(Vm::new(&w.insns, &emaps, &Helpers::standard(), Config::default()).unwrap());
    // SAFETY: the elite artifact of the program, linked against emaps.
    let tier = unsafe { EliteTier::new(elite.entry(), evm.clone(), false).unchecked() };
    let mut run = RunState::new(0);
    let mut generic_ns = |frames: &[Vec<u8>], low: &mut LowPacket| {
        per_run(
            |i| {
                low.set(&frames[i % frames.len()]);
                let mut ctx = low.xdp_md();
                // SAFETY: real xdp_md.
                black_box(unsafe { generic.call(ctx.as_mut_ptr(), &mut run) });
            },
            || drain(&gmaps),
        )
    };
    let g = generic_ns(&hot, &mut low);
    let mut state = DeoptRunState::boxed(0);
    let elite_sync = |frames: &[Vec<u8>], low: &mut LowPacket, state: &mut DeoptRunState| {
        per_run(
            |i| {
                low.set(&frames[i % frames.len()]);
                let region = low.region();
                let mut ctx = low.xdp_md();
                // SAFETY: real xdp_md.
                let out = unsafe { tier.run_sync(state, &mut ctx, Some(region), 0) };
                black_box(out.unwrap());
            },
            || drain(&emaps),
        )
    };
    let e = elite_sync(&hot, &mut low, &mut state);
    let (_, deopts) = tier.counts();
    // The elite code alone, called like the generic code (no tier around it).
    let raw = per_run(
        |i| {
            low.set(&hot[i % hot.len()]);
            let mut ctx = low.xdp_md();
            state.reset(0);
            // SAFETY: real xdp_md; an elite entry takes a DeoptRunState.
            black_box(unsafe {
                (elite.entry())(ctx.as_mut_ptr(), (&mut *state as *mut DeoptRunState).cast())
            });
        },
        || drain(&emaps),
    );
    println!("\n1. profile-following traffic (0 deoptimisations: {deopts}), ns per run:");
    println!(
        "   flow_events: generic JIT {g:.1}   elite JIT through its tier {e:.1} ({:.2}x)   elite code alone {raw:.1} ({:.2}x)",
        e / g,
        raw / g
    );

    // The same comparison for a loop: scan_loop over ASCII payloads, whose profile makes the
    // two rarer byte classes (and their map updates and events) cold inside the loop.
    let ascii: Vec<Vec<u8>> = (0..BATCH)
        .map(|i| {
            (0..64)
                .map(|k| b'a' + ((i * 7 + k * 3) % 26) as u8)
                .collect()
        })
        .collect();
    let (sg, se, sguards, sdropped, sdeopts) = elite_vs_generic("deopt/scan_loop", &ascii);
    println!(
        "   scan_loop on ASCII payloads ({sguards} guards, {sdropped} slots dropped, {sdeopts} deoptimisations): generic JIT {sg:.1}   elite JIT {se:.1}   elite/generic {:.2}x",
        se / sg
    );

    // ---- 2. state transfer ----
    // A guard that fails on every run: the first conditional jump, expected the other way.
    let first = sites[0];
    let mut fail_spec = spec.clone();
    let flipped = match spec.guards.get(&first) {
        Some(Expect::Taken) => Expect::NotTaken,
        _ => Expect::Taken,
    };
    fail_spec.guards.insert(first, flipped);
    let mut fail_opts = elite_opts.clone();
    fail_opts.build = Build::Elite(fail_spec);
    let fmaps = MapSet::new(&w.object.maps).unwrap();
    let failing = compile(&w.insns, &fail_opts, &fmaps);
    let fvm = Arc::new(Vm::new(&w.insns, &fmaps, &Helpers::standard(), Config::default()).unwrap());
    // SAFETY: as above.
    let ftier = unsafe { EliteTier::new(failing.entry(), fvm.clone(), false).unchecked() };
    low.set(&hot[0]);
    let region = low.region();
    let ctx0 = low.xdp_md();
    let mut st = DeoptRunState::boxed(0);
    // Elite code up to the exit, with the state stored.
    let exit_ns = per_run(
        |_| {
            let mut ctx = ctx0;
            st.reset(0);
            // SAFETY: real xdp_md; an elite entry takes a DeoptRunState.
            unsafe { (failing.entry())(ctx.as_mut_ptr(), (&mut *st as *mut DeoptRunState).cast()) };
            black_box(st.run.status);
        },
        || drain(&fmaps),
    );
    assert_eq!(st.run.status, RunStatus::Deopt as u32);
    let whole_sync = per_run(
        |_| {
            let mut ctx = ctx0;
            // SAFETY: real xdp_md.
            black_box(unsafe { ftier.run_sync(&mut st, &mut ctx, Some(region), 0) }.unwrap());
        },
        || drain(&fmaps),
    );
    // The interpreter alone on the same frame: what the resumed part costs if it ran from
    // the start (the program's first branch is its second instruction block).
    let interp_ns = per_run(
        |_| {
            let mut xdp = rdx_bpf::interp::XdpMd::new(hot[0].clone());
            // SAFETY: verified-shape program on a modelled context.
            black_box(unsafe { fvm.run_unchecked(rdx_bpf::interp::Input::Context(&mut xdp)) }.ok());
        },
        || drain(&fmaps),
    );
    // Pure handover: the guard is the program's last jump, so the interpreter only runs
    // that jump and `exit` — the time is the state transfer itself.
    let micro = rdx_bpf::asm::assemble("mov %r0, 0\njeq %r0, 0, +0\nexit").unwrap();
    let mmaps = MapSet::default();
    let mut micro_opts = elite_opts.clone();
    micro_opts.build = Build::Elite(rdx_jit::Speculation {
        guards: [(1, Expect::NotTaken)].into_iter().collect(),
    });
    let micro_code = compile(&micro, &micro_opts, &mmaps);
    let micro_vm =
        Arc::new(Vm::new(&micro, &mmaps, &Helpers::standard(), Config::default()).unwrap());
    // SAFETY: the elite artifact of `micro`.
    let micro_tier = unsafe { EliteTier::new(micro_code.entry(), micro_vm, false).unchecked() };
    let micro_exit = per_run(
        |_| {
            let mut ctx = ctx0;
            st.reset(0);
            // SAFETY: the program touches nothing but its run state.
            unsafe {
                (micro_code.entry())(ctx.as_mut_ptr(), (&mut *st as *mut DeoptRunState).cast())
            };
            black_box(st.run.status);
        },
        || {},
    );
    let micro_sync = per_run(
        |_| {
            let mut ctx = ctx0;
            // SAFETY: as above.
            let out = unsafe { micro_tier.run_sync(&mut st, &mut ctx, None, 0) };
            assert_eq!(out.unwrap(), Outcome::Resumed(0));
        },
        || {},
    );

    let queue = FallbackQueue::new(2048, BATCH + 8).unwrap();
    let layout = ContextLayout::xdp_md();
    let deferred = std::cell::RefCell::new(Vec::with_capacity(BATCH));
    let capture_ns = per_run(
        |_| {
            let mut ctx = ctx0;
            st.reset(0);
            // SAFETY: as above.
            unsafe { (failing.entry())(ctx.as_mut_ptr(), (&mut *st as *mut DeoptRunState).cast()) };
            // SAFETY: ctx is the run's context, its packet is live.
            let d = unsafe { DeferredRun::capture(&st, &ctx, &layout, &fmaps, &queue, false) };
            deferred.borrow_mut().push(d.unwrap());
        },
        || deferred.borrow_mut().clear(),
    );
    let queued_whole = per_run(
        |_| {
            let mut ctx = ctx0;
            // SAFETY: real xdp_md.
            let out = unsafe { ftier.run_queued(&mut st, &mut ctx, &layout, &queue, 0) };
            assert!(matches!(out.unwrap(), Outcome::Deferred(_)));
        },
        || {
            while !queue.is_empty() {
                let (t, d) = queue.pop().unwrap();
                black_box(d.resume(&fvm, t));
            }
            drain(&fmaps);
        },
    );
    println!("\n2. state transfer, ns per run:");
    println!("   guard on the last jump (interpreter runs 2 insns): elite to its exit {micro_exit:.1}, exit + synchronous resume {micro_sync:.1}, handover {:.1}", micro_sync - micro_exit);
    println!("   guard on flow_events' first branch (interpreter runs the rest):");
    println!("   elite code to its exit (state stored)        {exit_ns:.1}");
    println!(
        "   synchronous: exit + interpreter finishing     {whole_sync:.1}   (handover + resumed part: {:.1})",
        whole_sync - exit_ns
    );
    println!("   interpreter alone, whole run (reference)      {interp_ns:.1}");
    println!(
        "   queued: exit + copy/rebase (capture)          {capture_ns:.1}   (capture alone: {:.1})",
        capture_ns - exit_ns
    );
    println!("   queued: hook until \"deferred\" (capture+push)  {queued_whole:.1}");

    // ---- 3. throughput as guards fail more often ----
    println!("\n3. throughput (million runs/s) as the guard-failure rate rises:");
    println!("   failure   generic   elite sync   elite queued (hook)   sync/generic");
    let queue = Arc::new(FallbackQueue::new(2048, 4096).unwrap());
    let worker = {
        let queue = queue.clone();
        let vm = evm.clone();
        std::thread::spawn(move || {
            let mut done = 0u64;
            queue.work(&vm, |c| {
                black_box(c);
                done += 1;
            });
            done
        })
    };
    for pct in [0usize, 1, 5, 10, 25, 50] {
        let frames = traffic(BATCH, pct * 10);
        let g = generic_ns(&frames, &mut low);
        let s = elite_sync(&frames, &mut low, &mut state);
        let q = per_run(
            |i| {
                low.set(&frames[i % frames.len()]);
                let mut ctx = low.xdp_md();
                // SAFETY: real xdp_md.
                let out = unsafe { tier.run_queued(&mut state, &mut ctx, &layout, &queue, 0) };
                black_box(out.unwrap());
            },
            || drain(&emaps),
        );
        println!(
            "   {pct:>5}%   {:>7.2}   {:>10.2}   {:>19.2}   {:>11.2}x",
            1e3 / g,
            1e3 / s,
            1e3 / q,
            g / s
        );
    }
    queue.close();
    let resumed = worker.join().unwrap();
    let (runs, deopts) = tier.counts();
    println!(
        "   ({runs} elite runs, {deopts} deoptimised, {resumed} finished by the fallback worker)"
    );
}

/// Scouting build on `frames`, then generic against elite time per run on the same frames:
/// (generic ns, elite ns, guards, dropped slots, deoptimisations).
fn elite_vs_generic(path: &str, frames: &[Vec<u8>]) -> (f64, f64, usize, usize, u64) {
    let host = Arch::host().unwrap();
    let object = rdx_bpf::loader::load(&rdx_testdata::object(path)).unwrap();
    let insns = object.programs[0].insns.clone();
    let mut low = LowPacket::new(1 << 16).unwrap();
    let sites = rdx_jit::branch_sites(&insns);
    let mut counters = vec![0u64; 2 * sites.len()];
    let maps = MapSet::new(&object.maps).unwrap();
    let mut syms = native_symbols(&maps);
    syms.insert(Symbol::Var("profile".into()), counters.as_mut_ptr() as u64);
    let profile_counters = BranchCounters {
        symbol: Symbol::Var("profile".into()),
    };
    let mut opts = CompileOptions::new(host, Build::Scouting(profile_counters));
    opts.verify_ir = false;
    let (a, _) = Compiler::new(host).unwrap().compile(&insns, &opts).unwrap();
    let scout = ExecutableCode::load_bytes(&a.to_bytes(), &syms).unwrap();
    for p in frames {
        low.set(p);
        let mut ctx = low.xdp_md();
        // SAFETY: real xdp_md; counters outlive the code.
        unsafe { scout.call(ctx.as_mut_ptr(), &mut RunState::new(0)) };
    }
    drop(scout);
    let bytes: Vec<u8> = counters.iter().flat_map(|c| c.to_le_bytes()).collect();
    let spec = BranchProfile::from_counters(&insns, &bytes)
        .unwrap()
        .speculation(&Policy::default());
    let mut generic_opts = CompileOptions::new(host, Build::Generic);
    generic_opts.verify_ir = false;
    let mut elite_opts = generic_opts.clone();
    elite_opts.build = Build::Elite(spec);
    let (_, stats) = Compiler::new(host)
        .unwrap()
        .compile(&insns, &elite_opts)
        .unwrap();
    let gmaps = MapSet::new(&object.maps).unwrap();
    let generic = compile(&insns, &generic_opts, &gmaps);
    let emaps = MapSet::new(&object.maps).unwrap();
    let elite = compile(&insns, &elite_opts, &emaps);
    let vm = Arc::new(Vm::new(&insns, &emaps, &Helpers::standard(), Config::default()).unwrap());
    // SAFETY: the elite artifact of the program, linked against emaps.
    let tier = unsafe { EliteTier::new(elite.entry(), vm, false).unchecked() };
    let mut run = RunState::new(0);
    let g = per_run(
        |i| {
            low.set(&frames[i % frames.len()]);
            let mut ctx = low.xdp_md();
            // SAFETY: real xdp_md.
            black_box(unsafe { generic.call(ctx.as_mut_ptr(), &mut run) });
        },
        || drain(&gmaps),
    );
    let mut state = DeoptRunState::boxed(0);
    let e = per_run(
        |i| {
            low.set(&frames[i % frames.len()]);
            let region = low.region();
            let mut ctx = low.xdp_md();
            // SAFETY: real xdp_md.
            let out = unsafe { tier.run_sync(&mut state, &mut ctx, Some(region), 0) };
            black_box(out.unwrap());
        },
        || drain(&emaps),
    );
    (g, e, stats.guards, stats.dropped_insns, tier.counts().1)
}
