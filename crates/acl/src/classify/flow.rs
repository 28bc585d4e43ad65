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
    /// The key's hash: most mismatches are rejected on it without comparing keys.
    tag: u64,
    /// Rule priority, or `u32::MAX` for "no rule matched".
    rule: u32,
    valid: bool,
}

/// Two slots sharing an index, and which of them was last hit.
#[derive(Clone, Copy, Debug)]
struct Set {
    ways: [Slot; 2],
    /// The way last answered from: a new flow replaces the other one.
    recent: u8,
}

/// A per-thread, two-way set-associative table of hot flows and the rule that decided each.
///
/// Classification is a pure function of the packet key for a given rule-set version, so a
/// cached decision is exact; the cache only has to be flushed when the rule set changes
/// ([`FlowCache::flush`], driven by the rule-table generation). Unlike [`super::HotTier`] it
/// needs no overlap analysis, so it works on rule sets whose hot rules overlap many others.
///
/// A new flow takes the way that was not hit last and does not become "recent" itself until
/// it is hit: a stream of one-off packets keeps replacing one way while a hot flow keeps the
/// other.
#[derive(Clone, Debug)]
pub struct FlowCache {
    sets: Vec<Set>,
    mask: usize,
    stats: FlowCacheStats,
    /// Generation of the classifier the entries came from ([`Classifier::generation`]).
    generation: u64,
}

/// The key's hash: three independent multiply chains, so it costs a few cycles of latency.
#[inline(always)]
fn hash(k: &PacketKey) -> u64 {
    let lo = |x: u128| x as u64;
    let hi = |x: u128| (x >> 64) as u64;
    let a = lo(k.sip) ^ lo(k.dip).rotate_left(32) ^ (k.dqpn as u64) << 40 ^ k.lqpn as u64;
    let b = hi(k.sip)
        ^ hi(k.dip).rotate_left(29)
        ^ k.va.rotate_left(13)
        ^ ((k.sport as u64) << 48 | (k.dport as u64) << 32 | (k.slid as u64) << 16 | k.dlid as u64);
    let c = lo(k.sgid)
        ^ lo(k.dgid).rotate_left(21)
        ^ hi(k.sgid).rotate_left(7)
        ^ hi(k.dgid).rotate_left(43)
        ^ ((k.opcode as u64) << 40
            | (k.cm_type as u64) << 32
            | (k.forged as u64) << 24
            | k.present as u64);
    let h = a.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ b.wrapping_mul(0x517c_c1b7_2722_0a95).rotate_left(21)
        ^ c.wrapping_mul(0xbf58_476d_1ce4_e5b9).rotate_left(42);
    h ^ (h >> 29)
}

const EMPTY_SLOT: Slot = Slot {
    key: PacketKey {
        present: 0,
        sip: 0,
        dip: 0,
        sgid: 0,
        dgid: 0,
        va: 0,
        lqpn: 0,
        dqpn: 0,
        sport: 0,
        dport: 0,
        slid: 0,
        dlid: 0,
        opcode: 0,
        cm_type: 0,
        forged: 0,
    },
    tag: 0,
    rule: 0,
    valid: false,
};

impl FlowCache {
    /// A cache of `slots` entries (rounded up to a power of two, at least two).
    pub fn new(slots: usize) -> FlowCache {
        let sets = (slots.max(2).next_power_of_two() / 2).max(1);
        FlowCache {
            sets: vec![
                Set {
                    ways: [EMPTY_SLOT; 2],
                    recent: 0,
                };
                sets
            ],
            mask: sets - 1,
            stats: FlowCacheStats::default(),
            generation: 0,
        }
    }

    /// The way of set `i` holding `key`, if any.
    #[inline(always)]
    fn find(&self, i: usize, tag: u64, key: &PacketKey) -> Option<usize> {
        let set = &self.sets[i];
        (0..2).find(|&w| {
            let s = &set.ways[w];
            s.tag == tag && s.valid && s.key == *key
        })
    }

    #[inline(always)]
    fn hit(&mut self, i: usize, way: usize) -> Option<u32> {
        self.stats.hits += 1;
        let set = &mut self.sets[i];
        set.recent = way as u8;
        let rule = set.ways[way].rule;
        (rule != u32::MAX).then_some(rule)
    }

    #[inline(always)]
    fn remember(&mut self, i: usize, tag: u64, key: &PacketKey, hit: Option<u32>) {
        let set = &mut self.sets[i];
        let way = 1 - (set.recent as usize & 1);
        set.ways[way] = Slot {
            key: *key,
            tag,
            rule: hit.unwrap_or(u32::MAX),
            valid: true,
        };
    }

    /// Forgets every flow (call when the rule set changes).
    pub fn flush(&mut self) {
        for set in &mut self.sets {
            set.ways[0].valid = false;
            set.ways[1].valid = false;
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
        let tag = hash(key);
        let i = tag as usize & self.mask;
        if let Some(way) = self.find(i, tag, key) {
            return self.hit(i, way);
        }
        self.stats.misses += 1;
        let hit = full.classify(key);
        self.remember(i, tag, key, hit);
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
            let mut tags = [0u64; CHUNK];
            let mut misses = 0;
            for (j, (key, out)) in keys.iter().zip(out.iter_mut()).enumerate() {
                let tag = hash(key);
                let i = tag as usize & self.mask;
                match self.find(i, tag, key) {
                    Some(way) => *out = self.hit(i, way),
                    None => {
                        missed[misses] = *key;
                        at[misses] = j;
                        tags[misses] = tag;
                        misses += 1;
                    }
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
                let i = tags[m] as usize & self.mask;
                // A repeat of a key missed earlier in this chunk is already there.
                if self.find(i, tags[m], &missed[m]).is_none() {
                    self.remember(i, tags[m], &missed[m], found[m]);
                }
            }
        }
    }
}
