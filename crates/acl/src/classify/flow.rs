use super::Classifier;
use crate::rule::PacketKey;

/// Counters of a flow cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowCacheStats {
    /// Packets answered from the cache.
    pub hits: u64,
    /// Packets classified by the complete table.
    pub misses: u64,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    key: PacketKey,
    /// Rule priority, or `u32::MAX` for "no rule matched".
    rule: u32,
    valid: bool,
}

/// A per-thread, direct-mapped table of hot flows and the rule that decided each.
///
/// Classification is a pure function of the packet key for a given rule-set version, so a
/// cached decision is exact; the cache only has to be flushed when the rule set changes
/// ([`FlowCache::flush`], driven by the rule-table generation). Unlike [`super::HotTier`] it
/// needs no overlap analysis, so it works on rule sets whose hot rules overlap many others.
#[derive(Clone, Debug)]
pub struct FlowCache {
    slots: Vec<Slot>,
    mask: usize,
    stats: FlowCacheStats,
    /// Generation of the classifier the entries came from ([`Classifier::generation`]).
    generation: u64,
}

#[inline(always)]
fn mix(h: u64, x: u64) -> u64 {
    (h.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95)
}

fn hash(k: &PacketKey) -> u64 {
    let mut h = mix(0x9e37_79b9_7f4a_7c15, k.present as u64);
    h = mix(h, k.sip as u64 ^ (k.dip as u64).rotate_left(32));
    h = mix(h, (k.sip >> 64) as u64 ^ (k.dip >> 64) as u64);
    h = mix(h, k.va);
    h = mix(h, (k.dqpn as u64) << 32 | k.lqpn as u64);
    h = mix(
        h,
        (k.sport as u64) << 48 | (k.dport as u64) << 32 | (k.slid as u64) << 16 | k.dlid as u64,
    );
    h = mix(
        h,
        (k.opcode as u64) << 16 | (k.cm_type as u64) << 8 | k.forged as u64,
    );
    h = mix(h, k.sgid as u64 ^ (k.dgid as u64).rotate_left(17));
    h ^ (h >> 29)
}

impl FlowCache {
    /// A cache of `slots` entries (rounded up to a power of two).
    pub fn new(slots: usize) -> FlowCache {
        let n = slots.max(1).next_power_of_two();
        FlowCache {
            slots: vec![
                Slot {
                    key: PacketKey::default(),
                    rule: 0,
                    valid: false,
                };
                n
            ],
            mask: n - 1,
            stats: FlowCacheStats::default(),
            generation: 0,
        }
    }

    /// Forgets every flow (call when the rule set changes).
    pub fn flush(&mut self) {
        for s in &mut self.slots {
            s.valid = false;
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> FlowCacheStats {
        self.stats
    }

    /// Flushes if `full` is not the rule set the entries came from: a classifier reporting a
    /// [`Classifier::generation`] never gets a stale answer, even across updates.
    #[inline(always)]
    fn follow(&mut self, full: &impl Classifier) {
        let generation = full.generation();
        if generation != self.generation {
            self.flush();
            self.generation = generation;
        }
    }

    /// Classifies through the cache, falling back to `full` and remembering its answer.
    #[inline]
    pub fn classify(&mut self, full: &impl Classifier, key: &PacketKey) -> Option<u32> {
        self.follow(full);
        let slot = &mut self.slots[hash(key) as usize & self.mask];
        if slot.valid && slot.key == *key {
            self.stats.hits += 1;
            return (slot.rule != u32::MAX).then_some(slot.rule);
        }
        self.stats.misses += 1;
        let hit = full.classify(key);
        *slot = Slot {
            key: *key,
            rule: hit.unwrap_or(u32::MAX),
            valid: true,
        };
        hit
    }

    /// [`FlowCache::classify`] for each of `keys` into the same position of `out`: hits are
    /// answered at once, misses are collected and classified together with
    /// [`Classifier::classify_batch`] so their table lookups overlap.
    pub fn classify_batch(
        &mut self,
        full: &impl Classifier,
        keys: &[PacketKey],
        out: &mut [Option<u32>],
    ) {
        const CHUNK: usize = 16;
        self.follow(full);
        for (keys, out) in keys.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
            let mut missed = [PacketKey::default(); CHUNK];
            let mut at = [0usize; CHUNK];
            let mut slot_of = [0usize; CHUNK];
            let mut misses = 0;
            for (j, (key, out)) in keys.iter().zip(out.iter_mut()).enumerate() {
                let i = hash(key) as usize & self.mask;
                let slot = &self.slots[i];
                if slot.valid && slot.key == *key {
                    self.stats.hits += 1;
                    *out = (slot.rule != u32::MAX).then_some(slot.rule);
                } else {
                    missed[misses] = *key;
                    at[misses] = j;
                    slot_of[misses] = i;
                    misses += 1;
                }
            }
            if misses == 0 {
                continue;
            }
            self.stats.misses += misses as u64;
            let mut found = [None; CHUNK];
            full.classify_batch(&missed[..misses], &mut found[..misses]);
            for m in 0..misses {
                out[at[m]] = found[m];
                self.slots[slot_of[m]] = Slot {
                    key: missed[m],
                    rule: found[m].unwrap_or(u32::MAX),
                    valid: true,
                };
            }
        }
    }
}
