//! Per-thread state: the thread slot this thread claimed in a runtime's region (its epoch
//! word and counters), the active words it last synchronised with, and what helpers need
//! during a run.

use crate::runtime::Inner;
use rdx_region::abi::RunState;
use rdx_region::layout::{HookCounters, ThreadSlot};
use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) struct ThreadState {
    pub runtime_id: u64,
    pub inner: Arc<Inner>,
    pub slot_index: u32,
    pub slot: *const ThreadSlot,
    /// Nesting depth of hook runs on this thread (a host function may run another hook).
    pub depth: u32,
    /// Per hook: the active word this thread last ran after a coherence step.
    pub seen: Box<[u64]>,
    /// The run in progress (for tail calls), or null.
    pub run: *mut RunState,
    /// A tail call's result, taken by the hook when the entry returns.
    pub tail_result: Option<u64>,
    pub tail_depth: u32,
    pub rng: u64,
    /// Map headers this thread decoded recently (see `helpers::maps::map_at`).
    pub maps: Vec<CachedMap>,
}

/// A decoded map header and the first 64 header bytes it was decoded from, compared on
/// every use so that a map re-created at the same address is decoded again.
pub(crate) struct CachedMap {
    pub addr: u64,
    pub header: [u64; 8],
    pub map: rdx_transport::xstate::MapRef,
}

impl ThreadState {
    #[inline]
    pub fn slot(&self) -> &ThreadSlot {
        // SAFETY: points into the mapping that `inner` keeps alive.
        unsafe { &*self.slot }
    }

    #[inline]
    pub fn counters(&self, hook: u32) -> &HookCounters {
        self.inner.counters(self.slot_index, hook)
    }

    #[inline]
    pub fn enter(&mut self) {
        if self.depth == 0 {
            let e = self.slot().epoch.load(Ordering::Relaxed);
            // Relaxed plus a compiler fence: the control plane's remote barrier provides
            // the hardware ordering (see docs/region.md, "Epochs").
            self.slot().epoch.store(e | 1, Ordering::Relaxed);
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
        }
        self.depth += 1;
    }

    #[inline]
    pub fn leave(&mut self) {
        self.depth -= 1;
        if self.depth == 0 {
            let e = self.slot().epoch.load(Ordering::Relaxed);
            self.slot().epoch.store(e + 1, Ordering::Release);
        }
    }
}

impl Drop for ThreadState {
    fn drop(&mut self) {
        let s = self.slot();
        let e = s.epoch.load(Ordering::Relaxed);
        if e % 2 == 1 {
            s.epoch.store(e + 1, Ordering::Release);
        }
        s.owner.store(0, Ordering::Release);
        CURRENT.with(|c| {
            if std::ptr::eq(c.get(), self) {
                c.set(std::ptr::null_mut());
            }
        });
    }
}

thread_local! {
    static CURRENT: Cell<*mut ThreadState> = const { Cell::new(std::ptr::null_mut()) };
    // Boxed: CURRENT points into these, so they must not move when the Vec grows.
    #[allow(clippy::vec_box)]
    static STATES: RefCell<Vec<Box<ThreadState>>> = const { RefCell::new(Vec::new()) };
}

/// This thread's state for `inner`, claiming a thread slot on first use. `None` when every
/// slot is taken (the hook then behaves as empty and counts an error) or the thread is
/// exiting.
#[inline]
pub(crate) fn state_for(inner: &Arc<Inner>) -> Option<*mut ThreadState> {
    let cur = CURRENT.with(|c| c.get());
    // SAFETY: CURRENT is null or points to a live Box in STATES (cleared when it drops).
    if !cur.is_null() && unsafe { (*cur).runtime_id } == inner.id {
        return Some(cur);
    }
    state_slow(inner)
}

#[cold]
fn state_slow(inner: &Arc<Inner>) -> Option<*mut ThreadState> {
    STATES
        .try_with(|states| {
            let mut states = states.try_borrow_mut().ok()?;
            let p = match states.iter_mut().find(|s| s.runtime_id == inner.id) {
                Some(s) => &mut **s as *mut ThreadState,
                None => {
                    let s = claim(inner)?;
                    states.push(Box::new(s));
                    &mut **states.last_mut().expect("just pushed") as *mut ThreadState
                }
            };
            CURRENT.with(|c| c.set(p));
            Some(p)
        })
        .ok()
        .flatten()
}

fn claim(inner: &Arc<Inner>) -> Option<ThreadState> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u64;
    for i in 0..inner.info.thread_slots {
        let s = inner.thread_slot(i);
        if s.owner
            .compare_exchange(0, tid + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return Some(ThreadState {
                runtime_id: inner.id,
                inner: inner.clone(),
                slot_index: i,
                slot: s as *const ThreadSlot,
                depth: 0,
                seen: vec![0; inner.info.max_hooks as usize].into_boxed_slice(),
                run: std::ptr::null_mut(),
                tail_result: None,
                tail_depth: 0,
                rng: (tid << 32)
                    ^ inner.id
                    ^ 0x9e37_79b9_7f4a_7c15
                    ^ (s as *const ThreadSlot as u64),
                maps: Vec::with_capacity(8),
            });
        }
    }
    None
}

/// The state of the run in progress on this thread (for helpers), if any.
#[inline]
pub(crate) fn current() -> Option<&'static mut ThreadState> {
    let cur = CURRENT.with(|c| c.get());
    // SAFETY: CURRENT is null or points to a live Box in STATES; helpers only run on the
    // thread that owns it, inside a hook run, and never hold two of these at once.
    unsafe { cur.as_mut() }
}

/// Makes `p` the current state again (after a nested run of another runtime).
#[inline]
pub(crate) fn set_current(p: *mut ThreadState) {
    CURRENT.with(|c| c.set(p));
}

#[inline]
pub(crate) fn current_ptr() -> *mut ThreadState {
    CURRENT.with(|c| c.get())
}
