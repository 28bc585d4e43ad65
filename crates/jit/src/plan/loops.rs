//! Counted loops: which loop exit tests may compare with an ordering instead of `!=`.
//!
//! Clang closes a counted loop (`for (i = 0; i < n; i++)`) with `i += c; if i != N goto
//! head`. Cranelift's mid-end rewrites `(i + c) != N` into `i != N - c`, which compares the
//! *old* counter: the old and the new value are then both live at the branch, the new one
//! lands in another register and the back edge needs a register move and a jump of its own.
//! An ordered comparison is not rewritten that way (it would not be valid under wrap-around),
//! so where `i + c != N` is provably the same as `i + c < N` (or `>` counting down), the
//! latch is compiled as the ordered compare: `add; cmp; jb head`, the new counter in the old
//! one's register.
//!
//! The proof, per back edge `jne r, N` at slot `l` to the head `h` (all arithmetic in the
//! jump's width, `w` bits):
//! - the loop `h..=l` has one entry (no jump from outside lands in `h+1..=l`), and every
//!   jump inside it other than the latch goes forward (no inner loop);
//! - the only instruction of the loop that writes `r` is `add r, c` or `sub r, -c` (same
//!   width, constant `c != 0`) at slot `a`, and no forward jump skips it on the way to the latch (none from
//!   `h..a` lands in `a+1..=l`), so every iteration that reaches the latch added `c` exactly
//!   once;
//! - on every entry into the loop from outside, `r` holds a constant `K` (found in the
//!   straight-line code before the entry) with `K < N` and `c` dividing `N - K` (counting
//!   up), or `K > N` and `|c|` dividing `K - N` (counting down).
//!
//! Then at the latch `r` is one of `K + c, K + 2c, ..., N`: it starts from `K`, grows by `c`
//! once per completed iteration, and the loop is left as soon as it equals `N`. On that
//! sequence `r != N` and `r < N` (`r > N` counting down) agree, without any wrap-around.

use std::collections::HashMap;

use rdx_bpf::isa::{AluOp, ImmKind, Insn, JmpCond, Operand, Reg, Width};

use super::{uses_defs, FuncPlan};

/// A loop of one function closed by `jne counter, N` that counts exactly to `N` (see the
/// module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CountedLoop {
    pub head: usize,
    pub latch: usize,
    pub counter: Reg,
    pub width: Width,
    /// The ordered condition the latch's `jne` may be compiled as: [`JmpCond::Lt`] counting
    /// up, [`JmpCond::Gt`] counting down (both unsigned).
    pub ordered: JmpCond,
    /// The smallest and the largest value of the counter at the start of an iteration, in
    /// the loop's width (inclusive; every value in between is a multiple of the step away
    /// from a start value).
    pub first: u64,
    pub last: u64,
    /// From every start value the latch is reached an even number of times before it
    /// leaves (`(N - K) / c` even): at every odd-numbered arrival it goes back.
    pub even_trips: bool,
}

/// The jumps of `plan` (slot, target) and, per slot, whether one lands there.
fn jumps(insns: &[Insn], plan: FuncPlan) -> (Vec<(usize, usize)>, Vec<bool>) {
    let jumps: Vec<(usize, usize)> = (plan.start..plan.end)
        .filter_map(|pc| {
            let t = insns[pc].jump_target(pc)?;
            (t >= plan.start as i64 && t < plan.end as i64).then_some((pc, t as usize))
        })
        .collect();
    let mut targeted = vec![false; plan.end - plan.start];
    for &(_, t) in &jumps {
        targeted[t - plan.start] = true;
    }
    (jumps, targeted)
}

/// The counted loops of `plan`. `initial_zero` has bit `i` set when `ri` is zero on entry
/// to the function.
pub(crate) fn counted_loops(insns: &[Insn], plan: FuncPlan, initial_zero: u16) -> Vec<CountedLoop> {
    let (jumps, targeted) = jumps(insns, plan);
    let mut out = Vec::new();
    for &(l, h) in jumps.iter().filter(|(pc, t)| t <= pc) {
        let Insn::Jmp {
            width,
            cond: JmpCond::Ne,
            dst: r,
            src: Operand::Imm(n),
            ..
        } = insns[l]
        else {
            continue;
        };
        let body = h..=l;
        let irregular = jumps.iter().any(|&(j, t)| {
            if body.contains(&j) {
                j != l && t <= j
            } else {
                t > h && t <= l
            }
        });
        if irregular {
            continue;
        }
        let mut writes = body
            .clone()
            .filter(|&pc| uses_defs(&insns[pc]).1 & (1 << r.index()) != 0);
        let (Some(a), None) = (writes.next(), writes.next()) else {
            continue;
        };
        let Insn::Alu {
            width: add_width,
            op: op @ (AluOp::Add | AluOp::Sub),
            src: Operand::Imm(c),
            ..
        } = insns[a]
        else {
            continue;
        };
        if add_width != width {
            continue;
        }
        let c = if op == AluOp::Add {
            c as i64
        } else {
            -(c as i64)
        };
        if jumps
            .iter()
            .any(|&(j, t)| (h..a).contains(&j) && t > a && t <= l)
        {
            continue;
        }
        let mask = match width {
            Width::W64 => u64::MAX,
            Width::W32 => u32::MAX as u64,
        };
        let n = n as i64 as u64 & mask;
        // The step in the jump's width, and its direction there.
        let step = c as u64 & mask;
        let up = match width {
            Width::W64 => c > 0,
            Width::W32 => (step as u32 as i32) > 0,
        };
        if step == 0 {
            continue;
        }
        // Every way into the loop from outside: falling into the head, jumps to it.
        let mut entries: Vec<Option<usize>> = Vec::new();
        if h == plan.start {
            entries.push(None);
        } else if !matches!(insns[h - 1], Insn::Ja { .. } | Insn::Exit) {
            entries.push(Some(h - 1));
        }
        entries.extend(
            jumps
                .iter()
                .filter(|&&(j, t)| t == h && !body.contains(&j))
                .map(|&(j, _)| Some(j)),
        );
        let counts_to_n = |k: u64| {
            let k = k & mask;
            if up {
                k < n && (n - k).is_multiple_of(step)
            } else {
                let down = step.wrapping_neg() & mask;
                k > n && (k - n).is_multiple_of(down)
            }
        };
        let starts: Option<Vec<u64>> = entries
            .iter()
            .map(|&from| {
                let k = match from {
                    None => constant_at_entry(r, initial_zero),
                    Some(pc) => constant_before(insns, plan, &targeted, pc, r, initial_zero),
                }?;
                counts_to_n(k).then_some(k & mask)
            })
            .collect();
        let Some(starts) = starts else {
            continue;
        };
        let (Some(&low), Some(&high)) = (starts.iter().min(), starts.iter().max()) else {
            continue;
        };
        let down = step.wrapping_neg() & mask;
        let even_trips = starts.iter().all(|&k| {
            let trips = if up { (n - k) / step } else { (k - n) / down };
            trips % 2 == 0
        });
        let (ordered, first, last) = if up {
            (JmpCond::Lt, low, n - step)
        } else {
            (
                JmpCond::Gt,
                n.wrapping_add(step.wrapping_neg()) & mask,
                high,
            )
        };
        out.push(CountedLoop {
            head: h,
            latch: l,
            counter: r,
            width,
            ordered,
            first,
            last,
            even_trips,
        });
    }
    out
}

/// A counted loop compiled twice: as it is, and a copy without the bounds checks that are
/// decided for every iteration once [`Versioned::bounds`] hold on entry. The entry tests
/// them and runs the copy when they all hold, the loop as it is otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Versioned {
    pub head: usize,
    pub latch: usize,
    /// Slot of each check the copy leaves out → whether it jumps (`true`) or falls through
    /// on every iteration.
    pub checks: HashMap<usize, bool>,
    pub bounds: Vec<Bound>,
    /// The copy runs two iterations per trip round its loop: the first one's latch goes on
    /// to the second without a test ([`CountedLoop::even_trips`]).
    pub unroll: bool,
}

/// `value + offset <= limit` (`<` when `strict`) for every `offset` in `low..=high`, where
/// `value` and `limit` are registers the loop does not write (read on entry) or zero: true
/// when `value + low <= value + high` (no wrap-around in between) and `value + high` is
/// below the limit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Bound {
    pub value: Option<Reg>,
    pub low: u64,
    pub high: u64,
    pub limit: Option<Reg>,
    pub limit_offset: u64,
    pub strict: bool,
}

/// What a register holds at a slot of a loop, in terms of values fixed on entry:
/// `base + counter + offset` (64-bit, wrapping), where `base` is a register the loop never
/// writes and `counter` the counter's value at the start of the iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sym {
    Unknown,
    Affine {
        base: Option<Reg>,
        counter: bool,
        offset: u64,
    },
}

impl Sym {
    fn constant(k: u64) -> Self {
        Sym::Affine {
            base: None,
            counter: false,
            offset: k,
        }
    }

    fn add(self, other: Sym) -> Sym {
        match (self, other) {
            (
                Sym::Affine {
                    base: b1,
                    counter: c1,
                    offset: o1,
                },
                Sym::Affine {
                    base: b2,
                    counter: c2,
                    offset: o2,
                },
            ) if (b1.is_none() || b2.is_none()) && !(c1 && c2) => Sym::Affine {
                base: b1.or(b2),
                counter: c1 || c2,
                offset: o1.wrapping_add(o2),
            },
            _ => Sym::Unknown,
        }
    }
}

/// Loops longer than this are not duplicated.
const MAX_VERSIONED_SLOTS: usize = 256;

/// Counted loops whose packet-style bounds checks can be decided once on entry: a 64-bit
/// unsigned compare, in the straight-line code that starts the loop, of `base + counter + k`
/// against a value fixed for the whole loop (`limit + k'`). The counter runs through
/// `first..=last` (64-bit counters only, so the register holds exactly the counted value),
/// so the compared value runs through `base + k + first ..= base + k + last`; when that
/// range does not wrap around and its top is below the limit, the check goes the same way on
/// every iteration.
pub(crate) fn versioned_loops(
    insns: &[Insn],
    plan: FuncPlan,
    counted: &[CountedLoop],
) -> Vec<Versioned> {
    let (_, targeted) = jumps(insns, plan);
    let mut out = Vec::new();
    for lp in counted {
        if lp.width != Width::W64 || lp.latch + 1 - lp.head > MAX_VERSIONED_SLOTS {
            continue;
        }
        let written = (lp.head..=lp.latch).fold(0u16, |acc, pc| acc | uses_defs(&insns[pc]).1);
        let mut state = [Sym::Unknown; 11];
        for (i, s) in state.iter_mut().enumerate() {
            if written & (1 << i) == 0 {
                *s = Sym::Affine {
                    base: Some(Reg(i as u8)),
                    counter: false,
                    offset: 0,
                };
            }
        }
        state[lp.counter.index()] = Sym::Affine {
            base: None,
            counter: true,
            offset: 0,
        };
        let mut checks = HashMap::new();
        let mut bounds = Vec::new();
        let mut pc = lp.head;
        while pc < lp.latch {
            if pc > lp.head && targeted[pc - plan.start] {
                break;
            }
            let insn = insns[pc];
            match insn {
                Insn::Jmp {
                    width: Width::W64,
                    cond,
                    dst,
                    src,
                    ..
                } => {
                    let b = match src {
                        Operand::Reg(r) => state[r.index()],
                        Operand::Imm(k) => Sym::constant(k as i64 as u64),
                    };
                    let target = insn.jump_target(pc).unwrap_or(0);
                    let stays = |taken: bool| {
                        !taken || (lp.head as i64..=lp.latch as i64).contains(&target)
                    };
                    // Only checks decided in the loop's favour: a bound that holds when the
                    // loop is left at once would make the copy run only when that exit is
                    // taken, keeping every other check in the loop for nothing.
                    if let Some((taken, bound)) =
                        decide(cond, state[dst.index()], b, lp).filter(|(taken, _)| stays(*taken))
                    {
                        checks.insert(pc, taken);
                        if !bounds.contains(&bound) {
                            bounds.push(bound);
                        }
                    }
                }
                Insn::Ja { .. } | Insn::Exit => break,
                _ => step(&mut state, &insn),
            }
            pc += if matches!(insn, Insn::LoadImm64 { .. }) {
                2
            } else {
                1
            };
        }
        if !checks.is_empty() {
            out.push(Versioned {
                head: lp.head,
                latch: lp.latch,
                checks,
                bounds,
                unroll: lp.even_trips,
            });
        }
    }
    out
}

/// How `insn` changes what registers hold.
fn step(state: &mut [Sym; 11], insn: &Insn) {
    let defs = uses_defs(insn).1;
    let new = match *insn {
        Insn::Alu {
            width: Width::W64,
            op,
            dst,
            src,
        } => {
            let s = match src {
                Operand::Reg(r) => state[r.index()],
                Operand::Imm(k) => Sym::constant(k as i64 as u64),
            };
            let d = state[dst.index()];
            let v = match op {
                AluOp::Mov => s,
                AluOp::Add => d.add(s),
                AluOp::Sub => match s {
                    Sym::Affine {
                        base: None,
                        counter: false,
                        offset,
                    } => d.add(Sym::constant(offset.wrapping_neg())),
                    _ => Sym::Unknown,
                },
                _ => Sym::Unknown,
            };
            Some((dst, v))
        }
        _ => None,
    };
    for (i, s) in state.iter_mut().enumerate().take(10) {
        if defs & (1 << i) != 0 {
            *s = Sym::Unknown;
        }
    }
    if let Some((dst, v)) = new {
        state[dst.index()] = v;
    }
}

/// Whether a 64-bit unsigned compare of `a` with `b` goes the same way on every iteration of
/// `lp` once a [`Bound`] holds: the direction (taken or not) and that bound.
fn decide(cond: JmpCond, a: Sym, b: Sym, lp: &CountedLoop) -> Option<(bool, Bound)> {
    // `moving cmp fixed`, or swapped: `fixed cmp moving` as `moving cmp' fixed`.
    let (moving, fixed, cond) = match (a, b) {
        (Sym::Affine { counter: true, .. }, Sym::Affine { counter: false, .. }) => (a, b, cond),
        (Sym::Affine { counter: false, .. }, Sym::Affine { counter: true, .. }) => {
            let swapped = match cond {
                JmpCond::Gt => JmpCond::Lt,
                JmpCond::Ge => JmpCond::Le,
                JmpCond::Lt => JmpCond::Gt,
                JmpCond::Le => JmpCond::Ge,
                _ => return None,
            };
            (b, a, swapped)
        }
        _ => return None,
    };
    let (
        Sym::Affine {
            base: value,
            offset,
            ..
        },
        Sym::Affine {
            base: limit,
            offset: limit_offset,
            ..
        },
    ) = (moving, fixed)
    else {
        return None;
    };
    // With every compared value at most the limit (`strict`: below it):
    let (taken, strict) = match cond {
        JmpCond::Gt => (false, false), // moving > fixed never holds
        JmpCond::Ge => (false, true),  // moving >= fixed never holds
        JmpCond::Le => (true, false),  // moving <= fixed always holds
        JmpCond::Lt => (true, true),   // moving < fixed always holds
        _ => return None,
    };
    Some((
        taken,
        Bound {
            value,
            low: offset.wrapping_add(lp.first),
            high: offset.wrapping_add(lp.last),
            limit,
            limit_offset,
            strict,
        },
    ))
}

fn constant_at_entry(r: Reg, initial_zero: u16) -> Option<u64> {
    (initial_zero & (1 << r.index()) != 0).then_some(0)
}

/// The constant `r` holds once slot `pc` has run (a jump: when it is taken), if the
/// straight-line code leading there sets it to one on every path.
fn constant_before(
    insns: &[Insn],
    plan: FuncPlan,
    targeted: &[bool],
    mut pc: usize,
    r: Reg,
    initial_zero: u16,
) -> Option<u64> {
    loop {
        if insns[pc] == Insn::LoadImm64Hi {
            // The second slot of an lddw: the instruction is the slot before.
            if pc == plan.start {
                return None;
            }
            pc -= 1;
        }
        let insn = insns[pc];
        if uses_defs(&insn).1 & (1 << r.index()) != 0 {
            return match insn {
                Insn::Alu {
                    width,
                    op: AluOp::Mov,
                    src: Operand::Imm(k),
                    ..
                } => Some(match width {
                    Width::W64 => k as i64 as u64,
                    Width::W32 => k as u32 as u64,
                }),
                Insn::LoadImm64 {
                    kind: ImmKind::Imm,
                    imm_lo,
                    imm_hi,
                    ..
                } => Some(Insn::imm64(imm_lo, imm_hi)),
                _ => None,
            };
        }
        // Only straight-line code: stop where other paths join.
        if targeted[pc - plan.start] {
            return None;
        }
        if pc == plan.start {
            return constant_at_entry(r, initial_zero);
        }
        if matches!(insns[pc - 1], Insn::Ja { .. } | Insn::Exit) {
            return None;
        }
        pc -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latches(src: &str) -> HashMap<usize, JmpCond> {
        let insns = rdx_bpf::asm::assemble(src).unwrap();
        let plan = FuncPlan {
            start: 0,
            end: insns.len(),
        };
        counted_loops(&insns, plan, 0b11_1111_1101)
            .into_iter()
            .map(|l| (l.latch, l.ordered))
            .collect()
    }

    #[test]
    fn counting_up_and_down() {
        let up = "mov %r2, 0\nmov %r0, 0\nadd %r0, %r2\nadd %r2, 2\njne %r2, 1024, -3\nexit";
        assert_eq!(latches(up), HashMap::from([(4, JmpCond::Lt)]));
        let down = "mov %r2, 30\nmov %r0, 0\nadd %r0, %r2\nadd %r2, -3\njne %r2, 0, -3\nexit";
        assert_eq!(latches(down), HashMap::from([(4, JmpCond::Gt)]));
        // r3 starts at zero in the entry function.
        let initial = "add %r0, %r3\nadd %r3, 1\njne %r3, 7, -3\nexit";
        assert_eq!(latches(initial), HashMap::from([(2, JmpCond::Lt)]));
        let sub32 = "mov32 %r4, 10\nsub32 %r4, 1\njne32 %r4, 0, -2\nexit";
        assert_eq!(latches(sub32), HashMap::from([(2, JmpCond::Gt)]));
    }

    #[test]
    fn not_a_counted_loop() {
        for src in [
            // The step does not divide the distance: the counter passes N.
            "mov %r2, 0\nadd %r2, 3\njne %r2, 1024, -2\nexit",
            // Starts at or beyond N.
            "mov %r2, 1024\nadd %r2, 2\njne %r2, 1024, -2\nexit",
            "mov %r2, 2000\nadd %r2, 2\njne %r2, 1024, -2\nexit",
            // Unknown start (r1 is the context).
            "add %r1, 2\njne %r1, 1024, -2\nexit",
            // Written twice in the loop.
            "mov %r2, 0\nadd %r2, 1\nadd %r2, 1\njne %r2, 10, -3\nexit",
            // The increment can be skipped.
            "mov %r2, 0\njeq %r0, 0, +1\nadd %r2, 1\njne %r2, 10, -4\nexit",
            // Another entry into the middle of the loop.
            "mov %r2, 0\njeq %r1, 0, +1\nadd %r2, 1\njne %r2, 10, -2\nexit",
            // A 32-bit step on a 64-bit test.
            "mov %r2, 0\nadd32 %r2, 1\njne %r2, 10, -2\nexit",
            // Start set on one path only.
            "jeq %r1, 0, +1\nmov %r2, 5\nadd %r2, 2\njne %r2, 10, -2\nexit",
        ] {
            assert_eq!(latches(src), HashMap::new(), "{src}");
        }
    }

    fn versioned(src: &str) -> Vec<Versioned> {
        let insns = rdx_bpf::asm::assemble(src).unwrap();
        let plan = FuncPlan {
            start: 0,
            end: insns.len(),
        };
        versioned_loops(&insns, plan, &counted_loops(&insns, plan, 0b11_1111_1101))
    }

    #[test]
    fn packet_bounds_decided_on_entry() {
        // clang's checksum loop: r4 = data, r3 = data_end, r2 counts 0, 2, ..., 1022.
        let checksum = "mov %r2, 0\nldxw %r3, [%r1+4]\nldxw %r4, [%r1]\nmov %r1, 0
            mov %r5, %r4\nadd %r5, %r2\nmov %r0, %r5\nadd %r0, 16\njgt %r0, %r3, +4
            ldxh %r5, [%r5+14]\nadd %r1, %r5\nadd %r2, 2\njne %r2, 1024, -9\nmov %r0, %r1\nexit";
        let bound = Bound {
            value: Some(Reg(4)),
            low: 16,
            high: 16 + 1022,
            limit: Some(Reg(3)),
            limit_offset: 0,
            strict: false,
        };
        assert_eq!(
            versioned(checksum),
            vec![Versioned {
                head: 4,
                latch: 12,
                checks: HashMap::from([(8, false)]),
                bounds: vec![bound.clone()],
                unroll: true,
            }]
        );
        // The same check written `data_end < r0`, and `>=` (strict).
        let swapped = checksum.replace("jgt %r0, %r3", "jlt %r3, %r0");
        assert_eq!(versioned(&swapped)[0].bounds, vec![bound.clone()]);
        let strict = checksum.replace("jgt %r0, %r3", "jge %r0, %r3");
        assert!(versioned(&strict)[0].bounds[0].strict);
        // A check the loop's favour does not decide (it would hold only when leaving).
        let lower = checksum.replace("jgt %r0, %r3", "jlt %r0, %r3");
        assert_eq!(versioned(&lower), vec![]);
        // The limit moves in the loop.
        let moving = checksum.replace("add %r1, %r5", "add %r3, %r5");
        assert_eq!(versioned(&moving), vec![]);
        // Twice the counter is not a range this knows.
        let scaled = checksum.replace("add %r5, %r2", "add %r5, %r2\nadd %r5, %r2");
        let scaled = scaled.replace("+4", "+5").replace("-9", "-10");
        assert_eq!(versioned(&scaled), vec![]);
    }
}
