use super::Classifier;
use crate::rule::{PacketKey, Rule};

/// Linear scan in priority order: the reference every other classifier is tested against.
#[derive(Clone, Copy, Debug)]
pub struct LinearScan<'a> {
    rules: &'a [Rule],
}

impl<'a> LinearScan<'a> {
    /// Over rules in priority order.
    pub fn new(rules: &'a [Rule]) -> LinearScan<'a> {
        LinearScan { rules }
    }
}

impl Classifier for LinearScan<'_> {
    fn classify(&self, key: &PacketKey) -> Option<u32> {
        self.rules
            .iter()
            .position(|r| r.matches(key))
            .map(|i| i as u32)
    }
}
