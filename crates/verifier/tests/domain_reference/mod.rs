//! eBPF's concrete semantics at any word width `w` (8 to 64 bits), the oracle of the scalar
//! domain's checks. Written from the instruction set's definition on `u64`/`i128` values
//! with explicit masks, independently of the domain's code and of its `Word` trait. At
//! width `w`, eBPF's 32-bit operations act on the low `w / 2` bits and its bytes are `w / 8`
//! bits wide (at 64 bits: the real instruction set).

#![allow(dead_code)]

use rdx_bpf::isa::{AluOp, ByteOrder, JmpCond};

/// The low `bits` bits set.
pub fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// The low `bits` bits of `v` read as a signed number.
pub fn signed(v: u64, bits: u32) -> i128 {
    let v = v & mask(bits);
    if bits > 0 && v >> (bits - 1) & 1 == 1 {
        v as i128 - (1i128 << bits)
    } else {
        v as i128
    }
}

/// `v` reduced to `bits` bits (two's complement).
fn wrap(v: i128, bits: u32) -> u64 {
    (v as u128 & mask(bits) as u128) as u64
}

/// `a <op> b` on `w`-bit words: on the whole word when `wide`, else on the low halves with
/// the result zero-extended.
pub fn alu(op: AluOp, a: u64, b: u64, wide: bool, w: u32) -> u64 {
    let n = if wide { w } else { w / 2 };
    let (x, y) = (a & mask(n), b & mask(n));
    let (sx, sy) = (signed(x, n), signed(y, n));
    // Shift amounts are taken modulo the operation's width.
    let k = (y % n as u64) as u32;
    match op {
        AluOp::Add => wrap(x as i128 + y as i128, n),
        AluOp::Sub => wrap(x as i128 - y as i128, n),
        AluOp::Mul => (x as u128 * y as u128) as u64 & mask(n),
        AluOp::Div => x.checked_div(y).unwrap_or(0),
        AluOp::Mod => {
            if y == 0 {
                x
            } else {
                x % y
            }
        }
        AluOp::SDiv => {
            if sy == 0 {
                0
            } else {
                wrap(sx / sy, n)
            }
        }
        AluOp::SMod => {
            if sy == 0 {
                x
            } else {
                wrap(sx % sy, n)
            }
        }
        AluOp::Or => x | y,
        AluOp::And => x & y,
        AluOp::Xor => x ^ y,
        AluOp::Lsh => wrap((x as i128) << k, n),
        AluOp::Rsh => x >> k,
        AluOp::Arsh => wrap(sx >> k, n),
        AluOp::Neg => wrap(-(x as i128), n),
        AluOp::Mov => y,
        AluOp::MovSx(bits) => wrap(signed(b, bits as u32 * w / 64), n),
    }
}

/// `le`/`be`/`bswap` of `bits` (16, 32, 64) on `w`-bit words (little-endian host).
pub fn endian(order: ByteOrder, bits: u8, a: u64, w: u32) -> u64 {
    let unit = w / 8;
    let units = bits as u32 / 8;
    match order {
        ByteOrder::ToLe => a & mask(unit * units),
        ByteOrder::ToBe | ByteOrder::Swap => (0..units)
            .map(|i| ((a >> (i * unit)) & mask(unit)) << ((units - 1 - i) * unit))
            .fold(0, |acc, part| acc | part),
    }
}

/// The low `bits` bits of `a` sign-extended to `w` bits (`movsx`, `ldsx`).
pub fn sign_extend(a: u64, bits: u32, w: u32) -> u64 {
    wrap(signed(a, bits), w)
}

/// Whether `a <cond> b` holds on the whole word (`wide`) or on the low halves (`jmp32`).
pub fn holds(cond: JmpCond, a: u64, b: u64, wide: bool, w: u32) -> bool {
    let n = if wide { w } else { w / 2 };
    let (x, y) = (a & mask(n), b & mask(n));
    let (sx, sy) = (signed(x, n), signed(y, n));
    match cond {
        JmpCond::Eq => x == y,
        JmpCond::Ne => x != y,
        JmpCond::Gt => x > y,
        JmpCond::Ge => x >= y,
        JmpCond::Lt => x < y,
        JmpCond::Le => x <= y,
        JmpCond::Sgt => sx > sy,
        JmpCond::Sge => sx >= sy,
        JmpCond::Slt => sx < sy,
        JmpCond::Sle => sx <= sy,
        JmpCond::Set => x & y != 0,
    }
}

pub const ALU_OPS: [AluOp; 18] = [
    AluOp::Add,
    AluOp::Sub,
    AluOp::Mul,
    AluOp::Div,
    AluOp::Mod,
    AluOp::SDiv,
    AluOp::SMod,
    AluOp::Or,
    AluOp::And,
    AluOp::Xor,
    AluOp::Lsh,
    AluOp::Rsh,
    AluOp::Arsh,
    AluOp::Neg,
    AluOp::Mov,
    AluOp::MovSx(8),
    AluOp::MovSx(16),
    AluOp::MovSx(32),
];

pub const CONDS: [JmpCond; 11] = [
    JmpCond::Eq,
    JmpCond::Ne,
    JmpCond::Gt,
    JmpCond::Ge,
    JmpCond::Lt,
    JmpCond::Le,
    JmpCond::Sgt,
    JmpCond::Sge,
    JmpCond::Slt,
    JmpCond::Sle,
    JmpCond::Set,
];

pub const ENDIANS: [(ByteOrder, u8); 9] = [
    (ByteOrder::ToLe, 16),
    (ByteOrder::ToLe, 32),
    (ByteOrder::ToLe, 64),
    (ByteOrder::ToBe, 16),
    (ByteOrder::ToBe, 32),
    (ByteOrder::ToBe, 64),
    (ByteOrder::Swap, 16),
    (ByteOrder::Swap, 32),
    (ByteOrder::Swap, 64),
];

#[test]
fn reference_matches_the_instruction_set_at_64_bits() {
    // Spot checks of the reference against Rust's own 64- and 32-bit operations.
    let v = [
        0u64,
        1,
        7,
        0x8000_0000,
        0xffff_ffff,
        1 << 63,
        u64::MAX,
        0x1234_5678_9abc_def0,
    ];
    for &a in &v {
        for &b in &v {
            assert_eq!(alu(AluOp::Sub, a, b, true, 64), a.wrapping_sub(b));
            assert_eq!(
                alu(AluOp::Mul, a, b, false, 64),
                (a as u32).wrapping_mul(b as u32) as u64
            );
            let sd = if b == 0 {
                0
            } else {
                (a as i64).wrapping_div(b as i64) as u64
            };
            assert_eq!(alu(AluOp::SDiv, a, b, true, 64), sd);
            let sm = if b as u32 == 0 {
                a as u32
            } else {
                (a as i32).wrapping_rem(b as i32) as u32
            };
            assert_eq!(alu(AluOp::SMod, a, b, false, 64), sm as u64);
            assert_eq!(
                alu(AluOp::Arsh, a, b, true, 64),
                (a as i64).wrapping_shr(b as u32) as u64
            );
            assert_eq!(
                alu(AluOp::Lsh, a, b, false, 64),
                (a as u32).wrapping_shl(b as u32) as u64
            );
            assert_eq!(
                alu(AluOp::MovSx(16), a, b, true, 64),
                b as i16 as i64 as u64
            );
            assert_eq!(
                alu(AluOp::MovSx(8), a, b, false, 64),
                b as i8 as i32 as u32 as u64
            );
            assert_eq!(
                holds(JmpCond::Slt, a, b, false, 64),
                (a as i32) < (b as i32)
            );
        }
        assert_eq!(
            endian(ByteOrder::ToBe, 32, a, 64),
            (a as u32).swap_bytes() as u64
        );
        assert_eq!(endian(ByteOrder::Swap, 64, a, 64), a.swap_bytes());
        assert_eq!(endian(ByteOrder::ToLe, 16, a, 64), a as u16 as u64);
        assert_eq!(alu(AluOp::Neg, a, 0, true, 64), a.wrapping_neg());
    }
}
