//! The compiler driver: splits a program into eBPF functions, has [`crate::translate`] lower
//! each to Cranelift IR, compiles them for the requested [`Arch`] and lays the machine code
//! out as one relocatable [`Artifact`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{ExternalName, UserExternalName};
use cranelift_codegen::isa::{self, OwnedTargetIsa};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::{binemit::Reloc, FinalizedRelocTarget};
use cranelift_frontend::FunctionBuilderContext;
use rdx_bpf::isa::{encode, raw_to_bytes, CallTarget, Insn, STACK_SIZE};
use target_lexicon::Triple;

use crate::artifact::{
    sha256, Artifact, Metadata, RelocKind, Relocation, Symbol, FLAG_DEOPT, FLAG_ENTRY_LENGTH_ARG,
    FLAG_HELPER_TABLE, FLAG_NEEDS_BUDGET,
};
use crate::translate::{self, FuncPlan, NS_FUNC, NS_SYMBOL};
use rdx_region::layout::Arch;

/// How generated code reaches helpers and host functions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HelperCalls {
    /// Each helper id is its own relocated 64-bit address (`helper:<id>`). The fastest form:
    /// one constant load and an indirect call.
    #[default]
    Direct,
    /// Helpers are entries of a table of 64-bit addresses (`var:rdx_helper_table`, entry `id`
    /// at byte `8 * id`) holding `table_len` entries. Code that lives at the same address in
    /// several processes (cross-sandbox calls) uses this so that each process can have its
    /// own helper implementations behind one table address. Also what `callx` needs.
    Table { table_len: u32 },
}

/// The entry point's native signature.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EntryAbi {
    /// `r0 = entry(ctx, run_state)`: [`rdx_region::abi::EntryFn`]. `r2`..`r9` start at zero.
    #[default]
    Standard,
    /// `r0 = entry(ctx, run_state, len)` with `r2 = len`: the conformance-suite convention
    /// (r1 = memory, r2 = its length). Calling a standard entry with a third argument is
    /// harmless on both supported calling conventions, so test harnesses always pass it.
    WithLength,
}

/// The direction a profile says a conditional jump goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Expect {
    /// The jump is taken: falling through leaves the fast path.
    Taken,
    /// The jump falls through: taking it leaves the fast path.
    NotTaken,
}

/// Elite compilation: conditional jumps whose cold direction becomes a guard with a
/// deoptimisation exit. Code reachable only through cold directions is not compiled.
///
/// An artifact compiled with a speculation (even an empty one) is an *elite* artifact
/// (`FLAG_DEOPT`): it must be called with an [`rdx_region::abi::DeoptRunState`] as its run
/// pointer, keeps its eBPF stack frames there, and on a failed guard stores the exact eBPF
/// state there and returns with [`rdx_region::abi::RunStatus::Deopt`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Speculation {
    /// Slot of a conditional jump → its expected direction.
    pub guards: BTreeMap<usize, Expect>,
}

/// Scouting: count how often each conditional jump goes each way. Counters are `u64` pairs
/// at the symbol's address, one 16-byte pair per [`branch_sites`] entry in that order:
/// `[fell through, taken]`. The symbol is resolved at link time like any other, typically
/// to a global-data map value in the node's XState (`Symbol::MapValue`), so the control
/// plane reads the profile remotely.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BranchCounters {
    pub symbol: Symbol,
}

/// The conditional jumps of a program, in slot order: the index of a slot in this list is
/// its counter pair in [`BranchCounters`] and its entry in a profile.
pub fn branch_sites(insns: &[Insn]) -> Vec<usize> {
    insns
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i, Insn::Jmp { .. }))
        .map(|(pc, _)| pc)
        .collect()
}

/// Geometry of an array map whose `bpf_map_lookup_elem` calls are inlined (see
/// [`CompileOptions::inline_arrays`]): what the object's map definition declares, so the
/// artifact stays target-independent. The values' base address is the relocation
/// `mapvalue:<index>`; value `i` lives at `base + i * round_up(value_size, 8)`, the layout of
/// rdx's arrays (XState and the in-process map set alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InlineArray {
    pub max_entries: u32,
    pub value_size: u32,
}

impl InlineArray {
    /// Bytes between consecutive values.
    pub fn value_stride(&self) -> u64 {
        (self.value_size as u64).div_ceil(8) * 8
    }
}

/// How much work Cranelift spends on each function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Pipeline {
    /// `opt_level=speed` (e-graph rewriting, GVN, LICM) and the backtracking register
    /// allocator: the fastest code.
    #[default]
    Optimizing,
    /// `opt_level=none` and the single-pass register allocator: about half the compile time,
    /// code 2 to 7x slower (`benches/tiers.rs` measures both). For large, cold programs.
    Fast,
    /// [`Pipeline::Fast`] for eBPF functions longer than this many slots, optimizing for the
    /// others.
    FastAbove(u32),
    /// Not Cranelift: the baseline tier (`crate::baseline`), one linear pass emitting machine
    /// code with eBPF registers in fixed native registers. Compiles an order of magnitude
    /// faster than [`Pipeline::Fast`]; refuses what it does not support (elite artifacts,
    /// branch counters) with [`CompileError::NotInBaseline`], and the caller falls back.
    Baseline,
}

/// Everything besides the bytecode that decides the generated code. Part of the artifact's
/// options hash.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    pub arch: Arch,
    /// Meter executed instructions against [`rdx_region::abi::RunState::budget`]. Required
    /// whenever the verifier could not bound the run.
    pub needs_budget: bool,
    pub helper_calls: HelperCalls,
    pub entry_abi: EntryAbi,
    /// Identity of the EIM extension class the program was verified against; it only enters
    /// the options hash so that a cache keyed by that hash never mixes classes.
    pub eim_class: String,
    /// Run Cranelift's IR verifier on every function (slower; for tests and debugging).
    pub verify_ir: bool,
    /// Compile an elite artifact with these guards (see [`Speculation`]).
    pub speculation: Option<Speculation>,
    /// Instrument every conditional jump with a counter (see [`BranchCounters`]).
    pub branch_counters: Option<BranchCounters>,
    /// Array maps (by index in the object's map table) whose lookups are compiled inline: a
    /// bounds check and an address computation instead of a helper call, returning exactly
    /// what the helper returns. Only for plain arrays (one copy per element), linked against
    /// maps created from the same definitions. Empty by default.
    pub inline_arrays: BTreeMap<u32, InlineArray>,
    /// Cranelift's pipeline (optimizing by default).
    pub pipeline: Pipeline,
    /// Constant blinding (on by default): on x86-64, whose instructions can be decoded from
    /// any byte, a program-chosen constant beyond 16 bits never appears as it is in the code;
    /// it is emitted xored with a key chosen at random for each compilation and unmasked at
    /// run time (see `docs/jit.md`, "Constant blinding"). Off only to measure its cost.
    pub blind_constants: bool,
}

impl CompileOptions {
    pub fn new(arch: Arch) -> Self {
        Self {
            arch,
            needs_budget: false,
            helper_calls: HelperCalls::Direct,
            entry_abi: EntryAbi::Standard,
            eim_class: String::new(),
            verify_ir: cfg!(debug_assertions),
            speculation: None,
            branch_counters: None,
            inline_arrays: BTreeMap::new(),
            pipeline: Pipeline::Optimizing,
            blind_constants: true,
        }
    }

    /// Inlines lookups in every plain array of `maps` (an object's map table): type
    /// `BPF_MAP_TYPE_ARRAY`, 4-byte keys. Per-CPU arrays keep the helper (their element
    /// depends on the running thread).
    pub fn inline_array_lookups(&mut self, maps: &[rdx_bpf::program::MapDef]) {
        for (i, m) in maps.iter().enumerate() {
            if m.map_type == rdx_region::layout::MapType::Array
                && m.key_size == 4
                && m.value_size > 0
                && m.max_entries > 0
            {
                self.inline_arrays.insert(
                    i as u32,
                    InlineArray {
                        max_entries: m.max_entries,
                        value_size: m.value_size,
                    },
                );
            }
        }
    }

    /// The artifact's `options_hash` for these options: a loader that takes an artifact from
    /// a cache checks it against the options it would compile with (hook, class, metering).
    pub fn hash(&self) -> [u8; 32] {
        // A stable textual rendering: the hash must not depend on Rust's Hash implementation.
        let mut text = format!(
            "arch={};budget={};helpers={:?};entry={:?};class={}",
            self.arch, self.needs_budget, self.helper_calls, self.entry_abi, self.eim_class
        );
        if let Some(s) = &self.speculation {
            text.push_str(";guards=");
            for (pc, e) in &s.guards {
                text.push_str(&format!("{pc}:{e:?},"));
            }
        }
        if let Some(c) = &self.branch_counters {
            text.push_str(&format!(";counters={}", c.symbol));
        }
        if !self.inline_arrays.is_empty() {
            text.push_str(";arrays=");
            for (i, a) in &self.inline_arrays {
                text.push_str(&format!("{i}:{}x{},", a.max_entries, a.value_size));
            }
        }
        if self.pipeline != Pipeline::Optimizing {
            text.push_str(&format!(";pipeline={:?}", self.pipeline));
        }
        if !self.blind_constants {
            text.push_str(";blind=false");
        }
        sha256(&[text.as_bytes()])
    }
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

/// Whether constants are blinded in code compiled with `opts`: asked for, and the target is
/// x86-64. aarch64 instructions are fixed 4-byte words decoded only at 4-byte boundaries,
/// and a constant enters them at most 16 bits at a time inside an opcode (`movz`/`movk`,
/// 12-bit arithmetic immediates), so no program-chosen byte sequence there is an
/// instruction of the program's choosing.
pub(crate) fn blinds_constants(opts: &CompileOptions) -> bool {
    opts.blind_constants && opts.arch == Arch::X86_64
}

/// Whether a program constant may appear in code as it is when blinding: one that fits in
/// 16 bits (sign- or zero-extended) puts at most two chosen bytes next to each other, the
/// rest being all zeros or all ones, as the offsets, masks, ports, ethertypes and loop
/// bounds of real programs do.
pub(crate) fn plain_constant(value: i64) -> bool {
    (-(1 << 15)..(1 << 16)).contains(&value)
}

/// The random keys of one compilation's constant blinding: a stream (splitmix64) that
/// starts from a process-wide secret drawn once from the kernel's random source, at a
/// position no other compilation of this process uses, and gives a fresh key per constant,
/// so that nothing about one key tells anything about another. (One `getrandom` per
/// compilation cost the baseline tier a tenth of its compile time.)
pub(crate) struct BlindingKeys(u64);

impl BlindingKeys {
    pub(crate) fn new() -> Self {
        static SECRET: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        static COMPILATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let secret = *SECRET.get_or_init(|| {
            let mut seed = [0u8; 8];
            // SAFETY: getrandom writes at most `seed.len()` bytes into the buffer.
            let got = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), seed.len(), 0) };
            if got == seed.len() as isize {
                u64::from_le_bytes(seed)
            } else {
                // No random source (seccomp, very early boot): the clock and an address,
                // still unknown to the programs being compiled.
                let clock = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                clock ^ (&seed as *const _ as u64).rotate_left(32)
            }
        });
        let n = COMPILATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A starting point on the stream that depends on the secret and this compilation's
        // number through the mixing function: unrelated to any other compilation's.
        Self(secret ^ mix64(n ^ 0x5851_f42d_4c95_7f2d))
    }

    /// The next key.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }
}

/// splitmix64's output function.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Why a program could not be compiled. Instruction indices are slot indices of the program.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("program is empty")]
    Empty,
    #[error("instruction {pc}: {what} is not supported by the JIT")]
    Unsupported { pc: usize, what: String },
    #[error("instruction {pc}: jump to {target} leaves the function starting at {function}")]
    JumpOutsideFunction {
        pc: usize,
        target: i64,
        function: usize,
    },
    #[error("function starting at {function} can run past its last instruction {pc}")]
    FallsOffEnd { function: usize, pc: usize },
    #[error("instruction {pc}: the second slot of lddw is executed")]
    LddwSecondSlot { pc: usize },
    #[error("instruction {pc}: local calls recurse (function at {function} reaches itself)")]
    Recursion { pc: usize, function: usize },
    #[error("cannot build a code generator for {arch}: {reason}")]
    Isa { arch: Arch, reason: String },
    #[error("code generation failed for the function starting at {function}: {reason}")]
    Codegen { function: usize, reason: String },
    #[error("unexpected relocation {kind} in generated code")]
    UnexpectedReloc { kind: String },
    #[error("instruction {pc}: a guard must be a conditional jump, this is {what}")]
    BadGuard { pc: usize, what: String },
    /// The baseline tier does not build this; compile with a Cranelift pipeline instead.
    #[error("the baseline tier does not support {what}")]
    NotInBaseline { what: String },
}

/// Compile-time statistics, for benchmarks and `rdx compile`.
#[derive(Clone, Debug, Default)]
pub struct CompileStats {
    pub insns: usize,
    pub functions: usize,
    pub code_bytes: usize,
    pub elapsed: Duration,
    /// Guards compiled (elite artifacts).
    pub guards: usize,
    /// Instruction slots not compiled because only cold directions reach them.
    pub dropped_insns: usize,
}

/// A Cranelift code generator for one target, reusable across compilations (and shareable
/// between threads).
pub struct Compiler {
    isa: OwnedTargetIsa,
    /// The same target with [`Pipeline::Fast`] settings, built on first use.
    fast_isa: OnceLock<Result<OwnedTargetIsa, String>>,
    arch: Arch,
    /// Cranelift's per-function working memory, kept between compilations so that each one
    /// does not allocate it afresh. A thread that finds it in use makes its own.
    scratch: Mutex<Scratch>,
}

#[derive(Default)]
struct Scratch {
    ctx: Option<cranelift_codegen::Context>,
    fctx: FunctionBuilderContext,
}

impl Compiler {
    pub fn new(arch: Arch) -> Result<Self, CompileError> {
        Ok(Self {
            isa: build_isa(arch, Pipeline::Optimizing)?,
            fast_isa: OnceLock::new(),
            arch,
            scratch: Mutex::new(Scratch::default()),
        })
    }

    fn isa_for(
        &self,
        pipeline: Pipeline,
        slots: usize,
    ) -> Result<&dyn isa::TargetIsa, CompileError> {
        let fast = match pipeline {
            Pipeline::Optimizing | Pipeline::Baseline => false,
            Pipeline::Fast => true,
            Pipeline::FastAbove(n) => slots > n as usize,
        };
        if !fast {
            return Ok(&*self.isa);
        }
        match self
            .fast_isa
            .get_or_init(|| build_isa(self.arch, Pipeline::Fast).map_err(|e| e.to_string()))
        {
            Ok(isa) => Ok(&**isa),
            Err(reason) => Err(CompileError::Isa {
                arch: self.arch,
                reason: reason.clone(),
            }),
        }
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// Compiles a decoded, verified program (slot-indexed, subprograms appended).
    pub fn compile(
        &self,
        insns: &[Insn],
        opts: &CompileOptions,
    ) -> Result<(Artifact, CompileStats), CompileError> {
        let start = Instant::now();
        if opts.arch != self.arch {
            return Err(CompileError::Isa {
                arch: opts.arch,
                reason: format!("this compiler targets {}", self.arch),
            });
        }
        if opts.pipeline == Pipeline::Baseline {
            return crate::baseline::compile(insns, opts);
        }
        let opts = &*effective_options(opts, insns);
        if insns.is_empty() {
            return Err(CompileError::Empty);
        }
        let plans = plan_functions(insns)?;
        let depth = max_call_depth(&plans, insns)?;
        if let Some(spec) = &opts.speculation {
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
        }
        let mut live_slots = 0usize;
        let mut keys = BlindingKeys::new();

        let mut symbols: Vec<Symbol> = Vec::new();
        let mut code: Vec<u8> = Vec::new();
        let mut func_offsets = vec![0u32; plans.len()];
        // Calls between our own functions, patched once every function has an offset.
        let mut local_calls: Vec<(u32, Reloc, u32, i64)> = Vec::new();
        let mut relocations = Vec::new();
        let mut local = None;
        let mut guard = self.scratch.try_lock().ok();
        let scratch: &mut Scratch = match guard.as_deref_mut() {
            Some(s) => s,
            None => local.insert(Scratch::default()),
        };
        let Scratch { ctx, fctx } = scratch;
        let ctx = ctx.get_or_insert_with(cranelift_codegen::Context::new);

        for (fi, plan) in plans.iter().enumerate() {
            let isa = self.isa_for(opts.pipeline, plan.end - plan.start)?;
            ctx.clear();
            live_slots += translate::translate_function(
                &mut ctx.func,
                fctx,
                isa,
                insns,
                &plans,
                fi,
                opts,
                &mut symbols,
                &mut keys,
            )?;
            if opts.verify_ir {
                ctx.verify(isa).map_err(|e| CompileError::Codegen {
                    function: plan.start,
                    reason: format!("IR verifier: {e}"),
                })?;
            }
            let names = ctx.func.params.user_named_funcs().clone();
            let compiled = ctx
                .compile(isa, &mut ControlPlane::default())
                .map_err(|e| CompileError::Codegen {
                    function: plan.start,
                    reason: format!("{:?}", e.inner),
                })?;
            let at = code.len().next_multiple_of(16);
            // An elite artifact's entry stays at offset 0, where the runtime's fallback
            // locator expects it (docs/deopt.md).
            let start = if fi == 0 && opts.speculation.is_some() {
                at
            } else {
                at + loop_padding(
                    self.arch,
                    at,
                    compiled.code_buffer(),
                    &compiled.bb_starts,
                    &compiled.bb_edges,
                )
            };
            // Pad with trapping bytes where the architecture has one (x86-64's `int3`;
            // aarch64's all-zero word is permanently undefined), so a stray jump into
            // padding stops instead of sliding.
            code.resize(start, if self.arch == Arch::X86_64 { 0xcc } else { 0 });
            let base = code.len() as u32;
            func_offsets[fi] = base;
            code.extend_from_slice(compiled.code_buffer());
            for r in compiled.buffer.relocs() {
                let offset = base + r.offset;
                match &r.target {
                    FinalizedRelocTarget::ExternalName(ExternalName::User(nref)) => {
                        let UserExternalName { namespace, index } = names[*nref].clone();
                        match (namespace, r.kind) {
                            (NS_FUNC, Reloc::X86CallPCRel4 | Reloc::Arm64Call) => {
                                local_calls.push((offset, r.kind, index, r.addend))
                            }
                            (NS_SYMBOL, Reloc::Abs8) => relocations.push(Relocation {
                                offset,
                                kind: RelocKind::Abs64,
                                symbol: index,
                                addend: r.addend,
                            }),
                            (_, kind) => {
                                return Err(CompileError::UnexpectedReloc {
                                    kind: format!("{kind:?} to namespace {namespace}"),
                                })
                            }
                        }
                    }
                    FinalizedRelocTarget::Func(target) if r.kind == Reloc::Abs8 => relocations
                        .push(Relocation {
                            offset,
                            kind: RelocKind::CodeAbs64,
                            symbol: 0,
                            addend: (base + target) as i64 + r.addend,
                        }),
                    other => {
                        return Err(CompileError::UnexpectedReloc {
                            kind: format!("{:?} to {other:?}", r.kind),
                        })
                    }
                }
            }
        }

        for (offset, kind, callee, addend) in local_calls {
            let target = func_offsets[callee as usize] as i64;
            let at = offset as usize;
            match kind {
                Reloc::X86CallPCRel4 => {
                    let rel = i32::try_from(target + addend - offset as i64).map_err(|_| {
                        CompileError::UnexpectedReloc {
                            kind: "call displacement beyond 2 GiB".into(),
                        }
                    })?;
                    code[at..at + 4].copy_from_slice(&rel.to_le_bytes());
                }
                Reloc::Arm64Call => {
                    let delta = target + addend - offset as i64;
                    if delta % 4 != 0 || !(-(1 << 27)..(1 << 27)).contains(&delta) {
                        return Err(CompileError::UnexpectedReloc {
                            kind: "aarch64 call displacement out of range".into(),
                        });
                    }
                    let mut word = u32::from_le_bytes(code[at..at + 4].try_into().unwrap());
                    word = (word & !0x03ff_ffff) | (((delta >> 2) as u32) & 0x03ff_ffff);
                    code[at..at + 4].copy_from_slice(&word.to_le_bytes());
                }
                _ => unreachable!("filtered above"),
            }
        }

        let artifact = Artifact {
            meta: metadata(insns, opts, func_offsets[0], depth, plans.len()),
            code,
            symbols,
            relocations,
        };
        let stats = CompileStats {
            insns: insns.len(),
            functions: plans.len(),
            code_bytes: artifact.code.len(),
            elapsed: start.elapsed(),
            guards: opts.speculation.as_ref().map_or(0, |s| s.guards.len()),
            dropped_insns: insns.len() - live_slots,
        };
        Ok((artifact, stats))
    }
}

fn build_isa(arch: Arch, pipeline: Pipeline) -> Result<OwnedTargetIsa, CompileError> {
    let isa_err = |reason: String| CompileError::Isa { arch, reason };
    let triple: Triple = crate::target::triple(arch)
        .parse()
        .map_err(|e| isa_err(format!("{e}")))?;
    let mut flags = settings::builder();
    let (opt_level, regalloc) = match pipeline {
        Pipeline::Fast => ("none", "single_pass"),
        _ => ("speed", "backtracking"),
    };
    for (k, v) in [
        ("opt_level", opt_level),
        ("regalloc_algorithm", regalloc),
        // Every address the code uses is an absolute relocation the linker fills in, so
        // code can be placed anywhere; no GOT, no PLT.
        ("is_pic", "false"),
        ("enable_verifier", "false"),
        ("preserve_frame_pointers", "true"),
        // Block offsets and edges of the machine code, where `loop_padding` finds loops.
        ("machine_code_cfg_info", "true"),
    ] {
        flags.set(k, v).map_err(|e| isa_err(format!("{k}: {e}")))?;
    }
    let builder = isa::lookup(triple).map_err(|e| isa_err(e.to_string()))?;
    builder
        .finish(settings::Flags::new(flags))
        .map_err(|e| isa_err(e.to_string()))
}

/// Bytes of a cache line: the unit in which the front end fetches code (and, on the x86-64
/// machines this was measured on, what a loop must not straddle to run at full speed).
const CACHE_LINE: usize = 64;

/// Padding (a multiple of 16, below [`CACHE_LINE`]) to put before a function of `len` bytes
/// that would otherwise start at `at`, so that its loops straddle as few cache lines as
/// possible, given the block starts and edges Cranelift reports (a loop: an edge back to a
/// block at or before its source; it spans from that block to the end of the source block).
/// Assumes a load address aligned to [`CACHE_LINE`] (the runtime's code arena allocates in
/// 64-byte granules; `ExecutableCode` maps pages); any 16-byte-aligned address stays correct.
///
/// On the AMD EPYC this was measured on, the `checksum` kernel's five-instruction loop runs
/// in 196 ns when it sits in one 64-byte line and 286 ns when it straddles two.
fn loop_padding(arch: Arch, at: usize, code: &[u8], starts: &[u32], edges: &[(u32, u32)]) -> usize {
    let end_of = |block: u32| {
        starts
            .iter()
            .copied()
            .filter(|&s| s > block)
            .min()
            .map_or(code.len(), |s| s as usize)
    };
    let mut loops: Vec<(usize, usize)> = edges
        .iter()
        .filter(|(from, to)| to <= from)
        .map(|&(from, to)| (to as usize, end_of(from)))
        // Long spans (large loops, or a cold block laid out last jumping back) gain little;
        // the reported edges include some of blocks the code buffer merged away, so a loop
        // counts only if its last block really ends with a branch back to its head.
        .filter(|&(s, e)| s < e && e - s <= 4 * CACHE_LINE && branches_back(arch, code, e, s))
        .collect();
    loops.sort_unstable();
    loops.dedup();
    if loops.is_empty() {
        return 0;
    }
    // Lines each loop touches beyond the fewest its length needs, weighed by the inverse of
    // its length: an extra line costs about the same per iteration whatever the loop, so it
    // matters most to the shortest loops (a versioned loop's unchecked copy is shorter than
    // the checked one).
    let extra = |pad: usize| -> usize {
        loops
            .iter()
            .map(|&(s, e)| {
                let (s, e) = (at + pad + s, at + pad + e);
                let lines = (e - 1) / CACHE_LINE - s / CACHE_LINE + 1;
                (lines - (e - s).div_ceil(CACHE_LINE)) * (1 << 16) / (e - s)
            })
            .sum()
    };
    (0..CACHE_LINE)
        .step_by(16)
        .min_by_key(|&pad| (extra(pad), pad))
        .unwrap_or(0)
}

/// Whether the code ending at byte `end` ends with a branch to byte `to` (its last
/// instruction, or the one before a final unconditional branch).
fn branches_back(arch: Arch, code: &[u8], end: usize, to: usize) -> bool {
    let word = |at: usize| u32::from_le_bytes(code[at..at + 4].try_into().expect("4 bytes"));
    let lands = |next: usize, disp: i64| next as i64 + disp == to as i64;
    match arch {
        Arch::X86_64 => {
            // `jmp rel32` (e9) and `jcc rel32` (0f 8x), as Cranelift emits them.
            let jmp = |end: usize| end >= 5 && code[end - 5] == 0xe9;
            let jcc = |end: usize| end >= 6 && code[end - 6] == 0x0f && code[end - 5] >> 4 == 8;
            let target = |end: usize| lands(end, word(end - 4) as i32 as i64);
            ((jmp(end) || jcc(end)) && target(end)) || (jmp(end) && jcc(end - 5) && target(end - 5))
        }
        Arch::Aarch64 => {
            // `b`, `b.cond`, `cbz`/`cbnz` and `tbz`/`tbnz`, at `pc` (byte offset).
            let to_of = |pc: usize| -> Option<i64> {
                let w = word(pc);
                let signed = |v: u32, bits: u32| ((v << (32 - bits)) as i32 >> (32 - bits)) as i64;
                let disp = if w & 0xfc00_0000 == 0x1400_0000 {
                    signed(w & 0x03ff_ffff, 26)
                } else if w & 0xff00_0010 == 0x5400_0000 || w & 0x7e00_0000 == 0x3400_0000 {
                    signed((w >> 5) & 0x7_ffff, 19)
                } else if w & 0x7e00_0000 == 0x3600_0000 {
                    signed((w >> 5) & 0x3fff, 14)
                } else {
                    return None;
                };
                Some(pc as i64 + 4 * disp)
            };
            let hits = |pc: usize| to_of(pc) == Some(to as i64);
            let unconditional = |pc: usize| word(pc) & 0xfc00_0000 == 0x1400_0000;
            end >= 4
                && end.is_multiple_of(4)
                && (hits(end - 4) || (end >= 8 && unconditional(end - 4) && hits(end - 8)))
        }
    }
}

/// Compiles a program for `opts.arch` with a fresh [`Compiler`].
/// [`Pipeline::Baseline`] builds no Cranelift code generator at all.
pub fn compile(insns: &[Insn], opts: &CompileOptions) -> Result<Artifact, CompileError> {
    if opts.pipeline == Pipeline::Baseline {
        return Ok(crate::baseline::compile(insns, opts)?.0);
    }
    Ok(Compiler::new(opts.arch)?.compile(insns, opts)?.0)
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

pub(crate) fn callee_index(plans: &[FuncPlan], start: usize) -> usize {
    function_index(plans, start)
}

/// The artifact metadata both code generators write: flags from the options, the entry, the
/// stack of `depth` frames, and the hashes of the source bytecode and the options.
pub(crate) fn metadata(
    insns: &[Insn],
    opts: &CompileOptions,
    entry_offset: u32,
    depth: usize,
    functions: usize,
) -> Metadata {
    let mut flags = 0;
    if opts.needs_budget {
        flags |= FLAG_NEEDS_BUDGET;
    }
    if opts.entry_abi == EntryAbi::WithLength {
        flags |= FLAG_ENTRY_LENGTH_ARG;
    }
    if matches!(opts.helper_calls, HelperCalls::Table { .. }) {
        flags |= FLAG_HELPER_TABLE;
    }
    if opts.speculation.is_some() {
        flags |= FLAG_DEOPT;
    }
    let source = raw_to_bytes(&encode(insns));
    Metadata {
        arch: opts.arch,
        flags,
        entry_offset,
        stack_bytes: (depth * STACK_SIZE) as u32,
        functions: functions as u32,
        insn_count: insns.len() as u32,
        source_hash: sha256(&[&source]),
        options_hash: opts.hash(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_branches_are_read_from_the_code() {
        // x86-64: 8 bytes of body, then `jb` back to 0; then `jcc` to 0 followed by a `jmp`.
        let mut x = vec![0x90u8; 8];
        x.extend([0x0f, 0x82]);
        x.extend((-14i32).to_le_bytes());
        assert!(branches_back(Arch::X86_64, &x, 14, 0));
        assert!(!branches_back(Arch::X86_64, &x, 14, 2));
        x.push(0xe9);
        x.extend(100i32.to_le_bytes());
        assert!(branches_back(Arch::X86_64, &x, 19, 0));
        assert!(branches_back(Arch::X86_64, &x, 19, 119));
        assert!(!branches_back(Arch::X86_64, &x, 8, 0));
        // aarch64: `b.lo` back 3 words, `b` back 4, `cbnz x1` back 4, and a plain `add`.
        let words: [u32; 4] = [0x54ff_ffa3, 0x17ff_fffc, 0xb5ff_ff81, 0x9100_0400];
        let a: Vec<u8> = [0xd503_201f; 8] // nop
            .into_iter()
            .chain(words)
            .flat_map(u32::to_le_bytes)
            .collect();
        assert!(branches_back(Arch::Aarch64, &a, 36, 20));
        assert!(branches_back(Arch::Aarch64, &a, 40, 20));
        assert!(branches_back(Arch::Aarch64, &a, 44, 24));
        assert!(!branches_back(Arch::Aarch64, &a, 48, 24));
    }

    #[test]
    fn compiler_is_shareable_between_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<Compiler>();
    }

    #[test]
    fn threads_compile_with_one_compiler() {
        let compiler = Compiler::new(Arch::X86_64).unwrap();
        let prog = rdx_bpf::asm::assemble("mov %r0, 7\nexit").unwrap();
        let opts = CompileOptions::new(Arch::X86_64);
        let code = |c: &Compiler| c.compile(&prog, &opts).unwrap().0.code;
        let alone = code(&compiler);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..4).map(|_| s.spawn(|| code(&compiler))).collect();
            for h in handles {
                assert_eq!(h.join().unwrap(), alone);
            }
        });
    }
}
