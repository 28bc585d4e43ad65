//! Set algebra over field values: the normal form predicates are compiled into.
//!
//! A [`ValueSet`] is the set of values a field may take for a predicate to hold: sorted,
//! disjoint, non-adjacent inclusive ranges plus one extra point, *absent*. A [`Cube`] is a
//! conjunction: one value set per field. A predicate in normal form is a union of cubes
//! (disjunctive normal form). Negation and difference stay exact, which is what lets the
//! checker prove that one policy shadows another instead of guessing.

use crate::field::{Field, FIELD_COUNT};

/// Values of one field that satisfy a constraint, plus whether "field absent" does.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ValueSet {
    /// Whether a packet without this field is in the set.
    pub absent: bool,
    /// Sorted, disjoint, non-adjacent inclusive ranges.
    pub ranges: Vec<(u128, u128)>,
}

impl ValueSet {
    /// Every value and absence: no constraint.
    pub fn full(field: Field) -> ValueSet {
        ValueSet {
            absent: true,
            ranges: vec![(0, field.max())],
        }
    }

    /// Nothing.
    pub fn empty() -> ValueSet {
        ValueSet {
            absent: false,
            ranges: Vec::new(),
        }
    }

    /// Present values in the given ranges (any order, may overlap); absence excluded.
    pub fn from_ranges(mut ranges: Vec<(u128, u128)>) -> ValueSet {
        ranges.retain(|(lo, hi)| lo <= hi);
        ranges.sort_unstable();
        let mut out: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            match out.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        ValueSet {
            absent: false,
            ranges: out,
        }
    }

    /// Whether the two sets share a value or both hold absence (`!intersect().is_empty()`,
    /// without allocating).
    pub fn meets(&self, other: &ValueSet) -> bool {
        if self.absent && other.absent {
            return true;
        }
        let (mut i, mut j) = (0, 0);
        while i < self.ranges.len() && j < other.ranges.len() {
            let (a_lo, a_hi) = self.ranges[i];
            let (b_lo, b_hi) = other.ranges[j];
            if a_lo.max(b_lo) <= a_hi.min(b_hi) {
                return true;
            }
            if a_hi < b_hi {
                i += 1;
            } else {
                j += 1;
            }
        }
        false
    }

    /// Whether no packet value (nor absence) is in the set.
    pub fn is_empty(&self) -> bool {
        !self.absent && self.ranges.is_empty()
    }

    /// Whether this is the full set for `field`.
    pub fn is_full(&self, field: Field) -> bool {
        self.absent && self.ranges.len() == 1 && self.ranges[0] == (0, field.max())
    }

    /// Membership of a packet value (`None` = absent).
    pub fn contains(&self, value: Option<u128>) -> bool {
        match value {
            None => self.absent,
            Some(v) => self.ranges.iter().any(|&(lo, hi)| lo <= v && v <= hi),
        }
    }

    /// Intersection.
    pub fn intersect(&self, other: &ValueSet) -> ValueSet {
        let mut ranges = Vec::new();
        let (mut i, mut j) = (0, 0);
        while i < self.ranges.len() && j < other.ranges.len() {
            let (a_lo, a_hi) = self.ranges[i];
            let (b_lo, b_hi) = other.ranges[j];
            let lo = a_lo.max(b_lo);
            let hi = a_hi.min(b_hi);
            if lo <= hi {
                ranges.push((lo, hi));
            }
            if a_hi < b_hi {
                i += 1;
            } else {
                j += 1;
            }
        }
        ValueSet {
            absent: self.absent && other.absent,
            ranges,
        }
    }

    /// Complement within `field`'s domain (absence flips too).
    pub fn complement(&self, field: Field) -> ValueSet {
        let mut ranges = Vec::new();
        let mut next: Option<u128> = Some(0);
        for &(lo, hi) in &self.ranges {
            if let Some(n) = next {
                if lo > n {
                    ranges.push((n, lo - 1));
                }
            }
            next = hi.checked_add(1);
        }
        if let Some(n) = next {
            if n <= field.max() {
                ranges.push((n, field.max()));
            }
        }
        ValueSet {
            absent: !self.absent,
            ranges,
        }
    }

    /// `self \ other`.
    pub fn difference(&self, other: &ValueSet, field: Field) -> ValueSet {
        self.intersect(&other.complement(field))
    }

    /// Whether `self ⊆ other`.
    pub fn is_subset(&self, other: &ValueSet, field: Field) -> bool {
        self.difference(other, field).is_empty()
    }
}

/// A conjunction: one value set per field. The empty cube (some field empty) matches nothing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cube {
    /// Per-field value sets, indexed by [`Field::index`].
    pub sets: [ValueSet; FIELD_COUNT],
}

impl Cube {
    /// The cube that matches every packet (`any`).
    pub fn any() -> Cube {
        Cube {
            sets: Field::ALL.map(ValueSet::full),
        }
    }

    /// The cube constraining one field.
    pub fn single(field: Field, set: ValueSet) -> Cube {
        let mut c = Cube::any();
        c.sets[field.index()] = set;
        c
    }

    /// Whether it matches nothing.
    pub fn is_empty(&self) -> bool {
        self.sets.iter().any(ValueSet::is_empty)
    }

    /// Intersection.
    pub fn intersect(&self, other: &Cube) -> Cube {
        Cube {
            sets: std::array::from_fn(|i| self.sets[i].intersect(&other.sets[i])),
        }
    }

    /// Whether a packet (per-field values) is in the cube.
    pub fn contains(&self, values: &[Option<u128>; FIELD_COUNT]) -> bool {
        self.sets.iter().zip(values).all(|(s, v)| s.contains(*v))
    }

    /// Whether the two cubes share a point (field by field, without building the
    /// intersection: the shadowing proof asks this of every pair of cubes).
    pub fn overlaps(&self, other: &Cube) -> bool {
        self.sets.iter().zip(&other.sets).all(|(a, b)| a.meets(b))
    }

    /// `self \ other` as disjoint cubes (at most one per field).
    pub fn difference(&self, other: &Cube) -> Vec<Cube> {
        if !self.overlaps(other) {
            return vec![self.clone()];
        }
        let mut out = Vec::new();
        let mut prefix = self.clone();
        for f in Field::ALL {
            let i = f.index();
            let outside = self.sets[i].difference(&other.sets[i], f);
            if !outside.is_empty() {
                let mut piece = prefix.clone();
                piece.sets[i] = outside;
                out.push(piece);
            }
            prefix.sets[i] = self.sets[i].intersect(&other.sets[i]);
        }
        out
    }

    /// Complement as a union of cubes (one per constrained field).
    pub fn complement(&self) -> Vec<Cube> {
        Field::ALL
            .into_iter()
            .filter(|f| !self.sets[f.index()].is_full(*f))
            .map(|f| Cube::single(f, self.sets[f.index()].complement(f)))
            .filter(|c| !c.is_empty())
            .collect()
    }
}

/// Outcome of a bounded coverage check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// Every point of the cubes is covered.
    Covered,
    /// Some point is not covered.
    NotCovered,
    /// The check gave up (too many pieces); treat as unknown.
    Unknown,
}

/// Whether the union `cubes` is contained in the union `by`, exploring at most `budget`
/// intermediate pieces.
pub fn covered_by(cubes: &[Cube], by: &[&Cube], budget: usize) -> Coverage {
    let mut left = budget;
    covered_within(cubes, by, &mut left)
}

/// [`covered_by`] spending `budget` (the pieces computed are taken from it), so that a
/// caller can bound the work over many proofs.
pub fn covered_within(cubes: &[Cube], by: &[&Cube], budget: &mut usize) -> Coverage {
    let start = *budget;
    let coverage = covered_counting(cubes, by, start);
    *budget = start.saturating_sub(coverage.1);
    coverage.0
}

fn covered_counting(cubes: &[Cube], by: &[&Cube], budget: usize) -> (Coverage, usize) {
    let mut rest: Vec<Cube> = cubes.iter().filter(|c| !c.is_empty()).cloned().collect();
    let mut work = 0usize;
    for b in by {
        let mut next = Vec::with_capacity(rest.len());
        for c in rest.drain(..) {
            // A piece `b` misses stays as it is (moved, not cloned): most pairs of a large
            // policy file do not overlap.
            if !c.overlaps(b) {
                next.push(c);
                continue;
            }
            let pieces = c.difference(b);
            work += pieces.len();
            if work > budget {
                return (Coverage::Unknown, work);
            }
            next.extend(pieces);
        }
        rest = next;
        if rest.is_empty() {
            return (Coverage::Covered, work);
        }
    }
    if rest.is_empty() {
        (Coverage::Covered, work)
    } else {
        (Coverage::NotCovered, work)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn small(field: Field) -> impl Strategy<Value = ValueSet> {
        let max = field.max().min(40);
        (
            any::<bool>(),
            proptest::collection::vec((0..=max, 0..=max), 0..4),
        )
            .prop_map(|(absent, rs)| {
                let mut s = ValueSet::from_ranges(rs);
                s.absent = absent;
                s
            })
    }

    proptest! {
        #[test]
        fn set_algebra_matches_membership(a in small(Field::Sport), b in small(Field::Sport), v in proptest::option::of(0u128..50)) {
            let f = Field::Sport;
            prop_assert_eq!(a.intersect(&b).contains(v), a.contains(v) && b.contains(v));
            prop_assert_eq!(a.meets(&b), !a.intersect(&b).is_empty());
            prop_assert_eq!(a.complement(f).contains(v), !a.contains(v));
            prop_assert_eq!(a.difference(&b, f).contains(v), a.contains(v) && !b.contains(v));
            prop_assert_eq!(a.complement(f).complement(f), a.clone());
        }

        #[test]
        fn cube_difference_is_exact(a in small(Field::Sport), b in small(Field::Dport), c in small(Field::Sport), d in small(Field::Dport),
                                    v1 in proptest::option::of(0u128..50), v2 in proptest::option::of(0u128..50)) {
            let mut x = Cube::any();
            x.sets[Field::Sport.index()] = a;
            x.sets[Field::Dport.index()] = b;
            let mut y = Cube::any();
            y.sets[Field::Sport.index()] = c;
            y.sets[Field::Dport.index()] = d;
            let mut p: [Option<u128>; FIELD_COUNT] = [None; FIELD_COUNT];
            p[Field::Sport.index()] = v1;
            p[Field::Dport.index()] = v2;
            let diff = x.difference(&y);
            let in_diff = diff.iter().filter(|c| c.contains(&p)).count();
            prop_assert!(in_diff <= 1, "pieces must be disjoint");
            prop_assert_eq!(in_diff == 1, x.contains(&p) && !y.contains(&p));
            let comp = x.complement();
            prop_assert_eq!(comp.iter().any(|c| c.contains(&p)), !x.contains(&p));
        }
    }

    #[test]
    fn complement_edges() {
        let f = Field::CmForged;
        let s = ValueSet::from_ranges(vec![(1, 1)]);
        let c = s.complement(f);
        assert_eq!(c.ranges, vec![(0, 0)]);
        assert!(c.absent);
        let full = ValueSet::full(Field::Sip);
        assert!(full.complement(Field::Sip).is_empty());
        let top = ValueSet::from_ranges(vec![(5, u128::MAX)]);
        assert_eq!(top.complement(Field::Sip).ranges, vec![(0, 4)]);
    }
}
