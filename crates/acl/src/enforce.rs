//! The contract between the compiler and the eBPF enforcement program `bpf/acl/enforce.c`.
//!
//! The program runs at the `acl_packet` hook of a host that declares the EIM spec
//! [`EIM_SPEC`] (`bpf/acl/acl.yaml`). Its rule table is its own global-data section
//! [`RULES_SECTION`]: a control plane deploying a policy replaces that section's initial
//! contents with [`section_image`] before preparing the version, so the rules travel with
//! the code and one publication (one compare-and-swap of the hook slot) switches both. The
//! named maps [`CM_MAP`] (connection state) and [`STATS_MAP`] (counters) are shared by every
//! version and survive updates.
//!
//! Nothing here loads, verifies or deploys anything: it defines the layouts both sides use
//! and converts between them.

use thiserror::Error;

use crate::compile::{RuleImage, RuleSet, IMAGE_HEADER_SIZE};
use crate::engine::{Cause, Verdict};
use crate::packet::{LinkType, MalformedReason};
use crate::policy::Action;
use crate::rule::RULE_SIZE;

/// The hook the enforcement program attaches to.
pub const HOOK: &str = "acl_packet";
/// The extension class the EIM spec binds to [`HOOK`].
pub const CLASS: &str = "acl";
/// The EIM spec a host running the enforcement program declares.
pub const EIM_SPEC: &str = include_str!("../../../bpf/acl/acl.yaml");
/// The global-data section holding the rule image.
pub const RULES_SECTION: &str = ".data.acl";
/// Rules the program's table holds (`ACL_MAX_RULES` in `enforce.c`).
pub const MAX_RULES: usize = 2048;
/// The connection-state map (a hash map reused across versions).
pub const CM_MAP: &str = "acl_cm";
/// The per-thread counters map.
pub const STATS_MAP: &str = "acl_stats";
/// Byte offset of the generation word in the image header.
pub const GENERATION_OFFSET: usize = 24;

/// The hook's context (`struct acl_ctx` in `enforce.c`, 48 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct AclContext {
    /// Address of the first frame byte.
    pub data: u64,
    /// Address one past the last frame byte.
    pub data_end: u64,
    /// 0 Ethernet (RoCEv2), 1 InfiniBand.
    pub link: u32,
    /// Frame length.
    pub len: u32,
    /// Out: deciding rule, or `u32::MAX`.
    pub rule: u32,
    /// Out: deciding policy (apply order), or `u32::MAX`.
    pub policy: u32,
    /// Out: [`CAUSE_RULE`], [`CAUSE_DEFAULT`], [`CAUSE_MALFORMED`] or [`CAUSE_NOT_RDMA`].
    pub cause: u32,
    /// Out: the [`MalformedReason`] when the cause is malformed.
    pub reason: u32,
    /// Out: generation word of the rule image that decided.
    pub generation: u64,
}

const _: () = assert!(std::mem::size_of::<AclContext>() == 48);

/// A rule decided.
pub const CAUSE_RULE: u32 = 0;
/// No rule matched: the default action.
pub const CAUSE_DEFAULT: u32 = 1;
/// The frame is malformed (denied).
pub const CAUSE_MALFORMED: u32 = 2;
/// Not RDMA traffic (allowed).
pub const CAUSE_NOT_RDMA: u32 = 3;

impl AclContext {
    /// A context for one frame, outputs cleared.
    pub fn for_frame(link: LinkType, frame: &[u8]) -> AclContext {
        let range = frame.as_ptr_range();
        AclContext {
            data: range.start as u64,
            data_end: range.end as u64,
            link: match link {
                LinkType::Ethernet => 0,
                LinkType::InfiniBand => 1,
            },
            len: frame.len() as u32,
            rule: u32::MAX,
            policy: u32::MAX,
            cause: u32::MAX,
            reason: 0,
            generation: 0,
        }
    }

    /// What the program decided, from its return value and the context it wrote.
    pub fn outcome(&self, ret: u64) -> Outcome {
        let action = if ret == 0 {
            Action::Allow
        } else {
            Action::Deny
        };
        let cause = match self.cause {
            CAUSE_RULE => OutcomeCause::Policy {
                policy: self.policy,
                rule: self.rule,
            },
            CAUSE_DEFAULT => OutcomeCause::Default,
            CAUSE_MALFORMED => match MalformedReason::ALL.get(self.reason as usize) {
                Some(r) => OutcomeCause::Malformed(*r),
                None => OutcomeCause::Unknown(self.cause),
            },
            CAUSE_NOT_RDMA => OutcomeCause::NotRdma,
            other => OutcomeCause::Unknown(other),
        };
        Outcome { action, cause }
    }
}

/// Why a packet got its verdict, as both the native engine and the eBPF program report it
/// (the program does not report the byte offset of a malformation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutcomeCause {
    /// A rule of this policy matched.
    Policy {
        /// Policy index (apply order).
        policy: u32,
        /// Rule index.
        rule: u32,
    },
    /// The default action.
    Default,
    /// Malformed, with the reason.
    Malformed(MalformedReason),
    /// Not RDMA.
    NotRdma,
    /// A cause word the program should never write (a failed run leaves the context as the
    /// host set it).
    Unknown(u32),
}

/// A verdict and its cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Allow or deny.
    pub action: Action,
    /// Why.
    pub cause: OutcomeCause,
}

impl From<&Verdict> for Outcome {
    fn from(v: &Verdict) -> Outcome {
        let cause = match v.cause {
            Cause::Policy { policy, rule } => OutcomeCause::Policy { policy, rule },
            Cause::Default => OutcomeCause::Default,
            Cause::Malformed(m) => OutcomeCause::Malformed(m.reason),
            Cause::NotRdma => OutcomeCause::NotRdma,
        };
        Outcome {
            action: v.action,
            cause,
        }
    }
}

/// Counters the program keeps in [`STATS_MAP`] (one copy per host thread; sum them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames seen.
    pub packets: u64,
    /// Allowed (including non-RDMA).
    pub allowed: u64,
    /// Denied (including malformed).
    pub denied: u64,
    /// Not RDMA.
    pub not_rdma: u64,
    /// Decided by the default action.
    pub default_hits: u64,
    /// Malformed, by [`MalformedReason`] index.
    pub malformed: [u64; MalformedReason::COUNT],
    /// REQs that found the connection table full.
    pub cm_table_full: u64,
    /// CM messages that matched no connection.
    pub cm_unknown_connection: u64,
    /// Connections created.
    pub cm_created: u64,
    /// Connections removed.
    pub cm_removed: u64,
}

/// Size of one thread's copy of the counters (`struct acl_stats`).
pub const STATS_SIZE: usize = 24 * 8;

impl Stats {
    /// Decodes one thread's copy (little-endian u64 words).
    pub fn from_bytes(b: &[u8]) -> Result<Stats, EnforceError> {
        if b.len() < STATS_SIZE {
            return Err(EnforceError::StatsSize(b.len()));
        }
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let mut malformed = [0; MalformedReason::COUNT];
        for (i, m) in malformed.iter_mut().enumerate() {
            *m = w(5 + i);
        }
        let base = 5 + MalformedReason::COUNT;
        Ok(Stats {
            packets: w(0),
            allowed: w(1),
            denied: w(2),
            not_rdma: w(3),
            default_hits: w(4),
            malformed,
            cm_table_full: w(base),
            cm_unknown_connection: w(base + 1),
            cm_created: w(base + 2),
            cm_removed: w(base + 3),
        })
    }

    /// Adds another thread's counters.
    pub fn add(&mut self, o: &Stats) {
        self.packets += o.packets;
        self.allowed += o.allowed;
        self.denied += o.denied;
        self.not_rdma += o.not_rdma;
        self.default_hits += o.default_hits;
        for (a, b) in self.malformed.iter_mut().zip(o.malformed) {
            *a += b;
        }
        self.cm_table_full += o.cm_table_full;
        self.cm_unknown_connection += o.cm_unknown_connection;
        self.cm_created += o.cm_created;
        self.cm_removed += o.cm_removed;
    }
}

/// Why a rule set cannot be given to the enforcement program.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EnforceError {
    /// More rules than the program's table holds.
    #[error("the policy compiles to {rules} rules; the enforcement program's table holds {capacity} (use the native classifier for larger rule sets)")]
    TooManyRules {
        /// Rules compiled.
        rules: usize,
        /// Rules the section holds.
        capacity: usize,
    },
    /// The object's section is smaller than even an empty image.
    #[error("section {RULES_SECTION} is {size} bytes, smaller than the {IMAGE_HEADER_SIZE}-byte image header")]
    SectionTooSmall {
        /// Section size.
        size: usize,
    },
    /// A counters value of the wrong size.
    #[error("counters value of {0} bytes, expected at least {STATS_SIZE}")]
    StatsSize(usize),
}

/// The initial contents of [`RULES_SECTION`] (whose size is `section_size`) for a rule set,
/// stamped with `generation` (reported by the program with every decision). Only the image
/// is returned; the rest of the section stays zero.
pub fn section_image(
    set: &RuleSet,
    generation: u64,
    section_size: usize,
) -> Result<Vec<u8>, EnforceError> {
    if section_size < IMAGE_HEADER_SIZE {
        return Err(EnforceError::SectionTooSmall { size: section_size });
    }
    let capacity = (section_size - IMAGE_HEADER_SIZE) / RULE_SIZE;
    if set.rules.len() > capacity {
        return Err(EnforceError::TooManyRules {
            rules: set.rules.len(),
            capacity,
        });
    }
    let mut image = RuleImage::to_bytes(set);
    image[GENERATION_OFFSET..GENERATION_OFFSET + 8].copy_from_slice(&generation.to_le_bytes());
    Ok(image)
}

/// A generation word that names a rule set's content (FNV-1a of its image), for control
/// planes that have no version counter of their own.
pub fn content_generation(set: &RuleSet) -> u64 {
    RuleImage::to_bytes(set)
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::compile;
    use crate::policy::parse;

    fn set(n: usize) -> RuleSet {
        let mut text = String::new();
        for i in 0..n {
            text.push_str(&format!(
                "policy p{i} {{ predicate = match(dQPN = {i}) action = deny }}\n"
            ));
        }
        let names: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
        text.push_str(&format!("apply({})\n", names.join(", ")));
        compile(&parse(&text).unwrap()).unwrap()
    }

    #[test]
    fn image_is_stamped_and_bounded_by_the_section() {
        let s = set(3);
        let size = IMAGE_HEADER_SIZE + MAX_RULES * RULE_SIZE;
        let img = section_image(&s, 0x1122_3344_5566_7788, size).unwrap();
        assert_eq!(img.len(), IMAGE_HEADER_SIZE + 3 * RULE_SIZE);
        assert_eq!(
            u64::from_le_bytes(img[24..32].try_into().unwrap()),
            0x1122_3344_5566_7788
        );
        assert_eq!(RuleImage::from_bytes(&img).unwrap().rules, s.rules);
        assert_eq!(
            section_image(&s, 0, IMAGE_HEADER_SIZE + 2 * RULE_SIZE),
            Err(EnforceError::TooManyRules {
                rules: 3,
                capacity: 2
            })
        );
        assert_eq!(
            section_image(&s, 0, 8),
            Err(EnforceError::SectionTooSmall { size: 8 })
        );
        assert_ne!(content_generation(&s), content_generation(&set(4)));
    }

    #[test]
    fn stats_decode_in_program_order() {
        let mut b = vec![0u8; STATS_SIZE];
        for i in 0..24 {
            b[i * 8..i * 8 + 8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
        }
        let s = Stats::from_bytes(&b).unwrap();
        assert_eq!((s.packets, s.default_hits), (1, 5));
        assert_eq!(s.malformed[0], 6);
        assert_eq!(s.cm_removed, 20);
        assert_eq!(Stats::from_bytes(&b[..8]), Err(EnforceError::StatsSize(8)));
    }

    #[test]
    fn eim_spec_names_the_hook_and_class() {
        assert!(EIM_SPEC.contains(&format!("name: {HOOK}")));
        assert!(EIM_SPEC.contains(&format!("name: {CLASS}")));
        assert!(EIM_SPEC.contains("size: 48"));
    }
}
