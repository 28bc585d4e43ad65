//! The path explorer: runs every path of the program over the abstract state, checking the
//! assertions of each instruction and applying its transfer function, with state pruning at
//! prune points (a new state subsumed by a fully explored one ends its path), bounded loops
//! explored iteration by iteration up to the processed-instruction limit, and BPF-to-BPF calls
//! with one frame each.
//!
//! Path lengths are tracked so that, once every path is explored, the longest one is the
//! program's worst-case instruction count. Pruning keeps that exact: each checkpoint records
//! the longest path through it, and a pruned path borrows the tail of its subsuming state.

use crate::assertions::{self, Access};
use crate::cfg::Cfg;
use crate::check::{implies_le, operand_value, Region};
use crate::env::{Env, FieldKind};
use crate::error::{Rule, VerifyError, Violation};
use crate::helpers::Ret;
use crate::liveness::{Liveness, RegSet};
use crate::scalar::Scalar;
use crate::state::{ByteState, Frame, Ptr, PtrKind, Slot, State, Value};
use crate::{Limits, LogLevel, MemFact};
use rdx_bpf::isa::{
    AluOp, AtomicOp, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width,
};
use rdx_bpf::MapDef;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// Maximum nested frames (entry program plus 7 calls), as in the kernel.
pub const MAX_FRAMES: usize = 8;
/// States kept per prune point.
const STATES_PER_PC: usize = 32;
/// Instructions a path runs between two stored states.
const MIN_STORE_DISTANCE: u64 = 8;

/// Stack slots of one frame, bit `k` for slot `k` (bytes `[-8(k+1), -8k)`): 64 slots make
/// the 512-byte frame.
type SlotSet = u64;
const ALL_SLOTS: SlotSet = u64::MAX;

struct Checkpoint {
    state: State,
    /// Per frame: stack slots some path from this checkpoint read before overwriting them.
    /// Complete once the checkpoint is fully explored, which is when it may prune: slots
    /// outside it are not compared.
    read: [SlotSet; MAX_FRAMES],
    /// Per frame: slots fully overwritten between the parent checkpoint and this one (or
    /// frames created there), where a read found here stops going up.
    written_before: [SlotSet; MAX_FRAMES],
    parent: Option<usize>,
    /// Paths through this checkpoint still being explored.
    branches: u32,
    /// Path length when the checkpoint was taken.
    len: u64,
    /// Longest complete path through it so far.
    max_end: u64,
    /// Comparisons that pruned / did not prune: states that keep missing are dropped from the
    /// prune list (not from the arena: their path accounting stays intact).
    hits: u32,
    misses: u32,
}

struct Path {
    pc: usize,
    state: State,
    cp: Option<usize>,
    len: u64,
    /// Path length at the last stored checkpoint: storing one every few instructions is
    /// enough, and storing one at every loop iteration costs more than it prunes.
    last_store: u64,
    /// Per frame: slots fully overwritten since `cp` was taken.
    written: [SlotSet; MAX_FRAMES],
}

enum Step {
    Next(usize),
    Branch {
        fall: usize,
        target: usize,
        other: State,
    },
    End,
}

pub(crate) struct Explorer<'a> {
    pub(crate) insns: &'a [Insn],
    pub(crate) maps: &'a [MapDef],
    pub(crate) env: &'a Env,
    cfg: Cfg,
    live: Liveness,
    /// Compare only live state at prune points (off: everything, for cross-checking).
    pub(crate) liveness: bool,
    /// The assertions of every instruction, listed once up front.
    required: Vec<Vec<assertions::Assertion>>,
    limits: Limits,
    log_level: LogLevel,
    cps: Vec<Checkpoint>,
    by_pc: Vec<Vec<usize>>,
    work: Vec<Path>,
    pub(crate) processed: u64,
    next_id: u32,
    pub(crate) facts: Vec<Option<MemFact>>,
    pub(crate) log: String,
    pub(crate) frame_depth: BTreeMap<usize, usize>,
    pub(crate) call_edges: BTreeSet<(usize, usize)>,
    pub(crate) helpers_used: BTreeSet<i32>,
    pub(crate) worst: u64,
    pub(crate) unbounded: bool,
    pub(crate) tail_calls: bool,
    /// In the exact phase of a budgeted class: give up (and let the caller widen) once a path
    /// runs longer than the budget, since the program needs metering anyway.
    pub(crate) abort_past: Option<u64>,
    /// Record every state reached, per instruction (`VerifyOptions::record_states`).
    pub(crate) record_states: bool,
    pub(crate) recorded: Vec<Vec<State>>,
}

impl<'a> Explorer<'a> {
    pub(crate) fn new(
        insns: &'a [Insn],
        maps: &'a [MapDef],
        env: &'a Env,
        cfg: Cfg,
        limits: Limits,
        log_level: LogLevel,
    ) -> Self {
        Explorer {
            required: insns.iter().map(assertions::of).collect(),
            live: Liveness::compute(insns, env),
            liveness: true,
            insns,
            maps,
            env,
            cfg,
            limits,
            log_level,
            cps: Vec::new(),
            by_pc: vec![Vec::new(); insns.len()],
            work: Vec::new(),
            processed: 0,
            next_id: 1,
            facts: vec![None; insns.len()],
            log: String::new(),
            frame_depth: BTreeMap::new(),
            call_edges: BTreeSet::new(),
            helpers_used: BTreeSet::new(),
            worst: 0,
            unbounded: false,
            tail_calls: false,
            abort_past: None,
            record_states: false,
            recorded: Vec::new(),
        }
    }

    fn fresh_id(&mut self) -> u32 {
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.next_id
    }

    pub(crate) fn states_stored(&self) -> usize {
        self.cps.len()
    }

    pub(crate) fn run(&mut self) -> Result<(), VerifyError> {
        let mut frame = Frame::new(0, 0);
        frame.regs[1] = Value::ptr(PtrKind::Ctx);
        frame.regs[10] = Value::ptr(PtrKind::Stack { frame: 0 });
        let state = State {
            frames: vec![frame],
            refs: Vec::new(),
            calls: 0,
        };
        self.work.push(Path {
            pc: 0,
            state,
            cp: None,
            len: 0,
            last_store: 0,
            written: [0; MAX_FRAMES],
        });
        while let Some(p) = self.work.pop() {
            self.run_path(p)?;
        }
        Ok(())
    }

    fn error(&self, v: Violation, pc: usize, st: &State) -> VerifyError {
        VerifyError {
            rule: v.rule,
            message: v.message,
            pc: Some(pc),
            insn: Some(crate::disasm(self.insns, pc)),
            state: Some(st.to_string()),
            log: None,
        }
    }

    fn finish(&mut self, cp: Option<usize>, len: u64) {
        self.worst = self.worst.max(len);
        let mut cur = cp;
        let mut end = len;
        while let Some(i) = cur {
            let c = &mut self.cps[i];
            c.max_end = c.max_end.max(end);
            c.branches -= 1;
            if c.branches > 0 {
                break;
            }
            end = c.max_end;
            cur = c.parent;
        }
    }

    /// Live registers of each frame of `st` at `pc`: the current frame's at `pc`, a caller's
    /// after its call.
    fn live_regs(&self, pc: usize, st: &State) -> [RegSet; MAX_FRAMES] {
        let mut regs = [RegSet::MAX; MAX_FRAMES];
        if !self.liveness {
            return regs;
        }
        let n = st.frames.len().min(MAX_FRAMES);
        for (i, r) in regs.iter_mut().enumerate().take(n) {
            *r = if i + 1 == n {
                self.live.at(pc)
            } else {
                self.live.after_call(st.frames[i + 1].callsite)
            };
        }
        regs
    }

    /// Records that the path reads `slots` of frame `frame` now: every checkpoint up the
    /// path whose value of them the read sees (no full overwrite in between) learns they are
    /// live.
    fn mark_read(&mut self, p: &Path, frame: usize, slots: SlotSet) {
        if frame >= MAX_FRAMES {
            return;
        }
        let mut m = slots & !p.written[frame];
        let mut cur = p.cp;
        while m != 0 {
            let Some(i) = cur else { break };
            let c = &mut self.cps[i];
            if c.state.frames.len() <= frame {
                break;
            }
            // Slots already marked here were passed further up when they were marked.
            let new = m & !c.read[frame];
            c.read[frame] |= m;
            m = new & !c.written_before[frame];
            cur = c.parent;
        }
    }

    /// The path continues as every path from `cp` did: what those read, it reads now.
    fn inherit_reads(&mut self, p: &Path, cp: usize) {
        let read = self.cps[cp].read;
        let frames = self.cps[cp].state.frames.len().min(MAX_FRAMES);
        for (f, slots) in read.iter().enumerate().take(frames) {
            self.mark_read(p, f, *slots);
        }
    }

    /// The stack slots `insn` reads in `st` (checked already), by frame.
    fn stack_reads(&self, insn: &Insn, st: &State, mut f: impl FnMut(usize, SlotSet)) {
        let stack_ptr = |r: Reg| match st.reg(r.index()) {
            Value::Ptr(Ptr {
                kind: PtrKind::Stack { frame },
                off,
                var,
                ..
            }) => Some((frame as usize, off, var)),
            _ => None,
        };
        match *insn {
            Insn::Load {
                base, off, size, ..
            }
            | Insn::Atomic {
                base, off, size, ..
            } => {
                if let Some((frame, o, var)) = stack_ptr(base) {
                    // Every byte the access may touch, in wide arithmetic; the check refuses
                    // a range leaving the frame, so clamping it to the frame loses nothing.
                    let frame_bytes = rdx_bpf::isa::STACK_SIZE as i128;
                    let start = (o as i128 + var.smin as i128 + off as i128).max(-frame_bytes);
                    let end =
                        (o as i128 + var.smax as i128 + off as i128 + size.bytes() as i128).min(0);
                    if start < end {
                        let (hi, _) = Frame::locate(start as i64);
                        let (lo, _) = Frame::locate(end as i64 - 1);
                        f(frame, slot_range(lo, hi));
                    }
                }
            }
            Insn::Call(CallTarget::Helper(id)) => {
                let n = self.env.helpers.get(&id).map_or(5, |h| h.args.len().min(5));
                for r in 1..=n {
                    // A buffer starts at the pointer and goes up toward the frame pointer.
                    if let Some((frame, o, _)) = stack_ptr(Reg(r as u8)) {
                        if o < 0 {
                            f(frame, slot_range(0, Frame::locate(o).0));
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// At a prune point: ends the path if an explored state covers it, else records it.
    fn visit(&mut self, p: &mut Path) -> Result<bool, VerifyError> {
        let pc = p.pc;
        let regs = self.live_regs(pc, &p.state);
        let all_slots = [ALL_SLOTS; MAX_FRAMES];
        let mut in_progress = 0;
        let mut last_in_progress = None;
        let mut pruned_by = None;
        let mut looping = None;
        let mut counted_cycle = false;
        let mut evict = Vec::new();
        for (slot, &i) in self.by_pc[pc].iter().enumerate() {
            let c = &mut self.cps[i];
            if c.branches == 0 {
                // Fully explored: its read marks are complete, so only live state matters.
                let slots = if self.liveness { &c.read } else { &all_slots };
                if c.state.subsumes_live(&p.state, &regs, slots) {
                    c.hits += 1;
                    pruned_by = Some((i, c.max_end.saturating_sub(c.len)));
                    break;
                }
                c.misses += 1;
                if c.misses > c.hits * 3 + 3 {
                    evict.push(slot);
                }
            } else {
                // An ancestor still being explored: its read marks are not complete yet, so
                // the whole stack is compared (registers by the static liveness).
                in_progress += 1;
                last_in_progress = Some(i);
                // A miss here says nothing about its use once explored (a later iteration of
                // an enclosing loop, or a path of another branch, reaching it is no sign
                // that the paths still to come from its own branches will): not counted.
                if c.state.subsumes_live(&p.state, &regs, &all_slots) {
                    looping = Some(p.state.subsumes_live(&c.state, &regs, &all_slots));
                    counted_cycle |= spent_may_goto(&c.state, &p.state);
                }
            }
        }
        for slot in evict.into_iter().rev() {
            self.by_pc[pc].swap_remove(slot);
        }
        if let Some((by, tail)) = pruned_by {
            self.inherit_reads(p, by);
            self.finish(p.cp, p.len + tail);
            return Ok(true);
        }
        let may_goto = matches!(self.insns[pc], Insn::MayGoto { .. });
        if let Some(exact) = looping {
            // The path came back to a state no better than one of its own ancestors: nothing
            // forces progress, so it may loop forever, unless the cycle took a `may_goto`'s
            // fall-through in this same activation ([`spent_may_goto`]), whose counter ends
            // it at run time. Either way everything the path can do
            // from here the ancestor can, and the ancestor's exploration covers it (the
            // `may_goto` ancestor's taken branch included).
            if self.env.allow_budgeted_loops || (may_goto && counted_cycle) {
                // What the ancestor's continuation reads is not known yet: everything.
                for f in 0..p.state.frames.len().min(MAX_FRAMES) {
                    self.mark_read(p, f, ALL_SLOTS);
                }
                self.unbounded = true;
                self.finish(p.cp, p.len);
                return Ok(true);
            }
            if exact {
                return Err(self.error(
                    Violation::new(
                        Rule::InfiniteLoop,
                        "infinite loop: the same state repeats at this instruction",
                    ),
                    pc,
                    &p.state,
                ));
            }
        }
        // Widening only at loop heads: elsewhere it would lose precision on straight-line
        // branches inside a loop's body (and at every call of a function from a loop) for
        // nothing, since every cycle passes a loop head.
        let widen_here = (self.env.allow_budgeted_loops && self.cfg.loop_head[pc]) || may_goto;
        if widen_here && in_progress >= 1 {
            if let Some(i) = last_in_progress {
                if let Some(w) = widen(&self.cps[i].state, &p.state) {
                    p.state = w;
                }
            }
        }
        let due = p.cp.is_none()
            || p.len - p.last_store >= MIN_STORE_DISTANCE
            || self.cfg.subprogs.contains(&pc)
            || self.cfg.join[pc]
            || widen_here;
        if due && self.by_pc[pc].len() < STATES_PER_PC && self.cps.len() < self.limits.max_states {
            p.last_store = p.len;
            self.cps.push(Checkpoint {
                state: p.state.clone(),
                read: [0; MAX_FRAMES],
                written_before: p.written,
                parent: p.cp,
                branches: 1,
                len: p.len,
                max_end: 0,
                hits: 0,
                misses: 0,
            });
            let idx = self.cps.len() - 1;
            self.by_pc[pc].push(idx);
            p.cp = Some(idx);
            p.written = [0; MAX_FRAMES];
        }
        Ok(false)
    }

    fn run_path(&mut self, mut p: Path) -> Result<(), VerifyError> {
        loop {
            if self.cfg.prune[p.pc] && self.visit(&mut p)? {
                return Ok(());
            }
            if self.record_states {
                if self.recorded.len() < self.insns.len() {
                    self.recorded.resize(self.insns.len(), Vec::new());
                }
                self.recorded[p.pc].push(p.state.clone());
            }
            self.processed += 1;
            if self.processed > self.limits.max_processed {
                return Err(self.error(
                    Violation::new(
                        Rule::TooComplex,
                        format!("more than {} instructions processed: the program is too complex to verify", self.limits.max_processed),
                    ),
                    p.pc,
                    &p.state,
                ));
            }
            p.len += 1;
            if self.abort_past.is_some_and(|b| p.len > b) {
                return Err(self.error(
                    Violation::new(
                        Rule::TooComplex,
                        "a path runs longer than the class's instruction budget",
                    ),
                    p.pc,
                    &p.state,
                ));
            }
            if self.log_level == LogLevel::Verbose && self.log.len() < self.limits.max_log_bytes {
                let _ = writeln!(
                    self.log,
                    "{}: {:<32} ; {}",
                    p.pc,
                    crate::disasm(self.insns, p.pc),
                    p.state
                );
            }
            let insn = self.insns[p.pc];
            for a in &self.required[p.pc] {
                if let Err(v) = self.check(a, &p.state) {
                    return Err(self.error(v, p.pc, &p.state));
                }
            }
            let pc = p.pc;
            self.note_stack_use(&mut p, &insn);
            match self
                .step(pc, &insn, &mut p.state)
                .map_err(|v| self.error(v, pc, &p.state))?
            {
                Step::Next(n) => p.pc = n,
                Step::End => {
                    self.finish(p.cp, p.len);
                    return Ok(());
                }
                Step::Branch {
                    fall,
                    target,
                    other,
                } => {
                    if self.work.len() >= self.limits.max_pending {
                        return Err(self.error(
                            Violation::new(
                                Rule::TooComplex,
                                format!("more than {} pending branches", self.limits.max_pending),
                            ),
                            pc,
                            &p.state,
                        ));
                    }
                    if let Some(c) = p.cp {
                        self.cps[c].branches += 1;
                    }
                    self.work.push(Path {
                        pc: target,
                        state: other,
                        cp: p.cp,
                        len: p.len,
                        last_store: p.last_store,
                        written: p.written,
                    });
                    p.pc = fall;
                }
            }
        }
    }

    /// Stack liveness bookkeeping for `insn` about to run on `p`: the slots it reads are
    /// marked up the path, the slots it overwrites whole (aligned 8-byte stores) and the
    /// frame a call creates stop later reads from going further up.
    fn note_stack_use(&mut self, p: &mut Path, insn: &Insn) {
        let mut reads = [0 as SlotSet; MAX_FRAMES];
        self.stack_reads(insn, &p.state, |f, m| {
            if f < MAX_FRAMES {
                reads[f] |= m;
            }
        });
        for (f, m) in reads.into_iter().enumerate() {
            if m != 0 {
                self.mark_read(p, f, m);
            }
        }
        match *insn {
            Insn::Store {
                size: Size::DW,
                base,
                off,
                ..
            } => {
                if let Value::Ptr(Ptr {
                    kind: PtrKind::Stack { frame },
                    off: o,
                    ..
                }) = p.state.reg(base.index())
                {
                    let start = o + off as i64;
                    if start.rem_euclid(8) == 0 && (frame as usize) < MAX_FRAMES {
                        p.written[frame as usize] |= 1 << Frame::locate(start).0;
                    }
                }
            }
            Insn::Call(CallTarget::Local(_)) => {
                let callee = p.state.frames.len();
                if callee < MAX_FRAMES {
                    p.written[callee] = ALL_SLOTS;
                }
            }
            _ => {}
        }
    }

    fn record_fact(&mut self, pc: usize, r: Region) -> Result<(), Violation> {
        let new = match r {
            Region::Ctx { offset } => MemFact::Ctx { offset },
            Region::Stack => MemFact::Stack,
            Region::MapValue { map } => MemFact::MapValue { map },
            Region::Packet => MemFact::Packet,
            Region::Record => MemFact::Record,
            Region::HostVar { var } => MemFact::HostVar { var },
        };
        match self.facts[pc] {
            None => self.facts[pc] = Some(new),
            Some(old) if old == new => {}
            Some(old) => {
                let ctx = |f: MemFact| matches!(f, MemFact::Ctx { .. });
                if ctx(old) || ctx(new) {
                    return Err(Violation::new(
                        Rule::CtxAccess,
                        "the same instruction accesses the context on one path and other memory on another",
                    ));
                }
                self.facts[pc] = Some(MemFact::Mixed);
            }
        }
        Ok(())
    }

    fn note_stack_depth(&mut self, st: &State) {
        for fr in &st.frames {
            let d = self.frame_depth.entry(fr.subprog).or_insert(0);
            *d = (*d).max(fr.stack.len() * 8);
        }
    }

    fn step(&mut self, pc: usize, insn: &Insn, st: &mut State) -> Result<Step, Violation> {
        match *insn {
            Insn::Alu {
                width,
                op,
                dst,
                src,
            } => {
                self.alu(st, width, op, dst, src);
                Ok(Step::Next(pc + 1))
            }
            Insn::Endian { order, bits, dst } => {
                let s = st.reg(dst.index()).as_scalar().unwrap_or(Scalar::UNKNOWN);
                st.set(dst.index(), Value::scalar(s.endian(order, bits)));
                Ok(Step::Next(pc + 1))
            }
            Insn::Ja { off } => Ok(Step::Next((pc as i64 + 1 + off as i64) as usize)),
            // The counter is not in the abstract state: either way may be taken.
            // The fall-through spends one unit of this activation's counter.
            Insn::MayGoto { off } => {
                let other = st.clone();
                let frame = st.cur_mut();
                frame.may_goto_passes = frame.may_goto_passes.saturating_add(1);
                Ok(Step::Branch {
                    fall: pc + 1,
                    target: (pc as i64 + 1 + off as i64) as usize,
                    other,
                })
            }
            Insn::LoadImm64 {
                dst,
                kind,
                imm_lo,
                imm_hi,
            } => {
                let v = match kind {
                    ImmKind::Imm => Value::scalar(Scalar::constant(Insn::imm64(imm_lo, imm_hi))),
                    ImmKind::MapIdx | ImmKind::MapIdxValue => {
                        let map = imm_lo as u32;
                        let Some(m) = self.maps.get(map as usize) else {
                            return Err(Violation::new(
                                Rule::BadCfg,
                                format!("map index {map} out of range ({} maps)", self.maps.len()),
                            ));
                        };
                        if kind == ImmKind::MapIdx {
                            Value::ptr(PtrKind::MapObj { map })
                        } else {
                            // Direct value access exists for one-element arrays (global
                            // data) only: a program array's element is a jump word.
                            if m.map_type != rdx_region::layout::MapType::Array {
                                return Err(Violation::new(
                                    Rule::InvalidMemBase,
                                    format!(
                                        "direct value access into map `{}` of type {:?}: only array maps (global data) allow it",
                                        m.name, m.map_type
                                    ),
                                ));
                            }
                            if imm_hi < 0
                                || imm_hi as u32 >= m.value_size.max(1)
                                || m.max_entries != 1
                            {
                                return Err(Violation::new(
                                    Rule::OutOfBounds,
                                    format!(
                                        "direct value offset {imm_hi} into map `{}` is invalid",
                                        m.name
                                    ),
                                ));
                            }
                            let mut p = Ptr::new(PtrKind::MapValue { map });
                            p.off = imm_hi as i64;
                            Value::Ptr(p)
                        }
                    }
                    _ => return Err(Violation::new(Rule::Unsupported, "unsupported lddw kind")),
                };
                st.set(dst.index(), v);
                Ok(Step::Next(pc + 2))
            }
            Insn::LoadImm64Hi => Err(Violation::new(
                Rule::BadCfg,
                "execution reached the second slot of lddw",
            )),
            Insn::Load {
                size,
                sign_extend,
                dst,
                base,
                off,
            } => {
                let region = self.check_mem(
                    st,
                    base,
                    off as i64,
                    size.bytes() as u64,
                    Access::Read,
                    Some(size),
                )?;
                self.record_fact(pc, region)?;
                let v = self.load(st, base, off as i64, size, sign_extend, region)?;
                st.set(dst.index(), v);
                Ok(Step::Next(pc + 1))
            }
            Insn::Store {
                size,
                base,
                off,
                src,
            } => {
                let region = self.check_mem(
                    st,
                    base,
                    off as i64,
                    size.bytes() as u64,
                    Access::Write,
                    Some(size),
                )?;
                self.record_fact(pc, region)?;
                if let (Region::Stack, Value::Ptr(p)) = (region, st.reg(base.index())) {
                    let v = operand_value(st, src);
                    let v = match (src, v) {
                        (Operand::Imm(_), Value::Scalar { val, .. }) => {
                            Value::scalar(val.alu(AluOp::Mov, &val, size == Size::DW))
                        }
                        // A spilled register and its slot are copies: give them one id, so
                        // that bounds learnt on either after a fill reach the other (as the
                        // kernel does).
                        (Operand::Reg(r), Value::Scalar { val, id: 0 })
                            if size == Size::DW && val.const_value().is_none() =>
                        {
                            let id = self.fresh_id();
                            st.set(r.index(), Value::Scalar { val, id });
                            Value::Scalar { val, id }
                        }
                        _ => v,
                    };
                    let PtrKind::Stack { frame } = p.kind else {
                        unreachable!("stack region")
                    };
                    write_stack(&mut st.frames[frame as usize], p.off + off as i64, size, v);
                    self.note_stack_depth(st);
                }
                Ok(Step::Next(pc + 1))
            }
            Insn::Atomic {
                size,
                op,
                fetch,
                base,
                off,
                src,
            } => {
                let region = self.check_mem(
                    st,
                    base,
                    off as i64,
                    size.bytes() as u64,
                    Access::Atomic,
                    Some(size),
                )?;
                self.record_fact(pc, region)?;
                if let (Region::Stack, Value::Ptr(p)) = (region, st.reg(base.index())) {
                    let PtrKind::Stack { frame } = p.kind else {
                        unreachable!("stack region")
                    };
                    write_stack(
                        &mut st.frames[frame as usize],
                        p.off + off as i64,
                        size,
                        Value::unknown(),
                    );
                }
                let old = Value::scalar(if size == Size::W {
                    Scalar::urange(0, u32::MAX as u64)
                } else {
                    Scalar::UNKNOWN
                });
                if op == AtomicOp::CmpXchg {
                    st.set(0, old);
                } else if fetch || op == AtomicOp::Xchg {
                    st.set(src.index(), old);
                }
                Ok(Step::Next(pc + 1))
            }
            Insn::Jmp {
                width,
                cond,
                dst,
                src,
                off,
            } => {
                let target = (pc as i64 + 1 + off as i64) as usize;
                let taken = self.refine_branch(st.clone(), width, cond, dst, src, true);
                let fall = self.refine_branch(
                    std::mem::replace(
                        st,
                        State {
                            frames: Vec::new(),
                            refs: Vec::new(),
                            calls: 0,
                        },
                    ),
                    width,
                    cond,
                    dst,
                    src,
                    false,
                );
                match (taken, fall) {
                    (Some(t), Some(f)) => {
                        *st = f;
                        Ok(Step::Branch {
                            fall: pc + 1,
                            target,
                            other: t,
                        })
                    }
                    (Some(t), None) => {
                        *st = t;
                        Ok(Step::Next(target))
                    }
                    (None, Some(f)) => {
                        *st = f;
                        Ok(Step::Next(pc + 1))
                    }
                    // Neither outcome is possible: the path was already contradictory.
                    (None, None) => Ok(Step::End),
                }
            }
            Insn::Call(CallTarget::Helper(id)) => {
                self.call_helper(st, id)?;
                Ok(Step::Next(pc + 1))
            }
            Insn::Call(CallTarget::Local(rel)) => {
                let target = (pc as i64 + 1 + rel as i64) as usize;
                if st.frames.len() >= MAX_FRAMES {
                    return Err(Violation::new(
                        Rule::CallDepth,
                        format!("call nesting deeper than {MAX_FRAMES} frames"),
                    ));
                }
                if st.frames.iter().any(|f| f.subprog == target) {
                    return Err(Violation::new(
                        Rule::CallDepth,
                        format!("recursive call to the function at {target}"),
                    ));
                }
                self.call_edges.insert((st.cur().subprog, target));
                st.calls = st.calls.saturating_add(1);
                let mut fr = Frame::new(target, pc);
                fr.activation = st.calls;
                for r in 1..=5 {
                    fr.regs[r] = st.reg(r);
                }
                fr.regs[10] = Value::ptr(PtrKind::Stack {
                    frame: st.frames.len() as u8,
                });
                st.frames.push(fr);
                self.frame_depth.entry(target).or_insert(0);
                Ok(Step::Next(target))
            }
            Insn::Call(_) => Err(Violation::new(Rule::Unsupported, "unsupported call")),
            Insn::Exit => {
                if st.frames.len() == 1 {
                    return Ok(Step::End);
                }
                let callee = st.frames.pop().expect("more than one frame");
                let gone = st.frames.len() as u8;
                let r0 = callee.regs[0];
                st.for_each_value(|v| {
                    if let Value::Ptr(Ptr {
                        kind: PtrKind::Stack { frame },
                        ..
                    }) = v
                    {
                        if *frame >= gone {
                            *v = Value::Uninit;
                        }
                    }
                });
                for r in 1..=5 {
                    st.set(r, Value::Uninit);
                }
                st.set(0, r0);
                Ok(Step::Next(callee.callsite + 1))
            }
        }
    }

    fn alu(&mut self, st: &mut State, width: Width, op: AluOp, dst: Reg, src: Operand) {
        let wide = width == Width::W64;
        let b = operand_value(st, src);
        let a = st.reg(dst.index());
        let result = match (op, a, b) {
            (AluOp::Mov, _, Value::Ptr(p)) => Value::Ptr(p),
            (AluOp::Mov, _, Value::Scalar { val, id }) if wide => {
                // Copies share an id so that a later comparison refines both.
                if let Operand::Reg(r) = src {
                    if val.const_value().is_none() {
                        let id = if id == 0 { self.fresh_id() } else { id };
                        st.set(r.index(), Value::Scalar { val, id });
                        Value::Scalar { val, id }
                    } else {
                        Value::scalar(val)
                    }
                } else {
                    Value::scalar(val)
                }
            }
            (_, Value::Ptr(_), Value::Ptr(_)) => {
                // Same-region subtraction (checked): an offset, not an address; a 32-bit one
                // is zero-extended.
                Value::scalar(if wide {
                    Scalar::UNKNOWN
                } else {
                    Scalar::urange(0, u32::MAX as u64)
                })
            }
            (_, Value::Ptr(p), Value::Scalar { val, .. })
                if !matches!(op, AluOp::Mov | AluOp::MovSx(_)) =>
            {
                Value::Ptr(self.ptr_add(p, &val, op == AluOp::Sub))
            }
            (AluOp::Add, Value::Scalar { val, .. }, Value::Ptr(p)) => {
                Value::Ptr(self.ptr_add(p, &val, false))
            }
            (_, a, Value::Scalar { val: bv, .. }) => {
                let av = a.as_scalar().unwrap_or(Scalar::UNKNOWN);
                Value::scalar(av.alu(op, &bv, wide))
            }
            _ => Value::unknown(),
        };
        st.set(dst.index(), result);
    }

    fn ptr_add(&mut self, mut p: Ptr, val: &Scalar, sub: bool) -> Ptr {
        // `check::ptr_offset_ok` refused every constant `const_offset` refuses; the fallback
        // below only keeps this function total.
        let konst = val
            .const_value()
            .and_then(|c| crate::check::const_offset(p.off, c, sub));
        match konst {
            Some(o) => p.off = o,
            None => {
                p.var = match val.const_value() {
                    Some(_) => Scalar::UNKNOWN,
                    None if sub => p.var.sub(val),
                    None => p.var.add(val),
                };
                // A new variable part is a new pointer: it shares no range with the old id.
                if matches!(p.kind, PtrKind::Packet | PtrKind::PacketMeta) {
                    p.id = self.fresh_id();
                    p.range = 0;
                }
            }
        }
        p
    }

    fn load(
        &self,
        st: &State,
        base: Reg,
        off: i64,
        size: Size,
        sext: bool,
        region: Region,
    ) -> Result<Value, Violation> {
        let bytes = size.bytes() as u32;
        let bounded = || {
            let z = Scalar::urange(
                0,
                if bytes == 8 {
                    u64::MAX
                } else {
                    (1u64 << (8 * bytes)) - 1
                },
            );
            if sext && bytes < 8 {
                z.sext(8 * bytes)
            } else {
                z
            }
        };
        match region {
            Region::Ctx { offset } => {
                let f = self
                    .env
                    .ctx
                    .fields
                    .iter()
                    .find(|f| f.offset == offset)
                    .expect("checked field");
                if sext && f.kind != FieldKind::Scalar {
                    return Err(Violation::new(
                        Rule::CtxAccess,
                        format!(
                            "sign-extending load of the pointer field `{}` of {}: a sign-extended address is not the packet",
                            f.name, self.env.name
                        ),
                    ));
                }
                Ok(match f.kind {
                    FieldKind::Scalar => Value::scalar(bounded()),
                    FieldKind::PacketStart => Value::ptr(PtrKind::Packet),
                    FieldKind::PacketEnd => Value::ptr(PtrKind::PacketEnd),
                    FieldKind::PacketMeta => Value::ptr(PtrKind::PacketMeta),
                })
            }
            Region::Stack => {
                let Value::Ptr(p) = st.reg(base.index()) else {
                    unreachable!("stack region")
                };
                let PtrKind::Stack { frame } = p.kind else {
                    unreachable!("stack region")
                };
                let fr = &st.frames[frame as usize];
                if p.has_var_off() {
                    // Checked: every byte the load may read is initialised data. The result
                    // is known only when all of them are known zero.
                    let lo = p.off + p.var.smin + off;
                    let hi = p.off + p.var.smax + off + bytes as i64;
                    let all_zero = (lo..hi).all(|b| {
                        let (k, i) = Frame::locate(b);
                        fr.slot(k).byte(i) == ByteState::Zero
                    });
                    return Ok(Value::scalar(if all_zero {
                        Scalar::constant(0)
                    } else {
                        bounded()
                    }));
                }
                let start = p.off + off;
                let (k, first) = Frame::locate(start);
                let slot = fr.slot(k);
                if let Slot::Spill(v) = slot {
                    if bytes == 8 {
                        return Ok(v);
                    }
                    if let Value::Ptr(q) = v {
                        return Err(Violation::new(
                            Rule::PointerLeak,
                            format!("partial read of spilled pointer {q} at fp{start}"),
                        ));
                    }
                    if let Some(c) = v.as_scalar().and_then(|s| s.const_value()) {
                        let shifted = c >> (8 * first as u32);
                        let z = Scalar::constant(shifted).alu(
                            AluOp::Mov,
                            &Scalar::constant(shifted),
                            true,
                        );
                        let masked = if bytes == 8 {
                            z
                        } else {
                            Scalar::constant(shifted & ((1u64 << (8 * bytes)) - 1))
                        };
                        return Ok(Value::scalar(if sext {
                            masked.sext(8 * bytes)
                        } else {
                            masked
                        }));
                    }
                    return Ok(Value::scalar(bounded()));
                }
                let all_zero = (0..bytes as i64).all(|b| {
                    let (k, i) = Frame::locate(start + b);
                    fr.slot(k).byte(i) == ByteState::Zero
                });
                Ok(Value::scalar(if all_zero {
                    Scalar::constant(0)
                } else {
                    bounded()
                }))
            }
            _ => Ok(Value::scalar(bounded())),
        }
    }

    fn call_helper(&mut self, st: &mut State, id: i32) -> Result<(), Violation> {
        let proto = self.env.helpers.get(&id).expect("checked helper").clone();
        self.helpers_used.insert(id);
        if proto.tail_call {
            self.tail_calls = true;
        }
        // Memory the helper writes becomes initialised; records it releases become invalid.
        for (i, a) in proto.args.iter().enumerate() {
            match *a {
                crate::helpers::Arg::WriteMem { size_arg } => {
                    if let (Value::Ptr(p), Some(s)) =
                        (st.reg(i + 1), st.reg(size_arg + 1).as_scalar())
                    {
                        if let PtrKind::Stack { frame } = p.kind {
                            // The helper writes `size` bytes, as few as `s.umin`: bytes past
                            // that may keep what they held (a spilled pointer, uninitialised
                            // memory), so only the first `s.umin` become initialised.
                            for b in 0..s.umax as i64 {
                                let surely = (b as u64) < s.umin;
                                let (k, bi) = Frame::locate(p.off + b);
                                let fr = &mut st.frames[frame as usize];
                                let slot = fr.slot_mut(k);
                                // The rest of a spilled pointer the helper overwrites in part
                                // becomes unreadable, as with a plain store (`write_stack`):
                                // its other bytes are still the address.
                                let spilled_ptr = slot.holds_pointer();
                                let mut bytes = [ByteState::Invalid; 8];
                                for (j, x) in bytes.iter_mut().enumerate() {
                                    if !spilled_ptr {
                                        *x = slot.byte(j);
                                    }
                                }
                                if surely || bytes[bi] != ByteState::Invalid {
                                    bytes[bi] = ByteState::Misc;
                                }
                                *slot = Slot::Bytes(bytes);
                            }
                            self.note_stack_depth(st);
                        }
                    }
                }
                crate::helpers::Arg::Record => {
                    if let Value::Ptr(Ptr {
                        kind: PtrKind::Record { ref_id, .. },
                        ..
                    }) = st.reg(i + 1)
                    {
                        st.refs.retain(|r| *r != ref_id);
                        invalidate_ref(st, ref_id);
                    }
                }
                _ => {}
            }
        }
        let r0 = match proto.ret {
            Ret::Scalar(s) => Value::scalar(s),
            Ret::MapValueOrNull => {
                let Value::Ptr(Ptr {
                    kind: PtrKind::MapObj { map },
                    ..
                }) = st.reg(1)
                else {
                    unreachable!("checked map arg")
                };
                let mut p = Ptr::new(PtrKind::MapValueOrNull { map });
                p.id = self.fresh_id();
                Value::Ptr(p)
            }
            Ret::RecordOrNull => {
                let size = st
                    .reg(2)
                    .as_scalar()
                    .and_then(|s| s.const_value())
                    .expect("checked const size") as u32;
                let ref_id = self.fresh_id();
                st.refs.push(ref_id);
                let mut p = Ptr::new(PtrKind::RecordOrNull { ref_id, size });
                p.id = ref_id;
                Value::Ptr(p)
            }
            Ret::HostVar { var } => Value::ptr(PtrKind::HostVar { var }),
        };
        for r in 1..=5 {
            st.set(r, Value::Uninit);
        }
        st.set(0, r0);
        Ok(())
    }

    /// The state after the branch `dst cond src` is taken (or not); `None` if impossible.
    fn refine_branch(
        &self,
        st: State,
        width: Width,
        cond: JmpCond,
        dst: Reg,
        src: Operand,
        taken: bool,
    ) -> Option<State> {
        let a = st.reg(dst.index());
        let b = operand_value(&st, src);
        let mut out = st;
        match (a, b) {
            (Value::Scalar { val: x, id: ia }, Value::Scalar { val: y, id: ib }) => {
                let (rx, ry) = if width == Width::W64 {
                    Scalar::refine64(cond, taken, &x, &y)?
                } else {
                    Scalar::refine32(cond, taken, &x, &y)?
                };
                set_scalar(&mut out, dst.index(), rx, ia);
                if let Operand::Reg(r) = src {
                    set_scalar(&mut out, r.index(), ry, ib);
                }
                Some(out)
            }
            (Value::Ptr(p), Value::Scalar { .. }) | (Value::Scalar { .. }, Value::Ptr(p)) => {
                // A null check (the only pointer/number comparison the checks allow).
                let is_null = match (cond, taken) {
                    (JmpCond::Eq, t) => t,
                    (JmpCond::Ne, t) => !t,
                    _ => return Some(out),
                };
                if !p.kind.is_nullable() {
                    return if is_null { None } else { Some(out) };
                }
                let id = p.id;
                if is_null {
                    if let PtrKind::RecordOrNull { ref_id, .. } = p.kind {
                        out.refs.retain(|r| *r != ref_id);
                    }
                }
                out.for_each_value(|v| {
                    if let Value::Ptr(q) = v {
                        if q.kind.is_nullable() && q.id == id {
                            *v = if is_null {
                                Value::scalar(Scalar::constant(0))
                            } else {
                                let mut n = *q;
                                n.kind = match q.kind {
                                    PtrKind::MapValueOrNull { map } => PtrKind::MapValue { map },
                                    PtrKind::RecordOrNull { ref_id, size } => {
                                        PtrKind::Record { ref_id, size }
                                    }
                                    k => k,
                                };
                                n.id = 0;
                                Value::Ptr(n)
                            };
                        }
                    }
                });
                Some(out)
            }
            (Value::Ptr(p), Value::Ptr(q)) => {
                // Packet bounds checks: `pkt + n <= pkt_end` (or `meta + n <= data`).
                let Some((le, strict)) = implies_le(cond, taken) else {
                    return Some(out);
                };
                let (lo, hi) = if le { (p, q) } else { (q, p) };
                let bound = match (lo.kind, hi.kind) {
                    (PtrKind::Packet, PtrKind::PacketEnd) => true,
                    (PtrKind::PacketMeta, PtrKind::Packet) => hi.off == 0 && !hi.has_var_off(),
                    _ => false,
                };
                // As in the kernel: only a pointer whose variable part is known non-negative
                // and whose whole offset stays within the largest packet teaches a range.
                let sane = lo.off >= 0
                    && lo.var.smin >= 0
                    && (lo.var.umax as u128 + lo.off as u128) <= crate::check::MAX_PACKET_OFF;
                if bound && sane {
                    // `lo < hi` leaves one more byte before `hi` than `lo <= hi`.
                    let (kind, id, range) = (lo.kind, lo.id, lo.off + strict as i64);
                    out.for_each_value(|v| {
                        if let Value::Ptr(r) = v {
                            if r.kind == kind && r.id == id {
                                r.range = r.range.max(range);
                            }
                        }
                    });
                }
                Some(out)
            }
            _ => Some(out),
        }
    }
}

/// Slots `lo..=hi` of a frame.
fn slot_range(lo: usize, hi: usize) -> SlotSet {
    if lo > hi || lo >= 64 {
        return 0;
    }
    let hi = hi.min(63);
    let upto = if hi == 63 {
        u64::MAX
    } else {
        (1u64 << (hi + 1)) - 1
    };
    upto & !((1u64 << lo) - 1)
}

fn set_scalar(st: &mut State, r: usize, val: Scalar, id: u32) {
    if id == 0 {
        st.set(r, Value::Scalar { val, id });
        return;
    }
    st.for_each_value(|v| {
        if let Value::Scalar { id: i, .. } = v {
            if *i == id {
                *v = Value::Scalar { val, id };
            }
        }
    });
}

fn invalidate_ref(st: &mut State, ref_id: u32) {
    st.for_each_value(|v| {
        if let Value::Ptr(Ptr {
            kind: PtrKind::Record { ref_id: r, .. } | PtrKind::RecordOrNull { ref_id: r, .. },
            ..
        }) = v
        {
            if *r == ref_id {
                *v = Value::Uninit;
            }
        }
    });
}

/// Writes `v` (already checked) to the stack of `fr` at `start` (negative offset).
fn write_stack(fr: &mut Frame, start: i64, size: Size, v: Value) {
    let n = size.bytes() as i64;
    let (k, first) = Frame::locate(start);
    if n == 8 && first == 0 {
        *fr.slot_mut(k) = Slot::Spill(v);
        return;
    }
    let konst = v.as_scalar().and_then(|s| s.const_value());
    for b in 0..n {
        let (k, i) = Frame::locate(start + b);
        let slot = fr.slot_mut(k);
        let mut bytes = [ByteState::Invalid; 8];
        let spilled_ptr = slot.holds_pointer();
        for (j, x) in bytes.iter_mut().enumerate() {
            // The rest of a partly overwritten pointer spill becomes unreadable.
            *x = if spilled_ptr {
                ByteState::Invalid
            } else {
                slot.byte(j)
            };
        }
        bytes[i] = match konst {
            Some(c) if (c >> (8 * b)) & 0xff == 0 => ByteState::Zero,
            _ => ByteState::Misc,
        };
        *slot = Slot::Bytes(bytes);
    }
}

/// An upper bound of two states at a loop head, with every moving bound pushed to its
/// extreme; `None` when their shapes differ (frames, references, pointer kinds).
fn widen(old: &State, new: &State) -> Option<State> {
    if old.frames.len() != new.frames.len() || old.refs != new.refs {
        return None;
    }
    let mut out = new.clone();
    for (fo, fw) in old.frames.iter().zip(out.frames.iter_mut()) {
        if fo.callsite != fw.callsite || fo.subprog != fw.subprog {
            return None;
        }
        for (a, b) in fo.regs.iter().zip(fw.regs.iter_mut()) {
            *b = widen_value(a, b);
        }
        let len = fo.stack.len().max(fw.stack.len());
        for k in 0..len {
            let (sa, sb) = (fo.slot(k), fw.slot(k));
            let merged = match (sa, sb) {
                (Slot::Spill(x), Slot::Spill(y)) => Slot::Spill(widen_value(&x, &y)),
                _ => {
                    let mut bytes = [ByteState::Invalid; 8];
                    for (i, x) in bytes.iter_mut().enumerate() {
                        *x = match (sa.byte(i), sb.byte(i)) {
                            (ByteState::Zero, ByteState::Zero) => ByteState::Zero,
                            (ByteState::Invalid, _) | (_, ByteState::Invalid) => ByteState::Invalid,
                            _ => ByteState::Misc,
                        };
                        if sa.holds_pointer() || sb.holds_pointer() {
                            *x = ByteState::Invalid;
                        }
                    }
                    Slot::Bytes(bytes)
                }
            };
            *fw.slot_mut(k) = merged;
        }
    }
    Some(out)
}

fn widen_value(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Scalar { val: x, .. }, Value::Scalar { val: y, .. }) => Value::scalar(x.widen(y)),
        (Value::Ptr(p), Value::Ptr(q)) if p.kind == q.kind && p.off == q.off && p.id == q.id => {
            let mut r = *q;
            r.var = p.var.widen(&q.var);
            r.range = p.range.min(q.range);
            Value::Ptr(r)
        }
        _ => Value::Uninit,
    }
}

/// Whether the cycle from in-progress ancestor state `ancestor` to `now` (at the same
/// `may_goto`) took that instruction's fall-through in one and the same activation of the
/// innermost function: only then does the activation's hidden counter, spent once per
/// fall-through and never refilled, bound the cycle. A cycle through the taken edge spends
/// nothing, and one through a new call of the function starts from a full counter.
fn spent_may_goto(ancestor: &State, now: &State) -> bool {
    let (a, b) = (ancestor.cur(), now.cur());
    ancestor.frames.len() == now.frames.len()
        && a.activation == b.activation
        && b.may_goto_passes > a.may_goto_passes
}
