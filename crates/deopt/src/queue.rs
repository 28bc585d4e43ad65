//! Queued mode with the interpreter as the generic tier: a deoptimised run leaves the hook's
//! thread. Its exact state, with copies of
//! the context and the packet it points into, goes to a [`FallbackQueue`]; the hook answers
//! "deferred" at once and the fast path keeps serving, while a fallback worker resumes the
//! run in the interpreter.
//!
//! Pointers are rebased onto the copies: a 64-bit word of the state — a register of the
//! innermost frame, a callee-saved register of a caller frame, or an 8-byte-aligned word of a
//! live stack frame — whose value lies in the old stack (its end included: the entry frame's
//! `r10`), the old context, or the 64 KiB from the old packet's start (packet pointers may
//! point past `data_end` before a bounds check fails, and must keep comparing the same way
//! against it) without lying in a map value, is moved by the distance between the old and
//! the new copy; the context's packet fields ([`ContextLayout`]) are rewritten to
//! point into the packet copy. Map pointers stay as they are: maps are shared with the worker.
//! Verified programs spill pointers only as aligned 8-byte words, so the rule finds every
//! pointer; a scalar that happens to equal an address in those ranges would be moved too,
//! which a verified program cannot observe except by comparing it with a pointer.

//!
//! The state transfer itself (copying, rebasing, the packet arena below 4 GiB, the queue) is
//! [`rdx_exec::transfer`], which the host's queued mode (`rdx-runtime`) uses too; this
//! module adds the interpreter side: map values of a [`MapSet`] are the shared memory that
//! is never rebased, and the worker resumes in a [`Vm`].

use std::sync::Arc;

use rdx_bpf::interp::{PacketRegion, ResumeError, Vm};
use rdx_bpf::maps::MapSet;
use rdx_exec::transfer::{capture, Captured, PacketArena};
pub use rdx_exec::transfer::{ContextLayout, PacketField, PacketRole, QueueError};
use rdx_region::abi::DeoptRunState;

/// The packet region a context of `layout` points at (from its start, or metadata, to its
/// end), for resuming on the original context; `None` without packet fields.
pub fn packet_region(layout: &ContextLayout, ctx: &[u8]) -> Option<PacketRegion> {
    if layout.packet_fields.is_empty() {
        return None;
    }
    let (lo, end) = layout.packet_bounds(ctx).ok()?;
    Some(PacketRegion {
        addr: lo,
        len: end - lo,
        writable: true,
    })
}

/// A deoptimised run waiting for the fallback worker: its state and its own copies of the
/// context and packet, every pointer rebased onto them.
pub struct DeferredRun {
    captured: Captured,
    metered: bool,
}

/// A finished deferred run.
#[derive(Debug)]
pub struct Completed {
    /// The ticket [`FallbackQueue::push`] returned for the run.
    pub ticket: u64,
    /// The run's final `r0`, or why it could not be finished.
    pub result: Result<u64, ResumeError>,
    /// The context and packet after the run (what a host would forward or answer with).
    pub ctx: Vec<u8>,
    /// The packet after the run.
    pub packet: Vec<u8>,
}

impl DeferredRun {
    /// Copies a deoptimised state with the context and packet it points into.
    ///
    /// # Safety
    /// `ctx` is the context the elite run used; the packet fields of `layout` in it point
    /// at readable packet memory (as when the hook was called).
    pub unsafe fn capture(
        state: &DeoptRunState,
        ctx: &[u8],
        layout: &ContextLayout,
        maps: &MapSet,
        queue: &FallbackQueue,
        metered: bool,
    ) -> Result<DeferredRun, QueueError> {
        // SAFETY: forwarded.
        let captured = unsafe {
            capture(state, ctx, layout, &queue.arena, |v| {
                maps.value_access(v, 1).is_some()
            })
        }?;
        Ok(DeferredRun { captured, metered })
    }

    /// Finishes the run in the interpreter (checked mode) on the copies.
    pub fn resume(mut self, vm: &Vm, ticket: u64) -> Completed {
        let (addr, len) = self.captured.packet_region();
        let packet = PacketRegion {
            addr,
            len: len as u64,
            writable: true,
        };
        let (state, ctx) = self.captured.parts_mut();
        let result = crate::resume::resume_checked(vm, state, ctx, Some(packet), self.metered);
        Completed {
            ticket,
            result,
            ctx: self.captured.ctx().to_vec(),
            packet: self.captured.packet().to_vec(),
        }
    }
}

/// Deoptimised runs waiting for a fallback worker, and the packet arena their copies live
/// in.
pub struct FallbackQueue {
    runs: rdx_exec::transfer::FallbackQueue<DeferredRun>,
    arena: Arc<PacketArena>,
}

impl FallbackQueue {
    /// A queue whose packet copies are at most `packet_slot` bytes, `capacity` of them in
    /// flight at once.
    pub fn new(packet_slot: usize, capacity: usize) -> Result<FallbackQueue, QueueError> {
        Ok(FallbackQueue {
            runs: rdx_exec::transfer::FallbackQueue::new(capacity),
            arena: Arc::new(PacketArena::new(packet_slot, capacity)?),
        })
    }

    /// Hands a run to the workers; returns its ticket.
    pub fn push(&self, run: DeferredRun) -> Result<u64, QueueError> {
        self.runs.push(run)
    }

    /// Runs waiting.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Whether no run is waiting.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// No more runs: workers finish what is queued and return.
    pub fn close(&self) {
        self.runs.close()
    }

    /// Takes the next run, waiting for one; `None` once the queue is closed and drained.
    pub fn pop(&self) -> Option<(u64, DeferredRun)> {
        self.runs.pop()
    }

    /// A fallback worker: resumes queued runs in `vm` until the queue is closed and empty,
    /// handing each result to `done`.
    pub fn work(&self, vm: &Vm, mut done: impl FnMut(Completed)) {
        while let Some((ticket, run)) = self.pop() {
            done(run.resume(vm, ticket));
        }
    }
}
