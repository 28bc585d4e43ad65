//! Classifiers: given a [`PacketKey`], the index of the first matching rule.
//!
//! - [`LinearScan`]: every rule in order. The oracle and the baseline.
//! - [`TupleSpace`]: rules grouped by which fields they match exactly (and with which prefix
//!   lengths); each group is a hash table on those fields, probed in priority order with early
//!   termination. Remaining fields (ranges, opcode/type masks) are checked on the candidates.
//! - [`HotTier`]: a small per-thread table of hot rules, closed under "a higher-priority rule
//!   overlaps", in front of the complete table.
//! - [`FlowCache`]: a small per-thread table of hot flows and the rule that decided each, in
//!   front of the complete table (flushed when the rule set changes).

mod flow;
mod hot;
mod linear;
mod table;
mod tss;

pub use flow::{FlowCache, FlowCacheStats};
pub use hot::{HotAdapter, HotStats, HotTier};
pub use linear::LinearScan;
pub use tss::{ProbeWork, TupleSpace};

use crate::rule::PacketKey;

/// First-match classification over a rule table.
pub trait Classifier {
    /// Priority (= index) of the first rule matching `key`, if any.
    fn classify(&self, key: &PacketKey) -> Option<u32>;
}

#[cfg(test)]
mod tests;
