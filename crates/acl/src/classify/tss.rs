use rustc_hash::FxHashMap;

use super::Classifier;
use crate::field::Field;
use crate::rule::{PacketKey, Rule};

/// Address fields a tuple may hash on a prefix of, in signature order.
const ADDR_FIELDS: [Field; 4] = [Field::Sip, Field::Dip, Field::SGid, Field::DGid];
/// Scalar fields a tuple may hash on exactly, in signature order. UDP ports are left to the
/// residual check: RoCEv2's destination port is always 4791 and source ports are entropy
/// ranges, so indexing them would only multiply tuples.
const EXACT_FIELDS: [Field; 4] = [Field::SLid, Field::DLid, Field::LQpn, Field::DQpn];

/// Which fields a group of rules is indexed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Signature {
    /// Prefix length per address field (0 = not indexed).
    prefix: [u8; 4],
    /// Bit per exact field.
    exact: u8,
}

#[derive(Clone, Debug)]
struct Tuple {
    sig: Signature,
    masks: [u128; 4],
    /// Fields a packet must carry to possibly match any rule of the tuple.
    required: u16,
    /// Lowest rule priority in the tuple.
    min_priority: u32,
    /// Key hash -> rule priorities, ascending. Distinct keys may share a hash: every
    /// candidate is checked in full.
    table: FxHashMap<u64, Vec<u32>>,
}

#[inline(always)]
fn mix(h: u64, x: u64) -> u64 {
    (h.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95)
}

fn mask_of(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len as u32)
    }
}

fn exact_value(k: &PacketKey, f: Field) -> u64 {
    match f {
        Field::SLid => k.slid as u64,
        Field::DLid => k.dlid as u64,
        Field::LQpn => k.lqpn as u64,
        _ => k.dqpn as u64,
    }
}

fn addr_value(k: &PacketKey, i: usize) -> u128 {
    match i {
        0 => k.sip,
        1 => k.dip,
        2 => k.sgid,
        _ => k.dgid,
    }
}

impl Tuple {
    #[inline]
    fn hash(&self, k: &PacketKey) -> u64 {
        let mut h = 0x243f_6a88_85a3_08d3u64;
        for i in 0..4 {
            if self.sig.prefix[i] != 0 {
                let v = addr_value(k, i) & self.masks[i];
                h = mix(mix(h, v as u64), (v >> 64) as u64);
            }
        }
        for (i, f) in EXACT_FIELDS.iter().enumerate() {
            if self.sig.exact & (1 << i) != 0 {
                h = mix(h, exact_value(k, *f));
            }
        }
        h
    }
}

fn signature(r: &Rule) -> Signature {
    let mut sig = Signature {
        prefix: [0; 4],
        exact: 0,
    };
    let absent_ok = |f: Field| r.absent_ok & (1 << f.index()) != 0;
    let ranges = [r.sip, r.dip, r.sgid, r.dgid];
    for (i, f) in ADDR_FIELDS.iter().enumerate() {
        if !absent_ok(*f) {
            if let Some(len) = ranges[i].prefix_len() {
                sig.prefix[i] = len as u8;
            }
        }
    }
    for (i, f) in EXACT_FIELDS.iter().enumerate() {
        let (lo, hi) = r.range(*f);
        if !absent_ok(*f) && lo == hi {
            sig.exact |= 1 << i;
        }
    }
    sig
}

/// The key a rule is stored under: its fields' lower bounds, as a packet would present them.
fn rule_key(r: &Rule) -> PacketKey {
    let mut k = PacketKey::default();
    for f in ADDR_FIELDS.iter().chain(EXACT_FIELDS.iter()) {
        k.set(*f, r.range(*f).0);
    }
    k
}

/// Tuple-space search classifier (owns its rule table).
#[derive(Clone, Debug)]
pub struct TupleSpace {
    rules: Vec<Rule>,
    tuples: Vec<Tuple>,
    /// Rule priority -> tuple index, for updates.
    tuple_of: Vec<u32>,
}

/// Shape of a built table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TupleStats {
    /// Number of tuples (distinct signatures).
    pub tuples: usize,
    /// Largest bucket (rules sharing one key hash).
    pub max_bucket: usize,
}

impl TupleSpace {
    /// Builds the tables for rules in priority order (`rules[i].priority == i`).
    pub fn new(rules: Vec<Rule>) -> TupleSpace {
        let mut ts = TupleSpace {
            tuple_of: vec![0; rules.len()],
            rules,
            tuples: Vec::new(),
        };
        let mut by_sig: FxHashMap<Signature, usize> = FxHashMap::default();
        for p in 0..ts.rules.len() {
            let sig = signature(&ts.rules[p]);
            let t = *by_sig.entry(sig).or_insert_with(|| {
                ts.tuples.push(Self::empty_tuple(sig));
                ts.tuples.len() - 1
            });
            ts.insert_into(t, p as u32);
        }
        ts.order_tuples();
        ts
    }

    fn empty_tuple(sig: Signature) -> Tuple {
        let mut required = 0u16;
        for (i, f) in ADDR_FIELDS.iter().enumerate() {
            if sig.prefix[i] != 0 {
                required |= 1 << f.index();
            }
        }
        for (i, f) in EXACT_FIELDS.iter().enumerate() {
            if sig.exact & (1 << i) != 0 {
                required |= 1 << f.index();
            }
        }
        Tuple {
            sig,
            masks: sig.prefix.map(mask_of),
            required,
            min_priority: u32::MAX,
            table: FxHashMap::default(),
        }
    }

    fn insert_into(&mut self, t: usize, p: u32) {
        let tuple = &mut self.tuples[t];
        let h = tuple.hash(&rule_key(&self.rules[p as usize]));
        let bucket = tuple.table.entry(h).or_default();
        let at = bucket.partition_point(|&q| q < p);
        bucket.insert(at, p);
        tuple.min_priority = tuple.min_priority.min(p);
        self.tuple_of[p as usize] = t as u32;
    }

    fn order_tuples(&mut self) {
        self.tuples.retain(|t| !t.table.is_empty());
        self.tuples.sort_by_key(|t| t.min_priority);
        for (ti, t) in self.tuples.iter().enumerate() {
            for bucket in t.table.values() {
                for &p in bucket {
                    self.tuple_of[p as usize] = ti as u32;
                }
            }
        }
    }

    /// The rule table.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Table shape.
    pub fn stats(&self) -> TupleStats {
        TupleStats {
            tuples: self.tuples.len(),
            max_bucket: self
                .tuples
                .iter()
                .flat_map(|t| t.table.values().map(Vec::len))
                .max()
                .unwrap_or(0),
        }
    }

    /// Replaces rules in place, keeping their priorities (`rule.priority` names the slot).
    /// This is how a shadow copy is brought to the next version before the flip.
    ///
    /// # Panics
    /// Never for priorities inside the table; out-of-range priorities are ignored.
    pub fn replace_rules(&mut self, updates: &[Rule]) {
        let mut reorder = false;
        for new in updates {
            let p = new.priority;
            let Some(old) = self.rules.get(p as usize).copied() else {
                continue;
            };
            let t = self.tuple_of[p as usize] as usize;
            let h = self.tuples[t].hash(&rule_key(&old));
            if let Some(bucket) = self.tuples[t].table.get_mut(&h) {
                bucket.retain(|&q| q != p);
                if bucket.is_empty() {
                    self.tuples[t].table.remove(&h);
                }
            }
            if self.tuples[t].min_priority == p {
                self.tuples[t].min_priority = self.tuples[t]
                    .table
                    .values()
                    .filter_map(|b| b.first().copied())
                    .min()
                    .unwrap_or(u32::MAX);
                reorder = true;
            }
            self.rules[p as usize] = *new;
            let sig = signature(new);
            let nt = match self.tuples.iter().position(|t| t.sig == sig) {
                Some(nt) => nt,
                None => {
                    self.tuples.push(Self::empty_tuple(sig));
                    reorder = true;
                    self.tuples.len() - 1
                }
            };
            let before = self.tuples[nt].min_priority;
            self.insert_into(nt, p);
            reorder |= self.tuples[nt].min_priority != before;
        }
        if reorder {
            self.order_tuples();
        }
    }
}

impl Classifier for TupleSpace {
    #[inline]
    fn classify(&self, key: &PacketKey) -> Option<u32> {
        let mut best = u32::MAX;
        for t in &self.tuples {
            if t.min_priority >= best {
                break;
            }
            if key.present & t.required != t.required {
                continue;
            }
            let Some(bucket) = t.table.get(&t.hash(key)) else {
                continue;
            };
            for &p in bucket {
                if p >= best {
                    break;
                }
                if self.rules[p as usize].matches(key) {
                    best = p;
                    break;
                }
            }
        }
        (best != u32::MAX).then_some(best)
    }
}
