//! The hook fast path.

pub mod queued;
mod stopped;

use crate::inner::Inner;
use crate::thread::{self, ThreadState};
use rdx_region::abi::{DeoptRunState, EntryFn, RunState, RunStatus};
use rdx_region::layout::{active_version, HookCounters, HookSlot, ACTIVE_HOLD, TIME_SAMPLE_PERIOD};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a hook is declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HookSpec {
    /// Size of the context structure the host passes (published for the control plane).
    pub context_size: u64,
    /// What the hook returns while nothing is attached, and (until a control plane binds a
    /// class with its own default) when a run fails.
    pub default_return: u64,
    /// Instruction budget per run until a control plane binds a class.
    pub budget: u64,
}

impl HookSpec {
    /// Instruction budget of a hook no class has bound yet.
    pub const DEFAULT_BUDGET: u64 = 1_000_000;

    /// A hook whose context structure is `context_size` bytes, returning 0 when nothing runs,
    /// with [`HookSpec::DEFAULT_BUDGET`].
    pub fn new(context_size: u64) -> Self {
        Self {
            context_size,
            default_return: 0,
            budget: Self::DEFAULT_BUDGET,
        }
    }

    /// A hook whose context structure is a `T`.
    pub fn for_context<T>() -> Self {
        Self::new(std::mem::size_of::<T>() as u64)
    }

    /// Returns `value` while nothing is attached (and when a run fails).
    pub fn default_return(mut self, value: u64) -> Self {
        self.default_return = value;
        self
    }

    /// Instruction budget per run until a control plane binds a class.
    pub fn budget(mut self, budget: u64) -> Self {
        self.budget = budget;
        self
    }
}

/// A hook's counters, summed over thread slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HookStats {
    /// Runs of extension code (any outcome).
    pub runs: u64,
    /// Runs that stopped abnormally (budget exhausted, deoptimisation not finished).
    pub failures: u64,
    /// Times the host refused an invalid active word.
    pub errors: u64,
    /// Callers that gave up waiting on a held slot.
    pub hold_timeouts: u64,
    /// Runs whose duration was sampled.
    pub timed_runs: u64,
    /// Total ns of the sampled runs.
    pub timed_ns: u64,
    /// Runs of elite code that stopped at a failed guard (also counted in `failures`).
    pub deopts: u64,
    /// The active word now in the slot.
    pub active: u64,
}

/// A declared hook. Copy it around; [`Hook::run`] is the fast path.
#[derive(Clone, Copy)]
pub struct Hook<'rt> {
    /// For the slow path (claiming a thread slot keeps the runtime alive).
    arc: &'rt Arc<Inner>,
    /// The same runtime, one indirection closer for the hot path.
    inner: &'rt Inner,
    slot: &'rt HookSlot,
    index: u32,
    empty_return: u64,
    /// `inner.id`, one load closer for the hot path.
    runtime_id: u64,
}

impl std::fmt::Debug for Hook<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook").field("index", &self.index).finish()
    }
}

/// Serialises this core's instruction stream so that it fetches code written by another
/// core (or process) after the version change it just observed.
#[cold]
#[inline(never)]
fn sync_instruction_stream() {
    // cpuid is a serialising instruction, available on every x86-64 CPU.
    #[cfg(target_arch = "x86_64")]
    std::hint::black_box(std::arch::x86_64::__cpuid(0));
    #[cfg(target_arch = "aarch64")]
    // SAFETY: isb only discards prefetched instructions; the control plane did the data and
    // instruction cache maintenance for the new code before publishing it.
    unsafe {
        std::arch::asm!("isb", options(nostack, preserves_flags));
    }
}

impl<'rt> Hook<'rt> {
    pub(crate) fn new(inner: &'rt Arc<Inner>, index: u32, empty_return: u64) -> Self {
        Self {
            arc: inner,
            inner,
            slot: inner.slot(index),
            index,
            empty_return,
            runtime_id: inner.id,
        }
    }

    /// Slot index (the hook's id in the context table).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Runs the hook on `ctx`: the attached program's `r0`, or the default.
    #[inline]
    pub fn run<T>(&self, ctx: &mut T) -> u64 {
        self.run_ptr(ctx as *mut T)
    }

    /// Runs the hook on a raw context pointer (what the C ABI passes).
    #[inline]
    pub fn run_raw(&self, ctx: *mut u8) -> u64 {
        self.run_ptr(ctx)
    }

    /// The empty path: one acquire load and a branch.
    #[inline(always)]
    fn run_ptr<C>(&self, ctx: *mut C) -> u64 {
        let word = self.slot.active.load(Ordering::Acquire);
        if word == 0 {
            return self.empty_return;
        }
        self.run_attached(ctx)
    }

    /// Whether a program is attached right now.
    pub fn is_attached(&self) -> bool {
        active_version(self.slot.active.load(Ordering::Acquire)) != 0
    }

    /// The attached path, out of line so that the empty path stays one load and a branch
    /// at the call site (inlining this saves about 2 ns per attached run but costs the
    /// empty path a frame).
    ///
    /// The common case (this thread ran this hook's current word before, not nested, not
    /// sampled for timing, ended `Ok`) is written out here; everything else (first run on a
    /// thread, nested runs, holds, new or invalid words, timed runs, tail calls, abnormal
    /// ends) goes through [`Hook::run_other`] or [`Hook::finish_cold`], out of line and cold,
    /// into [`Hook::run_with`] and [`Hook::finish`]. Keeping the rare cases out of this
    /// function is what makes it cheap: they would keep more values in callee-saved
    /// registers (saved and restored on every run). Only the thread state stays in one
    /// across the entry call: the entry and the hook handle are stored in the thread state
    /// for the rare ends (`fast_entry`, `fast_hook`), and the way out after the epoch was
    /// entered ([`Hook::leave_and_run_other`]) reads the epoch word back instead of keeping
    /// its value. The run state's budget and status are rewritten only when they differ (a
    /// load is cheaper than a store here).
    ///
    /// Generic over the context type only so that, reached through [`Hook::run`], it is
    /// compiled in the crate that runs the hook (this crate does not know that type), with
    /// that crate's code model: in an executable, the read of the thread-local state pointer
    /// is then one `%fs`-relative load (initial-exec, which the linker turns into
    /// local-exec), where code compiled in this crate, position-independent library code
    /// whatever its crate type, loads the thread pointer first and then the variable
    /// (general-dynamic, relaxed by the linker). [`Hook::run_raw`] (the C ABI's path) may
    /// use an instance compiled here; in `librdx_runtime_c.so` it keeps the general-dynamic
    /// access a shared library needs.
    #[inline(never)]
    fn run_attached<C>(&self, ctx: *mut C) -> u64 {
        let ctx = ctx.cast::<u8>();
        let ts = thread::current_ptr();
        if ts.is_null()
            // SAFETY: CURRENT is null or points to a live state of this thread.
            || unsafe { (*ts).runtime_id } != self.runtime_id
            || self.inner.torn_down.load(Ordering::Relaxed)
        {
            return self.run_other(ctx);
        }
        // SAFETY: this thread's live state; the reference ends before the entry call.
        let t = unsafe { &mut *ts };
        let epoch = &t.slot().epoch;
        let e = epoch.load(Ordering::Relaxed);
        if e & 1 == 1 {
            return self.run_other(ctx);
        }
        // A plain store plus a compiler fence, as in `ThreadState::enter`.
        epoch.store(e + 1, Ordering::Relaxed);
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        // Reload after announcing the epoch: this is the word whose code we may run.
        let word = self.slot.active.load(Ordering::Acquire);
        // SAFETY: `index < max_hooks`, the length of `seen`.
        let (seen_word, entry) = *unsafe { t.seen.get_unchecked(self.index as usize) };
        let counters = t.counters(self.index);
        let n = counters.runs.load(Ordering::Relaxed);
        // `seen_word` never has the hold bit, except the never-run placeholder.
        if word != seen_word || word & ACTIVE_HOLD != 0 || n.is_multiple_of(TIME_SAMPLE_PERIOD) {
            return self.leave_and_run_other(ts, ctx);
        }
        counters.runs.store(n + 1, Ordering::Relaxed);
        let run = &mut t.own_run.run;
        let budget = self.slot.budget.load(Ordering::Relaxed);
        if run.budget != budget {
            run.budget = budget;
        }
        if run.status != RunStatus::Ok as u32 {
            run.status = RunStatus::Ok as u32;
        }
        let state: *mut RunState = run;
        t.fast_entry = entry;
        t.fast_hook = (self as *const Self).cast();
        // SAFETY: as in `run_with`: `entry` is the one this thread validated (and
        // synchronised its instruction stream for) when it last ran `word`, which is still
        // published; the epoch is odd; `state` is this thread's own run state.
        let r0 = unsafe { entry(ctx, state) };
        // SAFETY: this thread's live state; the entry call (and every helper it made) has
        // returned.
        let t = unsafe { &mut *ts };
        // A tail call that succeeded left `TailCalled` there: one test covers both.
        if t.own_run.run.status != RunStatus::Ok as u32 {
            return Hook::finish_cold(ts, r0);
        }
        t.leave_outermost();
        r0
    }

    /// [`Hook::finish`] for a fast-path run that made a tail call or ended abnormally.
    #[cold]
    #[inline(never)]
    fn finish_cold(ts: *mut ThreadState, r0: u64) -> u64 {
        // SAFETY: this thread's live state; the fast path stored its `&self` there before
        // the entry call, and that handle outlives the call to `run_attached` this ends.
        let this = unsafe { &*(*ts).fast_hook.cast::<Hook<'_>>() };
        let run = Prepared {
            // SAFETY: this thread's live state; the fast path stored the entry it called
            // there (nested runs, which never take the fast path, leave it alone).
            entry: unsafe { (*ts).fast_entry },
            // SAFETY: this thread's live state.
            state: unsafe { std::ptr::addr_of_mut!((*ts).own_run.run) },
            timed: None,
        };
        this.finish::<false>(ts, &run, r0)
    }

    /// The fast path's way out after it entered the epoch: leave it (the word still holds
    /// the value the fast path stored, so it need not keep that value in a register) and
    /// take [`Hook::run_other`].
    #[cold]
    #[inline(never)]
    fn leave_and_run_other(&self, ts: *mut ThreadState, ctx: *mut u8) -> u64 {
        // SAFETY: this thread's live state; nothing ran since the fast path entered.
        unsafe { (*ts).leave_outermost() };
        self.run_other(ctx)
    }

    /// Every run the fast path does not cover: torn down, first run on this thread (or a
    /// run from inside another runtime's hook), a nested run, a new, held or invalid word,
    /// a timed run.
    #[cold]
    #[inline(never)]
    fn run_other(&self, ctx: *mut u8) -> u64 {
        if self.inner.torn_down.load(Ordering::Relaxed) {
            return self.empty_return;
        }
        let current = thread::current_ptr();
        // SAFETY: CURRENT is null or points to a live state of this thread.
        if current.is_null() || unsafe { (*current).runtime_id } != self.inner.id {
            return self.run_switching(current, ctx);
        }
        // SAFETY: as above.
        if unsafe { (*current).in_run() } {
            return self.run_nested(current, ctx);
        }
        self.run_with::<false>(current, ctx)
    }

    /// First run of this thread in this runtime, or a run of it from inside another
    /// runtime's hook: find (or claim) this runtime's state, run, and make the previous
    /// state current again.
    #[cold]
    #[inline(never)]
    fn run_switching(&self, previous: *mut ThreadState, ctx: *mut u8) -> u64 {
        let Some(ts) = thread::state_slow(self.arc) else {
            self.slot.errors.fetch_add(1, Ordering::Relaxed);
            return self.slot.default_ret.load(Ordering::Relaxed);
        };
        // SAFETY: `ts` is this thread's live state for this runtime.
        let r = if unsafe { (*ts).in_run() } {
            self.run_nested(ts, ctx)
        } else {
            self.run_with::<false>(ts, ctx)
        };
        if !previous.is_null() {
            thread::set_current(previous);
        }
        r
    }

    /// A run from inside a run of the same runtime (a host function that runs a hook): it
    /// gets a run state of its own, since the outer run's (its budget, status and, for elite
    /// code, its eBPF stack frames) is live meanwhile.
    #[cold]
    #[inline(never)]
    fn run_nested(&self, ts: *mut ThreadState, ctx: *mut u8) -> u64 {
        {
            // SAFETY: this thread's live state; the reference ends before `run_with`.
            let ts = unsafe { &mut *ts };
            if ts.nested_runs.len() <= ts.nesting {
                ts.nested_runs.push(DeoptRunState::boxed(0));
            }
            ts.nesting += 1;
        }
        let r = self.run_with::<true>(ts, ctx);
        // SAFETY: as above; the nested run has returned.
        unsafe { (*ts).nesting -= 1 };
        r
    }

    /// One run with this thread's state. `ts` stays a raw pointer across the entry call:
    /// helpers reach the same state through the thread-local pointer meanwhile, so no
    /// reference to it may live across the call.
    #[inline(always)]
    fn run_with<const NESTED: bool>(&self, ts: *mut ThreadState, ctx: *mut u8) -> u64 {
        // SAFETY: `ts` is this thread's live state; the reference ends with `begin`.
        let run = match self.begin::<NESTED>(unsafe { &mut *ts }) {
            Ok(run) => run,
            Err(r) => return r,
        };
        let r0 = match run.timed {
            // SAFETY: this thread's counters in the region, which the runtime keeps mapped.
            Some(counters) => timed_call(unsafe { &*counters }, run.entry, ctx, run.state),
            // SAFETY: `entry` is inside this region's code arena (checked), where a control
            // plane placed verified, linked code for this hook and published it with a
            // release CAS that our acquire load observed; the coherence step for this word
            // ran in `begin`. The epoch is odd, so the code cannot be reclaimed while it
            // runs. `run.state` is this thread's run state, used by nothing else meanwhile.
            None => unsafe { (run.entry)(ctx, run.state) },
        };
        self.finish::<NESTED>(ts, &run, r0)
    }

    /// Everything before the entry call: epoch, active word, hold, coherence, run state,
    /// counters. `Err` carries the hook's return value when nothing is to run.
    #[inline(always)]
    fn begin<const NESTED: bool>(&self, ts: &mut ThreadState) -> Result<Prepared, u64> {
        let mut inside = ts.enter();
        // Reload after announcing the epoch: this is the word whose code we may run.
        let mut word = self.slot.active.load(Ordering::Acquire);
        if word & ACTIVE_HOLD != 0 {
            (word, inside) = self.wait_for_release(ts, inside, word);
        }
        // SAFETY: `index < max_hooks`, the length of `seen`.
        let seen = unsafe { ts.seen.get_unchecked_mut(self.index as usize) };
        let entry = if seen.0 == word {
            seen.1
        } else {
            let Some(entry) = self.inner.entry_of(word) else {
                ts.leave(inside);
                return Err(self.refuse(word));
            };
            sync_instruction_stream();
            *seen = (word, entry);
            entry
        };
        let state: *mut RunState = if NESTED {
            ts.current_run().cast()
        } else {
            std::ptr::addr_of_mut!(ts.own_run.run)
        };
        // SAFETY: `state` is this thread's run state for this run (its own, or its nesting
        // level's), which nothing else uses meanwhile.
        unsafe {
            (*state).budget = self.slot.budget.load(Ordering::Relaxed);
            (*state).status = RunStatus::Ok as u32;
        }
        let counters = ts.counters(self.index);
        let n = counters.runs.load(Ordering::Relaxed);
        counters.runs.store(n + 1, Ordering::Relaxed);
        Ok(Prepared {
            entry,
            state,
            timed: n
                .is_multiple_of(TIME_SAMPLE_PERIOD)
                .then_some(counters as *const HookCounters),
        })
    }

    /// Everything after the entry call: tail-call result, run status, epoch.
    #[inline(always)]
    fn finish<const NESTED: bool>(&self, ts: *mut ThreadState, run: &Prepared, mut r0: u64) -> u64 {
        // SAFETY: this thread's live state; the entry call (and every helper it made) has
        // returned, and the reference ends before `stopped`.
        let t = unsafe { &mut *ts };
        // Taken whatever the status, so that no result outlives its run.
        let tail_result = t.tail_result.take();
        let status = if NESTED {
            // SAFETY: the run state `begin` prepared for this run; the entry call returned.
            unsafe { (*run.state).status }
        } else {
            t.own_run.run.status
        };
        if status == RunStatus::TailCalled as u32 {
            // A successful tail call ended the run: its target's result is the run's.
            r0 = tail_result.unwrap_or(r0);
        } else if status != RunStatus::Ok as u32 {
            // Still inside the epoch: whatever `stopped` does with the version that ran
            // (a deoptimised run continues in that version's generic tier), its code cannot
            // be reclaimed meanwhile.
            r0 = self.stopped(ts, run, status, r0);
        }
        if !NESTED {
            // The outermost run: its epoch is `ts.epoch` (a nested run in between restored
            // nothing there), so no register has to carry it across the entry call.
            // SAFETY: as above.
            unsafe { (*ts).leave_outermost() };
        }
        r0
    }

    /// An empty (0) or invalid active word: the hook's default, counting an error for an
    /// invalid one.
    #[cold]
    fn refuse(&self, word: u64) -> u64 {
        if word == 0 {
            return self.empty_return;
        }
        self.slot.errors.fetch_add(1, Ordering::Relaxed);
        self.slot.rejected_word.store(word, Ordering::Relaxed);
        self.slot.default_ret.load(Ordering::Relaxed)
    }

    /// Waits, bounded by the region's hold timeout, for the control plane to release the
    /// hold; returns the word to run and the epoch value to leave with. Outside the epoch
    /// while waiting, so that a control plane waiting for quiescence is not blocked by
    /// callers queued on its own bubble.
    #[cold]
    fn wait_for_release(&self, ts: &mut ThreadState, mut inside: u64, mut word: u64) -> (u64, u64) {
        let timeout = Duration::from_nanos(self.inner.info.hold_timeout_ns);
        let start = Instant::now();
        let mut spins = 0u32;
        while word & ACTIVE_HOLD != 0 {
            if start.elapsed() >= timeout {
                self.slot.hold_timeouts.fetch_add(1, Ordering::Relaxed);
                return (word & !ACTIVE_HOLD, inside);
            }
            ts.leave(inside);
            if spins < 256 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            spins += 1;
            inside = ts.enter();
            word = self.slot.active.load(Ordering::Acquire);
        }
        (word, inside)
    }

    /// Counters summed over every thread slot.
    pub fn stats(&self) -> HookStats {
        let inner = self.inner;
        let mut s = HookStats {
            failures: self.slot.failures.load(Ordering::Relaxed),
            errors: self.slot.errors.load(Ordering::Relaxed),
            hold_timeouts: self.slot.hold_timeouts.load(Ordering::Relaxed),
            active: self.slot.active.load(Ordering::Acquire),
            ..HookStats::default()
        };
        for t in 0..inner.info.thread_slots {
            let c = inner.counters(t, self.index);
            s.runs += c.runs.load(Ordering::Relaxed);
            s.timed_runs += c.timed_runs.load(Ordering::Relaxed);
            s.timed_ns += c.timed_ns.load(Ordering::Relaxed);
            s.deopts += c.deopts.load(Ordering::Relaxed);
        }
        s
    }
}

/// What [`Hook::begin`] prepared for the entry call.
pub(crate) struct Prepared {
    pub(crate) entry: EntryFn,
    /// This thread's run state for this run (`ThreadState::own_run` or a nested level's), a
    /// [`DeoptRunState`] seen as its leading [`RunState`].
    pub(crate) state: *mut RunState,
    /// This run is timed (one in [`TIME_SAMPLE_PERIOD`]) into these counters.
    timed: Option<*const HookCounters>,
}

/// Runs `entry` and adds its duration to the thread's sampled time counters (one run in
/// [`TIME_SAMPLE_PERIOD`]; two clock reads are too expensive for every run).
#[cold]
#[inline(never)]
fn timed_call(counters: &HookCounters, entry: EntryFn, ctx: *mut u8, run: *mut RunState) -> u64 {
    let start = Instant::now();
    // SAFETY: the caller's contract, see `run_with`.
    let r0 = unsafe { entry(ctx, run) };
    let ns = start.elapsed().as_nanos() as u64;
    counters.timed_runs.store(
        counters.timed_runs.load(Ordering::Relaxed) + 1,
        Ordering::Relaxed,
    );
    counters.timed_ns.store(
        counters.timed_ns.load(Ordering::Relaxed) + ns,
        Ordering::Relaxed,
    );
    r0
}
