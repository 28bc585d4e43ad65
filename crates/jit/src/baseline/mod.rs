//! The baseline tier ([`crate::Pipeline::Baseline`]): one linear pass over verified eBPF that
//! emits x86-64 or aarch64 machine code directly (through `dynasmrt`'s assemblers), with every
//! eBPF register in a fixed native register, as the kernel's own JITs do.
//!
//! It produces the same [`Artifact`] as the Cranelift pipelines: the same entry ABI
//! ([`crate::EntryAbi`]), the same `Abs64` relocations for helpers, maps, map values and host
//! variables, the same metadata, the same budget metering (each function's length charged on
//! entry, each loop's length at its back-edge, [`RunStatus::BudgetExhausted`] when it runs
//! out) and the same abnormal stops. The options hash records the pipeline, so a cache never
//! mixes tiers. What it does not build (elite artifacts with deoptimisation guards, scouting
//! branch counters) is refused with [`CompileError::NotInBaseline`]; the caller compiles
//! those with Cranelift.
//!
//! Generated code is plain: registers are never spilled or cached, and the 512-byte eBPF
//! frame of each function lives on the native stack. Every instruction becomes a short fixed
//! sequence, except for a few straight-line patterns that clang emits all the time, which the
//! same pass recognises by looking ahead within a basic block and emits as one native
//! instruction each ([`Driver::fused`]): address arithmetic (`rX = rY; rX += k; rX += rZ`)
//! as one address computation, folded into a load of `rX` through it when one follows;
//! extensions (`rX <<= 32; rX >>= 32` or `s>>= 32`, also of a copy) as one move; and for an
//! array lookup compiled inline, the map pointer not loaded at all, the key taken from the
//! register it was stored from, and no range check when a mask bounds it. Each pattern is
//! decided by a short look ahead or back inside the basic block (stopping at the first slot
//! that decides it); the code is still emitted in one pass, and the `tiers` bench's compile
//! time per 1K instructions moved within its noise. `docs/jit.md` compares its compile time
//! and code speed with the Cranelift tiers.

mod a64;
mod x64;

use dynasmrt::DynamicLabel;
use rdx_bpf::isa::{
    AluOp, AtomicOp, ByteOrder, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width,
};
use rdx_region::abi::RunStatus;

use crate::artifact::{Artifact, RelocKind, Relocation, Symbol, HELPER_TABLE_SYMBOL};
use crate::blinding::{blinds_constants, plain_constant};
use crate::error::CompileError;
use crate::options::{metadata, CompileOptions, EntryAbi, HelperCalls, InlineArray};
use crate::plan::{
    callee_index, effective_options, max_call_depth, may_tail_call, plan_functions, FuncPlan,
    BPF_FUNC_TAIL_CALL,
};
use rdx_region::layout::Arch;

/// `call` immediate of `map_lookup_elem` (a constant, for patterns).
const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = rdx_region::helpers::HelperId::MAP_LOOKUP_ELEM.imm();

/// Where an inlined array lookup finds its 4-byte key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    /// In memory at `r2`.
    AtR2,
    /// In memory at `r10 + off` (what `r2` holds).
    Frame(i32),
    /// In the backend's key register: [`Emit::keep_key`] copied it there when the store
    /// that writes it to the frame was emitted.
    Kept,
}

/// A native address: `base + index + disp` (64-bit wrapping, as eBPF's additions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Addr {
    base: Reg,
    index: Option<Reg>,
    disp: i32,
}

/// What a native backend emits for the driver. Registers are eBPF registers; each backend
/// maps them to its fixed native registers. Methods that leave a 64-bit word for the linker
/// return its byte offset in the code.
trait Emit {
    fn offset(&self) -> usize;
    fn new_label(&mut self) -> DynamicLabel;
    fn bind(&mut self, label: DynamicLabel);
    /// Pads to a 16-byte boundary with trapping bytes.
    fn pad16(&mut self);
    /// Saves callee-saved registers, makes the 512-byte frame and points `r10` at its top.
    /// The entry function also takes the run state and its arguments (`entry = Some`).
    fn prologue(&mut self, entry: Option<EntryAbi>);
    /// Returns `r0` to the caller.
    fn epilogue(&mut self, entry: bool);
    /// Returns 0 (after the run was stopped).
    fn return_zero(&mut self, entry: bool);
    /// `RunState.status = status` (and `budget = 0` when `zero_budget`).
    fn set_status(&mut self, status: RunStatus, zero_budget: bool);
    /// Subtracts `amount` from `RunState.budget`, jumping to `exhausted` if it does not cover
    /// it.
    fn charge(&mut self, amount: u64, exhausted: DynamicLabel);
    fn alu(&mut self, width: Width, op: AluOp, dst: Reg, src: Operand);
    fn endian(&mut self, order: ByteOrder, bits: u8, dst: Reg);
    fn load(&mut self, size: Size, sign_extend: bool, dst: Reg, base: Reg, off: i16);
    /// `dst = *(size *)(addr)`.
    fn load_addr(&mut self, size: Size, sign_extend: bool, dst: Reg, addr: Addr);
    /// `dst = addr` (the address itself).
    fn lea(&mut self, dst: Reg, addr: Addr);
    /// `dst = a; dst op= src` as one three-operand instruction if the architecture has one
    /// (`op` is add, sub, mul, or, and, xor or a shift; `src` is not `dst`); false, emitting
    /// nothing, if it does not.
    fn alu3(&mut self, width: Width, op: AluOp, dst: Reg, a: Reg, src: Operand) -> bool;
    fn store(&mut self, size: Size, base: Reg, off: i16, src: Operand);
    fn atomic(&mut self, size: Size, op: AtomicOp, fetch: bool, base: Reg, off: i16, src: Reg);
    fn load_imm64(&mut self, dst: Reg, value: u64);
    /// `dst = <64-bit word the linker fills>`; returns the word's offset.
    fn load_word(&mut self, dst: Reg) -> usize;
    fn jump(&mut self, label: DynamicLabel);
    fn branch(&mut self, width: Width, cond: JmpCond, dst: Reg, src: Operand, label: DynamicLabel);
    /// Calls the helper at a linked address; `r0` = its result.
    fn call_direct(&mut self) -> usize;
    /// Calls entry `id` of the helper table at a linked address.
    fn call_table(&mut self, id: u32) -> usize;
    /// `callx r`: calls table entry `r`, jumping to `bad` when `r >= table_len`.
    fn call_reg(&mut self, r: Reg, table_len: u32, bad: DynamicLabel) -> usize;
    fn call_local(&mut self, function: DynamicLabel);
    /// Jumps to `stopped` if `RunState.status` is set.
    fn branch_if_stopped(&mut self, stopped: DynamicLabel);
    /// `r0 = key < max_entries ? base + key * stride : 0` with the 4-byte key where `key`
    /// says and `base` a linked word; without the range check when `checked` is false (the
    /// key is known to be in range).
    fn inline_lookup(&mut self, array: InlineArray, key: Key, checked: bool) -> usize;
    /// Copies the low 32 bits of `src` into the key register of [`Key::Kept`], which the
    /// instructions [`keeps_key_register`] accepts leave alone.
    fn keep_key(&mut self, src: Reg);
    fn finish(self) -> Result<Vec<u8>, String>;
}

/// Compiles a decoded, verified program with the baseline tier; returns the artifact and how
/// many slots it compiled.
pub(crate) fn compile(
    insns: &[Insn],
    opts: &CompileOptions,
) -> Result<(Artifact, usize), CompileError> {
    crate::compile::refuse_may_goto(insns)?;
    let opts = &*effective_options(opts, insns);
    match opts.arch {
        Arch::X86_64 => compile_with(
            x64::X64::new(insns.len(), blinds_constants(opts)),
            insns,
            opts,
        ),
        Arch::Aarch64 => compile_with(a64::A64::new(insns.len()), insns, opts),
    }
}

fn compile_with<E: Emit>(
    mut e: E,
    insns: &[Insn],
    opts: &CompileOptions,
) -> Result<(Artifact, usize), CompileError> {
    if opts.speculation().is_some() {
        return Err(CompileError::NotInBaseline {
            what: "elite artifacts (deoptimisation guards)".into(),
        });
    }
    if opts.branch_counters().is_some() {
        return Err(CompileError::NotInBaseline {
            what: "branch counters".into(),
        });
    }
    if insns.is_empty() {
        return Err(CompileError::Empty);
    }
    let plans = plan_functions(insns)?;
    let depth = max_call_depth(&plans, insns)?;
    // A tail call (or a `callx`, which may be one) ends the run when it succeeds.
    let may_stop = opts.needs_budget || insns.iter().any(may_tail_call);
    let mut d = Driver {
        insns,
        opts,
        plans: &plans,
        func_labels: plans.iter().map(|_| e.new_label()).collect(),
        labels: vec![None; insns.len()],
        block_start: vec![false; insns.len()],
        symbols: Vec::new(),
        relocations: Vec::new(),
        may_stop,
        live_slots: 0,
        key_kept: None,
    };
    let mut func_offsets = Vec::with_capacity(plans.len());
    for fi in 0..plans.len() {
        e.pad16();
        func_offsets.push(e.offset() as u32);
        d.function(&mut e, fi)?;
    }
    let code = e.finish().map_err(|reason| CompileError::Codegen {
        function: 0,
        reason,
    })?;

    let live_slots = d.live_slots;
    let artifact = Artifact {
        meta: metadata(insns, opts, func_offsets[0], depth, plans.len()),
        code,
        symbols: d.symbols,
        relocations: d.relocations,
    };
    Ok((artifact, live_slots))
}

struct Driver<'a> {
    insns: &'a [Insn],
    opts: &'a CompileOptions,
    plans: &'a [FuncPlan],
    func_labels: Vec<DynamicLabel>,
    /// Label of each jump target (created on first use).
    labels: Vec<Option<DynamicLabel>>,
    /// Slots that start a basic block: jump targets and slots after a jump or exit.
    block_start: Vec<bool>,
    symbols: Vec<Symbol>,
    relocations: Vec<Relocation>,
    /// Whether a callee can stop the run, so callers check the status after local calls.
    may_stop: bool,
    live_slots: usize,
    /// The slot of the inlined lookup whose key the last key store also left in the key
    /// register ([`Key::Kept`]).
    key_kept: Option<usize>,
}

/// Per-function labels of the shared stubs.
struct Stubs {
    exhausted: DynamicLabel,
    bad_helper: Option<DynamicLabel>,
    stopped: Option<DynamicLabel>,
    /// Back-edge meters: (label, charge, loop head).
    meters: Vec<(DynamicLabel, u64, DynamicLabel)>,
    exhausted_used: bool,
}

impl Driver<'_> {
    fn symbol_index(&mut self, sym: Symbol) -> u32 {
        match self.symbols.iter().position(|s| *s == sym) {
            Some(i) => i as u32,
            None => {
                self.symbols.push(sym);
                (self.symbols.len() - 1) as u32
            }
        }
    }

    fn reloc(&mut self, offset: usize, sym: Symbol, addend: i64) {
        let symbol = self.symbol_index(sym);
        self.relocations.push(Relocation {
            offset: offset as u32,
            kind: RelocKind::Abs64,
            symbol,
            addend,
        });
    }

    fn label_at<E: Emit>(&mut self, e: &mut E, pc: usize) -> DynamicLabel {
        *self.labels[pc].get_or_insert_with(|| e.new_label())
    }

    /// Which slots of `plan` run: everything reachable from its start. Others are not
    /// compiled (as in the Cranelift tier, so that both refuse the same programs).
    fn live(&self, plan: FuncPlan) -> Vec<bool> {
        let insns = self.insns;
        let mut live = vec![false; plan.end - plan.start];
        let mut work = vec![plan.start];
        while let Some(pc) = work.pop() {
            if pc < plan.start || pc >= plan.end || live[pc - plan.start] {
                continue;
            }
            live[pc - plan.start] = true;
            let insn = &insns[pc];
            match insn {
                Insn::Exit => {}
                Insn::Ja { .. } => work.extend(insn.jump_target(pc).map(|t| t as usize)),
                Insn::Jmp { .. } => {
                    work.extend(insn.jump_target(pc).map(|t| t as usize));
                    work.push(pc + 1);
                }
                Insn::LoadImm64 { .. } => work.push(pc + 2),
                _ => work.push(pc + 1),
            }
        }
        live
    }

    fn function<E: Emit>(&mut self, e: &mut E, fi: usize) -> Result<(), CompileError> {
        let plan = self.plans[fi];
        let entry = fi == 0;
        let live = self.live(plan);
        for pc in plan.start..plan.end {
            if !live[pc - plan.start] {
                continue;
            }
            let insn = self.insns[pc];
            if let Some(t) = insn.jump_target(pc) {
                let t = t as usize;
                if self.insns[t] == Insn::LoadImm64Hi {
                    return Err(CompileError::LddwSecondSlot { pc: t });
                }
                self.block_start[t] = true;
            }
            if matches!(insn, Insn::Ja { .. } | Insn::Jmp { .. } | Insn::Exit) && pc + 1 < plan.end
            {
                self.block_start[pc + 1] = true;
            }
        }
        self.live_slots += live.iter().filter(|l| **l).count();

        e.bind(self.func_labels[fi]);
        e.prologue(entry.then_some(self.opts.entry_abi));
        let mut stubs = Stubs {
            exhausted: e.new_label(),
            bad_helper: None,
            stopped: None,
            meters: Vec::new(),
            exhausted_used: false,
        };
        if self.opts.needs_budget {
            // Straight-line code is bounded by the function's length: charged once per entry,
            // each loop's length at its back-edge.
            e.charge((plan.end - plan.start) as u64, stubs.exhausted);
            stubs.exhausted_used = true;
        }

        let mut open = true;
        let mut pc = plan.start;
        while pc < plan.end {
            if !live[pc - plan.start] {
                pc += 1;
                continue;
            }
            if self.block_start[pc] {
                let l = self.label_at(e, pc);
                e.bind(l);
            }
            if let Some(slots) = self.fused(e, plan, pc) {
                open = true;
                pc += slots;
                continue;
            }
            let insn = self.insns[pc];
            open = self.insn(e, pc, plan, insn, &mut stubs, entry)?;
            pc += if matches!(insn, Insn::LoadImm64 { .. }) {
                2
            } else {
                1
            };
        }
        if open || pc > plan.end {
            return Err(CompileError::FallsOffEnd {
                function: plan.start,
                pc: plan.end - 1,
            });
        }

        for (label, amount, head) in std::mem::take(&mut stubs.meters) {
            e.bind(label);
            e.charge(amount, stubs.exhausted);
            e.jump(head);
        }
        if stubs.exhausted_used {
            e.bind(stubs.exhausted);
            e.set_status(RunStatus::BudgetExhausted, true);
            e.return_zero(entry);
        }
        if let Some(bad) = stubs.bad_helper {
            e.bind(bad);
            e.set_status(RunStatus::BadHelper, false);
            e.return_zero(entry);
        }
        if let Some(stopped) = stubs.stopped {
            e.bind(stopped);
            e.return_zero(entry);
        }
        Ok(())
    }

    /// The label a jump from `pc` to `target` goes to: the target, or for a back-edge of
    /// metered code a stub that charges the loop's length first.
    fn edge<E: Emit>(
        &mut self,
        e: &mut E,
        pc: usize,
        target: usize,
        stubs: &mut Stubs,
    ) -> DynamicLabel {
        let dest = self.label_at(e, target);
        if !self.opts.needs_budget || target > pc {
            return dest;
        }
        let meter = e.new_label();
        stubs.meters.push((meter, (pc - target + 1) as u64, dest));
        meter
    }

    /// The instruction at `pc` if it continues the straight-line run before it: inside the
    /// function and not a jump target.
    fn chained(&self, plan: FuncPlan, pc: usize) -> Option<Insn> {
        (pc < plan.end && !self.block_start[pc]).then(|| self.insns[pc])
    }

    /// Emits the straight-line pattern starting at `pc` as fewer native instructions, if
    /// there is one; returns the slots it covered. Every slot after the first continues the
    /// run (not a jump target), so no other path sees the skipped intermediate values; the
    /// registers end exactly as the slots one by one would leave them.
    fn fused<E: Emit>(&mut self, e: &mut E, plan: FuncPlan, pc: usize) -> Option<usize> {
        use Insn::Alu;
        let mov64 = |insn: Option<Insn>| match insn {
            Some(Alu {
                width: Width::W64,
                op: AluOp::Mov,
                dst,
                src: Operand::Reg(src),
            }) if src != dst => Some((dst, src)),
            _ => None,
        };
        let shift32 = |insn: Option<Insn>, op: AluOp, x: Reg| matches!(insn, Some(Alu { width: Width::W64, op: o, dst, src: Operand::Imm(32) }) if o == op && dst == x);

        // A copy's extension: rA <<= 32; rB = rA; rB >>= 32  ->  rB = (u32) rA, then
        // rA <<= 32 unless rA is overwritten before it is read again in this run.
        if let Alu { dst: a, .. } = self.insns[pc] {
            if shift32(Some(self.insns[pc]), AluOp::Lsh, a) {
                if let Some((b, src)) = mov64(self.chained(plan, pc + 1)) {
                    if src == a && shift32(self.chained(plan, pc + 2), AluOp::Rsh, b) {
                        e.alu(Width::W32, AluOp::Mov, b, Operand::Reg(a));
                        if !self.dead_after(plan, pc + 3, a) {
                            e.alu(Width::W64, AluOp::Lsh, a, Operand::Imm(32));
                        }
                        return Some(3);
                    }
                }
            }
        }

        // Extension: [rX = rY;] rX <<= 32; rX >>= 32 (s>>= 32)  ->  rX = (u32) rY ((s32) rY).
        let (x, y, k) = match mov64(Some(self.insns[pc])) {
            Some((x, y)) => (x, y, pc + 1),
            None => match self.insns[pc] {
                Alu { dst, .. } => (dst, dst, pc),
                _ => return None,
            },
        };
        let first = if k == pc {
            Some(self.insns[pc])
        } else {
            self.chained(plan, k)
        };
        if shift32(first, AluOp::Lsh, x) {
            let second = self.chained(plan, k + 1);
            if shift32(second, AluOp::Rsh, x) {
                e.alu(Width::W32, AluOp::Mov, x, Operand::Reg(y));
                return Some(k + 2 - pc);
            }
            if shift32(second, AluOp::Arsh, x) {
                e.alu(Width::W64, AluOp::MovSx(32), x, Operand::Reg(y));
                return Some(k + 2 - pc);
            }
        }

        // A copy and an operation on it: rX = rY; rX op= src  ->  rX = rY op src, where the
        // architecture has three-operand forms (64-bit additions go to the address form
        // below, which can take more slots).
        if let Some((x, y)) = mov64(Some(self.insns[pc])) {
            if let Some(Alu {
                width,
                op,
                dst,
                src,
            }) = self.chained(plan, pc + 1)
            {
                let address = width == Width::W64
                    && matches!((op, src), (AluOp::Add, _) | (AluOp::Sub, Operand::Imm(_)));
                let three = matches!(
                    op,
                    AluOp::Add
                        | AluOp::Sub
                        | AluOp::Mul
                        | AluOp::Or
                        | AluOp::And
                        | AluOp::Xor
                        | AluOp::Lsh
                        | AluOp::Rsh
                        | AluOp::Arsh
                );
                if dst == x && three && !address {
                    let src = if src == Operand::Reg(x) {
                        Operand::Reg(y)
                    } else {
                        src
                    };
                    if e.alu3(width, op, x, y, src) {
                        return Some(2);
                    }
                }
            }
        }

        // Address arithmetic: rX = rY (or rX += rZ), then any of rX += k, rX -= k and one
        // rX += rZ; folded into a following load rX = *(rX + off) when there is one.
        let (x, mut addr, mut next) = match (mov64(Some(self.insns[pc])), self.insns[pc]) {
            (Some((x, y)), _) => (
                x,
                Addr {
                    base: y,
                    index: None,
                    disp: 0,
                },
                pc + 1,
            ),
            (
                None,
                Alu {
                    width: Width::W64,
                    op: AluOp::Add,
                    dst,
                    src: Operand::Reg(z),
                },
            ) if z != dst => (
                dst,
                Addr {
                    base: dst,
                    index: Some(z),
                    disp: 0,
                },
                pc + 1,
            ),
            _ => return None,
        };
        let mut disp = 0i64;
        loop {
            match self.chained(plan, next) {
                Some(Alu {
                    width: Width::W64,
                    op: op @ (AluOp::Add | AluOp::Sub),
                    dst,
                    src: Operand::Imm(k),
                }) if dst == x => {
                    disp += if op == AluOp::Add {
                        k as i64
                    } else {
                        -(k as i64)
                    };
                }
                Some(Alu {
                    width: Width::W64,
                    op: AluOp::Add,
                    dst,
                    src: Operand::Reg(z),
                }) if dst == x && z != x && addr.index.is_none() => addr.index = Some(z),
                _ => break,
            }
            next += 1;
        }
        if let Some(Insn::Load {
            size,
            sign_extend,
            dst,
            base,
            off,
        }) = self.chained(plan, next)
        {
            // The load replaces rX: the address itself is never observed.
            if dst == x && base == x && self.displacement_shown(disp + off as i64) {
                if let Ok(d) = i32::try_from(disp + off as i64) {
                    addr.disp = d;
                    e.load_addr(size, sign_extend, x, addr);
                    return Some(next + 1 - pc);
                }
            }
        }
        if next - pc < 2 || !self.displacement_shown(disp) {
            return None;
        }
        addr.disp = i32::try_from(disp).ok()?;
        e.lea(x, addr);
        Some(next - pc)
    }

    /// Whether a displacement the program's constants add up to may appear in the code as
    /// it is: blinding is off, or it is small. A larger one is not folded into an address:
    /// the instructions are emitted one by one, with their constants blinded.
    fn displacement_shown(&self, disp: i64) -> bool {
        !blinds_constants(self.opts) || plain_constant(disp)
    }

    /// Whether `reg`'s value on entry to slot `pc` is never read: overwritten first in the
    /// same straight-line run (a jump, call or the run's end may read it: not dead).
    fn dead_after(&self, plan: FuncPlan, pc: usize, reg: Reg) -> bool {
        let mut j = pc;
        while let Some(insn) = self.chained(plan, j) {
            if matches!(
                insn,
                Insn::Call(_) | Insn::Exit | Insn::Ja { .. } | Insn::Jmp { .. }
            ) || reads(&insn, reg)
            {
                return false;
            }
            if writes(&insn, reg) {
                return true;
            }
            j += if matches!(insn, Insn::LoadImm64 { .. }) {
                2
            } else {
                1
            };
        }
        false
    }

    /// Whether the `lddw r1, map` at `pc` only feeds a lookup in that map compiled inline
    /// later in the same straight-line run (which takes the map's address from a relocation,
    /// not from r1), with nothing in between mentioning r1. Helper calls leave r1
    /// undefined, so nothing may read the map pointer after the lookup either.
    fn only_feeds_inline_lookup(&self, plan: FuncPlan, pc: usize) -> bool {
        let mut j = pc + 2;
        while let Some(insn) = self.chained(plan, j) {
            match insn {
                Insn::Call(CallTarget::Helper(BPF_FUNC_MAP_LOOKUP_ELEM)) => {
                    return self.inline_array_at(plan, j).is_some()
                }
                Insn::Call(_) | Insn::Exit | Insn::Ja { .. } | Insn::Jmp { .. } => return false,
                Insn::LoadImm64 { .. } | Insn::LoadImm64Hi => return false,
                insn if mentions(&insn, Reg(1)) => return false,
                _ => j += 1,
            }
        }
        false
    }

    /// `Some(off)` if `r2` holds `r10 + off` at the call in slot `pc`: set by `r2 = r10;
    /// r2 += off` earlier in the same straight-line run, with nothing after mentioning r2.
    /// The lookup then reads the key through the frame pointer, as it was stored.
    fn r2_in_frame(&self, plan: FuncPlan, pc: usize) -> Option<i32> {
        let r2 = Reg(2);
        let mut j = pc;
        while j > plan.start && !self.block_start[j] {
            j -= 1;
            let insn = self.insns[j];
            if matches!(insn, Insn::Call(_)) {
                return None;
            }
            if !mentions(&insn, r2) {
                continue;
            }
            let Insn::Alu {
                width: Width::W64,
                op: AluOp::Add,
                dst,
                src: Operand::Imm(off),
            } = insn
            else {
                return None;
            };
            let set = j > plan.start
                && !self.block_start[j]
                && self.insns[j - 1]
                    == Insn::Alu {
                        width: Width::W64,
                        op: AluOp::Mov,
                        dst: r2,
                        src: Operand::Reg(Reg(10)),
                    };
            return (dst == r2 && set).then_some(off);
        }
        None
    }

    /// The key store of the inlined lookup in slot `call` whose `r2` is `r10 + off`: the last
    /// `*(u32 *)(r10 + off) = rS` before it in the same straight-line run, with no other
    /// memory write (or call) in between. Returns its slot and `rS`.
    fn key_store(&self, plan: FuncPlan, call: usize, off: i32) -> Option<(usize, Reg)> {
        let mut j = call;
        while j > plan.start && !self.block_start[j] {
            j -= 1;
            match self.insns[j] {
                Insn::Store {
                    size: Size::W,
                    base: Reg(10),
                    off: o,
                    src: Operand::Reg(s),
                } if o as i32 == off => return Some((j, s)),
                Insn::Store { .. } | Insn::Atomic { .. } | Insn::Call(_) => return None,
                _ => {}
            }
        }
        None
    }

    /// If the store in slot `pc` writes the key of an inlined lookup later in the same run,
    /// with only instructions between that leave the key register alone, that lookup's slot:
    /// the store then also keeps the key in the key register, and the lookup takes it from
    /// there instead of reading it back from memory.
    fn key_for_lookup(&self, plan: FuncPlan, pc: usize) -> Option<usize> {
        let Insn::Store {
            size: Size::W,
            base: Reg(10),
            off,
            src: Operand::Reg(_),
        } = self.insns[pc]
        else {
            return None;
        };
        let mut j = pc + 1;
        while let Some(insn) = self.chained(plan, j) {
            match insn {
                Insn::Call(CallTarget::Helper(BPF_FUNC_MAP_LOOKUP_ELEM)) => {
                    let found = self.inline_array_at(plan, j).is_some()
                        && self.r2_in_frame(plan, j) == Some(off as i32)
                        && self.key_store(plan, j, off as i32).map(|(st, _)| st) == Some(pc);
                    return found.then_some(j);
                }
                Insn::LoadImm64 { .. } => j += 2,
                insn if keeps_key_register(&insn) => j += 1,
                _ => return None,
            }
        }
        None
    }

    /// Whether the key the inlined lookup in slot `call` reads at `r10 + off` is below the
    /// array's length: its store's register was last set by `& mask` or a constant below it.
    fn key_in_range(&self, plan: FuncPlan, call: usize, off: i32, array: InlineArray) -> bool {
        let Some((store, s)) = self.key_store(plan, call, off) else {
            return false;
        };
        let mut j = store;
        while j > plan.start && !self.block_start[j] {
            j -= 1;
            let insn = self.insns[j];
            if !writes(&insn, s) {
                continue;
            }
            return match insn {
                Insn::Alu {
                    op: AluOp::And | AluOp::Mov,
                    dst,
                    src: Operand::Imm(k),
                    ..
                } => dst == s && k >= 0 && (k as u32) < array.max_entries,
                _ => false,
            };
        }
        false
    }

    /// Emits one instruction; returns whether execution can continue with the next slot.
    fn insn<E: Emit>(
        &mut self,
        e: &mut E,
        pc: usize,
        plan: FuncPlan,
        insn: Insn,
        stubs: &mut Stubs,
        entry: bool,
    ) -> Result<bool, CompileError> {
        match insn {
            Insn::Alu {
                width,
                op,
                dst,
                src,
            } => e.alu(width, op, dst, src),
            Insn::Endian { order, bits, dst } => e.endian(order, bits, dst),
            Insn::MayGoto { .. } => return Err(crate::compile::may_goto_unsupported(pc)),
            Insn::Ja { .. } => {
                let target = insn.jump_target(pc).expect("a jump") as usize;
                let l = self.edge(e, pc, target, stubs);
                e.jump(l);
                return Ok(false);
            }
            Insn::Jmp {
                width,
                cond,
                dst,
                src,
                ..
            } => {
                if pc + 1 >= plan.end {
                    return Err(CompileError::FallsOffEnd {
                        function: plan.start,
                        pc,
                    });
                }
                let target = insn.jump_target(pc).expect("a jump") as usize;
                let l = self.edge(e, pc, target, stubs);
                e.branch(width, cond, dst, src, l);
            }
            Insn::Call(target) => self.call(e, pc, plan, target, stubs)?,
            Insn::Exit => {
                e.epilogue(entry);
                return Ok(false);
            }
            Insn::Load {
                size,
                sign_extend,
                dst,
                base,
                off,
            } => e.load(size, sign_extend, dst, base, off),
            Insn::Store {
                size,
                base,
                off,
                src,
            } => {
                e.store(size, base, off, src);
                if let Some(call) = self.key_for_lookup(plan, pc) {
                    let Operand::Reg(s) = src else {
                        unreachable!("key stores are register stores")
                    };
                    e.keep_key(s);
                    self.key_kept = Some(call);
                }
            }
            Insn::Atomic {
                size,
                op,
                fetch,
                base,
                off,
                src,
            } => {
                if !matches!(size, Size::W | Size::DW) {
                    return Err(CompileError::Unsupported {
                        pc,
                        what: format!("{}-byte atomic", size.bytes()),
                    });
                }
                e.atomic(size, op, fetch, base, off, src)
            }
            Insn::LoadImm64 {
                dst,
                kind,
                imm_lo,
                imm_hi,
            } => match kind {
                ImmKind::Imm => e.load_imm64(dst, Insn::imm64(imm_lo, imm_hi)),
                ImmKind::MapIdx => {
                    if !(dst == Reg(1) && self.only_feeds_inline_lookup(plan, pc)) {
                        let at = e.load_word(dst);
                        self.reloc(at, Symbol::Map(imm_lo as u32), 0);
                    }
                }
                ImmKind::MapIdxValue => {
                    let at = e.load_word(dst);
                    self.reloc(at, Symbol::MapValue(imm_lo as u32), imm_hi as u32 as i64);
                }
                other => {
                    return Err(CompileError::Unsupported {
                        pc,
                        what: format!(
                            "lddw of kind {other:?} (the loader resolves maps to indices)"
                        ),
                    })
                }
            },
            Insn::LoadImm64Hi => return Err(CompileError::LddwSecondSlot { pc }),
        }
        Ok(true)
    }

    fn call<E: Emit>(
        &mut self,
        e: &mut E,
        pc: usize,
        plan: FuncPlan,
        target: CallTarget,
        stubs: &mut Stubs,
    ) -> Result<(), CompileError> {
        match target {
            CallTarget::Helper(BPF_FUNC_MAP_LOOKUP_ELEM) => {
                if let Some((index, array)) = self.inline_array_at(plan, pc) {
                    let frame = self.r2_in_frame(plan, pc);
                    let key = match frame {
                        _ if self.key_kept == Some(pc) => Key::Kept,
                        Some(off) => Key::Frame(off),
                        None => Key::AtR2,
                    };
                    let checked = !frame.is_some_and(|off| self.key_in_range(plan, pc, off, array));
                    let at = e.inline_lookup(array, key, checked);
                    self.reloc(at, Symbol::MapValue(index), 0);
                } else {
                    self.helper(e, pc, BPF_FUNC_MAP_LOOKUP_ELEM)?;
                }
            }
            CallTarget::Helper(id) => {
                self.helper(e, pc, id)?;
                if id == BPF_FUNC_TAIL_CALL {
                    // A successful tail call ran the rest of the run: return at once.
                    let stopped = *stubs.stopped.get_or_insert_with(|| e.new_label());
                    e.branch_if_stopped(stopped);
                }
            }
            CallTarget::Local(_) => {
                let start = self.insns[pc].call_target(pc).expect("a local call") as usize;
                let callee = callee_index(self.plans, start);
                e.call_local(self.func_labels[callee]);
                if self.may_stop {
                    let stopped = *stubs.stopped.get_or_insert_with(|| e.new_label());
                    e.branch_if_stopped(stopped);
                }
            }
            CallTarget::Kfunc(id) => {
                return Err(CompileError::Unsupported {
                    pc,
                    what: format!("kfunc call (BTF id {id})"),
                })
            }
            CallTarget::Reg(r) => {
                let HelperCalls::Table { table_len } = self.opts.helper_calls else {
                    return Err(CompileError::Unsupported {
                        pc,
                        what: format!("callx {r} without a helper table (HelperCalls::Table)"),
                    });
                };
                let bad = *stubs.bad_helper.get_or_insert_with(|| e.new_label());
                let at = e.call_reg(r, table_len, bad);
                self.reloc(at, Symbol::Var(HELPER_TABLE_SYMBOL.into()), 0);
                // The helper may have been `bpf_tail_call`.
                let stopped = *stubs.stopped.get_or_insert_with(|| e.new_label());
                e.branch_if_stopped(stopped);
            }
        }
        Ok(())
    }

    fn helper<E: Emit>(&mut self, e: &mut E, pc: usize, id: i32) -> Result<(), CompileError> {
        let id = u32::try_from(id).map_err(|_| CompileError::Unsupported {
            pc,
            what: format!("helper id {id}"),
        })?;
        match self.opts.helper_calls {
            HelperCalls::Direct => {
                let at = e.call_direct();
                self.reloc(at, Symbol::Helper(id), 0);
            }
            HelperCalls::Table { table_len } => {
                if id >= table_len {
                    return Err(CompileError::Unsupported {
                        pc,
                        what: format!("helper {id} beyond the {table_len}-entry helper table"),
                    });
                }
                let at = e.call_table(id);
                self.reloc(at, Symbol::Var(HELPER_TABLE_SYMBOL.into()), 0);
            }
        }
        Ok(())
    }

    /// The inlinable array `r1` designates at the call in slot `pc`: the last write to `r1`
    /// in the same straight-line run of slots is an `lddw` of a map listed in
    /// [`CompileOptions::inline_arrays`] (the Cranelift tier's rule).
    fn inline_array_at(&self, plan: FuncPlan, pc: usize) -> Option<(u32, InlineArray)> {
        if self.opts.inline_arrays.is_empty() {
            return None;
        }
        let mut j = pc;
        loop {
            if self.block_start[j] || j == plan.start {
                return None;
            }
            j -= 1;
            match &self.insns[j] {
                Insn::LoadImm64Hi => continue,
                Insn::LoadImm64 {
                    dst: Reg(1),
                    kind: ImmKind::MapIdx,
                    imm_lo,
                    ..
                } => {
                    let index = *imm_lo as u32;
                    return self.opts.inline_arrays.get(&index).map(|a| (index, *a));
                }
                insn => {
                    if matches!(insn, Insn::Call(_)) || writes_r1(insn) {
                        return None;
                    }
                }
            }
        }
    }
}

/// Whether `insn` reads or writes `reg` (calls: only `callx`'s register).
fn mentions(insn: &Insn, reg: Reg) -> bool {
    let op = |o: &Operand| matches!(o, Operand::Reg(r) if *r == reg);
    match insn {
        Insn::Alu { dst, src, .. } => *dst == reg || op(src),
        Insn::Endian { dst, .. } => *dst == reg,
        Insn::Jmp { dst, src, .. } => *dst == reg || op(src),
        Insn::Load { dst, base, .. } => *dst == reg || *base == reg,
        Insn::Store { base, src, .. } => *base == reg || op(src),
        Insn::Atomic { base, src, .. } => *base == reg || *src == reg || reg == Reg(0),
        Insn::LoadImm64 { dst, .. } => *dst == reg,
        Insn::Call(CallTarget::Reg(r)) => *r == reg,
        Insn::Call(_) | Insn::Exit | Insn::Ja { .. } | Insn::MayGoto { .. } | Insn::LoadImm64Hi => {
            false
        }
    }
}

fn writes_r1(insn: &Insn) -> bool {
    !matches!(insn, Insn::Call(_)) && writes(insn, Reg(1))
}

/// Whether `insn` reads `reg` (not for calls and exit, which the callers stop at).
fn reads(insn: &Insn, reg: Reg) -> bool {
    let op = |o: &Operand| matches!(o, Operand::Reg(r) if *r == reg);
    match insn {
        Insn::Alu {
            op: alu, dst, src, ..
        } => op(src) || (*dst == reg && !matches!(alu, AluOp::Mov | AluOp::MovSx(_))),
        Insn::Endian { dst, .. } => *dst == reg,
        Insn::Jmp { dst, src, .. } => *dst == reg || op(src),
        Insn::Load { base, .. } => *base == reg,
        Insn::Store { base, src, .. } => *base == reg || op(src),
        Insn::Atomic { base, src, .. } => *base == reg || *src == reg || reg == Reg(0),
        Insn::LoadImm64 { .. } | Insn::LoadImm64Hi | Insn::Ja { .. } | Insn::MayGoto { .. } => {
            false
        }
        Insn::Call(_) | Insn::Exit => true,
    }
}

/// Whether `insn` writes `reg` (calls: r0..r5).
fn writes(insn: &Insn, reg: Reg) -> bool {
    match *insn {
        Insn::Alu { dst, .. } | Insn::Endian { dst, .. } | Insn::Load { dst, .. } => dst == reg,
        Insn::LoadImm64 { dst, .. } => dst == reg,
        Insn::Atomic {
            op: AtomicOp::CmpXchg,
            ..
        } => reg == Reg(0),
        Insn::Atomic { fetch, src, .. } => fetch && src == reg,
        Insn::Call(_) => reg.index() <= 5,
        _ => false,
    }
}

/// Whether both backends compile `insn` without touching the key register of
/// [`Key::Kept`] or memory: plain ALU forms (no variable shifts, divisions or
/// sign-extending moves, which use x86-64's scratch registers), loads and byte swaps
/// (`lddw` too, which the caller steps over as two slots).
fn keeps_key_register(insn: &Insn) -> bool {
    match insn {
        Insn::Alu { op, src, .. } => match op {
            AluOp::Mov
            | AluOp::Add
            | AluOp::Sub
            | AluOp::Mul
            | AluOp::Or
            | AluOp::And
            | AluOp::Xor
            | AluOp::Neg => true,
            AluOp::Lsh | AluOp::Rsh | AluOp::Arsh => matches!(src, Operand::Imm(_)),
            _ => false,
        },
        Insn::Load { .. } | Insn::Endian { .. } => true,
        _ => false,
    }
}
