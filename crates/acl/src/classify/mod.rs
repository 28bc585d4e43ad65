//! Classifiers: given a [`PacketKey`], the index of the first matching rule.
//!
//! - [`LinearScan`]: every rule in order. The oracle and the baseline.
//! - [`TupleSpace`]: rules grouped by which fields they match exactly (and with which prefix
//!   lengths); each group is a hash table on those fields, probed in priority order with early
//!   termination. Remaining fields (ranges, opcode/type masks) are checked on the candidates.
//! - [`CutTree`]: a decision tree per group of rules (grouped by which selective fields they
//!   leave wide), cutting field values into blocks; leaves hold short priority-ordered rule
//!   lists checked against compact rule copies.
//! - [`Layered`]: the cut tree's first tier in front of a tuple space over the whole table.
//! - [`HotTier`]: a small per-thread table of hot rules, closed under "a higher-priority rule
//!   overlaps", in front of the complete table.
//! - [`FlowCache`]: a small per-thread table of hot flows and the rule that decided each, in
//!   front of the complete table (flushed when the rule set changes).

mod flow;
mod hot;
pub mod image;
mod layered;
mod linear;
mod table;
mod tree;
mod tss;

pub use flow::{FlowCache, FlowCacheStats};
pub use hot::{HotAdapter, HotStats, HotTier};
pub use layered::Layered;
pub use linear::LinearScan;
pub use tree::{
    CutTree, EntryView, NodeView, Reach, TierView, Touched, TreeStats, TreeWork, EMPTY_REF,
    ENTRY_DIP_ANY, ENTRY_DIP_V4, ENTRY_INEXACT, ENTRY_SIP_ANY, ENTRY_SIP_V4, LEAF_REF,
};
pub use tss::{ProbeWork, TupleSpace};

use crate::rule::PacketKey;

/// First-match classification over a rule table.
pub trait Classifier {
    /// Priority (= index) of the first rule matching `key`, if any.
    fn classify(&self, key: &PacketKey) -> Option<u32>;

    /// [`Classifier::classify`] for each of `keys` into the same position of `out` (pairs
    /// beyond the shorter slice are left alone). Classifiers that can overlap the memory
    /// accesses of several lookups override it.
    fn classify_batch(&self, keys: &[PacketKey], out: &mut [Option<u32>]) {
        for (key, out) in keys.iter().zip(out) {
            *out = self.classify(key);
        }
    }

    /// A value that changes whenever this classifier's answers may change (a rule-set
    /// generation), unique across tables; 0 for classifiers that do not track one, whose
    /// callers must flush caches themselves.
    fn generation(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests;
