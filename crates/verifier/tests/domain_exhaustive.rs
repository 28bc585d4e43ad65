//! Exhaustive soundness checks of the scalar domain (`tnum.rs`, `scalar.rs`) on 8-bit words,
//! the method of Agni (CAV 2023) for the kernel's range analysis: the verifier's own generic
//! code, instantiated on `u8` instead of `u64`, is run on every abstract value of a family
//! and checked against eBPF's concrete semantics (`domain_reference`) on *every* member of
//! it. At 8 bits, eBPF's 32-bit operations act on the low 4 bits, `movsx 8/16/32` extends
//! the low 1/2/4 bits and byte swaps reverse 1-bit "bytes".
//!
//! - tnum operations: every pair of the 6,561 well-formed tnums;
//! - scalar views (subregister, sign extension, byte swaps, negation, `mov`/`movsx`): every
//!   abstract value of the canonical family (every constant, unsigned range, signed range and
//!   tnum) and every distinct result of ALU operations and refinements on a pair family;
//! - scalar ALU operations, branch refinements and the lattice operations (join, meet,
//!   widen, subsumption): every pair of the pair family (extremes, ranges between edge values,
//!   tnums and their meets with ranges), 64- and 32-bit forms, taken and not taken;
//! - the same on values that are well formed but not reduced;
//! - exactness on constants (a domain answering "unknown" everywhere would be sound).
//!
//! Every result must also be well formed (`value & mask == 0`, ordered bounds), and no
//! operation may panic (tests build with overflow checks). A larger sweep is
//! `cargo test -p rdx-verifier --test domain_exhaustive -- --ignored` (a few minutes).

mod domain_reference;

use domain_reference as reference;
use rdx_bpf::isa::{AluOp, JmpCond};
use rdx_verifier::scalar::ScalarOf;
use rdx_verifier::tnum::TnumOf;
use std::collections::HashSet;

type S8 = ScalarOf<u8>;
type T8 = TnumOf<u8>;
const W: u32 = 8;
/// Failures printed per check (all of them are counted).
const REPORT: usize = 12;

/// A set of 8-bit values.
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug)]
struct Set([u64; 4]);

impl Set {
    fn insert(&mut self, v: u8) {
        self.0[(v >> 6) as usize] |= 1 << (v & 63);
    }
    fn has(&self, v: u8) -> bool {
        self.0[(v >> 6) as usize] >> (v & 63) & 1 == 1
    }
    fn union(&mut self, o: &Set) {
        for i in 0..4 {
            self.0[i] |= o.0[i];
        }
    }
    fn and(&self, o: &Set) -> Set {
        Set([
            self.0[0] & o.0[0],
            self.0[1] & o.0[1],
            self.0[2] & o.0[2],
            self.0[3] & o.0[3],
        ])
    }
    fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }
    /// A member of `self` missing from `o`.
    fn outside(&self, o: &Set) -> Option<u8> {
        if self.is_subset(o) {
            return None;
        }
        (0..=255u8).find(|&v| self.has(v) && !o.has(v))
    }
    fn is_subset(&self, o: &Set) -> bool {
        (0..4).all(|i| self.0[i] & !o.0[i] == 0)
    }
    /// `[lo, hi]` (empty when `lo > hi`).
    fn range(lo: u8, hi: u8) -> Set {
        let mut s = Set::default();
        if lo > hi {
            return s;
        }
        for (i, word) in s.0.iter_mut().enumerate() {
            let (base, top) = (64 * i as u32, 64 * i as u32 + 63);
            let (l, h) = (lo as u32, hi as u32);
            if h < base || l > top {
                continue;
            }
            let from = l.max(base) - base;
            let to = h.min(top) - base;
            *word = (u64::MAX >> (63 - to)) & (u64::MAX << from);
        }
        s
    }
    fn members(&self) -> Vec<u8> {
        (0..=255u8).filter(|&v| self.has(v)).collect()
    }
}

/// γ of every well-formed tnum, by the definition: the values agreeing with `value` on the
/// known bits.
struct Gammas {
    tnum: Vec<Set>,
}

impl Gammas {
    fn new() -> Gammas {
        let mut tnum = vec![Set::default(); 1 << 16];
        for v in 0..=255u8 {
            for mask in 0..=255u8 {
                tnum[(((v & !mask) as usize) << 8) | mask as usize].insert(v);
            }
        }
        Gammas { tnum }
    }

    fn of_tnum(&self, t: T8) -> Set {
        assert_eq!(t.value & t.mask, 0, "malformed tnum {t}");
        self.tnum[((t.value as usize) << 8) | t.mask as usize]
    }

    /// γ of a scalar by the definition of the reduced product: in the tnum, in the unsigned
    /// range and in the signed range.
    fn of(&self, s: &S8) -> Set {
        let unsigned = Set::range(s.umin, s.umax);
        let signed = if s.smin > s.smax {
            Set::default()
        } else if s.smin >= 0 || s.smax < 0 {
            Set::range(s.smin as u8, s.smax as u8)
        } else {
            let mut r = Set::range(0, s.smax as u8);
            r.union(&Set::range(s.smin as u8, 255));
            r
        };
        self.of_tnum(s.bits).and(&unsigned).and(&signed)
    }
}

fn well_formed(s: &S8) -> bool {
    s.bits.value & s.bits.mask == 0 && s.umin <= s.umax && s.smin <= s.smax
}

fn all_tnums() -> Vec<T8> {
    let mut v = Vec::with_capacity(6561);
    for mask in 0..=255u8 {
        for value in 0..=255u8 {
            if value & mask == 0 {
                v.push(T8 { value, mask });
            }
        }
    }
    v
}

fn dedup(v: Vec<S8>) -> Vec<S8> {
    let mut seen = HashSet::new();
    v.into_iter().filter(|s| seen.insert(*s)).collect()
}

/// Every constant, unsigned range, signed range and tnum.
fn canonical_family() -> Vec<S8> {
    let mut v = Vec::new();
    for lo in 0..=255u8 {
        v.push(S8::constant(lo));
        for hi in lo..=255u8 {
            v.push(S8::urange(lo, hi));
        }
    }
    for lo in i8::MIN..=i8::MAX {
        for hi in lo..=i8::MAX {
            v.push(S8::srange(lo, hi));
        }
    }
    v.extend(all_tnums().into_iter().map(S8::from_bits));
    dedup(v)
}

/// Edge values of the unsigned and signed orders at 8 bits (0, 1, the sign boundary, the
/// 4-bit "32-bit" boundary, powers of two and their neighbours).
const UNSIGNED_EDGES: [u8; 22] = [
    0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 63, 64, 100, 126, 127, 128, 129, 191, 240, 254, 255,
];
const SIGNED_EDGES: [i8; 17] = [
    -128, -127, -100, -64, -17, -16, -9, -8, -2, -1, 0, 1, 7, 8, 64, 126, 127,
];
const MASKS: [u8; 16] = [
    0x01, 0x03, 0x07, 0x0f, 0x3f, 0x7f, 0xff, 0x80, 0xf0, 0x81, 0x55, 0xaa, 0x0c, 0x3c, 0x88, 0xfe,
];
const BASES: [u8; 6] = [0x00, 0xff, 0x5a, 0x80, 0x21, 0x7f];

/// Abstract values for the pair checks: every constant, ranges between edge values, tnums,
/// and meets of ranges with tnums.
fn pair_family(scale: usize) -> Vec<S8> {
    let mut v: Vec<S8> = (0..=255u8).map(S8::constant).collect();
    let ue: Vec<u8> = UNSIGNED_EDGES.iter().copied().step_by(scale).collect();
    let se: Vec<i8> = SIGNED_EDGES.iter().copied().step_by(scale).collect();
    for (i, &lo) in ue.iter().enumerate() {
        for &hi in &ue[i..] {
            v.push(S8::urange(lo, hi));
        }
    }
    for (i, &lo) in se.iter().enumerate() {
        for &hi in &se[i..] {
            v.push(S8::srange(lo, hi));
        }
    }
    let mut tnums = Vec::new();
    for &mask in &MASKS {
        for &base in &BASES {
            tnums.push(S8::from_bits(T8 {
                value: base & !mask,
                mask,
            }));
        }
    }
    let tnums = dedup(tnums);
    v.extend(&tnums);
    let ranges: Vec<S8> = [(0, 15), (8, 200), (100, 255), (120, 136)]
        .into_iter()
        .map(|(l, h)| S8::urange(l, h))
        .chain([(-20, 20), (-128, -1), (-64, 63)].map(|(l, h)| S8::srange(l, h)))
        .collect();
    for r in &ranges {
        for t in tnums.iter().step_by(scale) {
            if let Some(m) = r.meet(t) {
                v.push(m);
            }
        }
    }
    dedup(v)
}

/// An abstract value with its members, precomputed.
struct Abstract {
    value: S8,
    gamma: Set,
    /// γ as maximal runs of consecutive values.
    runs: Vec<(u8, u8)>,
}

fn prepare(family: &[S8], g: &Gammas) -> Vec<Abstract> {
    eprintln!("{} abstract values", family.len());
    family
        .iter()
        .filter(|value| !g.of(value).is_empty())
        .map(|&value| {
            let gamma = g.of(&value);
            let mut runs: Vec<(u8, u8)> = Vec::new();
            for m in gamma.members() {
                match runs.last_mut() {
                    Some((_, hi)) if *hi as u16 + 1 == m as u16 => *hi = m,
                    _ => runs.push((m, m)),
                }
            }
            Abstract { value, gamma, runs }
        })
        .collect()
}

/// Unions of per-value sets over runs of values in O(1) (a sparse table of window unions).
struct RangeUnion {
    levels: Vec<[Set; 256]>,
}

impl RangeUnion {
    fn new(per_value: &[Set; 256]) -> RangeUnion {
        let mut levels = vec![*per_value];
        let mut width = 1;
        while width * 2 <= 256 {
            let prev = levels.last().unwrap();
            let mut next = [Set::default(); 256];
            for i in 0..=256 - width * 2 {
                next[i] = prev[i];
                next[i].union(&prev[i + width]);
            }
            levels.push(next);
            width *= 2;
        }
        RangeUnion { levels }
    }

    fn union(&self, lo: u8, hi: u8) -> Set {
        let len = hi as usize - lo as usize + 1;
        let level = (usize::BITS - 1 - len.leading_zeros()) as usize;
        let mut s = self.levels[level][lo as usize];
        s.union(&self.levels[level][hi as usize + 1 - (1 << level)]);
        s
    }

    fn over(&self, a: &Abstract) -> Set {
        let mut s = Set::default();
        for &(lo, hi) in &a.runs {
            s.union(&self.union(lo, hi));
        }
        s
    }
}

fn report(failures: Vec<String>, what: &str) {
    assert!(
        failures.is_empty(),
        "{what}: {} unsound results, first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(REPORT)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A non-empty set of values summarised by the bits set in all of them and in any of them.
#[derive(Clone, Copy)]
struct Image {
    all: u8,
    any: u8,
}

impl Image {
    const EMPTY: Image = Image { all: 0xff, any: 0 };
    fn add(&mut self, v: u8) {
        self.all &= v;
        self.any |= v;
    }
    fn merge(&mut self, o: &Image) {
        self.all &= o.all;
        self.any |= o.any;
    }
    /// Every member is in γ(t): its known-1 bits are in all members, its known-0 bits in none.
    fn within(&self, t: T8) -> bool {
        t.value & !self.all == 0 && self.any & !t.mask & !t.value == 0
    }
}

/// Every tnum operation on every pair of tnums: γ(op#(A, B)) ⊇ {op(x, y)}.
#[test]
fn tnum_binary_operations_on_every_pair() {
    let g = Gammas::new();
    let tnums = all_tnums();
    type TnumOp = fn(T8, T8) -> T8;
    let ops: [(&str, AluOp, TnumOp); 6] = [
        ("add", AluOp::Add, |a, b| a.wrapping_add(b)),
        ("sub", AluOp::Sub, |a, b| a.wrapping_sub(b)),
        ("mul", AluOp::Mul, |a, b| a.wrapping_mul(b)),
        ("and", AluOp::And, |a, b| a.and(b)),
        ("or", AluOp::Or, |a, b| a.or(b)),
        ("xor", AluOp::Xor, |a, b| a.xor(b)),
    ];
    let index = |t: T8| ((t.value as usize) << 8) | t.mask as usize;
    let mut failures = Vec::new();
    for (name, op, abstract_op) in ops {
        // A set lies in a tnum's γ exactly when every known-1 bit is set in all of its
        // members and every known-0 bit in none, so an image is summarised by the AND and
        // the OR of its members. The images of every tnum `A` under `op` with `B` are built
        // up from `A`'s two halves on its lowest unknown bit (masks in increasing order, so
        // the halves come first).
        let mut image = vec![Image::EMPTY; 1 << 16];
        for b in &tnums {
            let ys = g.of_tnum(*b).members();
            for a in &tnums {
                let s = if a.mask == 0 {
                    let mut s = Image::EMPTY;
                    for &y in &ys {
                        s.add(reference::alu(op, a.value as u64, y as u64, true, W) as u8);
                    }
                    s
                } else {
                    let low = a.mask & a.mask.wrapping_neg();
                    let rest = a.mask ^ low;
                    let mut s = image[index(T8 {
                        value: a.value,
                        mask: rest,
                    })];
                    s.merge(
                        &image[index(T8 {
                            value: a.value | low,
                            mask: rest,
                        })],
                    );
                    s
                };
                image[index(*a)] = s;
                let r = abstract_op(*a, *b);
                if r.value & r.mask != 0 {
                    failures.push(format!("{name}: {a} {b} -> malformed {r}"));
                } else if !s.within(r) {
                    failures.push(format!("{name}: {a} {b} -> {r} misses a result"));
                }
            }
        }
    }
    for a in &tnums {
        let ga = g.of_tnum(*a);
        for b in &tnums {
            let gb = g.of_tnum(*b);
            let both = ga.and(&gb);
            match a.intersect(*b) {
                None if !both.is_empty() => failures.push(format!(
                    "intersect: {a} {b} -> none, share {:?}",
                    both.members()
                )),
                Some(r) if !both.is_subset(&g.of_tnum(r)) => {
                    failures.push(format!("intersect: {a} {b} -> {r}"))
                }
                _ => {}
            }
            let u = g.of_tnum(a.union(*b));
            if !ga.is_subset(&u) || !gb.is_subset(&u) {
                failures.push(format!("union: {a} {b} -> {}", a.union(*b)));
            }
            if a.contains(*b) && !gb.is_subset(&ga) {
                failures.push(format!("contains: {a} claims {b}"));
            }
        }
    }
    report(failures, "tnum binary operations");
}

type Concrete = Box<dyn Fn(u64) -> u64>;

/// Shifts, truncation and the range constructor on every tnum, shift amount and width.
#[test]
fn tnum_unary_operations_on_every_value() {
    let g = Gammas::new();
    let mut failures = Vec::new();
    for t in all_tnums() {
        let members = g.of_tnum(t).members();
        for k in 0..W {
            let checks: [(&str, T8, Concrete); 4] = [
                ("lshift", t.lshift(k), Box::new(move |x| x << k & 0xff)),
                ("rshift", t.rshift(k), Box::new(move |x| x >> k)),
                (
                    "arshift/8",
                    t.arshift(k, 8),
                    Box::new(move |x| reference::alu(AluOp::Arsh, x, k as u64, true, W)),
                ),
                (
                    "arshift/4",
                    t.arshift(k % 4, 4),
                    Box::new(move |x| reference::alu(AluOp::Arsh, x, (k % 4) as u64, false, W)),
                ),
            ];
            for (name, r, concrete) in checks {
                let gr = g.of_tnum(r);
                if let Some(&x) = members.iter().find(|&&x| !gr.has(concrete(x as u64) as u8)) {
                    failures.push(format!("{name} {k}: {t} -> {r} misses the image of {x:#x}"));
                }
            }
        }
        for bits in 0..=W {
            let r = g.of_tnum(t.truncate(bits));
            if let Some(&x) = members
                .iter()
                .find(|&&x| !r.has((x as u64 & reference::mask(bits)) as u8))
            {
                failures.push(format!("truncate {bits}: {t} misses {x:#x}"));
            }
        }
    }
    for lo in 0..=255u8 {
        for hi in lo..=255u8 {
            let r = TnumOf::range(lo, hi);
            if !Set::range(lo, hi).is_subset(&g.of_tnum(r)) {
                failures.push(format!("range {lo}..={hi} -> {r}"));
            }
        }
    }
    report(failures, "tnum unary operations");
}

/// The views and unary operations on every abstract value of the canonical family.
#[test]
fn scalar_views_on_every_canonical_value() {
    report(views(&canonical_family()), "scalar views");
}

/// Every result of every ALU operation and refinement on the pair family (the shapes the
/// verifier's own values have, with tnums, signed and unsigned bounds all in play).
fn derived_family(family: &[S8]) -> Vec<S8> {
    let mut derived = Vec::new();
    for a in family {
        for b in family {
            for wide in [true, false] {
                for op in reference::ALU_OPS {
                    derived.push(a.alu(op, b, wide));
                }
                for cond in [JmpCond::Gt, JmpCond::Sle, JmpCond::Set, JmpCond::Ne] {
                    for taken in [true, false] {
                        let refined = if wide {
                            S8::refine64(cond, taken, a, b)
                        } else {
                            S8::refine32(cond, taken, a, b)
                        };
                        if let Some((ra, rb)) = refined {
                            derived.push(ra);
                            derived.push(rb);
                        }
                    }
                }
            }
        }
    }
    dedup(derived)
}

/// The views and unary operations on the derived family.
#[test]
fn scalar_views_on_derived_values() {
    let family = derived_family(&pair_family(4));
    report(views(&family), "scalar views of derived values");
}

fn views(family: &[S8]) -> Vec<String> {
    eprintln!("{} abstract values", family.len());
    let g = Gammas::new();
    let mut failures = Vec::new();
    for a in family {
        let ga = g.of(a);
        let mut check = |name: String, r: S8, concrete: &dyn Fn(u8) -> u64| {
            if !well_formed(&r) {
                failures.push(format!("{name}: {a} -> malformed {r:?}"));
                return;
            }
            let gr = g.of(&r);
            if let Some(x) = ga
                .members()
                .into_iter()
                .find(|&x| !gr.has(concrete(x) as u8))
            {
                failures.push(format!(
                    "{name}: {a:?} -> {r:?} misses {x:#x} -> {:#x}",
                    concrete(x)
                ));
            }
        };
        check("subreg".into(), a.subreg(), &|x| x as u64 & 0xf);
        for bits in [1, 2, 4] {
            check(format!("sext {bits}"), a.sext(bits), &|x| {
                reference::sign_extend(x as u64, bits, W)
            });
        }
        for (order, bits) in reference::ENDIANS {
            check(format!("{order:?} {bits}"), a.endian(order, bits), &|x| {
                reference::endian(order, bits, x as u64, W)
            });
        }
        for wide in [true, false] {
            let zero = S8::constant(0);
            check(
                format!("neg wide={wide}"),
                a.alu(AluOp::Neg, &zero, wide),
                &|x| reference::alu(AluOp::Neg, x as u64, 0, wide, W),
            );
            for op in [
                AluOp::Mov,
                AluOp::MovSx(8),
                AluOp::MovSx(16),
                AluOp::MovSx(32),
            ] {
                check(format!("{op:?} wide={wide}"), zero.alu(op, a, wide), &|x| {
                    reference::alu(op, 0, x as u64, wide, W)
                });
            }
        }
    }
    failures
}

fn alu_pairs(family: &[S8], ops: &[AluOp]) -> Vec<String> {
    let g = Gammas::new();
    let values = prepare(family, &g);
    let mut failures = Vec::new();
    for &op in ops {
        for wide in [true, false] {
            for b in &values {
                let mut per_x = [Set::default(); 256];
                for (x, s) in per_x.iter_mut().enumerate() {
                    for y in b.gamma.members() {
                        s.insert(reference::alu(op, x as u64, y as u64, wide, W) as u8);
                    }
                }
                let images = RangeUnion::new(&per_x);
                for a in &values {
                    let r = a.value.alu(op, &b.value, wide);
                    if !well_formed(&r) {
                        failures.push(format!(
                            "{op:?} wide={wide}: {:?} {:?} -> malformed {r:?}",
                            a.value, b.value
                        ));
                        continue;
                    }
                    let image = images.over(a);
                    if let Some(z) = image.outside(&g.of(&r)) {
                        failures.push(format!(
                            "{op:?} wide={wide}: {:?} op {:?} -> {r:?} misses {z:#x}",
                            a.value, b.value
                        ));
                    }
                }
            }
        }
    }
    failures
}

/// Every ALU operation, 64- and 32-bit, on every pair of the pair family.
#[test]
fn scalar_alu_on_every_pair() {
    let family = pair_family(2);
    report(alu_pairs(&family, &reference::ALU_OPS), "scalar ALU");
}

fn refine_pairs(family: &[S8], conds: &[JmpCond]) -> Vec<String> {
    let g = Gammas::new();
    let values = prepare(family, &g);
    let mut failures = Vec::new();
    for &cond in conds {
        for wide in [true, false] {
            // For each value and outcome, the values on the other side that reach it:
            // `left[i][taken]` = {x : some y of values[i] has (x cond y) == taken}, and
            // `right[i][taken]` = {y : some x of values[i] has (x cond y) == taken}.
            // Built from the per-value rows: `rows_left[taken][y]` = {x : (x cond y) == taken}
            // and `rows_right[taken][x]` = {y : (x cond y) == taken}.
            let mut rows_left = [[Set::default(); 256]; 2];
            let mut rows_right = [[Set::default(); 256]; 2];
            for m in 0..=255u8 {
                for other in 0..=255u8 {
                    let t = reference::holds(cond, other as u64, m as u64, wide, W);
                    rows_left[t as usize][m as usize].insert(other);
                    let t = reference::holds(cond, m as u64, other as u64, wide, W);
                    rows_right[t as usize][m as usize].insert(other);
                }
            }
            let unions_left = rows_left.map(|rows| RangeUnion::new(&rows));
            let unions_right = rows_right.map(|rows| RangeUnion::new(&rows));
            let left: Vec<[Set; 2]> = values
                .iter()
                .map(|v| [unions_left[0].over(v), unions_left[1].over(v)])
                .collect();
            let right: Vec<[Set; 2]> = values
                .iter()
                .map(|v| [unions_right[0].over(v), unions_right[1].over(v)])
                .collect();
            for (j, b) in values.iter().enumerate() {
                for (i, a) in values.iter().enumerate() {
                    for taken in [false, true] {
                        let xs = a.gamma.and(&left[j][taken as usize]);
                        let ys = b.gamma.and(&right[i][taken as usize]);
                        let refined = if wide {
                            S8::refine64(cond, taken, &a.value, &b.value)
                        } else {
                            S8::refine32(cond, taken, &a.value, &b.value)
                        };
                        let name = || {
                            format!(
                                "{cond:?} taken={taken} wide={wide}: {:?} {:?}",
                                a.value, b.value
                            )
                        };
                        match refined {
                            None if !xs.is_empty() => failures.push(format!(
                                "{} -> impossible, but {:?} x {:?} reach it",
                                name(),
                                xs.members(),
                                ys.members()
                            )),
                            None => {}
                            Some((ra, rb)) => {
                                if !well_formed(&ra) || !well_formed(&rb) {
                                    failures.push(format!("{} -> malformed {ra:?} {rb:?}", name()));
                                } else if let Some(x) = xs.outside(&g.of(&ra)) {
                                    failures.push(format!("{} -> {ra:?} loses {x:#x}", name()));
                                } else if let Some(y) = ys.outside(&g.of(&rb)) {
                                    failures.push(format!("{} -> {rb:?} loses {y:#x}", name()));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    failures
}

/// The branch refinement of every comparison, 64- and 32-bit, taken and not taken, on every
/// pair of the pair family: every concrete pair reaching an outcome stays in its refinement.
#[test]
fn scalar_refinement_on_every_pair() {
    let family = pair_family(2);
    report(
        refine_pairs(&family, &reference::CONDS),
        "branch refinement",
    );
}

fn lattice_pairs(family: &[S8]) -> Vec<String> {
    let g = Gammas::new();
    let values = prepare(family, &g);
    let mut failures = Vec::new();
    for a in &values {
        for b in &values {
            let (x, y) = (&a.value, &b.value);
            let both = a.gamma.and(&b.gamma);
            match x.meet(y) {
                None if !both.is_empty() => failures.push(format!("meet: {x:?} {y:?} -> none")),
                Some(m) if !well_formed(&m) || !both.is_subset(&g.of(&m)) => {
                    failures.push(format!("meet: {x:?} {y:?} -> {m:?}"))
                }
                _ => {}
            }
            for (name, r) in [("join", x.join(y)), ("widen", x.widen(y))] {
                let gr = g.of(&r);
                if !well_formed(&r) || !a.gamma.is_subset(&gr) || !b.gamma.is_subset(&gr) {
                    failures.push(format!("{name}: {x:?} {y:?} -> {r:?}"));
                }
            }
            if x.contains(y) && !b.gamma.is_subset(&a.gamma) {
                failures.push(format!("contains: {x:?} claims {y:?}"));
            }
        }
    }
    failures
}

/// Join, meet, widening and subsumption (what pruning relies on) on every pair.
#[test]
fn scalar_lattice_on_every_pair() {
    report(lattice_pairs(&pair_family(1)), "lattice");
}

/// Values that are well formed but not reduced: a tnum, an unsigned and a signed range that
/// share members but do not agree on their bounds (the verifier's own values are reduced,
/// but the domain must not rely on it).
fn unreduced_family(step: usize) -> Vec<S8> {
    let g = Gammas::new();
    let tnums: Vec<T8> = MASKS
        .iter()
        .flat_map(|&mask| {
            BASES.iter().map(move |&base| T8 {
                value: base & !mask,
                mask,
            })
        })
        .collect();
    let uranges: Vec<(u8, u8)> = UNSIGNED_EDGES
        .iter()
        .enumerate()
        .flat_map(|(i, &lo)| UNSIGNED_EDGES[i..].iter().map(move |&hi| (lo, hi)))
        .step_by(step)
        .collect();
    let sranges: Vec<(i8, i8)> = SIGNED_EDGES
        .iter()
        .enumerate()
        .flat_map(|(i, &lo)| SIGNED_EDGES[i..].iter().map(move |&hi| (lo, hi)))
        .step_by(step)
        .collect();
    let mut v = Vec::new();
    for &bits in &tnums {
        for &(umin, umax) in &uranges {
            for &(smin, smax) in &sranges {
                let raw = S8 {
                    bits,
                    umin,
                    umax,
                    smin,
                    smax,
                };
                if !g.of(&raw).is_empty() && raw.normalize() != Some(raw) {
                    v.push(raw);
                }
            }
        }
    }
    dedup(v)
}

/// Views, ALU operations and refinements on unreduced values.
#[test]
fn unreduced_inputs() {
    let mut failures = views(&unreduced_family(4));
    let family = unreduced_family(35);
    failures.extend(alu_pairs(&family, &reference::ALU_OPS));
    failures.extend(refine_pairs(&family, &reference::CONDS));
    report(failures, "unreduced inputs");
}

/// The larger sweep: the full pair family (every edge value, every tnum meet) with a
/// fortieth of the derived family, and the larger unreduced families.
#[test]
#[ignore = "a few minutes; run with --ignored"]
fn scalar_pairs_full_family() {
    let mut family = pair_family(1);
    family.extend(derived_family(&pair_family(4)).into_iter().step_by(40));
    let family = dedup(family);
    let mut failures = alu_pairs(&family, &reference::ALU_OPS);
    failures.extend(refine_pairs(&family, &reference::CONDS));
    failures.extend(views(&unreduced_family(1)));
    let unreduced = unreduced_family(23);
    failures.extend(alu_pairs(&unreduced, &reference::ALU_OPS));
    failures.extend(refine_pairs(&unreduced, &reference::CONDS));
    report(failures, "full pair family");
}

/// Soundness alone would let a domain answer "unknown" everywhere; on constants this one is
/// exact: every ALU operation but the unsigned remainder, every view and byte swap of
/// constants is the concrete constant, and the outcome a pair of constants does not take is
/// refined away. `x % c` on constants gives `[0, c - 1]` (the kernel folds no remainder
/// either); folding it would be a precision change, not a soundness one.
#[test]
fn constants_are_exact() {
    let mut failures = Vec::new();
    for x in 0..=255u8 {
        let a = S8::constant(x);
        for y in 0..=255u8 {
            let b = S8::constant(y);
            for wide in [true, false] {
                for op in reference::ALU_OPS
                    .into_iter()
                    .filter(|&op| op != AluOp::Mod)
                {
                    let r = a.alu(op, &b, wide);
                    let z = reference::alu(op, x as u64, y as u64, wide, W) as u8;
                    if r.const_value() != Some(z) {
                        failures.push(format!(
                            "{op:?} wide={wide}: {x:#x} {y:#x} -> {r}, not {z:#x}"
                        ));
                    }
                }
                for cond in reference::CONDS {
                    let taken = reference::holds(cond, x as u64, y as u64, wide, W);
                    let other = if wide {
                        S8::refine64(cond, !taken, &a, &b)
                    } else {
                        S8::refine32(cond, !taken, &a, &b)
                    };
                    if other.is_some() {
                        failures.push(format!(
                            "{cond:?} wide={wide}: {x:#x} {y:#x} keeps the outcome {}",
                            !taken
                        ));
                    }
                }
            }
        }
        for (order, bits) in reference::ENDIANS {
            let z = reference::endian(order, bits, x as u64, W) as u8;
            if a.endian(order, bits).const_value() != Some(z) {
                failures.push(format!("{order:?} {bits}: {x:#x} not exact"));
            }
        }
        for bits in [1, 2, 4] {
            let z = reference::sign_extend(x as u64, bits, W) as u8;
            if a.sext(bits).const_value() != Some(z) {
                failures.push(format!("sext {bits}: {x:#x} not exact"));
            }
        }
    }
    report(failures, "exactness on constants");
}
