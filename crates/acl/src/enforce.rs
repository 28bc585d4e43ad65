//! The contract between the compiler and the eBPF enforcement program `bpf/acl/enforce.c`.
//!
//! The program runs at the `acl_packet` hook of a host that declares the EIM spec
//! [`EIM_SPEC`] (`bpf/acl/acl.yaml`). It classifies with the native cut tree serialised by
//! [`crate::classify::image`] into three XState array maps ([`WORDS_MAP`], [`ENTRIES_MAP`],
//! [`RULES_MAP`]), each holding two banks of [`BANK`] records. Its own small global-data
//! section [`RULES_SECTION`] (the control block, [`control_section`]) names the bank, the
//! trees' roots and the tiers' offsets: a control plane writes a rule set into the bank no
//! running version uses ([`bank_writes`]), then deploys the program with the control block
//! naming that bank as the section's initial contents, so one publication (one
//! compare-and-swap of the hook slot) switches code, layout and rules together. Before it
//! writes into a bank again it waits, through the node's epochs, until no thread can still
//! run a version that reads it (`CodeFlow::reclaim`). The named maps [`CM_MAP`] (connection
//! state) and [`STATS_MAP`] (the per-thread scratch value, whose first [`STATS_SIZE`] bytes
//! are the counters) are shared by every version and survive updates.
//!
//! Nothing here loads, verifies or deploys anything: it defines the layouts both sides use
//! and converts between them.

use thiserror::Error;

use crate::classify::image::{
    Capacity, Dirty, ImageError, TreeImage, CONTROL_SIZE, ENTRY_SIZE, WORDS_PER_RECORD,
};
use crate::classify::CutTree;
use crate::compile::{RuleImage, RuleSet};
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
/// The global-data section holding the control block.
pub const RULES_SECTION: &str = ".data.acl";
/// The words array (nodes, child references, leaves; 16 words per element).
pub const WORDS_MAP: &str = "acl_words";
/// The compact leaf entries (64 bytes per element).
pub const ENTRIES_MAP: &str = "acl_entries";
/// The rules (224 bytes per element).
pub const RULES_MAP: &str = "acl_rules";
/// What each rule decides (8 bytes per element: `policy << 8 | 0x80 | action`, see
/// [`crate::classify::image::DECISION_ALLOW`]), indexed as the rules.
pub const DECISIONS_MAP: &str = "acl_decisions";
/// One bank of each array (`ACL_BANK_*` in `enforce.c`; the maps hold two): words,
/// entries, rules. Rule sets up to 320K rules fit.
pub const BANK: Capacity = Capacity {
    words: (1 << 18) * WORDS_PER_RECORD,
    entries: 655_360,
    rules: 327_680,
    leaf: MAX_LEAF,
};
/// Longest leaf the program scans (`ACL_MAX_LEAF`).
pub const MAX_LEAF: u32 = 4096;
/// Hot-flow table entries per thread (`ACL_HOT`).
pub const HOT_ENTRIES: usize = 1024;
/// The connection-state map (a hash map reused across versions).
pub const CM_MAP: &str = "acl_cm";
/// Connections the program's [`CM_MAP`] holds (`ACL_CM_CAPACITY`): the native engine's
/// default, so that both refuse the same REQs when full.
pub const CM_CAPACITY: usize = crate::engine::DEFAULT_CM_CAPACITY;
/// The per-thread map holding the counters: each thread's value (`struct acl_thread`: the
/// counters, the parse result, the hot-flow table) starts with its [`STATS_SIZE`] bytes of
/// counters, so the program needs one per-thread lookup per frame. Read the first
/// [`STATS_SIZE`] bytes of every copy and sum them ([`Stats::from_bytes`], [`Stats::add`]).
pub const STATS_MAP: &str = "acl_scratch";
/// Byte offset of the bank word in the control block.
pub const BANK_OFFSET: usize = 12;

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

/// Counters the program keeps at the start of each thread's [`STATS_MAP`] value (sum the
/// threads' copies).
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
    /// Traffic that may carry RDMA the parser does not look into, decided by the default
    /// action ([`crate::packet::Parsed::Uninspected`]; also counted in `default_hits`).
    pub uninspected: u64,
}

/// Size of one thread's copy of the counters (`struct acl_stats`, at offset 0 of the
/// thread's [`STATS_MAP`] value).
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
            uninspected: w(base + 4),
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
        self.uninspected += o.uninspected;
    }
}

/// Why a rule set cannot be given to the enforcement program.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EnforceError {
    /// The classifier image does not fit the program's maps.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The object's section is not the control block.
    #[error("section {RULES_SECTION} is {size} bytes, not the {CONTROL_SIZE}-byte control block")]
    SectionTooSmall {
        /// Section size.
        size: usize,
    },
    /// A frame could need more instructions than a run may spend: the run would be stopped
    /// and the frame denied, whatever the policy says.
    #[error(
        "a frame could need about {} instructions, more than the acl class's budget of {BUDGET}: \
         tier {} tree {} has a leaf of {} rules, {} of which one frame can pass the compact \
         checks of and must then check in full ({} trees walked in all). Rules that differ \
         only in opcode sets or CM types share leaves, and their full rules are checked one \
         by one: by a frame with an opcode of 64 or more (CNP, UD SEND), and by every frame \
         when they test what the compact copies lack (CM types, LIDs, GIDs, IPv6 ranges). \
         Split such rules by an address, QPN or port range, or merge their opcode and type \
         sets",
        .0.instructions, .0.leaf.tier, .0.leaf.tree, .0.leaf.entries, .0.leaf.full_checks, .0.trees
    )]
    OverBudget(WorstCase),
    /// A counters value of the wrong size.
    #[error("counters value of {0} bytes, expected at least {STATS_SIZE}")]
    StatsSize(usize),
}

/// The classifier of a rule set and its image for the program; refused when the image does
/// not fit a bank or when a frame could need more instructions than the class's budget
/// ([`worst_case`]).
pub fn image(set: &RuleSet) -> Result<(CutTree, TreeImage), EnforceError> {
    let tree = CutTree::new(set.rules.clone());
    let worst = worst_case(&tree);
    if worst.instructions > BUDGET {
        return Err(EnforceError::OverBudget(worst));
    }
    let img = TreeImage::build(&tree, set, BANK)?;
    Ok((tree, img))
}

/// The instruction budget of one run of the program (the `acl` class of
/// `bpf/acl/acl.yaml`). A run that spends it is stopped and the frame denied (the hook's
/// default), whatever the policy says.
pub const BUDGET: u64 = 2_000_000;

/// Upper bounds of what the program's parts cost in metered instructions, for
/// [`worst_case`]. Checked against the program by the gateway's tests (a frame built to
/// take the worst path through a leaf at the bound must finish within the budget).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Costs {
    /// Everything but the classification: parsing (every stage), CM lookup and commit, the
    /// hot-flow table, the counters.
    pub frame: u64,
    /// Starting a tree: its walk's setup and the tier and tree loops' turns.
    pub tree: u64,
    /// One level of a walk (a node and its child reference).
    pub level: u64,
    /// One leaf entry: the scan loop's turn and the compact checks.
    pub entry: u64,
    /// One full rule check and the scan's restart after it.
    pub full_check: u64,
}

/// The current program's costs, from the sizes of `enforce.o`'s functions (instruction
/// slots), which bound what one turn of a loop in them runs (a turn runs each instruction
/// of its body at most once): `scan_leaf` 230 (an entry; a scan restarted after a full
/// check runs its prologue and one turn, still within the function), `full_match` 699 plus
/// the caller's loop turn (a full check), `leaf_of` 153 (a level), the entry function 878
/// plus every parser stage, their loops unrolled to their bounds (the frame). Measured: a
/// CNP frame over one leaf of 2,000 opcode-only rules finishes, over 2,200 it spends the
/// budget (about 950 instructions per entry checked in full).
pub const COSTS: Costs = Costs {
    frame: 4_000,
    tree: 600,
    level: 160,
    entry: 240,
    full_check: 800,
};

/// Where a frame's worst case lies, and what it costs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorstCase {
    /// Metered instructions the worst frame can need (an upper bound).
    pub instructions: u64,
    /// The costliest leaf: its tier, tree, entries, and how many of them one frame can pass
    /// the compact checks of (each then checked in full).
    pub leaf: LeafWork,
    /// Trees walked in all (a frame that matches nothing walks every tree of every tier).
    pub trees: usize,
}

/// A leaf's share of a worst case.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeafWork {
    /// Tier.
    pub tier: usize,
    /// Tree of the tier.
    pub tree: usize,
    /// Entries scanned.
    pub entries: u32,
    /// Entries one frame can pass the compact checks of, at most.
    pub full_checks: u32,
}

impl LeafWork {
    fn cost(&self) -> u64 {
        self.entries as u64 * COSTS.entry + self.full_checks as u64 * COSTS.full_check
    }
}

/// How many of `entries` one frame can pass the compact checks of, at most: a frame that
/// passes an entry has each field in the entry's range (or lacks it where the entry allows
/// that), so for every field the count is at most the most ranges one value lies in (or
/// the entries allowing the field absent). The opcode is no bound: a frame with an opcode
/// of 64 or more passes every entry's opcode test, and then needs every full rule.
fn passable(entries: &[crate::classify::EntryView]) -> u32 {
    use crate::classify::{ENTRY_DIP_ANY, ENTRY_DIP_V4, ENTRY_SIP_ANY, ENTRY_SIP_V4};
    use crate::field::Field;
    /// The most inclusive ranges any one value lies in.
    fn stab(ranges: impl Iterator<Item = (u64, u64)>) -> u32 {
        let mut events: Vec<(u64, i32)> = Vec::new();
        for (lo, hi) in ranges.filter(|(lo, hi)| lo <= hi) {
            events.push((lo, 1));
            if hi < u64::MAX {
                events.push((hi + 1, -1));
            }
        }
        // At one coordinate the ends (the range before closed) count before the starts.
        events.sort_unstable();
        let (mut depth, mut most) = (0i32, 0i32);
        for (_, d) in events {
            depth += d;
            most = most.max(depth);
        }
        most as u32
    }
    let absent_ok = |f: Field| {
        entries
            .iter()
            .filter(|e| e.absent_ok & (1 << f.index()) != 0)
            .count() as u32
    };
    let ranged = |f: Field, range: fn(&crate::classify::EntryView) -> (u64, u64)| {
        stab(entries.iter().map(range)).max(absent_ok(f))
    };
    let address =
        |f: Field, v4: u16, any: u16, range: fn(&crate::classify::EntryView) -> (u64, u64)| {
            // Entries for `any` or a range that is not IPv4 pass every present address here.
            let open = entries
                .iter()
                .filter(|e| e.flags & any != 0 || e.flags & v4 == 0)
                .count() as u32;
            let v4_ranges = entries
                .iter()
                .filter(|e| e.flags & any == 0 && e.flags & v4 != 0)
                .map(range);
            (stab(v4_ranges) + open).max(absent_ok(f))
        };
    let bounds = [
        ranged(Field::DQpn, |e| (e.dqpn_lo as u64, e.dqpn_hi as u64)),
        ranged(Field::Sport, |e| (e.sport_lo as u64, e.sport_hi as u64)),
        ranged(Field::Dport, |e| (e.dport_lo as u64, e.dport_hi as u64)),
        ranged(Field::Va, |e| (e.va_lo, e.va_hi)),
        address(Field::Sip, ENTRY_SIP_V4, ENTRY_SIP_ANY, |e| {
            (e.sip_lo as u64, e.sip_hi as u64)
        }),
        address(Field::Dip, ENTRY_DIP_V4, ENTRY_DIP_ANY, |e| {
            (e.dip_lo as u64, e.dip_hi as u64)
        }),
    ];
    bounds
        .into_iter()
        .min()
        .unwrap_or(0)
        .min(entries.len() as u32)
}

/// An upper bound of the instructions one frame can cost the program over `tree`'s image:
/// a frame that matches no rule walks every tree of every tier to its deepest level, scans
/// its costliest leaf and checks in full every entry whose compact checks it can pass (a
/// frame with an opcode of 64 or more — CNP, UD SEND — needs the full rule of each of
/// those). Priced with [`COSTS`].
pub fn worst_case(tree: &CutTree) -> WorstCase {
    use crate::classify::{TierView, LEAF_REF};
    let c = COSTS;
    let mut total = c.frame;
    let mut costliest = LeafWork::default();
    let mut trees = 0;
    for t in 0..tree.tier_count() {
        let view = tree.tier_view(t);
        // Per node: (levels of the deepest walk from it, its costliest leaf), memoised (the
        // walk is at most 26 levels deep, so the recursion is too).
        fn visit(
            view: &TierView<'_>,
            r: u32,
            memo: &mut [Option<(u32, LeafWork)>],
            leaves: &mut std::collections::HashMap<u32, LeafWork>,
        ) -> (u32, LeafWork) {
            if r & LEAF_REF != 0 {
                let leaf = r & !LEAF_REF;
                let work = *leaves.entry(leaf).or_insert_with(|| {
                    let (start, len) = view.leaf(leaf as usize);
                    let entries: Vec<_> = (start..start + len)
                        .filter(|&i| (i as usize) < view.entry_count())
                        .map(|i| view.entry(i as usize))
                        .collect();
                    LeafWork {
                        entries: len,
                        full_checks: passable(&entries),
                        ..LeafWork::default()
                    }
                });
                return (0, work);
            }
            if let Some(Some(done)) = memo.get(r as usize) {
                return *done;
            }
            let node = view.node(r as usize);
            let first = node.children as usize;
            let count = (1usize << node.bits) + 2;
            let (mut depth, mut worst) = (0u32, LeafWork::default());
            for i in first..first + count {
                let Some(&child) = view.refs().get(i) else {
                    continue;
                };
                let (d, leaf) = visit(view, child, memo, leaves);
                depth = depth.max(d);
                if leaf.cost() > worst.cost() {
                    worst = leaf;
                }
            }
            let done = (depth + 1, worst);
            memo[r as usize] = Some(done);
            done
        }
        let mut memo = vec![None; view.node_count()];
        let mut leaves = std::collections::HashMap::new();
        for (g, (root, _)) in view.groups().enumerate() {
            let (depth, mut leaf) = visit(&view, root, &mut memo, &mut leaves);
            (leaf.tier, leaf.tree) = (t, g);
            trees += 1;
            total += c.tree + depth as u64 * c.level + leaf.cost();
            if leaf.cost() > costliest.cost() {
                costliest = leaf;
            }
        }
    }
    WorstCase {
        instructions: total,
        leaf: costliest,
        trees,
    }
}

/// Element indices where bank `bank` of each array starts.
pub fn bank_base(bank: u32) -> Capacity {
    let b = bank as usize;
    Capacity {
        words: b * BANK.words,
        entries: b * BANK.entries,
        rules: b * BANK.rules,
        leaf: MAX_LEAF,
    }
}

/// The initial contents of [`RULES_SECTION`] (of `section_size` bytes) for `img` in bank
/// `bank`, reporting `generation` with every decision and tagging the threads' hot-flow
/// entries with `tag` (unique per published version, so a publication invalidates them).
pub fn control_section(
    img: &TreeImage,
    bank: u32,
    generation: u64,
    tag: u64,
    section_size: usize,
) -> Result<Vec<u8>, EnforceError> {
    if section_size != CONTROL_SIZE {
        return Err(EnforceError::SectionTooSmall { size: section_size });
    }
    Ok(img.control(bank, bank_base(bank), generation, tag))
}

/// One contiguous write into an array map: `bytes` from element `first` on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BankWrite<'a> {
    /// [`WORDS_MAP`], [`ENTRIES_MAP`] or [`RULES_MAP`].
    pub map: &'static str,
    /// First element (bank included).
    pub first: u32,
    /// Whole elements, back to back (each map's values are packed: their sizes are
    /// multiples of 8).
    pub bytes: &'a [u8],
}

/// Sorted, merged ranges.
fn coalesce(mut r: Vec<std::ops::Range<u32>>) -> Vec<std::ops::Range<u32>> {
    r.sort_by_key(|x| x.start);
    let mut out: Vec<std::ops::Range<u32>> = Vec::new();
    for x in r {
        if x.start >= x.end {
            continue;
        }
        match out.last_mut() {
            Some(last) if x.start <= last.end => last.end = last.end.max(x.end),
            _ => out.push(x),
        }
    }
    out
}

/// The writes that bring bank `bank` from a state lacking `dirty` to `img`.
pub fn bank_writes<'a>(img: &'a TreeImage, dirty: &Dirty, bank: u32) -> Vec<BankWrite<'a>> {
    let base = bank_base(bank);
    let (words, entries, rules) = if dirty.all {
        (
            std::iter::once(0..img.words.len() as u32).collect(),
            std::iter::once(0..img.entries.len() as u32).collect(),
            std::iter::once(0..img.rules.len() as u32).collect(),
        )
    } else {
        let rec = WORDS_PER_RECORD as u32;
        (
            dirty
                .words
                .iter()
                .map(|r| r.start / rec * rec..r.end.div_ceil(rec) * rec)
                .collect(),
            dirty.entries.clone(),
            dirty.rules.iter().map(|&r| r..r + 1).collect(),
        )
    };
    let mut out = Vec::new();
    let word_bytes: &[u8] = bytemuck_u32(&img.words);
    for r in coalesce(words) {
        let rec = WORDS_PER_RECORD as u32;
        out.push(BankWrite {
            map: WORDS_MAP,
            first: (base.words as u32 + r.start) / rec,
            bytes: &word_bytes[r.start as usize * 4..r.end as usize * 4],
        });
    }
    let entry_bytes = img.entries.as_flattened();
    for r in coalesce(entries) {
        out.push(BankWrite {
            map: ENTRIES_MAP,
            first: base.entries as u32 + r.start,
            bytes: &entry_bytes[r.start as usize * ENTRY_SIZE..r.end as usize * ENTRY_SIZE],
        });
    }
    let rule_bytes = img.rules.as_flattened();
    let decision_bytes = bytes_u64(&img.decisions);
    for r in coalesce(rules) {
        out.push(BankWrite {
            map: RULES_MAP,
            first: base.rules as u32 + r.start,
            bytes: &rule_bytes[r.start as usize * RULE_SIZE..r.end as usize * RULE_SIZE],
        });
        out.push(BankWrite {
            map: DECISIONS_MAP,
            first: base.rules as u32 + r.start,
            bytes: &decision_bytes[r.start as usize * 8..r.end as usize * 8],
        });
    }
    out
}

/// The decisions as little-endian bytes (see [`bytemuck_u32`]).
fn bytes_u64(w: &[u64]) -> &[u8] {
    // SAFETY: `u64` has no padding and every byte pattern is a valid `u8`; the slice covers
    // exactly the words' memory and lives as long as they do.
    unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), std::mem::size_of_val(w)) }
}

/// The words as little-endian bytes (the image keeps them so on little-endian hosts, which
/// is what the program's maps hold).
fn bytemuck_u32(w: &[u32]) -> &[u8] {
    #[cfg(target_endian = "big")]
    compile_error!("the classifier image is written as in-memory little-endian words");
    // SAFETY: `u32` has no padding and every byte pattern is a valid `u8`; the slice covers
    // exactly the words' memory and lives as long as they do.
    unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), std::mem::size_of_val(w)) }
}

/// The rules that differ between two sets of equal length, as in-place updates
/// (`rule.priority` names the slot), or `None` when the sets differ in length or default.
pub fn rule_updates(old: &RuleSet, new: &RuleSet) -> Option<Vec<crate::rule::Rule>> {
    if old.rules.len() != new.rules.len() || old.default != new.default {
        return None;
    }
    Some(
        old.rules
            .iter()
            .zip(&new.rules)
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(i, (_, b))| {
                let mut r = *b;
                r.priority = i as u32;
                r
            })
            .collect(),
    )
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
    fn control_blocks_and_bank_writes_cover_the_image() {
        let s = set(3);
        let (_, img) = image(&s).unwrap();
        let ctl = control_section(&img, 1, 0x1122_3344_5566_7788, 5, CONTROL_SIZE).unwrap();
        assert_eq!(u32::from_le_bytes(ctl[12..16].try_into().unwrap()), 1);
        assert_eq!(
            u64::from_le_bytes(ctl[16..24].try_into().unwrap()),
            0x1122_3344_5566_7788
        );
        assert_eq!(
            control_section(&img, 0, 0, 0, 8),
            Err(EnforceError::SectionTooSmall { size: 8 })
        );
        let writes = bank_writes(&img, &Dirty::everything(), 1);
        let rules = writes.iter().find(|w| w.map == RULES_MAP).unwrap();
        assert_eq!(rules.first as usize, BANK.rules);
        assert_eq!(rules.bytes.len(), 3 * RULE_SIZE);
        let decisions = writes.iter().find(|w| w.map == DECISIONS_MAP).unwrap();
        assert_eq!(decisions.first as usize, BANK.rules);
        assert_eq!(decisions.bytes.len(), 3 * 8);
        assert!(writes
            .iter()
            .all(|w| w.map != WORDS_MAP || w.bytes.len() % (4 * WORDS_PER_RECORD) == 0));
        assert_ne!(content_generation(&s), content_generation(&set(4)));
        let mut t = set(4);
        assert_eq!(rule_updates(&s, &t), None);
        t.rules.truncate(3);
        t.rules[1] = t.rules[2];
        assert_eq!(rule_updates(&s, &t).unwrap().len(), 1);
    }

    /// The bound on entries one frame passes is never below what some frame passes: every
    /// frame built from the entries' range ends (or lacking the field) is tried, with the
    /// compact checks as the program makes them.
    #[test]
    fn passable_bounds_every_frame() {
        use crate::classify::{EntryView, ENTRY_SIP_ANY, ENTRY_SIP_V4};
        use crate::field::Field;
        let mut rng = crate::synth::Rng::new(9);
        for _ in 0..200 {
            let n = 1 + rng.below(12) as usize;
            let entries: Vec<EntryView> = (0..n)
                .map(|_| {
                    let r = |rng: &mut crate::synth::Rng| {
                        let a = rng.below(6) as u32;
                        (a, a + rng.below(4) as u32)
                    };
                    let (q0, q1) = r(&mut rng);
                    let (p0, p1) = r(&mut rng);
                    let (s0, s1) = r(&mut rng);
                    let mut absent_ok = 0u16;
                    if rng.chance(20) {
                        absent_ok |= 1 << Field::DQpn.index();
                    }
                    EntryView {
                        dqpn_lo: q0,
                        dqpn_hi: q1,
                        sport_lo: p0 as u16,
                        sport_hi: p1 as u16,
                        dport_hi: u16::MAX,
                        va_hi: u64::MAX,
                        sip_lo: s0,
                        sip_hi: s1,
                        flags: if rng.chance(30) {
                            ENTRY_SIP_ANY
                        } else {
                            ENTRY_SIP_V4
                        },
                        dip_hi: u32::MAX,
                        absent_ok,
                        ..EntryView::default()
                    }
                })
                .collect();
            let bound = passable(&entries);
            let values: Vec<Option<u32>> = (0..12).map(Some).chain([None]).collect();
            for dqpn in &values {
                for sport in 0..12u32 {
                    for sip in 0..12u32 {
                        let passes = entries
                            .iter()
                            .filter(|e| {
                                let q = match dqpn {
                                    Some(q) => e.dqpn_lo <= *q && *q <= e.dqpn_hi,
                                    None => e.absent_ok & (1 << Field::DQpn.index()) != 0,
                                };
                                let p = e.sport_lo as u32 <= sport && sport <= e.sport_hi as u32;
                                let a = e.flags & ENTRY_SIP_ANY != 0
                                    || (e.sip_lo <= sip && sip <= e.sip_hi);
                                q && p && a
                            })
                            .count() as u32;
                        assert!(passes <= bound, "{passes} > {bound} for {entries:?}");
                    }
                }
            }
        }
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
