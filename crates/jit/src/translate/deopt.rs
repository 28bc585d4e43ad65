//! The Cranelift lowering of the profile-guided builds ([`crate::Build::Elite`] and
//! [`crate::Build::Scouting`]): an elite guard's exit, which hands the exact eBPF state of
//! its frame to the interpreter in the [`DeoptRunState`] and leaves with
//! [`RunStatus::Deopt`], the caller frames recorded while such a run unwinds, and a scouting
//! build's branch counters. Where the rest of deoptimisation lives (options, planning, the
//! runtime, the control plane, `rdx-deopt`) is mapped in `docs/deopt.md`, "Where deopt
//! lives".

use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{AtomicRmwOp, InstBuilder, MemFlagsData, Value};
use rdx_bpf::isa::{Reg, STACK_SIZE};
use rdx_region::abi::{DeoptRunState, RunStatus, DEOPT_FRAME_BYTES, DEOPT_MAX_FRAMES};

use super::{run_mem, Translator};

/// Offset of the end of the eBPF stack in a [`DeoptRunState`] (the entry frame's `r10`).
pub(super) const DEOPT_STACK_TOP: i64 =
    (DeoptRunState::OFF_STACK + DEOPT_MAX_FRAMES * DEOPT_FRAME_BYTES) as i64;

impl Translator<'_, '_> {
    /// This frame's index in the [`DeoptRunState`] stack: `(top - r10) / 512`.
    fn frame_depth(&mut self) -> Value {
        let top = self.b.ins().iadd_imm_s(self.run_state, DEOPT_STACK_TOP);
        let r10 = self.reg(Reg(10));
        let below = self.b.ins().isub(top, r10);
        self.b
            .ins()
            .ushr_imm_u(below, STACK_SIZE.trailing_zeros() as i64)
    }

    /// A failed guard at `pc`: materialise the exact eBPF state of this frame (every register
    /// live at `pc`, and `r10`; the slot; the frame depth; the stack already lives in the
    /// [`DeoptRunState`]) and leave with [`RunStatus::Deopt`]. Callers record their own
    /// frames as they unwind. Dead registers are left as they were: nothing reads them.
    pub(super) fn deopt_exit(&mut self, pc: usize) {
        let live = self.live_regs[pc - self.plan.start] | 1 << 10;
        for i in (0..=10u8).filter(|i| live & (1 << i) != 0) {
            let v = self.reg(Reg(i));
            self.b.ins().store(
                run_mem(),
                v,
                self.run_state,
                (DeoptRunState::OFF_REGS + 8 * i as usize) as i32,
            );
        }
        let pcv = self.b.ins().iconst(I32, pc as i64);
        self.b
            .ins()
            .store(run_mem(), pcv, self.run_state, DeoptRunState::OFF_PC as i32);
        let depth = self.frame_depth();
        let depth = self.b.ins().ireduce(I32, depth);
        self.b.ins().store(
            run_mem(),
            depth,
            self.run_state,
            DeoptRunState::OFF_DEPTH as i32,
        );
        self.store_budget();
        self.stop(RunStatus::Deopt);
    }

    /// Unwinding past a local call after the callee stopped: record this frame (where it
    /// continues, its callee-saved registers) at its depth in the [`DeoptRunState`].
    pub(super) fn record_caller_frame(&mut self, ret_pc: usize) {
        let depth = self.frame_depth();
        let offset = self.b.ins().imul_imm_s(
            depth,
            std::mem::size_of::<rdx_region::abi::DeoptFrame>() as i64,
        );
        let frames = self
            .b
            .ins()
            .iadd_imm_s(self.run_state, DeoptRunState::OFF_FRAMES as i64);
        let at = self.b.ins().iadd(frames, offset);
        let ret = self.b.ins().iconst(I64, ret_pc as i64);
        self.b.ins().store(run_mem(), ret, at, 0);
        // Callee-saved registers the caller still reads after the call.
        let live = self
            .live_regs
            .get(ret_pc - self.plan.start)
            .copied()
            .unwrap_or(0);
        for i in (0..4u8).filter(|i| live & (1 << (6 + i)) != 0) {
            let v = self.reg(Reg(6 + i));
            self.b.ins().store(run_mem(), v, at, 8 + 8 * i as i32);
        }
    }

    /// Scouting: one more run through this jump's direction `c` in its counter pair.
    pub(super) fn count_branch(&mut self, pc: usize, c: Value) {
        let Some(counters) = self.opts.branch_counters() else {
            return;
        };
        let symbol = counters.symbol.clone();
        let index = self.branch_index[&pc] as i64;
        let base = self.symbol_value(symbol, 0);
        let taken = self.b.ins().uextend(I64, c);
        let inc = self.b.ins().ishl_imm_u(taken, 3);
        let pair = self.b.ins().iadd_imm_s(base, 16 * index);
        let addr = self.b.ins().iadd(pair, inc);
        let one = self.b.ins().iconst(I64, 1);
        // Atomic so that concurrent runs never lose counts; the counters are only read.
        self.b.ins().atomic_rmw(
            I64,
            MemFlagsData::new().with_aligned(),
            AtomicRmwOp::Add,
            addr,
            one,
        );
    }
}
