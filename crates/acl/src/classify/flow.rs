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

    /// Classifies through the cache, falling back to `full` and remembering its answer.
    #[inline]
    pub fn classify(&mut self, full: &impl Classifier, key: &PacketKey) -> Option<u32> {
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
}
