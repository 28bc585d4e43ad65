use rustc_hash::FxHashMap;

use std::sync::atomic::{AtomicU64, Ordering};

use super::table::{prefetch_line, HashTable};

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
    table: HashTable<Bucket>,
}

/// A compact, conservative pre-check of a rule's most selective residual fields, stored
/// contiguously in large buckets so most candidates are rejected without touching the
/// 224-byte rule. `admits` is false only if the rule cannot match.
#[derive(Clone, Copy, Debug)]
struct QuickFilter {
    /// Opcodes 0..=63 (RC and UC); higher opcodes are not filtered.
    opcodes: u64,
    va_lo: u64,
    va_hi: u64,
    dqpn_lo: u32,
    dqpn_hi: u32,
    sport_lo: u16,
    sport_hi: u16,
    absent_ok: u16,
}

impl QuickFilter {
    fn of(r: &Rule) -> QuickFilter {
        QuickFilter {
            opcodes: r.opcode_mask[0],
            va_lo: r.va_lo,
            va_hi: r.va_hi,
            dqpn_lo: r.dqpn_lo,
            dqpn_hi: r.dqpn_hi,
            sport_lo: r.sport_lo,
            sport_hi: r.sport_hi,
            absent_ok: r.absent_ok,
        }
    }

    #[inline(always)]
    fn admits(&self, k: &PacketKey) -> bool {
        let has = |f: Field| k.present & (1 << f.index()) != 0;
        let absent_ok = |f: Field| self.absent_ok & (1 << f.index()) != 0;
        // A packet without an opcode is left to the full check (its `opcode` is 0, not a
        // value to test the mask with).
        (!has(Field::Opcode) || k.opcode >= 64 || self.opcodes >> k.opcode & 1 != 0)
            && (if has(Field::Va) {
                self.va_lo <= k.va && k.va <= self.va_hi
            } else {
                absent_ok(Field::Va)
            })
            && (if has(Field::DQpn) {
                self.dqpn_lo <= k.dqpn && k.dqpn <= self.dqpn_hi
            } else {
                absent_ok(Field::DQpn)
            })
            && (if has(Field::Sport) {
                self.sport_lo <= k.sport && k.sport <= self.sport_hi
            } else {
                absent_ok(Field::Sport)
            })
    }
}

/// Rule priorities under one key hash, ascending, each with its [`QuickFilter`]. Most buckets
/// hold one rule, stored inline with its filter (in the slot's own cache line), so a probe
/// costs no extra pointer chase and a non-matching candidate is usually rejected without
/// touching its 224-byte rule.
#[derive(Clone, Debug)]
enum Bucket {
    One {
        prio: u32,
        filter: QuickFilter,
    },
    Many {
        prios: Vec<u32>,
        filters: Vec<QuickFilter>,
    },
}

impl Bucket {
    #[inline(always)]
    fn as_slice(&self) -> &[u32] {
        match self {
            Bucket::One { prio, .. } => std::slice::from_ref(prio),
            Bucket::Many { prios, .. } => prios,
        }
    }

    /// Priorities and their pre-filters.
    #[inline(always)]
    fn entries(&self) -> (&[u32], &[QuickFilter]) {
        match self {
            Bucket::One { prio, filter } => {
                (std::slice::from_ref(prio), std::slice::from_ref(filter))
            }
            Bucket::Many { prios, filters } => (prios, filters),
        }
    }

    fn from_prios(prios: Vec<u32>, rules: &[Rule]) -> Bucket {
        if let [prio] = prios[..] {
            return Bucket::One {
                prio,
                filter: QuickFilter::of(&rules[prio as usize]),
            };
        }
        let filters = prios
            .iter()
            .map(|&p| QuickFilter::of(&rules[p as usize]))
            .collect();
        Bucket::Many { prios, filters }
    }

    fn insert(&mut self, p: u32, rules: &[Rule]) {
        let mut v = self.as_slice().to_vec();
        let at = v.partition_point(|&q| q < p);
        v.insert(at, p);
        *self = Bucket::from_prios(v, rules);
    }

    /// Removes `p`; returns whether the bucket is now empty.
    fn remove(&mut self, p: u32, rules: &[Rule]) -> bool {
        let v: Vec<u32> = self
            .as_slice()
            .iter()
            .copied()
            .filter(|&q| q != p)
            .collect();
        if v.is_empty() {
            return true;
        }
        *self = Bucket::from_prios(v, rules);
        false
    }
}

/// Prefix lengths a tuple indexes on: a rule's prefix is rounded down to the nearest one, so
/// that e.g. /24 and /32 IPv4 rules share one tuple (fewer probes per packet) and the full
/// match check on candidates restores exactness. IPv4 lengths are 96 + n in the mapped form.
const INDEXED_PREFIXES: [u8; 7] = [16, 32, 48, 64, 104, 112, 120];

fn indexed_prefix(len: u32) -> u8 {
    INDEXED_PREFIXES
        .iter()
        .rev()
        .copied()
        .find(|&l| l as u32 <= len)
        .unwrap_or(0)
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
                sig.prefix[i] = indexed_prefix(len);
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
    /// Tuple indices by ascending `min_priority`: the probe order. Tuples themselves never
    /// move, so an update re-sorts this short list instead of renumbering every rule.
    order: Vec<u32>,
    /// Changes whenever the answers may change (see [`Classifier::generation`]).
    generation: u64,
}

/// Source of rule-set generations: unique across every table in the process, so a flow cache
/// moved between tables can never mistake one for another.
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

pub(super) fn next_generation() -> u64 {
    GENERATIONS.fetch_add(1, Ordering::Relaxed)
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
            order: Vec::new(),
            rules,
            tuples: Vec::new(),
            generation: next_generation(),
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
            table: HashTable::new(),
        }
    }

    fn insert_into(&mut self, t: usize, p: u32) {
        let tuple = &mut self.tuples[t];
        let h = tuple.hash(&rule_key(&self.rules[p as usize]));
        match tuple.table.get_mut(h) {
            Some(bucket) => bucket.insert(p, &self.rules),
            None => {
                tuple
                    .table
                    .insert(h, Bucket::from_prios(vec![p], &self.rules));
            }
        }
        tuple.min_priority = tuple.min_priority.min(p);
        self.tuple_of[p as usize] = t as u32;
    }

    fn order_tuples(&mut self) {
        let mut order: Vec<u32> = (0..self.tuples.len() as u32)
            .filter(|&t| !self.tuples[t as usize].table.is_empty())
            .collect();
        order.sort_by_key(|&t| self.tuples[t as usize].min_priority);
        self.order = order;
    }

    /// The rule table.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Table shape.
    pub fn stats(&self) -> TupleStats {
        TupleStats {
            tuples: self.order.len(),
            max_bucket: self
                .tuples
                .iter()
                .flat_map(|t| t.table.values().map(|b| b.as_slice().len()))
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
        self.generation = next_generation();
        let mut reorder = false;
        for new in updates {
            let p = new.priority;
            let Some(old) = self.rules.get(p as usize).copied() else {
                continue;
            };
            let t = self.tuple_of[p as usize] as usize;
            let h = self.tuples[t].hash(&rule_key(&old));
            if let Some(bucket) = self.tuples[t].table.get_mut(h) {
                if bucket.remove(p, &self.rules) {
                    self.tuples[t].table.remove(h);
                }
            }
            if self.tuples[t].min_priority == p {
                self.tuples[t].min_priority = self.tuples[t]
                    .table
                    .values()
                    .filter_map(|b| b.as_slice().first().copied())
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

/// Work one lookup did (for benchmarks and tuning).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeWork {
    /// Tuples whose hash table was probed.
    pub tuples: u32,
    /// Bucket entries examined.
    pub entries: u32,
    /// Full rule checks.
    pub full_checks: u32,
}

impl TupleSpace {
    /// [`Classifier::classify`], also reporting the work done.
    pub fn classify_counting(&self, key: &PacketKey) -> (Option<u32>, ProbeWork) {
        let mut w = ProbeWork::default();
        let mut best = u32::MAX;
        for &ti in &self.order {
            let t = &self.tuples[ti as usize];
            if t.min_priority >= best {
                break;
            }
            if key.present & t.required != t.required {
                continue;
            }
            w.tuples += 1;
            let Some(bucket) = t.table.get(t.hash(key)) else {
                continue;
            };
            match bucket {
                Bucket::One { prio, filter } => {
                    w.entries += 1;
                    if *prio < best && filter.admits(key) {
                        w.full_checks += 1;
                        if self.rules[*prio as usize].matches(key) {
                            best = *prio;
                        }
                    }
                }
                Bucket::Many { prios, filters } => {
                    for (&p, f) in prios.iter().zip(filters) {
                        if p >= best {
                            break;
                        }
                        w.entries += 1;
                        if f.admits(key) {
                            w.full_checks += 1;
                            if self.rules[p as usize].matches(key) {
                                best = p;
                                break;
                            }
                        }
                    }
                }
            }
        }
        ((best != u32::MAX).then_some(best), w)
    }
}

/// Tuples whose home slots are touched ahead of the probe loop.
const EARLY_TOUCH: usize = 32;
/// Packets whose lookups are interleaved by [`Classifier::classify_batch`].
const BATCH: usize = 16;
const RULE_SIZE: usize = std::mem::size_of::<Rule>();

impl TupleSpace {
    /// Hashes of the first [`EARLY_TOUCH`] tuples in probe order (0 for tuples the packet
    /// cannot match), each home slot prefetched so that the misses overlap.
    #[inline(always)]
    fn hash_and_prefetch(&self, key: &PacketKey, hashes: &mut [u64; EARLY_TOUCH]) {
        for (i, &ti) in self.order.iter().take(EARLY_TOUCH).enumerate() {
            let t = &self.tuples[ti as usize];
            if key.present & t.required == t.required {
                hashes[i] = t.hash(key);
                t.table.prefetch(hashes[i]);
            }
        }
    }

    /// The probe loop: the first rule matching `key` below `best` (a priority already known
    /// to match, or `u32::MAX`), which it returns if nothing lower matches.
    #[inline(always)]
    fn probe(&self, key: &PacketKey, hashes: &[u64; EARLY_TOUCH], mut best: u32) -> Option<u32> {
        for (i, &ti) in self.order.iter().enumerate() {
            let t = &self.tuples[ti as usize];
            if t.min_priority >= best {
                break;
            }
            if key.present & t.required != t.required {
                continue;
            }
            let h = if i < EARLY_TOUCH {
                hashes[i]
            } else {
                t.hash(key)
            };
            let Some(bucket) = t.table.get(h) else {
                continue;
            };
            let (prios, filters) = bucket.entries();
            for (&p, f) in prios.iter().zip(filters) {
                if p >= best {
                    break;
                }
                if f.admits(key) && self.rules[p as usize].matches(key) {
                    best = p;
                    break;
                }
            }
        }
        (best != u32::MAX).then_some(best)
    }

    /// The lowest rule that passes its pre-filter in the first buckets probed: usually the
    /// answer, found with bucket reads only (no rule is touched). `u32::MAX` if none.
    #[inline(always)]
    fn likely_match(&self, key: &PacketKey, hashes: &[u64; EARLY_TOUCH]) -> u32 {
        let mut lowest = u32::MAX;
        for (i, &ti) in self.order.iter().take(EARLY_TOUCH).enumerate() {
            let t = &self.tuples[ti as usize];
            if t.min_priority >= lowest {
                break;
            }
            if key.present & t.required != t.required {
                continue;
            }
            let Some(bucket) = t.table.get(hashes[i]) else {
                continue;
            };
            let (prios, filters) = bucket.entries();
            for (&p, f) in prios.iter().zip(filters) {
                if p >= lowest {
                    break;
                }
                if f.admits(key) {
                    lowest = p;
                    break;
                }
            }
        }
        lowest
    }

    /// One chunk of at most [`BATCH`] packets, in passes that each issue their memory accesses
    /// for every packet before any is waited for: hash the tuples and prefetch their home
    /// slots; read the buckets for each packet's likely first match and prefetch that rule;
    /// check it; finally run the exact probe loop bounded by the verified match, which then
    /// mostly reads lines already in cache.
    fn classify_chunk(&self, keys: &[PacketKey], out: &mut [Option<u32>]) {
        let n = keys.len().min(out.len()).min(BATCH);
        let keys = &keys[..n];
        let mut hashes = [[0u64; EARLY_TOUCH]; BATCH];
        for (key, hashes) in keys.iter().zip(&mut hashes) {
            self.hash_and_prefetch(key, hashes);
        }
        let mut likely = [u32::MAX; BATCH];
        for ((key, hashes), likely) in keys.iter().zip(&hashes).zip(&mut likely) {
            *likely = self.likely_match(key, hashes);
            if let Some(rule) = self.rules.get(*likely as usize) {
                let rule = (rule as *const Rule).cast::<u8>();
                // A rule is 224 bytes, 8-byte aligned: four or five cache lines.
                for offset in [0, 64, 128, 192, RULE_SIZE - 1] {
                    prefetch_line(rule.wrapping_add(offset));
                }
            }
        }
        for (((key, hashes), likely), out) in keys.iter().zip(&hashes).zip(&likely).zip(out) {
            let verified = match self.rules.get(*likely as usize) {
                Some(rule) if rule.matches(key) => *likely,
                _ => u32::MAX,
            };
            *out = self.probe(key, hashes, verified);
        }
    }
}

impl Classifier for TupleSpace {
    #[inline]
    fn classify(&self, key: &PacketKey) -> Option<u32> {
        let mut hashes = [0u64; EARLY_TOUCH];
        self.hash_and_prefetch(key, &mut hashes);
        self.probe(key, &hashes, u32::MAX)
    }

    fn classify_batch(&self, keys: &[PacketKey], out: &mut [Option<u32>]) {
        for (keys, out) in keys.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            self.classify_chunk(keys, out);
        }
    }

    fn generation(&self) -> u64 {
        self.generation
    }
}
