//! One elite entry point with its fallback: what a host calls per request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rdx_bpf::interp::{PacketRegion, ResumeError, Vm};
use rdx_region::abi::{DeoptRunState, EntryFn, RunStatus};

use crate::queue::{ContextLayout, DeferredRun, FallbackQueue, QueueError};

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The fast path ran to the end: `r0`.
    Fast(u64),
    /// A guard failed and the interpreter finished the run on this thread: `r0`.
    Resumed(u64),
    /// A guard failed and the run went to the fallback queue under this ticket.
    Deferred(u64),
}

impl Outcome {
    /// The final result, unless the run was deferred.
    pub fn result(self) -> Option<u64> {
        match self {
            Outcome::Fast(r) | Outcome::Resumed(r) => Some(r),
            Outcome::Deferred(_) => None,
        }
    }
}

/// Why a request could not be completed.
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    /// Elite code stopped abnormally for another reason than a failed guard: the status.
    #[error("elite code stopped with status {0} (not a deoptimisation)")]
    Stopped(u32),
    /// Finishing the deoptimised run in the interpreter failed.
    #[error(transparent)]
    Resume(#[from] ResumeError),
    /// The deoptimised run could not be queued for a fallback worker.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// An elite artifact's entry point, the interpreter holding the same program (the generic
/// tier), and the counts a re-profiling decision needs.
pub struct EliteTier {
    entry: EntryFn,
    vm: Arc<Vm>,
    metered: bool,
    checked: bool,
    runs: AtomicU64,
    deopts: AtomicU64,
}

impl EliteTier {
    /// # Safety
    /// `entry` is linked, executable code of an elite artifact (`FLAG_DEOPT`) compiled from
    /// the program `vm` holds, linked against the maps `vm` uses; `metered` says whether it
    /// was compiled with a budget. It stays valid while this value lives.
    pub unsafe fn new(entry: EntryFn, vm: Arc<Vm>, metered: bool) -> EliteTier {
        EliteTier {
            entry,
            vm,
            metered,
            checked: true,
            runs: AtomicU64::new(0),
            deopts: AtomicU64::new(0),
        }
    }

    /// Resume without bounds checks (the production setting for verified programs; the
    /// default checks every access of the resumed part).
    ///
    /// # Safety
    /// The program was accepted by the verifier for this hook's context.
    pub unsafe fn unchecked(mut self) -> EliteTier {
        self.checked = false;
        self
    }

    /// The interpreter that finishes deoptimised runs.
    pub fn vm(&self) -> &Vm {
        &self.vm
    }

    /// Runs so far (approximate when threads share the tier), and how many of them
    /// deoptimised (exact).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.runs.load(Ordering::Relaxed),
            self.deopts.load(Ordering::Relaxed),
        )
    }

    /// Calls the elite code; `Ok(None)` when a guard failed and `state` holds the exact
    /// state.
    ///
    /// # Safety
    /// `ctx` is a context of the shape the program was verified for.
    unsafe fn fast(
        &self,
        state: &mut DeoptRunState,
        ctx: &mut [u8],
        budget: u64,
    ) -> Result<Option<u64>, TierError> {
        state.reset(budget);
        // A plain load and store, not a locked add: the run count is a statistic for the
        // re-profiling decision, and threads sharing a tier may lose a few increments rather
        // than pay an atomic read-modify-write on every fast-path run.
        self.runs
            .store(self.runs.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        // SAFETY: the constructor's contract; the run pointer is a DeoptRunState as elite
        // artifacts require.
        let r0 = unsafe { (self.entry)(ctx.as_mut_ptr(), (state as *mut DeoptRunState).cast()) };
        match state.run.status {
            s if s == RunStatus::Ok as u32 => Ok(Some(r0)),
            s if s == RunStatus::Deopt as u32 => {
                self.deopts.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
            s => Err(TierError::Stopped(s)),
        }
    }

    /// Synchronous mode: on a failed guard the interpreter finishes the run on this thread.
    ///
    /// # Safety
    /// `ctx` is a context of the shape the program was verified for, `packet` the packet it
    /// points into.
    pub unsafe fn run_sync(
        &self,
        state: &mut DeoptRunState,
        ctx: &mut [u8],
        packet: Option<PacketRegion>,
        budget: u64,
    ) -> Result<Outcome, TierError> {
        // SAFETY: forwarded.
        if let Some(r0) = unsafe { self.fast(state, ctx, budget)? } {
            return Ok(Outcome::Fast(r0));
        }
        let r0 = if self.checked {
            crate::resume::resume_checked(&self.vm, state, ctx, packet, self.metered)?
        } else {
            // SAFETY: `unchecked`'s contract: a verified program, and the state is what its
            // elite code produced on this context.
            unsafe { crate::resume::resume_unchecked(&self.vm, state, ctx, packet, self.metered)? }
        };
        Ok(Outcome::Resumed(r0))
    }

    /// Queued mode: on a failed guard the state and copies of the context and packet go to
    /// `queue`, and the request is answered "deferred" at once. When the queue has no free
    /// packet slot, this thread finishes the run itself ([`Outcome::Resumed`]).
    ///
    /// # Safety
    /// As [`EliteTier::run_sync`]; `layout` describes `ctx`.
    pub unsafe fn run_queued(
        &self,
        state: &mut DeoptRunState,
        ctx: &mut [u8],
        layout: &ContextLayout,
        queue: &FallbackQueue,
        budget: u64,
    ) -> Result<Outcome, TierError> {
        // SAFETY: forwarded.
        if let Some(r0) = unsafe { self.fast(state, ctx, budget)? } {
            return Ok(Outcome::Fast(r0));
        }
        // SAFETY: ctx is the run's context; its packet fields point at the live packet.
        let captured = unsafe {
            DeferredRun::capture(state, ctx, layout, self.vm.maps(), queue, self.metered)
        };
        match captured {
            Ok(run) => {
                state.run.status = RunStatus::Ok as u32;
                Ok(Outcome::Deferred(queue.push(run)?))
            }
            Err(QueueError::Full(_)) => {
                // Backpressure: every packet slot is in flight, so this thread finishes the
                // run itself. The fast path's side effects already happened; running the
                // request again instead would repeat them.
                let packet = crate::queue::packet_region(layout, ctx);
                let r0 = if self.checked {
                    crate::resume::resume_checked(&self.vm, state, ctx, packet, self.metered)?
                } else {
                    // SAFETY: as in run_sync.
                    unsafe {
                        crate::resume::resume_unchecked(&self.vm, state, ctx, packet, self.metered)?
                    }
                };
                Ok(Outcome::Resumed(r0))
            }
            Err(e) => Err(e.into()),
        }
    }
}
