//! The `call` helper: runs an attached sandbox's exported entry on the calling thread.
//!
//! One call, in order:
//! 1. decode the [`Target`]; find the attached service and the export (allow-list) — a
//!    missing one is an error return, never a jump;
//! 2. check the argument length against the export's declared size;
//! 3. take a thread slot in the callee's region (once per thread and service) and make its
//!    epoch odd: from here until step 6 the control plane will not reclaim the code or maps
//!    this call may use;
//! 4. load the entry's published word once (acquire) — the call runs that version to the end
//!    even if a control plane publishes another one meanwhile; a held word (a collective
//!    update's bubble) is waited on, bounded by the region's hold timeout, like a hook;
//! 5. run it: context = the caller's argument buffer (read-only, declared size), output =
//!    the caller's buffer through `xcall_reply`, with a budget of the entry's class budget or
//!    the caller's remaining budget, whichever is smaller (see "Budget" below);
//! 6. charge the caller's budget with what the callee spent, make the epoch even, and turn a
//!    stopped run into an error return.
//!
//! Nothing unwinds: generated code returns normally when its budget runs out, with the
//! status in its [`RunState`].
//!
//! # Budget
//!
//! The caller's instruction budget covers the call. When `call` runs inside an extension run
//! ([`rdx_runtime::current_run_state`]; metered code stores its live budget there before every
//! helper call and reloads it after):
//! - the callee starts with `min(entry class budget, caller's remaining budget)`;
//! - afterwards the caller's budget is lowered by what the callee spent (its start budget
//!   minus what it has left; all of it when the callee ran out);
//! - a callee that runs out returns [`errno::BUDGET`] to the caller's extension. If it ran
//!   out of the caller's budget, the caller's budget is then 0: the caller continues from
//!   the call with the error in `r0` and, if metered, stops with `BudgetExhausted` at its
//!   next charge (the next loop back-edge or function entry), so straight-line code up to
//!   there still runs (verifier-bounded code without loops runs to its exit);
//! - a call made with no budget left returns [`errno::BUDGET`] without running the callee.
//!
//! A callee the verifier bounded is compiled unmetered and does not count what it executes:
//! it is charged nothing (its length bounds what it can do). Host code calling [`call`]
//! outside any run gives the callee its class budget.

use crate::attach::{self, ServiceMap};
use crate::{errno, Target, MAX_ARGS, MAX_EXPORTS, MAX_SLOTS};
use rdx_region::abi::{EntryFn, RunState, RunStatus};
use rdx_region::layout::{
    active_entry_offset, active_version, SectionId, ThreadSlot, ACTIVE_HOLD, CODE_ENTRY_ALIGN,
};
use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::sync::atomic::{compiler_fence, Ordering};
use std::time::{Duration, Instant};

/// How long a caller waits for a serialised entry before giving up with [`errno::BUSY`].
pub const SERIALIZED_WAIT: Duration = Duration::from_millis(10);

/// The call running on this thread, for the callee helpers.
pub(crate) struct Current {
    pub svc: &'static ServiceMap,
    pub out: *mut u8,
    pub out_len: usize,
    pub thread_slot: u32,
}

/// Per thread: the thread slot held in each attached region, and the published word each
/// export last ran with here (to know when a coherence step is due).
struct ThreadCalls {
    /// Thread slot index + 1 per plan slot; 0 = none yet.
    slots: [u32; MAX_SLOTS],
    seen: Box<[[u64; MAX_EXPORTS]; MAX_SLOTS]>,
}

impl Drop for ThreadCalls {
    fn drop(&mut self) {
        for (slot, held) in self.slots.iter().enumerate() {
            if *held == 0 {
                continue;
            }
            if let Some(svc) = attach::attached(slot as u16) {
                let ts = svc.thread_slot(held - 1);
                let e = ts.epoch.load(Ordering::Relaxed);
                if e % 2 == 1 {
                    ts.epoch.store(e + 1, Ordering::Release);
                }
                ts.owner.store(0, Ordering::Release);
            }
        }
    }
}

thread_local! {
    static CURRENT: Cell<*const Current> = const { Cell::new(std::ptr::null()) };
    static CALLS: UnsafeCell<ThreadCalls> = UnsafeCell::new(ThreadCalls {
        slots: [0; MAX_SLOTS],
        seen: Box::new([[0; MAX_EXPORTS]; MAX_SLOTS]),
    });
}

#[inline]
pub(crate) fn current() -> Option<&'static Current> {
    let p = CURRENT.with(|c| c.get());
    // SAFETY: non-null only while `xcall_call` runs the callee, pointing to a `Current` in its
    // frame, which outlives the callee's helper calls on this thread.
    unsafe { p.as_ref() }
}

/// This thread's slot in `svc`'s region, claiming one on first use. Also returns a pointer to
/// the thread's seen-words row for the service.
#[inline]
fn thread_slot(svc: &ServiceMap) -> Option<(u32, *mut [u64; MAX_EXPORTS])> {
    CALLS
        .try_with(|c| {
            // SAFETY: only this function touches CALLS' contents, never re-entrantly (the
            // callee cannot call `call`), and the reference does not escape.
            let calls = unsafe { &mut *c.get() };
            let held = calls.slots[svc.slot as usize];
            let row = &mut calls.seen[svc.slot as usize] as *mut [u64; MAX_EXPORTS];
            if held != 0 {
                return Some((held - 1, row));
            }
            let index = claim(svc)?;
            calls.slots[svc.slot as usize] = index + 1;
            Some((index, row))
        })
        .ok()
        .flatten()
}

#[cold]
fn claim(svc: &ServiceMap) -> Option<u32> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u64;
    (0..svc.info.thread_slots).find(|&i| {
        svc.thread_slot(i)
            .owner
            .compare_exchange(0, tid + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

#[inline]
fn enter(ts: &ThreadSlot) {
    let e = ts.epoch.load(Ordering::Relaxed);
    // Relaxed plus a compiler fence, as the host's own threads do: the control plane's
    // global membarrier before it samples epochs provides the hardware ordering.
    ts.epoch.store(e | 1, Ordering::Relaxed);
    compiler_fence(Ordering::SeqCst);
}

#[inline]
fn leave(ts: &ThreadSlot) {
    let e = ts.epoch.load(Ordering::Relaxed);
    ts.epoch.store(e + 1, Ordering::Release);
}

/// Serialises this core's instruction stream before running code published after what it
/// last ran (see the runtime's hook path for the same step).
#[cold]
#[inline(never)]
fn sync_instruction_stream() {
    #[cfg(target_arch = "x86_64")]
    std::hint::black_box(std::arch::x86_64::__cpuid(0));
    #[cfg(target_arch = "aarch64")]
    // SAFETY: isb only discards prefetched instructions.
    unsafe {
        std::arch::asm!("isb", options(nostack, preserves_flags));
    }
}

fn lock_serialized(lock: &std::sync::atomic::AtomicU64) -> bool {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() } as u64 + 1;
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if lock.load(Ordering::Relaxed) == 0
            && lock
                .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return true;
        }
        if spins < 128 {
            std::hint::spin_loop();
        } else {
            if start.elapsed() >= SERIALIZED_WAIT {
                return false;
            }
            std::thread::yield_now();
        }
        spins += 1;
    }
}

/// The `call` helper: `r0 = call(target, args, args_len, out, out_len)`.
///
/// Returns the callee's `r0`, or a negative errno from [`errno`]. Register it in a caller
/// host as the host function behind each `call` capability
/// ([`rdx_runtime::Runtime::register_function`]); the verifier has proved, for the caller's
/// class, that `args` is readable for `args_len` bytes and `out` writable for `out_len`.
///
/// # Safety
/// `args` must be readable for `args_len` bytes and `out` writable for `out_len` bytes.
pub unsafe extern "C" fn xcall_call(
    target: u64,
    args: u64,
    args_len: u64,
    out: u64,
    out_len: u64,
) -> u64 {
    let Some(t) = Target::decode(target) else {
        return errno::BAD_TARGET;
    };
    let Some(svc) = attach::attached(t.slot) else {
        return errno::NOT_MAPPED;
    };
    let index = t.export as usize;
    if index >= svc.export_count {
        return errno::NOT_EXPORTED;
    }
    let export = &svc.exports[index];
    if args_len > export.max_args as u64 {
        return errno::ARGS_TOO_LARGE;
    }
    if out_len > 0 {
        // A callee that fails or never replies leaves zeros, not stale caller bytes.
        // SAFETY: writable for `out_len` bytes by the contract.
        unsafe { std::ptr::write_bytes(out as *mut u8, 0, out_len as usize) };
    }
    let Some((slot_index, seen)) = thread_slot(svc) else {
        return errno::NO_THREAD_SLOT;
    };
    let locked = if export.serialized {
        // SAFETY: set at attach time to the export's lock word in the never-unmapped plan.
        let lock = unsafe { &*export.lock };
        if !lock_serialized(lock) {
            return errno::BUSY;
        }
        Some(lock)
    } else {
        None
    };
    let ts = svc.thread_slot(slot_index);
    let hook = svc.hook(index);
    enter(ts);
    // The version this call runs, start to finish.
    let mut word = hook.active.load(Ordering::Acquire);
    if word & ACTIVE_HOLD != 0 {
        word = wait_for_release(svc, hook, ts, word);
    }
    let r = run_word(
        svc, hook, word, seen, index, slot_index, args, args_len, out, out_len,
    );
    leave(ts);
    if let Some(lock) = locked {
        lock.store(0, Ordering::Release);
    }
    r
}

/// A control plane holds the entry (a collective update's bubble): wait for the release,
/// bounded by the callee region's hold timeout, outside the epoch so that the control plane
/// waiting for quiescence is not blocked by us; then run what is published.
#[cold]
fn wait_for_release(
    svc: &ServiceMap,
    hook: &rdx_region::layout::HookSlot,
    ts: &ThreadSlot,
    mut word: u64,
) -> u64 {
    let timeout = Duration::from_nanos(svc.info.hold_timeout_ns);
    let start = Instant::now();
    let mut spins = 0u32;
    while word & ACTIVE_HOLD != 0 {
        if start.elapsed() >= timeout {
            hook.hold_timeouts.fetch_add(1, Ordering::Relaxed);
            return word & !ACTIVE_HOLD;
        }
        leave(ts);
        if spins < 256 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        spins += 1;
        enter(ts);
        word = hook.active.load(Ordering::Acquire);
    }
    word
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn run_word(
    svc: &'static ServiceMap,
    hook: &rdx_region::layout::HookSlot,
    word: u64,
    seen: *mut [u64; MAX_EXPORTS],
    index: usize,
    slot_index: u32,
    args: u64,
    args_len: u64,
    out: u64,
    out_len: u64,
) -> u64 {
    if active_version(word) == 0 {
        return errno::NOT_DEPLOYED;
    }
    let offset = active_entry_offset(word) as u64;
    let code = svc.info.section(SectionId::Code);
    if offset < code.offset || offset >= code.end() || !offset.is_multiple_of(CODE_ENTRY_ALIGN) {
        hook.errors.fetch_add(1, Ordering::Relaxed);
        hook.rejected_word.store(word, Ordering::Relaxed);
        return errno::CALLEE_FAILED;
    }
    // SAFETY: a pointer into the read+execute code arena of this process's mapping of the
    // callee's region, where a control plane placed verified code linked for this address
    // and published it with the release CAS our acquire load observed.
    let entry: EntryFn =
        unsafe { std::mem::transmute::<usize, EntryFn>((svc.base + offset) as usize) };
    // SAFETY: `seen` is this thread's row for the service (see `thread_slot`).
    let seen = unsafe { &mut (*seen)[index] };
    if *seen != word {
        sync_instruction_stream();
        *seen = word;
    }
    let max_args = svc.exports[index].max_args as usize;
    if args_len as usize == max_args {
        run_entry(svc, hook, entry, args as *mut u8, slot_index, out, out_len)
    } else {
        run_padded(
            svc, hook, entry, index, slot_index, args, args_len, out, out_len,
        )
    }
}

/// Arguments shorter than declared: the callee may read all `max_args` bytes, so it gets a
/// zero-padded copy instead of the bytes beyond the caller's buffer. Out of line, so that the
/// common exact-size call does not reserve the buffer.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn run_padded(
    svc: &'static ServiceMap,
    hook: &rdx_region::layout::HookSlot,
    entry: EntryFn,
    index: usize,
    slot_index: u32,
    args: u64,
    args_len: u64,
    out: u64,
    out_len: u64,
) -> u64 {
    let max_args = svc.exports[index].max_args as usize;
    let mut padded = MaybeUninit::<[u8; MAX_ARGS as usize]>::uninit();
    let p = padded.as_mut_ptr() as *mut u8;
    // SAFETY: `max_args <= MAX_ARGS` (checked at attach time), `args` is readable for
    // `args_len < max_args` bytes (checked by the caller of `run_word`).
    unsafe {
        std::ptr::write_bytes(p, 0, max_args);
        std::ptr::copy_nonoverlapping(args as *const u8, p, args_len as usize);
    }
    run_entry(svc, hook, entry, p, slot_index, out, out_len)
}

#[inline(always)]
fn run_entry(
    svc: &'static ServiceMap,
    hook: &rdx_region::layout::HookSlot,
    entry: EntryFn,
    ctx: *mut u8,
    slot_index: u32,
    out: u64,
    out_len: u64,
) -> u64 {
    let cur = Current {
        svc,
        out: out as *mut u8,
        out_len: out_len as usize,
        thread_slot: slot_index,
    };
    // The caller's budget covers the call: the callee gets what its class allows, at most
    // what the caller's run has left, and the caller's run is charged what the callee spent.
    let caller = rdx_runtime::current_run_state();
    let own = hook.budget.load(Ordering::Relaxed);
    let granted = match caller {
        Some(state) => {
            // SAFETY: the run state of the extension run in progress on this thread, which
            // is blocked in this helper; nothing else touches it until we return.
            let left = unsafe { (*state).budget };
            if left == 0 {
                // Spent by earlier calls of this run: nothing left to run the callee with.
                return errno::BUDGET;
            }
            own.min(left)
        }
        None => own,
    };
    let previous = CURRENT.with(|c| c.replace(&cur));
    let mut run = RunState::new(granted);
    // SAFETY: see `entry` above; the epoch we hold keeps the code and the maps it links to
    // from being reclaimed until we leave; `ctx` is readable for the declared size.
    let r0 = unsafe { entry(ctx, &mut run) };
    CURRENT.with(|c| c.set(previous));
    if let Some(state) = caller {
        // An exhausted callee left 0: the caller pays all it was granted.
        let spent = granted.saturating_sub(run.budget);
        // SAFETY: as above.
        unsafe { (*state).budget = (*state).budget.saturating_sub(spent) };
    }
    if run.status != RunStatus::Ok as u32 {
        hook.failures.fetch_add(1, Ordering::Relaxed);
        return if run.status == RunStatus::BudgetExhausted as u32 {
            errno::BUDGET
        } else {
            errno::CALLEE_FAILED
        };
    }
    r0
}

/// Why [`call`] failed: the typed form of the helper's negative returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("not a call target value")]
    BadTarget,
    #[error("no service is attached at that slot in this process")]
    NotMapped,
    #[error("the service exports no such entry")]
    NotExported,
    #[error("the entry is exported but no code is deployed for it")]
    NotDeployed,
    #[error("the arguments are larger than the entry declares")]
    ArgsTooLarge,
    #[error("the callee ran out of instruction budget")]
    Budget,
    #[error("the callee failed")]
    CalleeFailed,
    #[error("the serialised entry stayed busy")]
    Busy,
    #[error("no free thread slot in the callee's region")]
    NoThreadSlot,
}

impl CallError {
    /// The error a negative return of the helper stands for, if it is one of [`errno`].
    pub fn from_return(r0: u64) -> Option<CallError> {
        Some(match r0 {
            errno::BAD_TARGET => CallError::BadTarget,
            errno::NOT_MAPPED => CallError::NotMapped,
            errno::NOT_EXPORTED => CallError::NotExported,
            errno::NOT_DEPLOYED => CallError::NotDeployed,
            errno::ARGS_TOO_LARGE => CallError::ArgsTooLarge,
            errno::BUDGET => CallError::Budget,
            errno::CALLEE_FAILED => CallError::CalleeFailed,
            errno::BUSY => CallError::Busy,
            errno::NO_THREAD_SLOT => CallError::NoThreadSlot,
            _ => return None,
        })
    }
}

/// Calls `target` from host code through the same path as the helper: the callee runs on
/// this thread and replies into `out`. Returns the callee's `r0`.
pub fn call(target: Target, args: &[u8], out: &mut [u8]) -> Result<u64, CallError> {
    // SAFETY: both buffers are live slices of the lengths passed.
    let r0 = unsafe {
        xcall_call(
            target.encode(),
            args.as_ptr() as u64,
            args.len() as u64,
            out.as_mut_ptr() as u64,
            out.len() as u64,
        )
    };
    match CallError::from_return(r0) {
        Some(e) => Err(e),
        None => Ok(r0),
    }
}
