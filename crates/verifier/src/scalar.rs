//! The scalar domain: a reduced product of known bits ([`TnumOf`]) with unsigned and signed
//! intervals. The 32-bit unsigned and signed bounds of the low half are *derived* views
//! ([`ScalarOf::subreg`], [`ScalarOf::sext`]) rather than stored, so that the product has a
//! single place ([`ScalarOf::normalize`]) where its parts are reconciled.
//!
//! The code is generic over the machine word: the verifier uses [`Scalar`] (64-bit words),
//! and `tests/domain_exhaustive.rs` runs the same code on 8-bit words, where eBPF's 32-bit
//! operations act on the low 4 bits and its "bytes" are single bits, to check every transfer
//! function on every abstract value and every member of it. Every transfer function must
//! over-approximate the concrete eBPF operation.

use crate::tnum::{SignedWord, TnumOf, Word};
use rdx_bpf::isa::{AluOp, ByteOrder, JmpCond};
use std::fmt::Display;

/// An abstract set of words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ScalarOf<W: Word> {
    /// The known bits.
    pub bits: TnumOf<W>,
    /// Smallest value as unsigned.
    pub umin: W,
    /// Largest value as unsigned.
    pub umax: W,
    /// Smallest value as signed.
    pub smin: W::Signed,
    /// Largest value as signed.
    pub smax: W::Signed,
}

/// The verifier's scalar, an abstract set of 64-bit values.
pub type Scalar = ScalarOf<u64>;

/// The width at word size `W` of what eBPF calls `bits` bits (at 64-bit words, `bits`
/// itself): sign extensions and byte swaps scale with the word.
fn scaled_width<W: Word>(bits: u32) -> u32 {
    bits * W::BITS / 64
}

impl<W: Word> ScalarOf<W> {
    /// Every word.
    pub const UNKNOWN: Self = ScalarOf {
        bits: TnumOf::UNKNOWN,
        umin: W::ZERO,
        umax: W::MAX,
        smin: <W::Signed as SignedWord>::MIN,
        smax: <W::Signed as SignedWord>::MAX,
    };

    /// The single value `v`.
    pub fn constant(v: W) -> Self {
        ScalarOf {
            bits: TnumOf::constant(v),
            umin: v,
            umax: v,
            smin: v.as_signed(),
            smax: v.as_signed(),
        }
    }

    /// Values in `[min, max]` (unsigned).
    pub fn urange(min: W, max: W) -> Self {
        ScalarOf {
            umin: min,
            umax: max,
            ..Self::UNKNOWN
        }
        .normalize()
        .unwrap_or(Self::UNKNOWN)
    }

    /// Values in `[min, max]` (signed).
    pub fn srange(min: W::Signed, max: W::Signed) -> Self {
        ScalarOf {
            smin: min,
            smax: max,
            ..Self::UNKNOWN
        }
        .normalize()
        .unwrap_or(Self::UNKNOWN)
    }

    /// The values with the given known bits.
    pub fn from_bits(bits: TnumOf<W>) -> Self {
        ScalarOf {
            bits,
            ..Self::UNKNOWN
        }
        .normalize()
        .unwrap_or(Self::UNKNOWN)
    }

    /// The value, when the set holds exactly one.
    pub fn const_value(&self) -> Option<W> {
        if self.bits.is_const() {
            Some(self.bits.value)
        } else if self.umin == self.umax {
            Some(self.umin)
        } else {
            None
        }
    }

    /// Whether the set is exactly `{v}`.
    pub fn is_const(&self, v: W) -> bool {
        self.const_value() == Some(v)
    }

    /// Reconciles the parts of the product; `None` when they describe no value at all.
    pub fn normalize(mut self) -> Option<Self> {
        let sign = W::SIGN_BIT;
        for _ in 0..2 {
            // Known bits bound the unsigned range.
            self.umin = self.umin.max(self.bits.min());
            self.umax = self.umax.min(self.bits.max());
            // Sign bit known: the signed range is bounded by the bits too.
            if self.bits.mask & sign == W::ZERO {
                let lo = self.bits.value.as_signed();
                let hi = (self.bits.value | self.bits.mask).as_signed();
                self.smin = self.smin.max(lo);
                self.smax = self.smax.min(hi);
            }
            // Unsigned range within one sign half: it is also a signed range, and back.
            if (self.umin ^ self.umax) & sign == W::ZERO {
                self.smin = self.smin.max(self.umin.as_signed());
                self.smax = self.smax.min(self.umax.as_signed());
            }
            if (W::from_signed(self.smin) ^ W::from_signed(self.smax)) & sign == W::ZERO {
                self.umin = self.umin.max(W::from_signed(self.smin));
                self.umax = self.umax.min(W::from_signed(self.smax));
            }
            if self.umin > self.umax || self.smin > self.smax {
                return None;
            }
            self.bits = self.bits.intersect(TnumOf::range(self.umin, self.umax))?;
        }
        if self.umin > self.umax || self.smin > self.smax {
            return None;
        }
        Some(self)
    }

    /// True when every value of `other` is also a value of `self`.
    pub fn contains(&self, other: &Self) -> bool {
        self.bits.contains(other.bits)
            && self.umin <= other.umin
            && self.umax >= other.umax
            && self.smin <= other.smin
            && self.smax >= other.smax
    }

    /// Whether `v` is in the set.
    pub fn contains_value(&self, v: W) -> bool {
        self.bits.contains_value(v)
            && self.umin <= v
            && v <= self.umax
            && self.smin <= v.as_signed()
            && v.as_signed() <= self.smax
    }

    /// Smallest scalar containing both.
    pub fn join(&self, other: &Self) -> Self {
        ScalarOf {
            bits: self.bits.union(other.bits),
            umin: self.umin.min(other.umin),
            umax: self.umax.max(other.umax),
            smin: self.smin.min(other.smin),
            smax: self.smax.max(other.smax),
        }
        .normalize()
        .unwrap_or(Self::UNKNOWN)
    }

    /// Joins, then pushes every bound that moved to its extreme (loop widening).
    pub fn widen(&self, newer: &Self) -> Self {
        let j = self.join(newer);
        ScalarOf {
            bits: if j.bits == self.bits {
                j.bits
            } else {
                TnumOf::UNKNOWN
            },
            umin: if j.umin < self.umin { W::ZERO } else { j.umin },
            umax: if j.umax > self.umax { W::MAX } else { j.umax },
            smin: if j.smin < self.smin {
                <W::Signed as SignedWord>::MIN
            } else {
                j.smin
            },
            smax: if j.smax > self.smax {
                <W::Signed as SignedWord>::MAX
            } else {
                j.smax
            },
        }
        .normalize()
        .unwrap_or(Self::UNKNOWN)
    }

    /// Meet (intersection); `None` when empty.
    pub fn meet(&self, other: &Self) -> Option<Self> {
        ScalarOf {
            bits: self.bits.intersect(other.bits)?,
            umin: self.umin.max(other.umin),
            umax: self.umax.min(other.umax),
            smin: self.smin.max(other.smin),
            smax: self.smax.min(other.smax),
        }
        .normalize()
    }

    /// The low half (eBPF's 32-bit subregister), zero-extended: the unsigned 32-bit view.
    pub fn subreg(&self) -> Self {
        let half = W::HALF;
        let low = W::low_mask(half);
        let bits = self.bits.truncate(half);
        if self.umin.wrapping_shr(half) == self.umax.wrapping_shr(half) {
            ScalarOf {
                bits,
                umin: self.umin & low,
                umax: self.umax & low,
                smin: <W::Signed as SignedWord>::ZERO,
                smax: low.as_signed(),
            }
            .normalize()
            .unwrap_or_else(|| Self::from_bits(bits))
        } else {
            Self::from_bits(bits)
        }
    }

    /// The low `bits` bits, sign-extended to the whole word: the signed view (`bits` is 8, 16
    /// or 32 at 64-bit words; any width below the word's is accepted).
    pub fn sext(&self, bits: u32) -> Self {
        if bits == 0 || bits >= W::BITS {
            return Self::UNKNOWN;
        }
        let z = if bits == W::HALF {
            self.subreg()
        } else {
            let low = Self::from_bits(self.bits.truncate(bits));
            low.meet(&self.low_range(bits)).unwrap_or(low)
        };
        let half = W::ONE.wrapping_shl(bits - 1);
        let full = W::ONE.wrapping_shl(bits);
        let t = {
            // Shift the sign bit to the top and back arithmetically.
            let sh = W::BITS - bits;
            z.bits.lshift(sh).arshift(sh, W::BITS)
        };
        let r = if z.umax < half {
            z
        } else if z.umin >= half {
            Self::srange(
                z.umin.wrapping_sub(full).as_signed(),
                z.umax.wrapping_sub(full).as_signed(),
            )
        } else {
            Self::srange(
                W::ZERO.wrapping_sub(half).as_signed(),
                half.wrapping_sub(W::ONE).as_signed(),
            )
        };
        ScalarOf { bits: t, ..r }
            .normalize()
            .unwrap_or(Self::from_bits(t))
    }

    /// The low `bits` bits, zero-extended, as an unsigned range.
    fn low_range(&self, bits: u32) -> Self {
        if bits >= W::BITS {
            return *self;
        }
        let m = W::low_mask(bits);
        if self.umin.wrapping_shr(bits) == self.umax.wrapping_shr(bits) {
            Self::urange(self.umin & m, self.umax & m)
        } else {
            Self::urange(W::ZERO, m)
        }
    }

    /// Wrapping addition (eBPF `add`).
    pub fn add(&self, b: &Self) -> Self {
        let bits = self.bits.wrapping_add(b.bits);
        let (umin, umax) = match (self.umin.checked_add(b.umin), self.umax.checked_add(b.umax)) {
            (Some(lo), Some(hi)) => (lo, hi),
            _ => (W::ZERO, W::MAX),
        };
        let (smin, smax) = match (self.smin.checked_add(b.smin), self.smax.checked_add(b.smax)) {
            (Some(lo), Some(hi)) => (lo, hi),
            _ => (
                <W::Signed as SignedWord>::MIN,
                <W::Signed as SignedWord>::MAX,
            ),
        };
        ScalarOf {
            bits,
            umin,
            umax,
            smin,
            smax,
        }
        .normalize()
        .unwrap_or(Self::from_bits(bits))
    }

    /// Wrapping subtraction (eBPF `sub`).
    pub fn sub(&self, b: &Self) -> Self {
        let bits = self.bits.wrapping_sub(b.bits);
        let (umin, umax) = match (self.umin.checked_sub(b.umax), self.umax.checked_sub(b.umin)) {
            (Some(lo), Some(hi)) => (lo, hi),
            _ => (W::ZERO, W::MAX),
        };
        let (smin, smax) = match (self.smin.checked_sub(b.smax), self.smax.checked_sub(b.smin)) {
            (Some(lo), Some(hi)) => (lo, hi),
            _ => (
                <W::Signed as SignedWord>::MIN,
                <W::Signed as SignedWord>::MAX,
            ),
        };
        ScalarOf {
            bits,
            umin,
            umax,
            smin,
            smax,
        }
        .normalize()
        .unwrap_or(Self::from_bits(bits))
    }

    fn mul(&self, b: &Self) -> Self {
        let bits = self.bits.wrapping_mul(b.bits);
        let (umin, umax) = match (self.umin.checked_mul(b.umin), self.umax.checked_mul(b.umax)) {
            (Some(lo), Some(hi)) => (lo, hi),
            _ => (W::ZERO, W::MAX),
        };
        ScalarOf {
            bits,
            umin,
            umax,
            ..Self::UNKNOWN
        }
        .normalize()
        .unwrap_or(Self::from_bits(bits))
    }

    fn and(&self, b: &Self) -> Self {
        let bits = self.bits.and(b.bits);
        let mut r = ScalarOf {
            bits,
            umax: self.umax.min(b.umax),
            ..Self::UNKNOWN
        };
        let zero = <W::Signed as SignedWord>::ZERO;
        if self.smin >= zero || b.smin >= zero {
            r.smin = zero;
        }
        r.normalize().unwrap_or(Self::from_bits(bits))
    }

    fn or(&self, b: &Self) -> Self {
        let bits = self.bits.or(b.bits);
        ScalarOf {
            bits,
            umin: self.umin.max(b.umin),
            ..Self::UNKNOWN
        }
        .normalize()
        .unwrap_or(Self::from_bits(bits))
    }

    /// A constant shift amount, taken modulo the operation's width as eBPF does.
    fn shift_amount(b: &Self, width_bits: u32) -> Option<u32> {
        b.const_value()
            .map(|v| (v.to_u64() & (width_bits as u64 - 1)) as u32)
    }

    fn lsh(&self, b: &Self) -> Self {
        match Self::shift_amount(b, W::BITS) {
            Some(k) => {
                let bits = self.bits.lshift(k);
                if self.umax.leading_zeros() >= k {
                    ScalarOf {
                        bits,
                        umin: self.umin.wrapping_shl(k),
                        umax: self.umax.wrapping_shl(k),
                        ..Self::UNKNOWN
                    }
                    .normalize()
                    .unwrap_or(Self::from_bits(bits))
                } else {
                    Self::from_bits(bits)
                }
            }
            None => Self::UNKNOWN,
        }
    }

    fn rsh(&self, b: &Self) -> Self {
        match Self::shift_amount(b, W::BITS) {
            Some(k) => {
                let bits = self.bits.rshift(k);
                ScalarOf {
                    bits,
                    umin: self.umin.wrapping_shr(k),
                    umax: self.umax.wrapping_shr(k),
                    ..Self::UNKNOWN
                }
                .normalize()
                .unwrap_or(Self::from_bits(bits))
            }
            None => Self::urange(W::ZERO, self.umax),
        }
    }

    fn arsh(&self, b: &Self) -> Self {
        let zero = <W::Signed as SignedWord>::ZERO;
        match Self::shift_amount(b, W::BITS) {
            Some(k) => {
                let bits = self.bits.arshift(k, W::BITS);
                ScalarOf {
                    bits,
                    smin: self.smin.wrapping_shr(k),
                    smax: self.smax.wrapping_shr(k),
                    ..Self::UNKNOWN
                }
                .normalize()
                .unwrap_or(Self::from_bits(bits))
            }
            None => Self::srange(self.smin.min(zero), self.smax.max(zero)),
        }
    }

    fn udiv(&self, b: &Self) -> Self {
        match b.const_value() {
            Some(c) if c == W::ZERO => Self::constant(W::ZERO),
            Some(c) => match (self.umin.checked_div(c), self.umax.checked_div(c)) {
                (Some(lo), Some(hi)) => Self::urange(lo, hi),
                _ => Self::UNKNOWN,
            },
            None => Self::urange(W::ZERO, self.umax),
        }
    }

    fn umod(&self, b: &Self) -> Self {
        match b.const_value() {
            Some(c) if c == W::ZERO => *self,
            Some(c) if self.umax < c => *self,
            Some(c) => Self::urange(W::ZERO, c.wrapping_sub(W::ONE)),
            None => {
                // The result is below the divisor, or the dividend itself when it is zero.
                let hi = if b.umin > W::ZERO {
                    b.umax.wrapping_sub(W::ONE).min(self.umax)
                } else {
                    self.umax
                };
                Self::urange(W::ZERO, hi)
            }
        }
    }

    /// Result of an ALU operation on the whole word.
    fn alu_full(&self, op: AluOp, b: &Self) -> Self {
        match op {
            AluOp::Add => self.add(b),
            AluOp::Sub => self.sub(b),
            AluOp::Mul => self.mul(b),
            AluOp::Div => self.udiv(b),
            AluOp::Mod => self.umod(b),
            AluOp::SDiv | AluOp::SMod => match (self.const_value(), b.const_value()) {
                (Some(x), Some(y)) => Self::constant(signed_div_rem(op, x, y, W::BITS)),
                _ => Self::UNKNOWN,
            },
            AluOp::Or => self.or(b),
            AluOp::And => self.and(b),
            AluOp::Xor => Self::from_bits(self.bits.xor(b.bits)),
            AluOp::Lsh => self.lsh(b),
            AluOp::Rsh => self.rsh(b),
            AluOp::Arsh => self.arsh(b),
            AluOp::Neg => Self::constant(W::ZERO).sub(self),
            AluOp::Mov => *b,
            AluOp::MovSx(bits) => b.sext(scaled_width::<W>(bits as u32)),
        }
    }

    /// Result of `self <op> b` at the given width (`wide`: the whole word, else eBPF's
    /// 32-bit subregister), exactly as eBPF defines it (32-bit results are zero-extended).
    pub fn alu(&self, op: AluOp, b: &Self, wide: bool) -> Self {
        if wide {
            return self.alu_full(op, b);
        }
        let half = W::HALF;
        let a32 = self.subreg();
        let b32 = b.subreg();
        let r = match op {
            AluOp::Lsh | AluOp::Rsh => {
                let k = Self::shift_amount(b, half).map(|k| Self::constant(W::from_u64(k as u64)));
                match k {
                    Some(k) => a32.alu_full(op, &k),
                    None if op == AluOp::Rsh => Self::urange(W::ZERO, a32.umax),
                    None => Self::UNKNOWN,
                }
            }
            AluOp::Arsh => match Self::shift_amount(b, half) {
                Some(k) => self.sext(half).arsh(&Self::constant(W::from_u64(k as u64))),
                None => Self::UNKNOWN,
            },
            AluOp::SDiv | AluOp::SMod => match (a32.const_value(), b32.const_value()) {
                (Some(x), Some(y)) => Self::constant(signed_div_rem(op, x, y, half)),
                _ => Self::UNKNOWN,
            },
            AluOp::MovSx(bits) => b.sext(scaled_width::<W>(bits as u32)),
            _ => a32.alu_full(op, &b32),
        };
        r.subreg()
    }

    /// Result of a byte-order instruction on `bits` bits (16, 32 or 64, scaled to the word).
    pub fn endian(&self, order: ByteOrder, bits: u8) -> Self {
        if !matches!(bits, 16 | 32 | 64) {
            return Self::UNKNOWN;
        }
        let units = bits as u32 / 8;
        let width = scaled_width::<W>(bits as u32);
        if order == ByteOrder::ToLe {
            return if width >= W::BITS {
                *self
            } else {
                self.low_range(width)
                    .meet(&Self::from_bits(self.bits.truncate(width)))
                    .unwrap_or(Self::urange(W::ZERO, W::low_mask(width)))
            };
        }
        match self.const_value() {
            Some(v) => Self::constant(v.swap_units(units)),
            None if width >= W::BITS => Self::UNKNOWN,
            None => Self::urange(W::ZERO, W::low_mask(width)),
        }
    }

    /// Refines `a` and `b` assuming `a <cond> b` holds (`taken`) or does not (`!taken`), on
    /// the whole word. `None` when that outcome is impossible.
    pub fn refine64(cond: JmpCond, taken: bool, a: &Self, b: &Self) -> Option<(Self, Self)> {
        use JmpCond::*;
        if cond == Set && !taken {
            // No common bit.
            if a.bits.value & b.bits.value != W::ZERO {
                return None;
            }
            let mut na = *a;
            if let Some(c) = b.const_value() {
                na.bits = a.bits.intersect(TnumOf {
                    value: W::ZERO,
                    mask: !c,
                })?;
            }
            return Some((na.normalize()?, *b));
        }
        let cond = if taken { cond } else { negate(cond)? };
        let (mut a, mut b) = (*a, *b);
        match cond {
            Eq => {
                let m = a.meet(&b)?;
                return Some((m, m));
            }
            Ne => {
                if let (Some(x), Some(y)) = (a.const_value(), b.const_value()) {
                    if x == y {
                        return None;
                    }
                }
                if let Some(c) = b.const_value() {
                    a = exclude(a, c)?;
                }
                if let Some(c) = a.const_value() {
                    b = exclude(b, c)?;
                }
            }
            Lt | Le | Gt | Ge => {
                let (lo, hi, strict) = match cond {
                    Lt => (&mut a, &mut b, true),
                    Le => (&mut a, &mut b, false),
                    Gt => (&mut b, &mut a, true),
                    _ => (&mut b, &mut a, false),
                };
                // lo < hi (or <=)
                let d = if strict { W::ONE } else { W::ZERO };
                lo.umax = lo.umax.min(hi.umax.checked_sub(d)?);
                hi.umin = hi.umin.max(lo.umin.checked_add(d)?);
            }
            Slt | Sle | Sgt | Sge => {
                let (lo, hi, strict) = match cond {
                    Slt => (&mut a, &mut b, true),
                    Sle => (&mut a, &mut b, false),
                    Sgt => (&mut b, &mut a, true),
                    _ => (&mut b, &mut a, false),
                };
                let d = if strict {
                    <W::Signed as SignedWord>::ONE
                } else {
                    <W::Signed as SignedWord>::ZERO
                };
                lo.smax = lo.smax.min(hi.smax.checked_sub(d)?);
                hi.smin = hi.smin.max(lo.smin.checked_add(d)?);
            }
            Set => {
                // Some bit of a & b is set.
                let may = (a.bits.value | a.bits.mask) & (b.bits.value | b.bits.mask);
                if may == W::ZERO {
                    return None;
                }
                if let Some(c) = b.const_value() {
                    if c.count_ones() == 1 {
                        a.bits = a.bits.intersect(TnumOf { value: c, mask: !c })?;
                    }
                }
            }
        }
        Some((a.normalize()?, b.normalize()?))
    }

    /// As [`ScalarOf::refine64`] for `jmp32`: compares the low halves and refines the whole
    /// words only where the high halves are known.
    pub fn refine32(cond: JmpCond, taken: bool, a: &Self, b: &Self) -> Option<(Self, Self)> {
        let half = W::HALF;
        let low = W::low_mask(half);
        let signed = matches!(
            cond,
            JmpCond::Sgt | JmpCond::Sge | JmpCond::Slt | JmpCond::Sle
        );
        let (va, vb) = if signed {
            (a.sext(half), b.sext(half))
        } else {
            (a.subreg(), b.subreg())
        };
        if !taken && cond == JmpCond::Set {
            // "No common bit" on the low halves.
            if let Some(c) = vb.const_value() {
                let low_bits = a.bits.truncate(half);
                if low_bits.value & c != W::ZERO {
                    return None;
                }
                let mut na = *a;
                na.bits = a.bits.intersect(TnumOf {
                    value: W::ZERO,
                    mask: !(c & low),
                })?;
                return Some((na.normalize()?, *b));
            }
            return Some((*a, *b));
        }
        let (ra, rb) = Self::refine64(cond, taken, &va, &vb)?;
        let lift = |orig: &Self, view: &Self| -> Option<Self> {
            if orig.bits.mask.wrapping_shr(half) != W::ZERO
                || view.smin < <W::Signed as SignedWord>::ZERO
            {
                return Some(*orig);
            }
            let hi = orig.bits.value & !low;
            let lifted = ScalarOf {
                bits: TnumOf {
                    value: hi | view.bits.value,
                    mask: view.bits.mask & low,
                },
                umin: hi | view.umin,
                umax: hi | view.umax.min(low),
                ..Self::UNKNOWN
            };
            orig.meet(&lifted)
        };
        Some((lift(a, &ra)?, lift(b, &rb)?))
    }
}

/// eBPF's signed division or remainder of the low `bits` bits of `x` and `y` (`bits` = the
/// word, or its low half for 32-bit operations), zero-extended: `x / 0 = 0`, `x % 0 = x`,
/// `MIN / -1 = MIN`, `MIN % -1 = 0`.
fn signed_div_rem<W: Word>(op: AluOp, x: W, y: W, bits: u32) -> W {
    let keep = W::low_mask(bits);
    let up = W::BITS - bits;
    let widen = |v: W| v.wrapping_shl(up).as_signed().wrapping_shr(up);
    let (sx, sy) = (widen(x), widen(y));
    if sy == <W::Signed as SignedWord>::ZERO {
        return if op == AluOp::SDiv { W::ZERO } else { x & keep };
    }
    let r = if op == AluOp::SDiv {
        sx.wrapping_div(sy)
    } else {
        sx.wrapping_rem(sy)
    };
    W::from_signed(r) & keep
}

fn exclude<W: Word>(mut a: ScalarOf<W>, c: W) -> Option<ScalarOf<W>> {
    let one = <W::Signed as SignedWord>::ONE;
    if a.umin == c {
        a.umin = a.umin.checked_add(W::ONE)?;
    }
    if a.umax == c {
        a.umax = a.umax.checked_sub(W::ONE)?;
    }
    if a.smin == c.as_signed() {
        a.smin = a.smin.checked_add(one)?;
    }
    if a.smax == c.as_signed() {
        a.smax = a.smax.checked_sub(one)?;
    }
    a.normalize()
}

/// The condition that holds when `cond` does not; `None` for `jset` (its negation is not a
/// comparison and is handled by the caller).
fn negate(cond: JmpCond) -> Option<JmpCond> {
    use JmpCond::*;
    Some(match cond {
        Eq => Ne,
        Ne => Eq,
        Gt => Le,
        Ge => Lt,
        Lt => Ge,
        Le => Gt,
        Sgt => Sle,
        Sge => Slt,
        Slt => Sge,
        Sle => Sgt,
        Set => return None,
    })
}

impl<W: Word> Display for ScalarOf<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(c) = self.const_value() {
            return write!(f, "{}", c.as_signed());
        }
        write!(f, "scalar(")?;
        let mut parts = Vec::new();
        if self.umin != W::ZERO {
            parts.push(format!("umin={}", self.umin));
        }
        if self.umax != W::MAX {
            parts.push(format!("umax={}", self.umax));
        }
        if self.smin != <W::Signed as SignedWord>::MIN && W::from_signed(self.smin) != self.umin {
            parts.push(format!("smin={}", self.smin));
        }
        if self.smax != <W::Signed as SignedWord>::MAX && W::from_signed(self.smax) != self.umax {
            parts.push(format!("smax={}", self.smax));
        }
        if self.bits.mask != W::MAX && self.bits != TnumOf::range(self.umin, self.umax) {
            parts.push(format!("bits={}", self.bits));
        }
        write!(f, "{})", parts.join(","))
    }
}
