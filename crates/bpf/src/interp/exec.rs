//! The interpreter's environments for `rdx_exec`'s dispatch loop, in checked and unchecked
//! mode: the run's memory regions and context model, and the in-process helpers.

use rdx_exec::machine::{self, Env, Fault, HelperReturn, Start, ALL_REGS};
use rdx_exec::op::{Op, RegMasks};

use super::context::ContextModel;
use super::memory::{Access, Regions};
use super::{Input, Observation, Resume, RunError, RunErrorKind, Vm, MAX_FRAMES};
use crate::helpers::{HelperCtx, HelperImpl};
use crate::isa::{Reg, Size, STACK_SIZE};
use rdx_region::helpers::HelperId;

const STACK_BYTES: usize = MAX_FRAMES * STACK_SIZE;
const FRAME: u64 = STACK_SIZE as u64;

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

/// One run's view of the world: the VM, its memory regions and its context model.
struct Interp<'v, 'm, 'o, const CHECKED: bool> {
    vm: &'v Vm,
    regions: Regions<'v>,
    model: Option<&'m mut dyn ContextModel>,
    /// Sees every instruction of an observed run (checked mode only).
    observer: Option<&'o mut dyn FnMut(&Observation<'_>)>,
}

impl<const CHECKED: bool> Interp<'_, '_, '_, CHECKED> {
    /// Whether an access of `n` bytes at `addr` goes to the context model (`Ok(true)`) or
    /// to plain memory, checking it in checked mode.
    #[inline(always)]
    fn route(&self, addr: u64, n: usize, write: bool, pc: usize) -> Result<bool, RunError> {
        if !CHECKED {
            return Ok(self.regions.is_context(addr));
        }
        match self.regions.access(addr, n as u64, write) {
            Access::Plain => Ok(false),
            Access::ReadOnly if !write => Ok(false),
            Access::Context => Ok(true),
            Access::ReadOnly => Err(fail(pc, RunErrorKind::ReadOnly { addr, size: n })),
            Access::Denied => Err(fail(
                pc,
                RunErrorKind::OutOfBounds {
                    addr,
                    size: n,
                    write,
                },
            )),
        }
    }

    fn call(
        &mut self,
        f: HelperImpl,
        id: i64,
        args: [u64; 5],
        pc: usize,
    ) -> Result<HelperReturn, RunError> {
        let mut cx = HelperCtx {
            regions: &self.regions,
            checked: CHECKED,
            context: self
                .model
                .as_mut()
                .map(|m| &mut **m as &mut dyn ContextModel),
            env: &self.vm.env,
            stop: false,
        };
        let r0 = f(&mut cx, args).map_err(|error| fail(pc, RunErrorKind::Helper { id, error }))?;
        Ok(HelperReturn { r0, stop: cx.stop })
    }
}

impl<const CHECKED: bool> Env for Interp<'_, '_, '_, CHECKED> {
    type Error = RunError;
    const CHECK_REGS: bool = CHECKED;

    #[inline(always)]
    fn fetch(&self, pc: usize) -> Result<Op, RunError> {
        // SAFETY: `pc` is always an index of `ops`: a run starts at 0 or at a resume slot
        // validated to be `< len`, jump and call targets were validated to be `< len` by
        // `compile`, fall-through moves by one slot (two after an `lddw`, whose second slot
        // `compile` checked exists), and return addresses are a call's pc + 1 (or validated
        // resume frames). The largest value any of these reach is `len`, the `FellOff`
        // sentinel.
        Ok(unsafe { *self.vm.ops.get_unchecked(pc) })
    }

    #[inline(always)]
    fn masks(&self, pc: usize) -> RegMasks {
        self.vm.masks[pc]
    }

    fn fault(&self, pc: usize, fault: Fault) -> RunError {
        fail(
            pc,
            match fault {
                Fault::StepLimit(n) => RunErrorKind::StepLimit(n),
                Fault::CallDepth => RunErrorKind::CallDepth,
                Fault::IntoLddw => RunErrorKind::IntoLddw,
                Fault::UninitRegister(r) => RunErrorKind::UninitRegister(Reg(r)),
                Fault::MisalignedAtomic { addr, size } => {
                    RunErrorKind::MisalignedAtomic { addr, size }
                }
                Fault::FellOff | Fault::BadOpcode(_) => RunErrorKind::FellOff,
            },
        )
    }

    #[inline(always)]
    fn load<const N: usize>(&mut self, addr: u64, pc: usize) -> Result<u64, RunError> {
        if self.route(addr, N, false, pc)? {
            let off = (addr - self.regions.ctx.0) as usize;
            return match self.model.as_deref() {
                Some(m) => m.load(off, size_of(N)).map_err(|e| fail(pc, e.into())),
                None => unreachable!("context region without a model"),
            };
        }
        // SAFETY: checked mode verified that `[addr, addr + N)` lies in a region of this run
        // (stack, input, packet, map value); in unchecked mode the caller guaranteed a
        // verified program. Unaligned reads are allowed.
        Ok(unsafe { machine::read_raw::<N>(addr) })
    }

    #[inline(always)]
    fn store<const N: usize>(&mut self, addr: u64, value: u64, pc: usize) -> Result<(), RunError> {
        if self.route(addr, N, true, pc)? {
            let off = (addr - self.regions.ctx.0) as usize;
            return match self.model.as_deref_mut() {
                Some(m) => m
                    .store(off, size_of(N), value)
                    .map_err(|e| fail(pc, e.into())),
                None => unreachable!("context region without a model"),
            };
        }
        // SAFETY: as for loads.
        unsafe { machine::write_raw::<N>(addr, value) };
        Ok(())
    }

    #[inline(always)]
    fn atomic_target(&mut self, addr: u64, size: usize, pc: usize) -> Result<(), RunError> {
        let on_context = if CHECKED {
            self.route(addr, size, true, pc)?
        } else {
            self.regions.is_context(addr)
        };
        if on_context {
            return Err(fail(pc, RunErrorKind::AtomicOnContext { addr }));
        }
        Ok(())
    }

    #[inline(always)]
    fn call_helper(
        &mut self,
        op: &Op,
        args: [u64; 5],
        _budget: &mut u64,
        pc: usize,
    ) -> Result<HelperReturn, RunError> {
        let f = self.vm.helper_table[op.aux as usize];
        self.call(f, op.imm as i64, args, pc)
    }

    fn call_reg(
        &mut self,
        target: u64,
        args: [u64; 5],
        _budget: &mut u64,
        pc: usize,
    ) -> Result<HelperReturn, RunError> {
        let f = i32::try_from(target)
            .ok()
            .and_then(HelperId::from_imm)
            .and_then(|id| self.vm.helpers.get(id))
            .ok_or(fail(pc, RunErrorKind::BadCallx(target)))?;
        self.call(f, target as i64, args, pc)
    }

    #[inline(always)]
    fn frame(&mut self, fp: u64) {
        self.regions.stack_lo = fp - FRAME;
    }

    #[inline(always)]
    fn observe(&mut self, pc: usize, regs: &[u64; 16], init: u16, depth: usize) {
        if !CHECKED {
            return;
        }
        let Some(observer) = self.observer.as_mut() else {
            return;
        };
        let stack_top = self.regions.stack_hi;
        // SAFETY: `[stack_hi - STACK_BYTES, stack_hi)` is the run's stack allocation (owned
        // by `run_with` or lent by a resume), alive for the whole run. Nothing writes it while
        // the observer holds this shared view: the dispatch loop waits for `observe` to return.
        let stack = unsafe {
            std::slice::from_raw_parts((stack_top - STACK_BYTES as u64) as *const u8, STACK_BYTES)
        };
        let mut r = [0u64; 11];
        r.copy_from_slice(&regs[..11]);
        observer(&Observation {
            pc,
            regs: r,
            init,
            depth,
            stack_top,
            stack,
        });
    }
}

pub(super) fn run<const CHECKED: bool>(
    vm: &Vm,
    input: Input<'_>,
    resume: Option<Resume<'_>>,
) -> Result<u64, RunError> {
    run_with::<CHECKED>(vm, input, resume, None)
}

pub(super) fn run_with<const CHECKED: bool>(
    vm: &Vm,
    input: Input<'_>,
    mut resume: Option<Resume<'_>>,
    observer: Option<&mut dyn FnMut(&Observation<'_>)>,
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

    let mut regs = [0u64; 11];
    let mut init: u16 = 0;
    let mut env = Interp::<CHECKED> {
        vm,
        regions: Regions {
            stack_lo: stack_hi - FRAME,
            stack_hi,
            input: (0, 0),
            ctx: (0, 0),
            packet: None,
            maps: &vm.maps,
        },
        model: None,
        observer,
    };
    match input {
        Input::Empty => init |= 0b110,
        Input::Bytes(bytes) => {
            regs[1] = bytes.as_mut_ptr() as u64;
            regs[2] = bytes.len() as u64;
            env.regions.input = (regs[1], regs[2]);
            init |= 0b110;
        }
        Input::Context(c) => {
            regs[1] = c.anchor() as u64;
            env.regions.ctx = (regs[1], c.size() as u64);
            env.regions.packet = c.packet();
            init |= 0b10;
            env.model = Some(c);
        }
    }
    regs[10] = stack_hi;
    let mut start = Start {
        pc: 0,
        regs,
        init,
        frames: &[],
        stack_top: stack_hi,
        budget: vm.config.max_steps,
    };
    if let Some(r) = resume {
        // Continue a run another tier started: its registers, its callers and the slot it
        // stopped at. Every register counts as written: the tier that handed the state over
        // ran a verified program, and what it wrote is exactly what is here.
        start.regs = r.regs;
        start.init = ALL_REGS;
        start.frames = r.frames;
        start.pc = r.pc;
        if r.packet.is_some() {
            env.regions.packet = r.packet;
        }
        if let Some(m) = r.max_steps {
            start.budget = m;
        }
    }
    machine::run(&mut env, start)
}
