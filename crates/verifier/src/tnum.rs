//! Tracked numbers ("known bits"): a value is `value` on the bits where `mask` is 0 and unknown
//! where `mask` is 1. The invariant `value & mask == 0` holds for every `Tnum` this module makes.

/// A set of 64-bit integers described by known and unknown bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tnum {
    pub value: u64,
    pub mask: u64,
}

impl Tnum {
    pub const UNKNOWN: Tnum = Tnum {
        value: 0,
        mask: u64::MAX,
    };

    pub const fn constant(v: u64) -> Self {
        Tnum { value: v, mask: 0 }
    }

    pub fn is_const(self) -> bool {
        self.mask == 0
    }

    /// The smallest tnum containing every value of `[min, max]`.
    pub fn range(min: u64, max: u64) -> Self {
        let chi = min ^ max;
        let bits = 64 - chi.leading_zeros();
        if bits > 63 {
            return Tnum::UNKNOWN;
        }
        let delta = (1u64 << bits) - 1;
        Tnum {
            value: min & !delta,
            mask: delta,
        }
    }

    pub fn min(self) -> u64 {
        self.value
    }

    pub fn max(self) -> u64 {
        self.value | self.mask
    }

    pub fn wrapping_add(self, b: Tnum) -> Tnum {
        let sm = self.mask.wrapping_add(b.mask);
        let sv = self.value.wrapping_add(b.value);
        let sigma = sm.wrapping_add(sv);
        let chi = sigma ^ sv;
        let mu = chi | self.mask | b.mask;
        Tnum {
            value: sv & !mu,
            mask: mu,
        }
    }

    pub fn wrapping_sub(self, b: Tnum) -> Tnum {
        let dv = self.value.wrapping_sub(b.value);
        let alpha = dv.wrapping_add(self.mask);
        let beta = dv.wrapping_sub(b.mask);
        let chi = alpha ^ beta;
        let mu = chi | self.mask | b.mask;
        Tnum {
            value: dv & !mu,
            mask: mu,
        }
    }

    pub fn and(self, b: Tnum) -> Tnum {
        let alpha = self.value | self.mask;
        let beta = b.value | b.mask;
        let v = self.value & b.value;
        Tnum {
            value: v,
            mask: alpha & beta & !v,
        }
    }

    pub fn or(self, b: Tnum) -> Tnum {
        let v = self.value | b.value;
        let mu = self.mask | b.mask;
        Tnum {
            value: v,
            mask: mu & !v,
        }
    }

    pub fn xor(self, b: Tnum) -> Tnum {
        let v = self.value ^ b.value;
        let mu = self.mask | b.mask;
        Tnum {
            value: v & !mu,
            mask: mu,
        }
    }

    /// Multiplication by long multiplication over the known and unknown bits.
    pub fn wrapping_mul(self, b: Tnum) -> Tnum {
        let acc_v = self.value.wrapping_mul(b.value);
        let mut a = self;
        let mut bb = b;
        let mut acc_m = Tnum::constant(0);
        while a.value != 0 || a.mask != 0 {
            if a.value & 1 != 0 {
                acc_m = acc_m.wrapping_add(Tnum {
                    value: 0,
                    mask: bb.mask,
                });
            } else if a.mask & 1 != 0 {
                acc_m = acc_m.wrapping_add(Tnum {
                    value: 0,
                    mask: bb.value | bb.mask,
                });
            }
            a = a.rshift(1);
            bb = bb.lshift(1);
        }
        Tnum::constant(acc_v).wrapping_add(acc_m)
    }

    pub fn lshift(self, k: u32) -> Tnum {
        Tnum {
            value: self.value.wrapping_shl(k),
            mask: self.mask.wrapping_shl(k),
        }
    }

    pub fn rshift(self, k: u32) -> Tnum {
        Tnum {
            value: self.value.wrapping_shr(k),
            mask: self.mask.wrapping_shr(k),
        }
    }

    /// Arithmetic right shift of the value seen as `bits` wide (32 or 64).
    pub fn arshift(self, k: u32, bits: u32) -> Tnum {
        if bits == 32 {
            let v = ((self.value as u32 as i32) >> k) as u32 as u64;
            let m = ((self.mask as u32 as i32) >> k) as u32 as u64;
            Tnum { value: v, mask: m }
        } else {
            Tnum {
                value: ((self.value as i64) >> k) as u64,
                mask: ((self.mask as i64) >> k) as u64,
            }
        }
    }

    /// Keeps the low `bytes` bytes.
    pub fn cast(self, bytes: u32) -> Tnum {
        if bytes >= 8 {
            return self;
        }
        let m = (1u64 << (bytes * 8)) - 1;
        Tnum {
            value: self.value & m,
            mask: self.mask & m,
        }
    }

    /// Intersection; `None` when the two share no value.
    pub fn intersect(self, b: Tnum) -> Option<Tnum> {
        let known_both = !self.mask & !b.mask;
        if (self.value ^ b.value) & known_both != 0 {
            return None;
        }
        let v = self.value | b.value;
        let mu = self.mask & b.mask;
        Some(Tnum {
            value: v & !mu,
            mask: mu,
        })
    }

    /// True when every value of `other` is in `self`.
    pub fn contains(self, other: Tnum) -> bool {
        if other.mask & !self.mask != 0 {
            return false;
        }
        (self.value & !self.mask) == (other.value & !self.mask)
    }

    /// Smallest tnum containing both.
    pub fn union(self, b: Tnum) -> Tnum {
        let mu = self.mask | b.mask | (self.value ^ b.value);
        Tnum {
            value: self.value & !mu,
            mask: mu,
        }
    }

    pub fn contains_value(self, v: u64) -> bool {
        (v & !self.mask) == self.value
    }
}

impl std::fmt::Display for Tnum {
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
