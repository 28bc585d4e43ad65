//! eBPF → Cranelift IR for one eBPF function.
//!
//! The mapping from eBPF state to IR is deliberately plain, because deoptimisation exits
//! (see `docs/jit.md`) must be able to rebuild the exact eBPF state at any instruction:
//! - each register `r0`..`r10` is one Cranelift [`Variable`] of type `i64`, named by its index
//!   in [`Translator::regs`]; `r10` is defined once, at entry, as the frame's top;
//! - each eBPF frame's 512-byte stack is one explicit Cranelift stack slot of this function,
//!   except the byte ranges [`crate::plan::stack`] proves are only ever accessed whole through
//!   non-escaping frame pointers, which are Cranelift variables (generic code only);
//! - every eBPF instruction that starts a basic block has its own Cranelift block
//!   ([`Translator::blocks`], indexed by slot), and the current slot index is known while
//!   each instruction is lowered.

mod deopt;

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::immediates::Imm64;
use cranelift_codegen::ir::types::{I16, I32, I64, I8};
use cranelift_codegen::ir::{
    AbiParam, AtomicRmwOp, Block, ExtFuncData, ExternalName, FuncRef, Function, GlobalValue,
    GlobalValueData, InstBuilder, InstructionData, MemFlagsData, Opcode, SigRef, Signature,
    StackSlot, StackSlotData, StackSlotKind, Type, UserExternalName, UserFuncName, Value,
};
use cranelift_codegen::isa::TargetIsa;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use rdx_bpf::isa::{
    AluOp, AtomicOp, ByteOrder, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width,
    NUM_REGS, STACK_SIZE,
};
use rdx_region::abi::RunStatus;

use crate::artifact::{Symbol, HELPER_TABLE_SYMBOL};
use crate::blinding::{blinds_constants, has_chosen_constant, plain_constant, BlindingKeys};
use crate::error::CompileError;
use crate::options::{branch_sites, CompileOptions, EntryAbi, Expect, HelperCalls, InlineArray};
use crate::plan::loops::{self, Versioned};
use crate::plan::stack::{self, StackPlan};
use crate::plan::{
    callee_index, live_registers, live_slots, may_tail_call, uses_defs, FuncPlan,
    BPF_FUNC_TAIL_CALL,
};
use deopt::DEOPT_STACK_TOP;

/// `call` immediate of `map_lookup_elem` (a constant, for patterns).
const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = rdx_region::helpers::HelperId::MAP_LOOKUP_ELEM.imm();

/// Bit `r` of a register set.
fn bit(r: Reg) -> u16 {
    1 << r.index()
}

/// External-name namespace of our own eBPF functions (index = function number).
pub(crate) const NS_FUNC: u32 = 0;
/// External-name namespace of artifact symbols (index = position in the symbol table).
pub(crate) const NS_SYMBOL: u32 = 1;

/// Byte offsets in [`rdx_region::abi::RunState`].
const RUN_BUDGET: i32 = 0;
const RUN_STATUS: i32 = 8;
fn mem() -> MemFlagsData {
    // eBPF loads may be unaligned (packet data) and the verifier, not a trap handler, is what
    // makes them safe: no `aligned`, no `notrap` promises to the code generator.
    MemFlagsData::new()
}

fn run_mem() -> MemFlagsData {
    MemFlagsData::trusted()
}

struct Translator<'a, 'b> {
    b: FunctionBuilder<'a>,
    insns: &'b [Insn],
    plans: &'b [FuncPlan],
    plan: FuncPlan,
    opts: &'b CompileOptions,
    symbols: &'b mut Vec<Symbol>,
    regs: [Variable; NUM_REGS],
    /// Remaining instruction budget, kept in a register between calls and exits.
    budget: Option<Variable>,
    run_state: Value,
    /// The frame's stack: a Cranelift stack slot (generic code), or for elite code the
    /// address of its 512 bytes in the [`rdx_region::abi::DeoptRunState`] (where the interpreter expects
    /// them).
    stack: FrameStack,
    /// Frame accesses known exactly (generic code whose frame pointers never escape).
    stack_plan: Option<StackPlan>,
    /// Frame byte ranges kept in variables (offset from the frame's base → variable and its
    /// type, the width of every access to it).
    promoted: HashMap<i32, (Variable, Type)>,
    /// Slots of this function that are compiled: reachable from its start without taking a
    /// guard's cold direction.
    live: Vec<bool>,
    /// Slots some jump from the same or a later slot targets (loop heads): their blocks are
    /// sealed only once the whole body is lowered. Every other block's predecessors are all
    /// lowered by the time the body reaches it, so it is sealed then, which spares the SSA
    /// builder provisional block parameters for every variable read in it.
    loop_heads: Vec<bool>,
    /// Slots whose block is a loop exit stub (see `translate_function`), laid out cold.
    exit_stubs: Vec<bool>,
    /// Counted-loop latches whose `jne` is compiled as this ordered condition
    /// ([`loops::ordered_latches`]).
    ordered_latches: HashMap<usize, JmpCond>,
    /// Counted loops compiled twice, by head slot ([`loops::versioned_loops`]).
    versioned: HashMap<usize, Versioned>,
    /// While the unchecked copy of a versioned loop is lowered: its left-out checks and the
    /// direction each goes.
    unchecked: HashMap<usize, bool>,
    /// While a copy of an unrolled loop is lowered: its latch's slot and where it goes.
    latch_override: Option<(usize, Latch)>,
    /// Values known to be non-NULL pointers (see [`Translator::null_test_outcome`]).
    non_null: std::collections::HashSet<Value>,
    /// Registers live on entry to each slot (elite code only; see [`live_registers`]).
    live_regs: Vec<u16>,
    /// Index of each conditional jump in [`crate::branch_sites`] order (for counters).
    branch_index: HashMap<usize, u32>,
    /// Cranelift block of each slot that starts a basic block (`None` otherwise).
    blocks: Vec<Option<Block>>,
    exhausted: Option<Block>,
    bad_helper: Option<Block>,
    /// Whether a callee can stop the run (budget or a bad `callx`), so that callers must
    /// check the status after every local call.
    may_stop: bool,
    /// Back-edge meter blocks to emit after the body: (block, charge, destination).
    meters: Vec<(Block, u64, Block)>,
    helper_sig: SigRef,
    local_sig: SigRef,
    helper_funcs: HashMap<u32, FuncRef>,
    local_funcs: HashMap<usize, FuncRef>,
    globals: HashMap<(Symbol, i64), GlobalValue>,
    ptr: Type,
    /// Constant blinding, when on for this function: its keys and the opaque run-time copy
    /// of the function's base key.
    blinding: Option<Blinding<'b>>,
}

/// What [`Translator::imm`] needs to blind constants.
struct Blinding<'k> {
    keys: &'k mut BlindingKeys,
    /// The function's base key, as compiled into its entry block.
    base: u64,
    /// The key of each constant blinded so far (by type and value): the same constant gets
    /// the same key, so that the optimizer can share its computation (a multiplier used in
    /// every round of a hash is unmasked once), while different constants keep different
    /// keys.
    used: HashMap<(Type, i64), u64>,
    /// The same key as a run-time value the optimizer cannot see through (selected on the
    /// frame pointer being nonzero): constants computed from it are never folded back into
    /// the plain value.
    opaque: Value,
}

/// The latch of one copy of an unrolled loop.
#[derive(Clone, Copy)]
enum Latch {
    /// The first copy: the loop goes on (the trip count is even), to this block.
    GoOn(Block),
    /// The second copy: the latch as it is, going back to this block.
    BackTo(Block),
}

#[derive(Clone, Copy)]
enum FrameStack {
    Slot(StackSlot),
    Shadow(Value),
    /// No memory: every frame access is a promoted variable.
    Promoted,
}

fn int_type(size: Size) -> Type {
    match size {
        Size::B => I8,
        Size::H => I16,
        Size::W => I32,
        Size::DW => I64,
    }
}

fn int_sig(isa: &dyn TargetIsa, params: usize) -> Signature {
    let mut sig = Signature::new(isa.default_call_conv());
    sig.params.extend((0..params).map(|_| AbiParam::new(I64)));
    sig.returns.push(AbiParam::new(I64));
    sig
}

/// Lowers function `fi` of `plans` into `func`; returns how many of its slots it compiled.
#[allow(clippy::too_many_arguments)]
pub(crate) fn translate_function(
    func: &mut Function,
    fctx: &mut FunctionBuilderContext,
    isa: &dyn TargetIsa,
    insns: &[Insn],
    plans: &[FuncPlan],
    fi: usize,
    opts: &CompileOptions,
    symbols: &mut Vec<Symbol>,
    keys: &mut BlindingKeys,
) -> Result<usize, CompileError> {
    let plan = plans[fi];
    let is_entry = fi == 0;
    let elite = opts.speculation().is_some();
    let nparams = if is_entry {
        match opts.entry_abi {
            EntryAbi::Standard => 2,
            EntryAbi::WithLength => 3,
        }
    } else {
        // r1..r5, then the run state; elite code passes the caller's frame top as well.
        6 + elite as usize
    };
    func.signature = int_sig(isa, nparams);
    func.name = UserFuncName::user(NS_FUNC, fi as u32);

    let mut b = FunctionBuilder::new(func, fctx);
    let regs: [Variable; NUM_REGS] = std::array::from_fn(|_| b.declare_var(I64));
    let budget = opts.needs_budget.then(|| b.declare_var(I64));

    let live = live_slots(insns, plan, opts);
    let mut blocks = vec![None; plan.end - plan.start];
    for pc in plan.start..plan.end {
        if !live[pc - plan.start] {
            continue;
        }
        let insn = &insns[pc];
        if let Some(t) = insn.jump_target(pc) {
            let t = t as usize;
            if live[t - plan.start] && blocks[t - plan.start].is_none() {
                blocks[t - plan.start] = Some(b.create_block());
            }
        }
        let ends_block = matches!(insn, Insn::Ja { .. } | Insn::Jmp { .. } | Insn::Exit);
        if ends_block
            && pc + 1 < plan.end
            && live[pc + 1 - plan.start]
            && blocks[pc + 1 - plan.start].is_none()
        {
            blocks[pc + 1 - plan.start] = Some(b.create_block());
        }
    }
    // Elite frames live in the DeoptRunState, where the interpreter resumes: never promoted.
    let stack_plan = if elite {
        None
    } else {
        stack::plan_stack(insns, plan, &live, |pc| {
            matches!(
                insns[pc],
                Insn::Call(CallTarget::Helper(BPF_FUNC_MAP_LOOKUP_ELEM))
            ) && inline_array_at(insns, plan, &blocks, opts, pc).is_some()
        })
    };
    let promoted: HashMap<i32, (Variable, Type)> = stack_plan
        .iter()
        .flat_map(|p| p.promoted.iter())
        .map(|(&at, &size)| {
            let ty = int_type(size);
            (at, (b.declare_var(ty), ty))
        })
        .collect();
    let needs_frame = !elite && stack_plan.as_ref().is_none_or(|p| p.needs_memory);
    let slot = needs_frame.then(|| {
        b.create_sized_stack_slot(StackSlotData::new(
            StackSlotKind::ExplicitSlot,
            STACK_SIZE as u32,
            4,
        ))
    });
    let helper_sig = b.import_signature(int_sig(isa, 5));
    let local_sig = b.import_signature(int_sig(isa, 6 + elite as usize));

    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    b.seal_block(entry);
    let params = b.block_params(entry).to_vec();
    let zero = b.ins().iconst(I64, 0);
    for r in &regs[..10] {
        b.def_var(*r, zero);
    }
    let run_state;
    if is_entry {
        b.def_var(regs[1], params[0]);
        run_state = params[1];
        if opts.entry_abi == EntryAbi::WithLength {
            b.def_var(regs[2], params[2]);
        }
    } else {
        for i in 0..5 {
            b.def_var(regs[i + 1], params[i]);
        }
        run_state = params[5];
    }
    let ptr = isa.pointer_type();
    let (stack, frame_top) = match slot {
        Some(slot) => {
            let stack_base = b.ins().stack_addr(ptr, slot, 0);
            let top = b.ins().iadd_imm_s(stack_base, STACK_SIZE as i64);
            (FrameStack::Slot(slot), top)
        }
        None if !elite => {
            // Every frame access is promoted: nothing dereferences `r10` or a pointer derived
            // from it (the stack plan checked), so its value is never used as an address.
            let top = b.ins().iconst(ptr, 0);
            (FrameStack::Promoted, top)
        }
        None => {
            let top = if is_entry {
                b.ins().iadd_imm_s(run_state, DEOPT_STACK_TOP)
            } else {
                b.ins().iadd_imm_s(params[6], -(STACK_SIZE as i64))
            };
            let base = b.ins().iadd_imm_s(top, -(STACK_SIZE as i64));
            (FrameStack::Shadow(base), top)
        }
    };
    b.def_var(regs[10], frame_top);
    if let Some(v) = budget {
        let left = b.ins().load(I64, run_mem(), run_state, RUN_BUDGET);
        b.def_var(v, left);
    }
    let blinding = (blinds_constants(opts)
        && insns[plan.start..plan.end].iter().any(has_chosen_constant))
    .then(|| {
        let base = keys.next();
        // `base` where the frame pointer is nonzero, which it always is: a value the
        // optimizer cannot fold, with no memory access (a stack store and an atomic load
        // back cost a store-forwarding delay on every call).
        let fp = b.ins().get_frame_pointer(ptr);
        let nonzero = b.ins().icmp_imm_s(IntCC::NotEqual, fp, 0);
        let k = b.ins().iconst(I64, base as i64);
        let zero = b.ins().iconst(I64, 0);
        let opaque = b.ins().select_spectre_guard(nonzero, k, zero);
        Blinding {
            keys,
            base,
            opaque,
            used: HashMap::new(),
        }
    });

    // Loop exit stubs: a block inside a loop (between a back-edge's target and its source)
    // that is only a `ja` out of that loop runs once per loop, not once per iteration. Clang
    // emits them for a loop test in the middle of a body (`if i != N goto next; goto out`).
    // Laid out after the hot code, the loop continues by falling through instead of taking
    // a branch every iteration.
    let loops: Vec<(usize, usize)> = (plan.start..plan.end)
        .filter(|&pc| live[pc - plan.start])
        .filter_map(|pc| {
            let t = insns[pc].jump_target(pc)? as usize;
            (t <= pc).then_some((t, pc))
        })
        .collect();
    let mut exit_stubs = vec![false; plan.end - plan.start];
    for (i, block) in blocks.iter().enumerate() {
        let (Some(block), pc) = (block, plan.start + i) else {
            continue;
        };
        if !matches!(insns[pc], Insn::Ja { .. }) || !live[i] {
            continue;
        }
        let target = insns[pc].jump_target(pc).expect("ja has a target") as usize;
        let leaves = |&(head, back): &(usize, usize)| {
            (head..=back).contains(&pc) && !(head..=back).contains(&target)
        };
        if loops.iter().any(leaves) {
            b.set_cold_block(*block);
            exit_stubs[i] = true;
        }
    }
    let compiled = live.iter().filter(|l| **l).count();
    // Registers the entry block sets to zero (see above).
    let initial_zero: u16 = if is_entry {
        let args = if opts.entry_abi == EntryAbi::WithLength {
            0b110
        } else {
            0b10
        };
        0b11_1111_1111 & !args
    } else {
        0b11_1100_0001
    };
    let counted = loops::counted_loops(insns, plan, initial_zero);
    let ordered_latches = counted.iter().map(|l| (l.latch, l.ordered)).collect();
    // Elite and scouting builds keep one compiled site per slot (guards, counters).
    let versioned = if elite || opts.branch_counters().is_some() {
        HashMap::new()
    } else {
        loops::versioned_loops(insns, plan, &counted)
            .into_iter()
            .map(|v| (v.head, v))
            .collect()
    };
    let live_regs = if elite {
        live_registers(insns, plan)
    } else {
        Vec::new()
    };
    let branch_index = if opts.branch_counters().is_some() {
        branch_sites(insns)
            .into_iter()
            .enumerate()
            .filter(|(_, pc)| (plan.start..plan.end).contains(pc))
            .map(|(i, pc)| (pc, i as u32))
            .collect()
    } else {
        HashMap::new()
    };

    let mut t = Translator {
        b,
        insns,
        plans,
        plan,
        opts,
        symbols,
        regs,
        budget,
        run_state,
        stack,
        stack_plan,
        promoted,
        live,
        live_regs,
        non_null: Default::default(),
        exit_stubs,
        ordered_latches,
        versioned,
        unchecked: HashMap::new(),
        latch_override: None,
        loop_heads: {
            let mut heads = vec![false; plan.end - plan.start];
            for (pc, insn) in insns.iter().enumerate().take(plan.end).skip(plan.start) {
                if let Some(t) = insn.jump_target(pc) {
                    if t as usize <= pc {
                        heads[t as usize - plan.start] = true;
                    }
                }
            }
            heads
        },
        branch_index,
        blocks,
        exhausted: None,
        bad_helper: None,
        // A tail call (or a `callx`, which may be one) ends the run when it succeeds.
        may_stop: opts.needs_budget || elite || insns.iter().any(may_tail_call),
        meters: Vec::new(),
        helper_sig,
        local_sig,
        helper_funcs: HashMap::new(),
        local_funcs: HashMap::new(),
        globals: HashMap::new(),
        ptr,
        blinding,
    };
    // Straight-line code is bounded by the function's length: charge it once per entry, and
    // each loop's length at its back-edge. The total charged is then never less than the
    // number of instructions executed.
    t.charge((plan.end - plan.start) as u64);
    t.body()?;
    t.deferred_blocks();
    t.b.seal_all_blocks();
    t.b.finalize(isa.frontend_config());
    Ok(compiled)
}

impl Translator<'_, '_> {
    fn reg(&mut self, r: Reg) -> Value {
        self.b.use_var(self.regs[r.index()])
    }

    fn set(&mut self, r: Reg, v: Value) {
        self.b.def_var(self.regs[r.index()], v);
    }

    fn block_at(&self, pc: usize) -> Block {
        self.blocks[pc - self.plan.start].expect("every jump target and fall-through has a block")
    }

    fn body(&mut self) -> Result<(), CompileError> {
        let open = self.lower_slots(self.plan.start, self.plan.end, true, true)?;
        if open {
            return Err(CompileError::FallsOffEnd {
                function: self.plan.start,
                pc: self.plan.end - 1,
            });
        }
        Ok(())
    }

    /// Lowers slots `from..to`; `open` says whether the current block runs into `from`.
    /// Returns whether the block current at the end runs on. With `versioning`, a versioned
    /// loop's head lowers that loop twice ([`Translator::versioned_loop`]).
    fn lower_slots(
        &mut self,
        from: usize,
        to: usize,
        mut open: bool,
        versioning: bool,
    ) -> Result<bool, CompileError> {
        let mut pc = from;
        while pc < to {
            if !self.live[pc - self.plan.start] {
                // Only cold directions reach this slot (or nothing does): not compiled.
                pc += 1;
                continue;
            }
            if let Some(block) = self.blocks[pc - self.plan.start] {
                if open {
                    self.b.ins().jump(block, &[]);
                }
                self.b.switch_to_block(block);
                if !self.loop_heads[pc - self.plan.start] {
                    self.b.seal_block(block);
                }
                open = true;
            }
            let insn = self.insns[pc];
            if !open {
                // Unreachable slot not starting a block (cannot happen: every slot after a
                // terminator starts a block), kept defensive.
                pc += 1;
                continue;
            }
            if versioning {
                if let Some(v) = self.versioned.get(&pc).cloned() {
                    self.versioned_loop(&v)?;
                    pc = v.latch + 1;
                    open = false;
                    continue;
                }
            }
            open = self.insn(pc, insn)?;
            pc += if matches!(insn, Insn::LoadImm64 { .. }) {
                2
            } else {
                1
            };
        }
        Ok(open)
    }

    /// Lowers a versioned loop from its head's block, where every entry arrives: a test of
    /// the loop's bounds, then the loop as it is (bounds not known to hold) and a copy whose
    /// decided checks are plain jumps (bounds hold). Both copies leave to the same blocks.
    fn versioned_loop(&mut self, v: &Versioned) -> Result<(), CompileError> {
        let at = |pc: usize| pc - self.plan.start;
        let (head, latch) = (at(v.head), at(v.latch));
        let entry = self.blocks[head].expect("a loop head has a block");
        let checked = self.b.create_block();
        let unchecked = self.b.create_block();
        let hold = self.bounds_hold(&v.bounds);
        self.b.ins().brif(hold, unchecked, &[], checked, &[]);

        // The back edge of each copy goes to that copy's head.
        self.blocks[head] = Some(checked);
        self.lower_slots(v.head, v.latch + 1, false, false)?;
        let originals = self.blocks[head..=latch].to_vec();
        self.unchecked = v.checks.clone();
        // Unrolled (not in metered code, whose back edges charge): a first copy whose latch
        // goes on to a second copy, whose latch goes back to the first.
        if v.unroll && self.budget.is_none() {
            let second = self.b.create_block();
            self.fresh_blocks(head, latch, unchecked);
            self.latch_override = Some((v.latch, Latch::GoOn(second)));
            self.lower_slots(v.head, v.latch + 1, false, false)?;
            self.fresh_blocks(head, latch, second);
            self.latch_override = Some((v.latch, Latch::BackTo(unchecked)));
            self.lower_slots(v.head, v.latch + 1, false, false)?;
            self.latch_override = None;
        } else {
            self.fresh_blocks(head, latch, unchecked);
            self.lower_slots(v.head, v.latch + 1, false, false)?;
        }
        self.unchecked.clear();
        self.blocks[head..=latch].copy_from_slice(&originals);
        self.blocks[head] = Some(entry);
        Ok(())
    }

    /// New blocks for the slots `head..=latch` (function-relative) that start one, `first`
    /// for the head: another copy of a loop.
    fn fresh_blocks(&mut self, head: usize, latch: usize, first: Block) {
        for i in head..=latch {
            if self.blocks[i].is_some() {
                let block = self.b.create_block();
                if self.exit_stubs[i] {
                    self.b.set_cold_block(block);
                }
                self.blocks[i] = Some(block);
            }
        }
        self.blocks[head] = Some(first);
    }

    /// Whether every bound of a versioned loop holds, from the registers on entry.
    fn bounds_hold(&mut self, bounds: &[loops::Bound]) -> Value {
        let mut all = None;
        for bound in bounds {
            let value = match bound.value {
                Some(r) => self.reg(r),
                None => self.b.ins().iconst(I64, 0),
            };
            // Bounds come from the program's constants: blinded like them.
            let low = self.imm(I64, bound.low as i64);
            let low = self.b.ins().iadd(value, low);
            let high = self.imm(I64, bound.high as i64);
            let high = self.b.ins().iadd(value, high);
            let no_wrap = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, low, high);
            let limit = match bound.limit {
                Some(r) => self.reg(r),
                None => self.b.ins().iconst(I64, 0),
            };
            let limit_offset = self.imm(I64, bound.limit_offset as i64);
            let limit = self.b.ins().iadd(limit, limit_offset);
            let cc = if bound.strict {
                IntCC::UnsignedLessThan
            } else {
                IntCC::UnsignedLessThanOrEqual
            };
            let below = self.b.ins().icmp(cc, high, limit);
            let holds = self.b.ins().band(no_wrap, below);
            all = Some(match all {
                Some(a) => self.b.ins().band(a, holds),
                None => holds,
            });
        }
        all.unwrap_or_else(|| self.b.ins().iconst(I8, 1))
    }

    /// Lowers one instruction; returns whether the current block continues.
    fn insn(&mut self, pc: usize, insn: Insn) -> Result<bool, CompileError> {
        match insn {
            Insn::Alu {
                width,
                op,
                dst,
                src,
            } => self.alu(width, op, dst, src),
            Insn::Endian { order, bits, dst } => self.endian(order, bits, dst),
            Insn::MayGoto { .. } => return Err(crate::compile::may_goto_unsupported(pc)),
            Insn::Ja { .. } => {
                let target = insn.jump_target(pc).unwrap() as usize;
                let dest = self.edge(pc, target);
                self.b.ins().jump(dest, &[]);
                return Ok(false);
            }
            Insn::Jmp {
                width,
                cond,
                dst,
                src,
                ..
            } => {
                let target = insn.jump_target(pc).unwrap() as usize;
                if pc + 1 >= self.plan.end {
                    return Err(CompileError::FallsOffEnd {
                        function: self.plan.start,
                        pc,
                    });
                }
                let guard = self
                    .opts
                    .speculation()
                    .and_then(|s| s.guards.get(&pc).copied());
                match self.latch_override {
                    Some((at, Latch::GoOn(next))) if at == pc => {
                        self.b.ins().jump(next, &[]);
                        return Ok(false);
                    }
                    _ => {}
                }
                // A check the versioned loop's entry decided for every iteration, or a null
                // test whose outcome is known.
                let decided = self.unchecked.get(&pc).copied().or_else(|| {
                    (guard.is_none() && self.opts.branch_counters().is_none())
                        .then(|| self.null_test_outcome(width, cond, dst, src))
                        .flatten()
                });
                if let Some(taken) = decided {
                    let dest = if taken {
                        self.edge(pc, target)
                    } else {
                        self.block_at(pc + 1)
                    };
                    self.b.ins().jump(dest, &[]);
                    return Ok(false);
                }
                let cond = self.ordered_latches.get(&pc).copied().unwrap_or(cond);
                let c = self.condition(width, cond, dst, src);
                self.count_branch(pc, c);
                let exit = guard.map(|_| {
                    let b = self.b.create_block();
                    self.b.set_cold_block(b);
                    b
                });
                match (guard, exit) {
                    (Some(Expect::Taken), Some(exit)) => {
                        let taken = self.edge(pc, target);
                        self.b.ins().brif(c, taken, &[], exit, &[]);
                    }
                    (Some(Expect::NotTaken), Some(exit)) => {
                        let next = self.block_at(pc + 1);
                        self.b.ins().brif(c, exit, &[], next, &[]);
                    }
                    _ => {
                        let taken = match self.latch_override {
                            Some((at, Latch::BackTo(first))) if at == pc => first,
                            _ => self.edge(pc, target),
                        };
                        let next = self.block_at(pc + 1);
                        if self.exit_stubs[pc + 1 - self.plan.start] {
                            // Falling through leaves the loop: make the loop's side the
                            // branch's second successor, which Cranelift lays out next, so
                            // the loop continues without a taken branch.
                            let leave = self.b.ins().icmp_imm_s(IntCC::Equal, c, 0);
                            self.b.ins().brif(leave, next, &[], taken, &[]);
                        } else {
                            self.b.ins().brif(c, taken, &[], next, &[]);
                        }
                    }
                }
                if let Some(exit) = exit {
                    self.b.switch_to_block(exit);
                    self.deopt_exit(pc);
                }
                return Ok(false);
            }
            Insn::Call(target) => self.call(pc, target)?,
            Insn::Exit => {
                self.store_budget();
                let r0 = self.reg(Reg(0));
                self.b.ins().return_(&[r0]);
                return Ok(false);
            }
            Insn::Load {
                size,
                sign_extend,
                dst,
                base,
                off,
            } => {
                let v = self.load(pc, size, sign_extend, base, off);
                self.set(dst, v);
            }
            Insn::Store {
                size,
                base,
                off,
                src,
            } => {
                let v = match src {
                    Operand::Reg(r) => self.reg(r),
                    Operand::Imm(i) => self.imm(I64, i as i64),
                };
                self.store(pc, size, base, off, v);
            }
            Insn::Atomic {
                size,
                op,
                fetch,
                base,
                off,
                src,
            } => self.atomic(size, op, fetch, base, off, src),
            Insn::LoadImm64 {
                dst,
                kind,
                imm_lo,
                imm_hi,
            } => {
                let v = match kind {
                    ImmKind::Imm => self.imm(I64, Insn::imm64(imm_lo, imm_hi) as i64),
                    ImmKind::MapIdx => self.symbol_value(Symbol::Map(imm_lo as u32), 0),
                    ImmKind::MapIdxValue => {
                        self.symbol_value(Symbol::MapValue(imm_lo as u32), imm_hi as u32 as i64)
                    }
                    other => {
                        return Err(CompileError::Unsupported {
                            pc,
                            what: format!(
                                "lddw of kind {other:?} (the loader resolves maps to indices)"
                            ),
                        })
                    }
                };
                self.set(dst, v);
            }
            Insn::LoadImm64Hi => return Err(CompileError::LddwSecondSlot { pc }),
        }
        Ok(true)
    }

    /// The block a jump from `pc` to `target` enters: the target itself, or for a back-edge
    /// of metered code a block that charges the loop's length first.
    fn edge(&mut self, pc: usize, target: usize) -> Block {
        let dest = self.block_at(target);
        if self.budget.is_none() || target > pc {
            return dest;
        }
        let meter = self.b.create_block();
        self.meters.push((meter, (pc - target + 1) as u64, dest));
        meter
    }

    /// Emits the blocks created while the body was lowered: back-edge meters, then the
    /// shared exhausted exit.
    fn deferred_blocks(&mut self) {
        for (meter, amount, dest) in std::mem::take(&mut self.meters) {
            self.b.switch_to_block(meter);
            self.charge(amount);
            self.b.ins().jump(dest, &[]);
        }
        if let Some(block) = self.exhausted {
            self.b.switch_to_block(block);
            let zero = self.b.ins().iconst(I64, 0);
            self.b
                .ins()
                .store(run_mem(), zero, self.run_state, RUN_BUDGET);
            self.stop(RunStatus::BudgetExhausted);
        }
        if let Some(block) = self.bad_helper {
            self.b.switch_to_block(block);
            self.store_budget();
            self.stop(RunStatus::BadHelper);
        }
    }

    /// Ends the run abnormally: records `status` and returns 0.
    fn stop(&mut self, status: RunStatus) {
        let s = self.b.ins().iconst(I32, status as u32 as i64);
        self.b.ins().store(run_mem(), s, self.run_state, RUN_STATUS);
        let zero = self.b.ins().iconst(I64, 0);
        self.b.ins().return_(&[zero]);
    }

    /// Subtracts `amount` from the budget, leaving through the exhausted block if it does
    /// not cover it. No-op for unmetered code.
    fn charge(&mut self, amount: u64) {
        let Some(var) = self.budget else { return };
        let left = self.b.use_var(var);
        let enough =
            self.b
                .ins()
                .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, left, amount as i64);
        let cont = self.b.create_block();
        let exhausted = self.exhausted_block();
        self.b.ins().brif(enough, cont, &[], exhausted, &[]);
        self.b.switch_to_block(cont);
        let rest = self.b.ins().iadd_imm_s(left, -(amount as i64));
        self.b.def_var(var, rest);
    }

    fn exhausted_block(&mut self) -> Block {
        if let Some(b) = self.exhausted {
            return b;
        }
        let block = self.b.create_block();
        self.b.set_cold_block(block);
        self.exhausted = Some(block);
        block
    }

    fn store_budget(&mut self) {
        if let Some(var) = self.budget {
            let left = self.b.use_var(var);
            self.b
                .ins()
                .store(run_mem(), left, self.run_state, RUN_BUDGET);
        }
    }

    /// Takes the budget back from `RunState.budget` after a call that may have charged it:
    /// a local callee, or a helper that runs code on the caller's budget (a cross-sandbox
    /// call). A helper that lowered it to zero stops the run at the next charge (the next
    /// back-edge or function entry). No-op for unmetered code.
    fn reload_budget(&mut self) {
        if let Some(var) = self.budget {
            let left = self
                .b
                .ins()
                .load(I64, run_mem(), self.run_state, RUN_BUDGET);
            self.b.def_var(var, left);
        }
    }

    /// The low 32 bits of a register value. Most 32-bit operands are results of earlier
    /// 32-bit operations (zero-extended), whose 32-bit value is taken as it is: no truncation
    /// for Cranelift to create and then simplify away.
    fn low32(&mut self, v: Value) -> Value {
        let dfg = &self.b.func.dfg;
        if let Some(inst) = dfg.value_def(v).inst() {
            if let InstructionData::Unary {
                opcode: Opcode::Uextend,
                arg,
            } = dfg.insts[inst]
            {
                if dfg.value_type(arg) == I32 {
                    return arg;
                }
            }
        }
        self.b.ins().ireduce(I32, v)
    }

    fn operand(&mut self, width: Width, src: Operand) -> Value {
        match (src, width) {
            (Operand::Reg(r), Width::W64) => self.reg(r),
            (Operand::Reg(r), Width::W32) => {
                let v = self.reg(r);
                self.low32(v)
            }
            (Operand::Imm(i), Width::W64) => self.imm(I64, i as i64),
            (Operand::Imm(i), Width::W32) => self.imm(I32, i as u32 as i64),
        }
    }

    /// A constant the program chose, of type `ty` (`value` is its bits, sign- or
    /// zero-extended as the operation wants): plain when blinding is off or it fits in 16
    /// bits, else blinded as `(opaque + d) ^ (value ^ (base + d))` with a fresh key `d`, so
    /// that neither the value nor any part of it beyond 16 bits is an immediate of the code,
    /// and no folding of two blinded constants cancels their keys.
    fn imm(&mut self, ty: Type, value: i64) -> Value {
        let narrow = if ty == I32 {
            value as i32 as i64
        } else {
            value
        };
        let Some(blinding) = self.blinding.as_mut().filter(|_| !plain_constant(narrow)) else {
            return self.b.ins().iconst(ty, value);
        };
        let d = match blinding.used.get(&(ty, value)) {
            Some(&d) => d,
            None => {
                let d = blinding.keys.next();
                blinding.used.insert((ty, value), d);
                d
            }
        };
        let masked = (value as u64) ^ blinding.base.wrapping_add(d);
        let opaque = blinding.opaque;
        let key = if ty == I64 {
            opaque
        } else {
            self.b.ins().ireduce(ty, opaque)
        };
        let bits = ty.bits();
        let mask = |v: u64| {
            if bits == 64 {
                v
            } else {
                v & ((1u64 << bits) - 1)
            }
        };
        let d = self.b.ins().iconst(ty, mask(d) as i64);
        let key = self.b.ins().iadd(key, d);
        let masked = self.b.ins().iconst(ty, mask(masked) as i64);
        self.b.ins().bxor(key, masked)
    }

    fn dst_value(&mut self, width: Width, dst: Reg) -> Value {
        let v = self.reg(dst);
        match width {
            Width::W64 => v,
            Width::W32 => self.low32(v),
        }
    }

    fn write(&mut self, width: Width, dst: Reg, v: Value) {
        let v = match width {
            Width::W64 => v,
            Width::W32 => self.b.ins().uextend(I64, v),
        };
        self.set(dst, v);
    }

    fn alu(&mut self, width: Width, op: AluOp, dst: Reg, src: Operand) {
        let ty = match width {
            Width::W64 => I64,
            Width::W32 => I32,
        };
        let bits = ty.bits() as i64;
        let v = match op {
            AluOp::Mov => self.operand(width, src),
            AluOp::MovSx(from) => {
                let s = match src {
                    Operand::Reg(r) => self.reg(r),
                    Operand::Imm(i) => self.imm(I64, i as i64),
                };
                let narrow = match from {
                    8 => I8,
                    16 => I16,
                    _ => I32,
                };
                let n = self.b.ins().ireduce(narrow, s);
                if narrow == ty {
                    n
                } else {
                    self.b.ins().sextend(ty, n)
                }
            }
            AluOp::Neg => {
                let a = self.dst_value(width, dst);
                self.b.ins().ineg(a)
            }
            AluOp::Lsh | AluOp::Rsh | AluOp::Arsh => {
                let a = self.dst_value(width, dst);
                let i = self.b.ins();
                match (op, src) {
                    (AluOp::Lsh, Operand::Imm(k)) => i.ishl_imm_u(a, k as i64 & (bits - 1)),
                    (AluOp::Rsh, Operand::Imm(k)) => i.ushr_imm_u(a, k as i64 & (bits - 1)),
                    (_, Operand::Imm(k)) => i.sshr_imm_u(a, k as i64 & (bits - 1)),
                    (_, Operand::Reg(_)) => {
                        // Cranelift shifts take the amount modulo the type's width, exactly
                        // eBPF's masking.
                        let s = self.operand(width, src);
                        let i = self.b.ins();
                        match op {
                            AluOp::Lsh => i.ishl(a, s),
                            AluOp::Rsh => i.ushr(a, s),
                            _ => i.sshr(a, s),
                        }
                    }
                }
            }
            AluOp::Div | AluOp::Mod | AluOp::SDiv | AluOp::SMod => {
                let a = self.dst_value(width, dst);
                self.division(ty, op, a, src)
            }
            _ => {
                let a = self.dst_value(width, dst);
                let s = self.operand(width, src);
                let i = self.b.ins();
                match op {
                    AluOp::Add => i.iadd(a, s),
                    AluOp::Sub => i.isub(a, s),
                    AluOp::Mul => i.imul(a, s),
                    AluOp::Or => i.bor(a, s),
                    AluOp::And => i.band(a, s),
                    AluOp::Xor => i.bxor(a, s),
                    _ => unreachable!("handled above"),
                }
            }
        };
        self.write(width, dst, v);
    }

    /// eBPF division never traps: `x / 0 = 0`, `x % 0 = x`, and signed `MIN / -1 = MIN`,
    /// `MIN % -1 = 0`. Cranelift's `udiv`/`sdiv` trap on those, so the divisor is made safe
    /// first and the special cases are selected afterwards; a constant divisor needs none of
    /// it.
    fn division(&mut self, ty: Type, op: AluOp, a: Value, src: Operand) -> Value {
        let signed = matches!(op, AluOp::SDiv | AluOp::SMod);
        let is_div = matches!(op, AluOp::Div | AluOp::SDiv);
        // A blinded divisor is not a constant to the code generator: the general path.
        let blinded =
            matches!(src, Operand::Imm(k) if self.blinding.is_some() && !plain_constant(k as i64));
        if let (Operand::Imm(k), false) = (src, blinded) {
            // Sign-extended, as eBPF does for ALU64 immediates; ALU32 uses the low 32 bits.
            let k = k as i64;
            let i = self.b.ins();
            return match (k, is_div, signed) {
                (0, true, _) => i.iconst(ty, 0),
                (0, false, _) => a,
                (-1, true, true) => i.ineg(a),
                (-1, false, true) => i.iconst(ty, 0),
                _ => {
                    let kv = if ty == I32 {
                        i.iconst(I32, k as u32 as i64)
                    } else {
                        i.iconst(I64, k)
                    };
                    let i = self.b.ins();
                    match (is_div, signed) {
                        (true, false) => i.udiv(a, kv),
                        (false, false) => i.urem(a, kv),
                        (true, true) => i.sdiv(a, kv),
                        (false, true) => i.srem(a, kv),
                    }
                }
            };
        }
        let d = self.operand(if ty == I32 { Width::W32 } else { Width::W64 }, src);
        let one = self.b.ins().iconst(ty, 1);
        let zero = self.b.ins().iconst(ty, 0);
        let d_zero = self.b.ins().icmp_imm_s(IntCC::Equal, d, 0);
        if !signed {
            let safe = self.b.ins().select(d_zero, one, d);
            return if is_div {
                let q = self.b.ins().udiv(a, safe);
                self.b.ins().select(d_zero, zero, q)
            } else {
                let r = self.b.ins().urem(a, safe);
                self.b.ins().select(d_zero, a, r)
            };
        }
        let d_minus1 = self.b.ins().icmp_imm_s(IntCC::Equal, d, -1);
        let special = self.b.ins().bor(d_zero, d_minus1);
        let safe = self.b.ins().select(special, one, d);
        if is_div {
            let q = self.b.ins().sdiv(a, safe);
            let neg = self.b.ins().ineg(a);
            let q = self.b.ins().select(d_minus1, neg, q);
            self.b.ins().select(d_zero, zero, q)
        } else {
            let r = self.b.ins().srem(a, safe);
            let r = self.b.ins().select(d_minus1, zero, r);
            self.b.ins().select(d_zero, a, r)
        }
    }

    fn endian(&mut self, order: ByteOrder, bits: u8, dst: Reg) {
        let v = self.reg(dst);
        let narrow = match bits {
            16 => Some(I16),
            32 => Some(I32),
            _ => None,
        };
        let out = match (order, narrow) {
            // Both supported targets are little-endian: `le` only truncates.
            (ByteOrder::ToLe, None) => v,
            (ByteOrder::ToLe, Some(ty)) => {
                let n = self.b.ins().ireduce(ty, v);
                self.b.ins().uextend(I64, n)
            }
            (_, None) => self.b.ins().bswap(v),
            (_, Some(ty)) => {
                let n = self.b.ins().ireduce(ty, v);
                let s = self.b.ins().bswap(n);
                self.b.ins().uextend(I64, s)
            }
        };
        self.set(dst, out);
    }

    /// Whether `value` is certainly below `bound` (unsigned): a constant, a mask with a small
    /// constant, or either seen through extensions and truncations, looking at most `depth`
    /// definitions back.
    fn known_below(&self, value: Value, bound: u64, depth: u32) -> bool {
        let dfg = &self.b.func.dfg;
        let Some(inst) = dfg.value_def(value).inst() else {
            return false;
        };
        let bits = dfg.value_type(value).bits();
        let mask = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let constant = |v: Value| match dfg.value_def(v).inst().map(|i| &dfg.insts[i]) {
            Some(InstructionData::UnaryImm {
                opcode: Opcode::Iconst,
                imm,
            }) => Some(imm.bits() as u64),
            _ => None,
        };
        match &dfg.insts[inst] {
            InstructionData::UnaryImm {
                opcode: Opcode::Iconst,
                imm,
            } => (imm.bits() as u64 & mask) < bound,
            InstructionData::Unary {
                opcode: Opcode::Uextend | Opcode::Ireduce,
                arg,
            } => depth > 0 && self.known_below(*arg, bound, depth - 1),
            InstructionData::Binary {
                opcode: Opcode::Band,
                args,
            } => args.iter().any(|a| {
                constant(*a).is_some_and(|c| (c & mask) < bound)
                    || (depth > 0 && self.known_below(*a, bound, depth - 1))
            }),
            _ => false,
        }
    }

    /// The outcome of `jeq`/`jne dst, 0` (64-bit) when `dst` holds a pointer known not to be
    /// NULL: an inlined lookup whose key is in range by construction.
    fn null_test_outcome(
        &mut self,
        width: Width,
        cond: JmpCond,
        dst: Reg,
        src: Operand,
    ) -> Option<bool> {
        if width != Width::W64 || src != Operand::Imm(0) || self.non_null.is_empty() {
            return None;
        }
        let v = self.reg(dst);
        if !self.non_null.contains(&v) {
            return None;
        }
        match cond {
            JmpCond::Eq => Some(false),
            JmpCond::Ne => Some(true),
            _ => None,
        }
    }

    fn condition(&mut self, width: Width, cond: JmpCond, dst: Reg, src: Operand) -> Value {
        let a = self.dst_value(width, dst);
        let s = self.operand(width, src);
        let cc = match cond {
            JmpCond::Set => {
                let m = self.b.ins().band(a, s);
                return self.b.ins().icmp_imm_s(IntCC::NotEqual, m, 0);
            }
            JmpCond::Eq => IntCC::Equal,
            JmpCond::Ne => IntCC::NotEqual,
            JmpCond::Gt => IntCC::UnsignedGreaterThan,
            JmpCond::Ge => IntCC::UnsignedGreaterThanOrEqual,
            JmpCond::Lt => IntCC::UnsignedLessThan,
            JmpCond::Le => IntCC::UnsignedLessThanOrEqual,
            JmpCond::Sgt => IntCC::SignedGreaterThan,
            JmpCond::Sge => IntCC::SignedGreaterThanOrEqual,
            JmpCond::Slt => IntCC::SignedLessThan,
            JmpCond::Sle => IntCC::SignedLessThanOrEqual,
        };
        self.b.ins().icmp(cc, a, s)
    }

    /// A frame-pointer access that stays inside this frame's stack: its byte offset from the
    /// frame's base, known from the stack plan (any base register) or from `r10` itself.
    fn frame_offset(&self, pc: usize, base: Reg, off: i16, size: Size) -> Option<i32> {
        if let Some(plan) = &self.stack_plan {
            return plan.access.get(&pc).copied();
        }
        let at = STACK_SIZE as i64 + off as i64;
        (base.index() == 10 && at >= 0 && at + size.bytes() as i64 <= STACK_SIZE as i64)
            .then_some(at as i32)
    }

    /// Loads `size` bytes at byte `at` of this frame, extended to 64 bits.
    fn frame_load(&mut self, at: i32, size: Size, sign_extend: bool) -> Value {
        if let Some(&(var, ty)) = self.promoted.get(&at) {
            let v = self.b.use_var(var);
            return match (ty == I64, sign_extend) {
                (true, _) => v,
                (false, true) => self.b.ins().sextend(I64, v),
                (false, false) => self.b.ins().uextend(I64, v),
            };
        }
        let (frame, at) = match self.stack {
            FrameStack::Slot(slot) => (self.b.ins().stack_addr(self.ptr, slot, 0), at),
            FrameStack::Shadow(frame) => (frame, at),
            FrameStack::Promoted => unreachable!("the stack plan promotes every frame access"),
        };
        self.load_at(frame, at, size, sign_extend)
    }

    /// A load from native memory, extended to 64 bits in the same instruction.
    fn load_at(&mut self, addr: Value, off: i32, size: Size, sign_extend: bool) -> Value {
        let i = self.b.ins();
        match (size, sign_extend) {
            (Size::DW, _) => i.load(I64, mem(), addr, off),
            (Size::B, false) => i.uload8(I64, mem(), addr, off),
            (Size::B, true) => i.sload8(I64, mem(), addr, off),
            (Size::H, false) => i.uload16(I64, mem(), addr, off),
            (Size::H, true) => i.sload16(I64, mem(), addr, off),
            (Size::W, false) => i.uload32(mem(), addr, off),
            (Size::W, true) => i.sload32(mem(), addr, off),
        }
    }

    fn load(&mut self, pc: usize, size: Size, sign_extend: bool, base: Reg, off: i16) -> Value {
        if let Some(at) = self.frame_offset(pc, base, off, size) {
            return self.frame_load(at, size, sign_extend);
        }
        let addr = self.reg(base);
        self.load_at(addr, off as i32, size, sign_extend)
    }

    fn store(&mut self, pc: usize, size: Size, base: Reg, off: i16, v: Value) {
        let ty = int_type(size);
        let v = if ty == I64 {
            v
        } else {
            self.b.ins().ireduce(ty, v)
        };
        if let Some(at) = self.frame_offset(pc, base, off, size) {
            if let Some(&(var, _)) = self.promoted.get(&at) {
                self.b.def_var(var, v);
                return;
            }
            match self.stack {
                FrameStack::Slot(slot) => {
                    self.b.ins().stack_store(self.ptr, v, slot, at);
                }
                FrameStack::Shadow(frame) => {
                    self.b.ins().store(mem(), v, frame, at);
                }
                FrameStack::Promoted => unreachable!("the stack plan promotes every frame access"),
            }
        } else {
            let addr = self.reg(base);
            self.b.ins().store(mem(), v, addr, off as i32);
        }
    }

    fn atomic(&mut self, size: Size, op: AtomicOp, fetch: bool, base: Reg, off: i16, src: Reg) {
        let ty = if size == Size::W { I32 } else { I64 };
        let b = self.reg(base);
        let addr = self.b.ins().iadd_imm_s(b, off as i64);
        let narrow = |t: &mut Self, v: Value| {
            if ty == I32 {
                t.b.ins().ireduce(I32, v)
            } else {
                v
            }
        };
        let widen = |t: &mut Self, v: Value| {
            if ty == I32 {
                t.b.ins().uextend(I64, v)
            } else {
                v
            }
        };
        let s = self.reg(src);
        let s = narrow(self, s);
        // Atomics on eBPF memory are aligned by the verifier; Cranelift requires the flag.
        let flags = MemFlagsData::new().with_aligned();
        if op == AtomicOp::CmpXchg {
            let expected = self.reg(Reg(0));
            let expected = narrow(self, expected);
            let old = self.b.ins().atomic_cas(flags, addr, expected, s);
            let old = widen(self, old);
            self.set(Reg(0), old);
            return;
        }
        let rmw = match op {
            AtomicOp::Add => AtomicRmwOp::Add,
            AtomicOp::Or => AtomicRmwOp::Or,
            AtomicOp::And => AtomicRmwOp::And,
            AtomicOp::Xor => AtomicRmwOp::Xor,
            AtomicOp::Xchg => AtomicRmwOp::Xchg,
            AtomicOp::CmpXchg => unreachable!("handled above"),
        };
        let old = self.b.ins().atomic_rmw(ty, flags, rmw, addr, s);
        if fetch {
            let old = widen(self, old);
            self.set(src, old);
        }
    }

    fn symbol_index(&mut self, sym: Symbol) -> u32 {
        match self.symbols.iter().position(|s| *s == sym) {
            Some(i) => i as u32,
            None => {
                self.symbols.push(sym);
                (self.symbols.len() - 1) as u32
            }
        }
    }

    fn external_name(&mut self, namespace: u32, index: u32) -> ExternalName {
        let r = self
            .b
            .func
            .declare_imported_user_function(UserExternalName::new(namespace, index));
        ExternalName::user(r)
    }

    fn symbol_value(&mut self, sym: Symbol, addend: i64) -> Value {
        let key = (sym.clone(), addend);
        let gv = match self.globals.get(&key) {
            Some(gv) => *gv,
            None => {
                let index = self.symbol_index(sym);
                let name = self.external_name(NS_SYMBOL, index);
                let gv = self.b.create_global_value(GlobalValueData::Symbol {
                    name,
                    offset: Imm64::new(addend),
                    colocated: false,
                    tls: false,
                });
                self.globals.insert(key, gv);
                gv
            }
        };
        self.b.ins().symbol_value(self.ptr, gv)
    }

    fn args(&mut self) -> Vec<Value> {
        (1..=5).map(|i| self.reg(Reg(i))).collect()
    }

    fn inline_array_at(&self, pc: usize) -> Option<(u32, InlineArray)> {
        inline_array_at(self.insns, self.plan, &self.blocks, self.opts, pc)
    }

    fn call(&mut self, pc: usize, target: CallTarget) -> Result<(), CompileError> {
        match target {
            CallTarget::Helper(BPF_FUNC_MAP_LOOKUP_ELEM) if self.inline_array_at(pc).is_some() => {
                let (index, array) = self.inline_array_at(pc).expect("checked by the guard");
                // The helper's contract, inline: the 4-byte key (the verifier proved `r2`
                // readable for it), NULL when it is out of range, else the value's address.
                let key_at = self
                    .stack_plan
                    .as_ref()
                    .and_then(|p| p.lookup_key.get(&pc).copied());
                let key = match key_at {
                    Some(at) => self.frame_load(at, Size::W, false),
                    None => {
                        let key_ptr = self.reg(Reg(2));
                        self.b.ins().uload32(mem(), key_ptr, 0)
                    }
                };
                let base = self.symbol_value(Symbol::MapValue(index), 0);
                let offset = self.b.ins().imul_imm_u(key, array.value_stride() as i64);
                let addr = self.b.ins().iadd(base, offset);
                let r0 = if self.known_below(key, array.max_entries as u64, 8) {
                    // The key is in range by construction (masked, or a constant): the
                    // result is the value's address, never NULL, and a NULL test of it
                    // right after is decided here (see `Insn::Jmp`).
                    self.non_null.insert(addr);
                    addr
                } else {
                    let in_range = self.b.ins().icmp_imm_u(
                        IntCC::UnsignedLessThan,
                        key,
                        array.max_entries as i64,
                    );
                    let null = self.b.ins().iconst(I64, 0);
                    self.b.ins().select(in_range, addr, null)
                };
                self.set(Reg(0), r0);
            }
            CallTarget::Helper(id) => {
                let id = u32::try_from(id).map_err(|_| CompileError::Unsupported {
                    pc,
                    what: format!("helper id {id}"),
                })?;
                let args = self.args();
                self.store_budget();
                let call = match self.opts.helper_calls {
                    HelperCalls::Direct => {
                        let f = match self.helper_funcs.get(&id) {
                            Some(f) => *f,
                            None => {
                                let index = self.symbol_index(Symbol::Helper(id));
                                let name = self.external_name(NS_SYMBOL, index);
                                let f = self.b.import_function(ExtFuncData {
                                    name,
                                    signature: self.helper_sig,
                                    colocated: false,
                                    patchable: false,
                                });
                                self.helper_funcs.insert(id, f);
                                f
                            }
                        };
                        self.b.ins().call(f, &args)
                    }
                    HelperCalls::Table { table_len } => {
                        if id >= table_len {
                            return Err(CompileError::Unsupported {
                                pc,
                                what: format!(
                                    "helper {id} beyond the {table_len}-entry helper table"
                                ),
                            });
                        }
                        let table = self.symbol_value(Symbol::Var(HELPER_TABLE_SYMBOL.into()), 0);
                        let f = self.b.ins().load(
                            I64,
                            run_mem().with_readonly(),
                            table,
                            (id * 8) as i32,
                        );
                        self.b.ins().call_indirect(self.helper_sig, f, &args)
                    }
                };
                let r0 = self.b.inst_results(call)[0];
                self.set(Reg(0), r0);
                self.reload_budget();
                if id as i32 == BPF_FUNC_TAIL_CALL {
                    self.return_if_stopped();
                }
            }
            CallTarget::Local(_) => {
                let start = self.insns[pc].call_target(pc).unwrap() as usize;
                let callee = callee_index(self.plans, start);
                let f = match self.local_funcs.get(&callee) {
                    Some(f) => *f,
                    None => {
                        let name = self.external_name(NS_FUNC, callee as u32);
                        let f = self.b.import_function(ExtFuncData {
                            name,
                            signature: self.local_sig,
                            colocated: true,
                            patchable: false,
                        });
                        self.local_funcs.insert(callee, f);
                        f
                    }
                };
                let mut args = self.args();
                args.push(self.run_state);
                if self.opts.speculation().is_some() {
                    let top = self.reg(Reg(10));
                    args.push(top);
                }
                self.store_budget();
                let call = self.b.ins().call(f, &args);
                let r0 = self.b.inst_results(call)[0];
                self.set(Reg(0), r0);
                // The callee charged the shared budget in memory.
                self.reload_budget();
                if self.may_stop {
                    // A callee that stopped the run set the status: unwind at once.
                    let status = self
                        .b
                        .ins()
                        .load(I32, run_mem(), self.run_state, RUN_STATUS);
                    let cont = self.b.create_block();
                    let unwind = self.b.create_block();
                    self.b.set_cold_block(unwind);
                    self.b.ins().brif(status, unwind, &[], cont, &[]);
                    self.b.switch_to_block(unwind);
                    if self.opts.speculation().is_some() {
                        self.record_caller_frame(pc + 1);
                    }
                    let zero = self.b.ins().iconst(I64, 0);
                    self.b.ins().return_(&[zero]);
                    self.b.switch_to_block(cont);
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
                let id = self.reg(r);
                let in_table =
                    self.b
                        .ins()
                        .icmp_imm_u(IntCC::UnsignedLessThan, id, table_len as i64);
                let bad = match self.bad_helper {
                    Some(b) => b,
                    None => {
                        let b = self.b.create_block();
                        self.b.set_cold_block(b);
                        self.bad_helper = Some(b);
                        b
                    }
                };
                let cont = self.b.create_block();
                self.b.ins().brif(in_table, cont, &[], bad, &[]);
                self.b.switch_to_block(cont);
                let table = self.symbol_value(Symbol::Var(HELPER_TABLE_SYMBOL.into()), 0);
                let offset = self.b.ins().ishl_imm_u(id, 3);
                let slot = self.b.ins().iadd(table, offset);
                let f = self.b.ins().load(I64, run_mem().with_readonly(), slot, 0);
                let args = self.args();
                self.store_budget();
                let call = self.b.ins().call_indirect(self.helper_sig, f, &args);
                let r0 = self.b.inst_results(call)[0];
                self.set(Reg(0), r0);
                self.reload_budget();
                // The helper may have been `bpf_tail_call`.
                self.return_if_stopped();
            }
        }
        Ok(())
    }

    /// After a call that may end the run (a tail call that succeeded, or whose target
    /// stopped): returns at once when the run state's status is set. Nothing after a
    /// successful tail call runs; the host returns the result it recorded. The budget in
    /// the run state is already the target's: nothing of this frame is written back.
    fn return_if_stopped(&mut self) {
        let status = self
            .b
            .ins()
            .load(I32, run_mem(), self.run_state, RUN_STATUS);
        let cont = self.b.create_block();
        let leave = self.b.create_block();
        self.b.set_cold_block(leave);
        self.b.ins().brif(status, leave, &[], cont, &[]);
        self.b.switch_to_block(leave);
        let zero = self.b.ins().iconst(I64, 0);
        self.b.ins().return_(&[zero]);
        self.b.switch_to_block(cont);
    }
}

/// The inlinable array `r1` designates at the call in slot `pc`: the last write to `r1` in the
/// same straight-line run of slots (no jump lands between it and the call) is an `lddw` of a
/// map listed in [`CompileOptions::inline_arrays`].
fn inline_array_at(
    insns: &[Insn],
    plan: FuncPlan,
    blocks: &[Option<Block>],
    opts: &CompileOptions,
    pc: usize,
) -> Option<(u32, InlineArray)> {
    let mut j = pc;
    loop {
        if blocks[j - plan.start].is_some() || j == plan.start {
            return None;
        }
        j -= 1;
        match &insns[j] {
            Insn::LoadImm64Hi => continue,
            Insn::LoadImm64 {
                dst: Reg(1),
                kind: ImmKind::MapIdx,
                imm_lo,
                ..
            } => {
                let index = *imm_lo as u32;
                return opts.inline_arrays.get(&index).map(|a| (index, *a));
            }
            insn => {
                if matches!(insn, Insn::Call(_)) || uses_defs(insn).1 & bit(Reg(1)) != 0 {
                    return None;
                }
            }
        }
    }
}
