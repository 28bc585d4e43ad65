//! The static pass over the instruction model: subprograms, control-flow sanity (no jump out
//! of a function, no falling off its end, every instruction reachable), unsupported
//! instructions, and the prune points where the explorer compares states.

use crate::error::{Rule, VerifyError};
use rdx_bpf::isa::{CallTarget, ImmKind, Insn};

/// The static facts of a program: its subprograms and the instructions where the explorer
/// stores, joins and widens states.
pub struct Cfg {
    /// First instruction of each subprogram, sorted; `subprogs[0] == 0`.
    pub subprogs: Vec<usize>,
    /// Where the explorer stores and compares states.
    pub prune: Vec<bool>,
    /// True when some jump goes backwards (a loop).
    pub has_loops: bool,
    /// Targets of backward jumps: every cycle of the control flow passes through one (a
    /// function's cycle needs a jump backwards, and recursion is refused), so widening there
    /// alone is enough to make a loop's exploration converge.
    pub loop_head: Vec<bool>,
    /// Jump targets: where paths from different branches meet.
    pub join: Vec<bool>,
}

fn err(pc: usize, rule: Rule, msg: String) -> VerifyError {
    VerifyError {
        pc: Some(pc),
        ..VerifyError::global(rule, msg)
    }
}

impl Cfg {
    /// The index into [`Cfg::subprogs`] of the subprogram holding instruction `pc`.
    pub fn subprog_of(&self, pc: usize) -> usize {
        match self.subprogs.binary_search(&pc) {
            Ok(i) => self.subprogs[i],
            Err(i) => self.subprogs[i - 1],
        }
    }

    fn subprog_end(&self, start: usize, len: usize) -> usize {
        match self.subprogs.binary_search(&start) {
            Ok(i) => self.subprogs.get(i + 1).copied().unwrap_or(len),
            Err(_) => len,
        }
    }

    /// Splits `insns` into subprograms and checks their control flow: jumps stay inside their
    /// function, no function falls off its end, every instruction is reachable and supported;
    /// the first failure is a `bad-cfg`, `unreachable` or `unsupported` error.
    pub fn build(insns: &[Insn]) -> Result<Cfg, VerifyError> {
        let len = insns.len();
        let mut subprogs = vec![0];
        for (pc, insn) in insns.iter().enumerate() {
            match insn {
                Insn::Call(CallTarget::Kfunc(_)) => {
                    return Err(err(pc, Rule::Unsupported, "kernel function calls are not supported".into()))
                }
                Insn::Call(CallTarget::Reg(_)) => {
                    return Err(err(pc, Rule::Unsupported, "indirect calls (callx) are not supported".into()))
                }
                Insn::LoadImm64 { kind, .. }
                    if !matches!(kind, ImmKind::Imm | ImmKind::MapIdx | ImmKind::MapIdxValue) =>
                {
                    return Err(err(
                        pc,
                        Rule::Unsupported,
                        format!("lddw of kind {kind:?} is not supported (maps must be referenced by index)"),
                    ))
                }
                _ => {}
            }
            if let Some(t) = insn.call_target(pc) {
                if t < 0 || t as usize >= len {
                    return Err(err(
                        pc,
                        Rule::BadCfg,
                        format!("call target {t} outside the program"),
                    ));
                }
                subprogs.push(t as usize);
            }
        }
        subprogs.sort_unstable();
        subprogs.dedup();
        let mut cfg = Cfg {
            subprogs,
            prune: vec![false; len],
            has_loops: false,
            loop_head: vec![false; len],
            join: vec![false; len],
        };
        for &s in &cfg.subprogs {
            cfg.prune[s] = true;
        }
        // Successors, function boundaries, fall-off-the-end.
        let mut succs: Vec<[Option<usize>; 2]> = vec![[None, None]; len];
        for pc in 0..len {
            let insn = &insns[pc];
            let sub = cfg.subprog_of(pc);
            let end = cfg.subprog_end(sub, len);
            let next = match insn {
                Insn::LoadImm64 { .. } => pc + 2,
                _ => pc + 1,
            };
            let falls = !matches!(insn, Insn::Exit | Insn::Ja { .. } | Insn::LoadImm64Hi);
            if matches!(insn, Insn::LoadImm64Hi) {
                continue;
            }
            if falls && next >= end {
                return Err(err(
                    pc,
                    Rule::BadCfg,
                    "execution falls off the end of its function".into(),
                ));
            }
            let mut s = [None, None];
            if falls {
                s[0] = Some(next);
            }
            if let Some(t) = insn.jump_target(pc) {
                let t = t as usize; // the decoder checked the range
                if t < sub || t >= end {
                    return Err(err(
                        pc,
                        Rule::BadCfg,
                        format!("jump to {t} leaves its function ({sub}..{end})"),
                    ));
                }
                if t <= pc {
                    cfg.has_loops = true;
                    cfg.loop_head[t] = true;
                }
                cfg.prune[t] = true;
                cfg.join[t] = true;
                if matches!(insn, Insn::Jmp { .. } | Insn::MayGoto { .. }) {
                    cfg.prune[next] = true;
                }
                // A loop through `may_goto` closes there: the explorer must see its states.
                if matches!(insn, Insn::MayGoto { .. }) {
                    cfg.prune[pc] = true;
                }
                s[1] = Some(t);
            }
            succs[pc] = s;
        }
        // Reachability: from the entry, and from every called subprogram.
        let mut seen = vec![false; len];
        let mut stack = vec![0usize];
        while let Some(pc) = stack.pop() {
            if seen[pc] {
                continue;
            }
            seen[pc] = true;
            if let Some(t) = insns[pc].call_target(pc) {
                stack.push(t as usize);
            }
            stack.extend(succs[pc].iter().flatten());
        }
        for pc in 0..len {
            if !seen[pc] && insns[pc] != Insn::LoadImm64Hi {
                return Err(err(pc, Rule::Unreachable, "unreachable instruction".into()));
            }
        }
        Ok(cfg)
    }
}
