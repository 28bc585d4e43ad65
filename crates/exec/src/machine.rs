//! The dispatch loop: the semantics of every [`Code`], written once and monomorphised for
//! each [`Env`] — the reference interpreter's checked and unchecked modes (`rdx-bpf`) and the
//! region executor that continues deoptimised runs ([`crate::image`]).
//!
//! Semantics follow RFC 9669: 32-bit operations zero-extend, shift amounts are masked,
//! division by zero yields 0 and modulo by zero leaves the dividend; each local call gets a
//! fresh 512-byte stack frame (up to [`MAX_FRAMES`] nested) and preserves `r6`-`r9`. What
//! differs between environments — how memory is reached and checked, how helpers are
//! called, whether register reads are checked — is the [`Env`]'s.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::op::{atomic, Code, Op, RegMasks};

/// Deepest nesting of local calls (frames, including the entry function), as in the kernel.
pub const MAX_FRAMES: usize = 8;
/// Bytes of one eBPF stack frame.
pub const FRAME_BYTES: usize = 512;
const FRAME: u64 = FRAME_BYTES as u64;

/// Registers `r1`-`r5`, clobbered by calls.
const ARG_REGS: u16 = 0b11_1110;
/// Registers `r6`-`r9`, preserved across calls.
const SAVED_REGS: u16 = 0b11_1100_0000;
const R0: u16 = 1;
const R10: u16 = 1 << 10;
/// `r0`..`r10`.
pub const ALL_REGS: u16 = (1 << 11) - 1;

/// Why the dispatch loop stopped a run (what the environment does not decide itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    /// The run executed more instructions than its limit (the limit given).
    #[error("step limit of {0} instructions reached")]
    StepLimit(u64),
    /// A local call would nest deeper than [`MAX_FRAMES`].
    #[error("call depth exceeds {MAX_FRAMES} frames")]
    CallDepth,
    /// Control reached the second slot of an `lddw` (a jump into its middle).
    #[error("execution reached the second slot of an lddw")]
    IntoLddw,
    /// Control ran past the last slot without an `exit`.
    #[error("execution fell off the end of the program")]
    FellOff,
    /// A register was read before anything was written to it (checked environments only).
    #[error("r{0} is read before it holds a value")]
    UninitRegister(u8),
    /// An atomic operation's address is not a multiple of its size.
    #[error("atomic {size}-byte access at {addr:#x} is not naturally aligned")]
    MisalignedAtomic {
        /// The address.
        addr: u64,
        /// The access size in bytes (4 or 8).
        size: usize,
    },
    /// A slot holds a byte that is no [`Code`] (images only).
    #[error("opcode {0} is not an operation")]
    BadOpcode(u8),
}

/// A caller frame: where it continues when its callee returns, and its callee-saved
/// registers at the call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResumeFrame {
    /// Slot after the call instruction.
    pub ret: usize,
    /// `r6`..`r9` at the call.
    pub saved: [u64; 4],
}

/// A helper's result as the loop sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelperReturn {
    /// The helper's result, written to `r0`.
    pub r0: u64,
    /// The run ends now with `r0` (a tail call that ran its target to completion).
    pub stop: bool,
}

/// What a run may touch and call: everything the dispatch loop leaves to its environment.
pub trait Env {
    /// What the environment's operations fail with; the loop returns it unchanged.
    type Error;
    /// Whether register reads are checked against [`Env::masks`] (a read of a register that
    /// holds no value stops the run with [`Fault::UninitRegister`]).
    const CHECK_REGS: bool;

    /// The op at slot `pc`; a slot outside the program is [`Fault::FellOff`] (environments
    /// whose targets were validated may skip the check, see their safety contract).
    fn fetch(&self, pc: usize) -> Result<Op, Self::Error>;
    /// Registers slot `pc` reads and writes (only called with [`Env::CHECK_REGS`]).
    fn masks(&self, pc: usize) -> RegMasks;
    /// The environment's error for a fault of the loop at slot `pc`.
    fn fault(&self, pc: usize, fault: Fault) -> Self::Error;
    /// Reads `N` (1, 2, 4, 8) bytes at `addr`, zero-extended.
    fn load<const N: usize>(&mut self, addr: u64, pc: usize) -> Result<u64, Self::Error>;
    /// Writes the low `N` bytes of `value` at `addr`.
    fn store<const N: usize>(
        &mut self,
        addr: u64,
        value: u64,
        pc: usize,
    ) -> Result<(), Self::Error>;
    /// Whether an atomic `size`-byte operation may touch `addr` (alignment is the loop's).
    fn atomic_target(&mut self, addr: u64, size: usize, pc: usize) -> Result<(), Self::Error>;
    /// Calls the helper of slot `op` (`op.imm` = its id, `op.aux` as the lowering set it).
    /// `budget` is what the run may still execute; a helper may charge it.
    fn call_helper(
        &mut self,
        op: &Op,
        args: [u64; 5],
        budget: &mut u64,
        pc: usize,
    ) -> Result<HelperReturn, Self::Error>;
    /// Calls the helper a `callx` register names.
    fn call_reg(
        &mut self,
        target: u64,
        args: [u64; 5],
        budget: &mut u64,
        pc: usize,
    ) -> Result<HelperReturn, Self::Error>;
    /// The current frame changed (a call or a return): `fp` is its `r10`.
    fn frame(&mut self, fp: u64);

    /// Sees the machine before the instruction at `pc` runs: `r0`..`r10` of the current
    /// frame (the first 11 of `regs`), which of them hold values (`init`, meaningful when [`Env::CHECK_REGS`]) and the
    /// call depth (0 = the entry function). For environments that compare runs with a static
    /// analysis (the verifier's state embedding); the default does nothing and compiles away.
    #[inline(always)]
    fn observe(&mut self, _pc: usize, _regs: &[u64; 16], _init: u16, _depth: usize) {}
}

/// Where a run starts: a fresh run (slot 0, no callers) or the exact state another tier
/// handed over.
#[derive(Clone, Debug)]
pub struct Start<'f> {
    /// Slot the run starts at: 0 for a fresh run, the failed guard's slot for a resumed one.
    pub pc: usize,
    /// `r0`..`r10` of the innermost frame.
    pub regs: [u64; 11],
    /// Registers holding values (checked environments); [`ALL_REGS`] for a resumed run.
    pub init: u16,
    /// Caller frames, outermost first.
    pub frames: &'f [ResumeFrame],
    /// One past the entry frame's highest stack byte: caller `k`'s `r10` is `top - 512 k`.
    pub stack_top: u64,
    /// Instructions the run may execute.
    pub budget: u64,
}

/// Times `may_goto` falls through in one call frame before it jumps (the kernel's
/// `BPF_MAX_LOOPS`): every frame starts with this many, so a loop through it ends. A resumed
/// run starts each frame's count afresh (no tier that hands runs over compiles `may_goto`).
pub const MAY_GOTO_LOOPS: u32 = 8 * 1024 * 1024;

#[derive(Clone, Copy, Default)]
struct Frame {
    ret: usize,
    saved: [u64; 4],
    fp: u64,
    init: u16,
    may_goto: u32,
}

/// Reasons a handed-over state cannot be continued, checked before any of it runs.
///
/// `slots` is the program's length; `is_insn(pc)` says whether a slot is an instruction
/// (not the second slot of an `lddw`); the stack must be `MAX_FRAMES * 512` bytes at
/// `stack`, 16-byte aligned, and `r10` the top of frame `frames.len()`.
pub fn check_resume(
    slots: usize,
    is_insn: impl Fn(usize) -> bool,
    start: &Start<'_>,
    stack: (u64, usize),
) -> Result<(), String> {
    let resumable = |pc: usize| pc < slots && is_insn(pc);
    if stack.1 != MAX_FRAMES * FRAME_BYTES {
        return Err(format!(
            "stack is {} bytes, a resumed run needs {}",
            stack.1,
            MAX_FRAMES * FRAME_BYTES
        ));
    }
    if !stack.0.is_multiple_of(16) {
        return Err("stack is not 16-byte aligned".into());
    }
    if start.frames.len() >= MAX_FRAMES {
        return Err(format!(
            "{} caller frames (at most {})",
            start.frames.len(),
            MAX_FRAMES - 1
        ));
    }
    if !resumable(start.pc) {
        return Err(format!(
            "pc {} is not an instruction of the {slots}-slot program",
            start.pc
        ));
    }
    if let Some((k, f)) = start
        .frames
        .iter()
        .enumerate()
        .find(|(_, f)| !resumable(f.ret))
    {
        return Err(format!(
            "frame {k} returns to {}, not an instruction",
            f.ret
        ));
    }
    let fp = start.stack_top - (start.frames.len() * FRAME_BYTES) as u64;
    if start.stack_top != stack.0 + stack.1 as u64 || start.regs[10] != fp {
        return Err(format!(
            "r10 is {:#x}, but frame {} of this stack starts at {fp:#x}",
            start.regs[10],
            start.frames.len()
        ));
    }
    Ok(())
}

/// Runs from `start` until the entry function exits; returns `r0`.
#[inline(always)]
pub fn run<E: Env>(env: &mut E, start: Start<'_>) -> Result<u64, E::Error> {
    let mut regs = [0u64; 16];
    regs[..11].copy_from_slice(&start.regs);
    let mut init = start.init | R10;
    let mut frames = [Frame::default(); MAX_FRAMES];
    for (k, f) in start.frames.iter().take(MAX_FRAMES - 1).enumerate() {
        frames[k] = Frame {
            ret: f.ret,
            saved: f.saved,
            fp: start.stack_top - k as u64 * FRAME,
            init: ALL_REGS,
            may_goto: MAY_GOTO_LOOPS,
        };
    }
    let mut depth = start.frames.len().min(MAX_FRAMES - 1);
    let mut pc = start.pc;
    // The current frame's `may_goto` count; callers' wait in `frames`.
    let mut may_goto = MAY_GOTO_LOOPS;
    let max_steps = start.budget;
    let mut budget = start.budget;
    env.frame(regs[10]);

    loop {
        let cur = pc;
        let op = env.fetch(cur)?;
        if budget == 0 {
            return Err(env.fault(cur, Fault::StepLimit(max_steps)));
        }
        budget -= 1;
        env.observe(cur, &regs, init, depth);
        if E::CHECK_REGS {
            let m = env.masks(cur);
            if init & m.reads != m.reads {
                let r = (m.reads & !init).trailing_zeros() as u8;
                return Err(env.fault(cur, Fault::UninitRegister(r)));
            }
            init |= m.writes;
        }
        pc += 1;
        if alu(&op, &mut regs) {
            continue;
        }
        if let Some(taken) = jump(&op, &regs) {
            if taken {
                pc = op.aux as usize;
            }
            continue;
        }
        let d = (op.dst & 15) as usize;
        let s = (op.src & 15) as usize;
        let at = |regs: &[u64; 16], r: usize| regs[r].wrapping_add(op.aux as i32 as u64);
        match op.code {
            Code::LdxB => regs[d] = env.load::<1>(at(&regs, s), cur)?,
            Code::LdxH => regs[d] = env.load::<2>(at(&regs, s), cur)?,
            Code::LdxW => regs[d] = env.load::<4>(at(&regs, s), cur)?,
            Code::LdxDW => regs[d] = env.load::<8>(at(&regs, s), cur)?,
            Code::LdxSB => regs[d] = env.load::<1>(at(&regs, s), cur)? as i8 as i64 as u64,
            Code::LdxSH => regs[d] = env.load::<2>(at(&regs, s), cur)? as i16 as i64 as u64,
            Code::LdxSW => regs[d] = env.load::<4>(at(&regs, s), cur)? as i32 as i64 as u64,
            Code::StB => env.store::<1>(at(&regs, d), op.imm, cur)?,
            Code::StH => env.store::<2>(at(&regs, d), op.imm, cur)?,
            Code::StW => env.store::<4>(at(&regs, d), op.imm, cur)?,
            Code::StDW => env.store::<8>(at(&regs, d), op.imm, cur)?,
            Code::StxB => env.store::<1>(at(&regs, d), regs[s], cur)?,
            Code::StxH => env.store::<2>(at(&regs, d), regs[s], cur)?,
            Code::StxW => env.store::<4>(at(&regs, d), regs[s], cur)?,
            Code::StxDW => env.store::<8>(at(&regs, d), regs[s], cur)?,
            Code::AtomicDW | Code::AtomicW => {
                let size = if op.code == Code::AtomicDW { 8 } else { 4 };
                // The offset travels in `imm` because `aux` holds the sub-operation.
                let addr = regs[d].wrapping_add(op.imm);
                env.atomic_target(addr, size, cur)?;
                if !addr.is_multiple_of(size as u64) {
                    return Err(env.fault(cur, Fault::MisalignedAtomic { addr, size }));
                }
                // SAFETY: the address is naturally aligned, and the environment accepted it
                // as writable memory of this run (checked, or proven by the verifier).
                unsafe { atomic_op(addr, size, op.aux, s, &mut regs) };
            }
            Code::LdImm64 => {
                regs[d] = op.imm;
                pc += 1;
            }
            Code::CallHelper | Code::CallX => {
                let args = [regs[1], regs[2], regs[3], regs[4], regs[5]];
                let r = if op.code == Code::CallHelper {
                    env.call_helper(&op, args, &mut budget, cur)?
                } else {
                    env.call_reg(regs[d], args, &mut budget, cur)?
                };
                regs[0] = r.r0;
                init = (init & !ARG_REGS) | R0;
                if r.stop {
                    return Ok(r.r0);
                }
            }
            Code::CallLocal => {
                if depth + 1 >= MAX_FRAMES {
                    return Err(env.fault(cur, Fault::CallDepth));
                }
                frames[depth] = Frame {
                    ret: pc,
                    saved: [regs[6], regs[7], regs[8], regs[9]],
                    fp: regs[10],
                    init,
                    may_goto,
                };
                may_goto = MAY_GOTO_LOOPS;
                depth += 1;
                regs[10] -= FRAME;
                env.frame(regs[10]);
                // The callee sees its arguments and a fresh frame; nothing else.
                init = (init & ARG_REGS) | R10;
                pc = op.aux as usize;
            }
            Code::Exit => {
                if depth == 0 {
                    return Ok(regs[0]);
                }
                depth -= 1;
                let f = frames[depth];
                regs[6..10].copy_from_slice(&f.saved);
                regs[10] = f.fp;
                env.frame(f.fp);
                init = (f.init & (SAVED_REGS | R10)) | R0;
                may_goto = f.may_goto;
                pc = f.ret;
            }
            Code::MayGoto => {
                if may_goto == 0 {
                    pc = op.aux as usize;
                } else {
                    may_goto -= 1;
                }
            }
            Code::LdImm64Hi => return Err(env.fault(cur, Fault::IntoLddw)),
            _ => return Err(env.fault(cur, Fault::FellOff)),
        }
    }
}

/// Applies an ALU or byte-order op to `regs`; `false` if `op` is neither.
#[inline(always)]
pub fn alu(op: &Op, regs: &mut [u64; 16]) -> bool {
    let d = (op.dst & 15) as usize;
    let s = (op.src & 15) as usize;
    let (a, b, i) = (regs[d], regs[s], op.imm);
    regs[d] = match op.code {
        // ---- ALU64 ----
        Code::Add64I => a.wrapping_add(i),
        Code::Sub64I => a.wrapping_sub(i),
        Code::Mul64I => a.wrapping_mul(i),
        Code::Div64I => div64(a, i),
        Code::SDiv64I => sdiv64(a, i),
        Code::Or64I => a | i,
        Code::And64I => a & i,
        Code::Lsh64I => a.wrapping_shl(i as u32),
        Code::Rsh64I => a.wrapping_shr(i as u32),
        Code::Mod64I => mod64(a, i),
        Code::SMod64I => smod64(a, i),
        Code::Xor64I => a ^ i,
        Code::Mov64I => i,
        Code::Arsh64I => (a as i64).wrapping_shr(i as u32) as u64,
        Code::Add64R => a.wrapping_add(b),
        Code::Sub64R => a.wrapping_sub(b),
        Code::Mul64R => a.wrapping_mul(b),
        Code::Div64R => div64(a, b),
        Code::SDiv64R => sdiv64(a, b),
        Code::Or64R => a | b,
        Code::And64R => a & b,
        Code::Lsh64R => a.wrapping_shl(b as u32),
        Code::Rsh64R => a.wrapping_shr(b as u32),
        Code::Mod64R => mod64(a, b),
        Code::SMod64R => smod64(a, b),
        Code::Xor64R => a ^ b,
        Code::Mov64R => b,
        Code::Arsh64R => (a as i64).wrapping_shr(b as u32) as u64,
        // ---- ALU32: operate on the low halves, zero-extend the result ----
        Code::Add32I => (a as u32).wrapping_add(i as u32) as u64,
        Code::Sub32I => (a as u32).wrapping_sub(i as u32) as u64,
        Code::Mul32I => (a as u32).wrapping_mul(i as u32) as u64,
        Code::Div32I => div32(a, i),
        Code::SDiv32I => sdiv32(a, i),
        Code::Or32I => (a as u32 | i as u32) as u64,
        Code::And32I => (a as u32 & i as u32) as u64,
        Code::Lsh32I => (a as u32).wrapping_shl(i as u32) as u64,
        Code::Rsh32I => (a as u32).wrapping_shr(i as u32) as u64,
        Code::Mod32I => mod32(a, i),
        Code::SMod32I => smod32(a, i),
        Code::Xor32I => (a as u32 ^ i as u32) as u64,
        Code::Mov32I => i as u32 as u64,
        Code::Arsh32I => (a as u32 as i32).wrapping_shr(i as u32) as u32 as u64,
        Code::Add32R => (a as u32).wrapping_add(b as u32) as u64,
        Code::Sub32R => (a as u32).wrapping_sub(b as u32) as u64,
        Code::Mul32R => (a as u32).wrapping_mul(b as u32) as u64,
        Code::Div32R => div32(a, b),
        Code::SDiv32R => sdiv32(a, b),
        Code::Or32R => (a as u32 | b as u32) as u64,
        Code::And32R => (a as u32 & b as u32) as u64,
        Code::Lsh32R => (a as u32).wrapping_shl(b as u32) as u64,
        Code::Rsh32R => (a as u32).wrapping_shr(b as u32) as u64,
        Code::Mod32R => mod32(a, b),
        Code::SMod32R => smod32(a, b),
        Code::Xor32R => (a as u32 ^ b as u32) as u64,
        Code::Mov32R => b as u32 as u64,
        Code::Arsh32R => (a as u32 as i32).wrapping_shr(b as u32) as u32 as u64,
        Code::Neg64 => a.wrapping_neg(),
        Code::Neg32 => (a as u32).wrapping_neg() as u64,
        Code::MovSx8To64 => b as i8 as i64 as u64,
        Code::MovSx16To64 => b as i16 as i64 as u64,
        Code::MovSx32To64 => b as i32 as i64 as u64,
        Code::MovSx8To32 => b as i8 as i32 as u32 as u64,
        Code::MovSx16To32 => b as i16 as i32 as u32 as u64,
        Code::Le16 => (a as u16).to_le() as u64,
        Code::Le32 => (a as u32).to_le() as u64,
        Code::Le64 => a.to_le(),
        Code::Be16 => (a as u16).to_be() as u64,
        Code::Be32 => (a as u32).to_be() as u64,
        Code::Be64 => a.to_be(),
        Code::Swap16 => (a as u16).swap_bytes() as u64,
        Code::Swap32 => (a as u32).swap_bytes() as u64,
        Code::Swap64 => a.swap_bytes(),
        _ => return false,
    };
    true
}

/// Whether a jump op is taken (`Some(true)` always for `ja`); `None` if `op` is no jump.
#[inline(always)]
pub fn jump(op: &Op, regs: &[u64; 16]) -> Option<bool> {
    let a = regs[(op.dst & 15) as usize];
    let b = regs[(op.src & 15) as usize];
    let i = op.imm;
    Some(match op.code {
        Code::Ja => true,
        Code::Jeq64I => a == i,
        Code::Jgt64I => a > i,
        Code::Jge64I => a >= i,
        Code::Jset64I => a & i != 0,
        Code::Jne64I => a != i,
        Code::Jsgt64I => (a as i64) > i as i64,
        Code::Jsge64I => (a as i64) >= i as i64,
        Code::Jlt64I => a < i,
        Code::Jle64I => a <= i,
        Code::Jslt64I => (a as i64) < i as i64,
        Code::Jsle64I => (a as i64) <= i as i64,
        Code::Jeq64R => a == b,
        Code::Jgt64R => a > b,
        Code::Jge64R => a >= b,
        Code::Jset64R => a & b != 0,
        Code::Jne64R => a != b,
        Code::Jsgt64R => (a as i64) > b as i64,
        Code::Jsge64R => (a as i64) >= b as i64,
        Code::Jlt64R => a < b,
        Code::Jle64R => a <= b,
        Code::Jslt64R => (a as i64) < b as i64,
        Code::Jsle64R => (a as i64) <= b as i64,
        Code::Jeq32I => a as u32 == i as u32,
        Code::Jgt32I => a as u32 > i as u32,
        Code::Jge32I => a as u32 >= i as u32,
        Code::Jset32I => a as u32 & i as u32 != 0,
        Code::Jne32I => a as u32 != i as u32,
        Code::Jsgt32I => (a as i32) > i as i32,
        Code::Jsge32I => (a as i32) >= i as i32,
        Code::Jlt32I => (a as u32) < i as u32,
        Code::Jle32I => a as u32 <= i as u32,
        Code::Jslt32I => (a as i32) < i as i32,
        Code::Jsle32I => (a as i32) <= i as i32,
        Code::Jeq32R => a as u32 == b as u32,
        Code::Jgt32R => a as u32 > b as u32,
        Code::Jge32R => a as u32 >= b as u32,
        Code::Jset32R => a as u32 & b as u32 != 0,
        Code::Jne32R => a as u32 != b as u32,
        Code::Jsgt32R => (a as i32) > b as i32,
        Code::Jsge32R => (a as i32) >= b as i32,
        Code::Jlt32R => (a as u32) < b as u32,
        Code::Jle32R => a as u32 <= b as u32,
        Code::Jslt32R => (a as i32) < b as i32,
        Code::Jsle32R => (a as i32) <= b as i32,
        _ => return None,
    })
}

/// Reads `N` (1, 2, 4 or 8) bytes at `addr`, zero-extended; unaligned reads are allowed.
///
/// # Safety
/// `[addr, addr + N)` is readable memory.
#[inline(always)]
pub unsafe fn read_raw<const N: usize>(addr: u64) -> u64 {
    // SAFETY: the caller's contract.
    unsafe {
        match N {
            1 => (addr as *const u8).read() as u64,
            2 => (addr as *const u16).read_unaligned() as u64,
            4 => (addr as *const u32).read_unaligned() as u64,
            _ => (addr as *const u64).read_unaligned(),
        }
    }
}

/// Writes the low `N` (1, 2, 4 or 8) bytes of `value` at `addr`, unaligned.
///
/// # Safety
/// `[addr, addr + N)` is writable memory nothing else borrows.
#[inline(always)]
pub unsafe fn write_raw<const N: usize>(addr: u64, value: u64) {
    // SAFETY: the caller's contract.
    unsafe {
        match N {
            1 => (addr as *mut u8).write(value as u8),
            2 => (addr as *mut u16).write_unaligned(value as u16),
            4 => (addr as *mut u32).write_unaligned(value as u32),
            _ => (addr as *mut u64).write_unaligned(value),
        }
    }
}

/// One atomic read-modify-write of sub-operation `sub` on `cell` with operand `v` and
/// `cmpxchg` comparand `expected`: the old value, or for `cmpxchg` the value found.
macro_rules! atomic_rmw {
    ($cell:expr, $sub:expr, $v:expr, $expected:expr) => {{
        let (cell, v) = ($cell, $v);
        match $sub {
            atomic::ADD => cell.fetch_add(v, Ordering::SeqCst),
            atomic::OR => cell.fetch_or(v, Ordering::SeqCst),
            atomic::AND => cell.fetch_and(v, Ordering::SeqCst),
            atomic::XOR => cell.fetch_xor(v, Ordering::SeqCst),
            atomic::XCHG => cell.swap(v, Ordering::SeqCst),
            _ => cell
                .compare_exchange($expected, v, Ordering::SeqCst, Ordering::SeqCst)
                .unwrap_or_else(|x| x),
        }
    }};
}

/// Performs atomic sub-operation `aux` of `size` bytes at `addr` with source register `s`.
///
/// # Safety
/// `addr` is naturally aligned and designates `size` writable bytes nothing accesses
/// non-atomically meanwhile.
#[inline(always)]
unsafe fn atomic_op(addr: u64, size: usize, aux: u32, s: usize, regs: &mut [u64; 16]) {
    let sub = aux & !atomic::FETCH;
    let old = if size == 8 {
        // SAFETY: the caller's contract.
        let cell = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
        atomic_rmw!(cell, sub, regs[s], regs[0])
    } else {
        // SAFETY: the caller's contract.
        let cell = unsafe { AtomicU32::from_ptr(addr as *mut u32) };
        atomic_rmw!(cell, sub, regs[s] as u32, regs[0] as u32) as u64
    };
    if sub == atomic::CMPXCHG {
        regs[0] = old;
    } else if aux & atomic::FETCH != 0 {
        regs[s] = old;
    }
}

#[inline(always)]
fn div64(a: u64, b: u64) -> u64 {
    a.checked_div(b).unwrap_or(0)
}

#[inline(always)]
fn sdiv64(a: u64, b: u64) -> u64 {
    if b == 0 {
        0
    } else {
        (a as i64).wrapping_div(b as i64) as u64
    }
}

#[inline(always)]
fn mod64(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        a % b
    }
}

#[inline(always)]
fn smod64(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        (a as i64).wrapping_rem(b as i64) as u64
    }
}

#[inline(always)]
fn div32(a: u64, b: u64) -> u64 {
    (a as u32).checked_div(b as u32).unwrap_or(0) as u64
}

#[inline(always)]
fn sdiv32(a: u64, b: u64) -> u64 {
    if b as u32 == 0 {
        0
    } else {
        (a as i32).wrapping_div(b as i32) as u32 as u64
    }
}

#[inline(always)]
fn mod32(a: u64, b: u64) -> u64 {
    if b as u32 == 0 {
        a as u32 as u64
    } else {
        ((a as u32) % (b as u32)) as u64
    }
}

#[inline(always)]
fn smod32(a: u64, b: u64) -> u64 {
    if b as u32 == 0 {
        a as u32 as u64
    } else {
        (a as i32).wrapping_rem(b as i32) as u32 as u64
    }
}
