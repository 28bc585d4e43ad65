//! Generated eBPF programs shaped like the ones the kernel's verifier scale tests use, for the
//! control plane's injection bench and the verifier's bench on the same programs: a loop of
//! map lookups, branches that give every path its own exact map-value offset (no path can be
//! pruned against another), prunable if/else chains, and unrolled arithmetic. Map 0 is an
//! array the caller defines (see each bench).

use rdx_bpf::isa::{AluOp, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width};

fn alu(op: AluOp, dst: u8, src: Operand) -> Insn {
    Insn::Alu {
        width: Width::W64,
        op,
        dst: Reg(dst),
        src,
    }
}
fn imm(v: i32) -> Operand {
    Operand::Imm(v)
}
fn reg(r: u8) -> Operand {
    Operand::Reg(Reg(r))
}
fn jmp(cond: JmpCond, dst: u8, src: Operand, off: i16) -> Insn {
    Insn::Jmp {
        width: Width::W64,
        cond,
        dst: Reg(dst),
        src,
        off,
    }
}

/// `r0 = lookup(map 0, key)`, null-checked: adds the value to r6.
fn map_access(out: &mut Vec<Insn>, key: i32) {
    out.push(Insn::Store {
        size: Size::W,
        base: Reg(10),
        off: -4,
        src: imm(key & 3),
    });
    out.push(alu(AluOp::Mov, 2, reg(10)));
    out.push(alu(AluOp::Add, 2, imm(-4)));
    out.push(Insn::LoadImm64 {
        dst: Reg(1),
        kind: ImmKind::MapIdx,
        imm_lo: 0,
        imm_hi: 0,
    });
    out.push(Insn::LoadImm64Hi);
    out.push(Insn::Call(CallTarget::Helper(1)));
    out.push(jmp(JmpCond::Eq, 0, imm(0), 2));
    out.push(Insn::Load {
        size: Size::DW,
        sign_extend: false,
        dst: Reg(1),
        base: Reg(0),
        off: 0,
    });
    out.push(alu(AluOp::Add, 6, reg(1)));
}

/// Body shapes.
#[derive(Clone, Copy)]
pub enum Shape {
    /// Mostly map lookups.
    MapAccesses,
    /// Mostly nested if/else chains on the unknown value.
    DeepBranching,
    /// Mostly straight-line arithmetic (an unrolled loop body).
    Unrolled,
}

/// One function `f(acc = r1, value = r2) -> acc'` of about `len` instructions.
fn function(len: usize, shape: Shape, seed: i32) -> Vec<Insn> {
    let mut f = vec![alu(AluOp::Mov, 6, reg(1)), alu(AluOp::Mov, 7, reg(2))];
    let mut i = seed;
    let mut step = 0usize;
    while f.len() + 3 < len {
        i = i.wrapping_mul(1_103_515_245).wrapping_add(12345) & 0x7fff;
        step += 1;
        // Every conditional jump on a path leaves one pending state in a depth-first
        // verifier until the path ends, and the path runs through every trip of the main
        // loop: the kernel caps that at 8192 pending branches. The mixes keep
        // branches-per-function x functions x trips well under it.
        let pick = match shape {
            Shape::MapAccesses => [0, 0, 2, 0, 2][step % 5],
            Shape::DeepBranching => [0, 1, 0, 2][step % 4],
            Shape::Unrolled => usize::from(step.is_multiple_of(32)) * 2,
        };
        match pick {
            0 => {
                f.push(alu(AluOp::Add, 6, reg(7)));
                f.push(alu(AluOp::Xor, 6, imm(i)));
                f.push(alu(AluOp::Mul, 6, imm(3)));
                f.push(alu(AluOp::Rsh, 6, imm(1)));
            }
            1 => {
                // t = v ^ a; if (t > a) { if (t & b) acc += 1 else acc -= 2 } else acc ^= c;
                // t is a scratch copy (the xor unlinks it from v, so v keeps its range) and
                // every arm clears it, so the states meeting at the join differ only in the
                // unknown accumulator and a verifier can prune there.
                f.push(alu(AluOp::Mov, 8, reg(7)));
                f.push(alu(AluOp::Xor, 8, imm(i)));
                f.push(jmp(JmpCond::Gt, 8, imm(i), 3));
                f.push(alu(AluOp::Xor, 6, imm(i | 1)));
                f.push(alu(AluOp::Mov, 8, imm(0)));
                f.push(Insn::Ja { off: 6 });
                f.push(jmp(JmpCond::Set, 8, imm(1 << (i % 16)), 3));
                f.push(alu(AluOp::Add, 6, imm(-2)));
                f.push(alu(AluOp::Mov, 8, imm(0)));
                f.push(Insn::Ja { off: 2 });
                f.push(alu(AluOp::Add, 6, imm(1)));
                f.push(alu(AluOp::Mov, 8, imm(0)));
            }
            _ => map_access(&mut f, i),
        }
    }
    f.push(alu(AluOp::Mov, 0, reg(6)));
    f.push(Insn::Exit);
    f
}

/// A program of about `functions * body` instructions whose main loop runs `trips` times.
pub fn generate(functions: usize, body: usize, trips: i32, shape: Shape) -> Vec<Insn> {
    let bodies: Vec<Vec<Insn>> = (0..functions)
        .map(|k| function(body, shape, 7 + k as i32))
        .collect();
    // main: value = map[0][0]; for (i = 0; i < trips; i++) acc = f_k(acc, value) for all k
    let mut main = vec![alu(AluOp::Mov, 6, imm(0))];
    main.push(Insn::Store {
        size: Size::W,
        base: Reg(10),
        off: -4,
        src: imm(0),
    });
    main.push(alu(AluOp::Mov, 2, reg(10)));
    main.push(alu(AluOp::Add, 2, imm(-4)));
    main.push(Insn::LoadImm64 {
        dst: Reg(1),
        kind: ImmKind::MapIdx,
        imm_lo: 0,
        imm_hi: 0,
    });
    main.push(Insn::LoadImm64Hi);
    main.push(Insn::Call(CallTarget::Helper(1)));
    let exit_jump = main.len();
    main.push(Insn::Exit); // placeholder: if r0 == 0 goto out
    main.push(Insn::Load {
        size: Size::DW,
        sign_extend: false,
        dst: Reg(7),
        base: Reg(0),
        off: 0,
    });
    main.push(alu(AluOp::Mov, 8, imm(0)));
    let loop_head = main.len();
    let mut calls = Vec::new();
    for _ in 0..functions {
        main.push(alu(AluOp::Mov, 1, reg(6)));
        main.push(alu(AluOp::Mov, 2, reg(7)));
        calls.push(main.len());
        main.push(Insn::Call(CallTarget::Local(0)));
        main.push(alu(AluOp::Mov, 6, reg(0)));
    }
    main.push(alu(AluOp::Add, 8, imm(1)));
    let back = main.len();
    main.push(jmp(
        JmpCond::Lt,
        8,
        imm(trips),
        (loop_head as i64 - back as i64 - 1) as i16,
    ));
    let out = main.len();
    main[exit_jump] = jmp(JmpCond::Eq, 0, imm(0), (out - exit_jump - 1) as i16);
    main.push(alu(AluOp::Mov, 0, reg(6)));
    main.push(alu(AluOp::And, 0, imm(1)));
    main.push(Insn::Exit);
    let mut prog = main;
    for (k, b) in bodies.into_iter().enumerate() {
        let start = prog.len();
        prog[calls[k]] = Insn::Call(CallTarget::Local((start - calls[k] - 1) as i32));
        prog.extend(b);
    }
    prog
}

/// A program whose paths the verifier cannot merge: `splits` branches on an unknown value
/// each add a distinct power of two to an offset `off`, so every path reaches the body with
/// a different constant `off`; the body then indexes a map value with `off` (pointer
/// arithmetic, so a verifier must keep `off` exact and cannot prune one path against
/// another) between bounds-checked loads at data-dependent offsets and branches on the
/// accumulator. Each of the `2^splits` paths is verified through the whole body, so the
/// instructions processed are about `2^splits * len`, as in the kernel's scale tests.
/// Inside one path the inner branches rejoin with equal states (their scratch registers
/// are cleared on both arms), so neither verifier explodes.
pub fn path_sensitive(len: usize, splits: u32, seed: i32) -> Vec<Insn> {
    let mut p = vec![
        alu(AluOp::Mov, 6, imm(0)),
        Insn::Store {
            size: Size::W,
            base: Reg(10),
            off: -4,
            src: imm(0),
        },
        alu(AluOp::Mov, 2, reg(10)),
        alu(AluOp::Add, 2, imm(-4)),
        Insn::LoadImm64 {
            dst: Reg(1),
            kind: ImmKind::MapIdx,
            imm_lo: 0,
            imm_hi: 0,
        },
        Insn::LoadImm64Hi,
        Insn::Call(CallTarget::Helper(1)),
    ];
    let exit_jump = p.len();
    p.push(Insn::Exit); // placeholder: if r0 == 0 goto out
    p.push(alu(AluOp::Mov, 9, reg(0)));
    p.push(Insn::Load {
        size: Size::DW,
        sign_extend: false,
        dst: Reg(7),
        base: Reg(9),
        off: 0,
    });
    p.push(alu(AluOp::Mov, 6, reg(7)));
    p.push(alu(AluOp::Mov, 8, imm(0)));
    for k in 0..splits {
        // if (v & 1 << k) off += 8 << k
        p.push(jmp(JmpCond::Set, 7, imm(1 << k), 1));
        p.push(Insn::Ja { off: 1 });
        p.push(alu(AluOp::Add, 8, imm(8 << k)));
    }
    let mut i = seed;
    let mut step = 0usize;
    while p.len() + 12 < len {
        i = i.wrapping_mul(1_103_515_245).wrapping_add(12345) & 0x7fff;
        step += 1;
        let slot = i16::try_from((i % 64) * 8).expect("small");
        match [0, 1, 2, 0, 3, 1, 0, 2][step % 8] {
            0 => {
                // acc += value[off + c]
                p.push(alu(AluOp::Mov, 1, reg(9)));
                p.push(alu(AluOp::Add, 1, reg(8)));
                p.push(Insn::Load {
                    size: Size::DW,
                    sign_extend: false,
                    dst: Reg(2),
                    base: Reg(1),
                    off: slot,
                });
                p.push(alu(AluOp::Add, 6, reg(2)));
                p.push(alu(AluOp::Xor, 6, imm(i)));
            }
            1 => {
                // value[off + c] = acc
                p.push(alu(AluOp::Mov, 1, reg(9)));
                p.push(alu(AluOp::Add, 1, reg(8)));
                p.push(Insn::Store {
                    size: Size::DW,
                    base: Reg(1),
                    off: slot,
                    src: reg(6),
                });
                p.push(alu(AluOp::Mul, 6, imm(3)));
            }
            2 => {
                // t = value[acc & 7]; if (t <= 63) acc ^= value[t * 8]: a bounds-checked
                // load at a data-dependent offset; t and the loaded word are cleared on both
                // arms so the arms rejoin with one state.
                p.push(alu(AluOp::Mov, 3, reg(6)));
                p.push(alu(AluOp::And, 3, imm(7)));
                p.push(alu(AluOp::Lsh, 3, imm(3)));
                p.push(alu(AluOp::Mov, 1, reg(9)));
                p.push(alu(AluOp::Add, 1, reg(3)));
                p.push(Insn::Load {
                    size: Size::DW,
                    sign_extend: false,
                    dst: Reg(3),
                    base: Reg(1),
                    off: 0,
                });
                p.push(jmp(JmpCond::Gt, 3, imm(63), 5));
                p.push(alu(AluOp::Lsh, 3, imm(3)));
                p.push(alu(AluOp::Mov, 1, reg(9)));
                p.push(alu(AluOp::Add, 1, reg(3)));
                p.push(Insn::Load {
                    size: Size::DW,
                    sign_extend: false,
                    dst: Reg(2),
                    base: Reg(1),
                    off: 0,
                });
                p.push(alu(AluOp::Xor, 6, reg(2)));
                p.push(alu(AluOp::Mov, 3, imm(0)));
                p.push(alu(AluOp::Mov, 2, imm(0)));
                p.push(alu(AluOp::Mov, 1, imm(0)));
            }
            _ => {
                // if (acc & m) acc ^= v else acc += v: both arms leave acc unknown.
                p.push(jmp(JmpCond::Set, 6, imm(1 << (i % 16)), 2));
                p.push(alu(AluOp::Add, 6, reg(7)));
                p.push(Insn::Ja { off: 1 });
                p.push(alu(AluOp::Xor, 6, reg(7)));
            }
        }
    }
    let out = p.len();
    p[exit_jump] = jmp(JmpCond::Eq, 0, imm(0), (out - exit_jump - 1) as i16);
    p.push(alu(AluOp::Mov, 0, reg(6)));
    p.push(alu(AluOp::And, 0, imm(1)));
    p.push(Insn::Exit);
    p
}

/// A large single-function program (ALU chains with forward branches), for the JIT's compile-throughput bench.
pub fn synthetic(n: usize) -> Vec<Insn> {
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
