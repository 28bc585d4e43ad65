//! Programs made of the straight-line patterns the baseline tier emits as one native
//! instruction (address arithmetic, folded into a following load or not; zero-extension), in
//! every variant the matcher accepts or must refuse, with conditional jumps into the middle
//! of some of them (a jump target ends a fusion). Memory accesses stay inside the `MEM`-byte
//! buffer at r1 or the initialised stack slots, so the interpreter completes every program;
//! r0 folds in every register and stack slot. Used by `baseline.rs` (on this host) and
//! `aarch64_qemu.rs`.

use rdx_bpf::isa::{AluOp, Insn, JmpCond, Operand, Reg, Size, Width};

use super::random_programs::MEM;

/// One pattern: kind, registers, constants.
pub type Pattern = (u8, u8, u8, u8, i32, u16);

/// Data registers (never r1, the buffer pointer).
const DATA: [u8; 8] = [0, 2, 3, 4, 5, 6, 7, 8];
/// Stack slots initialised: fp-8 .. fp-64.
const SLOTS: i16 = 8;

fn alu(op: AluOp, dst: Reg, src: Operand) -> Insn {
    Insn::Alu {
        width: Width::W64,
        op,
        dst,
        src,
    }
}

fn mov(dst: Reg, src: Reg) -> Insn {
    alu(AluOp::Mov, dst, Operand::Reg(src))
}

fn add(dst: Reg, k: i32) -> Insn {
    alu(AluOp::Add, dst, Operand::Imm(k))
}

fn size(n: u8) -> Size {
    [Size::B, Size::H, Size::W, Size::DW][(n % 4) as usize]
}

fn load(sz: Size, sign_extend: bool, dst: Reg, off: i16) -> Insn {
    Insn::Load {
        size: sz,
        sign_extend: sign_extend && sz != Size::DW,
        dst,
        base: dst,
        off,
    }
}

pub fn build(patterns: &[Pattern]) -> Vec<Insn> {
    let mut p = Vec::new();
    for (i, r) in DATA.iter().enumerate() {
        p.push(alu(
            AluOp::Mov,
            Reg(*r),
            Operand::Imm((i as i32 + 1).wrapping_mul(0x1357_9bdf)),
        ));
    }
    p.push(alu(AluOp::Lsh, Reg(8), Operand::Imm(29)));
    for s in 1..=SLOTS {
        p.push(Insn::Store {
            size: Size::DW,
            base: Reg(10),
            off: -8 * s,
            src: Operand::Reg(Reg(DATA[s as usize % DATA.len()])),
        });
    }
    for &(kind, a, b, c, k, extra) in patterns {
        let x = Reg(DATA[(a % 8) as usize]);
        let y = Reg(DATA[(b % 8) as usize]);
        let z = Reg(DATA[(c % 8) as usize]);
        let sz = size(extra as u8);
        let n = sz.bytes() as i32;
        let sign = extra & 4 != 0;
        // An offset split between the address arithmetic and the load (in bounds).
        let split = |room: i32| {
            let total = (k.rem_euclid(room / n)) * n;
            let first = (extra as i32 >> 3) % (total + 1);
            (first, (total - first) as i16)
        };
        match kind % 11 {
            // rX = rY; rX <<= 32; rX >>= 32 or s>>= 32 (and without the move; a 31 or a
            // 32-bit shift that must not match).
            0 => {
                if extra & 8 != 0 {
                    p.push(mov(x, y));
                }
                let amount = if extra & 16 != 0 { 31 } else { 32 };
                let width = if extra & 32 != 0 {
                    Width::W32
                } else {
                    Width::W64
                };
                p.push(Insn::Alu {
                    width,
                    op: AluOp::Lsh,
                    dst: x,
                    src: Operand::Imm(amount),
                });
                let right = if extra & 64 != 0 {
                    AluOp::Arsh
                } else {
                    AluOp::Rsh
                };
                p.push(alu(right, x, Operand::Imm(32)));
            }
            // The extension of a copy: rX <<= 32; rY = rX; rY >>= 32 (or s>>= 32), then rX
            // overwritten (dead), read, or left to the next pattern.
            8 => {
                if y == x {
                    continue;
                }
                p.push(alu(AluOp::Lsh, x, Operand::Imm(32)));
                p.push(mov(y, x));
                let right = if extra & 64 != 0 {
                    AluOp::Arsh
                } else {
                    AluOp::Rsh
                };
                p.push(alu(right, y, Operand::Imm(32)));
                match extra & 24 {
                    0 => p.push(alu(AluOp::Mov, x, Operand::Imm(k))),
                    8 => p.push(alu(AluOp::Add, z, Operand::Reg(x))),
                    16 => p.push(mov(x, z)),
                    _ => {}
                }
            }
            // Data arithmetic: rX = rY; rX += k; rX -= k2; rX += rZ (rZ may be rX or rY).
            1 => {
                p.push(mov(x, y));
                p.push(add(x, k));
                if extra & 8 != 0 {
                    p.push(alu(AluOp::Sub, x, Operand::Imm(k.rotate_left(7))));
                }
                if extra & 16 != 0 {
                    p.push(alu(AluOp::Add, x, Operand::Reg(z)));
                }
                if extra & 32 != 0 {
                    p.push(alu(AluOp::Add, x, Operand::Reg(y)));
                }
            }
            // rX = r1; rX += k1; rX = *(rX + off).
            2 => {
                let (first, off) = split(MEM as i32);
                p.push(mov(x, Reg(1)));
                p.push(add(x, first));
                p.push(load(sz, sign, x, off));
            }
            // rX = r1 + rI + k1 (rI a small constant, added first or last), then the load.
            3 => {
                let room = MEM as i32 - 16;
                let index = (extra as i32 >> 6) % 16;
                let (first, off) = split(room);
                let i = if z == x { y } else { z };
                if i == x {
                    continue;
                }
                p.push(alu(AluOp::Mov, i, Operand::Imm(index)));
                p.push(mov(x, Reg(1)));
                if extra & 8 != 0 {
                    p.push(alu(AluOp::Add, x, Operand::Reg(i)));
                    p.push(add(x, first));
                } else {
                    p.push(add(x, first));
                    p.push(alu(AluOp::Add, x, Operand::Reg(i)));
                }
                p.push(load(sz, sign, x, off));
            }
            // rX = r1, something else, then rX += rI; rX = *(rX + off): the fusion starts at
            // the register addition.
            4 => {
                let index = (extra as i32 >> 6) % (MEM as i32 - 8);
                // Often no offset at all: a register-offset load.
                let off = if extra & 8 != 0 {
                    0
                } else {
                    ((k.rem_euclid(MEM as i32 - index) / n) * n).min(MEM as i32 - index - n)
                };
                let i = if z == x { y } else { z };
                if i == x {
                    continue;
                }
                p.push(mov(x, Reg(1)));
                p.push(alu(AluOp::Mov, i, Operand::Imm(index)));
                p.push(alu(AluOp::Add, x, Operand::Reg(i)));
                p.push(load(sz, sign, x, off.max(0) as i16));
            }
            // The frame: rX = r10; rX += -8 * slot; [rX += rI]; rX = *(rX + off).
            5 => {
                let i = if z == x { y } else { z };
                if i == x {
                    continue;
                }
                let bytes = 8 * (k.rem_euclid(SLOTS as i32) + 1);
                let index = if extra & 8 != 0 {
                    (extra as i32 >> 6) % (bytes - n + 1)
                } else {
                    0
                };
                let off = ((bytes - n - index) / n) * n;
                p.push(alu(AluOp::Mov, i, Operand::Imm(index)));
                p.push(mov(x, Reg(10)));
                p.push(add(x, -bytes));
                if extra & 8 != 0 {
                    p.push(alu(AluOp::Add, x, Operand::Reg(i)));
                } else {
                    p.push(add(x, index));
                }
                p.push(load(sz, sign, x, off as i16));
            }
            // A copy and an operation on it: rX = rY; rX op= src (src a register, rX itself,
            // or an immediate; 32 or 64 bits).
            9 => {
                let ops = [
                    AluOp::Add,
                    AluOp::Sub,
                    AluOp::Mul,
                    AluOp::Or,
                    AluOp::And,
                    AluOp::Xor,
                    AluOp::Lsh,
                    AluOp::Rsh,
                    AluOp::Arsh,
                    AluOp::Div,
                ];
                let op = ops[(extra >> 3) as usize % ops.len()];
                let src = match extra & 3 {
                    0 => Operand::Reg(z),
                    1 => Operand::Reg(x),
                    _ => Operand::Imm(k),
                };
                p.push(mov(x, y));
                p.push(Insn::Alu {
                    width: if extra & 4 != 0 {
                        Width::W32
                    } else {
                        Width::W64
                    },
                    op,
                    dst: x,
                    src,
                });
            }
            // A conditional jump into the middle: rX = r1; if rY > k skip rX += k1; rX += k2;
            // rX = *(rX + off). Both paths stay in bounds; the condition is on data (rY is
            // not the pointer rX), so every tier takes the same path.
            6 => {
                let (first, off) = split(MEM as i32);
                let (k1, k2) = (first / 2, first - first / 2);
                let w = if y == x {
                    Reg(DATA[(b.wrapping_add(1) % 8) as usize])
                } else {
                    y
                };
                p.push(mov(x, Reg(1)));
                p.push(Insn::Jmp {
                    width: Width::W64,
                    cond: JmpCond::Gt,
                    dst: w,
                    src: Operand::Imm(k >> 8),
                    off: 1,
                });
                p.push(add(x, k1));
                p.push(add(x, k2));
                p.push(load(sz, sign, x, off));
            }
            // A jump over the move of an arithmetic pattern: rX += k then adds a register to
            // the old rX on one path and to rY on the other.
            7 => {
                p.push(Insn::Jmp {
                    width: Width::W64,
                    cond: JmpCond::Set,
                    dst: y,
                    src: Operand::Imm(k | 1),
                    off: 1,
                });
                p.push(mov(x, y));
                p.push(add(x, k));
                p.push(alu(AluOp::Add, x, Operand::Reg(z)));
            }
            // A store through a computed address (no fusion into stores), then a load of it.
            _ => {
                let (first, off) = split(MEM as i32);
                p.push(mov(x, Reg(1)));
                p.push(add(x, first));
                // A data register (never the pointer itself).
                let v = if y == x {
                    Reg(DATA[(b.wrapping_add(1) % 8) as usize])
                } else {
                    y
                };
                p.push(Insn::Store {
                    size: sz,
                    base: x,
                    off,
                    src: Operand::Reg(v),
                });
                p.push(load(sz, sign, x, off));
            }
        }
        // Keep every register a data value for the next pattern.
        p.push(alu(AluOp::Xor, x, Operand::Imm(k)));
    }
    for r in DATA.iter().skip(1) {
        p.push(alu(AluOp::Mul, Reg(0), Operand::Imm(31)));
        p.push(alu(AluOp::Xor, Reg(0), Operand::Reg(Reg(*r))));
    }
    for s in 1..=SLOTS {
        p.push(Insn::Load {
            size: Size::DW,
            sign_extend: false,
            dst: Reg(2),
            base: Reg(10),
            off: -8 * s,
        });
        p.push(alu(AluOp::Mul, Reg(0), Operand::Imm(31)));
        p.push(alu(AluOp::Xor, Reg(0), Operand::Reg(Reg(2))));
    }
    p.push(Insn::Exit);
    p
}
