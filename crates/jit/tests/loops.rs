//! Counted loops against the interpreter: loops closed by `add r, c; jne r, N, head` (the
//! shape clang gives `for (i = K; i != N; i += c)`), with start values, steps and limits
//! that do and do not count exactly to `N` (including wrap-around in both widths), a second
//! entry that skips the start value, data-dependent exits and packet-style bounds checks on
//! the counter. The JIT compiles some of these latches as ordered compares and hoists some
//! bounds checks (`src/loops.rs`); every program must still give the interpreter's result.

use proptest::prelude::*;
use rdx_bpf::isa::{AluOp, Insn, JmpCond, Operand, Reg, Size, Width};
use rdx_jit::{Compiler, Pipeline};
use rdx_region::layout::Arch;
#[path = "support/random_programs.rs"]
#[allow(dead_code)]
mod random_programs;
use random_programs::{interpret, jit};

const MEM: usize = 64;

#[derive(Clone, Debug)]
struct Shape {
    width: Width,
    counter: u8,
    /// The counter's value before the loop's prologue (the interpreter refuses to read a
    /// register nothing wrote).
    before: i32,
    /// The prologue's start value, if it sets one.
    start: Option<i32>,
    second_entry: bool,
    sub: bool,
    step: i32,
    end: i32,
    max_iterations: i32,
    /// Leave the loop when `mem + counter + reach` passes `mem + len` (in one of four
    /// forms), as a packet loop does before each access, and read below that address.
    bounds: Option<(i32, u8)>,
}

fn alu(width: Width, op: AluOp, dst: u8, src: Operand) -> Insn {
    Insn::Alu {
        width,
        op,
        dst: Reg(dst),
        src,
    }
}

fn jmp(width: Width, cond: JmpCond, dst: u8, src: Operand, off: i16) -> Insn {
    Insn::Jmp {
        width,
        cond,
        dst: Reg(dst),
        src,
        off,
    }
}

fn load(dst: u8, base: u8, off: i16) -> Insn {
    Insn::Load {
        size: Size::B,
        sign_extend: false,
        dst: Reg(dst),
        base: Reg(base),
        off,
    }
}

/// r1 = memory, r2 = its length. r3: the memory's end, r6: the first byte, r7: iterations,
/// r5, r8: scratch; the counter is r2, r4 or r9.
fn build(s: &Shape) -> Vec<Insn> {
    use AluOp::*;
    use Width::W64;
    let i = s.counter;
    let imm = Operand::Imm;
    let mut p = vec![
        load(6, 1, 0),
        alu(W64, Mov, 3, Operand::Reg(Reg(1))),
        alu(W64, Add, 3, Operand::Reg(Reg(2))),
        alu(W64, Mov, 7, imm(0)),
        alu(W64, Mov, 0, imm(0)),
        alu(W64, Mov, i, imm(s.before)),
    ];
    let mut prologue = Vec::new();
    if let Some(k) = s.start {
        prologue.push(alu(s.width, Mov, i, imm(k)));
    }
    if s.second_entry {
        // Odd first byte: enter the loop with the counter as it was.
        p.push(jmp(W64, JmpCond::Set, 6, imm(1), prologue.len() as i16));
    }
    p.extend(prologue);
    let mut body = Vec::new();
    if let Some((reach, form)) = s.bounds {
        // r5 = mem + i + reach; leave unless mem + 1 <= r5 <= mem + len (r3), then read
        // the byte below r5. The upper check in four equivalent forms.
        let upper = match form {
            0 => jmp(W64, JmpCond::Gt, 5, Operand::Reg(Reg(3)), i16::MAX),
            1 => jmp(W64, JmpCond::Lt, 3, Operand::Reg(Reg(5)), i16::MAX),
            2 => jmp(W64, JmpCond::Ge, 5, Operand::Reg(Reg(3)), i16::MAX),
            _ => jmp(W64, JmpCond::Le, 3, Operand::Reg(Reg(5)), i16::MAX),
        };
        body.extend([
            alu(W64, Mov, 5, Operand::Reg(Reg(1))),
            alu(W64, Add, 5, Operand::Reg(Reg(i))),
            alu(W64, Add, 5, imm(reach)),
            upper,
            alu(W64, Mov, 8, Operand::Reg(Reg(1))),
            alu(W64, Add, 8, imm(1)),
            jmp(W64, JmpCond::Lt, 5, Operand::Reg(Reg(8)), i16::MAX),
            load(8, 5, -1),
        ]);
    } else {
        body.extend([
            alu(W64, Mov, 8, Operand::Reg(Reg(i))),
            alu(W64, And, 8, imm(63)),
            alu(W64, Add, 8, Operand::Reg(Reg(1))),
            load(8, 8, 0),
        ]);
    }
    body.extend([
        alu(W64, Mul, 0, imm(3)),
        alu(W64, Add, 0, Operand::Reg(Reg(8))),
        alu(W64, Add, 0, Operand::Reg(Reg(i))),
        alu(W64, Add, 7, imm(1)),
        jmp(W64, JmpCond::Gt, 7, imm(s.max_iterations), i16::MAX),
        alu(s.width, if s.sub { Sub } else { Add }, i, imm(s.step)),
    ]);
    let head = p.len();
    p.extend(body);
    let latch = p.len();
    p.push(jmp(
        s.width,
        JmpCond::Ne,
        i,
        imm(s.end),
        head as i16 - latch as i16 - 1,
    ));
    let out = p.len();
    p.extend([
        alu(W64, Mul, 0, imm(31)),
        alu(W64, Xor, 0, Operand::Reg(Reg(i))),
        Insn::Exit,
    ]);
    // Exits (placeholder offsets) go to `out`.
    for (pc, insn) in p.iter_mut().enumerate() {
        if let Insn::Jmp { off, .. } = insn {
            if *off == i16::MAX {
                *off = (out - pc - 1) as i16;
            }
        }
    }
    p
}

fn value() -> impl Strategy<Value = i32> {
    prop_oneof![
        -4..70i32,
        Just(1024),
        Just(-1),
        Just(-16),
        Just(i32::MIN),
        Just(i32::MAX),
        any::<i32>(),
    ]
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        any::<bool>(),
        prop::sample::select(vec![2u8, 4, 9]),
        (value(), any::<bool>(), value()),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![1..5i32, -4..0i32, Just(7), Just(i32::MIN), any::<i32>()],
        value(),
        0..300i32,
        (any::<bool>(), 1..67i32, 0..4u8),
    )
        .prop_map(
            |(
                w32,
                counter,
                (before, set, k),
                second_entry,
                sub,
                step,
                end,
                max,
                (bounds, reach, form),
            )| Shape {
                width: if w32 { Width::W32 } else { Width::W64 },
                counter,
                before,
                start: set.then_some(k),
                second_entry,
                sub,
                step,
                end,
                max_iterations: max,
                bounds: bounds.then_some((reach, form)),
            },
        )
}

/// Loops that count exactly to their end: the cases the JIT changes.
fn exact_shape() -> impl Strategy<Value = Shape> {
    (shape(), 1..40i32).prop_map(|(mut s, trips)| {
        let k = s.start.unwrap_or(s.before);
        let step = if s.sub { s.step.wrapping_neg() } else { s.step };
        s.end = k.wrapping_add(step.wrapping_mul(trips));
        s
    })
}

/// Packet loops over the memory whose bounds check fits (or just misses) the memory for the
/// whole count: the cases where the JIT's unchecked (and unrolled, when the count is even)
/// copy runs, or its entry test just fails.
fn packet_shape() -> impl Strategy<Value = Shape> {
    (
        prop::sample::select(vec![4u8, 9]),
        0..16i32,
        1..5i32,
        1..13i32,
        0..4u8,
        -2..3i32,
        any::<bool>(),
    )
        .prop_map(|(counter, k, step, trips, form, slack, early)| {
            // The largest value checked is mem + (k + (trips - 1) * step) + reach: make it
            // end `slack` bytes before (or, negative, after) the memory's end.
            let last = k + (trips - 1) * step;
            let reach = (MEM as i32 - last - slack.max(0)).max(1) + slack.min(0).abs();
            Shape {
                width: Width::W64,
                counter,
                before: 0,
                start: Some(k),
                second_entry: false,
                sub: false,
                step,
                end: k + trips * step,
                max_iterations: if early { trips / 2 } else { 300 },
                bounds: Some((reach, form)),
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn counted_loops_match_the_interpreter(s in prop_oneof![shape(), exact_shape(), packet_shape()], seed in any::<u64>(), budget in any::<bool>()) {
        let insns = build(&s);
        let compiler = Compiler::new(Arch::HOST.unwrap()).unwrap();
        let init: Vec<u8> = (0..MEM as u64).map(|i| (seed.rotate_left(i as u32 * 5) ^ i) as u8).collect();
        let mut a = init.clone();
        let mut b = init;
        let want = interpret(&insns, &mut a);
        let (got, _) = jit(&compiler, Pipeline::Optimizing, &insns, &mut b, budget);
        prop_assert_eq!(got, want, "{:?}: {:?}", s, insns);
    }
}
