//! Synthetic rule sets and traffic for benchmarks and property tests (our own generator: the
//! usual academic seed files carry a non-commercial licence).
//!
//! Rules mix IPv4 prefixes (/16, /24, /32 inside 10.0.0.0/8), destination prefixes, UDP source
//! port ranges, exact destination QPNs and QPN ranges, opcode groups and VA ranges. Traffic is
//! drawn from the rules themselves (a packet inside a randomly chosen rule), either uniformly
//! over rules or skewed: a share of packets repeats a small set of hot flows.

use crate::field::{opcodes_by_name, Field};
use crate::policy::Action;
use crate::rule::{AddrRange, PacketKey, Rule};

/// SplitMix64: small, fast, deterministic.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// True with probability `pct` percent.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u128, hi: u128) -> u128 {
        let span = hi - lo;
        if span == u128::MAX {
            return ((self.next_u64() as u128) << 64) | self.next_u64() as u128;
        }
        let r = ((self.next_u64() as u128) << 64) | self.next_u64() as u128;
        lo + r % (span + 1)
    }
}

const MAPPED: u128 = 0xffff << 32;

fn v4_prefix(rng: &mut Rng, len: u32) -> AddrRange {
    let addr = (10u32 << 24) | (rng.below(1 << 24) as u32);
    let host = if len == 32 { 0 } else { u32::MAX >> len };
    let base = addr & !host;
    AddrRange::new(MAPPED | base as u128, MAPPED | (base | host) as u128)
}

/// `n` rules in priority order, seeded.
///
/// About one rule in 550 leaves sip, dip, dQPN, sport, opcode and VA all open, so the first
/// such rule (near priority 500–900) decides nearly every packet that no earlier rule takes:
/// traffic drawn from deep rules is still decided near the top. [`specific_rules`] has no
/// such rules.
pub fn rules(n: usize, seed: u64) -> Vec<Rule> {
    shaped_rules(n, seed, false)
}

/// `n` rules in priority order, seeded, each pinning sip to a /24 or /32 and dip to a /32
/// (the rest as in [`rules`]): a packet drawn from a rule is decided by that rule or by an
/// earlier one overlapping it, anywhere in the table.
pub fn specific_rules(n: usize, seed: u64) -> Vec<Rule> {
    shaped_rules(n, seed, true)
}

fn shaped_rules(n: usize, seed: u64, specific: bool) -> Vec<Rule> {
    let mut rng = Rng::new(seed);
    let groups: Vec<Vec<u8>> = ["READ", "WRITE", "SEND", "ATOMIC", "CAS", "FAA"]
        .iter()
        .map(|g| opcodes_by_name(g).expect("group"))
        .collect();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let action = if rng.chance(50) {
            Action::Allow
        } else {
            Action::Deny
        };
        let mut r = Rule::any(action, i as u32, i as u32);
        let need = |r: &mut Rule, f: Field| r.absent_ok &= !(1 << f.index());
        if specific || rng.chance(90) {
            let len = if specific {
                [24, 32][rng.below(2) as usize]
            } else {
                [16, 24, 32, 32][rng.below(4) as usize]
            };
            r.sip = v4_prefix(&mut rng, len);
            need(&mut r, Field::Sip);
        }
        if specific || rng.chance(70) {
            let len = if specific {
                32
            } else {
                [24, 32][rng.below(2) as usize]
            };
            r.dip = v4_prefix(&mut rng, len);
            need(&mut r, Field::Dip);
        }
        if rng.chance(30) {
            let lo = 49152 + rng.below(8192) as u16;
            r.sport_lo = lo;
            r.sport_hi = lo.saturating_add(rng.below(512) as u16);
            need(&mut r, Field::Sport);
        }
        if rng.chance(50) {
            r.dport_lo = 4791;
            r.dport_hi = 4791;
            need(&mut r, Field::Dport);
        }
        match rng.below(10) {
            0..=5 => {
                let q = rng.below(1 << 20) as u32;
                (r.dqpn_lo, r.dqpn_hi) = (q, q);
                need(&mut r, Field::DQpn);
            }
            6 => {
                let q = rng.below(1 << 20) as u32;
                (r.dqpn_lo, r.dqpn_hi) = (q, q + rng.below(256) as u32);
                need(&mut r, Field::DQpn);
            }
            _ => {}
        }
        if rng.chance(60) {
            let g = &groups[rng.below(groups.len() as u64) as usize];
            r.opcode_mask = [0; 4];
            for &op in g {
                r.opcode_mask[(op >> 6) as usize] |= 1 << (op & 63);
            }
        }
        if rng.chance(30) {
            let base = rng.below(1 << 36) << 12;
            r.va_lo = base;
            r.va_hi = base + (rng.below(1 << 20) << 12) + 0xfff;
            need(&mut r, Field::Va);
        }
        out.push(r);
    }
    out
}

fn pick(rng: &mut Rng, lo: u128, hi: u128) -> u128 {
    if lo > hi {
        lo
    } else {
        rng.between(lo, hi)
    }
}

/// A packet inside `r` (absent-ok fields are sometimes left out, as traffic would).
pub fn packet_in(rng: &mut Rng, r: &Rule) -> PacketKey {
    let mut k = PacketKey::default();
    for f in [
        Field::Sip,
        Field::Dip,
        Field::Sport,
        Field::Dport,
        Field::DQpn,
    ] {
        let (lo, hi) = r.range(f);
        let v = if r.absent_ok & (1 << f.index()) != 0 {
            match f {
                Field::Sip | Field::Dip => MAPPED | (10u128 << 24) | rng.below(1 << 24) as u128,
                Field::Dport => 4791,
                Field::Sport => 49152 + rng.below(16384) as u128,
                _ => rng.below(1 << 20) as u128,
            }
        } else {
            pick(rng, lo, hi)
        };
        k.set(f, v);
    }
    k.sgid = k.sip;
    k.dgid = k.dip;
    k.present |= (1 << Field::SGid.index()) | (1 << Field::DGid.index());
    let ops: Vec<u8> = (0u16..=0x14)
        .map(|o| o as u8)
        .filter(|o| r.opcode_mask[(o >> 6) as usize] >> (o & 63) & 1 != 0)
        .collect();
    let op = if ops.is_empty() {
        0x0a
    } else {
        ops[rng.below(ops.len() as u64) as usize]
    };
    k.set(Field::Opcode, op as u128);
    let carries_va = matches!(op, 0x06 | 0x0a | 0x0b | 0x0c | 0x13 | 0x14);
    if carries_va {
        let (lo, hi) = r.range(Field::Va);
        k.set(Field::Va, pick(rng, lo, hi));
    }
    k
}

/// Traffic mixes for the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// Every packet from a uniformly chosen rule.
    Uniform,
    /// `hot_pct` percent of packets repeat one of `flows` hot flows, the rest uniform.
    Skewed {
        /// Share of packets on hot flows.
        hot_pct: u64,
        /// Number of hot flows.
        flows: usize,
    },
}

/// `n` packets over `rules` with the given mix, seeded.
pub fn traffic(rules: &[Rule], n: usize, mix: Mix, seed: u64) -> Vec<PacketKey> {
    let mut rng = Rng::new(seed);
    let hot: Vec<PacketKey> = match mix {
        Mix::Uniform => Vec::new(),
        Mix::Skewed { flows, .. } => (0..flows)
            .map(|_| {
                let r = &rules[rng.below(rules.len() as u64) as usize];
                packet_in(&mut rng, r)
            })
            .collect(),
    };
    (0..n)
        .map(|_| match mix {
            Mix::Skewed { hot_pct, .. } if rng.chance(hot_pct) => {
                hot[rng.below(hot.len() as u64) as usize]
            }
            _ => {
                let r = &rules[rng.below(rules.len() as u64) as usize];
                packet_in(&mut rng, r)
            }
        })
        .collect()
}
