//! Deoptimisation in the host: continuing a run that an elite artifact stopped at a failed
//! guard (`RunStatus::Deopt`) from the exact state it handed over, in the fallback image the
//! control plane wrote beside that code (`docs/deopt.md`, `docs/region.md` "Elite code
//! records").
//!
//! Here: synchronous resumption (`resume`, on the run's own thread before it leaves its
//! epoch). The state transfer of a run that leaves its thread is [`rdx_exec::transfer`],
//! shared with `rdx-deopt`'s in-process tier (so that crate, a control-plane one, does not
//! link the runtime). Elsewhere in this crate: `hook/stopped.rs` sends a stopped run here
//! (or to queued mode), counting it in the thread's `deopts` cell; `hook/queued.rs` is the
//! host's queued mode ([`crate::queued`]); `thread.rs` keeps each thread's `DeoptRunState`.
//! Elsewhere in rdx:
//! `docs/deopt.md`, "Where deopt lives".
//!
//! Nothing here parses, verifies or lowers a program: the image is already lowered and
//! linked for this region, and `rdx_exec` only executes it.

use crate::inner::Inner;
use crate::thread;
use rdx_exec::image::{self, HelperCall, HelperTable, Image};
use rdx_exec::machine::HelperReturn;
use rdx_region::abi::{
    DeoptRunState, EntryFn, FallbackLocator, RunState, RunStatus, FALLBACK_MAGIC,
};
use rdx_region::helpers::HelperId;
use rdx_region::layout::SectionId;
use std::sync::atomic::AtomicU64;

/// The fallback image of the elite code whose entry is `entry`, if its record has one.
fn image_of(inner: &Inner, entry: u64) -> Option<Image<'static>> {
    Image::parse(image_bytes(inner, entry)?).ok()
}

/// The bytes of the fallback image of the elite code whose entry is `entry`, if its record
/// has one. Valid while the caller is inside the epoch of a run of that code (the record
/// cannot be reclaimed meanwhile); `'static` must not escape that.
pub(crate) fn image_bytes(inner: &Inner, entry: u64) -> Option<&'static [u8]> {
    let code = inner.info.section(SectionId::Code);
    let (lo, hi) = (inner.base + code.offset, inner.base + code.end());
    let at = entry.checked_sub(FallbackLocator::BYTES)?;
    if at < lo || entry > hi {
        return None;
    }
    // SAFETY: 16 bytes inside the code arena, which is mapped readable for the runtime's
    // lifetime; the control plane wrote them before publishing the code they precede.
    let locator = FallbackLocator::from_bytes(unsafe { &*(at as *const [u8; 16]) });
    if locator.magic != FALLBACK_MAGIC {
        return None;
    }
    let start = entry.checked_add(locator.image_offset as u64)?;
    let end = start.checked_add(locator.image_len as u64)?;
    if end > hi {
        return None;
    }
    // SAFETY: inside the readable code arena (checked). The record cannot be reclaimed
    // while this thread is inside the epoch of the run that executed its code, and the
    // image is only used within it (`'static` does not escape `resume` or the copy the
    // queued path makes).
    Some(unsafe { std::slice::from_raw_parts(start as *const u8, locator.image_len as usize) })
}

/// The host's helper table, plus what the hook path does around a tail call: a successful
/// `bpf_tail_call` ran its target to the end of the run and recorded its result, which ends
/// the resumed run; a target that stopped the run (budget spent, a bad helper, a failed
/// guard) fails it.
struct HostHelpers<'t> {
    table: HelperTable<'t>,
}

impl HelperCall for HostHelpers<'_> {
    #[inline]
    fn call(&mut self, id: u64, args: [u64; 5], budget: &mut u64) -> Option<HelperReturn> {
        if id != HelperId::TAIL_CALL.get() as u64 {
            return self.table.call(id, args, budget);
        }
        // The tail-call helper runs its target on the run state it finds through this
        // thread (the resumed run's own in synchronous mode, the worker's for a queued run),
        // whose status says how the target ended: it must start `Ok` (a resumed run's state
        // says `Deopt`, which the target's status checks would take for a stop) and with
        // the budget this run has left.
        let run = thread::current()?.current_run().cast::<RunState>();
        // SAFETY: this thread's run state for the run in progress; nothing else uses it
        // until the helper returns.
        let saved = unsafe { (*run).status };
        // SAFETY: as above.
        unsafe {
            (*run).status = RunStatus::Ok as u32;
            (*run).budget = *budget;
        }
        let r = self.table.call(id, args, budget);
        // SAFETY: as above; the helper returned.
        let (status, left) = unsafe { ((*run).status, (*run).budget) };
        // SAFETY: as above.
        unsafe { (*run).status = saved };
        *budget = left;
        let ts = thread::current()?;
        let r = r?;
        if status == RunStatus::TailCalled as u32 {
            let r0 = ts.tail_result.take().unwrap_or(r.r0);
            return Some(HelperReturn { r0, stop: true });
        }
        if status != RunStatus::Ok as u32 {
            // The target stopped the run: it cannot go on, and fails.
            ts.tail_deopt = false;
            ts.tail_result = None;
            return None;
        }
        Some(r)
    }
}

/// Continues the run that called `entry` with `state` (and ended with `RunStatus::Deopt`) in
/// its fallback image;
/// returns its final `r0`, or `None` if it cannot be finished: the code has no image (no
/// locator before its entry, or one that does not describe an image inside the code
/// arena), the image or the state is refused, or the resumed part stops (budget spent, a
/// missing helper).
///
/// Called from the hook's stopped path, before the run leaves its epoch.
pub(crate) fn resume(inner: &Inner, entry: EntryFn, state: *mut RunState) -> Option<u64> {
    let image = image_of(inner, entry as usize as u64)?;
    // SAFETY: the image was written by the control plane beside the elite code that just
    // ran (same record, same version, published together), lowered from the same verified
    // program and linked for this region; `state` is this run's `DeoptRunState`, which
    // the elite code filled at its failed guard and nothing else uses meanwhile (helpers
    // reach it through this thread's state, as during native code).
    unsafe { resume_in(inner, image, state.cast::<DeoptRunState>()) }
}

/// Continues a queued run (on the fallback worker's thread, inside its epoch) in `image`,
/// a copy of its version's fallback image; `state` is the captured state whose pointers
/// designate the run's own copies of its stack, context and packet.
pub(crate) fn resume_owned(inner: &Inner, image: &[u8], state: *mut DeoptRunState) -> Option<u64> {
    let image = Image::parse(image).ok()?;
    // SAFETY: the image is a copy of the one written beside the elite code that stopped
    // (taken while that run was inside its epoch); `state` is that run's state, copied and
    // rebased, owned by the caller and used by nothing else meanwhile.
    unsafe { resume_in(inner, image, state) }
}

/// # Safety
/// `image` belongs to the elite code that stopped with `*state`, which nothing else uses
/// meanwhile except the helpers the run calls.
unsafe fn resume_in(inner: &Inner, image: Image<'_>, state: *mut DeoptRunState) -> Option<u64> {
    let table = inner.info.section(SectionId::HelperTable);
    // SAFETY: the helper table section of this runtime's mapping: `helper_capacity` 8-byte
    // words, written by the host at export time (atomically read here).
    let entries = unsafe {
        std::slice::from_raw_parts(
            (inner.base + table.offset) as *const AtomicU64,
            inner.info.helper_capacity as usize,
        )
    };
    let helpers = HostHelpers {
        table: HelperTable {
            entries,
            run: state.cast::<RunState>(),
        },
    };
    // SAFETY: the caller's contract; the helpers are this host's.
    unsafe { image::resume(image, state, helpers) }.ok()
}
