//! Policies to fixed-size rules, and the rule image the control plane writes into XState.
//!
//! Each cube of each applied policy becomes one rule per combination of its range fields'
//! ranges (a set such as `dQPN in {200, 500}` is two ranges, hence two rules, each an exact
//! match a hash tier can index). Opcode, CM type and forgery sets become bitmasks and never
//! multiply rules. Rules keep apply order: rule `i` has priority `i`.

use thiserror::Error;

use crate::field::{Field, FIELD_COUNT};
use crate::policy::{Action, PolicySet};
use crate::rule::{AddrRange, Rule, RULE_SIZE};
use crate::set::{Cube, ValueSet};

/// Most rules one policy may expand to.
pub const MAX_RULES_PER_POLICY: usize = 1 << 16;
/// Most rules in a table.
pub const MAX_RULES: usize = 1 << 20;

/// Magic at the start of a rule image.
pub const IMAGE_MAGIC: [u8; 8] = *b"RDXACL\0\0";
/// Version of the image layout (bump on any change to [`Rule`] or the header).
pub const IMAGE_VERSION: u32 = 1;
/// Size of the image header.
pub const IMAGE_HEADER_SIZE: usize = 32;

/// Compilation failures.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CompileError {
    /// A policy's ranges multiply out to too many rules.
    #[error("policy `{policy}` expands to {count} rules (limit {limit}); use prefixes or ranges instead of long value lists")]
    TooManyRules {
        /// The policy.
        policy: String,
        /// How many it would produce.
        count: usize,
        /// The limit.
        limit: usize,
    },
}

/// A compiled rule table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSet {
    /// Rules in priority order.
    pub rules: Vec<Rule>,
    /// Action when no rule matches.
    pub default: Action,
    /// Policy names in apply order (rule `policy` indexes into it).
    pub policy_names: Vec<String>,
}

impl RuleSet {
    /// The action of a classification result.
    pub fn action_of(&self, hit: Option<u32>) -> Action {
        hit.map_or(self.default, |i| self.rules[i as usize].action())
    }
}

/// Range fields: each rule holds exactly one range per field.
const RANGE_FIELDS: [Field; 11] = [
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
];

fn mask_bits(set: &ValueSet) -> Vec<u64> {
    let mut m = vec![0u64; 4];
    for &(lo, hi) in &set.ranges {
        for v in lo..=hi.min(255) {
            m[(v >> 6) as usize] |= 1 << (v & 63);
        }
    }
    m
}

fn set_range(rule: &mut Rule, f: Field, lo: u128, hi: u128) {
    match f {
        Field::Sip => rule.sip = AddrRange::new(lo, hi),
        Field::Dip => rule.dip = AddrRange::new(lo, hi),
        Field::SGid => rule.sgid = AddrRange::new(lo, hi),
        Field::DGid => rule.dgid = AddrRange::new(lo, hi),
        Field::Sport => (rule.sport_lo, rule.sport_hi) = (lo as u16, hi as u16),
        Field::Dport => (rule.dport_lo, rule.dport_hi) = (lo as u16, hi as u16),
        Field::SLid => (rule.slid_lo, rule.slid_hi) = (lo as u16, hi as u16),
        Field::DLid => (rule.dlid_lo, rule.dlid_hi) = (lo as u16, hi as u16),
        Field::LQpn => (rule.lqpn_lo, rule.lqpn_hi) = (lo as u32, hi as u32),
        Field::DQpn => (rule.dqpn_lo, rule.dqpn_hi) = (lo as u32, hi as u32),
        Field::Va => (rule.va_lo, rule.va_hi) = (lo as u64, hi as u64),
        Field::Opcode | Field::CmType | Field::CmForged => {}
    }
}

/// Expands one cube into rules appended to `out`.
pub fn cube_rules(cube: &Cube, action: Action, policy: u32, out: &mut Vec<Rule>) {
    let mut base = Rule::any(action, policy, 0);
    let mut absent_ok = 0u16;
    for f in Field::ALL {
        if cube.sets[f.index()].absent {
            absent_ok |= 1 << f.index();
        }
    }
    base.absent_ok = absent_ok;
    let op = mask_bits(&cube.sets[Field::Opcode.index()]);
    base.opcode_mask = [op[0], op[1], op[2], op[3]];
    base.cm_type_mask = mask_bits(&cube.sets[Field::CmType.index()])[0] as u16;
    base.forged_mask = mask_bits(&cube.sets[Field::CmForged.index()])[0] as u8;
    // Each range field contributes its ranges, or one empty range if only absence matches.
    let choices: Vec<Vec<(u128, u128)>> = RANGE_FIELDS
        .iter()
        .map(|f| {
            let s = &cube.sets[f.index()];
            if s.ranges.is_empty() {
                vec![(1, 0)]
            } else {
                s.ranges.clone()
            }
        })
        .collect();
    let mut idx = [0usize; RANGE_FIELDS.len()];
    loop {
        let mut r = base;
        for (i, f) in RANGE_FIELDS.iter().enumerate() {
            let (lo, hi) = choices[i][idx[i]];
            set_range(&mut r, *f, lo, hi);
        }
        out.push(r);
        let mut i = 0;
        loop {
            if i == RANGE_FIELDS.len() {
                return;
            }
            idx[i] += 1;
            if idx[i] < choices[i].len() {
                break;
            }
            idx[i] = 0;
            i += 1;
        }
    }
}

fn cube_rule_count(cube: &Cube) -> usize {
    RANGE_FIELDS
        .iter()
        .map(|f| cube.sets[f.index()].ranges.len().max(1))
        .fold(1usize, |a, b| a.saturating_mul(b))
}

/// How many rules a policy set compiles to (saturating), without building them.
pub fn rule_count(set: &PolicySet) -> usize {
    set.policies
        .iter()
        .flat_map(|p| p.cubes.iter())
        .map(cube_rule_count)
        .fold(0usize, |a, b| a.saturating_add(b))
}

/// Compiles a checked policy set.
pub fn compile(set: &PolicySet) -> Result<RuleSet, CompileError> {
    let mut rules = Vec::new();
    for (pi, p) in set.policies.iter().enumerate() {
        let count = p
            .cubes
            .iter()
            .map(cube_rule_count)
            .fold(0usize, |a, b| a.saturating_add(b));
        if count > MAX_RULES_PER_POLICY || rules.len() + count > MAX_RULES {
            return Err(CompileError::TooManyRules {
                policy: p.name.clone(),
                count,
                limit: MAX_RULES_PER_POLICY.min(MAX_RULES - rules.len().min(MAX_RULES)),
            });
        }
        for c in &p.cubes {
            cube_rules(c, p.action, pi as u32, &mut rules);
        }
    }
    for (i, r) in rules.iter_mut().enumerate() {
        r.priority = i as u32;
    }
    Ok(RuleSet {
        rules,
        default: set.default,
        policy_names: set.policies.iter().map(|p| p.name.clone()).collect(),
    })
}

/// Rule-image decoding failures.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ImageError {
    /// Shorter than its header or its rules.
    #[error("rule image truncated: {len} bytes, need {need}")]
    Truncated {
        /// Bytes given.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// Wrong magic.
    #[error("not a rule image (bad magic)")]
    BadMagic,
    /// Unknown version or rule size.
    #[error("unsupported rule image version {version} with rule size {rule_size}")]
    Unsupported {
        /// Version found.
        version: u32,
        /// Rule size found.
        rule_size: u32,
    },
    /// A field holds a value no compiler produces.
    #[error("rule {index} is invalid at byte {offset}: {what}")]
    BadRule {
        /// Rule index.
        index: usize,
        /// Byte offset in the image.
        offset: usize,
        /// What is wrong.
        what: &'static str,
    },
}

/// The serialised form of a [`RuleSet`] as it is placed in XState.
///
/// Header (32 bytes, little-endian): magic `RDXACL\0\0` · u32 version · u32 rule size (224) ·
/// u32 rule count · u8 default action · 3 reserved · u64 reserved (generation, set by the
/// control plane). Rules follow, each in the [`Rule`] layout with integers little-endian and
/// 128-bit bounds as `[high u64, low u64]`.
pub struct RuleImage;

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_rule(out: &mut Vec<u8>, r: &Rule) {
    for a in [&r.sip, &r.dip, &r.sgid, &r.dgid] {
        for w in a.lo.iter().chain(a.hi.iter()) {
            put_u64(out, *w);
        }
    }
    put_u64(out, r.va_lo);
    put_u64(out, r.va_hi);
    for w in r.opcode_mask {
        put_u64(out, w);
    }
    for v in [r.lqpn_lo, r.lqpn_hi, r.dqpn_lo, r.dqpn_hi] {
        put_u32(out, v);
    }
    for v in [
        r.sport_lo, r.sport_hi, r.dport_lo, r.dport_hi, r.slid_lo, r.slid_hi, r.dlid_lo, r.dlid_hi,
    ] {
        put_u16(out, v);
    }
    put_u16(out, r.cm_type_mask);
    out.push(r.forged_mask);
    out.push(r.action);
    put_u16(out, r.absent_ok);
    put_u16(out, 0);
    put_u32(out, r.policy);
    put_u32(out, r.priority);
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut x = [0u8; N];
        x.copy_from_slice(&self.b[self.at..self.at + N]);
        self.at += N;
        x
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    fn addr(&mut self) -> AddrRange {
        AddrRange {
            lo: [self.u64(), self.u64()],
            hi: [self.u64(), self.u64()],
        }
    }
}

impl RuleImage {
    /// Serialises a rule set.
    pub fn to_bytes(set: &RuleSet) -> Vec<u8> {
        let mut out = Vec::with_capacity(IMAGE_HEADER_SIZE + set.rules.len() * RULE_SIZE);
        out.extend_from_slice(&IMAGE_MAGIC);
        put_u32(&mut out, IMAGE_VERSION);
        put_u32(&mut out, RULE_SIZE as u32);
        put_u32(&mut out, set.rules.len() as u32);
        out.push(set.default as u8);
        out.extend_from_slice(&[0; 3]);
        put_u64(&mut out, 0);
        for r in &set.rules {
            put_rule(&mut out, r);
        }
        out
    }

    /// Decodes and validates an image (policy names are not part of it).
    pub fn from_bytes(b: &[u8]) -> Result<RuleSet, ImageError> {
        if b.len() < IMAGE_HEADER_SIZE {
            return Err(ImageError::Truncated {
                len: b.len(),
                need: IMAGE_HEADER_SIZE,
            });
        }
        if b[..8] != IMAGE_MAGIC {
            return Err(ImageError::BadMagic);
        }
        let mut r = Reader { b, at: 8 };
        let version = r.u32();
        let rule_size = r.u32();
        if version != IMAGE_VERSION || rule_size as usize != RULE_SIZE {
            return Err(ImageError::Unsupported { version, rule_size });
        }
        let count = r.u32() as usize;
        let need = count
            .checked_mul(RULE_SIZE)
            .and_then(|n| n.checked_add(IMAGE_HEADER_SIZE))
            .unwrap_or(usize::MAX);
        if b.len() < need {
            return Err(ImageError::Truncated { len: b.len(), need });
        }
        let default = match b[r.at] {
            0 => Action::Allow,
            1 => Action::Deny,
            _ => {
                return Err(ImageError::BadRule {
                    index: 0,
                    offset: r.at,
                    what: "default action is neither 0 nor 1",
                })
            }
        };
        r.at = IMAGE_HEADER_SIZE;
        let mut rules = Vec::with_capacity(count);
        let mut max_policy = 0u32;
        for index in 0..count {
            let start = r.at;
            let rule = Rule {
                sip: r.addr(),
                dip: r.addr(),
                sgid: r.addr(),
                dgid: r.addr(),
                va_lo: r.u64(),
                va_hi: r.u64(),
                opcode_mask: [r.u64(), r.u64(), r.u64(), r.u64()],
                lqpn_lo: r.u32(),
                lqpn_hi: r.u32(),
                dqpn_lo: r.u32(),
                dqpn_hi: r.u32(),
                sport_lo: r.u16(),
                sport_hi: r.u16(),
                dport_lo: r.u16(),
                dport_hi: r.u16(),
                slid_lo: r.u16(),
                slid_hi: r.u16(),
                dlid_lo: r.u16(),
                dlid_hi: r.u16(),
                cm_type_mask: r.u16(),
                forged_mask: r.take::<1>()[0],
                action: r.take::<1>()[0],
                absent_ok: r.u16(),
                reserved: r.u16(),
                policy: r.u32(),
                priority: r.u32(),
            };
            let bad = |offset: usize, what| ImageError::BadRule {
                index,
                offset: start + offset,
                what,
            };
            if rule.action > 1 {
                return Err(bad(211, "action is neither 0 nor 1"));
            }
            if rule.absent_ok >> FIELD_COUNT != 0 || rule.reserved != 0 {
                return Err(bad(212, "reserved bits set"));
            }
            if rule.priority as usize != index {
                return Err(bad(220, "priority differs from the rule's position"));
            }
            max_policy = max_policy.max(rule.policy);
            rules.push(rule);
        }
        let policy_names = if rules.is_empty() {
            Vec::new()
        } else {
            (0..=max_policy).map(|i| format!("policy#{i}")).collect()
        };
        Ok(RuleSet {
            rules,
            default,
            policy_names,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::parse;
    use crate::rule::PacketKey;

    #[test]
    fn sets_expand_to_exact_rules_and_masks_do_not() {
        let set = parse(
            "policy p1 { predicate = match(dQPN in {200, 500}) & match(opcode in {READ, WRITE}) & match(sip = 10.0.0.0/8) action = allow }
             apply(p1) default deny",
        )
        .unwrap();
        let rs = compile(&set).unwrap();
        assert_eq!(rs.rules.len(), 2);
        assert_eq!((rs.rules[0].dqpn_lo, rs.rules[0].dqpn_hi), (200, 200));
        assert_eq!((rs.rules[1].dqpn_lo, rs.rules[1].dqpn_hi), (500, 500));
        assert_eq!(rs.rules[0].sip.prefix_len(), Some(104));
        // READ (5) and WRITE (6 Reliable Connection, 6 Unreliable Connection).
        assert_eq!(rs.rules[0].opcode_mask[0].count_ones(), 17);
        assert_eq!(rs.default, Action::Deny);
    }

    #[test]
    fn image_round_trips_and_rejects_corruption() {
        let set = parse(
            "policy a { predicate = match(VA in [0x1000, 0x2000]) & !match(sport = 5) action = deny }
             policy b { predicate = match(type = ConnectRequest) & match(sGID = fe80::/10) action = allow }
             apply(a, b)",
        )
        .unwrap();
        let rs = compile(&set).unwrap();
        let bytes = RuleImage::to_bytes(&rs);
        assert_eq!(bytes.len(), IMAGE_HEADER_SIZE + rs.rules.len() * RULE_SIZE);
        let back = RuleImage::from_bytes(&bytes).unwrap();
        assert_eq!(back.rules, rs.rules);
        assert_eq!(back.default, rs.default);
        for cut in [0, 31, bytes.len() - 1] {
            assert!(matches!(
                RuleImage::from_bytes(&bytes[..cut]),
                Err(ImageError::Truncated { .. })
            ));
        }
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert_eq!(RuleImage::from_bytes(&bad), Err(ImageError::BadMagic));
        let mut bad = bytes.clone();
        bad[IMAGE_HEADER_SIZE + 211] = 7;
        assert!(matches!(
            RuleImage::from_bytes(&bad),
            Err(ImageError::BadRule {
                index: 0,
                offset: 243,
                ..
            })
        ));
    }

    proptest::proptest! {
        /// The compiled rules decide exactly what the policy semantics decide.
        #[test]
        fn compiled_rules_agree_with_policy_semantics(
            sport in 0u16..8, dport in 0u16..8, va in proptest::option::of(0u64..8), op in 0u8..0x15,
        ) {
            let set = parse(
                "policy a { predicate = (match(sport in {1, 3, 5}) | match(dport in [2, 4])) & !match(VA in [2, 5]) action = deny }
                 policy b { predicate = match(opcode in {READ, CAS}) | match(sport = 6) action = allow }
                 policy c { predicate = !(match(dport = 7) & match(sport = 7)) action = deny }
                 apply(a, b, c)",
            ).unwrap();
            let rs = compile(&set).unwrap();
            let mut k = PacketKey::default();
            k.set(Field::Sport, sport as u128);
            k.set(Field::Dport, dport as u128);
            k.set(Field::Opcode, op as u128);
            if let Some(va) = va { k.set(Field::Va, va as u128); }
            let (hit, action) = set.evaluate(&k.values());
            let rule = rs.rules.iter().find(|r| r.matches(&k));
            proptest::prop_assert_eq!(rule.map(|r| r.policy as usize), hit);
            proptest::prop_assert_eq!(rs.action_of(rule.map(|r| r.priority)), action);
        }
    }
}
