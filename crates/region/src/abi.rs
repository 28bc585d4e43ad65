//! The native calling convention between compiled extensions and the host runtime.
//!
//! A linked extension entry point is an [`EntryFn`]. eBPF `r1` is the context pointer; the
//! second argument carries per-run state that the generated code itself reads and writes (the
//! instruction budget), so that no process-private pointer has to be baked into code that
//! lives in a region. Helpers and host functions use the eBPF helper convention: up to five
//! 64-bit arguments (`r1`..`r5`), one 64-bit result (`r0`), C calling convention.

use std::ffi::c_void;

/// Per-invocation state passed to every native entry point.
#[repr(C)]
#[derive(Debug)]
pub struct RunState {
    /// Instructions the program may still execute. Only metered artifacts read it: they
    /// subtract at back-edges and calls and stop with [`RunStatus::BudgetExhausted`] when it
    /// would go below zero.
    pub budget: u64,
    /// A [`RunStatus`] value, written by generated code only when it stops abnormally.
    pub status: u32,
    /// Zero; keeps `env` 8-byte aligned at offset 16.
    pub reserved: u32,
    /// Opaque host pointer, for helpers that need the runtime's per-run environment.
    pub env: *mut c_void,
}

impl RunState {
    /// The state for one run with `budget` instructions: status `Ok`, no environment pointer.
    pub fn new(budget: u64) -> Self {
        Self {
            budget,
            status: RunStatus::Ok as u32,
            reserved: 0,
            env: std::ptr::null_mut(),
        }
    }
}

/// How a native run ended.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunStatus {
    /// The run ended normally; the return value is the program's `r0`.
    Ok = 0,
    /// The instruction budget ran out; the return value is meaningless.
    BudgetExhausted = 1,
    /// A `callx` named a helper outside the helper table; the return value is meaningless.
    BadHelper = 2,
    /// A speculative (elite) artifact left its fast path at a failed guard. The exact eBPF
    /// state is in the [`DeoptRunState`] the run pointer designates; the return value is
    /// meaningless and the run must continue in the generic tier from that state.
    Deopt = 3,
    /// A `bpf_tail_call` succeeded: the host ran its target to the end of the run and
    /// recorded the run's result. Not a failure: generated code that sees it after a call
    /// returns at once (nothing after a successful tail call runs, as in the kernel), and the
    /// host returns the recorded result instead of `r0`.
    TailCalled = 4,
}

/// eBPF frames an elite artifact can hand over (the eBPF call-depth limit).
pub const DEOPT_MAX_FRAMES: usize = 8;
/// Bytes of one eBPF stack frame.
pub const DEOPT_FRAME_BYTES: usize = 512;

/// One caller frame of a deoptimised run, recorded while the native frames unwind.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeoptFrame {
    /// Slot this frame continues at when its callee returns (the slot after the call).
    pub ret_pc: u64,
    /// `r6`..`r9` of this frame at the call (the callee-saved registers the callee's
    /// return restores).
    pub saved: [u64; 4],
}

/// The run state of an elite (speculative) artifact: a [`RunState`] followed by the place
/// where a failed guard materialises the exact eBPF state.
///
/// An artifact flagged as elite (`FLAG_DEOPT` in `docs/artifact.md`) is called with a
/// pointer to this structure as its run pointer, not to a bare [`RunState`]: its eBPF
/// stack frames live in [`DeoptRunState::stack`] (frame `k` occupies the 512 bytes below
/// `top - k * 512`, where `top` is the end of the array), exactly where the interpreter keeps
/// them, so that the interpreter can resume on the same memory without moving a byte or
/// rebasing a stack pointer.
///
/// After a run that ended with [`RunStatus::Deopt`]:
/// - `pc` is the slot of the failed guard (a conditional jump that has not executed: no
///   side effect of the fast path is lost or repeated by resuming there);
/// - `depth` is the innermost frame's index (0 = entry function), `regs` its `r0`..`r10`;
/// - `frames[0..depth]` are the callers, outermost first;
/// - `run.budget` is the instruction budget left (metered artifacts).
#[repr(C, align(16))]
#[derive(Debug)]
pub struct DeoptRunState {
    /// The part every artifact reads: budget, status, environment.
    pub run: RunState,
    /// Slot of the failed guard, where the run continues in the generic tier.
    pub pc: u32,
    /// Index of the innermost frame (0 = the entry function).
    pub depth: u32,
    /// `r0`..`r10` of the innermost frame at the failed guard.
    pub regs: [u64; 11],
    /// Zero; keeps `frames` at its asserted offset.
    pub reserved: u64,
    /// The callers of the innermost frame, outermost first (`frames[0..depth]`).
    pub frames: [DeoptFrame; DEOPT_MAX_FRAMES],
    /// The eBPF stack frames, where the interpreter keeps them (frame `k` below `top - k * 512`).
    pub stack: [u8; DEOPT_MAX_FRAMES * DEOPT_FRAME_BYTES],
}

impl DeoptRunState {
    /// Byte offsets generated code uses.
    pub const OFF_PC: usize = 24;
    /// Offset of [`DeoptRunState::depth`].
    pub const OFF_DEPTH: usize = 28;
    /// Offset of [`DeoptRunState::regs`].
    pub const OFF_REGS: usize = 32;
    /// Offset of [`DeoptRunState::frames`].
    pub const OFF_FRAMES: usize = 128;
    /// Offset of [`DeoptRunState::stack`].
    pub const OFF_STACK: usize = 448;

    /// A fresh state on the heap (it is 4.5 KiB: one per thread, reused across runs).
    pub fn boxed(budget: u64) -> Box<DeoptRunState> {
        Box::new(Self::new(budget))
    }

    /// A fresh state by value, for embedding in a larger per-thread structure.
    pub fn new(budget: u64) -> DeoptRunState {
        DeoptRunState {
            run: RunState::new(budget),
            pc: 0,
            depth: 0,
            regs: [0; 11],
            reserved: 0,
            frames: [DeoptFrame::default(); DEOPT_MAX_FRAMES],
            stack: [0; DEOPT_MAX_FRAMES * DEOPT_FRAME_BYTES],
        }
    }

    /// Readies the state for the next run: status `Ok`, the given budget. The stack is left
    /// as it is (eBPF programs never read stack bytes they did not write).
    pub fn reset(&mut self, budget: u64) {
        self.run.budget = budget;
        self.run.status = RunStatus::Ok as u32;
    }

    /// One past the highest stack byte: the entry frame's `r10`.
    pub fn stack_top(&self) -> u64 {
        self.stack.as_ptr() as u64 + self.stack.len() as u64
    }
}

/// `"RDXFBLC1"` little-endian: [`FallbackLocator::magic`].
pub const FALLBACK_MAGIC: u64 = u64::from_le_bytes(*b"RDXFBLC1");

/// The 16 bytes right before an elite artifact's entry point in the code arena: where the
/// record's fallback image lies (`docs/region.md`, "Elite code records").
///
/// A control plane that publishes an elite artifact writes one code record: this locator,
/// the linked code (its entry first, at `record + 16`), then, 16-byte aligned, the fallback
/// image a host continues deoptimised runs in (the program lowered and linked for the
/// region, `rdx_exec::image`). The record is allocated, published (one active word) and
/// reclaimed as one, so the image lives exactly as long as the code. A host that sees
/// [`RunStatus::Deopt`] reads the locator at `entry - 16` while the run is still inside its
/// epoch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FallbackLocator {
    /// [`FALLBACK_MAGIC`].
    pub magic: u64,
    /// Bytes from the entry point to the image (16-byte aligned).
    pub image_offset: u32,
    /// Bytes of the image.
    pub image_len: u32,
}

impl FallbackLocator {
    /// Bytes of the locator, and its distance before the entry point.
    pub const BYTES: u64 = 16;

    /// The 16 bytes a control plane writes before the entry point (little-endian fields).
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.magic.to_le_bytes());
        b[8..12].copy_from_slice(&self.image_offset.to_le_bytes());
        b[12..].copy_from_slice(&self.image_len.to_le_bytes());
        b
    }

    /// Decodes 16 bytes read before an entry point; the caller checks `magic`.
    pub fn from_bytes(b: &[u8; 16]) -> FallbackLocator {
        FallbackLocator {
            magic: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            image_offset: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            image_len: u32::from_le_bytes(b[12..].try_into().expect("4 bytes")),
        }
    }
}

/// `"RDXTAIL1"` little-endian: [`TailEntryTag::magic`].
pub const TAIL_ENTRY_MAGIC: u64 = u64::from_le_bytes(*b"RDXTAIL1");

/// The 16 bytes right before the entry point of code a control plane publishes as a
/// tail-call target (a program array element): the mark a host checks before it enters
/// such an entry (`docs/region.md`, "Tail-call entries").
///
/// The code arena is mapped read+execute in the host, so only a control plane writes these
/// bytes; program code cannot forge one by writing memory. A program array element is
/// honoured only when its entry offset is preceded by a tag with this magic and the
/// element's version, so an element that designates anything else (an offset into the
/// middle of some code, a stale record) is refused however well aligned it is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TailEntryTag {
    /// [`TAIL_ENTRY_MAGIC`].
    pub magic: u64,
    /// The version of the program array element that designates this entry.
    pub version: u32,
    /// [`TailEntryTag::METERED`] and nothing else yet.
    pub flags: u32,
}

impl TailEntryTag {
    /// Bytes of the tag, and its distance before the entry point.
    pub const BYTES: u64 = 16;
    /// The code behind the entry is metered (it charges every instruction it runs to
    /// `RunState::budget`). A host enters only metered tail-call targets: a tail call runs
    /// on the remaining budget of the run that made it.
    pub const METERED: u32 = 1;

    /// A tag with [`TAIL_ENTRY_MAGIC`] for element `version`, with `flags`
    /// ([`TailEntryTag::METERED`]).
    pub fn new(version: u32, flags: u32) -> Self {
        Self {
            magic: TAIL_ENTRY_MAGIC,
            version,
            flags,
        }
    }

    /// The 16 bytes a control plane writes before the entry point (little-endian fields).
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.magic.to_le_bytes());
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..].copy_from_slice(&self.flags.to_le_bytes());
        b
    }

    /// Decodes 16 bytes read before an entry point; the caller checks `magic` and `version`.
    pub fn from_bytes(b: &[u8; 16]) -> TailEntryTag {
        TailEntryTag {
            magic: u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
            version: u32::from_le_bytes(b[8..12].try_into().expect("4 bytes")),
            flags: u32::from_le_bytes(b[12..].try_into().expect("4 bytes")),
        }
    }
}

/// A linked extension entry point: `r0 = entry(ctx, run_state)`.
pub type EntryFn = unsafe extern "C" fn(ctx: *mut u8, run: *mut RunState) -> u64;

/// A helper or host function as extension code calls it.
pub type HelperFn = unsafe extern "C" fn(u64, u64, u64, u64, u64) -> u64;

const _: () = assert!(std::mem::size_of::<RunState>() == 24);
const _: () = assert!(std::mem::size_of::<FallbackLocator>() as u64 == FallbackLocator::BYTES);
const _: () = assert!(std::mem::size_of::<TailEntryTag>() as u64 == TailEntryTag::BYTES);
const _: () = assert!(std::mem::align_of::<RunState>() == 8);
const _: () = assert!(std::mem::size_of::<DeoptFrame>() == 40);
const _: () = assert!(std::mem::offset_of!(DeoptRunState, pc) == DeoptRunState::OFF_PC);
const _: () = assert!(std::mem::offset_of!(DeoptRunState, depth) == DeoptRunState::OFF_DEPTH);
const _: () = assert!(std::mem::offset_of!(DeoptRunState, regs) == DeoptRunState::OFF_REGS);
const _: () = assert!(std::mem::offset_of!(DeoptRunState, frames) == DeoptRunState::OFF_FRAMES);
const _: () = assert!(std::mem::offset_of!(DeoptRunState, stack) == DeoptRunState::OFF_STACK);
const _: () = assert!(DeoptRunState::OFF_STACK.is_multiple_of(16));
const _: () = assert!(std::mem::size_of::<DeoptRunState>() == 448 + 4096);
