//! Normalised fixed-size rules: the layout that lives in XState and that an eBPF enforcement
//! program walks, plus the packet key every classifier matches against.
//!
//! A rule is 224 bytes, `#[repr(C)]`, 8-byte aligned, no pointers, little-endian on the wire
//! (the image format in [`crate::compile::RuleImage`]). Each field is an inclusive range
//! `lo..=hi` (an empty range, `lo > hi`, matches no present value) or, for small domains, a
//! bitmask; bit `f` of `absent_ok` says whether a packet *without* field `f` matches. Rules are
//! stored in priority order: the first matching rule decides.
//!
//! | offset | size | field                                                   |
//! |-------:|-----:|---------------------------------------------------------|
//! |      0 |   32 | `sip` (lo, hi: 128-bit, each as [high u64, low u64])    |
//! |     32 |   32 | `dip`                                                   |
//! |     64 |   32 | `sgid`                                                  |
//! |     96 |   32 | `dgid`                                                  |
//! |    128 |   16 | `va_lo`, `va_hi` (u64)                                  |
//! |    144 |   32 | `opcode_mask` (256 bits, bit `op` for opcode `op`)      |
//! |    176 |   16 | `lqpn_lo`, `lqpn_hi`, `dqpn_lo`, `dqpn_hi` (u32)        |
//! |    192 |   16 | `sport`, `dport`, `slid`, `dlid` lo/hi pairs (u16)      |
//! |    208 |    2 | `cm_type_mask` (bit = [`crate::field::CmType`] value)   |
//! |    210 |    1 | `forged_mask` (bit 0: not forged, bit 1: forged)        |
//! |    211 |    1 | `action` (0 allow, 1 deny)                              |
//! |    212 |    2 | `absent_ok` (bit = [`crate::field::Field`] index)       |
//! |    214 |    2 | reserved, zero                                          |
//! |    216 |    4 | `policy` (index in apply order)                         |
//! |    220 |    4 | `priority` (position in the table)                      |

use crate::field::{Field, FIELD_COUNT};
use crate::packet::PacketInfo;
use crate::policy::Action;

/// An inclusive 128-bit range stored as two `[high, low]` u64 pairs (no u128 in the ABI).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
#[repr(C)]
pub struct AddrRange {
    /// Lower bound, `[high 64 bits, low 64 bits]`.
    pub lo: [u64; 2],
    /// Upper bound.
    pub hi: [u64; 2],
}

impl AddrRange {
    /// From `u128` bounds.
    pub fn new(lo: u128, hi: u128) -> AddrRange {
        AddrRange {
            lo: [(lo >> 64) as u64, lo as u64],
            hi: [(hi >> 64) as u64, hi as u64],
        }
    }

    /// Lower bound.
    #[inline]
    pub fn lo(&self) -> u128 {
        ((self.lo[0] as u128) << 64) | self.lo[1] as u128
    }

    /// Upper bound.
    #[inline]
    pub fn hi(&self) -> u128 {
        ((self.hi[0] as u128) << 64) | self.hi[1] as u128
    }

    /// Prefix length if the range is exactly one CIDR prefix.
    pub fn prefix_len(&self) -> Option<u32> {
        let (lo, hi) = (self.lo(), self.hi());
        if lo > hi {
            return None;
        }
        let span = lo ^ hi;
        let len = span.leading_zeros();
        let host = if len == 128 { 0 } else { u128::MAX >> len };
        (span == host && lo & host == 0 && hi & host == host).then_some(len)
    }
}

/// One normalised rule. See the module documentation for the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C, align(8))]
pub struct Rule {
    /// IP source range.
    pub sip: AddrRange,
    /// IP destination range.
    pub dip: AddrRange,
    /// Source GID range.
    pub sgid: AddrRange,
    /// Destination GID range.
    pub dgid: AddrRange,
    /// VA lower bound.
    pub va_lo: u64,
    /// VA upper bound.
    pub va_hi: u64,
    /// Allowed opcodes.
    pub opcode_mask: [u64; 4],
    /// lQPN lower bound.
    pub lqpn_lo: u32,
    /// lQPN upper bound.
    pub lqpn_hi: u32,
    /// dQPN lower bound.
    pub dqpn_lo: u32,
    /// dQPN upper bound.
    pub dqpn_hi: u32,
    /// sport lower bound.
    pub sport_lo: u16,
    /// sport upper bound.
    pub sport_hi: u16,
    /// dport lower bound.
    pub dport_lo: u16,
    /// dport upper bound.
    pub dport_hi: u16,
    /// sLID lower bound.
    pub slid_lo: u16,
    /// sLID upper bound.
    pub slid_hi: u16,
    /// dLID lower bound.
    pub dlid_lo: u16,
    /// dLID upper bound.
    pub dlid_hi: u16,
    /// Allowed CM types.
    pub cm_type_mask: u16,
    /// Allowed forgery flags.
    pub forged_mask: u8,
    /// 0 allow, 1 deny.
    pub action: u8,
    /// Fields whose absence matches.
    pub absent_ok: u16,
    /// Zero.
    pub reserved: u16,
    /// Index of the policy (in apply order) the rule came from.
    pub policy: u32,
    /// Position in the table.
    pub priority: u32,
}

/// Size of one rule in bytes.
pub const RULE_SIZE: usize = 224;
const _: () = assert!(std::mem::size_of::<Rule>() == RULE_SIZE);
const _: () = assert!(std::mem::align_of::<Rule>() == 8);
const _: () = assert!(std::mem::offset_of!(Rule, va_lo) == 128);
const _: () = assert!(std::mem::offset_of!(Rule, opcode_mask) == 144);
const _: () = assert!(std::mem::offset_of!(Rule, lqpn_lo) == 176);
const _: () = assert!(std::mem::offset_of!(Rule, sport_lo) == 192);
const _: () = assert!(std::mem::offset_of!(Rule, cm_type_mask) == 208);
const _: () = assert!(std::mem::offset_of!(Rule, absent_ok) == 212);
const _: () = assert!(std::mem::offset_of!(Rule, priority) == 220);

/// The values a packet presents to the classifier. Built once per packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct PacketKey {
    /// Bit per [`Field`] index: the packet carries the field.
    pub present: u16,
    /// IP source.
    pub sip: u128,
    /// IP destination.
    pub dip: u128,
    /// Source GID.
    pub sgid: u128,
    /// Destination GID.
    pub dgid: u128,
    /// VA.
    pub va: u64,
    /// lQPN.
    pub lqpn: u32,
    /// dQPN.
    pub dqpn: u32,
    /// UDP source port.
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
    /// Source LID.
    pub slid: u16,
    /// Destination LID.
    pub dlid: u16,
    /// Opcode.
    pub opcode: u8,
    /// CM type.
    pub cm_type: u8,
    /// CM forgery flag (0/1).
    pub forged: u8,
}

impl PacketKey {
    /// From per-field values (`None` = absent); values are truncated to their field width.
    pub fn from_values(v: &[Option<u128>; FIELD_COUNT]) -> PacketKey {
        let mut k = PacketKey::default();
        for f in Field::ALL {
            if let Some(x) = v[f.index()] {
                k.set(f, x);
            }
        }
        k
    }

    /// Sets one field present with a value.
    pub fn set(&mut self, f: Field, x: u128) {
        self.present |= 1 << f.index();
        match f {
            Field::Sip => self.sip = x,
            Field::Dip => self.dip = x,
            Field::Sport => self.sport = x as u16,
            Field::Dport => self.dport = x as u16,
            Field::SLid => self.slid = x as u16,
            Field::DLid => self.dlid = x as u16,
            Field::SGid => self.sgid = x,
            Field::DGid => self.dgid = x,
            Field::CmType => self.cm_type = x as u8,
            Field::LQpn => self.lqpn = x as u32 & 0xff_ffff,
            Field::DQpn => self.dqpn = x as u32 & 0xff_ffff,
            Field::Opcode => self.opcode = x as u8,
            Field::Va => self.va = x as u64,
            Field::CmForged => self.forged = (x & 1) as u8,
        }
    }

    /// Per-field values (`None` = absent).
    pub fn values(&self) -> [Option<u128>; FIELD_COUNT] {
        Field::ALL.map(|f| self.get(f))
    }

    /// One field's value.
    pub fn get(&self, f: Field) -> Option<u128> {
        if self.present & (1 << f.index()) == 0 {
            return None;
        }
        Some(match f {
            Field::Sip => self.sip,
            Field::Dip => self.dip,
            Field::Sport => self.sport as u128,
            Field::Dport => self.dport as u128,
            Field::SLid => self.slid as u128,
            Field::DLid => self.dlid as u128,
            Field::SGid => self.sgid,
            Field::DGid => self.dgid,
            Field::CmType => self.cm_type as u128,
            Field::LQpn => self.lqpn as u128,
            Field::DQpn => self.dqpn as u128,
            Field::Opcode => self.opcode as u128,
            Field::Va => self.va as u128,
            Field::CmForged => self.forged as u128,
        })
    }

    /// The data-path part of a parsed packet; the CM fields (type, lQPN, dQPN of CM
    /// messages) are filled in by [`crate::cm::CmTable::resolve`].
    pub fn from_packet(p: &PacketInfo) -> PacketKey {
        let mut k = PacketKey::default();
        let mut put = |f: Field, v: Option<u128>| {
            if let Some(v) = v {
                k.set(f, v);
            }
        };
        put(Field::Sip, p.sip);
        put(Field::Dip, p.dip);
        put(Field::Sport, p.sport.map(u128::from));
        put(Field::Dport, p.dport.map(u128::from));
        put(Field::SLid, p.slid.map(u128::from));
        put(Field::DLid, p.dlid.map(u128::from));
        put(Field::SGid, p.sgid);
        put(Field::DGid, p.dgid);
        put(Field::Opcode, Some(p.opcode as u128));
        put(Field::Va, p.va.map(u128::from));
        match &p.cm {
            None => put(Field::DQpn, Some(p.dest_qp as u128)),
            Some(cm) => {
                put(Field::CmType, Some(cm.kind as u128));
                put(Field::CmForged, Some(cm.forged as u128));
            }
        }
        k
    }
}

#[inline(always)]
fn in_range<T: PartialOrd>(v: T, lo: T, hi: T) -> bool {
    lo <= v && v <= hi
}

impl Rule {
    /// A rule that matches every packet.
    pub fn any(action: Action, policy: u32, priority: u32) -> Rule {
        let full = AddrRange::new(0, u128::MAX);
        Rule {
            sip: full,
            dip: full,
            sgid: full,
            dgid: full,
            va_lo: 0,
            va_hi: u64::MAX,
            opcode_mask: [u64::MAX; 4],
            lqpn_lo: 0,
            lqpn_hi: 0xff_ffff,
            dqpn_lo: 0,
            dqpn_hi: 0xff_ffff,
            sport_lo: 0,
            sport_hi: u16::MAX,
            dport_lo: 0,
            dport_hi: u16::MAX,
            slid_lo: 0,
            slid_hi: u16::MAX,
            dlid_lo: 0,
            dlid_hi: u16::MAX,
            cm_type_mask: u16::MAX,
            forged_mask: 0b11,
            action: action as u8,
            absent_ok: (1 << FIELD_COUNT) - 1,
            reserved: 0,
            policy,
            priority,
        }
    }

    /// The rule's action.
    pub fn action(&self) -> Action {
        // Only the allow code allows: any other byte (a corrupt or unwritten rule) denies.
        if self.action == Action::Allow as u8 {
            Action::Allow
        } else {
            Action::Deny
        }
    }

    /// The range (or, for mask fields, the lowest..highest set value) of a field; used by the
    /// tuple-space builder.
    pub fn range(&self, f: Field) -> (u128, u128) {
        match f {
            Field::Sip => (self.sip.lo(), self.sip.hi()),
            Field::Dip => (self.dip.lo(), self.dip.hi()),
            Field::SGid => (self.sgid.lo(), self.sgid.hi()),
            Field::DGid => (self.dgid.lo(), self.dgid.hi()),
            Field::Sport => (self.sport_lo as u128, self.sport_hi as u128),
            Field::Dport => (self.dport_lo as u128, self.dport_hi as u128),
            Field::SLid => (self.slid_lo as u128, self.slid_hi as u128),
            Field::DLid => (self.dlid_lo as u128, self.dlid_hi as u128),
            Field::LQpn => (self.lqpn_lo as u128, self.lqpn_hi as u128),
            Field::DQpn => (self.dqpn_lo as u128, self.dqpn_hi as u128),
            Field::Va => (self.va_lo as u128, self.va_hi as u128),
            Field::Opcode | Field::CmType | Field::CmForged => (0, f.max()),
        }
    }

    /// Whether a packet matches this rule.
    #[inline]
    pub fn matches(&self, k: &PacketKey) -> bool {
        let present = k.present;
        let absent_ok = self.absent_ok;
        macro_rules! field {
            ($f:expr, $test:expr) => {
                if present & (1 << ($f as u16)) != 0 {
                    if !$test {
                        return false;
                    }
                } else if absent_ok & (1 << ($f as u16)) == 0 {
                    return false;
                }
            };
        }
        field!(
            Field::Opcode,
            self.opcode_mask[(k.opcode >> 6) as usize] >> (k.opcode & 63) & 1 != 0
        );
        field!(Field::DQpn, in_range(k.dqpn, self.dqpn_lo, self.dqpn_hi));
        field!(Field::Sip, in_range(k.sip, self.sip.lo(), self.sip.hi()));
        field!(Field::Dip, in_range(k.dip, self.dip.lo(), self.dip.hi()));
        field!(
            Field::Dport,
            in_range(k.dport, self.dport_lo, self.dport_hi)
        );
        field!(
            Field::Sport,
            in_range(k.sport, self.sport_lo, self.sport_hi)
        );
        field!(Field::Va, in_range(k.va, self.va_lo, self.va_hi));
        field!(
            Field::CmType,
            self.cm_type_mask >> (k.cm_type & 15) & 1 != 0
        );
        field!(Field::LQpn, in_range(k.lqpn, self.lqpn_lo, self.lqpn_hi));
        field!(Field::CmForged, self.forged_mask >> (k.forged & 1) & 1 != 0);
        field!(Field::SLid, in_range(k.slid, self.slid_lo, self.slid_hi));
        field!(Field::DLid, in_range(k.dlid, self.dlid_lo, self.dlid_hi));
        field!(
            Field::SGid,
            in_range(k.sgid, self.sgid.lo(), self.sgid.hi())
        );
        field!(
            Field::DGid,
            in_range(k.dgid, self.dgid.lo(), self.dgid.hi())
        );
        true
    }

    /// Whether some packet could match both rules (conservative only in that empty rules are
    /// never produced by the compiler).
    pub fn overlaps(&self, o: &Rule) -> bool {
        let both_absent = |f: Field| self.absent_ok & o.absent_ok & (1 << f.index()) != 0;
        let ranges = |f: Field| {
            let (a, b) = (self.range(f), o.range(f));
            a.0 <= a.1 && b.0 <= b.1 && a.0.max(b.0) <= a.1.min(b.1)
        };
        for f in [
            Field::Sip,
            Field::Dip,
            Field::SGid,
            Field::DGid,
            Field::Sport,
            Field::Dport,
            Field::SLid,
            Field::DLid,
            Field::LQpn,
            Field::DQpn,
            Field::Va,
        ] {
            if !(both_absent(f) || ranges(f)) {
                return false;
            }
        }
        let ops = self
            .opcode_mask
            .iter()
            .zip(&o.opcode_mask)
            .any(|(a, b)| a & b != 0);
        (ops || both_absent(Field::Opcode))
            && (self.cm_type_mask & o.cm_type_mask != 0 || both_absent(Field::CmType))
            && (self.forged_mask & o.forged_mask != 0 || both_absent(Field::CmForged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_detection() {
        assert_eq!(AddrRange::new(0, u128::MAX).prefix_len(), Some(0));
        let base = 0xffff_0a00_0100u128;
        assert_eq!(AddrRange::new(base, base | 0xff).prefix_len(), Some(120));
        assert_eq!(AddrRange::new(base, base).prefix_len(), Some(128));
        assert_eq!(AddrRange::new(base, base | 0xfe).prefix_len(), None);
        assert_eq!(AddrRange::new(base | 1, base | 0xff).prefix_len(), None);
        assert_eq!(AddrRange::new(5, 4).prefix_len(), None);
    }

    #[test]
    fn any_matches_everything_and_absence_is_checked() {
        let r = Rule::any(Action::Deny, 0, 0);
        assert!(r.matches(&PacketKey::default()));
        let mut k = PacketKey::default();
        k.set(Field::Va, 77);
        let mut needs_va = r;
        needs_va.absent_ok &= !(1 << Field::Va.index());
        assert!(needs_va.matches(&k));
        assert!(!needs_va.matches(&PacketKey::default()));
        needs_va.va_lo = 78;
        assert!(!needs_va.matches(&k));
        assert!(needs_va.overlaps(&r));
    }
}
