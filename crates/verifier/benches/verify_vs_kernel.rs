//! Verification time of generated XDP programs of about 1K, 10K and 100K instructions, against
//! the kernel's load time (verification plus JIT, `BPF_PROG_LOAD`) for the same instructions in
//! the same run, printed as ratios. Run: `cargo bench -p rdx-verifier --bench verify_vs_kernel`.
//!
//! The programs have the shapes of real packet code: bounds checks against `data_end`, loads of
//! packet bytes, branches on them, arithmetic, and a map lookup with a null check and an update
//! every few blocks.

use rdx_bpf::isa::{AluOp, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width};
use rdx_bpf::{MapDef, MapOrigin, Program};
use rdx_region::layout::MapType;
use rdx_verifier::{verify_insns, KernelProgType, VerifyOptions};
use std::time::{Duration, Instant};

fn alu(op: AluOp, dst: u8, src: Operand) -> Insn {
    Insn::Alu {
        width: Width::W64,
        op,
        dst: Reg(dst),
        src,
    }
}

fn generate(target: usize) -> Vec<Insn> {
    let mut p = vec![
        Insn::Load {
            size: Size::W,
            sign_extend: false,
            dst: Reg(7),
            base: Reg(1),
            off: 0,
        },
        Insn::Load {
            size: Size::W,
            sign_extend: false,
            dst: Reg(8),
            base: Reg(1),
            off: 4,
        },
        alu(AluOp::Mov, 9, Operand::Imm(0)),
        alu(AluOp::Mov, 6, Operand::Imm(1)),
        alu(AluOp::Mov, 2, Operand::Reg(Reg(7))),
        alu(AluOp::Add, 2, Operand::Imm(64)),
    ];
    // if data + 64 > data_end: return XDP_PASS
    p.push(Insn::Jmp {
        width: Width::W64,
        cond: JmpCond::Le,
        dst: Reg(2),
        src: Operand::Reg(Reg(8)),
        off: 2,
    });
    p.push(alu(AluOp::Mov, 0, Operand::Imm(2)));
    p.push(Insn::Exit);
    let mut i: i32 = 0;
    while p.len() + 24 < target {
        let off = (i * 7 % 60) as i16;
        p.push(Insn::Load {
            size: Size::B,
            sign_extend: false,
            dst: Reg(3),
            base: Reg(7),
            off,
        });
        p.push(Insn::Jmp {
            width: Width::W64,
            cond: JmpCond::Gt,
            dst: Reg(3),
            src: Operand::Imm(i * 13 % 250),
            off: 2,
        });
        p.push(alu(AluOp::Add, 9, Operand::Reg(Reg(3))));
        p.push(alu(AluOp::Xor, 9, Operand::Imm(i)));
        p.push(alu(AluOp::And, 9, Operand::Imm(0xffff)));
        // Straight-line arithmetic between branches, so that a 100K-instruction program stays
        // under the kernel's 8192 pending branches on one path.
        for k in 0..14 {
            let op = [
                AluOp::Add,
                AluOp::Mul,
                AluOp::Xor,
                AluOp::Rsh,
                AluOp::Or,
                AluOp::Sub,
                AluOp::Lsh,
            ][k % 7];
            p.push(alu(op, 6, Operand::Imm((k as i32 + i) % 13 + 1)));
        }
        p.push(alu(AluOp::Add, 9, Operand::Reg(Reg(6))));
        p.push(alu(AluOp::And, 9, Operand::Imm(0xffff)));
        if i % 8 == 7 {
            // key = r9 & 3 on the stack; v = lookup(table, &key); if v: *v += r9
            p.push(alu(AluOp::Mov, 3, Operand::Reg(Reg(9))));
            p.push(alu(AluOp::And, 3, Operand::Imm(3)));
            p.push(Insn::Store {
                size: Size::W,
                base: Reg(10),
                off: -4,
                src: Operand::Reg(Reg(3)),
            });
            p.push(alu(AluOp::Mov, 2, Operand::Reg(Reg(10))));
            p.push(alu(AluOp::Add, 2, Operand::Imm(-4)));
            p.push(Insn::LoadImm64 {
                dst: Reg(1),
                kind: ImmKind::MapIdx,
                imm_lo: 0,
                imm_hi: 0,
            });
            p.push(Insn::LoadImm64Hi);
            p.push(Insn::Call(CallTarget::Helper(1)));
            p.push(Insn::Jmp {
                width: Width::W64,
                cond: JmpCond::Eq,
                dst: Reg(0),
                src: Operand::Imm(0),
                off: 3,
            });
            p.push(Insn::Load {
                size: Size::DW,
                sign_extend: false,
                dst: Reg(4),
                base: Reg(0),
                off: 0,
            });
            p.push(alu(AluOp::Add, 4, Operand::Reg(Reg(9))));
            p.push(Insn::Store {
                size: Size::DW,
                base: Reg(0),
                off: 0,
                src: Operand::Reg(Reg(4)),
            });
        }
        i += 1;
    }
    p.push(alu(AluOp::Mov, 0, Operand::Imm(2)));
    p.push(Insn::Exit);
    p
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let maps = vec![MapDef {
        name: "table".into(),
        map_type: MapType::Array.into(),
        key_size: 4,
        value_size: 8,
        max_entries: 4,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    }];
    let opts = VerifyOptions::kernel(KernelProgType::Xdp);
    let kernel_maps = match rdx_kernel::create_maps(&maps) {
        Ok(m) => Some(m),
        Err(e) => {
            eprintln!("kernel baseline unavailable: {e}");
            None
        }
    };
    println!(
        "{:>8} {:>10} {:>14} {:>14} {:>10}",
        "insns", "processed", "rdx verify", "kernel load", "kernel/rdx"
    );
    for size in [1_000usize, 10_000, 100_000] {
        let insns = generate(size);
        let runs = if size >= 100_000 { 3 } else { 7 };
        let mut ours = Vec::new();
        let mut processed = 0;
        for _ in 0..runs {
            let t = Instant::now();
            let v = verify_insns(&insns, &maps, &opts).expect("generated programs verify");
            ours.push(t.elapsed());
            processed = v.processed_insns;
        }
        let ours = median(ours);
        let kernel = kernel_maps.as_ref().map(|km| {
            let prog = Program {
                name: "bench".into(),
                section: "xdp".into(),
                insns: insns.clone(),
            };
            let times: Vec<Duration> = (0..runs)
                .map(|_| {
                    let loaded =
                        rdx_kernel::load_linked(&prog, rdx_kernel::ProgType::Xdp, km, "GPL", 0)
                            .unwrap_or_else(|e| {
                                panic!("the kernel rejected the {size}-instruction program: {e}")
                            });
                    loaded.load_time
                })
                .collect();
            median(times)
        });
        match kernel {
            Some(k) => println!(
                "{:>8} {:>10} {:>12.3}ms {:>12.3}ms {:>9.1}x",
                insns.len(),
                processed,
                ours.as_secs_f64() * 1e3,
                k.as_secs_f64() * 1e3,
                k.as_secs_f64() / ours.as_secs_f64()
            ),
            None => println!(
                "{:>8} {:>10} {:>12.3}ms {:>14} {:>10}",
                insns.len(),
                processed,
                ours.as_secs_f64() * 1e3,
                "n/a",
                "n/a"
            ),
        }
    }
}
