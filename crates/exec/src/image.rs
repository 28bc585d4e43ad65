//! The fallback image: a program lowered ahead of time by a control plane and linked for one
//! region, which a host continues deoptimised runs in without parsing, verifying or lowering
//! anything.
//!
//! Format (little-endian, 16-byte aligned, position-independent):
//!
//! | offset | field | meaning |
//! | --- | --- | --- |
//! | 0 | `magic: u64` | [`IMAGE_MAGIC`], `"RDXFBIM1"` |
//! | 8 | `version: u32` | [`IMAGE_VERSION`] |
//! | 12 | `slots: u32` | instruction slots of the program |
//! | 16 | [`RawOp`] × `slots` | one [`Op`] per slot |
//!
//! Each [`RawOp`] is an [`Op`] with its code as a byte: map references are absolute
//! addresses (what the native link resolves `map:<i>` and `mapvalue:<i>` to), helper calls
//! carry their id in `imm` and go through the region's helper table, jump and call targets
//! are absolute slot indices. Nothing in it depends on where the image itself lies.

use std::sync::atomic::{AtomicU64, Ordering};

use rdx_region::abi::{DeoptRunState, HelperFn, RunState, DEOPT_FRAME_BYTES, DEOPT_MAX_FRAMES};

use crate::machine::{self, Env, Fault, HelperReturn, ResumeFrame, Start, ALL_REGS};
use crate::op::{Code, Op, RegMasks};

/// `"RDXFBIM1"` little-endian: the first eight bytes of every image.
pub const IMAGE_MAGIC: u64 = u64::from_le_bytes(*b"RDXFBIM1");
/// Bumped on every incompatible change to the image format.
pub const IMAGE_VERSION: u32 = 1;
/// Bytes of the image header.
pub const IMAGE_HEADER_BYTES: usize = 16;

/// One slot of an image: an [`Op`] whose code is a plain byte, so that any bytes are a
/// value of this type and an unknown code is an error, never undefined behaviour.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawOp {
    /// [`Code`] discriminant; a byte that names no code is refused when the image is read.
    pub code: u8,
    /// Destination register index (0..=10).
    pub dst: u8,
    /// Source register index (0..=10).
    pub src: u8,
    /// Zero.
    pub reserved: u8,
    /// [`Op::aux`].
    pub aux: u32,
    /// [`Op::imm`].
    pub imm: u64,
}

const _: () = assert!(std::mem::size_of::<RawOp>() == 16);

impl From<&Op> for RawOp {
    fn from(op: &Op) -> RawOp {
        RawOp {
            code: op.code as u8,
            dst: op.dst,
            src: op.src,
            reserved: 0,
            aux: op.aux,
            imm: op.imm,
        }
    }
}

/// Why bytes are not an image.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Fewer bytes than the header: the number given.
    #[error("image of {0} bytes is shorter than its 16-byte header")]
    Short(usize),
    /// The image's address is not 16-byte aligned: the address given.
    #[error("image at {0:#x} is not 16-byte aligned")]
    Misaligned(u64),
    /// The first eight bytes are not [`IMAGE_MAGIC`]: the value found.
    #[error("bad image magic {0:#018x}")]
    Magic(u64),
    /// The image was written for another format version: the version found.
    #[error("image format version {0}, this executor reads {IMAGE_VERSION}")]
    Version(u32),
    /// The slot count in the header does not match the bytes given.
    #[error("image declares {slots} slots, {bytes} bytes hold {held}")]
    Length {
        /// Slots the header declares.
        slots: u32,
        /// Bytes given, header included.
        bytes: usize,
        /// Slots those bytes hold.
        held: usize,
    },
    /// The header declares no slots.
    #[error("image has no slots")]
    Empty,
}

/// Encodes lowered ops as an image.
pub fn encode(ops: &[Op]) -> Vec<u8> {
    let mut out = Vec::with_capacity(image_len(ops.len()));
    out.extend_from_slice(&IMAGE_MAGIC.to_le_bytes());
    out.extend_from_slice(&IMAGE_VERSION.to_le_bytes());
    out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
    for op in ops {
        let raw = RawOp::from(op);
        out.extend_from_slice(&[raw.code, raw.dst, raw.src, 0]);
        out.extend_from_slice(&raw.aux.to_le_bytes());
        out.extend_from_slice(&raw.imm.to_le_bytes());
    }
    out
}

/// Bytes of the image of a program of `slots` slots.
pub fn image_len(slots: usize) -> usize {
    IMAGE_HEADER_BYTES + slots * std::mem::size_of::<RawOp>()
}

/// A parsed image, borrowing its bytes (in a host: the code arena, where the control plane
/// wrote it beside the elite code).
#[derive(Clone, Copy, Debug)]
pub struct Image<'a> {
    ops: &'a [RawOp],
}

impl<'a> Image<'a> {
    /// Checks the header and length of `bytes` (which must be 16-byte aligned). The ops are
    /// not decoded here: the executor decodes each as it runs it.
    pub fn parse(bytes: &'a [u8]) -> Result<Image<'a>, ImageError> {
        if bytes.len() < IMAGE_HEADER_BYTES {
            return Err(ImageError::Short(bytes.len()));
        }
        if !(bytes.as_ptr() as u64).is_multiple_of(16) {
            return Err(ImageError::Misaligned(bytes.as_ptr() as u64));
        }
        let magic = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
        if magic != IMAGE_MAGIC {
            return Err(ImageError::Magic(magic));
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != IMAGE_VERSION {
            return Err(ImageError::Version(version));
        }
        let slots = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
        let held = (bytes.len() - IMAGE_HEADER_BYTES) / std::mem::size_of::<RawOp>();
        if slots as usize > held {
            return Err(ImageError::Length {
                slots,
                bytes: bytes.len(),
                held,
            });
        }
        if slots == 0 {
            return Err(ImageError::Empty);
        }
        let ops = &bytes[IMAGE_HEADER_BYTES..];
        // SAFETY: `ops` is 16-byte aligned (the image is, and the header is 16 bytes), holds
        // at least `slots` 16-byte elements (checked), and every bit pattern is a `RawOp`.
        let ops =
            unsafe { std::slice::from_raw_parts(ops.as_ptr().cast::<RawOp>(), slots as usize) };
        Ok(Image { ops })
    }

    /// Instruction slots.
    pub fn slots(&self) -> usize {
        self.ops.len()
    }

    /// The op of slot `pc`, decoded; `None` outside the program or for an unknown code.
    pub fn op(&self, pc: usize) -> Option<Op> {
        let raw = self.ops.get(pc)?;
        Some(Op {
            code: Code::from_u8(raw.code)?,
            dst: raw.dst,
            src: raw.src,
            aux: raw.aux,
            imm: raw.imm,
        })
    }
}

/// Helpers a resumed run calls: the region's helper table.
pub trait HelperCall {
    /// Calls helper `id` with the run's budget left stored where helpers read it; `None` if
    /// there is no such helper.
    fn call(&mut self, id: u64, args: [u64; 5], budget: &mut u64) -> Option<HelperReturn>;
}

/// The region's helper table (`u64` function addresses indexed by id, 0 = none), as JIT code
/// linked with table helper calls uses it, and the run state helpers read the budget from.
#[derive(Debug)]
pub struct HelperTable<'a> {
    /// The helper table section: `u64` function addresses indexed by helper id, 0 = none.
    pub entries: &'a [AtomicU64],
    /// The run's state: the budget left is stored in it around each call, as metered
    /// native code does, so a helper can read and charge it.
    pub run: *mut RunState,
}

impl HelperCall for HelperTable<'_> {
    #[inline]
    fn call(&mut self, id: u64, args: [u64; 5], budget: &mut u64) -> Option<HelperReturn> {
        let addr = self
            .entries
            .get(usize::try_from(id).ok()?)?
            .load(Ordering::Acquire);
        if addr == 0 {
            return None;
        }
        // SAFETY: the host filled its helper table with `HelperFn` addresses (0 = none).
        let f = unsafe { std::mem::transmute::<usize, HelperFn>(addr as usize) };
        // SAFETY: `run` is the live run state of this run (the caller's contract).
        unsafe { (*self.run).budget = *budget };
        // SAFETY: a helper of this host called with the arguments a verified program
        // passes, as its native code would.
        let r0 = unsafe { f(args[0], args[1], args[2], args[3], args[4]) };
        // SAFETY: as above.
        *budget = unsafe { (*self.run).budget };
        Some(HelperReturn { r0, stop: false })
    }
}

/// Why a resumed run did not finish.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The deoptimised state cannot be resumed (a frame, register or stack pointer out of
    /// range); the text says what.
    #[error("cannot resume: {0}")]
    BadState(String),
    /// The dispatch loop stopped the run.
    #[error("slot {pc}: {fault}")]
    Fault {
        /// Slot at which it stopped.
        pc: usize,
        /// Why.
        fault: Fault,
    },
    /// A helper call named an id the helper table holds no function for.
    #[error("slot {pc}: call to helper {id}, which the helper table does not hold")]
    NoHelper {
        /// Slot of the call.
        pc: usize,
        /// The helper id called.
        id: u64,
    },
}

impl ExecError {
    /// Whether the run stopped because its instruction budget ran out.
    pub fn is_budget(&self) -> bool {
        matches!(
            self,
            ExecError::Fault {
                fault: Fault::StepLimit(_),
                ..
            }
        )
    }
}

/// The environment of an image run: plain memory (the program was verified), ops decoded
/// and bounds-checked as they are fetched, helpers through the table.
struct RegionEnv<'i, H> {
    image: Image<'i>,
    helpers: H,
}

impl<H: HelperCall> Env for RegionEnv<'_, H> {
    type Error = ExecError;
    const CHECK_REGS: bool = false;

    #[inline(always)]
    fn fetch(&self, pc: usize) -> Result<Op, ExecError> {
        match self.image.op(pc) {
            Some(op) => Ok(op),
            None => Err(ExecError::Fault {
                pc,
                fault: match self.image.ops.get(pc) {
                    Some(raw) => Fault::BadOpcode(raw.code),
                    None => Fault::FellOff,
                },
            }),
        }
    }

    fn masks(&self, _pc: usize) -> RegMasks {
        RegMasks::default()
    }

    fn fault(&self, pc: usize, fault: Fault) -> ExecError {
        ExecError::Fault { pc, fault }
    }

    #[inline(always)]
    fn load<const N: usize>(&mut self, addr: u64, _pc: usize) -> Result<u64, ExecError> {
        // SAFETY: the image is the lowering of a verified program and the state is one its
        // elite code handed over on this input (`resume`'s contract): the access is one the
        // verifier proved in bounds. Unaligned reads are allowed.
        Ok(unsafe { machine::read_raw::<N>(addr) })
    }

    #[inline(always)]
    fn store<const N: usize>(
        &mut self,
        addr: u64,
        value: u64,
        _pc: usize,
    ) -> Result<(), ExecError> {
        // SAFETY: as for loads.
        unsafe { machine::write_raw::<N>(addr, value) };
        Ok(())
    }

    fn atomic_target(&mut self, _addr: u64, _size: usize, _pc: usize) -> Result<(), ExecError> {
        Ok(())
    }

    #[inline]
    fn call_helper(
        &mut self,
        op: &Op,
        args: [u64; 5],
        budget: &mut u64,
        pc: usize,
    ) -> Result<HelperReturn, ExecError> {
        self.call_reg(op.imm, args, budget, pc)
    }

    #[inline]
    fn call_reg(
        &mut self,
        id: u64,
        args: [u64; 5],
        budget: &mut u64,
        pc: usize,
    ) -> Result<HelperReturn, ExecError> {
        self.helpers
            .call(id, args, budget)
            .ok_or(ExecError::NoHelper { pc, id })
    }

    fn frame(&mut self, _fp: u64) {}
}

/// Continues a deoptimised run: from the exact state in `*state` (slot, registers, caller
/// frames, stack, budget left), in `image`, until the entry function exits. Returns `r0`.
///
/// The state is checked first (slot and return slots are instructions of the image, at most
/// eight frames, `r10` the top of frame `depth` of `state.stack`): a bad one is
/// [`ExecError::BadState`] and nothing runs.
///
/// # Safety
/// `image` is the lowering, linked for this process's region, of the verified program whose
/// elite code stopped with this state on this run's context; `state` is that run's live
/// state, not accessed by anything else meanwhile except the helpers the run calls (through
/// `helpers`, which must be this host's).
pub unsafe fn resume(
    image: Image<'_>,
    state: *mut DeoptRunState,
    helpers: impl HelperCall,
) -> Result<u64, ExecError> {
    // Copy the small fields out; the stack is only reached through the addresses the
    // program holds, never through a reference.
    // SAFETY: the caller's contract: a live, unaliased state.
    let (pc, depth, regs, budget, stack_at) = unsafe {
        let s = &*state;
        (
            s.pc as usize,
            s.depth as usize,
            s.regs,
            s.run.budget,
            std::ptr::addr_of!((*state).stack) as u64,
        )
    };
    if depth >= DEOPT_MAX_FRAMES {
        return Err(ExecError::BadState(format!(
            "depth {depth} (at most {})",
            DEOPT_MAX_FRAMES - 1
        )));
    }
    // Only the live caller frames: the handover's cost grows with the call depth, not with
    // the state's capacity.
    let mut callers = [ResumeFrame::default(); DEOPT_MAX_FRAMES];
    // SAFETY: as above; `depth` was checked against the array's length.
    let live = unsafe { &(&(*state).frames)[..depth] };
    for (c, f) in callers.iter_mut().zip(live) {
        *c = ResumeFrame {
            ret: usize::try_from(f.ret_pc).unwrap_or(usize::MAX),
            saved: f.saved,
        };
    }
    let stack_len = DEOPT_MAX_FRAMES * DEOPT_FRAME_BYTES;
    let start = Start {
        pc,
        regs,
        init: ALL_REGS,
        frames: &callers[..depth],
        stack_top: stack_at + stack_len as u64,
        budget,
    };
    let is_insn = |pc: usize| image.op(pc).is_some_and(|op| op.code != Code::LdImm64Hi);
    machine::check_resume(image.slots(), is_insn, &start, (stack_at, stack_len))
        .map_err(ExecError::BadState)?;
    let mut env = RegionEnv { image, helpers };
    machine::run(&mut env, start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// 16-byte aligned copy of `bytes`.
    fn aligned(bytes: &[u8]) -> Vec<u128> {
        let mut v = vec![0u128; bytes.len().div_ceil(16)];
        // SAFETY: `v` holds at least `bytes.len()` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast(), bytes.len())
        };
        v
    }

    fn view(v: &[u128], len: usize) -> &[u8] {
        // SAFETY: `v` holds at least `len` bytes.
        unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), len) }
    }

    fn op(code: Code, dst: u8, src: u8, aux: u32, imm: u64) -> Op {
        Op {
            code,
            dst,
            src,
            aux,
            imm,
        }
    }

    unsafe extern "C" fn add_helper(a: u64, b: u64, _: u64, _: u64, _: u64) -> u64 {
        a + b
    }

    /// r0 = helper 3 (r1, r2) + stack word; the run resumes at the conditional jump (slot 1)
    /// with r6 set by the "fast path" and a spilled value on the stack.
    fn program() -> Vec<Op> {
        vec![
            op(Code::Mov64I, 6, 0, 0, 1),
            op(Code::Jeq64I, 6, 0, 4, 7), // guard: r6 == 7 -> slot 4
            op(Code::Mov64I, 0, 0, 0, 100),
            op(Code::Exit, 0, 0, 0, 0),
            op(Code::Mov64I, 1, 0, 0, 40),
            op(Code::Mov64I, 2, 0, 0, 2),
            op(Code::CallHelper, 0, 0, 0, 3),
            op(Code::LdxDW, 1, 10, (-8i32) as u32, 0),
            op(Code::Add64R, 0, 1, 0, 0),
            op(Code::Exit, 0, 0, 0, 0),
        ]
    }

    #[test]
    fn a_resumed_run_continues_at_the_guard_with_helpers_from_the_table() {
        let bytes = encode(&program());
        let buf = aligned(&bytes);
        let image = Image::parse(view(&buf, bytes.len())).unwrap();
        assert_eq!(image.slots(), 10);
        let table: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(0)).collect();
        table[3].store(add_helper as HelperFn as usize as u64, Ordering::Relaxed);
        let mut state = DeoptRunState::boxed(100);
        let top = state.stack_top();
        state.pc = 1;
        state.regs[6] = 7;
        state.regs[10] = top;
        let n = state.stack.len();
        state.stack[n - 8..].copy_from_slice(&1000u64.to_le_bytes());
        let run = std::ptr::addr_of_mut!(state.run);
        let helpers = HelperTable {
            entries: &table,
            run,
        };
        // SAFETY: a program of plain ALU ops, stack accesses inside the state and a helper
        // of this test.
        let r0 = unsafe { resume(image, &mut *state, helpers) }.unwrap();
        assert_eq!(r0, 1042);

        // A budget of 3 instructions stops inside the resumed part.
        state.run.budget = 3;
        let helpers = HelperTable {
            entries: &table,
            run,
        };
        // SAFETY: as above.
        let err = unsafe { resume(image, &mut *state, helpers) }.unwrap_err();
        assert!(err.is_budget(), "{err}");

        // A missing helper is an error naming the slot and id.
        table[3].store(0, Ordering::Relaxed);
        state.run.budget = 100;
        let helpers = HelperTable {
            entries: &table,
            run,
        };
        // SAFETY: as above.
        let err = unsafe { resume(image, &mut *state, helpers) }.unwrap_err();
        assert_eq!(err, ExecError::NoHelper { pc: 6, id: 3 });
    }

    #[test]
    fn bad_states_are_refused_before_anything_runs() {
        let bytes = encode(&program());
        let buf = aligned(&bytes);
        let image = Image::parse(view(&buf, bytes.len())).unwrap();
        let mut state = DeoptRunState::boxed(100);
        let top = state.stack_top();
        let table: Vec<AtomicU64> = Vec::new();
        let run = std::ptr::addr_of_mut!(state.run);
        for (pc, depth, r10) in [(10, 0, top), (1, 0, top - 512), (1, 8, top), (1, 1, top)] {
            state.pc = pc;
            state.depth = depth;
            state.regs[10] = r10;
            state.frames[0].ret_pc = 99;
            let helpers = HelperTable {
                entries: &table,
                run,
            };
            // SAFETY: refused before running.
            let err = unsafe { resume(image, &mut *state, helpers) }.unwrap_err();
            assert!(matches!(err, ExecError::BadState(_)), "{err}");
        }
    }

    #[test]
    fn malformed_images_are_typed_errors() {
        let good = encode(&program());
        let buf = aligned(&good);
        assert_eq!(
            Image::parse(view(&buf, 8)).unwrap_err(),
            ImageError::Short(8)
        );
        assert!(matches!(
            Image::parse(view(&buf, good.len() - 1)).unwrap_err(),
            ImageError::Length { slots: 10, .. }
        ));
        let mut bad = good.clone();
        bad[0] ^= 1;
        let b = aligned(&bad);
        assert!(matches!(
            Image::parse(view(&b, bad.len())).unwrap_err(),
            ImageError::Magic(_)
        ));
        let mut bad = good.clone();
        bad[8] = 9;
        let b = aligned(&bad);
        assert_eq!(
            Image::parse(view(&b, bad.len())).unwrap_err(),
            ImageError::Version(9)
        );
        // An unknown opcode is decoded as nothing, never as an operation.
        let mut bad = good;
        bad[IMAGE_HEADER_BYTES] = 250;
        let b = aligned(&bad);
        let image = Image::parse(view(&b, bad.len())).unwrap();
        assert_eq!(image.op(0), None);
        assert!(image.op(1).is_some());
    }

    proptest! {
        #[test]
        fn parsing_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let buf = aligned(&bytes);
            if let Ok(image) = Image::parse(view(&buf, bytes.len())) {
                for pc in 0..image.slots() + 1 {
                    let _ = image.op(pc);
                }
            }
        }
    }
}
