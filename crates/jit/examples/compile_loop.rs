//! Compiles the benchmark kernels and a synthetic program in a loop, for profiling the
//! compiler with `perf record`: `cargo run --release -p rdx-jit --example compile_loop -- SECONDS`.

use std::time::{Duration, Instant};

use rdx_bpf::isa::{AluOp, Insn, JmpCond, Operand, Reg, Width};
use rdx_jit::{Arch, CompileOptions, Compiler};

fn synthetic(n: usize) -> Vec<Insn> {
    let mut p = Vec::with_capacity(n + 1);
    for r in 0..10u8 {
        p.push(Insn::Alu {
            width: Width::W64,
            op: AluOp::Mov,
            dst: Reg(r),
            src: Operand::Imm(r as i32 + 1),
        });
    }
    let ops = [
        AluOp::Add,
        AluOp::Xor,
        AluOp::Mul,
        AluOp::Lsh,
        AluOp::Sub,
        AluOp::Or,
    ];
    while p.len() < n {
        let i = p.len();
        if i % 7 == 0 && p.len() + 3 < n {
            p.push(Insn::Jmp {
                width: Width::W64,
                cond: JmpCond::Gt,
                dst: Reg((i % 10) as u8),
                src: Operand::Imm(1000),
                off: 2,
            });
        } else {
            p.push(Insn::Alu {
                width: if i % 3 == 0 { Width::W32 } else { Width::W64 },
                op: ops[i % ops.len()],
                dst: Reg((i % 10) as u8),
                src: if i % 2 == 0 {
                    Operand::Reg(Reg(((i / 3) % 10) as u8))
                } else {
                    Operand::Imm((i % 31) as i32)
                },
            });
        }
    }
    p.push(Insn::Exit);
    p
}

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
    let mut progs: Vec<Vec<Insn>> = object.programs.iter().map(|p| p.insns.clone()).collect();
    progs.push(synthetic(1000));
    let compiler = Compiler::new(host).unwrap();
    let mut opts = CompileOptions::new(host);
    opts.inline_array_lookups(&object.maps);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let (mut insns, mut took, mut rounds) = (0usize, Duration::ZERO, 0);
    while Instant::now() < deadline {
        for p in &progs {
            let t = cpu_now();
            compiler.compile(p, &opts).unwrap();
            took += cpu_now() - t;
            insns += p.len();
        }
        rounds += 1;
    }
    println!(
        "{rounds} rounds, {insns} insns, {:.3} ms per 1K insns",
        took.as_secs_f64() * 1e3 / insns as f64 * 1000.0
    );
}
