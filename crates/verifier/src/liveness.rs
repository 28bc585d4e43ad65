//! Register liveness, computed once before exploration by a backward data-flow pass over the
//! instructions (as the kernel's verifier does since 6.15): a register is live before an
//! instruction when some path from there reads it before writing it. Path pruning compares
//! only live registers, so states that differ in values no path will read again meet.
//!
//! The pass is interprocedural in one direction: a BPF-to-BPF call reads the argument
//! registers its callee reads before writing them (the callee's live set at its entry), and
//! kills `r0`-`r5`. Helper calls read the arguments of their prototype (all five when the
//! helper is unknown, which verification refuses anyway). `exit` reads `r0`, in the entry
//! program and in subprograms alike (a subprogram's `r0` becomes its caller's). `r10` is
//! always live. Every use the checks or transfer functions make of a register is listed in
//! `uses_defs`; listing too many uses is only imprecise, too few would be unsound.

use crate::env::Env;
use rdx_bpf::isa::{AluOp, AtomicOp, CallTarget, Insn, Operand};

/// A set of registers `r0`-`r10`, bit `r` for register `r`.
pub type RegSet = u16;

/// Every register.
pub const ALL_REGS: RegSet = (1 << 11) - 1;
/// `r10`, the frame pointer: read-only and always live.
const FP: RegSet = 1 << 10;
/// The registers a call clobbers: `r0` (its result) and `r1`-`r5`.
pub const CALLER_SAVED: RegSet = 0x3f;
const ARGS: RegSet = 0x3e;

fn bit(r: u8) -> RegSet {
    1 << r
}

fn operand(src: Operand) -> RegSet {
    match src {
        Operand::Reg(r) => bit(r.0),
        Operand::Imm(_) => 0,
    }
}

/// Registers `insn` reads and writes; `entry_live(target)` is the live set at a callee's
/// first instruction (for local calls at `pc`).
fn uses_defs(
    pc: usize,
    insn: &Insn,
    env: &Env,
    entry_live: impl Fn(usize) -> RegSet,
) -> (RegSet, RegSet) {
    match *insn {
        Insn::Alu { op, dst, src, .. } => match op {
            AluOp::Mov | AluOp::MovSx(_) => (operand(src), bit(dst.0)),
            _ => (bit(dst.0) | operand(src), bit(dst.0)),
        },
        Insn::Endian { dst, .. } => (bit(dst.0), bit(dst.0)),
        Insn::Ja { .. } | Insn::MayGoto { .. } | Insn::LoadImm64Hi => (0, 0),
        Insn::LoadImm64 { dst, .. } => (0, bit(dst.0)),
        Insn::Load { dst, base, .. } => (bit(base.0), bit(dst.0)),
        Insn::Store { base, src, .. } => (bit(base.0) | operand(src), 0),
        Insn::Atomic {
            op,
            fetch,
            base,
            src,
            ..
        } => {
            if op == AtomicOp::CmpXchg {
                (bit(base.0) | bit(src.0) | bit(0), bit(0))
            } else if fetch || op == AtomicOp::Xchg {
                (bit(base.0) | bit(src.0), bit(src.0))
            } else {
                (bit(base.0) | bit(src.0), 0)
            }
        }
        Insn::Jmp { dst, src, .. } => (bit(dst.0) | operand(src), 0),
        Insn::Call(CallTarget::Helper(id)) => {
            let uses = match env.helpers.get(&id) {
                Some(p) => (1..=p.args.len().min(5)).fold(0, |s, r| s | bit(r as u8)),
                None => ARGS,
            };
            (uses, CALLER_SAVED)
        }
        Insn::Call(CallTarget::Local(rel)) => {
            let target = (pc as i64 + 1 + rel as i64) as usize;
            (entry_live(target) & ARGS, CALLER_SAVED)
        }
        // Unsupported calls are refused before exploration; read everything.
        Insn::Call(_) => (ARGS, CALLER_SAVED),
        Insn::Exit => (bit(0), 0),
    }
}

/// Live registers before every instruction.
pub struct Liveness {
    live_in: Vec<RegSet>,
}

impl Liveness {
    /// Runs the backward pass to its fixpoint. `insns` passed the CFG checks: jump targets
    /// lie inside their function and no function falls off its end.
    pub fn compute(insns: &[Insn], env: &Env) -> Liveness {
        let n = insns.len();
        let mut live_in = vec![0 as RegSet; n];
        // Sweeps from the last instruction to the first: a loop-free function converges in
        // one sweep; each loop nesting level or call level that feeds a value back costs one
        // more (the sets only grow, over 11 bits).
        loop {
            let mut changed = false;
            for pc in (0..n).rev() {
                let insn = &insns[pc];
                if matches!(insn, Insn::LoadImm64Hi) {
                    continue;
                }
                let next = match insn {
                    Insn::LoadImm64 { .. } => pc + 2,
                    _ => pc + 1,
                };
                let falls = !matches!(insn, Insn::Exit | Insn::Ja { .. });
                let mut out = 0;
                if falls && next < n {
                    out |= live_in[next];
                }
                if let Some(t) = insn.jump_target(pc) {
                    if let Some(l) = usize::try_from(t).ok().and_then(|t| live_in.get(t)) {
                        out |= *l;
                    }
                }
                let (uses, defs) = uses_defs(pc, insn, env, |t| {
                    live_in.get(t).copied().unwrap_or(ALL_REGS)
                });
                let new = uses | (out & !defs) | FP;
                if new != live_in[pc] {
                    live_in[pc] = new;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        Liveness { live_in }
    }

    /// Registers live before the instruction at `pc`.
    pub fn at(&self, pc: usize) -> RegSet {
        self.live_in[pc]
    }

    /// Registers of a caller's frame that matter while its callee runs: those live after the
    /// call at `callsite`, except `r0`-`r5`, which the return overwrites.
    pub fn after_call(&self, callsite: usize) -> RegSet {
        self.live_in
            .get(callsite + 1)
            .map_or(ALL_REGS, |l| l & !CALLER_SAVED)
    }
}
