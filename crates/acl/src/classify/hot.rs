use rustc_hash::{FxHashMap, FxHashSet};

use super::{Classifier, TupleSpace};
use crate::rule::{PacketKey, Rule};

/// Counters of one hot tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotStats {
    /// Packets decided by the hot table.
    pub hot_hits: u64,
    /// Packets that went to the complete table.
    pub misses: u64,
    /// Times the hot table was rebuilt.
    pub refreshes: u64,
    /// Candidates not promoted because their closure did not fit.
    pub rejected: u64,
}

/// A per-thread table of hot rules in front of the complete table.
///
/// Correctness rests on one invariant: the hot set is *closed* — for every rule in it, every
/// higher-priority rule that overlaps it is in it too. If the first hot rule matching a packet
/// is `r`, any rule before `r` that also matches the packet overlaps `r`, so it is hot and
/// would have been found first; hence `r` is the true first match. When no hot rule matches,
/// the complete table decides. Rules that would drag too many others in are not promoted.
#[derive(Clone, Debug)]
pub struct HotTier {
    capacity: usize,
    refresh_every: u64,
    hot: Vec<Rule>,
    hot_counts: Vec<u64>,
    miss_counts: FxHashMap<u32, u64>,
    since_refresh: u64,
    /// Whether scanning the hot set pays: the rules promoted decided enough of the last
    /// period's packets. When they did not, packets go straight to the complete table.
    enabled: bool,
    stats: HotStats,
}

/// Share of the last period's packets (in percent) the promoted rules must have decided for
/// the tier to scan them.
const MIN_COVERAGE_PCT: u64 = 25;

impl HotTier {
    /// A tier of at most `capacity` rules, rebuilt after every `refresh_every` packets.
    pub fn new(capacity: usize, refresh_every: u64) -> HotTier {
        HotTier {
            capacity,
            refresh_every: refresh_every.max(1),
            hot: Vec::new(),
            hot_counts: Vec::new(),
            miss_counts: FxHashMap::default(),
            since_refresh: 0,
            enabled: true,
            stats: HotStats::default(),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> HotStats {
        self.stats
    }

    /// Whether the hot set is currently scanned.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Priorities of the rules currently hot.
    pub fn hot_rules(&self) -> Vec<u32> {
        self.hot.iter().map(|r| r.priority).collect()
    }

    /// Classifies through the hot table, falling back to `full`.
    #[inline]
    pub fn classify(&mut self, full: &TupleSpace, key: &PacketKey) -> Option<u32> {
        self.since_refresh += 1;
        if self.since_refresh >= self.refresh_every {
            self.refresh(full);
        }
        for (i, r) in self.hot.iter().enumerate() {
            if !self.enabled {
                break;
            }
            if r.matches(key) {
                self.hot_counts[i] += 1;
                self.stats.hot_hits += 1;
                return Some(r.priority);
            }
        }
        self.stats.misses += 1;
        let hit = full.classify(key);
        if let Some(p) = hit {
            *self.miss_counts.entry(p).or_default() += 1;
        }
        hit
    }

    /// Rebuilds the hot set from the hit counts since the last rebuild.
    pub fn refresh(&mut self, full: &TupleSpace) {
        let period = self.since_refresh.max(1);
        self.since_refresh = 0;
        self.stats.refreshes += 1;
        let mut counts: FxHashMap<u32, u64> = std::mem::take(&mut self.miss_counts);
        for (r, c) in self.hot.iter().zip(&self.hot_counts) {
            *counts.entry(r.priority).or_default() += c;
        }
        let mut candidates: Vec<(u32, u64)> = counts.iter().map(|(p, c)| (*p, *c)).collect();
        candidates.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let rules = full.rules();
        let mut set: FxHashSet<u32> = FxHashSet::default();
        for (p, _) in candidates.into_iter().take(self.capacity) {
            if set.contains(&p) {
                continue;
            }
            match closure(rules, p, &set, self.capacity - set.len()) {
                Some(add) => set.extend(add),
                None => self.stats.rejected += 1,
            }
            if set.len() >= self.capacity {
                break;
            }
        }
        let mut hot: Vec<u32> = set.into_iter().collect();
        hot.sort_unstable();
        let covered: u64 = hot.iter().filter_map(|p| counts.get(p)).sum();
        self.enabled = covered * 100 >= period * MIN_COVERAGE_PCT;
        self.hot = hot.iter().map(|&p| rules[p as usize]).collect();
        self.hot_counts = vec![0; self.hot.len()];
    }
}

/// Rules `seed` needs in the hot set (itself and, transitively, every higher-priority rule
/// overlapping a member) beyond those already in `have`; `None` if more than `room`.
fn closure(rules: &[Rule], seed: u32, have: &FxHashSet<u32>, room: usize) -> Option<Vec<u32>> {
    let mut added: FxHashSet<u32> = FxHashSet::default();
    let mut work = vec![seed];
    added.insert(seed);
    while let Some(r) = work.pop() {
        let rule = &rules[r as usize];
        for (q, other) in rules[..r as usize].iter().enumerate() {
            let q = q as u32;
            if have.contains(&q) || added.contains(&q) || !other.overlaps(rule) {
                continue;
            }
            if added.len() >= room {
                return None;
            }
            added.insert(q);
            work.push(q);
        }
    }
    (added.len() <= room).then(|| added.into_iter().collect())
}

/// The hot tier as a plain [`Classifier`] is not possible (it mutates its counters); this
/// adapter lets tests drive it through shared references.
pub struct HotAdapter<'a> {
    /// The complete table.
    pub full: &'a TupleSpace,
    /// The per-thread tier.
    pub tier: std::cell::RefCell<HotTier>,
}

impl Classifier for HotAdapter<'_> {
    fn classify(&self, key: &PacketKey) -> Option<u32> {
        self.tier.borrow_mut().classify(self.full, key)
    }
}
