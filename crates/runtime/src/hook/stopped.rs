//! Runs that did not end normally: budget spent, a failed helper, or an elite artifact's
//! failed guard. Out of line and cold; the fast path only tests the run status.

use super::{Hook, Prepared};
use crate::thread::ThreadState;
use rdx_region::abi::RunStatus;
use std::sync::atomic::Ordering;

impl Hook<'_> {
    /// A run whose status is not `Ok`, called before the run leaves its epoch (so the
    /// version that ran, its code and its fallback image, cannot be reclaimed meanwhile).
    ///
    /// A deoptimisation (an elite artifact's failed guard) is counted in this thread's
    /// `deopts` cell; in queued mode (`queued.rs`) its state goes to the hook's fallback
    /// worker and the hook returns the deferred verdict, otherwise it continues
    /// synchronously in the fallback image the control plane wrote beside that code
    /// (`crate::deopt`) and the hook returns the run's final `r0`. Any
    /// other status, and a deoptimised run that cannot be finished (no image, budget spent
    /// in the resumed part, or the guard was in a program reached through a tail call,
    /// whose image the hook's entry does not lead to), is a failure: counted, the hook's
    /// default returned.
    #[cold]
    #[inline(never)]
    pub(super) fn stopped(
        &self,
        ts: *mut ThreadState,
        run: &Prepared,
        status: u32,
        _r0: u64,
    ) -> u64 {
        if status == RunStatus::Deopt as u32 {
            {
                // SAFETY: this thread's live state; the reference ends before the resumed
                // run, whose helpers reach the same state through the thread-local pointer.
                let c = unsafe { &*ts }.counters(self.index);
                // Only this thread writes its cell: a plain load and store.
                c.deopts
                    .store(c.deopts.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
            // SAFETY: as above.
            let through_tail_call = std::mem::take(&mut unsafe { &mut *ts }.tail_deopt);
            if !through_tail_call {
                // Queued mode: the run goes to the hook's fallback worker, the hook
                // answers its deferred verdict.
                if let Some(verdict) = self.defer(ts, run) {
                    return verdict;
                }
                if let Some(r0) = crate::deopt::resume(self.inner, run.entry, run.state) {
                    return r0;
                }
            }
        }
        self.slot.failures.fetch_add(1, Ordering::Relaxed);
        self.slot.default_ret.load(Ordering::Relaxed)
    }
}
