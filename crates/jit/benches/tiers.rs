//! Time per run of the benchmark kernels (`bpf/jit/bench.c`) in every tier, measured in one
//! run and printed as ratios: rdx's JIT, rdx's interpreter, the kernel's JIT (through
//! `BPF_PROG_TEST_RUN` with repeat, which reports the mean duration) and the same logic in C
//! (`benches/native.c`) built with `cc -O2` at start; rdx's JIT in its three pipelines
//! (optimizing, Cranelift's fast pipeline, the baseline tier). Also compile time per 1K
//! instructions for the three pipelines, and the one-shot cost of a fresh process compiling
//! one small program (this binary re-run with `--one-shot <tier>`).
//!
//! `cargo bench -p rdx-jit --bench tiers`. Every tier's first result is checked against the
//! others before anything is timed. The kernel column is skipped, with the reason printed,
//! when `bpf()` is unavailable; the C column when no C compiler is found.

use std::collections::HashMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rdx_bpf::helpers::{native_helper, Helpers};
use rdx_bpf::interp::{Config, Input, Vm, XdpMd};
use rdx_bpf::isa::Insn;
use rdx_bpf::maps::MapSet;
use rdx_jit::{Arch, Build, CompileOptions, Compiler, ExecutableCode, Pipeline, Symbol};
use rdx_kernel::{KernelObject, TestRunInput};
use rdx_region::abi::RunState;
use rdx_test_support::programs::synthetic;

const KERNELS: [&str; 5] = ["hash_loop", "checksum", "parse", "small_sort", "map_loop"];
const TARGET_TIME: Duration = Duration::from_millis(300);

type NativeFn = unsafe extern "C" fn(*const u8, *const u8) -> u32;

fn frame() -> Vec<u8> {
    let mut f = vec![
        0x02, 0x66, 0x77, 0x88, 0x99, 0xaa, 0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
    ];
    f.extend_from_slice(&[0x81, 0x00, 0x00, 0x64, 0x08, 0x00]);
    let payload_len = 1500 - 18 - 20 - 8;
    let mut ip = vec![
        0x45, 0, 0, 0, 0x1c, 0x46, 0x40, 0, 64, 17, 0, 0, 192, 168, 1, 10, 10, 0, 0, 77,
    ];
    ip[2..4].copy_from_slice(&((20 + 8 + payload_len) as u16).to_be_bytes());
    f.extend(ip);
    f.extend_from_slice(&[0x9c, 0x40, 0, 53, 0, 0, 0, 0]);
    f.extend((0..payload_len as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    f
}

/// CPU time of this thread. User-space tiers are timed in CPU time, not wall-clock, so that
/// time spent descheduled on a busy machine is excluded, as the kernel's
/// `BPF_PROG_TEST_RUN` timer excludes it around rescheduling.
#[derive(Clone, Copy)]
struct CpuClock(Duration);

impl CpuClock {
    fn now() -> Self {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec out-pointer and a clock every Linux provides.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        CpuClock(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }

    fn elapsed(self) -> Duration {
        Self::now().0.saturating_sub(self.0)
    }
}

/// Batches timed per tier; each tier's figure is its fastest batch.
const BATCHES: u32 = 7;

/// Runs `f` in [`BATCHES`] batches that together fill about [`TARGET_TIME`] of CPU time;
/// mean time per call in the fastest batch. On a shared machine the fastest batch is the
/// one least disturbed by other work (cache and sibling-thread contention inflate CPU time
/// too), and every tier is measured the same way.
fn time_per_run(mut f: impl FnMut() -> u64) -> Duration {
    let batch = TARGET_TIME / BATCHES;
    let mut n: u64 = 16;
    loop {
        let start = CpuClock::now();
        for _ in 0..n {
            black_box(f());
        }
        let took = start.elapsed();
        if took >= batch / 4 || n >= 1 << 26 {
            let scale = (batch.as_secs_f64() / took.as_secs_f64()).max(1.0);
            let n2 = (n as f64 * scale) as u64;
            return (0..BATCHES)
                .map(|_| {
                    let start = CpuClock::now();
                    for _ in 0..n2 {
                        black_box(f());
                    }
                    start.elapsed() / n2 as u32
                })
                .min()
                .unwrap();
        }
        n *= 4;
    }
}

/// The packet below 4 GiB, so that `xdp_md`'s 32-bit data fields hold real pointers.
struct LowPacket {
    ptr: *mut u8,
    len: usize,
}

impl LowPacket {
    fn new(bytes: &[u8]) -> Self {
        // SAFETY: fresh anonymous mapping in the low 2 GiB.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                1 << 16,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_32BIT,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the mapping holds 64 KiB, the frame is 1.5 KiB.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast(), bytes.len()) };
        LowPacket {
            ptr: p.cast(),
            len: bytes.len(),
        }
    }

    fn xdp_md(&self) -> [u32; 6] {
        let data = self.ptr as u64 as u32;
        [data, data + self.len as u32, data, 1, 0, 0]
    }
}

fn build_native() -> Result<PathBuf, String> {
    let out = std::env::temp_dir().join(format!("rdx_jit_native_{}.so", std::process::id()));
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/native.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(src)
        .status()
        .map_err(|e| format!("{cc}: {e}"))?;
    if !st.success() {
        return Err(format!("{cc} failed"));
    }
    Ok(out)
}

fn load_native(path: &Path) -> HashMap<&'static str, NativeFn> {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: loading the library we just built; symbols are looked up by their C names.
    unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null(), "dlopen {}", path.display());
        KERNELS
            .iter()
            .map(|k| {
                let name = std::ffi::CString::new(*k).unwrap();
                let f = libc::dlsym(h, name.as_ptr());
                assert!(!f.is_null(), "dlsym {k}");
                (*k, std::mem::transmute::<*mut libc::c_void, NativeFn>(f))
            })
            .collect()
    }
}

fn ns(d: Duration) -> f64 {
    d.as_secs_f64() * 1e9
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--one-shot") {
        one_shot_child(args.get(i + 1).map_or("optimizing", |s| s.as_str()));
        return;
    }
    let host = Arch::host().expect("supported host");
    let object_bytes = rdx_testdata::object("jit/bench");
    let object = rdx_bpf::loader::load(&object_bytes).expect("load bench object");
    let frame = frame();
    let packet = LowPacket::new(&frame);
    let compiler = Compiler::new(host).unwrap();
    if std::env::var("RDX_BENCH").is_ok_and(|v| v == "blinding") {
        blinding_table(&compiler, &object, &packet);
        return;
    }

    let kernel = match rdx_kernel::probe() {
        Ok(()) => match KernelObject::open(rdx_testdata::object_path("jit/bench")) {
            Ok(k) => Some(k),
            Err(e) => {
                println!("kernel column skipped: {e}");
                None
            }
        },
        Err(e) => {
            println!("kernel column skipped: {e}");
            None
        }
    };
    let native = match build_native() {
        Ok(p) => Some(load_native(&p)),
        Err(e) => {
            println!("C column skipped: {e}");
            None
        }
    };

    println!(
        "\n{:<11} {:>6} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "kernel",
        "insns",
        "rdx JIT",
        "JIT-call",
        "JIT-fast",
        "JIT-base",
        "interp",
        "kernel JIT",
        "C -O2",
        "interp/",
        "kernel/",
        "JIT/C",
        "base/",
        "kernel/"
    );
    println!(
        "{:<11} {:>6} {:>10} {:>10} {:>10} {:>10} {:>11} {:>11} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "", "", "ns/run", "ns/run", "ns/run", "ns/run", "ns/run", "ns/run", "ns/run", "JIT", "JIT", "", "JIT", "base"
    );
    let mut compile_total = Duration::ZERO;
    let mut compile_insns = 0usize;
    for name in KERNELS {
        let prog = object.program(name).expect("program in bench object");
        // rdx JIT, array lookups inlined (the bench's default) and, as the baseline, calling
        // the lookup helper.
        let mut opts = CompileOptions::new(host, Build::Generic);
        opts.inline_array_lookups(&object.maps);
        let call_opts = CompileOptions::new(host, Build::Generic);
        let symbols_for = |maps: &MapSet| {
            let mut syms: HashMap<Symbol, u64> = HashMap::new();
            for (i, m) in maps.iter().enumerate() {
                syms.insert(Symbol::Map(i as u32), m.address());
                if let Some(v) = m.value_address(0) {
                    syms.insert(Symbol::MapValue(i as u32), v);
                }
            }
            for id in 1..=8 {
                if let Some(f) = native_helper(id) {
                    syms.insert(Symbol::Helper(id as u32), f as *const () as u64);
                }
            }
            syms
        };
        let jit_maps = MapSet::new(&object.maps).unwrap();
        let syms = symbols_for(&jit_maps);
        let call_maps = MapSet::new(&object.maps).unwrap();
        let call_syms = symbols_for(&call_maps);
        let (call_artifact, _) = compiler.compile(&prog.insns, &call_opts).expect("compile");
        let call_code = ExecutableCode::load(&call_artifact, &call_syms).expect("load");
        let mut call_ctx = packet.xdp_md();
        let mut call_run_state = RunState::new(0);
        // SAFETY: as for the inlined build below.
        let mut call_run =
            || unsafe { call_code.call(call_ctx.as_mut_ptr().cast(), &mut call_run_state) };
        let call_first = call_run() as u32;
        let t = CpuClock::now();
        let (artifact, stats) = compiler.compile(&prog.insns, &opts).expect("compile");
        compile_total += t.elapsed();
        compile_insns += stats.insns;
        let code = ExecutableCode::load(&artifact, &syms).expect("load");
        let mut ctx = packet.xdp_md();
        let mut run = RunState::new(0);
        // SAFETY: the kernel verified this program; ctx and packet are laid out as it expects.
        let mut jit_run = || unsafe { code.call(ctx.as_mut_ptr().cast(), &mut run) };
        let jit_first = jit_run() as u32;

        // The same build through Cranelift's fast pipeline.
        let mut fast_opts = opts.clone();
        fast_opts.pipeline = Pipeline::Fast;
        let fast_maps = MapSet::new(&object.maps).unwrap();
        let fast_syms = symbols_for(&fast_maps);
        let (fast_artifact, _) = compiler.compile(&prog.insns, &fast_opts).expect("compile");
        let fast_code = ExecutableCode::load(&fast_artifact, &fast_syms).expect("load");
        let mut fast_ctx = packet.xdp_md();
        let mut fast_run_state = RunState::new(0);
        // SAFETY: as for the inlined build above.
        let mut fast_run =
            || unsafe { fast_code.call(fast_ctx.as_mut_ptr().cast(), &mut fast_run_state) };
        let fast_first = fast_run() as u32;

        // The same build through the baseline tier.
        let mut base_opts = opts.clone();
        base_opts.pipeline = Pipeline::Baseline;
        let base_maps = MapSet::new(&object.maps).unwrap();
        let base_syms = symbols_for(&base_maps);
        let (base_artifact, _) = compiler.compile(&prog.insns, &base_opts).expect("compile");
        let base_code = ExecutableCode::load(&base_artifact, &base_syms).expect("load");
        let mut base_ctx = packet.xdp_md();
        let mut base_run_state = RunState::new(0);
        // SAFETY: as for the inlined build above.
        let mut base_run =
            || unsafe { base_code.call(base_ctx.as_mut_ptr().cast(), &mut base_run_state) };
        let base_first = base_run() as u32;

        // Interpreter.
        let interp_maps = MapSet::new(&object.maps).unwrap();
        let vm = Vm::new(
            &prog.insns,
            &interp_maps,
            &Helpers::standard(),
            Config::default(),
        )
        .unwrap();
        let mut xdp = XdpMd::new(frame.clone());
        let interp_first = vm.run_checked(Input::Context(&mut xdp)).unwrap() as u32;

        // C.
        let c_fn = native.as_ref().map(|n| n[name]);
        let (start, end) = (frame.as_ptr(), frame.as_ptr().wrapping_add(frame.len()));
        // SAFETY: the C kernels read within [start, end).
        let c_first = c_fn.map(|f| unsafe { f(start, end) });

        // Kernel (fresh object state for the check, as for the others).
        let kprog = kernel
            .as_ref()
            .map(|k| k.program(name).expect("kernel program"));
        let kernel_first = kprog.map(|p| {
            p.test_run(&TestRunInput::packet(&frame))
                .expect("kernel test run")
                .retval
        });

        let mut agree = jit_first == interp_first
            && call_first == jit_first
            && fast_first == jit_first
            && base_first == jit_first;
        agree &= c_first.is_none_or(|c| c == jit_first);
        agree &= kernel_first.is_none_or(|k| k == jit_first);
        if !agree {
            println!(
                "{name}: RESULTS DIFFER: jit {jit_first:#x} jit-call {call_first:#x} jit-fast {fast_first:#x} jit-base {base_first:#x} interp {interp_first:#x} C {c_first:x?} kernel {kernel_first:x?}"
            );
        }

        let jit = time_per_run(&mut jit_run);
        let jit_call = time_per_run(&mut call_run);
        let jit_fast = time_per_run(&mut fast_run);
        let jit_base = time_per_run(&mut base_run);
        let interp = time_per_run(|| {
            let mut xdp = XdpMd::new(frame.clone());
            // SAFETY: verified by the kernel and already run in checked mode.
            unsafe { vm.run_unchecked(Input::Context(&mut xdp)) }.unwrap()
        });
        let c = c_fn.map(|f| {
            // SAFETY: as above.
            time_per_run(|| unsafe { f(black_box(start), black_box(end)) } as u64)
        });
        // The kernel reports the mean of each test run: the fastest of as many batches.
        let kern = kprog.map(|p| {
            (0..BATCHES)
                .map(|_| {
                    p.test_run(&TestRunInput {
                        data_in: &frame,
                        ctx_in: None,
                        repeat: 200_000 / BATCHES,
                    })
                    .expect("kernel test run")
                    .duration
                })
                .min()
                .unwrap()
        });
        let fmt = |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{:.1}", ns(d)));
        let ratio = |a: Option<Duration>, b: Duration| {
            a.map_or("-".to_string(), |a| format!("{:.2}x", ns(a) / ns(b)))
        };
        println!(
            "{:<11} {:>6} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>11.1} {:>11} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
            name,
            prog.insns.len(),
            ns(jit),
            ns(jit_call),
            ns(jit_fast),
            ns(jit_base),
            ns(interp),
            fmt(kern),
            fmt(c),
            ratio(Some(interp), jit),
            ratio(kern, jit),
            c.map_or("-".to_string(), |c| format!("{:.2}x", ns(jit) / ns(c))),
            ratio(Some(jit_base), jit),
            ratio(kern, jit_base),
        );
    }
    println!("(rdx JIT inlines array lookups; JIT-call is the same JIT calling the lookup helper;");
    println!(" JIT-fast is rdx JIT's build through Cranelift's fast pipeline, Pipeline::Fast;");
    println!(" JIT-base through the baseline tier, Pipeline::Baseline; base/JIT above 1 means the");
    println!(" baseline code is slower than the optimizing tier's, kernel/base above 1 that it is");
    println!(" faster than the kernel's JIT)");
    println!("(interp/JIT and kernel/JIT above 1 mean rdx's JIT is faster; JIT/C is rdx's JIT time over gcc -O2's)");
    println!("(the interpreter's time includes building its xdp_md context model for each run)");

    println!("(user-space tiers in thread CPU time; the kernel's own timer excludes rescheduling;");
    println!(" every tier: the fastest of {BATCHES} batches)");
    println!("\ncompile time ({host}, thread CPU time, best of 5; ms per 1K eBPF insns):");
    println!(
        "  first compile of the bench kernels above: {} insns in {:.3} ms = {:.3} ms per 1K",
        compile_insns,
        compile_total.as_secs_f64() * 1e3,
        compile_total.as_secs_f64() * 1e3 / compile_insns as f64 * 1000.0
    );
    // Real clang output: the bench kernels and every program of bpf/tests.
    let mut real: Vec<(Vec<Insn>, CompileOptions)> = Vec::new();
    let mut add_object = |obj: &rdx_bpf::program::Object| {
        for p in &obj.programs {
            let mut o = CompileOptions::new(host, Build::Generic);
            o.inline_array_lookups(&obj.maps);
            real.push((p.insns.clone(), o));
        }
    };
    add_object(&object);
    for name in rdx_testdata::objects_in("tests") {
        let bytes = rdx_testdata::object(&name);
        if let Ok(obj) = rdx_bpf::loader::load(&bytes) {
            add_object(&obj);
        }
    }
    let real_insns: usize = real.iter().map(|(p, _)| p.len()).sum();
    let synth: Vec<(usize, Vec<Insn>)> = [1_000usize, 10_000]
        .into_iter()
        .map(|n| (n, synthetic(n)))
        .collect();
    println!(
        "  {:<38} {:>12} {:>12} {:>12} {:>10} {:>10}",
        "", "optimizing", "fast", "baseline", "opt/base", "fast/base"
    );
    let best_of_5 = |f: &mut dyn FnMut()| {
        (0..5)
            .map(|_| {
                let t = CpuClock::now();
                f();
                t.elapsed()
            })
            .min()
            .unwrap()
    };
    let per_1k = |d: Duration, n: usize| d.as_secs_f64() * 1e3 / n as f64 * 1000.0;
    let row = |label: String, n: usize, progs: &[(Vec<Insn>, CompileOptions)]| {
        let times: Vec<Duration> = [Pipeline::Optimizing, Pipeline::Fast, Pipeline::Baseline]
            .into_iter()
            .map(|pipeline| {
                best_of_5(&mut || {
                    for (p, o) in progs {
                        let mut o = o.clone();
                        o.pipeline = pipeline;
                        compiler.compile(p, &o).expect("compile");
                    }
                })
            })
            .collect();
        println!(
            "  {:<38} {:>12.3} {:>12.3} {:>12.3} {:>9.1}x {:>9.1}x",
            label,
            per_1k(times[0], n),
            per_1k(times[1], n),
            per_1k(times[2], n),
            ns(times[0]) / ns(times[2]),
            ns(times[1]) / ns(times[2]),
        );
    };
    row(
        format!("{} clang programs ({real_insns} insns)", real.len()),
        real_insns,
        &real,
    );
    for (n, prog) in &synth {
        row(
            format!("synthetic {n}-insn function"),
            prog.len(),
            &[(prog.clone(), CompileOptions::new(host, Build::Generic))],
        );
    }
    let other = if host == Arch::X86_64 {
        Arch::Aarch64
    } else {
        Arch::X86_64
    };
    let cross = Compiler::new(other).unwrap();
    let prog = synthetic(10_000);
    let t = CpuClock::now();
    cross
        .compile(&prog, &CompileOptions::new(other, Build::Generic))
        .expect("cross compile");
    let cross_opt = t.elapsed();
    let mut base_opts = CompileOptions::new(other, Build::Generic);
    base_opts.pipeline = Pipeline::Baseline;
    let cross_base = best_of_5(&mut || {
        rdx_jit::compile(&prog, &base_opts).expect("cross compile");
    });
    println!(
        "  synthetic 10000 insns for {other} (cross): optimizing {:.3} ms (first), baseline {:.3} ms (best of 5)",
        cross_opt.as_secs_f64() * 1e3,
        cross_base.as_secs_f64() * 1e3
    );

    blinding_table(&compiler, &object, &packet);
    one_shot_table();
}

/// What constant blinding costs (`CompileOptions::blind_constants`, on by default; it
/// changes code only on x86-64): each kernel's run time in the optimizing and the baseline
/// tier with it on and off, and the compile time of the bench kernels, measured in this run.
/// `RDX_BENCH=blinding` runs only this table.
fn blinding_table(compiler: &Compiler, object: &rdx_bpf::program::Object, packet: &LowPacket) {
    let host = compiler.arch();
    println!("\nconstant blinding ({host}): ns/run with blinding on and off, same run");
    println!(
        "  {:<11} {:>10} {:>10} {:>8} {:>10} {:>10} {:>8}",
        "kernel", "opt blind", "opt plain", "ratio", "base blind", "base plain", "ratio"
    );
    let mut progs = Vec::new();
    for name in KERNELS {
        let prog = object.program(name).expect("program in bench object");
        let mut times = Vec::new();
        let mut firsts = Vec::new();
        for pipeline in [Pipeline::Optimizing, Pipeline::Baseline] {
            for blind in [true, false] {
                let mut opts = CompileOptions::new(host, Build::Generic);
                opts.inline_array_lookups(&object.maps);
                opts.pipeline = pipeline;
                opts.blind_constants = blind;
                if pipeline == Pipeline::Optimizing && blind {
                    progs.push((prog.insns.clone(), opts.clone()));
                }
                let maps = MapSet::new(&object.maps).unwrap();
                let mut syms: HashMap<Symbol, u64> = HashMap::new();
                for (i, m) in maps.iter().enumerate() {
                    syms.insert(Symbol::Map(i as u32), m.address());
                    if let Some(v) = m.value_address(0) {
                        syms.insert(Symbol::MapValue(i as u32), v);
                    }
                }
                for id in 1..=8 {
                    if let Some(f) = native_helper(id) {
                        syms.insert(Symbol::Helper(id as u32), f as *const () as u64);
                    }
                }
                let (artifact, _) = compiler.compile(&prog.insns, &opts).expect("compile");
                let code = ExecutableCode::load(&artifact, &syms).expect("load");
                let mut ctx = packet.xdp_md();
                let mut run = RunState::new(0);
                // SAFETY: the kernel verified this program; ctx and packet are laid out as
                // it expects.
                let mut f = || unsafe { code.call(ctx.as_mut_ptr().cast(), &mut run) };
                firsts.push(f() as u32);
                times.push(time_per_run(&mut f));
            }
        }
        if firsts.iter().any(|&r| r != firsts[0]) {
            println!("  {name}: RESULTS DIFFER: {firsts:x?}");
        }
        println!(
            "  {:<11} {:>10.1} {:>10.1} {:>7.2}x {:>10.1} {:>10.1} {:>7.2}x",
            name,
            ns(times[0]),
            ns(times[1]),
            ns(times[0]) / ns(times[1]),
            ns(times[2]),
            ns(times[3]),
            ns(times[2]) / ns(times[3]),
        );
    }
    let insns: usize = progs.iter().map(|(p, _)| p.len()).sum();
    for pipeline in [Pipeline::Optimizing, Pipeline::Baseline] {
        let mut per_1k = [0.0f64; 2];
        for (i, blind) in [true, false].into_iter().enumerate() {
            let best = (0..5)
                .map(|_| {
                    let t = CpuClock::now();
                    for (p, o) in &progs {
                        let mut o = o.clone();
                        o.pipeline = pipeline;
                        o.blind_constants = blind;
                        compiler.compile(p, &o).expect("compile");
                    }
                    t.elapsed()
                })
                .min()
                .unwrap();
            per_1k[i] = best.as_secs_f64() * 1e3 / insns as f64 * 1000.0;
        }
        println!(
            "  compile {pipeline:?}, bench kernels ({insns} insns): {:.3} ms per 1K blinded, {:.3} plain ({:.2}x)",
            per_1k[0],
            per_1k[1],
            per_1k[0] / per_1k[1]
        );
    }
    println!("  (ratio above 1: blinding makes the code slower; thread CPU time, fastest of {BATCHES} batches)");
}

/// A small real program for the one-shot measurement: the longest program of 16 to 45
/// instruction slots in `bpf/jit/bench.c` and `bpf/tests`.
fn one_shot_program() -> (String, Vec<Insn>, CompileOptions) {
    let host = Arch::host().expect("supported host");
    let mut names = vec!["jit/bench".to_string()];
    names.extend(rdx_testdata::objects_in("tests"));
    let mut best: Option<(String, Vec<Insn>, CompileOptions)> = None;
    for name in names {
        let Ok(obj) = rdx_bpf::loader::load(&rdx_testdata::object(&name)) else {
            continue;
        };
        for p in &obj.programs {
            let n = p.insns.len();
            if (16..=45).contains(&n) && best.as_ref().is_none_or(|b| b.1.len() < n) {
                let mut o = CompileOptions::new(host, Build::Generic);
                o.needs_budget = true;
                o.inline_array_lookups(&obj.maps);
                best = Some((format!("{name}/{}", p.name), p.insns.clone(), o));
            }
        }
    }
    best.expect("a 16-45 instruction program in bpf/jit/bench.c or bpf/tests")
}

/// Child side of the one-shot measurement: load the program, compile it once with `tier`
/// (`none`: do not compile) the way a one-shot tool does (a fresh compiler, serialised
/// artifact), print the thread CPU time of that compile in ns.
fn one_shot_child(tier: &str) {
    let (_, insns, mut opts) = one_shot_program();
    let t = CpuClock::now();
    match tier {
        "none" => {}
        "baseline" => {
            opts.pipeline = Pipeline::Baseline;
            black_box(rdx_jit::compile(&insns, &opts).expect("compile").to_bytes());
        }
        _ => {
            black_box(rdx_jit::compile(&insns, &opts).expect("compile").to_bytes());
        }
    }
    println!("{}", t.elapsed().as_nanos());
}

/// The per-process cost of a one-shot compile (what `rdx compile` or `rdx deploy` pays for
/// one small program): this binary re-run with `--one-shot <tier>`, wall time from spawn to
/// exit and the child's own CPU time for the compile, fastest of 15 runs each, the runs of
/// the three tiers interleaved.
fn one_shot_table() {
    let (name, insns, _) = one_shot_program();
    let exe = std::env::current_exe().expect("own path");
    let tiers = ["none", "baseline", "optimizing"];
    let mut wall = [Duration::MAX; 3];
    let mut cpu = [Duration::MAX; 3];
    for _ in 0..15 {
        for (i, tier) in tiers.iter().enumerate() {
            let t = std::time::Instant::now();
            let out = Command::new(&exe)
                .args(["--one-shot", tier])
                .output()
                .expect("run the one-shot child");
            let took = t.elapsed();
            assert!(out.status.success(), "one-shot child {tier} failed");
            let ns: u64 = String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("child prints its compile time");
            wall[i] = wall[i].min(took);
            cpu[i] = cpu[i].min(Duration::from_nanos(ns));
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "\none-shot compile in a fresh process ({name}, {} insns; fastest of 15):",
        insns.len()
    );
    println!(
        "  {:<12} {:>14} {:>18} {:>16}",
        "tier", "process (ms)", "process - none", "compile CPU (ms)"
    );
    for i in 0..3 {
        println!(
            "  {:<12} {:>14.3} {:>18.3} {:>16.3}",
            tiers[i],
            ms(wall[i]),
            ms(wall[i].saturating_sub(wall[0])),
            ms(cpu[i])
        );
    }
    println!(
        "  (compile CPU: a fresh compiler, the compile and the serialised artifact; optimizing/baseline = {:.0}x)",
        ns(cpu[2]) / ns(cpu[1]).max(1.0)
    );
}
