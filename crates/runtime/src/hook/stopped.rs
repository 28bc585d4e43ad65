//! Runs that did not end normally: budget spent, a failed helper, or an elite artifact's
//! failed guard. Out of line and cold; the fast path only tests the run status.

use super::{Hook, Prepared};
use crate::thread::ThreadState;
use rdx_region::abi::RunStatus;
use std::sync::atomic::Ordering;

impl Hook<'_> {
    /// A run whose status is not `Ok`, called before the run leaves its epoch: counted as a
    /// failure, the hook's default returned. A deoptimisation is counted in this thread's
    /// `deopts` cell as well. The runtime does not continue such a run in the generic tier
    /// yet (`docs/deopt.md`, "In the runtime"), so the control plane does not publish elite
    /// builds to hosts.
    #[cold]
    #[inline(never)]
    pub(super) fn stopped(
        &self,
        ts: *mut ThreadState,
        _run: &Prepared,
        status: u32,
        _r0: u64,
    ) -> u64 {
        if status == RunStatus::Deopt as u32 {
            // SAFETY: this thread's live state; no other reference to it is live.
            let c = unsafe { &*ts }.counters(self.index);
            // Only this thread writes its cell: a plain load and store.
            c.deopts
                .store(c.deopts.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
        self.slot.failures.fetch_add(1, Ordering::Relaxed);
        self.slot.default_ret.load(Ordering::Relaxed)
    }
}
