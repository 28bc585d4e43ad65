//! The scalar domain: a reduced product of known bits ([`Tnum`]) with unsigned and signed
//! 64-bit intervals. The 32-bit unsigned and signed bounds of the low half are *derived* views
//! ([`Scalar::subreg`], [`Scalar::sext32`]) rather than stored, so that the product has a
//! single place ([`Scalar::normalize`]) where its parts are reconciled.
//!
//! Every transfer function here must over-approximate the concrete eBPF operation: the
//! proptests at the bottom check that on random members of random abstract values.

use crate::tnum::Tnum;
use rdx_bpf::isa::{AluOp, ByteOrder, JmpCond};

/// An abstract set of 64-bit values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Scalar {
    pub bits: Tnum,
    pub umin: u64,
    pub umax: u64,
    pub smin: i64,
    pub smax: i64,
}

const U32: u64 = u32::MAX as u64;

impl Scalar {
    pub const UNKNOWN: Scalar = Scalar {
        bits: Tnum::UNKNOWN,
        umin: 0,
        umax: u64::MAX,
        smin: i64::MIN,
        smax: i64::MAX,
    };

    pub fn constant(v: u64) -> Scalar {
        Scalar {
            bits: Tnum::constant(v),
            umin: v,
            umax: v,
            smin: v as i64,
            smax: v as i64,
        }
    }

    /// Values in `[min, max]` (unsigned).
    pub fn urange(min: u64, max: u64) -> Scalar {
        Scalar {
            umin: min,
            umax: max,
            ..Scalar::UNKNOWN
        }
        .normalize()
        .unwrap_or(Scalar::UNKNOWN)
    }

    /// Values in `[min, max]` (signed).
    pub fn srange(min: i64, max: i64) -> Scalar {
        Scalar {
            smin: min,
            smax: max,
            ..Scalar::UNKNOWN
        }
        .normalize()
        .unwrap_or(Scalar::UNKNOWN)
    }

    fn from_bits(bits: Tnum) -> Scalar {
        Scalar {
            bits,
            ..Scalar::UNKNOWN
        }
        .normalize()
        .unwrap_or(Scalar::UNKNOWN)
    }

    pub fn const_value(&self) -> Option<u64> {
        if self.bits.is_const() {
            Some(self.bits.value)
        } else if self.umin == self.umax {
            Some(self.umin)
        } else {
            None
        }
    }

    pub fn is_const(&self, v: u64) -> bool {
        self.const_value() == Some(v)
    }

    /// Reconciles the parts of the product; `None` when they describe no value at all.
    pub fn normalize(mut self) -> Option<Scalar> {
        for _ in 0..2 {
            // Known bits bound the unsigned range.
            self.umin = self.umin.max(self.bits.min());
            self.umax = self.umax.min(self.bits.max());
            // Sign bit known: the signed range is bounded by the bits too.
            let sign = 1u64 << 63;
            if self.bits.mask & sign == 0 {
                let lo = self.bits.value as i64;
                let hi = (self.bits.value | self.bits.mask) as i64;
                self.smin = self.smin.max(lo);
                self.smax = self.smax.min(hi);
            }
            // Unsigned range within one sign half: it is also a signed range, and back.
            if (self.umin ^ self.umax) & sign == 0 {
                self.smin = self.smin.max(self.umin as i64);
                self.smax = self.smax.min(self.umax as i64);
            }
            if (self.smin ^ self.smax) & (sign as i64) == 0 {
                self.umin = self.umin.max(self.smin as u64);
                self.umax = self.umax.min(self.smax as u64);
            }
            if self.umin > self.umax || self.smin > self.smax {
                return None;
            }
            self.bits = self.bits.intersect(Tnum::range(self.umin, self.umax))?;
        }
        if self.umin > self.umax || self.smin > self.smax {
            return None;
        }
        Some(self)
    }

    /// True when every value of `other` is also a value of `self`.
    pub fn contains(&self, other: &Scalar) -> bool {
        self.bits.contains(other.bits)
            && self.umin <= other.umin
            && self.umax >= other.umax
            && self.smin <= other.smin
            && self.smax >= other.smax
    }

    pub fn contains_value(&self, v: u64) -> bool {
        self.bits.contains_value(v)
            && self.umin <= v
            && v <= self.umax
            && self.smin <= v as i64
            && v as i64 <= self.smax
    }

    /// Smallest scalar containing both.
    pub fn join(&self, other: &Scalar) -> Scalar {
        Scalar {
            bits: self.bits.union(other.bits),
            umin: self.umin.min(other.umin),
            umax: self.umax.max(other.umax),
            smin: self.smin.min(other.smin),
            smax: self.smax.max(other.smax),
        }
        .normalize()
        .unwrap_or(Scalar::UNKNOWN)
    }

    /// Joins, then pushes every bound that moved to its extreme (loop widening).
    pub fn widen(&self, newer: &Scalar) -> Scalar {
        let j = self.join(newer);
        Scalar {
            bits: if j.bits == self.bits {
                j.bits
            } else {
                Tnum::UNKNOWN
            },
            umin: if j.umin < self.umin { 0 } else { j.umin },
            umax: if j.umax > self.umax { u64::MAX } else { j.umax },
            smin: if j.smin < self.smin { i64::MIN } else { j.smin },
            smax: if j.smax > self.smax { i64::MAX } else { j.smax },
        }
        .normalize()
        .unwrap_or(Scalar::UNKNOWN)
    }

    /// Meet (intersection); `None` when empty.
    pub fn meet(&self, other: &Scalar) -> Option<Scalar> {
        Scalar {
            bits: self.bits.intersect(other.bits)?,
            umin: self.umin.max(other.umin),
            umax: self.umax.min(other.umax),
            smin: self.smin.max(other.smin),
            smax: self.smax.min(other.smax),
        }
        .normalize()
    }

    /// The low 32 bits, zero-extended: the unsigned 32-bit view.
    pub fn subreg(&self) -> Scalar {
        let bits = self.bits.cast(4);
        if self.umin >> 32 == self.umax >> 32 {
            Scalar {
                bits,
                umin: self.umin & U32,
                umax: self.umax & U32,
                smin: 0,
                smax: U32 as i64,
            }
            .normalize()
            .unwrap_or_else(|| Scalar::from_bits(bits))
        } else {
            Scalar::from_bits(bits)
        }
    }

    /// The low `bits` bits, sign-extended to 64 (`bits` = 8, 16 or 32): the signed view.
    pub fn sext(&self, bits: u32) -> Scalar {
        if !matches!(bits, 8 | 16 | 32) {
            return Scalar::UNKNOWN;
        }
        let z = if bits == 32 {
            self.subreg()
        } else {
            Scalar::from_bits(self.bits.cast(bits / 8))
                .meet(&self.low_range(bits))
                .unwrap_or(Scalar::from_bits(self.bits.cast(bits / 8)))
        };
        let half = 1u64 << (bits - 1);
        let full = 1u64 << bits;
        let t = {
            // Shift the sign bit to the top and back arithmetically.
            let sh = 64 - bits;
            z.bits.lshift(sh).arshift(sh, 64)
        };
        let r = if z.umax < half {
            z
        } else if z.umin >= half {
            Scalar::srange(
                z.umin.wrapping_sub(full) as i64,
                z.umax.wrapping_sub(full) as i64,
            )
        } else {
            Scalar::srange(-(half as i64), half as i64 - 1)
        };
        Scalar { bits: t, ..r }
            .normalize()
            .unwrap_or(Scalar::from_bits(t))
    }

    fn low_range(&self, bits: u32) -> Scalar {
        let m = (1u64 << bits) - 1;
        if self.umin >> bits == self.umax >> bits {
            Scalar::urange(self.umin & m, self.umax & m)
        } else {
            Scalar::urange(0, m)
        }
    }

    pub fn add(&self, b: &Scalar) -> Scalar {
        let bits = self.bits.wrapping_add(b.bits);
        let (umin, umax) = match (self.umin.checked_add(b.umin), self.umax.checked_add(b.umax)) {
            (Some(lo), Some(hi)) => (lo, hi),
            _ => (0, u64::MAX),
        };
        let (smin, smax) = match (self.smin.checked_add(b.smin), self.smax.checked_add(b.smax)) {
            (Some(lo), Some(hi)) => (lo, hi),
            _ => (i64::MIN, i64::MAX),
        };
        Scalar {
            bits,
            umin,
            umax,
            smin,
            smax,
        }
        .normalize()
        .unwrap_or(Scalar::from_bits(bits))
    }

    pub fn sub(&self, b: &Scalar) -> Scalar {
        let bits = self.bits.wrapping_sub(b.bits);
        let (umin, umax) = if self.umin >= b.umax {
            (self.umin - b.umax, self.umax - b.umin)
        } else {
            (0, u64::MAX)
        };
        let (smin, smax) = match (self.smin.checked_sub(b.smax), self.smax.checked_sub(b.smin)) {
            (Some(lo), Some(hi)) => (lo, hi),
            _ => (i64::MIN, i64::MAX),
        };
        Scalar {
            bits,
            umin,
            umax,
            smin,
            smax,
        }
        .normalize()
        .unwrap_or(Scalar::from_bits(bits))
    }

    fn mul(&self, b: &Scalar) -> Scalar {
        let bits = self.bits.wrapping_mul(b.bits);
        let (umin, umax) = match self.umax.checked_mul(b.umax) {
            Some(hi) => (self.umin * b.umin, hi),
            None => (0, u64::MAX),
        };
        Scalar {
            bits,
            umin,
            umax,
            ..Scalar::UNKNOWN
        }
        .normalize()
        .unwrap_or(Scalar::from_bits(bits))
    }

    fn and(&self, b: &Scalar) -> Scalar {
        let bits = self.bits.and(b.bits);
        let mut r = Scalar {
            bits,
            umax: self.umax.min(b.umax),
            ..Scalar::UNKNOWN
        };
        if self.smin >= 0 || b.smin >= 0 {
            r.smin = 0;
        }
        r.normalize().unwrap_or(Scalar::from_bits(bits))
    }

    fn or(&self, b: &Scalar) -> Scalar {
        let bits = self.bits.or(b.bits);
        Scalar {
            bits,
            umin: self.umin.max(b.umin),
            ..Scalar::UNKNOWN
        }
        .normalize()
        .unwrap_or(Scalar::from_bits(bits))
    }

    fn shift_amount(b: &Scalar, width_bits: u32) -> Option<u32> {
        b.const_value()
            .map(|v| (v & (width_bits as u64 - 1)) as u32)
    }

    fn lsh(&self, b: &Scalar) -> Scalar {
        match Self::shift_amount(b, 64) {
            Some(k) => {
                let bits = self.bits.lshift(k);
                if self.umax.leading_zeros() >= k {
                    Scalar {
                        bits,
                        umin: self.umin << k,
                        umax: self.umax << k,
                        ..Scalar::UNKNOWN
                    }
                    .normalize()
                    .unwrap_or(Scalar::from_bits(bits))
                } else {
                    Scalar::from_bits(bits)
                }
            }
            None => Scalar::UNKNOWN,
        }
    }

    fn rsh(&self, b: &Scalar) -> Scalar {
        match Self::shift_amount(b, 64) {
            Some(k) => {
                let bits = self.bits.rshift(k);
                Scalar {
                    bits,
                    umin: self.umin >> k,
                    umax: self.umax >> k,
                    ..Scalar::UNKNOWN
                }
                .normalize()
                .unwrap_or(Scalar::from_bits(bits))
            }
            None => Scalar::urange(0, self.umax),
        }
    }

    fn arsh(&self, b: &Scalar) -> Scalar {
        match Self::shift_amount(b, 64) {
            Some(k) => {
                let bits = self.bits.arshift(k, 64);
                Scalar {
                    bits,
                    smin: self.smin >> k,
                    smax: self.smax >> k,
                    ..Scalar::UNKNOWN
                }
                .normalize()
                .unwrap_or(Scalar::from_bits(bits))
            }
            None => Scalar::srange(self.smin.min(0), self.smax.max(0)),
        }
    }

    fn udiv(&self, b: &Scalar) -> Scalar {
        match b.const_value() {
            Some(0) => Scalar::constant(0),
            Some(c) => Scalar::urange(self.umin / c, self.umax / c),
            None => Scalar::urange(0, self.umax),
        }
    }

    fn umod(&self, b: &Scalar) -> Scalar {
        match b.const_value() {
            Some(0) => *self,
            Some(c) if self.umax < c => *self,
            Some(c) => Scalar::urange(0, c - 1),
            None => {
                // The result is below the divisor, or the dividend itself when it is zero.
                let hi = if b.umin > 0 {
                    (b.umax - 1).min(self.umax)
                } else {
                    self.umax
                };
                Scalar::urange(0, hi)
            }
        }
    }

    /// Result of a 64-bit ALU operation.
    fn alu64(&self, op: AluOp, b: &Scalar) -> Scalar {
        match op {
            AluOp::Add => self.add(b),
            AluOp::Sub => self.sub(b),
            AluOp::Mul => self.mul(b),
            AluOp::Div => self.udiv(b),
            AluOp::Mod => self.umod(b),
            AluOp::SDiv | AluOp::SMod => match (self.const_value(), b.const_value()) {
                (Some(x), Some(y)) => Scalar::constant(sdiv_smod(op, x as i64, y as i64, 64)),
                _ => Scalar::UNKNOWN,
            },
            AluOp::Or => self.or(b),
            AluOp::And => self.and(b),
            AluOp::Xor => Scalar::from_bits(self.bits.xor(b.bits)),
            AluOp::Lsh => self.lsh(b),
            AluOp::Rsh => self.rsh(b),
            AluOp::Arsh => self.arsh(b),
            AluOp::Neg => Scalar::constant(0).sub(self),
            AluOp::Mov => *b,
            AluOp::MovSx(bits) => b.sext(bits as u32),
        }
    }

    /// Result of `self <op> b` at the given width, exactly as eBPF defines it (32-bit results
    /// are zero-extended).
    pub fn alu(&self, op: AluOp, b: &Scalar, wide: bool) -> Scalar {
        if wide {
            return self.alu64(op, b);
        }
        let a32 = self.subreg();
        let b32 = b.subreg();
        let r = match op {
            AluOp::Lsh | AluOp::Rsh => {
                let k = Self::shift_amount(b, 32).map(|k| Scalar::constant(k as u64));
                match k {
                    Some(k) => a32.alu64(op, &k),
                    None if op == AluOp::Rsh => Scalar::urange(0, a32.umax),
                    None => Scalar::UNKNOWN,
                }
            }
            AluOp::Arsh => match Self::shift_amount(b, 32) {
                Some(k) => self.sext(32).arsh(&Scalar::constant(k as u64)),
                None => Scalar::UNKNOWN,
            },
            AluOp::SDiv | AluOp::SMod => match (a32.const_value(), b32.const_value()) {
                (Some(x), Some(y)) => Scalar::constant(sdiv_smod(
                    op,
                    x as u32 as i32 as i64,
                    y as u32 as i32 as i64,
                    32,
                )),
                _ => Scalar::UNKNOWN,
            },
            AluOp::MovSx(bits) => b.sext(bits as u32),
            _ => a32.alu64(op, &b32),
        };
        r.subreg()
    }

    /// Result of a byte-order instruction on `bits` bits.
    pub fn endian(&self, order: ByteOrder, bits: u8) -> Scalar {
        if !matches!(bits, 16 | 32 | 64) {
            return Scalar::UNKNOWN;
        }
        let bytes = bits as u32 / 8;
        if order == ByteOrder::ToLe {
            return if bytes == 8 {
                *self
            } else {
                self.low_range(bits as u32)
                    .meet(&Scalar::from_bits(self.bits.cast(bytes)))
                    .unwrap_or(Scalar::urange(0, (1u64 << bits) - 1))
            };
        }
        match self.const_value() {
            Some(v) => Scalar::constant(match bits {
                16 => (v as u16).swap_bytes() as u64,
                32 => (v as u32).swap_bytes() as u64,
                _ => v.swap_bytes(),
            }),
            None if bits == 64 => Scalar::UNKNOWN,
            None => Scalar::urange(0, (1u64 << bits) - 1),
        }
    }

    /// Refines `a` and `b` assuming `a <cond> b` holds (`taken`) or does not (`!taken`), at
    /// 64-bit width. `None` when that outcome is impossible.
    pub fn refine64(
        cond: JmpCond,
        taken: bool,
        a: &Scalar,
        b: &Scalar,
    ) -> Option<(Scalar, Scalar)> {
        use JmpCond::*;
        if cond == Set && !taken {
            // No common bit.
            if a.bits.value & b.bits.value != 0 {
                return None;
            }
            let mut na = *a;
            if let Some(c) = b.const_value() {
                na.bits = a.bits.intersect(Tnum { value: 0, mask: !c })?;
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
                let d = strict as u64;
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
                let d = strict as i64;
                lo.smax = lo.smax.min(hi.smax.checked_sub(d)?);
                hi.smin = hi.smin.max(lo.smin.checked_add(d)?);
            }
            Set => {
                // Some bit of a & b is set.
                let may = (a.bits.value | a.bits.mask) & (b.bits.value | b.bits.mask);
                if may == 0 {
                    return None;
                }
                if let Some(c) = b.const_value() {
                    if c.count_ones() == 1 {
                        a.bits = a.bits.intersect(Tnum { value: c, mask: !c })?;
                    }
                }
            }
        }
        Some((a.normalize()?, b.normalize()?))
    }

    /// As [`Scalar::refine64`] for `jmp32`: compares the low halves and refines the 64-bit
    /// values only where the high halves are known.
    pub fn refine32(
        cond: JmpCond,
        taken: bool,
        a: &Scalar,
        b: &Scalar,
    ) -> Option<(Scalar, Scalar)> {
        let signed = matches!(
            cond,
            JmpCond::Sgt | JmpCond::Sge | JmpCond::Slt | JmpCond::Sle
        );
        let (va, vb) = if signed {
            (a.sext(32), b.sext(32))
        } else {
            (a.subreg(), b.subreg())
        };
        if !taken && cond == JmpCond::Set {
            // "No common bit" on the low halves.
            if let Some(c) = vb.const_value() {
                let low = a.bits.cast(4);
                if low.value & c != 0 {
                    return None;
                }
                let mut na = *a;
                na.bits = a.bits.intersect(Tnum {
                    value: 0,
                    mask: !(c & U32),
                })?;
                return Some((na.normalize()?, *b));
            }
            return Some((*a, *b));
        }
        let (ra, rb) = Self::refine64(cond, taken, &va, &vb)?;
        let lift = |orig: &Scalar, view: &Scalar| -> Option<Scalar> {
            if orig.bits.mask >> 32 != 0 || view.smin < 0 {
                return Some(*orig);
            }
            let hi = orig.bits.value & !U32;
            let lifted = Scalar {
                bits: Tnum {
                    value: hi | view.bits.value,
                    mask: view.bits.mask & U32,
                },
                umin: hi | view.umin,
                umax: hi | view.umax.min(U32),
                ..Scalar::UNKNOWN
            };
            orig.meet(&lifted)
        };
        Some((lift(a, &ra)?, lift(b, &rb)?))
    }
}

fn sdiv_smod(op: AluOp, x: i64, y: i64, bits: u32) -> u64 {
    let (x, y) = if bits == 32 {
        (x as i32 as i64, y as i32 as i64)
    } else {
        (x, y)
    };
    if y == 0 {
        return if op == AluOp::SDiv { 0 } else { x as u64 };
    }
    let r = if op == AluOp::SDiv {
        x.wrapping_div(y)
    } else {
        x.wrapping_rem(y)
    };
    if bits == 32 {
        let r32 = if op == AluOp::SDiv {
            (x as i32).wrapping_div(y as i32)
        } else {
            (x as i32).wrapping_rem(y as i32)
        };
        r32 as u32 as u64
    } else {
        r as u64
    }
}

fn exclude(mut a: Scalar, c: u64) -> Option<Scalar> {
    if a.umin == c {
        a.umin = a.umin.checked_add(1)?;
    }
    if a.umax == c {
        a.umax = a.umax.checked_sub(1)?;
    }
    if a.smin == c as i64 {
        a.smin = a.smin.checked_add(1)?;
    }
    if a.smax == c as i64 {
        a.smax = a.smax.checked_sub(1)?;
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

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(c) = self.const_value() {
            return write!(f, "{}", c as i64);
        }
        write!(f, "scalar(")?;
        let mut parts = Vec::new();
        if self.umin != 0 {
            parts.push(format!("umin={}", self.umin));
        }
        if self.umax != u64::MAX {
            parts.push(format!("umax={}", self.umax));
        }
        if self.smin != i64::MIN && self.smin as u64 != self.umin {
            parts.push(format!("smin={}", self.smin));
        }
        if self.smax != i64::MAX && self.smax as u64 != self.umax {
            parts.push(format!("smax={}", self.smax));
        }
        if self.bits.mask != u64::MAX && !(self.bits == Tnum::range(self.umin, self.umax)) {
            parts.push(format!("bits={}", self.bits));
        }
        write!(f, "{})", parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Concrete eBPF ALU semantics, the oracle for the abstract transfer functions.
    fn concrete(op: AluOp, a: u64, b: u64, wide: bool) -> u64 {
        if wide {
            match op {
                AluOp::Add => a.wrapping_add(b),
                AluOp::Sub => a.wrapping_sub(b),
                AluOp::Mul => a.wrapping_mul(b),
                AluOp::Div => a.checked_div(b).unwrap_or(0),
                AluOp::Mod => {
                    if b == 0 {
                        a
                    } else {
                        a % b
                    }
                }
                AluOp::SDiv | AluOp::SMod => sdiv_smod(op, a as i64, b as i64, 64),
                AluOp::Or => a | b,
                AluOp::And => a & b,
                AluOp::Xor => a ^ b,
                AluOp::Lsh => a << (b & 63),
                AluOp::Rsh => a >> (b & 63),
                AluOp::Arsh => ((a as i64) >> (b & 63)) as u64,
                AluOp::Neg => (a as i64).wrapping_neg() as u64,
                AluOp::Mov => b,
                AluOp::MovSx(8) => b as i8 as i64 as u64,
                AluOp::MovSx(16) => b as i16 as i64 as u64,
                AluOp::MovSx(_) => b as i32 as i64 as u64,
            }
        } else {
            let (x, y) = (a as u32, b as u32);
            (match op {
                AluOp::Add => x.wrapping_add(y),
                AluOp::Sub => x.wrapping_sub(y),
                AluOp::Mul => x.wrapping_mul(y),
                AluOp::Div => x.checked_div(y).unwrap_or(0),
                AluOp::Mod => {
                    if y == 0 {
                        x
                    } else {
                        x % y
                    }
                }
                AluOp::SDiv | AluOp::SMod => {
                    sdiv_smod(op, x as i32 as i64, y as i32 as i64, 32) as u32
                }
                AluOp::Or => x | y,
                AluOp::And => x & y,
                AluOp::Xor => x ^ y,
                AluOp::Lsh => x << (y & 31),
                AluOp::Rsh => x >> (y & 31),
                AluOp::Arsh => ((x as i32) >> (y & 31)) as u32,
                AluOp::Neg => (x as i32).wrapping_neg() as u32,
                AluOp::Mov => y,
                AluOp::MovSx(8) => y as i8 as i32 as u32,
                AluOp::MovSx(16) => y as i16 as i32 as u32,
                AluOp::MovSx(_) => y,
            }) as u64
        }
    }

    /// A random abstract value and a random member of it.
    fn arb_member() -> impl Strategy<Value = (Scalar, u64)> {
        prop_oneof![
            any::<u64>().prop_map(|v| (Scalar::constant(v), v)),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(a, b, s)| {
                let (lo, hi) = if a < b { (a, b) } else { (b, a) };
                let v = lo + s % (hi - lo).saturating_add(1).max(1);
                (Scalar::urange(lo, hi), v.min(hi))
            }),
            (0u64..300, 0u64..300, any::<u64>()).prop_map(|(a, b, s)| {
                let (lo, hi) = if a < b { (a, b) } else { (b, a) };
                (Scalar::urange(lo, hi), lo + s % (hi - lo + 1))
            }),
            (-300i64..300, 0i64..300, any::<u64>()).prop_map(|(a, w, s)| {
                (
                    Scalar::srange(a, a + w),
                    (a + (s % (w as u64 + 1)) as i64) as u64,
                )
            }),
            (any::<u64>(), any::<u64>()).prop_map(|(m, s)| {
                let t = Tnum {
                    value: s & !m,
                    mask: m,
                };
                (Scalar::from_bits(t), t.value | (s.rotate_left(7) & m))
            }),
        ]
    }

    fn arb_op() -> impl Strategy<Value = AluOp> {
        prop_oneof![
            Just(AluOp::Add),
            Just(AluOp::Sub),
            Just(AluOp::Mul),
            Just(AluOp::Div),
            Just(AluOp::Mod),
            Just(AluOp::SDiv),
            Just(AluOp::SMod),
            Just(AluOp::Or),
            Just(AluOp::And),
            Just(AluOp::Xor),
            Just(AluOp::Lsh),
            Just(AluOp::Rsh),
            Just(AluOp::Arsh),
            Just(AluOp::Neg),
            Just(AluOp::Mov),
            Just(AluOp::MovSx(8)),
            Just(AluOp::MovSx(16)),
            Just(AluOp::MovSx(32)),
        ]
    }

    fn arb_cond() -> impl Strategy<Value = JmpCond> {
        use JmpCond::*;
        prop_oneof![
            Just(Eq),
            Just(Ne),
            Just(Gt),
            Just(Ge),
            Just(Lt),
            Just(Le),
            Just(Sgt),
            Just(Sge),
            Just(Slt),
            Just(Sle),
            Just(Set)
        ]
    }

    fn holds(cond: JmpCond, a: u64, b: u64, wide: bool) -> bool {
        use JmpCond::*;
        let (a, b, sa, sb) = if wide {
            (a, b, a as i64, b as i64)
        } else {
            (
                a as u32 as u64,
                b as u32 as u64,
                a as u32 as i32 as i64,
                b as u32 as i32 as i64,
            )
        };
        match cond {
            Eq => a == b,
            Ne => a != b,
            Gt => a > b,
            Ge => a >= b,
            Lt => a < b,
            Le => a <= b,
            Sgt => sa > sb,
            Sge => sa >= sb,
            Slt => sa < sb,
            Sle => sa <= sb,
            Set => a & b != 0,
        }
    }

    proptest! {
        #[test]
        fn members_stay_members((a, x) in arb_member(), (b, y) in arb_member(), op in arb_op(), wide in any::<bool>()) {
            prop_assert!(a.contains_value(x), "{a} !∋ {x}");
            prop_assert!(b.contains_value(y), "{b} !∋ {y}");
            let r = a.alu(op, &b, wide);
            let c = concrete(op, x, y, wide);
            prop_assert!(r.contains_value(c), "{op:?} wide={wide}: {a} op {b} = {r} but concrete {x:#x},{y:#x} -> {c:#x}");
        }

        #[test]
        fn refinement_keeps_members((a, x) in arb_member(), (b, y) in arb_member(), cond in arb_cond(), wide in any::<bool>()) {
            let taken = holds(cond, x, y, wide);
            let r = if wide { Scalar::refine64(cond, taken, &a, &b) } else { Scalar::refine32(cond, taken, &a, &b) };
            let (ra, rb) = r.expect("a concrete outcome was declared impossible");
            prop_assert!(ra.contains_value(x) && rb.contains_value(y), "{cond:?} {taken} {a} {b} -> {ra} {rb} lost {x:#x} {y:#x}");
        }

        #[test]
        fn endian_and_views((a, x) in arb_member()) {
            prop_assert!(a.subreg().contains_value(x as u32 as u64));
            prop_assert!(a.sext(32).contains_value(x as u32 as i32 as i64 as u64));
            prop_assert!(a.sext(8).contains_value(x as i8 as i64 as u64));
            prop_assert!(a.endian(ByteOrder::ToBe, 16).contains_value((x as u16).swap_bytes() as u64));
            prop_assert!(a.endian(ByteOrder::ToLe, 32).contains_value(x as u32 as u64));
            prop_assert!(a.widen(&Scalar::constant(x)).contains(&a));
        }
    }
}
