//! A decision-tree classifier ("cut tree"): the rules are split into a few groups by which of
//! the selective fields (sip, dip, dQPN) they leave wide, and each group gets a tree whose
//! nodes cut one field's value into 2^k equal blocks (the bits right after a common prefix the
//! node checks first). A lookup walks each group's tree to one leaf — a short, priority-sorted
//! run of 64-byte compact rule copies, exact for IPv4 RoCEv2 rules — and reads the 224-byte
//! rule only when a compact copy cannot decide. The rules are also split by priority into two
//! tiers with their own trees (see [`CutTree`]).
//!
//! Why: the tuple space probes a dozen hash tables spread over ~90 MB, so nearly every probe
//! misses the caches. Here the upper levels of a few trees are small and stay cached, and a
//! lookup touches one contiguous leaf per group.
//!
//! Exactness: a node sends a packet to the child whose block holds its value, to an
//! *outside* child when the value lacks the node's prefix, or to an *absent* child when the
//! packet lacks the field; a rule is copied into every child a matching packet could reach
//! (clipped to the region the node covers). Leaves keep every rule that reaches them, in
//! priority order, so the first match in a leaf is the first match of its group, and the
//! smallest over groups is the answer. No rule is ever dropped as "covered", which is what
//! makes updates local: replacing a rule removes it from the leaves its old version reached
//! and inserts it into those its new version reaches; the node structure never changes.
//! A removal leaves a never-matching *tombstone* holding the rule's priority where the
//! entry stood, and an insertion takes the tombstone next to its place (or moves the entries
//! up to the nearest one), so an update rewrites the few entries it changes, not the rest of
//! a long leaf — which a mirror of the arrays (`classify::image`) would copy too.

use std::ops::Range;

use super::table::prefetch_line;
use super::Classifier;
use crate::field::Field;
use crate::rule::{PacketKey, Rule};

/// Fields a node may cut, by [`Field`] index. Masks (opcode, CM type, forged) are left to
/// the leaf check.
pub(crate) const CUT_FIELDS: [Field; 11] = [
    Field::Sip,
    Field::Dip,
    Field::SGid,
    Field::DGid,
    Field::Sport,
    Field::Dport,
    Field::SLid,
    Field::DLid,
    Field::LQpn,
    Field::DQpn,
    Field::Va,
];

/// Fields whose width decides a rule's group, with the span above which a rule counts as
/// wide in it (an IPv4 /8, 65,536 QPNs).
const GROUP_FIELDS: [(Field, u128); 3] = [
    (Field::Sip, 1 << 24),
    (Field::Dip, 1 << 24),
    (Field::DQpn, 1 << 16),
];

/// In the first tier, a class with less than 1/`SMALL_GROUP` of the tier's rules joins the
/// all-wide group.
const SMALL_GROUP: usize = 16;
/// Sample packets that choose a small tier's shape ([`Tier::chosen`]).
const COST_SAMPLES: usize = 1024;

/// How a tier's trees are cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    /// Every rule in one tree instead of one per group.
    one_tree: bool,
    /// Rules in a leaf before a node stops splitting.
    leaf_rules: usize,
    /// Rule copies a tree may hold per rule of its group, and at least.
    budget: usize,
    min_budget: usize,
    /// Rule copies (plus children) one cut may make per rule of its node.
    space: usize,
}

/// The shape of the large tiers.
const DEFAULT_SHAPE: Shape = Shape {
    one_tree: false,
    leaf_rules: LEAF_RULES,
    budget: TREE_BUDGET,
    min_budget: MIN_TREE_BUDGET,
    space: SPACE_FACTOR,
};

/// The shapes a small tier may take ([`Tier::chosen`]): grouped or one tree, each with the
/// default cuts or with short leaves (two rules, more room for copies — a small tier's
/// trees stay small either way).
const SMALL_SHAPES: [Shape; 4] = [
    DEFAULT_SHAPE,
    Shape {
        one_tree: true,
        ..DEFAULT_SHAPE
    },
    Shape {
        one_tree: false,
        leaf_rules: 2,
        budget: 32,
        min_budget: 0,
        space: 8,
    },
    Shape {
        one_tree: true,
        leaf_rules: 2,
        budget: 32,
        min_budget: 0,
        space: 8,
    },
];
/// Rules in a leaf before a node stops splitting.
const LEAF_RULES: usize = 8;
/// Most bits one node cuts (256 children).
const MAX_BITS: u32 = 8;
/// Space factor: a cut may produce at most this many rule copies per rule of its node
/// (children's rule counts plus the number of children).
const SPACE_FACTOR: usize = 4;
/// Rule copies a whole tree may hold, per rule of its group (and at least
/// [`MIN_TREE_BUDGET`]): a node's cut gets a share of its parent's allowance in proportion
/// to its rules, so replication cannot compound level after level.
const TREE_BUDGET: usize = 8;
const MIN_TREE_BUDGET: usize = 16_384;
/// Deepest node.
const MAX_DEPTH: u32 = 24;

/// A child reference with this bit set names a leaf, otherwise a node.
const LEAF: u32 = 1 << 31;
/// The shared empty leaf (every empty child points here until a rule is inserted).
const EMPTY: u32 = LEAF;
/// A [`Tier::fast`] reference with this bit set is a leaf's run of entries.
const FAST_LEAF: u64 = 1 << 63;

#[derive(Clone, Copy, Debug)]
#[repr(C, align(32))]
struct Node {
    /// The value's bits above the cut (`value >> (shift + bits)`) for the inside children.
    prefix: u128,
    /// First child reference in `refs`: `2^bits` inside children, then outside, then absent.
    children: u32,
    field: u8,
    bits: u8,
    shift: u8,
    /// `shift + bits == 128`: every value has the prefix.
    whole: bool,
}

impl Node {
    #[inline(always)]
    fn outside(&self) -> usize {
        1 << self.bits
    }

    #[inline(always)]
    fn absent(&self) -> usize {
        (1 << self.bits) + 1
    }

    /// Bounds of the prefix block the inside children divide.
    fn block(&self) -> (u128, u128) {
        let top = self.shift as u32 + self.bits as u32;
        if top >= 128 {
            (0, u128::MAX)
        } else if top == 0 {
            (self.prefix, self.prefix)
        } else {
            let lo = self.prefix << top;
            (lo, lo | (u128::MAX >> (128 - top)))
        }
    }

    /// Which child a packet goes to.
    #[inline(always)]
    fn child_of(&self, k: &PacketKey) -> usize {
        if k.present >> self.field & 1 == 0 {
            return self.absent();
        }
        let v = value(k, self.field);
        let top = self.shift as u32 + self.bits as u32;
        if !self.whole && v >> top != self.prefix {
            return self.outside();
        }
        ((v >> self.shift) as usize) & ((1usize << self.bits) - 1)
    }
}

#[inline(always)]
fn value(k: &PacketKey, field: u8) -> u128 {
    match field {
        0 => k.sip,
        1 => k.dip,
        2 => k.sport as u128,
        3 => k.dport as u128,
        4 => k.slid as u128,
        5 => k.dlid as u128,
        6 => k.sgid,
        7 => k.dgid,
        9 => k.lqpn as u128,
        10 => k.dqpn as u128,
        12 => k.va as u128,
        _ => 0,
    }
}

/// The values a node's packets may have in one field: a bounding range (a superset once an
/// outside child is taken) and whether the field may be present or absent.
#[derive(Clone, Copy, Debug)]
struct Dim {
    lo: u128,
    hi: u128,
    present: bool,
    absent: bool,
}

type Region = [Dim; crate::field::FIELD_COUNT];

fn full_region() -> Region {
    Field::ALL.map(|f| Dim {
        lo: 0,
        hi: f.max(),
        present: true,
        absent: true,
    })
}

/// The children of `node` (in its numbering) a rule must be copied into, given the region
/// the node covers: inside children `a..=b`, the outside child, the absent child.
struct Span {
    inside: Option<(usize, usize)>,
    outside: bool,
    absent: bool,
}

fn span(node: &Node, dim: &Dim, r: &Rule) -> Span {
    let f = Field::ALL[node.field as usize];
    let absent = dim.absent && r.absent_ok >> node.field & 1 != 0;
    let (rlo, rhi) = r.range(f);
    let (lo, hi) = (rlo.max(dim.lo), rhi.min(dim.hi));
    if !dim.present || lo > hi {
        return Span {
            inside: None,
            outside: false,
            absent,
        };
    }
    let (blo, bhi) = node.block();
    let outside = lo < blo || hi > bhi;
    let (ilo, ihi) = (lo.max(blo), hi.min(bhi));
    let mask = (1u128 << node.bits) - 1;
    let inside = (ilo <= ihi).then(|| {
        (
            ((ilo >> node.shift) & mask) as usize,
            ((ihi >> node.shift) & mask) as usize,
        )
    });
    Span {
        inside,
        outside,
        absent,
    }
}

/// The region of child `idx` of `node`.
fn child_region(node: &Node, region: &Region, idx: usize) -> Region {
    let mut out = *region;
    out[node.field as usize] = child_dim(node, &region[node.field as usize], idx);
    out
}

/// The one dimension of a child's region that differs from its node's: `dim`, the node's
/// field, narrowed to child `idx`.
fn child_dim(node: &Node, dim: &Dim, idx: usize) -> Dim {
    let mut d = *dim;
    if idx == node.absent() {
        d.present = false;
    } else {
        d.absent = false;
        if idx < node.outside() {
            let (blo, _) = node.block();
            let lo = blo | ((idx as u128) << node.shift);
            let hi = if node.shift == 0 {
                lo
            } else {
                lo | (u128::MAX >> (128 - node.shift as u32))
            };
            d.lo = d.lo.max(lo);
            d.hi = d.hi.min(hi);
        }
    }
    d
}

/// The compact, cache-line sized copy of a rule checked in leaves.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
struct Compact {
    va_lo: u64,
    va_hi: u64,
    /// Opcodes 0..=63; packets with higher opcodes go to the full rule.
    opcodes: u64,
    sip_lo: u32,
    sip_hi: u32,
    dip_lo: u32,
    dip_hi: u32,
    dqpn_lo: u32,
    dqpn_hi: u32,
    sport_lo: u16,
    sport_hi: u16,
    dport_lo: u16,
    dport_hi: u16,
    absent_ok: u16,
    flags: u16,
    /// The rule's priority: leaves hold compact copies, not indexes.
    priority: u32,
}

const _: () = assert!(std::mem::size_of::<Compact>() == 64);

/// The address range lies in the IPv4-mapped space: `*_lo..=*_hi` are its low 32 bits.
const SIP_V4: u16 = 1;
/// The address range is everything.
const SIP_ANY: u16 = 2;
const DIP_V4: u16 = 4;
const DIP_ANY: u16 = 8;
/// A field the compact copy does not hold may reject a packet: check the full rule.
const INEXACT: u16 = 16;
/// A tombstone ([`Compact::dead`]): matches nothing, and an insertion may take its place.
const DEAD: u16 = 1 << 15;

const MAPPED_HI: u128 = 0xffff;

impl Compact {
    fn of(r: &Rule, priority: u32) -> Compact {
        let mut flags = 0;
        let mut addr = |a: &crate::rule::AddrRange, v4: u16, any: u16| -> (u32, u32) {
            let (lo, hi) = (a.lo(), a.hi());
            if lo == 0 && hi == u128::MAX {
                flags |= any;
                (0, u32::MAX)
            } else if lo > hi {
                flags |= v4;
                (1, 0)
            } else if lo >> 32 == MAPPED_HI && hi >> 32 == MAPPED_HI {
                flags |= v4;
                (lo as u32, hi as u32)
            } else {
                flags |= INEXACT;
                (0, u32::MAX)
            }
        };
        let sip = addr(&r.sip, SIP_V4, SIP_ANY);
        let dip = addr(&r.dip, DIP_V4, DIP_ANY);
        let open = |f: Field| r.absent_ok >> f.index() & 1 != 0;
        let open_range = |f: Field| {
            let (lo, hi) = r.range(f);
            open(f) && lo == 0 && hi >= f.max()
        };
        let exact = open_range(Field::SGid)
            && open_range(Field::DGid)
            && open_range(Field::SLid)
            && open_range(Field::DLid)
            && open_range(Field::LQpn)
            && open(Field::CmType)
            && r.cm_type_mask == u16::MAX
            && open(Field::CmForged)
            && r.forged_mask & 3 == 3;
        if !exact {
            flags |= INEXACT;
        }
        Compact {
            va_lo: r.va_lo,
            va_hi: r.va_hi,
            opcodes: r.opcode_mask[0],
            sip_lo: sip.0,
            sip_hi: sip.1,
            dip_lo: dip.0,
            dip_hi: dip.1,
            dqpn_lo: r.dqpn_lo,
            dqpn_hi: r.dqpn_hi,
            sport_lo: r.sport_lo,
            sport_hi: r.sport_hi,
            dport_lo: r.dport_lo,
            dport_hi: r.dport_hi,
            absent_ok: r.absent_ok,
            flags,
            priority,
        }
    }

    /// What a removal leaves in a leaf: priority `p`'s place, matching no packet — every
    /// test fails (an IPv4 range that is empty, ports, dQPN and VA empty, no opcode, no
    /// field may be absent), in this check and in the program's (`bpf/acl/enforce.c`).
    fn dead(p: u32) -> Compact {
        Compact {
            va_lo: u64::MAX,
            va_hi: 0,
            opcodes: 0,
            sip_lo: 1,
            sip_hi: 0,
            dip_lo: 1,
            dip_hi: 0,
            dqpn_lo: u32::MAX,
            dqpn_hi: 0,
            sport_lo: u16::MAX,
            sport_hi: 0,
            dport_lo: u16::MAX,
            dport_hi: 0,
            absent_ok: 0,
            flags: SIP_V4 | DIP_V4 | DEAD,
            priority: p,
        }
    }

    fn is_dead(&self) -> bool {
        self.flags & DEAD != 0
    }

    /// 0: the rule does not match; 1: it matches; 2: the full rule must decide.
    #[inline(always)]
    fn verdict(&self, k: &Probe) -> u8 {
        self.verdict_in::<false>(k)
    }

    /// The opcode, dQPN and VA tests pass whatever the packet (the rule leaves them open;
    /// a packet lacking one is still decided by the absent-ok test).
    fn others_open(&self) -> bool {
        self.opcodes == u64::MAX
            && self.dqpn_lo == 0
            && self.dqpn_hi as u128 >= Field::DQpn.max()
            && self.va_lo == 0
            && self.va_hi == u64::MAX
    }

    /// [`Compact::verdict`]; with `FIVE`, for a copy whose [`Compact::others_open`] holds,
    /// without the tests that then always pass.
    #[inline(always)]
    fn verdict_in<const FIVE: bool>(&self, k: &Probe) -> u8 {
        let others = FIVE
            || (k.op_pass | (self.opcodes & k.op_bit != 0))
                & (self.dqpn_lo <= k.dqpn.0)
                & (k.dqpn.1 <= self.dqpn_hi)
                & (self.va_lo <= k.va.0)
                & (k.va.1 <= self.va_hi);
        // Every test is evaluated and combined without branches: leaf entries fail on
        // arbitrary fields, and a branch per field would mispredict more than it saves. The
        // probe has already folded the packet's absent fields and non-IPv4 addresses into
        // its values (see [`Probe`]), so each field is two compares and the rest is two
        // mask tests.
        let ok = others
            & (self.sip_lo <= k.sip.0)
            & (k.sip.1 <= self.sip_hi)
            & (self.dip_lo <= k.dip.0)
            & (k.dip.1 <= self.dip_hi)
            & (self.sport_lo <= k.sport.0)
            & (k.sport.1 <= self.sport_hi)
            & (self.dport_lo <= k.dport.0)
            & (k.dport.1 <= self.dport_hi)
            & (self.flags & k.v4_fail == 0)
            & (k.absent_need & !self.absent_ok == 0);
        let full = (self.flags & INEXACT != 0) | k.force_full;
        ok as u8 * (1 + full as u8)
    }

    /// [`Compact::verdict`] computed field by field from the packet key: the definition the
    /// probe's folding is tested against.
    #[cfg(test)]
    fn verdict_of_key(&self, k: &PacketKey) -> u8 {
        let present = |f: Field| k.present >> f.index() & 1 != 0;
        let has_op = present(Field::Opcode);
        let op_high = has_op & (k.opcode >= 64);
        let bit = |f: Field, test: bool| (test as u16) << f.index();
        let addr = |v: u128, lo: u32, hi: u32, v4: u16, any: u16| {
            let mapped = v >> 32 == MAPPED_HI;
            (self.flags & any != 0)
                | (self.flags & v4 == 0)
                | (mapped & (lo <= v as u32) & (v as u32 <= hi))
        };
        let op_bit = if k.opcode < 64 { 1u64 << k.opcode } else { 0 };
        let tests = bit(Field::Opcode, op_high | (self.opcodes & op_bit != 0))
            | bit(
                Field::DQpn,
                (self.dqpn_lo <= k.dqpn) & (k.dqpn <= self.dqpn_hi),
            )
            | bit(
                Field::Sip,
                addr(k.sip, self.sip_lo, self.sip_hi, SIP_V4, SIP_ANY),
            )
            | bit(
                Field::Dip,
                addr(k.dip, self.dip_lo, self.dip_hi, DIP_V4, DIP_ANY),
            )
            | bit(
                Field::Sport,
                (self.sport_lo <= k.sport) & (k.sport <= self.sport_hi),
            )
            | bit(
                Field::Dport,
                (self.dport_lo <= k.dport) & (k.dport <= self.dport_hi),
            )
            | bit(Field::Va, (self.va_lo <= k.va) & (k.va <= self.va_hi));
        let ok = (k.present & tests) | (!k.present & self.absent_ok);
        if ok & COMPACT_FIELDS != COMPACT_FIELDS {
            0
        } else if (self.flags & INEXACT != 0) | op_high {
            2
        } else {
            1
        }
    }
}

/// The fields a compact copy tests.
const COMPACT_FIELDS: u16 = 1 << Field::Opcode as u16
    | 1 << Field::DQpn as u16
    | 1 << Field::Sip as u16
    | 1 << Field::Dip as u16
    | 1 << Field::Sport as u16
    | 1 << Field::Dport as u16
    | 1 << Field::Va as u16;

/// A packet's values as the compact checks read them, derived once per lookup rather than
/// once per leaf entry. Each range field is a pair `(a, b)` tested as `lo <= a && b <= hi`:
/// `(v, v)` for a present value, and `(MAX, 0)` — which every range passes — for a field
/// the packet lacks, whose outcome `absent_need` then leaves to the rule's absent-ok bit. An
/// address that is not IPv4-mapped passes the range the same way and fails through
/// `v4_fail` every copy whose range is an IPv4 one (the others hold `0..=MAX`).
#[derive(Clone, Copy, Debug, Default)]
struct Probe {
    /// Compact fields the packet lacks.
    absent_need: u16,
    /// `SIP_V4` / `DIP_V4` for addresses present but not IPv4-mapped.
    v4_fail: u16,
    /// The opcode test passes whatever the mask: the opcode is absent, or beyond the compact
    /// copies' 64-bit mask (then `force_full`).
    op_pass: bool,
    force_full: bool,
    /// `1 << opcode` for opcodes below 64, else 0.
    op_bit: u64,
    sip: (u32, u32),
    dip: (u32, u32),
    dqpn: (u32, u32),
    sport: (u16, u16),
    dport: (u16, u16),
    va: (u64, u64),
}

impl Probe {
    #[inline(always)]
    fn of(k: &PacketKey) -> Probe {
        let present = |f: Field| k.present >> f.index() & 1 != 0;
        let has_op = present(Field::Opcode);
        let op_high = has_op & (k.opcode >= 64);
        let mut v4_fail = 0;
        let mut addr = |f: Field, v: u128, v4: u16| {
            if !present(f) {
                (u32::MAX, 0)
            } else if v >> 32 != MAPPED_HI {
                v4_fail |= v4;
                (u32::MAX, 0)
            } else {
                (v as u32, v as u32)
            }
        };
        let sip = addr(Field::Sip, k.sip, SIP_V4);
        let dip = addr(Field::Dip, k.dip, DIP_V4);
        let pair32 = |f: Field, v: u32| if present(f) { (v, v) } else { (u32::MAX, 0) };
        let pair16 = |f: Field, v: u16| if present(f) { (v, v) } else { (u16::MAX, 0) };
        Probe {
            absent_need: COMPACT_FIELDS & !k.present,
            v4_fail,
            op_pass: !has_op | op_high,
            force_full: op_high,
            op_bit: if k.opcode < 64 { 1 << k.opcode } else { 0 },
            sip,
            dip,
            dqpn: pair32(Field::DQpn, k.dqpn),
            sport: pair16(Field::Sport, k.sport),
            dport: pair16(Field::Dport, k.dport),
            va: if present(Field::Va) {
                (k.va, k.va)
            } else {
                (u64::MAX, 0)
            },
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Leaf {
    start: u32,
    len: u32,
    cap: u32,
}

/// A tree's first two levels as one table: when every child of the root that is a node
/// cuts the same way (field, bits, prefix), a packet's child index at both levels can be
/// computed at once, from the packet alone, and one table read gives the `fast` slot of the
/// grandchild — instead of reading the child node and then its reference. The table holds
/// slots, not references, and nodes never change after a build, so updates (which rewrite
/// `fast` in place) leave it valid.
#[derive(Clone, Debug)]
struct Flat {
    root: Cut,
    inner: Cut,
    /// Children per inner node (`2^inner.bits + 2`).
    width: usize,
    /// Per (root child, inner child): the `fast` slot to read. A root child that is a leaf
    /// fills its row with its own slot.
    slots: Vec<u32>,
    /// `fast[slots[i]]` for each cell: what a lookup reads (refreshed by every update).
    cells: Vec<u64>,
}

/// A node's child choice in 64-bit arithmetic where its block lies below one value of the
/// high 64 bits (every cut of a field up to 64 bits wide, and of an address inside the
/// IPv4-mapped space): the child is `(low - base) >> shift` when the high word matches and
/// that is below `count`, else the outside child. Other nodes keep the 128-bit test.
#[derive(Clone, Copy, Debug)]
struct Cut {
    node: Node,
    narrow: bool,
    field: u8,
    shift: u8,
    high: u64,
    base: u64,
    count: u64,
}

impl Cut {
    fn of(node: Node) -> Cut {
        let (lo, _) = node.block();
        let top = node.shift as u32 + node.bits as u32;
        Cut {
            node,
            narrow: !node.whole && top <= 64 && node.shift < 64,
            field: node.field,
            shift: node.shift,
            high: (lo >> 64) as u64,
            base: lo as u64,
            count: 1 << node.bits,
        }
    }

    /// [`Node::child_of`].
    #[inline(always)]
    fn child_of(&self, k: &PacketKey) -> usize {
        if !self.narrow {
            return self.node.child_of(k);
        }
        if k.present >> self.field & 1 == 0 {
            return self.count as usize + 1;
        }
        let v = value(k, self.field);
        let d = (v as u64).wrapping_sub(self.base) >> self.shift;
        if ((v >> 64) as u64 != self.high) | (d >= self.count) {
            self.count as usize
        } else {
            d as usize
        }
    }
}

/// Largest [`Flat`] table (cells), so it stays in the first-level cache.
const FLAT_CELLS: usize = 4096;

#[derive(Clone, Debug)]
struct Group {
    /// Which of [`GROUP_FIELDS`] the group's rules leave wide (bit per entry).
    class: u8,
    root: u32,
    /// `root` as the lookup reads it ([`Tier::fast`]).
    fast_root: u64,
    /// The tree's first two levels as one table, when they allow it ([`Flat`]).
    flat: Option<Flat>,
    /// No rule of the group has a smaller priority (a bound: removals do not raise it).
    min_priority: u32,
}

/// Shape of a built tree set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Priority tiers.
    pub tiers: usize,
    /// Trees (rule groups) over all tiers.
    pub groups: usize,
    /// Interior nodes over all trees.
    pub nodes: usize,
    /// Non-empty leaves.
    pub leaves: usize,
    /// Rule references in leaves (a rule reaching several leaves counts in each).
    pub entries: usize,
    /// Largest leaf.
    pub max_leaf: usize,
    /// Deepest leaf.
    pub max_depth: u32,
    /// Bytes of nodes, child references, leaves and compact rules (the lookup's working set).
    pub bytes: usize,
}

/// Decision-tree classifier; see the module documentation.
/// Rules in the first priority tier; the second holds the rest.
const FIRST_TIER: usize = 1024;

/// The trees of the rules in one priority range.
#[derive(Debug)]
struct Tier {
    /// How the trees were cut.
    shape: Shape,
    /// Priorities `lo..hi` live here.
    lo: u32,
    hi: u32,
    /// Ascending by `min_priority`.
    groups: Vec<Group>,
    /// The group class of each raw class ([`class_of`]): classes holding few of the tier's
    /// rules share the all-wide group instead of costing every lookup a walk of their own.
    class_map: [u8; 1 << GROUP_FIELDS.len()],
    nodes: Vec<Node>,
    refs: Vec<u32>,
    /// `refs` as lookups read them: a node's index, or [`FAST_LEAF`] with the leaf's run of
    /// entries (start in the low 32 bits, length above), so a walk goes from the last node
    /// straight to the entries without reading the leaf record. Kept in step with `refs`
    /// and `leaves` by every build and update.
    fast: Vec<u64>,
    leaves: Vec<Leaf>,
    /// Leaf contents: compact rule copies, by ascending priority within a leaf (a rule
    /// reaching several leaves is copied into each, so a leaf is one contiguous run).
    entries: Vec<Compact>,
    /// Every copy ever put in a leaf leaves opcode, dQPN and VA open
    /// ([`Compact::others_open`]), so lookups check addresses and ports only (the rules of
    /// a five-tuple ACL). Cleared by the first update that brings another rule.
    five: bool,
    /// What the last [`CutTree::replace_rules`] wrote here.
    touched: Touched,
    /// Per priority `lo + i`, the leaves holding its rule's live entry (unordered; an
    /// update may leave duplicates until the rule's next update): a rule's old version is
    /// taken out of these leaves without walking its tree.
    holds: Vec<Vec<u32>>,
}

/// What an in-place update ([`CutTree::replace_rules`]) wrote in one tier, so that a copy
/// of the tier's arrays (`classify::image`) rewrites only that, without walking the trees
/// again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Touched {
    /// Entry ranges written (indexes into the tier's entries; they may overlap).
    pub entries: Vec<Range<u32>>,
    /// Leaves whose first entry or length changed, or that were created (may repeat).
    pub leaves: Vec<u32>,
    /// Child-reference slots whose reference changed (may repeat).
    pub refs: Vec<u32>,
}

/// Decision-tree classifier; see the module documentation.
///
/// The rules are also split by priority into two tiers (the first 1,024 rules and the rest),
/// each with its own trees: a lookup stops at the first tier holding a match,
/// since every rule of a later tier comes after it. Rule sets whose broad rules sit near the
/// top — where most traffic is decided — are then classified from a few small, hot trees.
#[derive(Clone, Debug)]
pub struct CutTree {
    rules: Vec<Rule>,
    tiers: Vec<Tier>,
    generation: u64,
}

/// Bit `i` set: the rule leaves `GROUP_FIELDS[i]` wide. A `coarse` class stops at the first
/// narrow field, so fewer groups (fewer walks per lookup) hold more replicated rules.
fn class_of(r: &Rule, coarse: bool) -> u8 {
    let mut class = 0;
    for (i, (f, wide)) in GROUP_FIELDS.iter().enumerate() {
        let (lo, hi) = r.range(*f);
        if lo > hi || hi - lo >= *wide {
            class |= 1 << i;
        } else if coarse {
            break;
        }
    }
    class
}

/// Priority bounds of the tiers for `n` rules.
fn tier_bounds(n: usize, first: usize) -> Vec<(u32, u32)> {
    // A short second tier would cost every packet the first misses one more walk.
    if n <= first + first / 4 {
        return if n == 0 {
            Vec::new()
        } else {
            vec![(0, n as u32)]
        };
    }
    vec![(0, first as u32), (first as u32, n as u32)]
}

impl CutTree {
    /// Builds the trees for rules in priority order (`rules[i].priority == i`).
    pub fn new(rules: Vec<Rule>) -> CutTree {
        Self::with_first_tier(rules, FIRST_TIER)
    }

    /// [`CutTree::new`] with `first` rules in the first tier (tests use small tiers).
    pub(crate) fn with_first_tier(rules: Vec<Rule>, first: usize) -> CutTree {
        let tiers = tier_bounds(rules.len(), first)
            .into_iter()
            .map(|(lo, hi)| Tier::chosen(&rules, lo, hi))
            .collect();
        CutTree {
            rules,
            tiers,
            generation: super::tss::next_generation(),
        }
    }

    /// [`CutTree::with_first_tier`] with every small tier cut as `SMALL_SHAPES[shape]`
    /// instead of the cheapest shape (tests check every shape is exact).
    #[cfg(test)]
    pub(crate) fn with_small_shape(rules: Vec<Rule>, first: usize, shape: usize) -> CutTree {
        let tiers = tier_bounds(rules.len(), first)
            .into_iter()
            .map(|(lo, hi)| {
                let s = if (hi - lo) as usize > FIRST_TIER {
                    DEFAULT_SHAPE
                } else {
                    SMALL_SHAPES[shape]
                };
                Tier::new(&rules, lo, hi, s)
            })
            .collect();
        CutTree {
            rules,
            tiers,
            generation: super::tss::next_generation(),
        }
    }

    /// A tombstone's verdicts for `key`: through the probe, plain and five-tuple, and from
    /// the key (all three must be 0).
    #[cfg(test)]
    pub(crate) fn dead_verdicts(key: &PacketKey) -> [u8; 3] {
        let d = Compact::dead(7);
        let probe = Probe::of(key);
        [
            d.verdict(&probe),
            d.verdict_in::<true>(&probe),
            d.verdict_of_key(key),
        ]
    }

    /// Trees whose first two levels are read through a [`Flat`] table.
    #[cfg(test)]
    pub(crate) fn flat_tables(&self) -> usize {
        self.tiers
            .iter()
            .flat_map(|t| &t.groups)
            .filter(|g| g.flat.is_some())
            .count()
    }

    /// Tiers whose lookups check addresses and ports only ([`Tier::five`]).
    #[cfg(test)]
    pub(crate) fn five_tuple_tiers(&self) -> usize {
        self.tiers.iter().filter(|t| t.five).count()
    }

    /// Whether a compact copy of `rule` reaches the same verdict on `key` through the
    /// per-lookup probe as field by field from the key.
    #[cfg(test)]
    pub(crate) fn probe_verdict_agrees(rule: &Rule, key: &PacketKey) -> bool {
        let c = Compact::of(rule, 0);
        let probe = Probe::of(key);
        c.verdict(&probe) == c.verdict_of_key(key)
            && (!c.others_open() || c.verdict_in::<true>(&probe) == c.verdict(&probe))
    }

    /// Whether [`Cut::child_of`] picks the same child as [`Node::child_of`] for the node
    /// cutting `bits` bits of `field` below bit `top` inside the block holding `anchor`.
    #[cfg(test)]
    pub(crate) fn cut_agrees(
        field: Field,
        bits: u8,
        top: u32,
        anchor: u128,
        key: &PacketKey,
    ) -> bool {
        let top = top.clamp(bits as u32, 128);
        let node = Node {
            prefix: if top >= 128 { 0 } else { anchor >> top },
            children: 0,
            field: field.index() as u8,
            bits,
            shift: (top - bits as u32) as u8,
            whole: top >= 128,
        };
        Cut::of(node).child_of(key) == node.child_of(key)
    }

    /// Number of shapes a small tier may take.
    #[cfg(test)]
    pub(crate) const SMALL_SHAPES: usize = SMALL_SHAPES.len();

    /// The rule table.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Tree shape.
    pub fn stats(&self) -> TreeStats {
        let mut s = TreeStats {
            tiers: self.tiers.len(),
            ..TreeStats::default()
        };
        for t in &self.tiers {
            s.groups += t.groups.len();
            s.nodes += t.nodes.len();
            for g in &t.groups {
                t.walk_stats(g.root, 0, &mut s);
            }
            s.bytes += t.nodes.len() * std::mem::size_of::<Node>()
                + t.refs.len() * 4
                + t.leaves.len() * std::mem::size_of::<Leaf>()
                + t.entries.len() * std::mem::size_of::<Compact>();
        }
        s
    }

    /// Replaces rules in place, keeping their priorities (`rule.priority` names the slot):
    /// each old version leaves the leaves it reached and the new one enters those it reaches.
    /// Out-of-range priorities are ignored.
    /// What each tier's arrays took is in [`TierView::touched`] until the next call.
    pub fn replace_rules(&mut self, updates: &[Rule]) {
        self.generation = super::tss::next_generation();
        for tier in &mut self.tiers {
            tier.touched.entries.clear();
            tier.touched.leaves.clear();
            tier.touched.refs.clear();
        }
        self.prefetch_updates(updates);
        for new in updates {
            let p = new.priority;
            if p as usize >= self.rules.len() {
                continue;
            }
            let Some(tier) = self.tiers.iter_mut().find(|t| t.lo <= p && p < t.hi) else {
                continue;
            };
            tier.replace(new, p);
            self.rules[p as usize] = *new;
        }
        for tier in &mut self.tiers {
            tier.refresh_flat();
        }
    }

    /// Brings what the updates will read and write at known places into the cache before
    /// the first one starts, in stages so that each stage's misses overlap across all the
    /// updates instead of waiting one by one: the rule slots and the lists of leaves holding
    /// each priority, then those lists, then the leaves' records. (The walks' own nodes
    /// depend on the rule and are not prefetched.)
    fn prefetch_updates(&self, updates: &[Rule]) {
        let lines = |at: *const u8, bytes: usize| {
            for off in (0..bytes).step_by(64) {
                prefetch_line(at.wrapping_add(off));
            }
        };
        let holds = |p: u32| {
            let tier = self.tiers.iter().find(|t| t.lo <= p && p < t.hi)?;
            Some((tier, tier.holds.get((p - tier.lo) as usize)?))
        };
        for u in updates {
            if let Some(r) = self.rules.get(u.priority as usize) {
                lines((r as *const Rule).cast(), std::mem::size_of::<Rule>());
            }
            if let Some((_, h)) = holds(u.priority) {
                prefetch_line((h as *const Vec<u32>).cast());
            }
        }
        for u in updates {
            if let Some((_, h)) = holds(u.priority) {
                lines(h.as_ptr().cast(), h.len() * 4);
            }
        }
        for u in updates {
            if let Some((tier, h)) = holds(u.priority) {
                for &leaf in h {
                    if let Some(l) = tier.leaves.get(leaf as usize) {
                        prefetch_line((l as *const Leaf).cast());
                    }
                }
            }
        }
    }

    /// First match among `tier`'s rules, if any (`u32::MAX` if none).
    ///
    /// The first tier's trees are small and cache-resident: they are walked one after the
    /// other, in ascending order of their smallest priority, and the walk stops at the first
    /// tree that cannot hold a better match than the one found (every rule of the synthetic
    /// set's broad top sits in the first tree or two). In the other tiers every group's walk
    /// comes first, with the first candidate of each leaf prefetched, so the walks' cache
    /// misses overlap instead of waiting behind the leaf checks' branches.
    #[inline(always)]
    fn first_in(&self, tier: &Tier, key: &PacketKey, probe: &Probe) -> u32 {
        let mut best = u32::MAX;
        if tier.coarse() {
            for g in &tier.groups {
                if g.min_priority >= best {
                    break;
                }
                best = self.scan(tier, tier.leaf_in(g, key), key, probe, best);
            }
            return best;
        }
        let mut leaves: [&[Compact]; 1 << GROUP_FIELDS.len()] = [&[]; 1 << GROUP_FIELDS.len()];
        for (leaf, g) in leaves.iter_mut().zip(&tier.groups) {
            *leaf = tier.leaf_in(g, key);
            if let Some(c) = leaf.first() {
                prefetch_line((c as *const Compact).cast());
            }
        }
        for leaf in &leaves[..tier.groups.len()] {
            best = self.scan(tier, leaf, key, probe, best);
        }
        best
    }

    /// The first entry of `leaf` (in `tier`) matching `key` if its priority is below
    /// `best`, else `best`.
    #[inline(always)]
    fn scan(
        &self,
        tier: &Tier,
        leaf: &[Compact],
        key: &PacketKey,
        probe: &Probe,
        best: u32,
    ) -> u32 {
        if tier.five {
            self.scan_in::<true>(leaf, key, probe, best)
        } else {
            self.scan_in::<false>(leaf, key, probe, best)
        }
    }

    #[inline(always)]
    fn scan_in<const FIVE: bool>(
        &self,
        leaf: &[Compact],
        key: &PacketKey,
        probe: &Probe,
        best: u32,
    ) -> u32 {
        for c in leaf {
            let p = c.priority;
            if p >= best {
                break;
            }
            let hit = match c.verdict_in::<FIVE>(probe) {
                0 => false,
                1 => true,
                _ => self.rules[p as usize].matches(key),
            };
            if hit {
                return p;
            }
        }
        best
    }

    /// Up to [`LANES`] lookups at once (`keys.len() <= LANES`). In the large tiers, tree by
    /// tree: each level of a tree is taken for every packet before the next, with the next
    /// node, child reference or leaf prefetched, so the cache misses of different packets'
    /// walks overlap (what `rte_acl` does with its bursts); a tree is walked only for
    /// packets it could give a better match. A small tier of one tree is walked the same
    /// way (its dependent loads overlap too); a small tier of several trees is walked one
    /// packet at a time, whose early stop between trees saves more than the interleaving
    /// gains there. Packets whose match is found leave the later tiers.
    fn classify_lanes(&self, keys: &[PacketKey], out: &mut [Option<u32>]) {
        let n = keys.len().min(out.len()).min(LANES);
        let mut best = [u32::MAX; LANES];
        let mut probes = [Probe::default(); LANES];
        for (p, k) in probes.iter_mut().zip(&keys[..n]) {
            *p = Probe::of(k);
        }
        let mut open: u32 = (1u32 << n) - 1;
        for tier in &self.tiers {
            if open == 0 {
                break;
            }
            if tier.coarse() && tier.groups.len() > 1 {
                // Cache-resident trees: little to overlap, and the one-packet walk with its
                // early stop between trees is the cheaper instruction stream.
                for_lanes(open, |i| {
                    best[i] = self.first_in(tier, &keys[i], &probes[i])
                });
                for_lanes(open, |i| {
                    if best[i] != u32::MAX {
                        open &= !(1 << i);
                    }
                });
                continue;
            }
            for g in &tier.groups {
                let mut want = 0u32;
                for_lanes(open, |i| {
                    if best[i] > g.min_priority {
                        want |= 1 << i;
                    }
                });
                if want == 0 {
                    // Ascending min_priority: no later tree can do better either.
                    break;
                }
                let leaves = tier.leaves_of(g, keys, want);
                for_lanes(want, |i| {
                    let run = tier.run(leaves[i]);
                    best[i] = self.scan(tier, run, &keys[i], &probes[i], best[i]);
                });
            }
            for_lanes(open, |i| {
                if best[i] != u32::MAX {
                    open &= !(1 << i);
                }
            });
        }
        for (o, b) in out[..n].iter_mut().zip(best) {
            *o = (b != u32::MAX).then_some(b);
        }
    }
}

/// Packets one interleaved walk carries ([`CutTree::classify_batch`]).
const LANES: usize = 8;

/// Calls `f` with the index of every set bit of `mask`, lowest first.
#[inline(always)]
fn for_lanes(mut mask: u32, mut f: impl FnMut(usize)) {
    while mask != 0 {
        f(mask.trailing_zeros() as usize);
        mask &= mask - 1;
    }
}

impl Tier {
    /// The leaf reference each packet of `lanes` (a bit per index of `keys`) reaches in
    /// group `g`'s tree, walked a level at a time over all of them (from past the flat
    /// table, if any); the first line of each leaf's entries is prefetched.
    #[inline(always)]
    fn leaves_of(&self, g: &Group, keys: &[PacketKey], lanes: u32) -> [u64; LANES] {
        let mut r = [g.fast_root; LANES];
        let mut walking = 0u32;
        for_lanes(lanes, |i| {
            let c = self.start(g, &keys[i]);
            r[i] = c;
            if c & FAST_LEAF == 0 {
                walking |= 1 << i;
                prefetch_line((&self.nodes[c as usize] as *const Node).cast());
            } else if let Some(e) = self.entries.get(c as u32 as usize) {
                prefetch_line((e as *const Compact).cast());
            }
        });
        let mut slot = [0usize; LANES];
        while walking != 0 {
            for_lanes(walking, |i| {
                let node = &self.nodes[r[i] as usize];
                slot[i] = node.children as usize + node.child_of(&keys[i]);
                prefetch_line((&self.fast[slot[i]] as *const u64).cast());
            });
            for_lanes(walking, |i| {
                let c = self.fast[slot[i]];
                r[i] = c;
                if c & FAST_LEAF != 0 {
                    walking &= !(1 << i);
                    if let Some(e) = self.entries.get(c as u32 as usize) {
                        prefetch_line((e as *const Compact).cast());
                    }
                } else {
                    prefetch_line((&self.nodes[c as usize] as *const Node).cast());
                }
            });
        }
        r
    }
}

/// A copy keeps the original's spare room (a derived clone would not), so a shadow copy
/// made ahead of an update can absorb it without reallocating.
fn clone_with_room<T: Clone + Default>(v: &Vec<T>) -> Vec<T> {
    let mut out = Vec::with_capacity(v.capacity());
    out.extend_from_slice(v);
    touch_room(&mut out);
    out
}

/// Writes the spare room once, so that the pages an update grows into are already mapped:
/// the first update after a build or a shadow copy would otherwise take a page fault per
/// 4 KiB it grows into (milliseconds over a 300K-rule tree), on the update's path.
fn touch_room<T: Default>(v: &mut Vec<T>) {
    for slot in v.spare_capacity_mut() {
        slot.write(T::default());
    }
}

impl Clone for Tier {
    fn clone(&self) -> Tier {
        Tier {
            shape: self.shape,
            lo: self.lo,
            hi: self.hi,
            groups: self.groups.clone(),
            nodes: self.nodes.clone(),
            refs: self.refs.clone(),
            fast: self.fast.clone(),
            leaves: clone_with_room(&self.leaves),
            entries: clone_with_room(&self.entries),
            class_map: self.class_map,
            five: self.five,
            touched: self.touched.clone(),
            holds: self.holds.clone(),
        }
    }
}

impl Tier {
    /// The tier of priorities `lo..hi`. A small (coarse) tier is built twice — grouped,
    /// and as one tree holding every rule — and the shape that costs less on sample
    /// packets is kept: several trees cost a walk each, one tree copies its wide rules into
    /// more leaves, and which weighs more depends on the rule set (one tree wins where the
    /// top rules are broad and few, as in the five-tuple part of the synthetic set; groups
    /// win where wide rules are many). The samples are packets inside rules drawn from the
    /// whole table (seeded, so a build is deterministic), as traffic decided by the first
    /// tier comes from everywhere.
    fn chosen(rules: &[Rule], lo: u32, hi: u32) -> Tier {
        if (hi - lo) as usize > FIRST_TIER {
            return Tier::new(rules, lo, hi, DEFAULT_SHAPE);
        }
        let mut rng = crate::synth::Rng::new(0x5eed);
        let samples: Vec<PacketKey> = (0..COST_SAMPLES)
            .map(|_| {
                let r = &rules[rng.below(rules.len() as u64) as usize];
                crate::synth::packet_in(&mut rng, r)
            })
            .collect();
        SMALL_SHAPES
            .iter()
            .map(|&shape| {
                let t = Tier::new(rules, lo, hi, shape);
                (t.cost(rules, &samples), t)
            })
            .min_by_key(|(cost, _)| *cost)
            .map(|(_, t)| t)
            .unwrap_or_else(|| Tier::new(rules, lo, hi, DEFAULT_SHAPE))
    }

    /// Estimated lookup work over `samples`: a walk per tree, a step per node, a check per
    /// leaf entry (the full rule costs a few more).
    fn cost(&self, rules: &[Rule], samples: &[PacketKey]) -> u64 {
        let mut cost = 0u64;
        for k in samples {
            let probe = Probe::of(k);
            let mut best = u32::MAX;
            for g in &self.groups {
                if g.min_priority >= best {
                    break;
                }
                cost += 2;
                let mut r = g.root;
                while r & LEAF == 0 {
                    cost += 1;
                    let node = &self.nodes[r as usize];
                    r = self.refs[node.children as usize + node.child_of(k)];
                }
                let leaf = self.leaves[(r & !LEAF) as usize];
                for c in &self.entries[leaf.start as usize..(leaf.start + leaf.len) as usize] {
                    if c.priority >= best {
                        break;
                    }
                    cost += 1;
                    let hit = match c.verdict(&probe) {
                        0 => false,
                        1 => true,
                        _ => {
                            cost += 4;
                            rules[c.priority as usize].matches(k)
                        }
                    };
                    if hit {
                        best = c.priority;
                        break;
                    }
                }
            }
        }
        cost
    }

    /// The tier's trees, cut as `shape` says.
    fn new(rules: &[Rule], lo: u32, hi: u32, shape: Shape) -> Tier {
        let mut t = Tier {
            shape,
            lo,
            hi,
            groups: Vec::new(),
            nodes: Vec::new(),
            refs: Vec::new(),
            fast: Vec::new(),
            leaves: vec![Leaf {
                start: 0,
                len: 0,
                cap: 0,
            }],
            entries: Vec::new(),
            class_map: [0; 1 << GROUP_FIELDS.len()],
            five: true,
            touched: Touched::default(),
            holds: vec![Vec::new(); (hi - lo) as usize],
        };
        const ALL_WIDE: u8 = (1 << GROUP_FIELDS.len()) - 1;
        let mut counts = [0usize; 1 << GROUP_FIELDS.len()];
        for p in lo..hi {
            counts[class_of(&rules[p as usize], t.coarse()) as usize] += 1;
        }
        for (class, n) in counts.iter().enumerate() {
            // Only in the first tier, where a merged tree stays small whatever its shape.
            let small = shape.one_tree || *n * SMALL_GROUP < (hi - lo) as usize;
            t.class_map[class] = if small && (hi - lo) as usize <= FIRST_TIER {
                ALL_WIDE
            } else {
                class as u8
            };
        }
        let mut by_class: Vec<Vec<u32>> = vec![Vec::new(); 1 << GROUP_FIELDS.len()];
        for p in lo..hi {
            by_class[t.group_class(&rules[p as usize]) as usize].push(p);
        }
        for (class, set) in by_class.into_iter().enumerate() {
            if set.is_empty() {
                continue;
            }
            let min_priority = set[0];
            let budget = (shape.budget * set.len()).max(shape.min_budget);
            let root = t.build(rules, set, &full_region(), 0, budget);
            t.groups.push(Group {
                class: class as u8,
                root,
                fast_root: 0,
                flat: None,
                min_priority,
            });
        }
        t.groups.sort_by_key(|g| g.min_priority);
        t.fast = t.refs.iter().map(|&r| t.fast_ref(r)).collect();
        for i in 0..t.groups.len() {
            t.groups[i].fast_root = t.fast_ref(t.groups[i].root);
            t.groups[i].flat = t.flat_of(t.groups[i].root);
        }
        // Room for updates: a leaf that grows moves to the end of the arena, and growing the
        // arena itself would copy all of it inside the update.
        t.entries.reserve(t.entries.len() / 8 + 1024);
        t.leaves.reserve(t.leaves.len() / 8 + 64);
        touch_room(&mut t.entries);
        touch_room(&mut t.leaves);
        t
    }

    /// The [`Flat`] table of the tree rooted at `root`, if its first two levels allow one.
    fn flat_of(&self, root: u32) -> Option<Flat> {
        if root & LEAF != 0 {
            return None;
        }
        let top = self.nodes[root as usize];
        let fanout = top.absent() + 1;
        let kids = &self.refs[top.children as usize..top.children as usize + fanout];
        let same = |a: &Node, b: &Node| {
            (a.field, a.bits, a.shift, a.prefix, a.whole)
                == (b.field, b.bits, b.shift, b.prefix, b.whole)
        };
        let mut inner: Option<Node> = None;
        for &c in kids.iter().filter(|&&c| c & LEAF == 0) {
            let n = self.nodes[c as usize];
            match &inner {
                None => inner = Some(n),
                Some(s) if same(s, &n) => {}
                Some(_) => return None,
            }
        }
        let inner = inner?;
        let width = inner.absent() + 1;
        if fanout * width > FLAT_CELLS {
            return None;
        }
        let mut slots = Vec::with_capacity(fanout * width);
        for (i, &c) in kids.iter().enumerate() {
            if c & LEAF != 0 {
                slots.extend(std::iter::repeat_n(top.children + i as u32, width));
            } else {
                let first = self.nodes[c as usize].children;
                slots.extend((0..width as u32).map(|j| first + j));
            }
        }
        let cells = slots.iter().map(|&s| self.fast[s as usize]).collect();
        Some(Flat {
            root: Cut::of(top),
            inner: Cut::of(inner),
            width,
            slots,
            cells,
        })
    }

    /// Copies `fast` into the [`Flat`] tables' cells after updates.
    fn refresh_flat(&mut self) {
        let fast = &self.fast;
        for g in &mut self.groups {
            if let Some(f) = &mut g.flat {
                for (c, &s) in f.cells.iter_mut().zip(&f.slots) {
                    *c = fast[s as usize];
                }
            }
        }
    }

    /// The leaf group `g`'s tree sends `k` to, through its [`Flat`] table when it has one.
    #[inline(always)]
    fn leaf_in(&self, g: &Group, k: &PacketKey) -> &[Compact] {
        self.leaf_of(self.start(g, k), k)
    }

    /// Where a walk of group `g`'s tree for `k` goes on from: past the flat table's two
    /// levels, or the root.
    #[inline(always)]
    fn start(&self, g: &Group, k: &PacketKey) -> u64 {
        match &g.flat {
            Some(f) => f.cells[f.root.child_of(k) * f.width + f.inner.child_of(k)],
            None => g.fast_root,
        }
    }

    /// Reference `r` as [`Tier::fast`] holds it.
    fn fast_ref(&self, r: u32) -> u64 {
        if r & LEAF == 0 {
            return r as u64;
        }
        let l = self.leaves[(r & !LEAF) as usize];
        FAST_LEAF | l.start as u64 | (l.len as u64) << 32
    }

    fn new_leaf(&mut self, rules: &[Rule], set: &[u32]) -> u32 {
        if set.is_empty() {
            return EMPTY;
        }
        let start = self.entries.len() as u32;
        self.entries
            .extend(set.iter().map(|&p| Compact::of(&rules[p as usize], p)));
        self.five &= self.entries[start as usize..]
            .iter()
            .all(Compact::others_open);
        let id = self.leaves.len() as u32;
        for &p in set {
            self.holds[(p - self.lo) as usize].push(id);
        }
        self.leaves.push(Leaf {
            start,
            len: set.len() as u32,
            cap: set.len() as u32,
        });
        (self.leaves.len() as u32 - 1) | LEAF
    }
    fn choose_cut(
        &self,
        rules: &[Rule],
        set: &[u32],
        region: &Region,
        budget: usize,
    ) -> Option<Node> {
        let n = set.len();
        let mut best: Option<(usize, usize, Node)> = None;
        let mut lo_idx = vec![0usize; n];
        let mut hi_idx = vec![0usize; n];
        for f in CUT_FIELDS {
            let dim = &region[f.index()];
            if !dim.present {
                continue;
            }
            // Common prefix of the rules that do not cover the whole region in this field.
            let (mut min_lo, mut max_hi) = (u128::MAX, 0u128);
            let mut narrow = false;
            for &p in set {
                let (rlo, rhi) = rules[p as usize].range(f);
                let (lo, hi) = (rlo.max(dim.lo), rhi.min(dim.hi));
                if lo > hi || (lo == dim.lo && hi == dim.hi) {
                    continue;
                }
                narrow = true;
                min_lo = min_lo.min(lo);
                max_hi = max_hi.max(hi);
            }
            if !narrow {
                continue;
            }
            let common = (min_lo ^ max_hi).leading_zeros();
            let max_bits = MAX_BITS.min(128 - common);
            let top_bits = |bits: u32| 128 - common - bits;
            // Child spans at the widest cut; narrower cuts take the spans' top bits.
            let widest = Node {
                prefix: if common == 0 {
                    0
                } else {
                    min_lo >> (128 - common)
                },
                children: 0,
                field: f.index() as u8,
                bits: max_bits as u8,
                shift: top_bits(max_bits) as u8,
                whole: common == 0,
            };
            let (mut outside, mut absent) = (0usize, 0usize);
            for (i, &p) in set.iter().enumerate() {
                let s = span(&widest, dim, &rules[p as usize]);
                outside += s.outside as usize;
                absent += s.absent as usize;
                (lo_idx[i], hi_idx[i]) = s.inside.unwrap_or((usize::MAX, 0));
            }
            let mut counts = vec![0i64; (1 << max_bits) + 1];
            let mut chosen: Option<(usize, usize, u32)> = None;
            // A cut of the whole range into one child would be no cut at all.
            for bits in (common == 0) as u32..=max_bits {
                let children = 1usize << bits;
                counts[..=children].iter_mut().for_each(|c| *c = 0);
                let drop = max_bits - bits;
                for i in 0..n {
                    if lo_idx[i] == usize::MAX {
                        continue;
                    }
                    counts[lo_idx[i] >> drop] += 1;
                    counts[(hi_idx[i] >> drop) + 1] -= 1;
                }
                let (mut total, mut most, mut run) = (0usize, outside.max(absent), 0i64);
                for c in &counts[..children] {
                    run += c;
                    total += run as usize;
                    most = most.max(run as usize);
                }
                total += outside + absent;
                if bits > 0 && total + children > (self.shape.space * n).min(budget) {
                    break;
                }
                chosen = Some((most, total, bits));
            }
            let Some((most, total, bits)) = chosen else {
                continue;
            };
            if most >= n {
                continue;
            }
            let better = match &best {
                None => true,
                Some((bm, bt, _)) => (most, total) < (*bm, *bt),
            };
            if better {
                let top = top_bits(bits);
                best = Some((
                    most,
                    total,
                    Node {
                        prefix: if common == 0 {
                            0
                        } else {
                            min_lo >> (128 - common)
                        },
                        children: 0,
                        field: f.index() as u8,
                        bits: bits as u8,
                        shift: top as u8,
                        whole: common == 0,
                    },
                ));
            }
        }
        best.map(|(_, _, node)| node)
    }

    fn build(
        &mut self,
        rules: &[Rule],
        set: Vec<u32>,
        region: &Region,
        depth: u32,
        budget: usize,
    ) -> u32 {
        if set.len() <= self.shape.leaf_rules || depth >= MAX_DEPTH {
            return self.new_leaf(rules, &set);
        }
        let Some(mut node) = self.choose_cut(rules, &set, region, budget) else {
            return self.new_leaf(rules, &set);
        };
        let fanout = (1usize << node.bits) + 2;
        let mut parts: Vec<Vec<u32>> = vec![Vec::new(); fanout];
        let dim = &region[node.field as usize];
        for &p in &set {
            let s = span(&node, dim, &rules[p as usize]);
            if let Some((a, b)) = s.inside {
                for part in &mut parts[a..=b] {
                    part.push(p);
                }
            }
            if s.outside {
                parts[node.outside()].push(p);
            }
            if s.absent {
                parts[node.absent()].push(p);
            }
        }
        drop(set);
        let total: usize = parts.iter().map(Vec::len).sum();
        node.children = self.refs.len() as u32;
        self.refs.resize(self.refs.len() + fanout, EMPTY);
        let id = self.nodes.len() as u32;
        self.nodes.push(node);
        for (idx, part) in parts.into_iter().enumerate() {
            if part.is_empty() {
                continue;
            }
            let sub = child_region(&node, region, idx);
            let share = budget * part.len() / total.max(1);
            let r = self.build(rules, part, &sub, depth + 1, share);
            self.refs[node.children as usize + idx] = r;
        }
        id
    }

    fn walk_stats(&self, r: u32, depth: u32, s: &mut TreeStats) {
        if r & LEAF != 0 {
            let leaf = self.leaves[(r & !LEAF) as usize];
            if leaf.len > 0 {
                s.leaves += 1;
                s.entries += leaf.len as usize;
                s.max_leaf = s.max_leaf.max(leaf.len as usize);
                s.max_depth = s.max_depth.max(depth);
            }
            return;
        }
        let node = self.nodes[r as usize];
        for idx in 0..(1usize << node.bits) + 2 {
            let c = self.refs[node.children as usize + idx];
            if c != EMPTY {
                self.walk_stats(c, depth + 1, s);
            }
        }
    }

    #[inline(always)]
    fn leaf_of(&self, mut r: u64, k: &PacketKey) -> &[Compact] {
        while r & FAST_LEAF == 0 {
            let node = &self.nodes[r as usize];
            r = self.fast[node.children as usize + node.child_of(k)];
        }
        self.run(r)
    }

    /// The entries of the leaf a [`Tier::fast`] reference names.
    #[inline(always)]
    fn run(&self, r: u64) -> &[Compact] {
        let start = r as u32 as usize;
        let len = (r >> 32) as u32 as usize & 0x7fff_ffff;
        &self.entries[start..start + len]
    }

    /// The first tier is small whatever its shape: there fewer trees beat less replication.
    fn coarse(&self) -> bool {
        (self.hi - self.lo) as usize <= FIRST_TIER
    }

    fn group_class(&self, r: &Rule) -> u8 {
        self.class_map[class_of(r, self.coarse()) as usize]
    }

    /// Moves priority `p` from the leaves holding it ([`Tier::holds`]) to those `new`
    /// reaches.
    ///
    /// The new version goes in first: in a leaf both versions reach, that overwrites the
    /// old entry in place, and the old version's removal then skips those leaves — so a
    /// change that keeps a rule in the same leaves (a new VA range, another opcode group)
    /// writes one entry per leaf. The removal walks no tree: the leaves are known.
    fn replace(&mut self, new: &Rule, p: u32) {
        let class = self.group_class(new);
        let g = match self.groups.iter().position(|g| g.class == class) {
            Some(g) => g,
            None => {
                self.groups.push(Group {
                    class,
                    root: EMPTY,
                    fast_root: FAST_LEAF,
                    flat: None,
                    min_priority: p,
                });
                self.groups.len() - 1
            }
        };
        self.groups[g].min_priority = self.groups[g].min_priority.min(p);
        let root = self.groups[g].root;
        let at = (p - self.lo) as usize;
        let old_leaves = std::mem::take(&mut self.holds[at]);
        let root = self.insert(root, &mut full_region(), new, &Compact::of(new, p));
        self.groups[g].root = root;
        self.groups[g].fast_root = self.fast_ref(root);
        // The old version leaves the leaves the new one did not enter: a tombstone each
        // (lengths and starts unchanged, so no reference or flat cell changes).
        let mut held = std::mem::take(&mut self.holds[at]);
        held.sort_unstable();
        held.dedup();
        for leaf in old_leaves {
            if held.binary_search(&leaf).is_err() {
                self.leaf_remove(leaf as usize, p);
            }
        }
        self.holds[at] = held;
        self.groups.sort_by_key(|g| g.min_priority);
    }

    /// Children of node `id` a rule reaches (their regions come from [`child_region`]).
    fn reached(&self, id: u32, region: &Region, r: &Rule) -> impl Iterator<Item = usize> {
        let node = self.nodes[id as usize];
        let s = span(&node, &region[node.field as usize], r);
        let (a, b) = s.inside.map_or((1, 0), |(a, b)| (a, b));
        (a..=b)
            .chain(s.outside.then_some(node.outside()))
            .chain(s.absent.then_some(node.absent()))
    }

    /// Inserts `entry` (the compact copy of `rule`) under reference `r`; returns the
    /// (possibly new) reference. `region` is the region `r` covers; the walk narrows the
    /// node's field in place for each child and restores it, rather than copying the
    /// region per child (a broad rule reaches hundreds of children).
    fn insert(&mut self, r: u32, region: &mut Region, rule: &Rule, entry: &Compact) -> u32 {
        if r & LEAF != 0 {
            let id = if r == EMPTY {
                self.leaves.push(Leaf {
                    start: self.entries.len() as u32,
                    len: 0,
                    cap: 0,
                });
                self.leaves.len() - 1
            } else {
                (r & !LEAF) as usize
            };
            self.leaf_insert(id, *entry);
            return id as u32 | LEAF;
        }
        let node = self.nodes[r as usize];
        let f = node.field as usize;
        let dim = region[f];
        for idx in self.reached(r, region, rule) {
            region[f] = child_dim(&node, &dim, idx);
            let at = node.children as usize + idx;
            let c = self.insert(self.refs[at], region, rule, entry);
            if self.refs[at] != c {
                self.touched.refs.push(at as u32);
            }
            self.refs[at] = c;
            self.fast[at] = self.fast_ref(c);
        }
        region[f] = dim;
        r
    }

    /// Takes priority `p`'s entry out of leaf `id`: a tombstone where it stood, so the rest
    /// of the leaf stays put.
    fn leaf_remove(&mut self, id: usize, p: u32) {
        let leaf = self.leaves[id];
        let (start, len) = (leaf.start as usize, leaf.len as usize);
        let list = &mut self.entries[start..start + len];
        if let Ok(i) = list.binary_search_by_key(&p, |c| c.priority) {
            if !list[i].is_dead() {
                list[i] = Compact::dead(p);
                let at = (start + i) as u32;
                self.touched.entries.push(at..at + 1);
            }
        }
    }

    /// Puts `entry` into leaf `id` at its priority's place: over the rule's previous version
    /// or its tombstone, or a tombstone next to the place; else the entries up to the
    /// nearest tombstone move by one (when that moves fewer than growing the leaf would);
    /// else the leaf grows (moving to the end of the arena, without its tombstones, when it
    /// is full).
    fn leaf_insert(&mut self, id: usize, entry: Compact) {
        self.five &= entry.others_open();
        let p = entry.priority;
        self.holds[(p - self.lo) as usize].push(id as u32);
        let mut leaf = self.leaves[id];
        let (start, len) = (leaf.start as usize, leaf.len as usize);
        let list = &mut self.entries[start..start + len];
        let i = list.partition_point(|c| c.priority < p);
        let here = if i < len && (list[i].priority == p || list[i].is_dead()) {
            Some(i)
        } else if i > 0 && list[i - 1].is_dead() {
            Some(i - 1)
        } else {
            None
        };
        if let Some(k) = here {
            list[k] = entry;
            let at = (start + k) as u32;
            self.touched.entries.push(at..at + 1);
            return;
        }
        // The entries up to the nearest tombstone (after or before the place) move by one,
        // unless the tail after the place is shorter.
        let right = list[i..].iter().position(Compact::is_dead).map(|d| i + d);
        let left = list[..i].iter().rposition(Compact::is_dead);
        let tail = len - i;
        let cost_right = right.map_or(usize::MAX, |j| j - i);
        let cost_left = left.map_or(usize::MAX, |j| i - 1 - j);
        if let Some(j) = right.filter(|_| cost_right <= tail && cost_right <= cost_left) {
            list.copy_within(i..j, i + 1);
            list[i] = entry;
            let at = (start + i) as u32;
            self.touched.entries.push(at..at + (j - i) as u32 + 1);
            return;
        }
        if let Some(j) = left.filter(|_| cost_left <= tail) {
            list.copy_within(j + 1..i, j);
            list[i - 1] = entry;
            let at = (start + j) as u32;
            self.touched.entries.push(at..at + (i - j) as u32);
            return;
        }
        let mut i = i;
        let mut from = start + i;
        if leaf.len == leaf.cap {
            // Move to the end of the arena with room to grow, dropping the tombstones (the
            // old place stays unused until the next full build).
            let at = self.entries.len();
            for k in start..start + len {
                let c = self.entries[k];
                if !c.is_dead() {
                    self.entries.push(c);
                }
            }
            let kept = self.entries.len() - at;
            let cap = ((kept as u32 + 1) * 2).max(4);
            self.entries.resize(at + cap as usize, Compact::default());
            i = self.entries[at..at + kept].partition_point(|c| c.priority < p);
            leaf.start = at as u32;
            leaf.len = kept as u32;
            leaf.cap = cap;
            from = at;
        }
        let (start, len) = (leaf.start as usize, leaf.len as usize);
        let list = &mut self.entries[start..start + len + 1];
        list.copy_within(i..len, i + 1);
        list[i] = entry;
        leaf.len += 1;
        self.leaves[id] = leaf;
        self.touched
            .entries
            .push(from as u32..(start + len + 1) as u32);
        self.touched.leaves.push(id as u32);
    }
}

/// Work one cut-tree lookup did (for benchmarks and tuning).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeWork {
    /// Priority tiers searched.
    pub tiers: u32,
    /// Trees walked to a leaf.
    pub trees: u32,
    /// Interior nodes visited.
    pub nodes: u32,
    /// Leaf entries whose compact copy was checked.
    pub entries: u32,
    /// Full rule checks.
    pub full_checks: u32,
}

impl CutTree {
    /// [`Classifier::classify`], also reporting the work done.
    pub fn classify_counting(&self, key: &PacketKey) -> (Option<u32>, TreeWork) {
        let probe = Probe::of(key);
        let mut w = TreeWork::default();
        for tier in &self.tiers {
            w.tiers += 1;
            let mut best = u32::MAX;
            for g in &tier.groups {
                if tier.coarse() && g.min_priority >= best {
                    break;
                }
                w.trees += 1;
                let mut r = g.root;
                while r & LEAF == 0 {
                    w.nodes += 1;
                    let node = &tier.nodes[r as usize];
                    r = tier.refs[node.children as usize + node.child_of(key)];
                }
                let leaf = tier.leaves[(r & !LEAF) as usize];
                for c in &tier.entries[leaf.start as usize..(leaf.start + leaf.len) as usize] {
                    let p = c.priority;
                    if p >= best {
                        break;
                    }
                    w.entries += 1;
                    let hit = match c.verdict(&probe) {
                        0 => false,
                        1 => true,
                        _ => {
                            w.full_checks += 1;
                            self.rules[p as usize].matches(key)
                        }
                    };
                    if hit {
                        best = p;
                        break;
                    }
                }
            }
            if best != u32::MAX {
                return (Some(best), w);
            }
        }
        (None, w)
    }
}

impl Classifier for CutTree {
    #[inline]
    fn classify(&self, key: &PacketKey) -> Option<u32> {
        let probe = Probe::of(key);
        for tier in &self.tiers {
            let best = self.first_in(tier, key, &probe);
            if best != u32::MAX {
                return Some(best);
            }
        }
        None
    }

    /// Eight packets (`LANES`) at a time, their tree walks interleaved.
    fn classify_batch(&self, keys: &[PacketKey], out: &mut [Option<u32>]) {
        for (keys, out) in keys.chunks(LANES).zip(out.chunks_mut(LANES)) {
            self.classify_lanes(keys, out);
        }
    }

    fn generation(&self) -> u64 {
        self.generation
    }
}

/// A child reference naming a leaf has this bit set ([`TierView::refs`], group roots).
pub const LEAF_REF: u32 = LEAF;
/// The shared empty leaf's reference.
pub const EMPTY_REF: u32 = EMPTY;
/// [`EntryView::flags`]: the sip range lies in the IPv4-mapped space (its low 32 bits).
pub const ENTRY_SIP_V4: u16 = SIP_V4;
/// [`EntryView::flags`]: the sip range is everything.
pub const ENTRY_SIP_ANY: u16 = SIP_ANY;
/// [`EntryView::flags`]: as [`ENTRY_SIP_V4`] for dip.
pub const ENTRY_DIP_V4: u16 = DIP_V4;
/// [`EntryView::flags`]: as [`ENTRY_SIP_ANY`] for dip.
pub const ENTRY_DIP_ANY: u16 = DIP_ANY;
/// [`EntryView::flags`]: the full rule must decide a packet the compact copy matches.
pub const ENTRY_INEXACT: u16 = INEXACT;

/// One interior node, decoded (for serialisers such as `classify::image`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeView {
    /// The value's bits above the cut, for the inside children.
    pub prefix: u128,
    /// First child reference in [`TierView::refs`]: `2^bits` inside, outside, absent.
    pub children: u32,
    /// [`Field`] index cut.
    pub field: u8,
    /// Bits cut.
    pub bits: u8,
    /// Bits below the cut.
    pub shift: u8,
    /// Every value has the prefix.
    pub whole: bool,
}

/// One compact leaf entry, decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryView {
    /// Lowest RDMA virtual address matched (inclusive).
    pub va_lo: u64,
    /// Highest RDMA virtual address matched (inclusive).
    pub va_hi: u64,
    /// Opcodes 0..=63.
    pub opcodes: u64,
    /// Lowest source IPv4 address matched, inclusive (its low 32 bits when `flags` has
    /// `ENTRY_SIP_V4`).
    pub sip_lo: u32,
    /// Highest source IPv4 address matched, inclusive.
    pub sip_hi: u32,
    /// Lowest destination IPv4 address matched, inclusive (when `flags` has `ENTRY_DIP_V4`).
    pub dip_lo: u32,
    /// Highest destination IPv4 address matched, inclusive.
    pub dip_hi: u32,
    /// Lowest destination QP number matched (inclusive).
    pub dqpn_lo: u32,
    /// Highest destination QP number matched (inclusive).
    pub dqpn_hi: u32,
    /// Lowest UDP source port matched (inclusive).
    pub sport_lo: u16,
    /// Highest UDP source port matched (inclusive).
    pub sport_hi: u16,
    /// Lowest UDP destination port matched (inclusive).
    pub dport_lo: u16,
    /// Highest UDP destination port matched (inclusive).
    pub dport_hi: u16,
    /// Bit per [`Field`] index: set when a packet without that field still matches.
    pub absent_ok: u16,
    /// `ENTRY_*` flags.
    pub flags: u16,
    /// The rule's priority (its position in the table; lower wins).
    pub priority: u32,
}

/// Read-only access to one priority tier's arrays.
#[derive(Clone, Copy)]
pub struct TierView<'a> {
    tier: &'a Tier,
}

impl<'a> TierView<'a> {
    /// Priorities `lo..hi` live in this tier.
    pub fn priorities(&self) -> (u32, u32) {
        (self.tier.lo, self.tier.hi)
    }

    /// The trees: (root reference, smallest priority), ascending by the latter.
    pub fn groups(&self) -> impl Iterator<Item = (u32, u32)> + 'a {
        self.tier.groups.iter().map(|g| (g.root, g.min_priority))
    }

    /// Interior nodes.
    pub fn node_count(&self) -> usize {
        self.tier.nodes.len()
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> NodeView {
        let n = &self.tier.nodes[i];
        NodeView {
            prefix: n.prefix,
            children: n.children,
            field: n.field,
            bits: n.bits,
            shift: n.shift,
            whole: n.whole,
        }
    }

    /// Child references ([`LEAF_REF`] set: a leaf index; otherwise a node index).
    pub fn refs(&self) -> &'a [u32] {
        &self.tier.refs
    }

    /// Leaves (index 0 is the shared empty leaf).
    pub fn leaf_count(&self) -> usize {
        self.tier.leaves.len()
    }

    /// Leaf `i`: its first entry and its length.
    pub fn leaf(&self, i: usize) -> (u32, u32) {
        let l = self.tier.leaves[i];
        (l.start, l.len)
    }

    /// Entries in the arena (leaves name runs of them).
    pub fn entry_count(&self) -> usize {
        self.tier.entries.len()
    }

    /// What the last [`CutTree::replace_rules`] wrote in this tier.
    pub fn touched(&self) -> &'a Touched {
        &self.tier.touched
    }

    /// Entry `i`.
    pub fn entry(&self, i: usize) -> EntryView {
        let c = &self.tier.entries[i];
        EntryView {
            va_lo: c.va_lo,
            va_hi: c.va_hi,
            opcodes: c.opcodes,
            sip_lo: c.sip_lo,
            sip_hi: c.sip_hi,
            dip_lo: c.dip_lo,
            dip_hi: c.dip_hi,
            dqpn_lo: c.dqpn_lo,
            dqpn_hi: c.dqpn_hi,
            sport_lo: c.sport_lo,
            sport_hi: c.sport_hi,
            dport_lo: c.dport_lo,
            dport_hi: c.dport_hi,
            absent_ok: c.absent_ok,
            flags: c.flags,
            priority: c.priority,
        }
    }
}

/// Where a rule lives in the trees: what an in-place update of its priority touches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    /// The tier of the rule's priority.
    pub tier: usize,
    /// Child-reference slots (indexes into [`TierView::refs`]) on its paths.
    pub refs: Vec<u32>,
    /// Non-empty leaves it reaches.
    pub leaves: Vec<u32>,
}

impl CutTree {
    /// Priority tiers.
    pub fn tier_count(&self) -> usize {
        self.tiers.len()
    }

    /// Tier `t`'s arrays.
    pub fn tier_view(&self, t: usize) -> TierView<'_> {
        TierView {
            tier: &self.tiers[t],
        }
    }

    /// The reference slots and leaves `rule` reaches in the tree of its group, in the tier of
    /// `rule.priority` (`None` when no tier holds that priority or no tree its group).
    pub fn reach(&self, rule: &Rule) -> Option<Reach> {
        let p = rule.priority;
        let t = self.tiers.iter().position(|t| t.lo <= p && p < t.hi)?;
        let tier = &self.tiers[t];
        let class = tier.group_class(rule);
        let g = tier.groups.iter().find(|g| g.class == class)?;
        let mut out = Reach {
            tier: t,
            ..Reach::default()
        };
        tier.reach_from(g.root, &mut full_region(), rule, &mut out);
        Some(out)
    }
}

impl Tier {
    fn reach_from(&self, r: u32, region: &mut Region, rule: &Rule, out: &mut Reach) {
        if r & LEAF != 0 {
            if r != EMPTY {
                out.leaves.push(r & !LEAF);
            }
            return;
        }
        let node = self.nodes[r as usize];
        let f = node.field as usize;
        let dim = region[f];
        for idx in self.reached(r, region, rule) {
            let slot = node.children + idx as u32;
            out.refs.push(slot);
            region[f] = child_dim(&node, &dim, idx);
            self.reach_from(self.refs[slot as usize], region, rule, out);
        }
        region[f] = dim;
    }
}
