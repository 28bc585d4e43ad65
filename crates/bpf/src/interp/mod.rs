//! The reference interpreter: the semantics every other tier (JIT, kernel) is compared against.
//!
//! A [`Vm`] is built once per program ([`Vm::new`]): the slot-indexed instructions are lowered
//! to a flat pre-decoded form (one 16-byte op per slot, immediates extended, jump targets
//! absolute, helpers and map references resolved), then run any number of times, from any
//! number of threads, in one of two modes:
//!
//! - **checked** ([`Vm::run_checked`]): every load, store, atomic and helper pointer argument
//!   is checked against the regions the program may touch — its stack frames, the input
//!   bytes or the context structure, the packet, and the values of its maps (read-only for
//!   `.rodata`). Reading a register that holds no value is an error too (`r1`-`r5` after a
//!   call, `r0` before it is set, `r6`-`r9` at function entry). Every failure is a
//!   [`RunError`] naming the instruction and the address; nothing is undefined behaviour.
//!   This is the mode for unverified programs and for tests.
//! - **unchecked** ([`Vm::run_unchecked`]): no bounds checks, for programs the verifier
//!   accepted for this kind of context. Context accesses still go through the model and the
//!   step limit, call depth and atomic alignment are still enforced; the contract is in the
//!   function's safety section.
//!
//! Semantics follow RFC 9669: 32-bit operations zero-extend, shift amounts are masked, division
//! by zero yields 0 and modulo by zero leaves the dividend; each local call gets a fresh
//! 512-byte stack frame (up to [`MAX_FRAMES`] nested) and preserves `r6`-`r9`.
//!
//! The context is one of [`Input`]: nothing (`r1` = `r2` = 0), plain bytes (`r1` = their
//! address, `r2` = their length, as the conformance suite runs programs), or a
//! [`ContextModel`] such as [`SkBuff`] or [`XdpMd`], which serves the program's context loads
//! the way the kernel's context-access conversion does.
//!
//! ```
//! use rdx_bpf::asm::assemble;
//! use rdx_bpf::helpers::Helpers;
//! use rdx_bpf::interp::{Config, Input, Vm};
//! use rdx_bpf::maps::MapSet;
//!
//! let insns = assemble("ldxw %r0, [%r1+4]\nadd %r0, %r2\nexit").unwrap();
//! let vm = Vm::new(&insns, &MapSet::default(), &Helpers::standard(), Config::default()).unwrap();
//! let mut mem = [0, 0, 0, 0, 40, 0, 0, 0];
//! assert_eq!(vm.run_checked(Input::Bytes(&mut mem)).unwrap(), 48);
//! // Reading past the input is an error naming the instruction, never undefined behaviour.
//! let err = vm.run_checked(Input::Bytes(&mut mem[..6])).unwrap_err();
//! assert_eq!(err.pc, 0);
//! ```

pub mod context;
mod exec;
pub(crate) mod memory;
mod ops;

pub use context::{ContextError, ContextModel, PacketRegion, SkBuff, XdpMd};

use crate::helpers::{HelperEnv, HelperError, HelperImpl, Helpers};
use crate::isa::{ImmKind, Reg};
use crate::maps::{MapSet, ResolveError};

pub use rdx_exec::machine::{ResumeFrame, MAX_FRAMES};

/// Run-time limits and settings of a [`Vm`].
#[derive(Clone, Debug)]
pub struct Config {
    /// Instructions a run may execute before it stops with [`RunErrorKind::StepLimit`].
    pub max_steps: u64,
    /// Seed of `bpf_get_prandom_u32`'s generator, for reproducible runs.
    pub rng_seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            // About a second of interpretation: enough for any real program, and an
            // unverified infinite loop stops instead of hanging the caller.
            max_steps: 1 << 30,
            rng_seed: 0x5eed_0fbd_f00d,
        }
    }
}

/// What `r1` (and `r2`) hold when the program starts.
pub enum Input<'a> {
    /// `r1` = `r2` = 0.
    Empty,
    /// Plain memory: `r1` = its address, `r2` = its length; the program may read and write it.
    Bytes(&'a mut [u8]),
    /// A modelled context structure: `r1` = its address; loads and stores in it are served by
    /// the model, and the packet it describes becomes accessible memory.
    Context(&'a mut dyn ContextModel),
}

/// The machine before one instruction of an observed run ([`Vm::run_observed`]).
pub struct Observation<'a> {
    /// Slot of the instruction about to run.
    pub pc: usize,
    /// `r0`..`r10` of the current frame.
    pub regs: [u64; 11],
    /// Bit `r` set: register `r` holds a value (reading the others is an error).
    pub init: u16,
    /// Call depth: 0 in the entry function; frame `k`'s `r10` is `stack_top - 512 k`.
    pub depth: usize,
    /// One past the entry frame's highest stack byte.
    pub stack_top: u64,
    /// The stack memory of every frame, ending at `stack_top`.
    pub stack: &'a [u8],
}

impl Observation<'_> {
    /// The `r10` of frame `k` (0 = the entry function).
    pub fn frame_pointer(&self, k: usize) -> u64 {
        self.stack_top - (k * crate::isa::STACK_SIZE) as u64
    }

    /// The 8 bytes at stack address `addr` (little-endian), if they are stack memory.
    pub fn stack_u64(&self, addr: u64) -> Option<u64> {
        let base = self.stack_top - self.stack.len() as u64;
        let off = usize::try_from(addr.checked_sub(base)?).ok()?;
        let bytes = self.stack.get(off..off.checked_add(8)?)?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }

    /// The byte at stack address `addr`, if it is stack memory.
    pub fn stack_u8(&self, addr: u64) -> Option<u8> {
        let base = self.stack_top - self.stack.len() as u64;
        let off = usize::try_from(addr.checked_sub(base)?).ok()?;
        self.stack.get(off).copied()
    }
}

/// Why a program could not be prepared.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("instruction {pc}: {kind}")]
pub struct PrepareError {
    /// Slot index of the instruction.
    pub pc: usize,
    /// What cannot be prepared.
    pub kind: PrepareErrorKind,
}

/// Why an instruction cannot be prepared for the interpreter.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrepareErrorKind {
    /// The program has no instructions.
    #[error("program is empty")]
    Empty,
    /// More slots than the interpreter takes: the number given.
    #[error("program of {0} instructions is too long")]
    TooLong(usize),
    /// A jump or call lands outside the program or on an `lddw`'s second slot: the target.
    #[error("jump or call target {0} is not an instruction of the program")]
    BadTarget(i64),
    /// A call to a helper id the VM's helper table lacks.
    #[error("call to unknown helper {0}")]
    UnknownHelper(i64),
    /// A kernel-function call (kfunc), by BTF id.
    #[error("kernel function calls (kfunc {0}) are not supported")]
    Kfunc(i32),
    /// An `lddw` kind only a kernel can resolve.
    #[error("lddw of kind {0:?} cannot be resolved outside the kernel")]
    UnsupportedLddw(ImmKind),
    /// An `lddw` map reference that does not resolve against the VM's maps.
    #[error("map reference: {0}")]
    Map(ResolveError),
    /// An encoding the strict decoder should have refused; what.
    #[error("malformed instruction: {0}")]
    Malformed(&'static str),
    /// An `lddw` whose target the caller's linker could not resolve.
    #[error("lddw of kind {kind:?} (index {index}) has no linked address")]
    Unlinked {
        /// The reference's kind.
        kind: ImmKind,
        /// Its map index.
        index: i32,
    },
}

/// Why a run stopped with an error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("instruction {pc}: {kind}")]
pub struct RunError {
    /// Slot index of the instruction that failed.
    pub pc: usize,
    /// What went wrong.
    pub kind: RunErrorKind,
}

/// Why a run stopped at an instruction.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunErrorKind {
    /// A load, store or helper access outside the memory the program may use.
    #[error("{size}-byte {} at {addr:#x} is outside the program's memory", if *.write { "write" } else { "read" })]
    OutOfBounds {
        /// The address.
        addr: u64,
        /// Bytes accessed.
        size: usize,
        /// Whether it was a write.
        write: bool,
    },
    /// A store to read-only memory (context fields, `.rodata`).
    #[error("{size}-byte write at {addr:#x} targets read-only memory")]
    ReadOnly {
        /// The address.
        addr: u64,
        /// Bytes written.
        size: usize,
    },
    /// An atomic operation's address is not a multiple of its size.
    #[error("atomic {size}-byte access at {addr:#x} is not naturally aligned")]
    MisalignedAtomic {
        /// The address.
        addr: u64,
        /// The access size in bytes.
        size: usize,
    },
    /// The context model refused an access.
    #[error("context access: {0}")]
    Context(#[from] ContextError),
    /// An atomic operation on the context structure.
    #[error("atomic operation on the context structure at {addr:#x}")]
    AtomicOnContext {
        /// The address.
        addr: u64,
    },
    /// A register was read before anything was written to it.
    #[error("{0} is read before it holds a value")]
    UninitRegister(Reg),
    /// The run executed its step limit: the limit.
    #[error("step limit of {0} instructions reached")]
    StepLimit(u64),
    /// A local call would nest deeper than eight frames.
    #[error("call depth exceeds {MAX_FRAMES} frames")]
    CallDepth,
    /// `callx` to a value that is no registered helper: the value.
    #[error("callx to {0:#x}, which is not a known helper")]
    BadCallx(u64),
    /// A helper failed.
    #[error("helper {id}: {error}")]
    Helper {
        /// The helper's id.
        id: i64,
        /// Why.
        error: HelperError,
    },
    /// Control reached the second slot of an `lddw`.
    #[error("execution reached the second slot of an lddw")]
    IntoLddw,
    /// Control ran past the last slot without an `exit`.
    #[error("execution fell off the end of the program")]
    FellOff,
}

/// The exact eBPF state a run continues from ([`Vm::resume_checked`]).
///
/// The stack is `MAX_FRAMES * 512` bytes, 16-byte aligned, frame `k` occupying the 512 bytes
/// below `top - k * 512` (the layout of `rdx_region::abi::DeoptRunState` and of the
/// interpreter's own stack), so pointers into it stay valid as they are: the run continues
/// on that memory.
#[derive(Debug)]
pub struct Resume<'s> {
    /// Slot to execute next.
    pub pc: usize,
    /// `r0`..`r10` of the innermost frame; `r10` must be that frame's top.
    pub regs: [u64; 11],
    /// Caller frames, outermost (the entry function) first.
    pub frames: &'s [ResumeFrame],
    /// The stack, `MAX_FRAMES * 512` bytes, 16-byte aligned, laid out as above.
    pub stack: &'s mut [u8],
    /// The packet a real-memory context points into, accessible like the packet of a
    /// modelled context.
    pub packet: Option<PacketRegion>,
    /// Instructions the rest of the run may execute (default: the VM's `max_steps`).
    pub max_steps: Option<u64>,
}

/// Why a resumed run failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// The state is not one the program could be in (a frame, register or stack pointer out of
    /// range); the text says what.
    #[error("cannot resume: {0}")]
    BadState(String),
    /// The resumed run failed.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Lowers a program for a fallback image (`rdx_exec::image`): validated as [`Vm::new`]
/// validates, map references (`lddw` of [`ImmKind::MapIdx`] / [`ImmKind::MapIdxValue`])
/// resolved by `link(kind, map index, value offset)` to the addresses the native link gives
/// them, helper calls left as ids (a host calls them through its helper table). One op per
/// slot.
pub fn lower_linked(
    insns: &[crate::isa::Insn],
    mut link: impl FnMut(ImmKind, i32, i32) -> Option<u64>,
) -> Result<Vec<rdx_exec::Op>, PrepareError> {
    let (ops, _) = ops::lower(
        insns,
        |kind, index, offset| {
            link(kind, index, offset).ok_or(PrepareErrorKind::Unlinked { kind, index })
        },
        |_| Ok(0),
    )?;
    Ok(ops)
}

/// A prepared program with its maps and helpers.
pub struct Vm {
    ops: Box<[rdx_exec::Op]>,
    masks: Box<[rdx_exec::RegMasks]>,
    helper_table: Box<[HelperImpl]>,
    helpers: Helpers,
    maps: MapSet,
    env: HelperEnv,
    config: Config,
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm")
            .field("slots", &(self.ops.len() - 1))
            .field("maps", &self.maps)
            .field("helpers", &self.helpers)
            .field("config", &self.config)
            .finish()
    }
}

impl Vm {
    /// Prepares `insns` (slot-indexed, as [`crate::isa::decode`] and the loader produce them).
    /// Map references (`lddw` of [`ImmKind::MapIdx`] / [`ImmKind::MapIdxValue`]) index
    /// `maps`; helper calls must name helpers of `helpers`.
    pub fn new(
        insns: &[crate::isa::Insn],
        maps: &MapSet,
        helpers: &Helpers,
        config: Config,
    ) -> Result<Vm, PrepareError> {
        let compiled = ops::compile(insns, maps, helpers)?;
        Ok(Vm {
            ops: compiled.ops,
            masks: compiled.masks,
            helper_table: compiled.helpers,
            helpers: helpers.clone(),
            maps: maps.clone(),
            env: HelperEnv::new(config.rng_seed),
            config,
        })
    }

    /// Runs with every memory access and register read checked. Returns `r0`.
    pub fn run_checked(&self, input: Input<'_>) -> Result<u64, RunError> {
        exec::run::<true>(self, input, None)
    }

    /// [`Vm::run_checked`], calling `observer` before every instruction with the machine
    /// state there. This is how a static analysis is checked against real runs: the verifier's
    /// state embedding compares each observation with the abstract states it recorded at the
    /// same instruction.
    pub fn run_observed(
        &self,
        input: Input<'_>,
        observer: &mut dyn FnMut(&Observation<'_>),
    ) -> Result<u64, RunError> {
        exec::run_with::<true>(self, input, None, Some(observer))
    }

    /// Runs without bounds checks. Returns `r0`.
    ///
    /// # Safety
    /// The program must have been accepted by rdx's verifier for the kind of `input` given
    /// (its memory accesses are then within the regions checked mode would allow, helper
    /// arguments are valid, and every register is written before it is read). Under that
    /// contract the run has no undefined behaviour. Context accesses, atomic alignment, the
    /// call depth and the step limit are checked in this mode as well.
    pub unsafe fn run_unchecked(&self, input: Input<'_>) -> Result<u64, RunError> {
        exec::run::<false>(self, input, None)
    }

    /// Continues a run that another tier (a deoptimised elite JIT artifact) started, from
    /// the exact eBPF state it handed over, with every access checked as in
    /// [`Vm::run_checked`]. `input` must be the run's original context, given as
    /// [`Input::Bytes`] when the context is real memory (the JIT's view), with
    /// [`Resume::packet`] naming the packet it points into.
    pub fn resume_checked(&self, input: Input<'_>, state: Resume<'_>) -> Result<u64, ResumeError> {
        self.check_resume(&state)?;
        Ok(exec::run::<true>(self, input, Some(state))?)
    }

    /// [`Vm::resume_checked`] without bounds checks.
    ///
    /// # Safety
    /// As [`Vm::run_unchecked`], and the state is one a tier running the same verified
    /// program produced on this input (its pointers point where the program may access).
    pub unsafe fn resume_unchecked(
        &self,
        input: Input<'_>,
        state: Resume<'_>,
    ) -> Result<u64, ResumeError> {
        self.check_resume(&state)?;
        Ok(exec::run::<false>(self, input, Some(state))?)
    }

    /// Refuses a state the dispatch loop could not continue from safely.
    fn check_resume(&self, state: &Resume<'_>) -> Result<(), ResumeError> {
        let top = state.stack.as_ptr() as u64 + state.stack.len() as u64;
        let start = rdx_exec::machine::Start {
            pc: state.pc,
            regs: state.regs,
            init: rdx_exec::machine::ALL_REGS,
            frames: state.frames,
            stack_top: top,
            budget: 0,
        };
        let is_insn = |pc: usize| self.ops[pc].code != rdx_exec::Code::LdImm64Hi;
        let stack = (state.stack.as_ptr() as u64, state.stack.len());
        rdx_exec::machine::check_resume(self.ops.len() - 1, is_insn, &start, stack)
            .map_err(ResumeError::BadState)
    }

    /// The maps the program uses (shared with every other user of the same [`MapSet`]).
    pub fn maps(&self) -> &MapSet {
        &self.maps
    }

    /// The limits and options the VM runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Takes the lines `bpf_trace_printk` printed so far.
    pub fn take_trace(&self) -> Vec<String> {
        self.env.take_trace()
    }
}

#[cfg(test)]
mod tests;
