//! Planning: what the compiler learns about a program before it emits any code. For both
//! code generators (Cranelift's [`crate::translate`] and [`crate::baseline`]): the eBPF
//! functions and their call depth, and the options a program is really compiled with. For
//! the Cranelift translation: an elite build's guards checked, the slots that run past
//! them, the registers live at each slot, the counted loops ([`loops`]) and the frame bytes
//! that can live in registers ([`stack`]). It reads [`crate::options`] and emits nothing.

pub(crate) mod loops;
pub(crate) mod stack;

use std::collections::BTreeSet;

use rdx_bpf::isa::{AluOp, AtomicOp, CallTarget, Insn, Operand, Reg};

use crate::error::CompileError;
use crate::options::{CompileOptions, Expect};

/// One eBPF function: slots `start..end` of the program.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FuncPlan {
    /// Its first slot (the entry, or a local-call target).
    pub start: usize,
    /// One past its last slot: the next function's start, or the program's end.
    pub end: usize,
}

/// Finds the eBPF functions: the entry at 0 and every local-call target, each running up to
/// the next function's start.
pub(crate) fn plan_functions(insns: &[Insn]) -> Result<Vec<FuncPlan>, CompileError> {
    let mut starts = BTreeSet::new();
    starts.insert(0usize);
    for (pc, insn) in insns.iter().enumerate() {
        if let Some(t) = insn.call_target(pc) {
            if t < 0 || t as usize >= insns.len() {
                return Err(CompileError::Unsupported {
                    pc,
                    what: format!("call to {t} outside the program"),
                });
            }
            starts.insert(t as usize);
        }
    }
    let starts: Vec<usize> = starts.into_iter().collect();
    let plans: Vec<FuncPlan> = starts
        .iter()
        .enumerate()
        .map(|(i, &start)| FuncPlan {
            start,
            end: starts.get(i + 1).copied().unwrap_or(insns.len()),
        })
        .collect();
    for plan in &plans {
        for (pc, insn) in insns.iter().enumerate().take(plan.end).skip(plan.start) {
            if let Some(t) = insn.jump_target(pc) {
                if t < plan.start as i64 || t >= plan.end as i64 {
                    return Err(CompileError::JumpOutsideFunction {
                        pc,
                        target: t,
                        function: plan.start,
                    });
                }
            }
        }
    }
    Ok(plans)
}

fn function_index(plans: &[FuncPlan], start: usize) -> usize {
    plans
        .binary_search_by_key(&start, |p| p.start)
        .expect("call targets are function starts")
}

/// Longest chain of frames (entry = 1); refuses recursion, which eBPF forbids and which would
/// make stack use unbounded.
pub(crate) fn max_call_depth(plans: &[FuncPlan], insns: &[Insn]) -> Result<usize, CompileError> {
    fn visit(
        f: usize,
        plans: &[FuncPlan],
        insns: &[Insn],
        on_path: &mut Vec<bool>,
        memo: &mut Vec<Option<usize>>,
    ) -> Result<usize, CompileError> {
        if let Some(d) = memo[f] {
            return Ok(d);
        }
        on_path[f] = true;
        let mut deepest = 0;
        for (pc, insn) in insns
            .iter()
            .enumerate()
            .take(plans[f].end)
            .skip(plans[f].start)
        {
            if let Some(t) = insn.call_target(pc) {
                let g = function_index(plans, t as usize);
                if on_path[g] {
                    return Err(CompileError::Recursion {
                        pc,
                        function: plans[g].start,
                    });
                }
                deepest = deepest.max(visit(g, plans, insns, on_path, memo)?);
            }
        }
        on_path[f] = false;
        memo[f] = Some(deepest + 1);
        Ok(deepest + 1)
    }
    let mut on_path = vec![false; plans.len()];
    let mut memo = vec![None; plans.len()];
    visit(0, plans, insns, &mut on_path, &mut memo)
}

/// The index in `plans` of the function a local call to slot `start` enters.
pub(crate) fn callee_index(plans: &[FuncPlan], start: usize) -> usize {
    function_index(plans, start)
}

/// Checks an elite build against the program: every guard is a conditional jump, and the
/// deepest chain of `depth` frames fits in a [`rdx_region::abi::DeoptRunState`].
pub(crate) fn check_speculation(
    insns: &[Insn],
    opts: &CompileOptions,
    depth: usize,
) -> Result<(), CompileError> {
    let Some(spec) = opts.speculation() else {
        return Ok(());
    };
    for &pc in spec.guards.keys() {
        match insns.get(pc) {
            Some(Insn::Jmp { .. }) => {}
            other => {
                return Err(CompileError::BadGuard {
                    pc,
                    what: other.map_or("outside the program".into(), |i| format!("{i:?}")),
                })
            }
        }
    }
    if depth > rdx_region::abi::DEOPT_MAX_FRAMES {
        return Err(CompileError::Unsupported {
            pc: 0,
            what: format!("{depth} nested frames in an elite artifact"),
        });
    }
    Ok(())
}

/// `call` immediate of `tail_call` (a constant, for patterns).
pub(crate) const BPF_FUNC_TAIL_CALL: i32 = rdx_region::helpers::HelperId::TAIL_CALL.imm();

/// Whether `insn` may make a tail call: a call of `bpf_tail_call`, or a `callx`, whose
/// helper id is only known at run time.
pub(crate) fn may_tail_call(insn: &Insn) -> bool {
    matches!(
        insn,
        Insn::Call(CallTarget::Helper(BPF_FUNC_TAIL_CALL) | CallTarget::Reg(_))
    )
}

/// The options a program is really compiled with: metering is forced on when the program
/// may make a tail call. A tail call runs its target on the run's one budget, so the
/// caller's own instructions must be charged to it too, whatever the verifier found its own
/// worst case to be (a caller that is not metered would let every link of a chain spend a
/// whole budget).
pub(crate) fn effective_options<'o>(
    opts: &'o CompileOptions,
    insns: &[Insn],
) -> std::borrow::Cow<'o, CompileOptions> {
    if !opts.needs_budget && insns.iter().any(may_tail_call) {
        let mut forced = opts.clone();
        forced.needs_budget = true;
        std::borrow::Cow::Owned(forced)
    } else {
        std::borrow::Cow::Borrowed(opts)
    }
}

/// Which slots of `plan` run: everything reachable from its start, where a guarded jump only
/// continues in its expected direction.
pub(crate) fn live_slots(insns: &[Insn], plan: FuncPlan, opts: &CompileOptions) -> Vec<bool> {
    let mut live = vec![false; plan.end - plan.start];
    let mut work = vec![plan.start];
    let guard = |pc: usize| opts.speculation().and_then(|s| s.guards.get(&pc));
    while let Some(pc) = work.pop() {
        if pc < plan.start || pc >= plan.end || live[pc - plan.start] {
            continue;
        }
        live[pc - plan.start] = true;
        let insn = &insns[pc];
        match insn {
            Insn::Exit => {}
            Insn::Ja { .. } => work.extend(insn.jump_target(pc).map(|t| t as usize)),
            Insn::MayGoto { .. } => {
                work.extend(insn.jump_target(pc).map(|t| t as usize));
                work.push(pc + 1);
            }
            Insn::Jmp { .. } => {
                let target = insn.jump_target(pc).map(|t| t as usize);
                match guard(pc) {
                    Some(Expect::Taken) => work.extend(target),
                    Some(Expect::NotTaken) => work.push(pc + 1),
                    None => {
                        work.extend(target);
                        work.push(pc + 1);
                    }
                }
            }
            Insn::LoadImm64 { .. } => work.push(pc + 2),
            _ => work.push(pc + 1),
        }
    }
    live
}

/// Registers `r0`..`r9` (bit `i` = `ri`) that instruction `insn` reads and writes.
pub(crate) fn uses_defs(insn: &Insn) -> (u16, u16) {
    let bit = |r: Reg| 1u16 << r.index();
    let op = |o: &Operand| match o {
        Operand::Reg(r) => bit(*r),
        Operand::Imm(_) => 0,
    };
    const ARGS: u16 = 0b11_1110;
    match insn {
        Insn::Alu {
            op: AluOp::Mov | AluOp::MovSx(_),
            dst,
            src,
            ..
        } => (op(src), bit(*dst)),
        Insn::Alu { dst, src, .. } => (bit(*dst) | op(src), bit(*dst)),
        Insn::Endian { dst, .. } => (bit(*dst), bit(*dst)),
        Insn::Jmp { dst, src, .. } => (bit(*dst) | op(src), 0),
        Insn::Ja { .. } | Insn::MayGoto { .. } | Insn::LoadImm64Hi => (0, 0),
        Insn::Load { dst, base, .. } => (bit(*base), bit(*dst)),
        Insn::Store { base, src, .. } => (bit(*base) | op(src), 0),
        Insn::Atomic {
            op: aop,
            fetch,
            base,
            src,
            ..
        } => {
            if *aop == AtomicOp::CmpXchg {
                (bit(*base) | bit(*src) | 1, 1)
            } else {
                (bit(*base) | bit(*src), if *fetch { bit(*src) } else { 0 })
            }
        }
        Insn::LoadImm64 { dst, .. } => (0, bit(*dst)),
        Insn::Call(CallTarget::Reg(r)) => (ARGS | bit(*r), ARGS | 1),
        // Helpers and subprograms clobber r1..r5 and return in r0; r6..r9 survive.
        Insn::Call(_) => (ARGS, ARGS | 1),
        Insn::Exit => (1, 0),
    }
}

/// For each slot of `plan`, the registers `r0`..`r9` live on entry to it: read on some path
/// before being written. A deoptimisation exit only materialises those (and `r10`): the
/// interpreter that resumes never reads the others, and not keeping them alive to every
/// guard is what keeps the hot path free of spills.
pub(crate) fn live_registers(insns: &[Insn], plan: FuncPlan) -> Vec<u16> {
    let n = plan.end - plan.start;
    let succ = |pc: usize| -> [Option<usize>; 2] {
        let insn = &insns[pc];
        let target = insn.jump_target(pc).map(|t| t as usize);
        match insn {
            Insn::Exit => [None, None],
            Insn::Ja { .. } => [target, None],
            Insn::Jmp { .. } | Insn::MayGoto { .. } => [target, Some(pc + 1)],
            Insn::LoadImm64 { .. } => [Some(pc + 2), None],
            _ => [Some(pc + 1), None],
        }
    };
    let mut live = vec![0u16; n];
    loop {
        let mut changed = false;
        for pc in (plan.start..plan.end).rev() {
            let out = succ(pc)
                .into_iter()
                .flatten()
                .filter(|s| (plan.start..plan.end).contains(s))
                .fold(0u16, |acc, s| acc | live[s - plan.start]);
            let (uses, defs) = uses_defs(&insns[pc]);
            let new = uses | (out & !defs);
            if new != live[pc - plan.start] {
                live[pc - plan.start] = new;
                changed = true;
            }
        }
        if !changed {
            return live;
        }
    }
}
