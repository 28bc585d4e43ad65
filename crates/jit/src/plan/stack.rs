//! Which parts of an eBPF function's 512-byte stack can live in SSA values instead of memory.
//!
//! eBPF code reaches its stack only through pointers derived from `r10`. A forward dataflow
//! over the function tracks, for every register, whether it holds `r10 + k` for a known
//! constant `k`. If no such pointer ever *escapes* — is passed to a call, stored to memory,
//! combined with a non-constant, narrowed, compared, returned, or used by an atomic — then
//! every access to the frame is known exactly: its byte range and the instruction doing it.
//! A byte range that every access touching it reads or writes whole (same offset, same size)
//! is then a plain variable; Cranelift keeps it in a register, and a frame with no other
//! accesses needs no stack memory at all.
//!
//! When any pointer escapes, the analysis gives up for the whole function and the frame stays
//! in memory, exactly as before. Elite (deoptimisable) code never uses it: its frames must
//! be in the `DeoptRunState` where the interpreter resumes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rdx_bpf::isa::{AluOp, AtomicOp, CallTarget, Insn, Operand, Reg, Size, Width, STACK_SIZE};

use super::FuncPlan;

/// What the analysis knows about one register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Abs {
    /// Not a pointer into this frame (anything else: scalars, context, packet, map values).
    Other,
    /// `r10 + k`: a pointer into (or near) this frame at a known offset from its top.
    Frame(i64),
    /// Differs between paths that merge here; fine as long as nothing reads it.
    Mixed,
}

/// The frame accesses of one function, when no pointer into its frame escapes.
#[derive(Debug, Default)]
pub(crate) struct StackPlan {
    /// Slot of each load or store through a frame pointer → its byte offset from the frame's
    /// base (`0..512`).
    pub access: HashMap<usize, i32>,
    /// Slot of each inlined array lookup whose key pointer is a frame pointer → the key's
    /// byte offset from the frame's base.
    pub lookup_key: HashMap<usize, i32>,
    /// Byte ranges (offset from the frame's base → access size) kept in variables.
    pub promoted: BTreeMap<i32, Size>,
    /// Whether some frame access remains in memory (the frame then needs its stack slot).
    pub needs_memory: bool,
}

/// Successor slots of `pc` inside `plan`.
fn successors(insns: &[Insn], pc: usize) -> [Option<usize>; 2] {
    let insn = &insns[pc];
    let target = insn.jump_target(pc).map(|t| t as usize);
    match insn {
        Insn::Exit => [None, None],
        Insn::Ja { .. } => [target, None],
        Insn::MayGoto { .. } => [target, Some(pc + 1)],
        Insn::Jmp { .. } => [target, Some(pc + 1)],
        Insn::LoadImm64 { .. } => [Some(pc + 2), None],
        _ => [Some(pc + 1), None],
    }
}

/// Why the analysis stopped: a frame pointer escapes (the frame stays in memory).
struct Escapes;

/// Analyses function `plan` (only slots with `live[pc - start]`). `inline_lookup(pc)` says
/// whether the call at `pc` is compiled as an inlined array lookup, which reads its 4-byte key
/// through `r2` and nothing else.
pub(crate) fn plan_stack(
    insns: &[Insn],
    plan: FuncPlan,
    live: &[bool],
    inline_lookup: impl Fn(usize) -> bool,
) -> Option<StackPlan> {
    analyse(insns, plan, live, inline_lookup).ok()
}

fn analyse(
    insns: &[Insn],
    plan: FuncPlan,
    live: &[bool],
    inline_lookup: impl Fn(usize) -> bool,
) -> Result<StackPlan, Escapes> {
    let n = plan.end - plan.start;
    let mut states: Vec<Option<[Abs; 11]>> = vec![None; n];
    let mut entry = [Abs::Other; 11];
    entry[10] = Abs::Frame(0);
    states[0] = Some(entry);
    let mut work = vec![plan.start];
    let mut out = StackPlan::default();
    // (offset from the frame's base, size) of every access.
    let mut ranges: BTreeSet<(i32, usize)> = BTreeSet::new();
    let frame_range = |k: i64, size: Size| -> Result<i32, Escapes> {
        let at = STACK_SIZE as i64 + k;
        if at >= 0 && at + size.bytes() as i64 <= STACK_SIZE as i64 {
            Ok(at as i32)
        } else {
            Err(Escapes)
        }
    };

    while let Some(pc) = work.pop() {
        let mut s = states[pc - plan.start].expect("queued slots have a state");
        // Reading a register: a pointer into the frame may only be read where the transfer
        // below says so; `use_plain` is every other read.
        let use_plain = |s: &[Abs; 11], r: Reg| -> Result<(), Escapes> {
            match s[r.index()] {
                Abs::Other => Ok(()),
                _ => Err(Escapes),
            }
        };
        let op_plain = |s: &[Abs; 11], o: &Operand| match o {
            Operand::Reg(r) => use_plain(s, *r),
            Operand::Imm(_) => Ok(()),
        };
        match &insns[pc] {
            Insn::Alu {
                width: Width::W64,
                op: AluOp::Mov,
                dst,
                src: Operand::Reg(src),
            } => {
                if s[src.index()] == Abs::Mixed {
                    return Err(Escapes);
                }
                s[dst.index()] = s[src.index()];
            }
            Insn::Alu {
                width: Width::W64,
                op: op @ (AluOp::Add | AluOp::Sub),
                dst,
                src: Operand::Imm(k),
            } if matches!(s[dst.index()], Abs::Frame(_)) => {
                let Abs::Frame(base) = s[dst.index()] else {
                    unreachable!("matched above")
                };
                let k = *k as i64;
                s[dst.index()] = Abs::Frame(if *op == AluOp::Add {
                    base + k
                } else {
                    base - k
                });
            }
            Insn::Alu { op, dst, src, .. } => {
                if !matches!(op, AluOp::Mov | AluOp::MovSx(_)) {
                    use_plain(&s, *dst)?;
                }
                op_plain(&s, src)?;
                s[dst.index()] = Abs::Other;
            }
            Insn::Endian { dst, .. } => {
                use_plain(&s, *dst)?;
                s[dst.index()] = Abs::Other;
            }
            Insn::Jmp { dst, src, .. } => {
                use_plain(&s, *dst)?;
                op_plain(&s, src)?;
            }
            Insn::Ja { .. } | Insn::MayGoto { .. } => {}
            Insn::Load {
                size,
                dst,
                base,
                off,
                ..
            } => {
                match s[base.index()] {
                    Abs::Frame(k) => {
                        let at = frame_range(k + *off as i64, *size)?;
                        out.access.insert(pc, at);
                        ranges.insert((at, size.bytes()));
                    }
                    Abs::Mixed => return Err(Escapes),
                    Abs::Other => {}
                }
                s[dst.index()] = Abs::Other;
            }
            Insn::Store {
                size,
                base,
                off,
                src,
            } => {
                op_plain(&s, src)?;
                match s[base.index()] {
                    Abs::Frame(k) => {
                        let at = frame_range(k + *off as i64, *size)?;
                        out.access.insert(pc, at);
                        ranges.insert((at, size.bytes()));
                    }
                    Abs::Mixed => return Err(Escapes),
                    Abs::Other => {}
                }
            }
            Insn::Atomic { op, base, src, .. } => {
                use_plain(&s, *base)?;
                use_plain(&s, *src)?;
                // The fetch forms write `src` (already a plain value); `cmpxchg` also reads
                // and writes r0.
                if *op == AtomicOp::CmpXchg {
                    use_plain(&s, Reg(0))?;
                    s[0] = Abs::Other;
                }
            }
            Insn::LoadImm64 { dst, .. } => s[dst.index()] = Abs::Other,
            Insn::LoadImm64Hi => {}
            Insn::Call(CallTarget::Helper(_)) if inline_lookup(pc) => {
                match s[2] {
                    Abs::Frame(k) => {
                        let at = frame_range(k, Size::W)?;
                        out.lookup_key.insert(pc, at);
                        ranges.insert((at, Size::W.bytes()));
                    }
                    Abs::Mixed => return Err(Escapes),
                    Abs::Other => {}
                }
                // The inline code writes r0 and leaves r1..r5 as they are.
                s[0] = Abs::Other;
            }
            Insn::Call(target) => {
                for r in 1..=5 {
                    use_plain(&s, Reg(r))?;
                }
                if let CallTarget::Reg(r) = target {
                    use_plain(&s, *r)?;
                }
                for r in s.iter_mut().take(6) {
                    *r = Abs::Other;
                }
            }
            Insn::Exit => use_plain(&s, Reg(0))?,
        }
        for next in successors(insns, pc).into_iter().flatten() {
            if next < plan.start || next >= plan.end || !live[next - plan.start] {
                continue;
            }
            let slot = &mut states[next - plan.start];
            match slot {
                None => {
                    *slot = Some(s);
                    work.push(next);
                }
                Some(old) => {
                    let mut changed = false;
                    for (o, new) in old.iter_mut().zip(s) {
                        if *o != new && *o != Abs::Mixed {
                            *o = Abs::Mixed;
                            changed = true;
                        }
                    }
                    if changed {
                        work.push(next);
                    }
                }
            }
        }
    }

    // A range is promoted when every access that overlaps it is exactly it.
    let list: Vec<(i32, usize)> = ranges.into_iter().collect();
    let overlaps =
        |a: (i32, usize), b: (i32, usize)| a.0 < b.0 + b.1 as i32 && b.0 < a.0 + a.1 as i32;
    for &a in &list {
        if list.iter().all(|&b| a == b || !overlaps(a, b)) {
            let size = match a.1 {
                1 => Size::B,
                2 => Size::H,
                4 => Size::W,
                _ => Size::DW,
            };
            out.promoted.insert(a.0, size);
        } else {
            out.needs_memory = true;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdx_bpf::asm::assemble;

    fn run(src: &str, inline: &[usize]) -> Option<StackPlan> {
        let insns = assemble(src).unwrap();
        let plan = FuncPlan {
            start: 0,
            end: insns.len(),
        };
        let live = vec![true; insns.len()];
        plan_stack(&insns, plan, &live, |pc| inline.contains(&pc))
    }

    #[test]
    fn constant_offsets_are_promoted() {
        let p = run(
            "stxdw [%r10-8], %r1\nstw [%r10-12], 7\nldxdw %r0, [%r10-8]\nldxw %r2, [%r10-12]\nadd %r0, %r2\nexit",
            &[],
        )
        .unwrap();
        assert_eq!(
            p.promoted.into_iter().collect::<Vec<_>>(),
            vec![(500, Size::W), (504, Size::DW)]
        );
        assert!(!p.needs_memory);
    }

    #[test]
    fn overlapping_accesses_stay_in_memory() {
        let p = run(
            "stxdw [%r10-8], %r1\nstw [%r10-16], 1\nldxw %r0, [%r10-8]\nldxw %r2, [%r10-16]\nexit",
            &[],
        )
        .unwrap();
        assert_eq!(
            p.promoted.into_iter().collect::<Vec<_>>(),
            vec![(496, Size::W)]
        );
        assert!(p.needs_memory);
    }

    #[test]
    fn derived_pointers_are_followed() {
        let p = run(
            "mov %r2, %r10\nadd %r2, -8\nstxdw [%r2+0], %r1\nsub %r2, 8\nldxdw %r0, [%r2+8]\nexit",
            &[],
        )
        .unwrap();
        assert_eq!(p.access.get(&2), Some(&504));
        assert_eq!(p.access.get(&4), Some(&504));
        assert!(p.promoted.contains_key(&504));
    }

    #[test]
    fn escaping_pointers_keep_the_frame_in_memory() {
        // Passed to a helper.
        assert!(run("mov %r1, %r10\nadd %r1, -8\ncall 1\nexit", &[]).is_none());
        // The same call inlined reads only the key through r2: r1 is not read.
        assert!(run("mov %r2, %r10\nadd %r2, -4\ncall 1\nexit", &[2]).is_some());
        // Stored to memory.
        assert!(run("stxdw [%r10-8], %r10\nmov %r0, 0\nexit", &[]).is_none());
        // Variable offset.
        assert!(run("mov %r1, %r10\nadd %r1, %r0\nldxb %r0, [%r1-1]\nexit", &[]).is_none());
        // Narrowed.
        assert!(run("mov32 %r1, %r10\nmov %r0, 0\nexit", &[]).is_none());
        // Returned.
        assert!(run("mov %r0, %r10\nexit", &[]).is_none());
        // An atomic leaves a frame pointer in r0 a frame pointer: r0's load below is a
        // frame access, not a plain one.
        let p = run(
            "mov %r0, %r10\nstdw [%r10-8], 1\nlock add [%r1+0], %r2\nldxdw %r3, [%r0-8]\nmov %r0, 0\nexit",
            &[],
        )
        .unwrap();
        assert_eq!(p.access.get(&3), Some(&504));
        // cmpxchg compares r0 with memory: a frame pointer there escapes.
        assert!(run(
            "mov %r0, %r10\nlock cmpxchg [%r1+0], %r2\nmov %r0, 0\nexit",
            &[]
        )
        .is_none());
        // Outside the frame.
        assert!(run("ldxdw %r0, [%r10+0]\nexit", &[]).is_none());
        // A frame pointer on one path only, then read.
        assert!(run(
            "jeq %r1, 0, +1\nmov %r2, %r10\nldxdw %r0, [%r2-8]\nexit",
            &[]
        )
        .is_none());
        // ... but never read after the merge: fine.
        assert!(run("jeq %r1, 0, +1\nmov %r2, %r10\nmov %r0, 0\nexit", &[]).is_some());
    }
}
