//! The random-program generator of the JIT's differential tests (`differential.rs`, and the
//! aarch64 run of `aarch64_qemu.rs`): every register initialised, memory accesses in bounds of
//! a `MEM`-byte buffer (r1) or the stack, forward jumps only, so the interpreter accepts and
//! completes every program it builds.

use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Vm};
use rdx_bpf::isa::{AluOp, AtomicOp, ByteOrder, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width};
use rdx_bpf::maps::MapSet;
use rdx_jit::{Build, CompileOptions, Compiler, EntryAbi, ExecutableCode, Pipeline};
use rdx_region::abi::RunState;
use std::collections::HashMap;

pub const MEM: usize = 64;
/// Stack slots used: fp-8 .. fp-64.
const SLOTS: i16 = 8;

pub type Raw = (u8, u8, u8, i32, u16);

/// A second pointer into the frame, `r10 - 32`, set once: stack accesses through it reach
/// the frame the way compiled C does (a pointer derived from r10), which the JIT's stack
/// promotion must follow.
const FRAME_PTR: Reg = Reg(6);
const FRAME_PTR_OFF: i16 = -32;

fn reg_w(n: u8) -> Reg {
    // Writable registers: r0, r2..r5 and r7..r9 (r1 keeps the memory pointer, r6 the derived
    // frame pointer).
    Reg([0, 2, 3, 4, 5, 7, 8, 9][(n % 8) as usize])
}

/// Readable registers as data: the same set, since values derived from the memory and frame
/// pointers depend on where each tier placed that memory.
fn reg_r(n: u8) -> Reg {
    reg_w(n)
}

fn size(n: u8) -> Size {
    [Size::B, Size::H, Size::W, Size::DW][(n % 4) as usize]
}

pub fn build(raw: &[Raw]) -> Vec<Insn> {
    let mut p = Vec::new();
    // Initialise every register but r1 and every stack slot.
    p.push(Insn::Alu {
        width: Width::W64,
        op: AluOp::Mov,
        dst: FRAME_PTR,
        src: Operand::Reg(Reg(10)),
    });
    p.push(Insn::Alu {
        width: Width::W64,
        op: AluOp::Add,
        dst: FRAME_PTR,
        src: Operand::Imm(FRAME_PTR_OFF as i32),
    });
    for r in [0u8, 2, 3, 4, 5, 7, 8, 9] {
        p.push(Insn::Alu {
            width: Width::W64,
            op: AluOp::Mov,
            dst: Reg(r),
            src: Operand::Imm((r as i32) * 0x0123_4567 - 3),
        });
    }
    for s in 1..=SLOTS {
        p.push(Insn::Store {
            size: Size::DW,
            base: Reg(10),
            off: -8 * s,
            src: Operand::Reg(reg_w(s as u8)),
        });
    }
    let body_len = raw.len();
    for (i, &(kind, a, b, imm, extra)) in raw.iter().enumerate() {
        let width = if extra & 1 == 0 {
            Width::W64
        } else {
            Width::W32
        };
        let src = if extra & 2 == 0 {
            Operand::Reg(reg_r(b))
        } else {
            Operand::Imm(imm)
        };
        let insn = match kind % 12 {
            0..=3 => {
                let ops = [
                    AluOp::Add,
                    AluOp::Sub,
                    AluOp::Mul,
                    AluOp::Div,
                    AluOp::SDiv,
                    AluOp::Or,
                    AluOp::And,
                    AluOp::Lsh,
                    AluOp::Rsh,
                    AluOp::Neg,
                    AluOp::Mod,
                    AluOp::SMod,
                    AluOp::Xor,
                    AluOp::Mov,
                    AluOp::Arsh,
                ];
                let op = ops[(extra >> 2) as usize % ops.len()];
                let src = if op == AluOp::Neg {
                    Operand::Imm(0)
                } else {
                    src
                };
                // Small divisors (including 0 and -1) are the interesting ones.
                let src = match (op, src) {
                    (AluOp::Div | AluOp::SDiv | AluOp::Mod | AluOp::SMod, Operand::Imm(k)) => {
                        Operand::Imm(k % 4 - 1)
                    }
                    (_, s) => s,
                };
                Insn::Alu {
                    width,
                    op,
                    dst: reg_w(a),
                    src,
                }
            }
            4 => {
                let bits = [8u8, 16, 32][(extra >> 2) as usize % 3];
                let width = if bits == 32 { Width::W64 } else { width };
                Insn::Alu {
                    width,
                    op: AluOp::MovSx(bits),
                    dst: reg_w(a),
                    src: Operand::Reg(reg_r(b)),
                }
            }
            5 => {
                let order =
                    [ByteOrder::ToLe, ByteOrder::ToBe, ByteOrder::Swap][(extra >> 2) as usize % 3];
                Insn::Endian {
                    order,
                    bits: [16, 32, 64][(imm as u32 % 3) as usize],
                    dst: reg_w(a),
                }
            }
            6 | 7 => {
                let conds = [
                    JmpCond::Eq,
                    JmpCond::Gt,
                    JmpCond::Ge,
                    JmpCond::Set,
                    JmpCond::Ne,
                    JmpCond::Sgt,
                    JmpCond::Sge,
                    JmpCond::Lt,
                    JmpCond::Le,
                    JmpCond::Slt,
                    JmpCond::Sle,
                ];
                let left = (body_len - i - 1) as i16;
                let off = if left == 0 {
                    0
                } else {
                    (extra >> 4) as i16 % (left + 1)
                };
                let src = match src {
                    Operand::Imm(k) => Operand::Imm(k % 8),
                    s => s,
                };
                Insn::Jmp {
                    width,
                    cond: conds[(extra >> 2) as usize % conds.len()],
                    dst: reg_r(a),
                    src,
                    off,
                }
            }
            8 => {
                let sz = size(b);
                let (base, off) = mem_slot(extra, sz);
                Insn::Load {
                    size: sz,
                    sign_extend: sz != Size::DW && imm & 1 == 1,
                    dst: reg_w(a),
                    base,
                    off,
                }
            }
            9 => {
                let sz = size(b);
                let (base, off) = mem_slot(extra, sz);
                let src = if imm & 1 == 0 {
                    Operand::Reg(reg_r(a))
                } else {
                    Operand::Imm(imm)
                };
                Insn::Store {
                    size: sz,
                    base,
                    off,
                    src,
                }
            }
            10 => {
                let sz = if b & 1 == 0 { Size::W } else { Size::DW };
                let (base, off) = mem_slot(extra, sz);
                let ops = [
                    AtomicOp::Add,
                    AtomicOp::Or,
                    AtomicOp::And,
                    AtomicOp::Xor,
                    AtomicOp::Xchg,
                    AtomicOp::CmpXchg,
                ];
                let op = ops[(imm as u32 % 6) as usize];
                let fetch = matches!(op, AtomicOp::Xchg | AtomicOp::CmpXchg) || imm & 8 != 0;
                Insn::Atomic {
                    size: sz,
                    op,
                    fetch,
                    base,
                    off,
                    src: reg_w(a),
                }
            }
            _ => {
                p.push(Insn::LoadImm64 {
                    dst: reg_w(a),
                    kind: ImmKind::Imm,
                    imm_lo: imm,
                    imm_hi: (extra as i32).wrapping_mul(0x10001),
                });
                Insn::LoadImm64Hi
            }
        };
        p.push(insn);
    }
    // Fold the stack into r0 so that stack contents are compared too.
    for s in 1..=SLOTS {
        p.push(Insn::Load {
            size: Size::DW,
            sign_extend: false,
            dst: Reg(2),
            base: Reg(10),
            off: -8 * s,
        });
        p.push(Insn::Alu {
            width: Width::W64,
            op: AluOp::Mul,
            dst: Reg(0),
            src: Operand::Imm(31),
        });
        p.push(Insn::Alu {
            width: Width::W64,
            op: AluOp::Xor,
            dst: Reg(0),
            src: Operand::Reg(Reg(2)),
        });
    }
    p.push(Insn::Exit);
    fix_jumps(p)
}

/// An aligned, in-bounds slot in the memory buffer (via r1) or the stack (via r10, or via
/// the derived frame pointer r6 = r10 - 32).
fn mem_slot(extra: u16, sz: Size) -> (Reg, i16) {
    let n = sz.bytes() as i16;
    if extra & 0x100 == 0 {
        (Reg(1), ((extra >> 9) as i16 % (MEM as i16 / n)) * n)
    } else {
        let off = -(((extra >> 9) as i16 % (SLOTS * 8 / n)) + 1) * n;
        if extra & 0x8000 == 0 {
            (Reg(10), off)
        } else {
            (FRAME_PTR, off - FRAME_PTR_OFF)
        }
    }
}

/// A jump offset counted in generated instructions must not land on an lddw's second slot;
/// move such targets one slot on.
fn fix_jumps(mut p: Vec<Insn>) -> Vec<Insn> {
    for pc in 0..p.len() {
        if let Insn::Jmp { off, .. } = p[pc] {
            let t = pc as i64 + 1 + off as i64;
            if p.get(t as usize) == Some(&Insn::LoadImm64Hi) {
                if let Insn::Jmp { off, .. } = &mut p[pc] {
                    *off += 1;
                }
            }
        }
    }
    p
}

pub fn interpret(insns: &[Insn], mem: &mut [u8]) -> u64 {
    let vm = Vm::new(
        insns,
        &MapSet::default(),
        &Helpers::empty(),
        Config::default(),
    )
    .expect("prepare");
    vm.run_checked(Input::Bytes(mem))
        .expect("generated programs run cleanly")
}

/// Runs `insns` through `pipeline`; returns r0 and the budget left.
pub fn jit(
    compiler: &Compiler,
    pipeline: Pipeline,
    insns: &[Insn],
    mem: &mut [u8],
    needs_budget: bool,
) -> (u64, u64) {
    let mut opts = CompileOptions::new(compiler.arch(), Build::Generic);
    opts.entry_abi = EntryAbi::WithLength;
    opts.needs_budget = needs_budget;
    opts.pipeline = pipeline;
    let (artifact, _) = compiler.compile(insns, &opts).expect("compile");
    let code =
        ExecutableCode::load(&artifact, &HashMap::<rdx_jit::Symbol, u64>::new()).expect("load");
    let mut run = RunState::new(1 << 20);
    // SAFETY: generated programs only touch `mem` (via r1) and their stack, in bounds.
    let r0 = unsafe { code.call_with_len(mem.as_mut_ptr(), &mut run, mem.len() as u64) };
    assert_eq!(run.status, 0);
    (r0, run.budget)
}
