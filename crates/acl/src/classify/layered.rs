use super::{Classifier, CutTree, TupleSpace};
use crate::rule::{PacketKey, Rule};

/// The cut tree's first tier in front of a tuple space over the whole table.
///
/// The two structures are good at opposite rule sets: the cut tree's small first tier decides
/// at cache speed every packet whose first match is among the top rules (broad rules near the
/// top), while the tuple space is cheapest when few tuples hold the deep, specific rules.
/// Exact because the first tier holds every rule before `first`: a match there is the first
/// match; without one, the tuple space's first match over the whole table comes after
/// `first` anyway.
#[derive(Clone, Debug)]
pub struct Layered {
    top: CutTree,
    rest: TupleSpace,
    first: usize,
    generation: u64,
}

impl Layered {
    /// Rules in the first tier by default (as [`CutTree`]'s first tier).
    pub const FIRST: usize = 1024;

    /// Builds both layers for rules in priority order (`rules[i].priority == i`).
    pub fn new(rules: Vec<Rule>) -> Layered {
        Self::with_first(rules, Self::FIRST)
    }

    /// [`Layered::new`] with `first` rules in the first layer.
    pub fn with_first(rules: Vec<Rule>, first: usize) -> Layered {
        let first = first.min(rules.len());
        let top = CutTree::with_first_tier(rules[..first].to_vec(), first);
        Layered {
            top,
            rest: TupleSpace::new(rules),
            first,
            generation: super::tss::next_generation(),
        }
    }

    /// The rule table.
    pub fn rules(&self) -> &[Rule] {
        self.rest.rules()
    }

    /// Replaces rules in place, keeping their priorities, in both layers.
    pub fn replace_rules(&mut self, updates: &[Rule]) {
        self.generation = super::tss::next_generation();
        let top: Vec<Rule> = updates
            .iter()
            .filter(|r| (r.priority as usize) < self.first)
            .copied()
            .collect();
        if !top.is_empty() {
            self.top.replace_rules(&top);
        }
        self.rest.replace_rules(updates);
    }
}

impl Classifier for Layered {
    #[inline]
    fn classify(&self, key: &PacketKey) -> Option<u32> {
        self.top.classify(key).or_else(|| self.rest.classify(key))
    }

    fn generation(&self) -> u64 {
        self.generation
    }
}
