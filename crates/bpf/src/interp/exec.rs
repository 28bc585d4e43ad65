//! The dispatch loop, monomorphised for checked and unchecked mode.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::context::ContextModel;
use super::memory::{Access, Regions};
use super::ops::{atomic, Code};
use super::{Input, Resume, RunError, RunErrorKind, Vm, MAX_FRAMES};
use crate::helpers::HelperCtx;
use crate::isa::{Reg, Size, STACK_SIZE};

const STACK_BYTES: usize = MAX_FRAMES * STACK_SIZE;
const FRAME: u64 = STACK_SIZE as u64;

/// Registers `r1`-`r5`, clobbered by calls.
const ARG_REGS: u16 = 0b11_1110;
/// Registers `r6`-`r9`, preserved across calls.
const SAVED_REGS: u16 = 0b11_1100_0000;
const R0: u16 = 1;
const R10: u16 = 1 << 10;

#[derive(Clone, Copy, Default)]
struct Frame {
    ret: usize,
    saved: [u64; 4],
    fp: u64,
    init: u16,
}

/// Stack memory for every frame, 16-byte aligned so that aligned stack slots stay aligned for
/// atomics.
#[repr(C, align(16))]
struct Stack([u8; STACK_BYTES]);

fn fail(pc: usize, kind: RunErrorKind) -> RunError {
    RunError { pc, kind }
}

fn size_of(n: usize) -> Size {
    match n {
        1 => Size::B,
        2 => Size::H,
        4 => Size::W,
        _ => Size::DW,
    }
}

pub(super) fn run<const CHECKED: bool>(
    vm: &Vm,
    input: Input<'_>,
    mut resume: Option<Resume<'_>>,
) -> Result<u64, RunError> {
    let mut owned: Option<Box<Stack>> = None;
    // From here on the stack is only accessed through addresses derived from this pointer.
    let stack_base = match resume.as_mut() {
        // Validated by the caller: exactly STACK_BYTES, 16-byte aligned.
        Some(r) => r.stack.as_mut_ptr() as u64,
        None => owned
            .insert(Box::new(Stack([0; STACK_BYTES])))
            .0
            .as_mut_ptr() as u64,
    };
    let stack_hi = stack_base + STACK_BYTES as u64;

    let mut regs = [0u64; 16];
    let mut init: u16 = R10;
    let mut regions = Regions {
        stack_lo: stack_hi - FRAME,
        stack_hi,
        input: (0, 0),
        ctx: (0, 0),
        packet: None,
        maps: &vm.maps,
    };
    let mut model: Option<&mut dyn ContextModel> = None;
    match input {
        Input::Empty => init |= 0b110,
        Input::Bytes(bytes) => {
            regs[1] = bytes.as_mut_ptr() as u64;
            regs[2] = bytes.len() as u64;
            regions.input = (regs[1], regs[2]);
            init |= 0b110;
        }
        Input::Context(c) => {
            regs[1] = c.anchor() as u64;
            regions.ctx = (regs[1], c.size() as u64);
            regions.packet = c.packet();
            init |= 0b10;
            model = Some(c);
        }
    }
    regs[10] = stack_hi;

    let ops = &vm.ops[..];
    let masks = &vm.masks[..];
    let mut max_steps = vm.config.max_steps;
    let mut steps: u64 = 0;
    let mut frames = [Frame::default(); MAX_FRAMES];
    let mut depth = 0usize;
    let mut pc = 0usize;
    if let Some(r) = resume {
        // Continue a run another tier started: its registers, its callers and the slot it
        // stopped at. Every register counts as written: the tier that handed the state over
        // ran a verified program, and what it wrote is exactly what is here.
        const ALL: u16 = (1 << 11) - 1;
        regs[..11].copy_from_slice(&r.regs);
        init = ALL;
        for (k, f) in r.frames.iter().enumerate() {
            frames[k] = Frame {
                ret: f.ret,
                saved: f.saved,
                fp: stack_hi - k as u64 * FRAME,
                init: ALL,
            };
        }
        depth = r.frames.len();
        regions.stack_lo = regs[10] - FRAME;
        if r.packet.is_some() {
            regions.packet = r.packet;
        }
        if let Some(m) = r.max_steps {
            max_steps = m;
        }
        pc = r.pc;
    }

    macro_rules! load {
        ($ty:ty, $addr:expr, $cur:expr) => {{
            let addr: u64 = $addr;
            const N: usize = std::mem::size_of::<$ty>();
            let to_model = if CHECKED {
                match regions.access(addr, N as u64, false) {
                    Access::Plain | Access::ReadOnly => false,
                    Access::Context => true,
                    Access::Denied => {
                        return Err(fail(
                            $cur,
                            RunErrorKind::OutOfBounds {
                                addr,
                                size: N,
                                write: false,
                            },
                        ))
                    }
                }
            } else {
                regions.is_context(addr)
            };
            if to_model {
                let off = (addr - regions.ctx.0) as usize;
                match model.as_deref() {
                    Some(m) => m.load(off, size_of(N)).map_err(|e| fail($cur, e.into()))?,
                    None => unreachable!("context region without a model"),
                }
            } else {
                // SAFETY: checked mode verified that `[addr, addr + N)` lies in a region of
                // this run (stack, input, packet, map value); in unchecked mode the caller
                // guaranteed a verified program. Unaligned reads are allowed.
                (unsafe { (addr as *const $ty).read_unaligned() }) as u64
            }
        }};
    }

    macro_rules! store {
        ($ty:ty, $addr:expr, $value:expr, $cur:expr) => {{
            let addr: u64 = $addr;
            let value: u64 = $value;
            const N: usize = std::mem::size_of::<$ty>();
            let to_model = if CHECKED {
                match regions.access(addr, N as u64, true) {
                    Access::Plain => false,
                    Access::Context => true,
                    Access::ReadOnly => {
                        return Err(fail($cur, RunErrorKind::ReadOnly { addr, size: N }))
                    }
                    Access::Denied => {
                        return Err(fail(
                            $cur,
                            RunErrorKind::OutOfBounds {
                                addr,
                                size: N,
                                write: true,
                            },
                        ))
                    }
                }
            } else {
                regions.is_context(addr)
            };
            if to_model {
                let off = (addr - regions.ctx.0) as usize;
                match model.as_deref_mut() {
                    Some(m) => m
                        .store(off, size_of(N), value)
                        .map_err(|e| fail($cur, e.into()))?,
                    None => unreachable!("context region without a model"),
                }
            } else {
                // SAFETY: as for loads.
                unsafe { (addr as *mut $ty).write_unaligned(value as $ty) };
            }
        }};
    }

    macro_rules! atomic_addr {
        ($addr:expr, $n:expr, $cur:expr) => {{
            let addr: u64 = $addr;
            if CHECKED {
                match regions.access(addr, $n, true) {
                    Access::Plain => {}
                    Access::Context => {
                        return Err(fail($cur, RunErrorKind::AtomicOnContext { addr }))
                    }
                    Access::ReadOnly => {
                        return Err(fail(
                            $cur,
                            RunErrorKind::ReadOnly {
                                addr,
                                size: $n as usize,
                            },
                        ))
                    }
                    Access::Denied => {
                        return Err(fail(
                            $cur,
                            RunErrorKind::OutOfBounds {
                                addr,
                                size: $n as usize,
                                write: true,
                            },
                        ))
                    }
                }
            } else if regions.is_context(addr) {
                return Err(fail($cur, RunErrorKind::AtomicOnContext { addr }));
            }
            if addr % $n != 0 {
                return Err(fail(
                    $cur,
                    RunErrorKind::MisalignedAtomic {
                        addr,
                        size: $n as usize,
                    },
                ));
            }
            addr
        }};
    }

    macro_rules! jump_if {
        ($cond:expr, $op:expr) => {
            if $cond {
                pc = $op.aux as usize;
            }
        };
    }

    loop {
        let cur = pc;
        // SAFETY: `pc` is always an index of `ops`: it starts at 0, jump and call targets were
        // validated to be `< len` by `compile`, fall-through moves by one slot (two after an
        // `lddw`, whose second slot `compile` checked exists), and return addresses are a call's
        // pc + 1. The largest value any of these reach is `len`, the `FellOff` sentinel.
        let op = unsafe { *ops.get_unchecked(cur) };
        steps += 1;
        if steps > max_steps {
            return Err(fail(cur, RunErrorKind::StepLimit(max_steps)));
        }
        if CHECKED {
            let m = masks[cur];
            if init & m.reads != m.reads {
                let r = (m.reads & !init).trailing_zeros() as u8;
                return Err(fail(cur, RunErrorKind::UninitRegister(Reg(r))));
            }
            init |= m.writes;
        }
        let d = (op.dst & 15) as usize;
        let s = (op.src & 15) as usize;
        pc += 1;
        match op.code {
            // ---- ALU64 ----
            Code::Add64I => regs[d] = regs[d].wrapping_add(op.imm),
            Code::Sub64I => regs[d] = regs[d].wrapping_sub(op.imm),
            Code::Mul64I => regs[d] = regs[d].wrapping_mul(op.imm),
            Code::Div64I => regs[d] = div64(regs[d], op.imm),
            Code::SDiv64I => regs[d] = sdiv64(regs[d], op.imm),
            Code::Or64I => regs[d] |= op.imm,
            Code::And64I => regs[d] &= op.imm,
            Code::Lsh64I => regs[d] = regs[d].wrapping_shl(op.imm as u32),
            Code::Rsh64I => regs[d] = regs[d].wrapping_shr(op.imm as u32),
            Code::Mod64I => regs[d] = mod64(regs[d], op.imm),
            Code::SMod64I => regs[d] = smod64(regs[d], op.imm),
            Code::Xor64I => regs[d] ^= op.imm,
            Code::Mov64I => regs[d] = op.imm,
            Code::Arsh64I => regs[d] = (regs[d] as i64).wrapping_shr(op.imm as u32) as u64,
            Code::Add64R => regs[d] = regs[d].wrapping_add(regs[s]),
            Code::Sub64R => regs[d] = regs[d].wrapping_sub(regs[s]),
            Code::Mul64R => regs[d] = regs[d].wrapping_mul(regs[s]),
            Code::Div64R => regs[d] = div64(regs[d], regs[s]),
            Code::SDiv64R => regs[d] = sdiv64(regs[d], regs[s]),
            Code::Or64R => regs[d] |= regs[s],
            Code::And64R => regs[d] &= regs[s],
            Code::Lsh64R => regs[d] = regs[d].wrapping_shl(regs[s] as u32),
            Code::Rsh64R => regs[d] = regs[d].wrapping_shr(regs[s] as u32),
            Code::Mod64R => regs[d] = mod64(regs[d], regs[s]),
            Code::SMod64R => regs[d] = smod64(regs[d], regs[s]),
            Code::Xor64R => regs[d] ^= regs[s],
            Code::Mov64R => regs[d] = regs[s],
            Code::Arsh64R => regs[d] = (regs[d] as i64).wrapping_shr(regs[s] as u32) as u64,
            // ---- ALU32: operate on the low halves, zero-extend the result ----
            Code::Add32I => regs[d] = (regs[d] as u32).wrapping_add(op.imm as u32) as u64,
            Code::Sub32I => regs[d] = (regs[d] as u32).wrapping_sub(op.imm as u32) as u64,
            Code::Mul32I => regs[d] = (regs[d] as u32).wrapping_mul(op.imm as u32) as u64,
            Code::Div32I => regs[d] = div32(regs[d], op.imm),
            Code::SDiv32I => regs[d] = sdiv32(regs[d], op.imm),
            Code::Or32I => regs[d] = (regs[d] as u32 | op.imm as u32) as u64,
            Code::And32I => regs[d] = (regs[d] as u32 & op.imm as u32) as u64,
            Code::Lsh32I => regs[d] = (regs[d] as u32).wrapping_shl(op.imm as u32) as u64,
            Code::Rsh32I => regs[d] = (regs[d] as u32).wrapping_shr(op.imm as u32) as u64,
            Code::Mod32I => regs[d] = mod32(regs[d], op.imm),
            Code::SMod32I => regs[d] = smod32(regs[d], op.imm),
            Code::Xor32I => regs[d] = (regs[d] as u32 ^ op.imm as u32) as u64,
            Code::Mov32I => regs[d] = op.imm as u32 as u64,
            Code::Arsh32I => {
                regs[d] = (regs[d] as u32 as i32).wrapping_shr(op.imm as u32) as u32 as u64
            }
            Code::Add32R => regs[d] = (regs[d] as u32).wrapping_add(regs[s] as u32) as u64,
            Code::Sub32R => regs[d] = (regs[d] as u32).wrapping_sub(regs[s] as u32) as u64,
            Code::Mul32R => regs[d] = (regs[d] as u32).wrapping_mul(regs[s] as u32) as u64,
            Code::Div32R => regs[d] = div32(regs[d], regs[s]),
            Code::SDiv32R => regs[d] = sdiv32(regs[d], regs[s]),
            Code::Or32R => regs[d] = (regs[d] as u32 | regs[s] as u32) as u64,
            Code::And32R => regs[d] = (regs[d] as u32 & regs[s] as u32) as u64,
            Code::Lsh32R => regs[d] = (regs[d] as u32).wrapping_shl(regs[s] as u32) as u64,
            Code::Rsh32R => regs[d] = (regs[d] as u32).wrapping_shr(regs[s] as u32) as u64,
            Code::Mod32R => regs[d] = mod32(regs[d], regs[s]),
            Code::SMod32R => regs[d] = smod32(regs[d], regs[s]),
            Code::Xor32R => regs[d] = (regs[d] as u32 ^ regs[s] as u32) as u64,
            Code::Mov32R => regs[d] = regs[s] as u32 as u64,
            Code::Arsh32R => {
                regs[d] = (regs[d] as u32 as i32).wrapping_shr(regs[s] as u32) as u32 as u64
            }
            Code::Neg64 => regs[d] = regs[d].wrapping_neg(),
            Code::Neg32 => regs[d] = (regs[d] as u32).wrapping_neg() as u64,
            Code::MovSx8To64 => regs[d] = regs[s] as i8 as i64 as u64,
            Code::MovSx16To64 => regs[d] = regs[s] as i16 as i64 as u64,
            Code::MovSx32To64 => regs[d] = regs[s] as i32 as i64 as u64,
            Code::MovSx8To32 => regs[d] = regs[s] as i8 as i32 as u32 as u64,
            Code::MovSx16To32 => regs[d] = regs[s] as i16 as i32 as u32 as u64,
            Code::Le16 => regs[d] = (regs[d] as u16).to_le() as u64,
            Code::Le32 => regs[d] = (regs[d] as u32).to_le() as u64,
            Code::Le64 => regs[d] = regs[d].to_le(),
            Code::Be16 => regs[d] = (regs[d] as u16).to_be() as u64,
            Code::Be32 => regs[d] = (regs[d] as u32).to_be() as u64,
            Code::Be64 => regs[d] = regs[d].to_be(),
            Code::Swap16 => regs[d] = (regs[d] as u16).swap_bytes() as u64,
            Code::Swap32 => regs[d] = (regs[d] as u32).swap_bytes() as u64,
            Code::Swap64 => regs[d] = regs[d].swap_bytes(),
            // ---- jumps ----
            Code::Ja => pc = op.aux as usize,
            Code::Jeq64I => jump_if!(regs[d] == op.imm, op),
            Code::Jgt64I => jump_if!(regs[d] > op.imm, op),
            Code::Jge64I => jump_if!(regs[d] >= op.imm, op),
            Code::Jset64I => jump_if!(regs[d] & op.imm != 0, op),
            Code::Jne64I => jump_if!(regs[d] != op.imm, op),
            Code::Jsgt64I => jump_if!((regs[d] as i64) > op.imm as i64, op),
            Code::Jsge64I => jump_if!((regs[d] as i64) >= op.imm as i64, op),
            Code::Jlt64I => jump_if!(regs[d] < op.imm, op),
            Code::Jle64I => jump_if!(regs[d] <= op.imm, op),
            Code::Jslt64I => jump_if!((regs[d] as i64) < op.imm as i64, op),
            Code::Jsle64I => jump_if!((regs[d] as i64) <= op.imm as i64, op),
            Code::Jeq64R => jump_if!(regs[d] == regs[s], op),
            Code::Jgt64R => jump_if!(regs[d] > regs[s], op),
            Code::Jge64R => jump_if!(regs[d] >= regs[s], op),
            Code::Jset64R => jump_if!(regs[d] & regs[s] != 0, op),
            Code::Jne64R => jump_if!(regs[d] != regs[s], op),
            Code::Jsgt64R => jump_if!((regs[d] as i64) > regs[s] as i64, op),
            Code::Jsge64R => jump_if!((regs[d] as i64) >= regs[s] as i64, op),
            Code::Jlt64R => jump_if!(regs[d] < regs[s], op),
            Code::Jle64R => jump_if!(regs[d] <= regs[s], op),
            Code::Jslt64R => jump_if!((regs[d] as i64) < regs[s] as i64, op),
            Code::Jsle64R => jump_if!((regs[d] as i64) <= regs[s] as i64, op),
            Code::Jeq32I => jump_if!(regs[d] as u32 == op.imm as u32, op),
            Code::Jgt32I => jump_if!(regs[d] as u32 > op.imm as u32, op),
            Code::Jge32I => jump_if!(regs[d] as u32 >= op.imm as u32, op),
            Code::Jset32I => jump_if!(regs[d] as u32 & op.imm as u32 != 0, op),
            Code::Jne32I => jump_if!(regs[d] as u32 != op.imm as u32, op),
            Code::Jsgt32I => jump_if!((regs[d] as i32) > op.imm as i32, op),
            Code::Jsge32I => jump_if!((regs[d] as i32) >= op.imm as i32, op),
            Code::Jlt32I => jump_if!((regs[d] as u32) < op.imm as u32, op),
            Code::Jle32I => jump_if!(regs[d] as u32 <= op.imm as u32, op),
            Code::Jslt32I => jump_if!((regs[d] as i32) < op.imm as i32, op),
            Code::Jsle32I => jump_if!((regs[d] as i32) <= op.imm as i32, op),
            Code::Jeq32R => jump_if!(regs[d] as u32 == regs[s] as u32, op),
            Code::Jgt32R => jump_if!(regs[d] as u32 > regs[s] as u32, op),
            Code::Jge32R => jump_if!(regs[d] as u32 >= regs[s] as u32, op),
            Code::Jset32R => jump_if!(regs[d] as u32 & regs[s] as u32 != 0, op),
            Code::Jne32R => jump_if!(regs[d] as u32 != regs[s] as u32, op),
            Code::Jsgt32R => jump_if!((regs[d] as i32) > regs[s] as i32, op),
            Code::Jsge32R => jump_if!((regs[d] as i32) >= regs[s] as i32, op),
            Code::Jlt32R => jump_if!((regs[d] as u32) < regs[s] as u32, op),
            Code::Jle32R => jump_if!(regs[d] as u32 <= regs[s] as u32, op),
            Code::Jslt32R => jump_if!((regs[d] as i32) < regs[s] as i32, op),
            Code::Jsle32R => jump_if!((regs[d] as i32) <= regs[s] as i32, op),
            // ---- memory ----
            Code::LdxB => regs[d] = load!(u8, regs[s].wrapping_add(op.aux as i32 as u64), cur),
            Code::LdxH => regs[d] = load!(u16, regs[s].wrapping_add(op.aux as i32 as u64), cur),
            Code::LdxW => regs[d] = load!(u32, regs[s].wrapping_add(op.aux as i32 as u64), cur),
            Code::LdxDW => regs[d] = load!(u64, regs[s].wrapping_add(op.aux as i32 as u64), cur),
            Code::LdxSB => {
                let v = load!(u8, regs[s].wrapping_add(op.aux as i32 as u64), cur);
                regs[d] = v as u8 as i8 as i64 as u64;
            }
            Code::LdxSH => {
                let v = load!(u16, regs[s].wrapping_add(op.aux as i32 as u64), cur);
                regs[d] = v as u16 as i16 as i64 as u64;
            }
            Code::LdxSW => {
                let v = load!(u32, regs[s].wrapping_add(op.aux as i32 as u64), cur);
                regs[d] = v as u32 as i32 as i64 as u64;
            }
            Code::StB => store!(u8, regs[d].wrapping_add(op.aux as i32 as u64), op.imm, cur),
            Code::StH => store!(u16, regs[d].wrapping_add(op.aux as i32 as u64), op.imm, cur),
            Code::StW => store!(u32, regs[d].wrapping_add(op.aux as i32 as u64), op.imm, cur),
            Code::StDW => store!(u64, regs[d].wrapping_add(op.aux as i32 as u64), op.imm, cur),
            Code::StxB => store!(u8, regs[d].wrapping_add(op.aux as i32 as u64), regs[s], cur),
            Code::StxH => store!(
                u16,
                regs[d].wrapping_add(op.aux as i32 as u64),
                regs[s],
                cur
            ),
            Code::StxW => store!(
                u32,
                regs[d].wrapping_add(op.aux as i32 as u64),
                regs[s],
                cur
            ),
            Code::StxDW => {
                store!(
                    u64,
                    regs[d].wrapping_add(op.aux as i32 as u64),
                    regs[s],
                    cur
                )
            }
            Code::AtomicDW => {
                let addr = atomic_addr!(regs[d].wrapping_add(op.imm), 8u64, cur);
                // SAFETY: the address is 8-aligned and (checked mode) inside a writable region
                // of this run, or (unchecked) proven so by the verifier.
                let cell = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
                let v = regs[s];
                let old = match op.aux & !atomic::FETCH {
                    atomic::ADD => cell.fetch_add(v, Ordering::SeqCst),
                    atomic::OR => cell.fetch_or(v, Ordering::SeqCst),
                    atomic::AND => cell.fetch_and(v, Ordering::SeqCst),
                    atomic::XOR => cell.fetch_xor(v, Ordering::SeqCst),
                    atomic::XCHG => cell.swap(v, Ordering::SeqCst),
                    _ => {
                        let r =
                            cell.compare_exchange(regs[0], v, Ordering::SeqCst, Ordering::SeqCst);
                        regs[0] = r.unwrap_or_else(|x| x);
                        continue;
                    }
                };
                if op.aux & atomic::FETCH != 0 {
                    regs[s] = old;
                }
            }
            Code::AtomicW => {
                let addr = atomic_addr!(regs[d].wrapping_add(op.imm), 4u64, cur);
                // SAFETY: as for the 64-bit form, with 4-byte alignment.
                let cell = unsafe { AtomicU32::from_ptr(addr as *mut u32) };
                let v = regs[s] as u32;
                let old = match op.aux & !atomic::FETCH {
                    atomic::ADD => cell.fetch_add(v, Ordering::SeqCst),
                    atomic::OR => cell.fetch_or(v, Ordering::SeqCst),
                    atomic::AND => cell.fetch_and(v, Ordering::SeqCst),
                    atomic::XOR => cell.fetch_xor(v, Ordering::SeqCst),
                    atomic::XCHG => cell.swap(v, Ordering::SeqCst),
                    _ => {
                        let r = cell.compare_exchange(
                            regs[0] as u32,
                            v,
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                        );
                        regs[0] = r.unwrap_or_else(|x| x) as u64;
                        continue;
                    }
                };
                if op.aux & atomic::FETCH != 0 {
                    regs[s] = old as u64;
                }
            }
            Code::LdImm64 => {
                regs[d] = op.imm;
                pc += 1;
            }
            // ---- calls ----
            Code::CallHelper => {
                let f = vm.helper_table[op.aux as usize];
                let id = op.imm as i64;
                let mut cx = HelperCtx {
                    regions: &regions,
                    checked: CHECKED,
                    context: model.as_mut().map(|m| &mut **m as &mut dyn ContextModel),
                    env: &vm.env,
                    stop: false,
                };
                let r = f(&mut cx, [regs[1], regs[2], regs[3], regs[4], regs[5]])
                    .map_err(|error| fail(cur, RunErrorKind::Helper { id, error }))?;
                let stop = cx.stop;
                regs[0] = r;
                init = (init & !ARG_REGS) | R0;
                if stop {
                    return Ok(r);
                }
            }
            Code::CallX => {
                let target = regs[d];
                let f = i32::try_from(target)
                    .ok()
                    .and_then(|id| vm.helpers.get(id))
                    .ok_or(fail(cur, RunErrorKind::BadCallx(target)))?;
                let mut cx = HelperCtx {
                    regions: &regions,
                    checked: CHECKED,
                    context: model.as_mut().map(|m| &mut **m as &mut dyn ContextModel),
                    env: &vm.env,
                    stop: false,
                };
                let r =
                    f(&mut cx, [regs[1], regs[2], regs[3], regs[4], regs[5]]).map_err(|error| {
                        fail(
                            cur,
                            RunErrorKind::Helper {
                                id: target as i64,
                                error,
                            },
                        )
                    })?;
                let stop = cx.stop;
                regs[0] = r;
                init = (init & !ARG_REGS) | R0;
                if stop {
                    return Ok(r);
                }
            }
            Code::CallLocal => {
                if depth + 1 >= MAX_FRAMES {
                    return Err(fail(cur, RunErrorKind::CallDepth));
                }
                frames[depth] = Frame {
                    ret: pc,
                    saved: [regs[6], regs[7], regs[8], regs[9]],
                    fp: regs[10],
                    init,
                };
                depth += 1;
                regs[10] -= FRAME;
                regions.stack_lo = regs[10] - FRAME;
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
                regions.stack_lo = f.fp - FRAME;
                init = (f.init & (SAVED_REGS | R10)) | R0;
                pc = f.ret;
            }
            Code::LdImm64Hi => return Err(fail(cur, RunErrorKind::IntoLddw)),
            Code::FellOff => return Err(fail(cur, RunErrorKind::FellOff)),
        }
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
