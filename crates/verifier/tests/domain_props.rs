//! Property tests of the scalar domain at full width (64-bit words): the same soundness
//! properties as `domain_exhaustive.rs` checks on 8-bit words, on random members of random
//! abstract values, with generators biased to where range-analysis bugs live: 0, ±1,
//! `i64::MIN`/`MAX`, `u64::MAX`, powers of two and their neighbours, values around 2^31 and
//! 2^32, bounds one step off a member, and inputs that are well formed but not reduced
//! (their tnum and ranges disagree), which every operation must also accept without panicking.
//!
//! CI runs 4,000 cases per property with a fixed seed. Longer runs:
//! `PROPTEST_CASES=100000 cargo test -p rdx-verifier --test domain_props`.

mod domain_reference;

use domain_reference as reference;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use rdx_bpf::isa::{AluOp, JmpCond};
use rdx_verifier::scalar::Scalar;
use rdx_verifier::tnum::Tnum;

const W: u32 = 64;

fn config() -> Config {
    Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(4000),
        rng_seed: RngSeed::Fixed(0x5ca1a2),
        failure_persistence: None,
        ..Config::default()
    }
}

/// γ by definition: in the tnum, in the unsigned range and in the signed range.
fn member(s: &Scalar, v: u64) -> bool {
    v & !s.bits.mask == s.bits.value
        && s.umin <= v
        && v <= s.umax
        && s.smin <= v as i64
        && v as i64 <= s.smax
}

fn well_formed(s: &Scalar) -> bool {
    s.bits.value & s.bits.mask == 0 && s.umin <= s.umax && s.smin <= s.smax
}

/// Values where bugs live.
fn edge() -> BoxedStrategy<u64> {
    let powers = (0u32..64, -2i64..=2).prop_map(|(k, d)| (1u64 << k).wrapping_add(d as u64));
    let negated = powers.clone().prop_map(|v| v.wrapping_neg());
    prop_oneof![
        prop::sample::select(vec![
            0,
            1,
            2,
            u64::MAX,
            u64::MAX - 1,
            i64::MIN as u64,
            i64::MIN as u64 + 1,
            i64::MAX as u64,
            i64::MAX as u64 - 1,
            u32::MAX as u64,
            u32::MAX as u64 + 1,
            i32::MIN as u64,
            i32::MIN as i64 as u64,
            i32::MAX as u64,
            i32::MAX as u64 + 1,
            0xffff_ffff_0000_0000,
            0x8000_0000_7fff_ffff,
        ]),
        powers,
        negated,
    ]
    .boxed()
}

fn value() -> BoxedStrategy<u64> {
    prop_oneof![
        3 => edge(),
        2 => any::<u64>(),
        1 => 0u64..300,
        1 => (-300i64..0).prop_map(|v| v as u64),
    ]
    .boxed()
}

/// A distance from a member to a bound: none, one, an edge value or anything.
fn distance() -> BoxedStrategy<u64> {
    prop_oneof![Just(0u64), Just(1u64), 0u64..64, edge(), any::<u64>()].boxed()
}

/// A mask of unknown bits.
fn unknown_bits() -> BoxedStrategy<u64> {
    prop_oneof![
        Just(0u64),
        Just(u64::MAX),
        (0u32..=64).prop_map(reference::mask),
        (0u32..=64).prop_map(|k| !reference::mask(k)),
        (0u32..64).prop_map(|k| 1u64 << k),
        Just(0xffff_ffff_0000_0000u64),
        Just(0x8000_0000_0000_0001u64),
        any::<u64>(),
    ]
    .boxed()
}

/// An abstract value holding `x`, with its ranges and bits each holding `x` too.
#[derive(Clone, Copy, Debug)]
enum Shape {
    Constant,
    Unsigned(u64, u64),
    Signed(u64, u64),
    Bits(u64),
    BitsAndUnsigned(u64, u64, u64),
    /// Well formed but not reduced: every part holds `x`, no part agrees with another.
    Raw(u64, u64, u64, u64, u64),
}

fn shape() -> BoxedStrategy<Shape> {
    prop_oneof![
        1 => Just(Shape::Constant),
        2 => (distance(), distance()).prop_map(|(a, b)| Shape::Unsigned(a, b)),
        2 => (distance(), distance()).prop_map(|(a, b)| Shape::Signed(a, b)),
        2 => unknown_bits().prop_map(Shape::Bits),
        1 => (unknown_bits(), distance(), distance()).prop_map(|(m, a, b)| Shape::BitsAndUnsigned(m, a, b)),
        1 => (unknown_bits(), distance(), distance(), distance(), distance())
            .prop_map(|(m, a, b, c, d)| Shape::Raw(m, a, b, c, d)),
    ]
    .boxed()
}

fn build(shape: Shape, x: u64) -> Scalar {
    let urange = |below: u64, above: u64| (x.saturating_sub(below), x.saturating_add(above));
    let srange = |below: u64, above: u64| {
        let lo = (x as i64).saturating_sub(below.min(i64::MAX as u64) as i64);
        let hi = (x as i64).saturating_add(above.min(i64::MAX as u64) as i64);
        (lo, hi)
    };
    let bits = |mask: u64| Tnum {
        value: x & !mask,
        mask,
    };
    match shape {
        Shape::Constant => Scalar::constant(x),
        Shape::Unsigned(a, b) => {
            let (lo, hi) = urange(a, b);
            Scalar::urange(lo, hi)
        }
        Shape::Signed(a, b) => {
            let (lo, hi) = srange(a, b);
            Scalar::srange(lo, hi)
        }
        Shape::Bits(m) => Scalar::from_bits(bits(m)),
        Shape::BitsAndUnsigned(m, a, b) => {
            let (lo, hi) = urange(a, b);
            Scalar::from_bits(bits(m))
                .meet(&Scalar::urange(lo, hi))
                .expect("both hold x")
        }
        Shape::Raw(m, a, b, c, d) => {
            let (umin, umax) = urange(a, b);
            let (smin, smax) = srange(c, d);
            Scalar {
                bits: bits(m),
                umin,
                umax,
                smin,
                smax,
            }
        }
    }
}

/// An abstract value and a member of it.
fn abstract_member() -> BoxedStrategy<(Scalar, u64)> {
    (value(), shape())
        .prop_map(|(x, s)| {
            let a = build(s, x);
            (a, x)
        })
        .boxed()
}

/// An abstract value produced by an operation, with the concrete result of members: the
/// shapes the verifier's own results have.
fn derived_member() -> BoxedStrategy<(Scalar, u64)> {
    prop_oneof![
        3 => abstract_member(),
        1 => (abstract_member(), abstract_member(), alu_op(), any::<bool>()).prop_map(
            |((a, x), (b, y), op, wide)| (a.alu(op, &b, wide), reference::alu(op, x, y, wide, W))
        ),
    ]
    .boxed()
}

fn alu_op() -> impl Strategy<Value = AluOp> {
    prop::sample::select(reference::ALU_OPS.to_vec())
}

fn cond() -> impl Strategy<Value = JmpCond> {
    prop::sample::select(reference::CONDS.to_vec())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn generated_values_hold_their_members((a, x) in derived_member()) {
        prop_assert!(well_formed(&a), "{a:?}");
        prop_assert!(member(&a, x), "{a:?} does not hold {x:#x}");
    }

    #[test]
    fn alu_results_hold_the_concrete_result(
        (a, x) in derived_member(),
        (b, y) in derived_member(),
        op in alu_op(),
        wide in any::<bool>(),
    ) {
        let r = a.alu(op, &b, wide);
        let z = reference::alu(op, x, y, wide, W);
        prop_assert!(well_formed(&r), "{op:?} wide={wide}: {a:?} {b:?} -> malformed {r:?}");
        prop_assert!(
            member(&r, z),
            "{op:?} wide={wide}: {a:?} op {b:?} = {r:?}, but {x:#x} op {y:#x} = {z:#x}"
        );
    }

    #[test]
    fn refinement_keeps_every_pair_reaching_the_outcome(
        (a, x) in derived_member(),
        (b, y) in derived_member(),
        cond in cond(),
        wide in any::<bool>(),
    ) {
        let taken = reference::holds(cond, x, y, wide, W);
        let refined = if wide {
            Scalar::refine64(cond, taken, &a, &b)
        } else {
            Scalar::refine32(cond, taken, &a, &b)
        };
        let Some((ra, rb)) = refined else {
            return Err(TestCaseError::fail(format!(
                "{cond:?} taken={taken} wide={wide}: {a:?} {b:?} declared impossible, but {x:#x} {y:#x} reach it"
            )));
        };
        prop_assert!(well_formed(&ra) && well_formed(&rb), "malformed {ra:?} {rb:?}");
        prop_assert!(
            member(&ra, x) && member(&rb, y),
            "{cond:?} taken={taken} wide={wide}: {a:?} {b:?} -> {ra:?} {rb:?} lose {x:#x} {y:#x}"
        );
    }

    #[test]
    fn views_hold_the_concrete_view((a, x) in derived_member()) {
        let mut checks: Vec<(String, Scalar, u64)> = vec![
            ("subreg".into(), a.subreg(), x & 0xffff_ffff),
            ("neg64".into(), a.alu(AluOp::Neg, &Scalar::constant(0), true), x.wrapping_neg()),
            ("neg32".into(), a.alu(AluOp::Neg, &Scalar::constant(0), false), (x as u32).wrapping_neg() as u64),
        ];
        for bits in [8, 16, 32] {
            checks.push((format!("sext {bits}"), a.sext(bits), reference::sign_extend(x, bits, W)));
        }
        for (order, bits) in reference::ENDIANS {
            checks.push((format!("{order:?} {bits}"), a.endian(order, bits), reference::endian(order, bits, x, W)));
        }
        for (name, r, z) in checks {
            prop_assert!(well_formed(&r), "{name}: {a:?} -> malformed {r:?}");
            prop_assert!(member(&r, z), "{name}: {a:?} -> {r:?} misses {x:#x} -> {z:#x}");
        }
    }

    #[test]
    fn lattice_operations_hold_both_sides((a, x) in derived_member(), (b, y) in derived_member(), s in shape()) {
        for (name, r) in [("join", a.join(&b)), ("widen", a.widen(&b))] {
            prop_assert!(well_formed(&r) && member(&r, x) && member(&r, y), "{name}: {a:?} {b:?} -> {r:?}");
        }
        // Two values holding the same member meet in a value holding it.
        let c = build(s, x);
        let m = a.meet(&c);
        prop_assert!(m.is_some_and(|m| member(&m, x)), "meet: {a:?} {c:?} -> {m:?} loses {x:#x}");
        // Subsumption, which pruning relies on, never claims a value it does not hold.
        prop_assert!(!a.contains(&b) || member(&a, y), "{a:?} claims {b:?} but not {y:#x}");
    }
}

/// Operations never panic on extreme inputs, whatever their bounds (checked arithmetic).
#[test]
fn extreme_inputs_never_panic() {
    let edges = [
        0u64,
        1,
        2,
        63,
        64,
        u64::MAX,
        u64::MAX - 1,
        1 << 63,
        (1 << 63) - 1,
        (1 << 63) + 1,
        1 << 32,
        u32::MAX as u64,
    ];
    let mut values = Vec::new();
    for &lo in &edges {
        values.push(Scalar::constant(lo));
        for &hi in &edges {
            if lo <= hi {
                values.push(Scalar::urange(lo, hi));
            }
            if lo as i64 <= hi as i64 {
                values.push(Scalar::srange(lo as i64, hi as i64));
            }
        }
    }
    values.push(Scalar::UNKNOWN);
    for a in &values {
        for b in &values {
            for op in reference::ALU_OPS {
                for wide in [true, false] {
                    assert!(well_formed(&a.alu(op, b, wide)));
                }
            }
            for cond in reference::CONDS {
                for taken in [true, false] {
                    let _ = Scalar::refine64(cond, taken, a, b);
                    let _ = Scalar::refine32(cond, taken, a, b);
                }
            }
            let _ = (a.join(b), a.widen(b), a.meet(b), a.contains(b));
        }
        for (order, bits) in reference::ENDIANS {
            let _ = a.endian(order, bits);
        }
        let _ = (a.sext(8), a.sext(16), a.sext(32), a.subreg());
    }
}

proptest! {
    #![proptest_config(config())]

    /// Whatever the fields hold, even malformed (a tnum with `value & mask != 0`, bounds out
    /// of order), no operation panics: every computation on them is checked or wrapping.
    #[test]
    fn arbitrary_fields_never_panic(
        fields in prop::array::uniform10(prop_oneof![edge(), any::<u64>()]),
        op in alu_op(),
        cond in cond(),
        wide in any::<bool>(),
    ) {
        let make = |f: &[u64]| Scalar {
            bits: Tnum { value: f[0], mask: f[1] },
            umin: f[2],
            umax: f[3],
            smin: f[4] as i64,
            smax: f[5] as i64,
        };
        let (a, b) = (make(&fields[..6]), make(&fields[4..]));
        let _ = a.alu(op, &b, wide);
        let _ = Scalar::refine64(cond, wide, &a, &b);
        let _ = Scalar::refine32(cond, wide, &a, &b);
        let _ = (a.join(&b), a.widen(&b), a.meet(&b), a.contains(&b), a.normalize());
        for (order, bits) in reference::ENDIANS {
            let _ = a.endian(order, bits);
        }
        let _ = (a.sext(8), a.sext(16), a.sext(32), a.subreg(), a.const_value());
        let _ = (a.bits.wrapping_mul(b.bits), a.bits.arshift(fields[9] as u32, fields[8] as u32));
        let _ = a.to_string();
    }
}

// Regressions: panics the no-panic property found in the 64-bit domain. None is reachable
// from the verifier, which only shifts by masked amounts and only builds reduced values, but
// the domain is a public API and a panic in a control plane is a crash.

/// `Tnum::arshift` shifted by the amount as given, which overflowed for amounts of the
/// width or more; such a shift fills with the sign.
#[test]
fn arithmetic_shift_by_the_width_or_more_fills_with_the_sign() {
    let negative = Tnum::constant(1 << 63);
    assert_eq!(negative.arshift(64, 64), Tnum::constant(u64::MAX));
    assert_eq!(negative.arshift(200, 64), Tnum::constant(u64::MAX));
    assert_eq!(
        Tnum::constant(0x8000_0000).arshift(32, 32),
        Tnum::constant(0xffff_ffff)
    );
    assert_eq!(
        Tnum::constant(0x7fff_ffff).arshift(40, 32),
        Tnum::constant(0)
    );
}

/// Bounds out of order (`umin > umax`) for the arithmetic below.
fn out_of_order(umin: u64, umax: u64) -> Scalar {
    Scalar {
        umin,
        umax,
        ..Scalar::UNKNOWN
    }
}

/// Subtraction computed `umax - b.umin` unchecked once `umin >= b.umax`, which assumed
/// `umin <= umax`; on bounds out of order it overflowed.
#[test]
fn subtraction_of_bounds_out_of_order_never_panics() {
    let _ = out_of_order(5, 2).sub(&Scalar::constant(3));
}

/// Multiplication computed `umin * b.umin` unchecked once `umax * b.umax` fitted.
#[test]
fn multiplication_of_bounds_out_of_order_never_panics() {
    let _ = out_of_order(u64::MAX, 2).alu(AluOp::Mul, &out_of_order(u64::MAX, 2), true);
}

/// The unsigned remainder computed `b.umax - 1` unchecked once `b.umin > 0`.
#[test]
fn remainder_by_bounds_out_of_order_never_panics() {
    let _ = Scalar::constant(7).alu(AluOp::Mod, &out_of_order(1, 0), true);
}
