//! The cut tree ([`CutTree`]) serialised into flat arrays of fixed-size records, the form the
//! eBPF enforcement program (`bpf/acl/enforce.c`) walks in XState with bounded loops.
//!
//! An image has three arrays, each stored in an XState array map with two *banks* (halves):
//!
//! - **words** (`u32`, 16 to a 64-byte map value): per tier its node blocks, then its leaves
//!   (2 words each: first entry, length) with room for leaves added by updates. A node's block
//!   is the node (8 words: the 128-bit prefix as four little-endian words, the word offset of
//!   its first child reference, `field | bits << 8 | shift << 16 | whole << 24`, two zero
//!   words) followed by its child references (bit 31 names a leaf; a node is named by its
//!   block's word offset / 8), rounded up to 8 words: a step of the walk reads a node and
//!   the reference next to it, in one page rather than two;
//! - **entries** (64 bytes each): the leaves' compact rule copies, with room to grow;
//! - **rules** (224 bytes each, the [`crate::rule::Rule`] layout of the rule image), for
//!   entries the compact check cannot decide;
//! - **decisions** (8 bytes per rule: `policy << 8 | DECISION_WRITTEN | action`), what a
//!   match decides, so the deciding rule's 224 bytes need not be read. The program allows
//!   only on a slot holding exactly [`DECISION_ALLOW`] in its low byte: a slot never written
//!   (zero) or holding anything else denies.
//!
//! Indices inside an array are tier-local (as in the tree); the per-tier bases, the trees'
//! roots and the bank live in the program's small per-version section
//! ([`TreeImage::control`]), so publishing a version switches the bank and the layout
//! together. The image only ever grows in place: [`TreeImage::apply`] re-serialises what an
//! in-place tree update wrote (the entries, leaves and reference slots the tree reports in
//! [`super::Touched`], and the rules) and says which records changed ([`Dirty`]), so a
//! control plane copies only those into a bank. A removal leaves a tombstone in its leaf and
//! an insertion takes one (see `classify::tree`), so an update of a long leaf writes the
//! entries it changed, not the rest of the leaf.

use std::ops::Range;

use thiserror::Error;

use super::tree::{CutTree, EntryView, NodeView, TierView, EMPTY_REF, LEAF_REF};
use crate::compile::{RuleImage, RuleSet, IMAGE_HEADER_SIZE};
use crate::policy::Action;
use crate::rule::{Rule, RULE_SIZE};

/// Words in one record of the words array (a 64-byte map value).
pub const WORDS_PER_RECORD: usize = 16;
/// Bytes of one entry record.
pub const ENTRY_SIZE: usize = 64;
/// Words of one node.
pub const NODE_WORDS: usize = 8;
/// Most trees per tier (group classes).
pub const MAX_GROUPS: usize = 8;
/// Most tiers.
pub const MAX_TIERS: usize = 2;
/// Size of the control block [`TreeImage::control`] writes (`struct acl_ctl` in `enforce.c`).
pub const CONTROL_SIZE: usize = 48 + MAX_TIERS * 64;
/// Magic of the control block.
pub const CONTROL_MAGIC: [u8; 8] = *b"RDXACLT\0";
/// Layout version of the control block and the arrays.
pub const CONTROL_VERSION: u32 = 3;
/// A child reference (bit 31 set) that names a leaf by its entries rather than its index:
/// bit 30 set, the length in bits 20..30, the tier's first entry in bits 0..20, so the
/// program reads no leaf words for it. Leaves too long or too far for that, or named by many
/// slots (more than 4), keep the index form (bit 30 clear).
pub const INLINE_LEAF: u32 = 1 << 30;
const INLINE_LEN_MAX: u32 = (1 << 10) - 1;
const INLINE_START_MAX: u32 = (1 << 20) - 1;
/// Leaves named by more slots than this keep the index form: when such a leaf changes, an
/// update rewrites its words, not every slot naming it (each slot a 64-byte record of its
/// own in the bank).
const INLINE_REFERRERS_MAX: usize = 4;

/// How much one bank of each array holds (the maps hold two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// Words.
    pub words: usize,
    /// Entry records.
    pub entries: usize,
    /// Rule records.
    pub rules: usize,
    /// Longest leaf the reader scans.
    pub leaf: u32,
}

/// Why an image cannot be built or updated in place.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ImageError {
    /// The image does not fit a bank.
    #[error("the classifier image needs {need} {what} per bank; a bank holds {capacity}")]
    TooLarge {
        /// Which array.
        what: &'static str,
        /// Needed.
        need: usize,
        /// Held.
        capacity: usize,
    },
    /// A leaf longer than the reader scans.
    #[error("a leaf of the classifier holds {len} rules; the reader scans at most {max}")]
    LeafTooLong {
        /// The leaf's length.
        len: u32,
        /// Longest scanned.
        max: u32,
    },
    /// An update outgrew the room the layout kept; build the image again.
    #[error("an update outgrew the image's room for {0}; rebuild it")]
    OutOfRoom(&'static str),
    /// The tree has more tiers or trees than the program walks.
    #[error("the tree has {0}, more than the enforcement program walks")]
    Shape(String),
}

/// Where one tier lives in the arrays (tier-local indices start there).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TierLayout {
    /// The tier's first priority: it holds priorities `lo..hi`.
    pub lo: u32,
    /// One past the tier's last priority.
    pub hi: u32,
    /// Word index where the tier's node blocks start (node references and each node's
    /// first-child word are relative to it).
    pub nodes: u32,
    /// Word index child-reference offsets are relative to: the node blocks' start, since each
    /// node's references follow it.
    pub refs: u32,
    /// Per tree node: its block's word offset from `nodes` (a multiple of 8; the image's
    /// reference to the node is that offset / 8).
    pub node_at: Vec<u32>,
    /// (first child-reference slot in the tree, node), ascending: which node a tree slot
    /// belongs to.
    pub node_of_slot: Vec<(u32, u32)>,
    /// The tree's reference in each child-reference slot, as the image last wrote it.
    pub slot_target: Vec<u32>,
    /// Per leaf, the slots whose reference names it (the shared empty leaf's are not kept:
    /// it never changes), to rewrite their inline form when the leaf changes.
    pub referrers: Vec<Vec<u32>>,
    /// Per leaf, whether references to it take the inline form (decided when the leaf is
    /// first written: at most 4 referring slots).
    pub inline: Vec<bool>,
    /// Word index of leaf 0 and how many leaves fit.
    pub leaves: u32,
    /// How many leaves the tier's leaf area holds (room kept for updates included).
    pub leaf_cap: u32,
    /// Entry index of entry 0 and how many entries fit.
    pub entries: u32,
    /// How many compact entries the tier's entry area holds (room kept for updates included).
    pub entry_cap: u32,
    /// Tree roots, ascending by their smallest priority.
    pub roots: Vec<u32>,
}

/// Records changed by an update (or everything), to copy into a bank.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dirty {
    /// Every record in use.
    pub all: bool,
    /// Word ranges.
    pub words: Vec<Range<u32>>,
    /// Entry ranges.
    pub entries: Vec<Range<u32>>,
    /// Rule indices.
    pub rules: Vec<u32>,
}

impl Dirty {
    /// Everything.
    pub fn everything() -> Dirty {
        Dirty {
            all: true,
            ..Dirty::default()
        }
    }

    /// Adds `other`'s records.
    pub fn merge(&mut self, other: &Dirty) {
        self.all |= other.all;
        if self.all {
            self.words.clear();
            self.entries.clear();
            self.rules.clear();
            return;
        }
        self.words.extend(other.words.iter().cloned());
        self.entries.extend(other.entries.iter().cloned());
        self.rules.extend(other.rules.iter().copied());
    }

    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        !self.all && self.words.is_empty() && self.entries.is_empty() && self.rules.is_empty()
    }
}

/// A rule set's classifier in the program's form, kept by the control plane next to the
/// native tree it mirrors.
#[derive(Clone, Debug)]
pub struct TreeImage {
    /// Per tier.
    pub tiers: Vec<TierLayout>,
    /// The words array (one bank's worth, as used).
    pub words: Vec<u32>,
    /// The entries array.
    pub entries: Vec<[u8; ENTRY_SIZE]>,
    /// The rules array.
    pub rules: Vec<[u8; RULE_SIZE]>,
    /// The decisions array (`policy << 8 | DECISION_WRITTEN | action`, little-endian).
    pub decisions: Vec<u64>,
    /// Default action.
    pub default: Action,
    /// Longest leaf allowed ([`Capacity::leaf`]).
    max_leaf: u32,
}

/// Words of a node's block: the node and its child references, rounded up to 8 words so
/// that every block starts on a multiple of 8 (node references are word offsets / 8).
fn node_block(n: &NodeView) -> usize {
    round_up(NODE_WORDS + (1usize << n.bits) + 2, NODE_WORDS)
}

/// The image's form of a tree reference: a leaf's as it is, a node's its block's offset / 8.
fn node_ref(node_at: &[u32], r: u32) -> u32 {
    if r & LEAF_REF != 0 {
        r
    } else {
        node_at[r as usize] / NODE_WORDS as u32
    }
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

fn entry_bytes(e: &EntryView) -> [u8; ENTRY_SIZE] {
    // Fixed offsets (`struct acl_entry` in enforce.c), so that the copies compile to plain
    // stores.
    let mut b = [0u8; ENTRY_SIZE];
    b[0..8].copy_from_slice(&e.va_lo.to_le_bytes());
    b[8..16].copy_from_slice(&e.va_hi.to_le_bytes());
    b[16..24].copy_from_slice(&e.opcodes.to_le_bytes());
    b[24..28].copy_from_slice(&e.sip_lo.to_le_bytes());
    b[28..32].copy_from_slice(&e.sip_hi.to_le_bytes());
    b[32..36].copy_from_slice(&e.dip_lo.to_le_bytes());
    b[36..40].copy_from_slice(&e.dip_hi.to_le_bytes());
    b[40..44].copy_from_slice(&e.dqpn_lo.to_le_bytes());
    b[44..48].copy_from_slice(&e.dqpn_hi.to_le_bytes());
    b[48..50].copy_from_slice(&e.sport_lo.to_le_bytes());
    b[50..52].copy_from_slice(&e.sport_hi.to_le_bytes());
    b[52..54].copy_from_slice(&e.dport_lo.to_le_bytes());
    b[54..56].copy_from_slice(&e.dport_hi.to_le_bytes());
    b[56..58].copy_from_slice(&e.absent_ok.to_le_bytes());
    b[58..60].copy_from_slice(&e.flags.to_le_bytes());
    b[60..64].copy_from_slice(&e.priority.to_le_bytes());
    b
}

/// Bit 7 of a decision word: the slot was written by a control plane. An array map's slots
/// start zeroed, and `action` 0 is allow, so without this mark a slot no image wrote would
/// read as "allow".
pub const DECISION_WRITTEN: u64 = 0x80;
/// The low byte of the one decision word that allows (`enforce.c` denies on any other).
pub const DECISION_ALLOW: u64 = DECISION_WRITTEN | Action::Allow as u64;

/// What rule `r` decides, as the program reads it: an action other than allow is written as
/// deny.
fn decision(r: &Rule) -> u64 {
    let action = if r.action == Action::Allow as u8 {
        Action::Allow
    } else {
        Action::Deny
    };
    (r.policy as u64) << 8 | DECISION_WRITTEN | action as u64
}

fn rule_bytes(rules: &[Rule]) -> Vec<[u8; RULE_SIZE]> {
    let set = RuleSet {
        rules: rules.to_vec(),
        default: Action::Allow,
        policy_names: Vec::new(),
    };
    RuleImage::to_bytes(&set)[IMAGE_HEADER_SIZE..]
        .chunks_exact(RULE_SIZE)
        .map(|c| c.try_into().expect("rule size"))
        .collect()
}

impl TreeImage {
    /// Serialises `tree` (built from `set.rules`), keeping room for updates, within `cap`.
    pub fn build(tree: &CutTree, set: &RuleSet, cap: Capacity) -> Result<TreeImage, ImageError> {
        if tree.tier_count() > MAX_TIERS {
            return Err(ImageError::Shape(format!("{} tiers", tree.tier_count())));
        }
        let mut tiers = Vec::new();
        let (mut words, mut entries) = (0usize, 0usize);
        for t in 0..tree.tier_count() {
            let v = tree.tier_view(t);
            let roots: Vec<u32> = v.groups().map(|(root, _)| root).collect();
            if roots.len() > MAX_GROUPS {
                return Err(ImageError::Shape(format!(
                    "{} trees in a tier",
                    roots.len()
                )));
            }
            let (lo, hi) = v.priorities();
            let nodes = words;
            // Each node's block: its 8 words, then its child references (2^bits inside,
            // outside, absent), so that a step of the walk reads one page, not two.
            let mut node_at = Vec::with_capacity(v.node_count());
            let mut at = 0usize;
            for i in 0..v.node_count() {
                node_at.push(at as u32);
                at += node_block(&v.node(i));
            }
            let mut node_of_slot: Vec<(u32, u32)> = (0..v.node_count())
                .map(|i| (v.node(i).children, i as u32))
                .collect();
            node_of_slot.sort_unstable();
            let leaves = round_up(nodes + at, WORDS_PER_RECORD);
            let leaf_cap = v.leaf_count() + v.leaf_count() / 4 + 256;
            words = round_up(leaves + 2 * leaf_cap, WORDS_PER_RECORD);
            let entry_cap = v.entry_count() + v.entry_count() / 4 + 4096;
            let slot_target = v.refs().to_vec();
            let mut referrers: Vec<Vec<u32>> = vec![Vec::new(); v.leaf_count()];
            for (slot, &r) in slot_target.iter().enumerate() {
                if r & LEAF_REF != 0 && r != EMPTY_REF {
                    referrers[(r & !LEAF_REF) as usize].push(slot as u32);
                }
            }
            let inline = referrers
                .iter()
                .map(|r| r.len() <= INLINE_REFERRERS_MAX)
                .collect();
            tiers.push(TierLayout {
                lo,
                hi,
                nodes: nodes as u32,
                refs: nodes as u32,
                node_at,
                node_of_slot,
                slot_target,
                referrers,
                inline,
                leaves: leaves as u32,
                leaf_cap: leaf_cap as u32,
                entries: entries as u32,
                entry_cap: entry_cap as u32,
                roots,
            });
            entries += entry_cap;
        }
        for (what, need, capacity) in [
            ("words", words, cap.words),
            ("entries", entries, cap.entries),
            ("rules", set.rules.len(), cap.rules),
        ] {
            if need > capacity {
                return Err(ImageError::TooLarge {
                    what,
                    need,
                    capacity,
                });
            }
        }
        let mut img = TreeImage {
            tiers,
            words: vec![0; words],
            entries: vec![[0; ENTRY_SIZE]; entries],
            rules: rule_bytes(&set.rules),
            decisions: set.rules.iter().map(decision).collect(),
            default: set.default,
            max_leaf: cap.leaf,
        };
        for t in 0..tree.tier_count() {
            let v = tree.tier_view(t);
            // Leaves first: a reference to a leaf is written in the form of its entries.
            for i in 0..v.leaf_count() {
                img.put_leaf(t, &v, i as u32)?;
            }
            let l = img.tiers[t].clone();
            let refs = v.refs();
            for i in 0..v.node_count() {
                let n = v.node(i);
                let rel = l.node_at[i] as usize;
                let at = l.nodes as usize + rel;
                let w = &mut img.words[at..at + NODE_WORDS];
                for (k, word) in w[..4].iter_mut().enumerate() {
                    *word = (n.prefix >> (32 * k)) as u32;
                }
                w[4] = (rel + NODE_WORDS) as u32;
                w[5] = n.field as u32
                    | (n.bits as u32) << 8
                    | (n.shift as u32) << 16
                    | (n.whole as u32) << 24;
                let count = (1usize << n.bits) + 2;
                let first = n.children as usize;
                for (k, &r) in refs[first..first + count].iter().enumerate() {
                    img.words[at + NODE_WORDS + k] = img.encode_ref(t, r);
                }
            }
            img.tiers[t].roots = v.groups().map(|(r, _)| img.encode_ref(t, r)).collect();
        }
        Ok(img)
    }

    /// The image's form of tree reference `r` in tier `t`: a node's block offset / 8; a
    /// leaf's inline form ([`INLINE_LEAF`], from the leaf's words as written) where it
    /// fits, else the leaf's index.
    fn encode_ref(&self, t: usize, r: u32) -> u32 {
        let l = &self.tiers[t];
        if r & LEAF_REF == 0 {
            return node_ref(&l.node_at, r);
        }
        let leaf = r & !LEAF_REF;
        let at = (l.leaves + 2 * leaf) as usize;
        let inline = l.inline.get(leaf as usize).copied().unwrap_or(false);
        match self.words.get(at..at + 2) {
            Some(&[start, len])
                if inline
                    && leaf < l.leaf_cap
                    && start <= INLINE_START_MAX
                    && len <= INLINE_LEN_MAX =>
            {
                LEAF_REF | INLINE_LEAF | len << 20 | start
            }
            _ => r,
        }
    }

    /// Word index of tier `t`'s child-reference slot `slot` (a tree slot index).
    fn slot_word(&self, t: usize, slot: u32) -> Result<u32, ImageError> {
        let l = &self.tiers[t];
        let k = l.node_of_slot.partition_point(|&(first, _)| first <= slot);
        let Some(&(first, node)) = k.checked_sub(1).and_then(|k| l.node_of_slot.get(k)) else {
            return Err(ImageError::OutOfRoom("references"));
        };
        Ok(l.refs + l.node_at[node as usize] + NODE_WORDS as u32 + (slot - first))
    }

    /// Leaf `leaf` of tier `t` as the tree has it (start, length) and the index of its record
    /// in the words, once it is checked to fit the image's room.
    fn leaf_record(
        &self,
        t: usize,
        v: &TierView<'_>,
        leaf: u32,
    ) -> Result<(u32, u32, usize), ImageError> {
        let l = &self.tiers[t];
        if leaf >= l.leaf_cap {
            return Err(ImageError::OutOfRoom("leaves"));
        }
        let (start, len) = v.leaf(leaf as usize);
        if len > self.max_leaf {
            return Err(ImageError::LeafTooLong {
                len,
                max: self.max_leaf,
            });
        }
        if start + len > l.entry_cap {
            return Err(ImageError::OutOfRoom("entries"));
        }
        Ok((start, len, (l.leaves + 2 * leaf) as usize))
    }

    /// Serialises leaf `leaf` of tier `t` and its entries.
    fn put_leaf(
        &mut self,
        t: usize,
        v: &TierView<'_>,
        leaf: u32,
    ) -> Result<Range<u32>, ImageError> {
        let (start, len, at) = self.leaf_record(t, v, leaf)?;
        self.words[at] = start;
        self.words[at + 1] = len;
        let base = self.tiers[t].entries + start;
        // Only the entries whose bytes change need copying into a bank (an insertion or a
        // removal shifts the rest of the leaf; a replacement in place changes one).
        let (mut first, mut last) = (u32::MAX, 0);
        for i in 0..len {
            let e = entry_bytes(&v.entry((start + i) as usize));
            let slot = &mut self.entries[(base + i) as usize];
            if *slot != e {
                *slot = e;
                first = first.min(base + i);
                last = base + i + 1;
            }
        }
        Ok(if first == u32::MAX {
            base..base
        } else {
            first..last
        })
    }

    /// Brings the image in step with `tree` after `tree.replace_rules(updates)` (the image
    /// still holds the rules before it; no other update of the tree in between), returning
    /// the records that changed. On [`ImageError::OutOfRoom`] the image is unusable: build
    /// it again.
    ///
    /// The tree says what it wrote ([`super::TierView::touched`]): those entries, leaves
    /// and reference slots are re-serialised (each once), nothing else is read, and no tree
    /// is walked again.
    pub fn apply(&mut self, tree: &CutTree, updates: &[Rule]) -> Result<Dirty, ImageError> {
        let mut dirty = Dirty::default();
        for new in updates {
            let p = new.priority as usize;
            if p >= self.rules.len() {
                continue;
            }
            self.rules[p] = rule_bytes(std::slice::from_ref(new))[0];
            self.decisions[p] = decision(new);
            dirty.rules.push(p as u32);
        }
        if tree.tier_count() != self.tiers.len() {
            return Err(ImageError::OutOfRoom("tiers"));
        }
        for t in 0..self.tiers.len() {
            let v = tree.tier_view(t);
            if v.node_count() != self.tiers[t].node_at.len() {
                return Err(ImageError::OutOfRoom("nodes"));
            }
            let touched = v.touched();
            // Entries: the ranges the tree wrote, merged.
            let mut runs = touched.entries.clone();
            runs.sort_unstable_by_key(|r| (r.start, r.end));
            let mut merged: Vec<Range<u32>> = Vec::with_capacity(runs.len());
            for r in runs {
                match merged.last_mut() {
                    Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                    _ => merged.push(r),
                }
            }
            let (base, cap) = (self.tiers[t].entries, self.tiers[t].entry_cap);
            for r in merged {
                if r.end > cap {
                    return Err(ImageError::OutOfRoom("entries"));
                }
                for i in r.clone() {
                    self.entries[(base + i) as usize] = entry_bytes(&v.entry(i as usize));
                }
                dirty.entries.push(base + r.start..base + r.end);
            }
            // Leaves whose first entry or length changed: their words, and (below) the
            // inline references naming them.
            let mut leaves = touched.leaves.clone();
            leaves.sort_unstable();
            leaves.dedup();
            let mut moved = Vec::new();
            for leaf in leaves {
                let (start, len, at) = self.leaf_record(t, &v, leaf)?;
                if self.words[at..at + 2] != [start, len] {
                    self.words[at] = start;
                    self.words[at + 1] = len;
                    dirty.words.push(at as u32..at as u32 + 2);
                    moved.push(leaf);
                }
            }
            // The slots whose reference changed, and every slot naming a moved leaf inline.
            let mut slots: Vec<u32> = Vec::with_capacity(touched.refs.len());
            for &slot in &touched.refs {
                let new = v.refs()[slot as usize];
                let l = &mut self.tiers[t];
                let Some(old) = l.slot_target.get(slot as usize).copied() else {
                    return Err(ImageError::OutOfRoom("references"));
                };
                if old != new {
                    if old & LEAF_REF != 0 && old != EMPTY_REF {
                        if let Some(list) = l.referrers.get_mut((old & !LEAF_REF) as usize) {
                            list.retain(|&s| s != slot);
                        }
                    }
                    if new & LEAF_REF != 0 && new != EMPTY_REF {
                        let leaf = (new & !LEAF_REF) as usize;
                        if l.referrers.len() <= leaf {
                            l.referrers.resize(leaf + 1, Vec::new());
                        }
                        l.referrers[leaf].push(slot);
                        if l.inline.len() <= leaf {
                            // A leaf the update created: inline, as long as few slots name it.
                            l.inline.resize(leaf + 1, true);
                        }
                    }
                    l.slot_target[slot as usize] = new;
                }
                slots.push(slot);
            }
            let l = &self.tiers[t];
            for leaf in moved {
                if l.inline.get(leaf as usize).copied().unwrap_or(false) {
                    if let Some(list) = l.referrers.get(leaf as usize) {
                        slots.extend(list.iter().copied());
                    }
                }
            }
            slots.sort_unstable();
            slots.dedup();
            for slot in slots {
                let at = self.slot_word(t, slot)?;
                let word = self.encode_ref(t, self.tiers[t].slot_target[slot as usize]);
                if self.words[at as usize] != word {
                    self.words[at as usize] = word;
                    dirty.words.push(at..at + 1);
                }
            }
            let roots: Vec<u32> = v
                .groups()
                .map(|(root, _)| self.encode_ref(t, root))
                .collect();
            if roots.len() > MAX_GROUPS {
                return Err(ImageError::Shape(format!(
                    "{} trees in a tier",
                    roots.len()
                )));
            }
            self.tiers[t].roots = roots;
        }
        Ok(dirty)
    }

    /// Rules in the set.
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// The program's per-version control block for this image in `bank` (whose arrays
    /// start at the given element indices), reporting `generation` and tagging hot-flow
    /// entries with `tag` (unique per published version).
    pub fn control(&self, bank: u32, base: Capacity, generation: u64, tag: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(CONTROL_SIZE);
        out.extend_from_slice(&CONTROL_MAGIC);
        let u32s = |out: &mut Vec<u8>, ws: &[u32]| {
            for w in ws {
                out.extend_from_slice(&w.to_le_bytes());
            }
        };
        u32s(&mut out, &[CONTROL_VERSION, bank]);
        out.extend_from_slice(&generation.to_le_bytes());
        out.extend_from_slice(&tag.to_le_bytes());
        let (wb, eb, rb) = (base.words as u32, base.entries as u32, base.rules as u32);
        u32s(
            &mut out,
            &[
                self.rules.len() as u32,
                rb,
                self.tiers.len() as u32,
                (self.default == Action::Deny) as u32,
            ],
        );
        for t in 0..MAX_TIERS {
            let l = self.tiers.get(t).cloned().unwrap_or_default();
            let mut roots = [0u32; MAX_GROUPS];
            roots[..l.roots.len()].copy_from_slice(&l.roots);
            u32s(
                &mut out,
                &[
                    l.lo,
                    l.hi,
                    l.roots.len() as u32,
                    wb + l.nodes,
                    wb + l.refs,
                    wb + l.leaves,
                    eb + l.entries,
                    0,
                ],
            );
            u32s(&mut out, &roots);
        }
        debug_assert_eq!(out.len(), CONTROL_SIZE);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth;

    const CAP: Capacity = Capacity {
        words: 1 << 22,
        entries: 1 << 20,
        rules: 1 << 16,
        leaf: 1 << 16,
    };

    fn set(n: usize, seed: u64) -> RuleSet {
        RuleSet {
            rules: synth::rules(n, seed),
            default: Action::Deny,
            policy_names: Vec::new(),
        }
    }

    /// `got`, the image's reference for the tree's reference `r`, names the same node or
    /// leaf: a node by its block, a leaf inline by its entries or by its index.
    fn names(v: &TierView<'_>, l: &TierLayout, r: u32, got: u32) {
        if r & LEAF_REF == 0 {
            assert_eq!(got * NODE_WORDS as u32, l.node_at[r as usize]);
        } else if got & INLINE_LEAF != 0 {
            assert_eq!(got & LEAF_REF, LEAF_REF);
            let leaf = (r & !LEAF_REF) as usize;
            assert_eq!(
                (got & INLINE_START_MAX, (got >> 20) & INLINE_LEN_MAX),
                v.leaf(leaf)
            );
        } else {
            assert_eq!(got, r);
        }
    }

    /// An update re-serialised in place equals a fresh serialisation of the updated tree
    /// wherever the fresh one is defined (the in-place image keeps stale arena room).
    #[test]
    fn in_place_updates_match_a_fresh_image() {
        let s = set(3000, 5);
        let mut tree = CutTree::new(s.rules.clone());
        let mut img = TreeImage::build(&tree, &s, CAP).unwrap();
        let other = synth::rules(3000, 99);
        let mut updates: Vec<Rule> = Vec::new();
        for i in 0..100 {
            let p = (i * 29) % 3000;
            let mut r = other[(i * 7) % 3000];
            r.priority = p as u32;
            r.policy = s.rules[p].policy;
            updates.push(r);
        }
        tree.replace_rules(&updates);
        let dirty = img.apply(&tree, &updates).unwrap();
        assert!(!dirty.is_empty() && !dirty.all);
        let mut s2 = s.clone();
        for u in &updates {
            s2.rules[u.priority as usize] = *u;
        }
        assert_eq!(img.rules, rule_bytes(&s2.rules));
        assert_eq!(
            img.decisions,
            s2.rules.iter().map(decision).collect::<Vec<_>>()
        );
        // Walk both images' leaves: same runs of entries.
        for t in 0..tree.tier_count() {
            let v = tree.tier_view(t);
            let l = &img.tiers[t];
            for leaf in 0..v.leaf_count() {
                let at = (l.leaves + 2 * leaf as u32) as usize;
                let (start, len) = (img.words[at], img.words[at + 1]);
                assert_eq!((start, len), v.leaf(leaf));
                for i in 0..len {
                    assert_eq!(
                        img.entries[(l.entries + start + i) as usize],
                        entry_bytes(&v.entry((start + i) as usize))
                    );
                }
            }
            // Every node's block: its first-child word points just past it, and its
            // references are the tree's, nodes named by their blocks.
            for i in 0..v.node_count() {
                let n = v.node(i);
                let at = (l.nodes + l.node_at[i]) as usize;
                assert_eq!(img.words[at + 4], l.node_at[i] + NODE_WORDS as u32);
                let count = (1usize << n.bits) + 2;
                let first = n.children as usize;
                for (k, &r) in v.refs()[first..first + count].iter().enumerate() {
                    let got = img.words[l.refs as usize + img.words[at + 4] as usize + k];
                    names(&v, l, r, got);
                }
            }
            assert_eq!(l.roots.len(), v.groups().count());
            for ((r, _), &got) in v.groups().zip(&l.roots) {
                names(&v, l, r, got);
            }
        }
        let ctl = img.control(1, CAP, 7, 9);
        assert_eq!(ctl.len(), CONTROL_SIZE);
        assert_eq!(&ctl[..8], &CONTROL_MAGIC);
    }

    #[test]
    fn too_small_a_bank_or_too_long_a_leaf_is_refused() {
        let s = set(500, 1);
        let tree = CutTree::new(s.rules.clone());
        let cap = Capacity { rules: 100, ..CAP };
        assert!(matches!(
            TreeImage::build(&tree, &s, cap),
            Err(ImageError::TooLarge { what: "rules", .. })
        ));
        let cap = Capacity { leaf: 2, ..CAP };
        assert!(matches!(
            TreeImage::build(&tree, &s, cap),
            Err(ImageError::LeafTooLong { max: 2, .. })
        ));
    }
}
