//! Compiles the benchmark kernels and a synthetic program in a loop, for profiling the
//! compiler with `perf record`: `cargo run --release -p rdx-jit --example compile_loop -- SECONDS [real|synthetic] [fast|optimizing] [DUMP_DIR]`.

use std::time::{Duration, Instant};

use rdx_bpf::isa::Insn;
use rdx_jit::{Arch, Build, CompileOptions, Compiler};
use rdx_test_support::programs::synthetic;

fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let host = Arch::host().unwrap();
    let object = rdx_bpf::loader::load(&rdx_testdata::object("jit/bench")).unwrap();
    // Real clang output (the bench kernels and every program of bpf/tests) or, with
    // `synthetic` as the second argument, one synthetic 1K-instruction function.
    let mut progs: Vec<(Vec<Insn>, CompileOptions)> = Vec::new();
    if std::env::args().nth(2).as_deref() == Some("synthetic") {
        progs.push((synthetic(1000), CompileOptions::new(host, Build::Generic)));
    } else {
        let mut add = |obj: &rdx_bpf::program::Object| {
            for p in &obj.programs {
                let mut o = CompileOptions::new(host, Build::Generic);
                o.inline_array_lookups(&obj.maps);
                progs.push((p.insns.clone(), o));
            }
        };
        add(&object);
        for name in rdx_testdata::objects_in("tests") {
            if let Ok(obj) = rdx_bpf::loader::load(&rdx_testdata::object(&name)) {
                add(&obj);
            }
        }
    }
    if std::env::args().nth(3).as_deref() == Some("fast") {
        for (_, o) in &mut progs {
            o.pipeline = rdx_jit::Pipeline::Fast;
        }
    }
    let compiler = Compiler::new(host).unwrap();
    // `DUMP_DIR` as the fourth argument: write each program's machine code there once (for
    // objdump -D -b binary).
    if let Some(dir) = std::env::args().nth(4) {
        for (i, (p, opts)) in progs.iter().enumerate() {
            let (artifact, _) = compiler.compile(p, opts).unwrap();
            std::fs::write(format!("{dir}/{i:02}_{}.bin", p.len()), &artifact.code).unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let (mut insns, mut took, mut rounds) = (0usize, Duration::ZERO, 0);
    let round_insns: usize = progs.iter().map(|(p, _)| p.len()).sum();
    let mut fastest = Duration::MAX;
    while Instant::now() < deadline {
        let t = cpu_now();
        for (p, opts) in &progs {
            compiler.compile(p, opts).unwrap();
        }
        let round = cpu_now() - t;
        fastest = fastest.min(round);
        took += round;
        insns += round_insns;
        rounds += 1;
    }
    println!(
        "{rounds} rounds, {insns} insns, {:.3} ms per 1K insns (mean), {:.3} (fastest round)",
        took.as_secs_f64() * 1e3 / insns as f64 * 1000.0,
        fastest.as_secs_f64() * 1e3 / round_insns as f64 * 1000.0
    );
}
