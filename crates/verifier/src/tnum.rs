//! Tracked numbers ("known bits"): a value is `value` on the bits where `mask` is 0 and unknown
//! where `mask` is 1. The invariant `value & mask == 0` holds for every tnum this module makes.
//!
//! The code is generic over the machine word ([`Word`]) so that the very code the verifier
//! runs on 64-bit words ([`Tnum`]) can also run on 8-bit words, where tests enumerate every
//! abstract value and every member of it (`tests/domain_exhaustive.rs`).

use std::fmt::{Debug, Display, LowerHex};
use std::hash::Hash;
use std::ops::{BitAnd, BitOr, BitXor, Not};

/// A two's-complement signed word, the signed view of a [`Word`].
pub trait SignedWord: Copy + Eq + Ord + Hash + Debug + Display + Send + Sync + 'static {
    /// The most negative value.
    const MIN: Self;
    /// The most positive value.
    const MAX: Self;
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// Addition, `None` on overflow.
    fn checked_add(self, o: Self) -> Option<Self>;
    /// Subtraction, `None` on overflow.
    fn checked_sub(self, o: Self) -> Option<Self>;
    /// Arithmetic shift right by `k % BITS`.
    fn wrapping_shr(self, k: u32) -> Self;
    /// Truncated division; `MIN / -1` wraps to `MIN`. Panics on a zero divisor, which every
    /// caller excludes first.
    fn wrapping_div(self, o: Self) -> Self;
    /// Truncated remainder; `MIN % -1` is 0. Panics on a zero divisor, which every caller
    /// excludes first.
    fn wrapping_rem(self, o: Self) -> Self;
}

/// An unsigned machine word the scalar domain computes over: `u64` in the verifier, and
/// narrower words in tests. eBPF's "32-bit" operations act on the low half of the word
/// ([`Word::HALF`] bits), its "bytes" are `BITS / 8` bits wide.
pub trait Word:
    Copy
    + Eq
    + Ord
    + Hash
    + Debug
    + Display
    + LowerHex
    + Send
    + Sync
    + 'static
    + BitAnd<Output = Self>
    + BitOr<Output = Self>
    + BitXor<Output = Self>
    + Not<Output = Self>
{
    /// The same bits read as signed.
    type Signed: SignedWord;
    /// Width in bits.
    const BITS: u32;
    /// Width of eBPF's 32-bit subregister at this word size.
    const HALF: u32 = Self::BITS / 2;
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// All bits set.
    const MAX: Self;
    /// The top (sign) bit.
    const SIGN_BIT: Self;

    /// Addition modulo `2^BITS`.
    fn wrapping_add(self, o: Self) -> Self;
    /// Subtraction modulo `2^BITS`.
    fn wrapping_sub(self, o: Self) -> Self;
    /// Multiplication modulo `2^BITS`.
    fn wrapping_mul(self, o: Self) -> Self;
    /// Addition, `None` on overflow.
    fn checked_add(self, o: Self) -> Option<Self>;
    /// Subtraction, `None` on overflow.
    fn checked_sub(self, o: Self) -> Option<Self>;
    /// Multiplication, `None` on overflow.
    fn checked_mul(self, o: Self) -> Option<Self>;
    /// Division, `None` for a zero divisor.
    fn checked_div(self, o: Self) -> Option<Self>;
    /// Shift left by `k % BITS`.
    fn wrapping_shl(self, k: u32) -> Self;
    /// Logical shift right by `k % BITS`.
    fn wrapping_shr(self, k: u32) -> Self;
    /// Number of zero bits above the highest set bit.
    fn leading_zeros(self) -> u32;
    /// Number of set bits.
    fn count_ones(self) -> u32;
    /// The same bits read as a signed number.
    fn as_signed(self) -> Self::Signed;
    /// The same bits read as an unsigned number.
    fn from_signed(s: Self::Signed) -> Self;
    /// Truncation of a `u64` (tests build words from `u64`s).
    fn from_u64(v: u64) -> Self;
    /// Zero-extension to a `u64`.
    fn to_u64(self) -> u64;
    /// Reverses the order of the low `units` eBPF bytes (each `BITS / 8` bits wide) and clears
    /// the rest: `bswap16/32/64` for `units` = 2, 4, 8.
    fn swap_units(self, units: u32) -> Self;

    /// The low `bits` bits set (all of them when `bits >= BITS`).
    fn low_mask(bits: u32) -> Self {
        if bits >= Self::BITS {
            Self::MAX
        } else {
            Self::ONE.wrapping_shl(bits).wrapping_sub(Self::ONE)
        }
    }
}

macro_rules! signed_word {
    ($t:ty) => {
        impl SignedWord for $t {
            const MIN: Self = <$t>::MIN;
            const MAX: Self = <$t>::MAX;
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn checked_add(self, o: Self) -> Option<Self> {
                <$t>::checked_add(self, o)
            }
            fn checked_sub(self, o: Self) -> Option<Self> {
                <$t>::checked_sub(self, o)
            }
            fn wrapping_shr(self, k: u32) -> Self {
                <$t>::wrapping_shr(self, k)
            }
            fn wrapping_div(self, o: Self) -> Self {
                <$t>::wrapping_div(self, o)
            }
            fn wrapping_rem(self, o: Self) -> Self {
                <$t>::wrapping_rem(self, o)
            }
        }
    };
}

macro_rules! word {
    ($t:ty, $s:ty) => {
        signed_word!($s);
        impl Word for $t {
            type Signed = $s;
            const BITS: u32 = <$t>::BITS;
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const MAX: Self = <$t>::MAX;
            const SIGN_BIT: Self = 1 << (<$t>::BITS - 1);
            fn wrapping_add(self, o: Self) -> Self {
                <$t>::wrapping_add(self, o)
            }
            fn wrapping_sub(self, o: Self) -> Self {
                <$t>::wrapping_sub(self, o)
            }
            fn wrapping_mul(self, o: Self) -> Self {
                <$t>::wrapping_mul(self, o)
            }
            fn checked_add(self, o: Self) -> Option<Self> {
                <$t>::checked_add(self, o)
            }
            fn checked_sub(self, o: Self) -> Option<Self> {
                <$t>::checked_sub(self, o)
            }
            fn checked_mul(self, o: Self) -> Option<Self> {
                <$t>::checked_mul(self, o)
            }
            fn checked_div(self, o: Self) -> Option<Self> {
                <$t>::checked_div(self, o)
            }
            fn wrapping_shl(self, k: u32) -> Self {
                <$t>::wrapping_shl(self, k)
            }
            fn wrapping_shr(self, k: u32) -> Self {
                <$t>::wrapping_shr(self, k)
            }
            fn leading_zeros(self) -> u32 {
                <$t>::leading_zeros(self)
            }
            fn count_ones(self) -> u32 {
                <$t>::count_ones(self)
            }
            fn as_signed(self) -> $s {
                self as $s
            }
            fn from_signed(s: $s) -> Self {
                s as $t
            }
            fn from_u64(v: u64) -> Self {
                v as $t
            }
            fn to_u64(self) -> u64 {
                self as u64
            }
            fn swap_units(self, units: u32) -> Self {
                swap_units_by_loop(self, units)
            }
        }
    };
}

/// Byte reversal for words whose eBPF "bytes" are narrower than 8 bits.
fn swap_units_by_loop<W: Word>(v: W, units: u32) -> W {
    let unit = W::BITS / 8;
    let one = W::low_mask(unit);
    let mut out = W::ZERO;
    for i in 0..units.min(8) {
        let part = v.wrapping_shr(i * unit) & one;
        out = out | part.wrapping_shl((units.min(8) - 1 - i) * unit);
    }
    out
}

word!(u8, i8);
signed_word!(i64);

impl Word for u64 {
    type Signed = i64;
    const BITS: u32 = 64;
    const ZERO: Self = 0;
    const ONE: Self = 1;
    const MAX: Self = u64::MAX;
    const SIGN_BIT: Self = 1 << 63;
    #[inline]
    fn wrapping_add(self, o: Self) -> Self {
        u64::wrapping_add(self, o)
    }
    #[inline]
    fn wrapping_sub(self, o: Self) -> Self {
        u64::wrapping_sub(self, o)
    }
    #[inline]
    fn wrapping_mul(self, o: Self) -> Self {
        u64::wrapping_mul(self, o)
    }
    #[inline]
    fn checked_add(self, o: Self) -> Option<Self> {
        u64::checked_add(self, o)
    }
    #[inline]
    fn checked_sub(self, o: Self) -> Option<Self> {
        u64::checked_sub(self, o)
    }
    #[inline]
    fn checked_mul(self, o: Self) -> Option<Self> {
        u64::checked_mul(self, o)
    }
    #[inline]
    fn checked_div(self, o: Self) -> Option<Self> {
        u64::checked_div(self, o)
    }
    #[inline]
    fn wrapping_shl(self, k: u32) -> Self {
        u64::wrapping_shl(self, k)
    }
    #[inline]
    fn wrapping_shr(self, k: u32) -> Self {
        u64::wrapping_shr(self, k)
    }
    #[inline]
    fn leading_zeros(self) -> u32 {
        u64::leading_zeros(self)
    }
    #[inline]
    fn count_ones(self) -> u32 {
        u64::count_ones(self)
    }
    #[inline]
    fn as_signed(self) -> i64 {
        self as i64
    }
    #[inline]
    fn from_signed(s: i64) -> Self {
        s as u64
    }
    fn from_u64(v: u64) -> Self {
        v
    }
    fn to_u64(self) -> u64 {
        self
    }
    fn swap_units(self, units: u32) -> Self {
        // At 64 bits an eBPF byte is a real byte.
        match units {
            2 => (self as u16).swap_bytes() as u64,
            4 => (self as u32).swap_bytes() as u64,
            8 => self.swap_bytes(),
            _ => swap_units_by_loop(self, units),
        }
    }
}

/// A set of words described by known and unknown bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TnumOf<W: Word> {
    /// The known bits' values (bits set in `mask` are 0 here).
    pub value: W,
    /// The unknown bits.
    pub mask: W,
}

/// The verifier's tnum, on 64-bit words.
pub type Tnum = TnumOf<u64>;

impl<W: Word> TnumOf<W> {
    /// Every word.
    pub const UNKNOWN: Self = TnumOf {
        value: W::ZERO,
        mask: W::MAX,
    };

    /// The single value `v`.
    pub const fn constant(v: W) -> Self {
        TnumOf {
            value: v,
            mask: W::ZERO,
        }
    }

    /// Whether every bit is known.
    pub fn is_const(self) -> bool {
        self.mask == W::ZERO
    }

    /// The smallest tnum containing every value of `[min, max]`.
    pub fn range(min: W, max: W) -> Self {
        let chi = min ^ max;
        let bits = W::BITS - chi.leading_zeros();
        if bits >= W::BITS {
            return Self::UNKNOWN;
        }
        let delta = W::low_mask(bits);
        TnumOf {
            value: min & !delta,
            mask: delta,
        }
    }

    /// The smallest member (unknown bits 0).
    pub fn min(self) -> W {
        self.value
    }

    /// The largest member (unknown bits 1).
    pub fn max(self) -> W {
        self.value | self.mask
    }

    /// The members' pairwise sums, modulo `2^BITS`.
    pub fn wrapping_add(self, b: Self) -> Self {
        let sm = self.mask.wrapping_add(b.mask);
        let sv = self.value.wrapping_add(b.value);
        let sigma = sm.wrapping_add(sv);
        let chi = sigma ^ sv;
        let mu = chi | self.mask | b.mask;
        TnumOf {
            value: sv & !mu,
            mask: mu,
        }
    }

    /// The members' pairwise differences, modulo `2^BITS`.
    pub fn wrapping_sub(self, b: Self) -> Self {
        let dv = self.value.wrapping_sub(b.value);
        let alpha = dv.wrapping_add(self.mask);
        let beta = dv.wrapping_sub(b.mask);
        let chi = alpha ^ beta;
        let mu = chi | self.mask | b.mask;
        TnumOf {
            value: dv & !mu,
            mask: mu,
        }
    }

    /// The members' pairwise bitwise ands.
    pub fn and(self, b: Self) -> Self {
        let alpha = self.value | self.mask;
        let beta = b.value | b.mask;
        let v = self.value & b.value;
        TnumOf {
            value: v,
            mask: alpha & beta & !v,
        }
    }

    /// The members' pairwise bitwise ors.
    pub fn or(self, b: Self) -> Self {
        let v = self.value | b.value;
        let mu = self.mask | b.mask;
        TnumOf {
            value: v,
            mask: mu & !v,
        }
    }

    /// The members' pairwise bitwise xors.
    pub fn xor(self, b: Self) -> Self {
        let v = self.value ^ b.value;
        let mu = self.mask | b.mask;
        TnumOf {
            value: v & !mu,
            mask: mu,
        }
    }

    /// Multiplication by long multiplication over the known and unknown bits.
    pub fn wrapping_mul(self, b: Self) -> Self {
        let acc_v = self.value.wrapping_mul(b.value);
        let mut a = self;
        let mut bb = b;
        let mut acc_m = Self::constant(W::ZERO);
        while a.value != W::ZERO || a.mask != W::ZERO {
            if a.value & W::ONE != W::ZERO {
                acc_m = acc_m.wrapping_add(TnumOf {
                    value: W::ZERO,
                    mask: bb.mask,
                });
            } else if a.mask & W::ONE != W::ZERO {
                acc_m = acc_m.wrapping_add(TnumOf {
                    value: W::ZERO,
                    mask: bb.value | bb.mask,
                });
            }
            a = a.rshift(1);
            bb = bb.lshift(1);
        }
        Self::constant(acc_v).wrapping_add(acc_m)
    }

    /// The members shifted left by `k % BITS`.
    pub fn lshift(self, k: u32) -> Self {
        TnumOf {
            value: self.value.wrapping_shl(k),
            mask: self.mask.wrapping_shl(k),
        }
    }

    /// The members shifted right (logically) by `k % BITS`.
    pub fn rshift(self, k: u32) -> Self {
        TnumOf {
            value: self.value.wrapping_shr(k),
            mask: self.mask.wrapping_shr(k),
        }
    }

    /// Arithmetic right shift by `k` of the value seen as `bits` wide (`0 < bits <= BITS`);
    /// the result is `bits` wide, zero-extended.
    pub fn arshift(self, k: u32, bits: u32) -> Self {
        let bits = bits.clamp(1, W::BITS);
        // Shifting by the width or more fills with the sign, as shifting by `bits - 1` does.
        let k = k.min(bits - 1);
        let up = W::BITS - bits;
        let keep = W::low_mask(bits);
        let shift =
            |x: W| W::from_signed(x.wrapping_shl(up).as_signed().wrapping_shr(up + k)) & keep;
        TnumOf {
            value: shift(self.value),
            mask: shift(self.mask),
        }
    }

    /// Keeps the low `bytes` 8-bit bytes (all of them when the word is no wider).
    pub fn cast(self, bytes: u32) -> Self {
        self.truncate(bytes.saturating_mul(8))
    }

    /// Keeps the low `bits` bits (all of them when `bits >= BITS`).
    pub fn truncate(self, bits: u32) -> Self {
        let m = W::low_mask(bits);
        TnumOf {
            value: self.value & m,
            mask: self.mask & m,
        }
    }

    /// Intersection; `None` when the two share no value.
    pub fn intersect(self, b: Self) -> Option<Self> {
        let known_both = !self.mask & !b.mask;
        if (self.value ^ b.value) & known_both != W::ZERO {
            return None;
        }
        let v = self.value | b.value;
        let mu = self.mask & b.mask;
        Some(TnumOf {
            value: v & !mu,
            mask: mu,
        })
    }

    /// True when every value of `other` is in `self`.
    pub fn contains(self, other: Self) -> bool {
        if other.mask & !self.mask != W::ZERO {
            return false;
        }
        (self.value & !self.mask) == (other.value & !self.mask)
    }

    /// Smallest tnum containing both.
    pub fn union(self, b: Self) -> Self {
        let mu = self.mask | b.mask | (self.value ^ b.value);
        TnumOf {
            value: self.value & !mu,
            mask: mu,
        }
    }

    /// Whether `v` is a member.
    pub fn contains_value(self, v: W) -> bool {
        (v & !self.mask) == self.value
    }
}

impl<W: Word> Display for TnumOf<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "(v={:#x}; m={:#x})", self.value, self.mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn member(t: Tnum, seed: u64) -> u64 {
        t.value | (seed & t.mask)
    }

    fn arb() -> impl Strategy<Value = Tnum> {
        (any::<u64>(), any::<u64>()).prop_map(|(v, m)| Tnum {
            value: v & !m,
            mask: m,
        })
    }

    proptest! {
        #[test]
        fn ops_are_sound(a in arb(), b in arb(), s1 in any::<u64>(), s2 in any::<u64>(), k in 0u32..64) {
            let x = member(a, s1);
            let y = member(b, s2);
            prop_assert!(a.wrapping_add(b).contains_value(x.wrapping_add(y)));
            prop_assert!(a.wrapping_sub(b).contains_value(x.wrapping_sub(y)));
            prop_assert!(a.wrapping_mul(b).contains_value(x.wrapping_mul(y)));
            prop_assert!(a.and(b).contains_value(x & y));
            prop_assert!(a.or(b).contains_value(x | y));
            prop_assert!(a.xor(b).contains_value(x ^ y));
            prop_assert!(a.lshift(k).contains_value(x << k));
            prop_assert!(a.rshift(k).contains_value(x >> k));
            prop_assert!(a.arshift(k, 64).contains_value(((x as i64) >> k) as u64));
            prop_assert!(a.union(b).contains_value(x) && a.union(b).contains_value(y));
            let (lo, hi) = if x < y { (x, y) } else { (y, x) };
            prop_assert!(Tnum::range(lo, hi).contains_value(lo) && Tnum::range(lo, hi).contains_value(hi));
        }
    }
}
