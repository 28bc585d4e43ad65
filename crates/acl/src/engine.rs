//! The per-packet pipeline: parse, resolve CM state, classify, count, commit CM state.
//!
//! This is what the enforcement program does at its packet hook, written natively; it is the
//! oracle the eBPF version will be tested against.

use std::fmt;

use crate::classify::{Classifier, CutTree, FlowCache};
use crate::cm::{CmCounters, CmTable};
use crate::compile::RuleSet;
use crate::packet::{self, LinkType, Malformed, MalformedReason, Parsed};
use crate::policy::Action;
use crate::rule::PacketKey;

/// Default bound of the CM connection table.
pub const DEFAULT_CM_CAPACITY: usize = 65_536;

/// Why a packet got its verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A rule of this policy (index in apply order) matched.
    Policy {
        /// Policy index.
        policy: u32,
        /// Rule index.
        rule: u32,
    },
    /// No rule matched; the default action applies.
    Default,
    /// The packet is malformed (always denied).
    Malformed(Malformed),
    /// Not RDMA traffic: outside the ACL's remit, passed through.
    NotRdma,
}

/// The decision for one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Allow or deny.
    pub action: Action,
    /// Why.
    pub cause: Cause,
}

/// Packet counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets seen.
    pub packets: u64,
    /// Packets allowed (including non-RDMA pass-through).
    pub allowed: u64,
    /// Packets denied (including malformed).
    pub denied: u64,
    /// Non-RDMA packets passed through.
    pub not_rdma: u64,
    /// Packets decided by the default action.
    pub default_hits: u64,
    /// Malformed packets by [`MalformedReason`] index.
    pub malformed: [u64; MalformedReason::COUNT],
    /// Packets decided per policy (apply order).
    pub per_policy: Vec<u64>,
}

impl Counters {
    /// Total malformed packets.
    pub fn malformed_total(&self) -> u64 {
        self.malformed.iter().sum()
    }
}

/// The ACL state of one data-plane thread.
pub struct Engine {
    rules: RuleSet,
    table: CutTree,
    hot: Option<FlowCache>,
    cm: CmTable,
    counters: Counters,
}

impl Engine {
    /// An engine over a compiled rule set (cut-tree classifier, no flow cache).
    pub fn new(rules: RuleSet) -> Engine {
        let table = CutTree::new(rules.rules.clone());
        let per_policy = vec![0; rules.policy_names.len()];
        Engine {
            rules,
            table,
            hot: None,
            cm: CmTable::new(DEFAULT_CM_CAPACITY),
            counters: Counters {
                per_policy,
                ..Counters::default()
            },
        }
    }

    /// Bounds the CM connection table at `capacity` connections (default
    /// [`DEFAULT_CM_CAPACITY`]); existing state is dropped.
    pub fn with_cm_capacity(mut self, capacity: usize) -> Engine {
        self.cm = CmTable::new(capacity);
        self
    }

    /// Puts a per-thread table of hot flows (`slots` entries) in front of the complete table.
    pub fn with_flow_cache(mut self, slots: usize) -> Engine {
        self.hot = Some(FlowCache::new(slots));
        self
    }

    /// The compiled rules.
    pub fn rules(&self) -> &RuleSet {
        &self.rules
    }

    /// Packet counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// CM table counters.
    pub fn cm_counters(&self) -> CmCounters {
        self.cm.counters()
    }

    /// Decides one packet and updates counters and CM state.
    pub fn process(&mut self, link: LinkType, bytes: &[u8]) -> Verdict {
        self.counters.packets += 1;
        let info = match packet::parse(link, bytes) {
            Ok(Parsed::Rdma(info)) => info,
            Ok(Parsed::NotRdma) => {
                self.counters.not_rdma += 1;
                self.counters.allowed += 1;
                return Verdict {
                    action: Action::Allow,
                    cause: Cause::NotRdma,
                };
            }
            Err(m) => {
                self.counters.malformed[m.reason as usize] += 1;
                self.counters.denied += 1;
                return Verdict {
                    action: Action::Deny,
                    cause: Cause::Malformed(m),
                };
            }
        };
        let mut key = PacketKey::from_packet(&info);
        let resolution = self.cm.resolve(&info, &mut key);
        let hit = match &mut self.hot {
            Some(hot) => hot.classify(&self.table, &key),
            None => self.table.classify(&key),
        };
        let verdict = match hit {
            Some(rule) => {
                let r = &self.rules.rules[rule as usize];
                if let Some(c) = self.counters.per_policy.get_mut(r.policy as usize) {
                    *c += 1;
                }
                Verdict {
                    action: r.action(),
                    cause: Cause::Policy {
                        policy: r.policy,
                        rule,
                    },
                }
            }
            None => {
                self.counters.default_hits += 1;
                Verdict {
                    action: self.rules.default,
                    cause: Cause::Default,
                }
            }
        };
        match verdict.action {
            Action::Allow => {
                self.counters.allowed += 1;
                self.cm.commit(&info, resolution);
            }
            Action::Deny => self.counters.denied += 1,
        }
        verdict
    }

    /// Human-readable cause.
    pub fn describe(&self, cause: &Cause) -> String {
        match cause {
            Cause::Policy { policy, rule } => format!(
                "policy {} (rule {rule})",
                self.rules
                    .policy_names
                    .get(*policy as usize)
                    .map_or("?", String::as_str)
            ),
            Cause::Default => "default".into(),
            Cause::Malformed(m) => format!("malformed: {m}"),
            Cause::NotRdma => "not RDMA".into(),
        }
    }
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "packets      {}", self.packets)?;
        writeln!(f, "allowed      {}", self.allowed)?;
        writeln!(f, "denied       {}", self.denied)?;
        writeln!(f, "not_rdma     {}", self.not_rdma)?;
        writeln!(f, "default      {}", self.default_hits)?;
        for r in MalformedReason::ALL {
            let n = self.malformed[r as usize];
            if n != 0 {
                writeln!(f, "malformed.{:<22} {n}", r.name())?;
            }
        }
        Ok(())
    }
}
