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

use crate::translate::{uses_defs, FuncPlan};

/// Latches of `plan` whose `jne` may be compiled as the returned ordered condition
/// ([`JmpCond::Lt`] counting up, [`JmpCond::Gt`] counting down; both unsigned).
/// `initial_zero` has bit `i` set when `ri` is zero on entry to the function.
pub(crate) fn ordered_latches(
    insns: &[Insn],
    plan: FuncPlan,
    initial_zero: u16,
) -> HashMap<usize, JmpCond> {
    let range = plan.start..plan.end;
    let jumps: Vec<(usize, usize)> = range
        .clone()
        .filter_map(|pc| {
            let t = insns[pc].jump_target(pc)?;
            (t >= plan.start as i64 && t < plan.end as i64).then_some((pc, t as usize))
        })
        .collect();
    let mut targeted = vec![false; plan.end - plan.start];
    for &(_, t) in &jumps {
        targeted[t - plan.start] = true;
    }
    let mut out = HashMap::new();
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
        let all = entries.iter().all(|&from| {
            let k = match from {
                None => constant_at_entry(r, initial_zero),
                Some(pc) => constant_before(insns, plan, &targeted, pc, r, initial_zero),
            };
            k.is_some_and(counts_to_n)
        });
        if all {
            out.insert(l, if up { JmpCond::Lt } else { JmpCond::Gt });
        }
    }
    out
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
        ordered_latches(&insns, plan, 0b11_1111_1101)
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
}
