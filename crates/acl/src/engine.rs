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

/// Frames whose data packets [`Engine::process_batch`] classifies together.
pub const BATCH: usize = 64;

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
    /// Traffic that may carry RDMA the parser does not look into (RoCE v1, VXLAN, IPsec,
    /// unwalked IPv6 extension headers), decided by the default action (and counted in
    /// `default_hits` too).
    pub uninspected: u64,
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
        match self.parse_counted(link, bytes) {
            Ok(info) => self.decide(&info),
            Err(verdict) => verdict,
        }
    }

    /// Classifies a parsed packet one at a time (CM messages resolve their queue pairs
    /// against the connection table first, and an allowed one commits its state change).
    #[inline]
    fn decide(&mut self, info: &packet::PacketInfo) -> Verdict {
        let mut key = PacketKey::from_packet(info);
        let resolution = self.cm.resolve(info, &mut key);
        let hit = match &mut self.hot {
            Some(hot) => hot.classify(&self.table, &key),
            None => self.table.classify(&key),
        };
        let verdict = self.verdict_of(hit);
        if verdict.action == Action::Allow {
            self.cm.commit(info, resolution);
        }
        verdict
    }

    /// [`Engine::process`] for each of `frames`, in order, into `out` (cleared first): the
    /// same verdicts, counters and CM state as one call per frame. Only CM messages read or
    /// change the connection table, so they are decided in order as they come; the other
    /// RDMA packets of each run of up to [`BATCH`] frames are classified together
    /// ([`Classifier::classify_batch`], through the hot-flow table if there is one), so their
    /// tree walks overlap.
    pub fn process_batch(&mut self, link: LinkType, frames: &[&[u8]], out: &mut Vec<Verdict>) {
        out.clear();
        let pending = Verdict {
            action: Action::Deny,
            cause: Cause::Default,
        };
        let mut keys = Vec::with_capacity(BATCH);
        let mut at = Vec::with_capacity(BATCH);
        let mut hits = vec![None; BATCH];
        for chunk in frames.chunks(BATCH) {
            keys.clear();
            at.clear();
            for frame in chunk {
                self.counters.packets += 1;
                match self.parse_counted(link, frame) {
                    Ok(info) if info.cm.is_none() => {
                        keys.push(PacketKey::from_packet(&info));
                        at.push(out.len());
                        out.push(pending);
                    }
                    Ok(info) => {
                        let verdict = self.decide(&info);
                        out.push(verdict);
                    }
                    Err(verdict) => out.push(verdict),
                }
            }
            let hits = &mut hits[..keys.len()];
            match &mut self.hot {
                Some(hot) => hot.classify_batch(&self.table, &keys, hits),
                None => self.table.classify_batch(&keys, hits),
            }
            for (&i, &hit) in at.iter().zip(hits.iter()) {
                out[i] = self.verdict_of(hit);
            }
        }
    }

    /// Parses a frame; a frame that is not RDMA or is malformed is counted and gets its
    /// verdict here.
    fn parse_counted(
        &mut self,
        link: LinkType,
        bytes: &[u8],
    ) -> Result<packet::PacketInfo, Verdict> {
        match packet::parse(link, bytes) {
            Ok(Parsed::Rdma(info)) => Ok(info),
            Ok(Parsed::Uninspected(_)) => {
                self.counters.uninspected += 1;
                Err(self.verdict_of(None))
            }
            Ok(Parsed::NotRdma) => {
                self.counters.not_rdma += 1;
                self.counters.allowed += 1;
                Err(Verdict {
                    action: Action::Allow,
                    cause: Cause::NotRdma,
                })
            }
            Err(m) => {
                self.counters.malformed[m.reason as usize] += 1;
                self.counters.denied += 1;
                Err(Verdict {
                    action: Action::Deny,
                    cause: Cause::Malformed(m),
                })
            }
        }
    }

    /// The verdict of a classification, counted.
    fn verdict_of(&mut self, hit: Option<u32>) -> Verdict {
        let verdict = match hit {
            Some(rule) => match self.rules.rules.get(rule as usize) {
                Some(r) => {
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
                // A classifier answering a rule index past the table is inconsistent with
                // it: deny, as the program does, rather than index out of bounds.
                None => Verdict {
                    action: Action::Deny,
                    cause: Cause::Policy {
                        policy: u32::MAX,
                        rule,
                    },
                },
            },
            None => {
                self.counters.default_hits += 1;
                Verdict {
                    action: self.rules.default,
                    cause: Cause::Default,
                }
            }
        };
        match verdict.action {
            Action::Allow => self.counters.allowed += 1,
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
        writeln!(f, "uninspected  {}", self.uninspected)?;
        for r in MalformedReason::ALL {
            let n = self.malformed[r as usize];
            if n != 0 {
                writeln!(f, "malformed.{:<22} {n}", r.name())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::compile;
    use crate::{api, craft, pcap, synth};
    use std::path::Path;

    fn sequential_and_batched(rules: &RuleSet, link: LinkType, frames: &[Vec<u8>], flow: bool) {
        let make = || {
            let e = Engine::new(rules.clone()).with_cm_capacity(64);
            if flow {
                e.with_flow_cache(256)
            } else {
                e
            }
        };
        let (mut one, mut burst) = (make(), make());
        let want: Vec<Verdict> = frames.iter().map(|f| one.process(link, f)).collect();
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let mut got = Vec::new();
        // In pieces of several sizes, so runs of CM messages and data packets straddle
        // batches.
        for piece in refs.chunks(97) {
            let mut part = Vec::new();
            burst.process_batch(link, piece, &mut part);
            got.extend(part);
        }
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "frame {i}");
        }
        assert_eq!(burst.counters(), one.counters());
        assert_eq!(burst.cm_counters(), one.cm_counters());
    }

    /// A rule index past the table (a classifier inconsistent with the rules) denies, as in
    /// the program, and a rule whose action byte is neither allow nor deny denies too.
    #[test]
    fn out_of_range_rules_and_unknown_actions_deny() {
        let text = "policy open { predicate = any action = allow }\napply(open)\n";
        let mut rules = compile(&crate::policy::parse(text).unwrap()).unwrap();
        let mut e = Engine::new(rules.clone());
        assert_eq!(e.verdict_of(Some(0)).action, Action::Allow);
        let v = e.verdict_of(Some(rules.rules.len() as u32));
        assert_eq!(v.action, Action::Deny, "{v:?}");
        rules.rules[0].action = 7;
        assert_eq!(rules.rules[0].action(), Action::Deny);
    }

    #[test]
    fn batches_decide_as_one_frame_at_a_time_cm_included() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let policies = root.join("../../tools/acl-traffic/policies");
        for (policy, trace) in [("server.acl", "attacks.pcap"), ("ib.acl", "ib.pcap")] {
            let rules = compile(&api::load(&policies.join(policy)).unwrap()).unwrap();
            let t = pcap::read(&root.join("tests/data").join(trace)).unwrap();
            for flow in [false, true] {
                sequential_and_batched(&rules, t.link, &t.packets, flow);
            }
        }
        let synthetic = synth::rules(400, 3);
        let rules = RuleSet {
            policy_names: (0..synthetic.len()).map(|i| format!("r{i}")).collect(),
            rules: synthetic,
            default: Action::Deny,
        };
        let mut frames: Vec<Vec<u8>> = synth::traffic(
            &rules.rules,
            1000,
            synth::Mix::Skewed {
                hot_pct: 50,
                flows: 8,
            },
            4,
        )
        .iter()
        .map(|k| craft::roce_frame(k).unwrap())
        .collect();
        for i in 0..100 {
            let mut f = frames[i].clone();
            f.truncate(30 + i % 40);
            frames.push(f);
        }
        for flow in [false, true] {
            sequential_and_batched(&rules, LinkType::Ethernet, &frames, flow);
        }
    }
}
