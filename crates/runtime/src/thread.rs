//! Per-thread state: the thread slot this thread claimed in a runtime's region (its epoch
//! word and counters), the active words it last synchronised with, and what helpers need
//! during a run.

use crate::inner::Inner;
use rdx_region::abi::{DeoptRunState, EntryFn, RunState};
use rdx_region::layout::{HookCounters, ThreadSlot};
use rdx_transport::xstate::MapRef;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// `repr(C)`: the fields the hook path touches come first, followed by the run state whose
/// leading budget and status words it writes (two cache lines from the aligned start); the fields only
/// helpers and slow paths use come after the run state's 4.5 KiB.
#[repr(C, align(64))]
pub(crate) struct ThreadState {
    pub runtime_id: u64,
    /// This thread's slot in the region. Its epoch word is odd while the thread runs
    /// extension code (a nested run, a host function running another hook, finds it odd
    /// already). Only this thread writes that word, so it also reads it back instead of
    /// keeping a private copy: a load costs less than the extra stores a copy needs.
    pub slot: *const ThreadSlot,
    /// This thread's row of [`HookCounters`] in the region (`max_hooks` cells).
    pub counters: *const HookCounters,
    /// Per hook: the active word this thread last ran after a coherence step, and the
    /// entry point it validated for it (so a run of the same word skips the checks).
    pub seen: Box<[(u64, EntryFn)]>,
    /// A tail call's result, taken by the hook when the entry returns.
    pub tail_result: Option<u64>,
    /// A program reached through a tail call stopped at a failed guard: the hook's fallback
    /// image is not that program's, so the run cannot continue and fails instead.
    pub tail_deopt: bool,
    /// The entry the hook's fast path (the outermost run, never a nested one) is running,
    /// for its rare ends: stored here rather than kept in a callee-saved register across the
    /// entry call, which every run would save and restore.
    pub fast_entry: EntryFn,
    /// The hook handle whose fast path is running, for the same rare ends: only the thread
    /// state then stays in a register across the entry call.
    pub fast_hook: *const (),
    /// The run state the outermost run of this thread passes to native code (helpers reach
    /// it here during a run, for tail calls). A [`DeoptRunState`] because any published
    /// entry may be an elite artifact, which keeps its eBPF stack there and, at a failed
    /// guard, the exact eBPF state (`docs/deopt.md`).
    pub own_run: DeoptRunState,
    pub inner: Arc<Inner>,
    pub slot_index: u32,
    pub tail_depth: u32,
    pub rng: u64,
    /// Map headers this thread decoded, direct-mapped by address (see
    /// `helpers::maps::map_at`), valid while the header's `xstate_generation` equals
    /// `maps_generation`.
    pub maps: Box<[Option<(u64, MapRef)>; MAP_CACHE]>,
    pub maps_generation: u64,
    /// The region header's `xstate_generation` word.
    pub xstate_generation: *const AtomicU64,
    /// Run states of nested runs (a host function running a hook of this runtime from
    /// inside a run), one per nesting level beyond the outermost, allocated on first use.
    /// A nested run cannot share [`ThreadState::own_run`]: elite code keeps its eBPF stack
    /// frames in its run state, and the outer run's frames are live meanwhile.
    pub nested_runs: Vec<Box<DeoptRunState>>,
    /// Nested runs in progress (0 outside a nested run).
    pub nesting: usize,
}

/// Entries of a thread's decoded-map cache.
pub(crate) const MAP_CACHE: usize = 16;

impl ThreadState {
    /// The run state of the run in progress: the innermost nested run's, or the outermost
    /// run's.
    #[inline]
    pub fn current_run(&mut self) -> *mut DeoptRunState {
        match self.nesting {
            0 => std::ptr::addr_of_mut!(self.own_run),
            n => &mut *self.nested_runs[n - 1] as *mut DeoptRunState,
        }
    }

    /// Whether this thread is running extension code now.
    #[inline]
    pub fn in_run(&self) -> bool {
        self.slot().epoch.load(Ordering::Relaxed) & 1 == 1
    }

    #[inline]
    pub fn slot(&self) -> &ThreadSlot {
        // SAFETY: points into the mapping that `inner` keeps alive.
        unsafe { &*self.slot }
    }

    /// This thread's counters for `hook` (< `max_hooks`, which every [`crate::Hook`]
    /// index is).
    #[inline]
    pub fn counters(&self, hook: u32) -> &HookCounters {
        debug_assert!(hook < self.inner.info.max_hooks);
        // SAFETY: `counters` is this thread's row of `max_hooks` cells inside the mapping
        // that `inner` keeps alive; `hook` is below `max_hooks`.
        unsafe { &*self.counters.add(hook as usize) }
    }

    /// Announces that this thread is about to run extension code. Returns the odd epoch
    /// value it stored, to hand back to [`ThreadState::leave`], or 0 in a nested run (the
    /// epoch is odd already and the outermost run makes it even again).
    #[inline(always)]
    pub fn enter(&mut self) -> u64 {
        let epoch = &self.slot().epoch;
        let e = epoch.load(Ordering::Relaxed);
        if e & 1 == 1 {
            return 0;
        }
        let inside = e + 1;
        // A plain store plus a compiler fence: the control plane's remote barrier provides
        // the hardware ordering (see docs/region.md, "Epochs").
        epoch.store(inside, Ordering::Relaxed);
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        inside
    }

    /// Ends what the [`ThreadState::enter`] that returned `inside` began.
    #[inline(always)]
    pub fn leave(&mut self, inside: u64) {
        if inside != 0 {
            self.slot().epoch.store(inside + 1, Ordering::Release);
        }
    }

    /// [`ThreadState::leave`] for the outermost run, whose `enter` value the slot's epoch
    /// word still holds (a nested run in between leaves it as it found it).
    #[inline(always)]
    pub fn leave_outermost(&mut self) {
        let epoch = &self.slot().epoch;
        let inside = epoch.load(Ordering::Relaxed);
        debug_assert_eq!(inside % 2, 1);
        epoch.store(inside + 1, Ordering::Release);
    }
}

impl Drop for ThreadState {
    fn drop(&mut self) {
        let s = self.slot();
        let epoch = s.epoch.load(Ordering::Relaxed);
        if epoch % 2 == 1 {
            s.epoch.store(epoch + 1, Ordering::Release);
        }
        s.owner.store(0, Ordering::Release);
        CURRENT.with(|c| {
            if std::ptr::eq(c.get(), self) {
                c.set(std::ptr::null_mut());
            }
        });
    }
}

/// Active word of a `seen` cell before its hook's first run. It has the hold bit set, and
/// the word a run compares with never has (the hold is waited out or stripped first), so
/// it never matches and `never_entered` is never called.
const NEVER_SEEN: u64 = u64::MAX;

/// Placeholder entry of a `seen` cell before its hook's first run (see [`NEVER_SEEN`]).
unsafe extern "C" fn never_entered(_: *mut u8, _: *mut RunState) -> u64 {
    unreachable!("an empty hook slot has no entry point")
}

thread_local! {
    static CURRENT: Cell<*mut ThreadState> = const { Cell::new(std::ptr::null_mut()) };
    // Boxed: CURRENT points into these, so they must not move when the Vec grows.
    #[allow(clippy::vec_box)]
    static STATES: RefCell<Vec<Box<ThreadState>>> = const { RefCell::new(Vec::new()) };
}

/// This thread's state for `inner`, claiming a thread slot on first use. `None` when every
/// slot is taken (the hook then behaves as empty and counts an error) or the thread is
/// exiting. The hook path tries `CURRENT` itself first.
#[cold]
pub(crate) fn state_slow(inner: &Arc<Inner>) -> Option<*mut ThreadState> {
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
            // Continue from the slot's last epoch, so that a snapshot taken while the
            // previous owner was inside still sees the word change.
            let epoch = s.epoch.load(Ordering::Acquire);
            let epoch = epoch + epoch % 2;
            s.epoch.store(epoch, Ordering::Release);
            return Some(ThreadState {
                runtime_id: inner.id,
                inner: inner.clone(),
                slot_index: i,
                slot: s as *const ThreadSlot,
                counters: inner.counters(i, 0) as *const HookCounters,
                seen: vec![(NEVER_SEEN, never_entered as EntryFn); inner.info.max_hooks as usize]
                    .into_boxed_slice(),
                tail_result: None,
                tail_deopt: false,
                fast_entry: never_entered as EntryFn,
                fast_hook: std::ptr::null(),
                tail_depth: 0,
                rng: (tid << 32)
                    ^ inner.id
                    ^ 0x9e37_79b9_7f4a_7c15
                    ^ (s as *const ThreadSlot as u64),
                maps: Box::new([None; MAP_CACHE]),
                maps_generation: 0,
                xstate_generation: inner.xstate_generation() as *const AtomicU64,
                nested_runs: Vec::new(),
                nesting: 0,
                own_run: DeoptRunState::new(0),
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

/// The [`RunState`] of the extension run in progress on this thread, or `None` outside a run.
///
/// For host functions and helpers that spend the running extension's instruction budget
/// (a cross-sandbox call runs the callee on the caller's budget): they read what is left in
/// `budget` and lower it by what they spent. Generated code that is metered stores its live
/// budget there before every helper call and reloads it after, so the value is exact during
/// the call; unmetered code never reads it (lowering it then only affects later helpers of the
/// same run). A nested run (a host function running a hook) has its own run state, which is
/// the one returned while it runs.
///
/// The pointer is valid until the host function returns; it must not be kept beyond that,
/// used from another thread, or used to change `status` or anything after the `RunState`
/// (an elite run's deoptimisation state lives there).
#[inline]
pub fn current_run_state() -> Option<*mut RunState> {
    let ts = current()?;
    if !ts.in_run() {
        return None;
    }
    Some(ts.current_run().cast())
}
