//! Synchronous mode: the thread whose elite run stopped at a guard continues the same run in
//! the interpreter, on the same stack memory, and gets the final `r0`.

use rdx_bpf::interp::{Input, PacketRegion, Resume, ResumeError, ResumeFrame, Vm};
use rdx_region::abi::{DeoptRunState, RunStatus, DEOPT_MAX_FRAMES};

/// The caller frames a deoptimised run recorded, outermost first (on the stack: the
/// handover allocates nothing).
fn frames(state: &DeoptRunState) -> Result<([ResumeFrame; DEOPT_MAX_FRAMES], usize), ResumeError> {
    let depth = state.depth as usize;
    if depth >= DEOPT_MAX_FRAMES {
        return Err(ResumeError::BadState(format!(
            "depth {depth} (at most {})",
            DEOPT_MAX_FRAMES - 1
        )));
    }
    let mut out = [ResumeFrame::default(); DEOPT_MAX_FRAMES];
    for (o, f) in out.iter_mut().zip(&state.frames[..depth]) {
        *o = ResumeFrame {
            ret: f.ret_pc as usize,
            saved: f.saved,
        };
    }
    Ok((out, depth))
}

fn check_status(state: &DeoptRunState) -> Result<(), ResumeError> {
    if state.run.status != RunStatus::Deopt as u32 {
        return Err(ResumeError::BadState(format!(
            "run status is {}, not Deopt",
            state.run.status
        )));
    }
    Ok(())
}

/// The interpreter's view of a deoptimised state; `metered` hands the budget left over.
fn view<'s>(
    state: &'s mut DeoptRunState,
    frames: &'s [ResumeFrame],
    packet: Option<PacketRegion>,
    metered: bool,
) -> Resume<'s> {
    Resume {
        pc: state.pc as usize,
        regs: state.regs,
        frames,
        max_steps: metered.then_some(state.run.budget),
        stack: &mut state.stack[..],
        packet,
    }
}

/// Continues a deoptimised run in the interpreter with every access checked. `ctx` is the
/// context memory the elite code ran on, `packet` the packet it points into. On success the
/// state's status is back to `Ok`.
pub fn resume_checked(
    vm: &Vm,
    state: &mut DeoptRunState,
    ctx: &mut [u8],
    packet: Option<PacketRegion>,
    metered: bool,
) -> Result<u64, ResumeError> {
    check_status(state)?;
    let (frames, depth) = frames(state)?;
    let r0 = vm.resume_checked(
        Input::Bytes(ctx),
        view(state, &frames[..depth], packet, metered),
    )?;
    state.run.status = RunStatus::Ok as u32;
    Ok(r0)
}

/// [`resume_checked`] without bounds checks: the production path for verified programs.
///
/// # Safety
/// `vm` runs the same verified program the elite artifact was compiled from, and `state` is
/// what that artifact produced on `ctx` (so every pointer in it is one the program may use).
pub unsafe fn resume_unchecked(
    vm: &Vm,
    state: &mut DeoptRunState,
    ctx: &mut [u8],
    packet: Option<PacketRegion>,
    metered: bool,
) -> Result<u64, ResumeError> {
    check_status(state)?;
    let (frames, depth) = frames(state)?;
    // SAFETY: forwarded to the caller.
    let r0 = unsafe {
        vm.resume_unchecked(
            Input::Bytes(ctx),
            view(state, &frames[..depth], packet, metered),
        )?
    };
    state.run.status = RunStatus::Ok as u32;
    Ok(r0)
}
