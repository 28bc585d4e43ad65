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
//! # Cost
//!
//! Steps 1 and 3, and the checks of step 4, are done once per thread and export, out of
//! line: the thread keeps, per export it called, the hook slot, its thread slot in the
//! callee's region, the declared size, and the last published word it ran with that word's
//! checked entry point. A call after the first is then a thread-local load and three
//! dependent loads to that entry, the size check, the epoch store, one acquire load of the
//! published word compared with the remembered one, the caller's remaining budget, and the
//! indirect call; a new word (a new version, a hold, nothing deployed) takes the slow path
//! again. The callee's map helpers find decoded maps in a per-thread, per-service cache that
//! is revalidated against the region's `xstate_generation` whenever the thread first runs a
//! published word (see `callee::MapCache`).
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
use crate::callee::MapCache;
use crate::errno;
use rdx_region::abi::{EntryFn, RunState, RunStatus};
use rdx_region::layout::{
    active_entry_offset, active_version, HookSlot, SectionId, ThreadSlot, ACTIVE_HOLD,
    CODE_ENTRY_ALIGN,
};
use rdx_xcall_plan::{Target, MAX_ARGS, MAX_EXPORTS, MAX_SLOTS};
use std::cell::Cell;
use std::mem::MaybeUninit;
use std::sync::atomic::{compiler_fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a caller waits for a serialised entry before giving up with [`errno::BUSY`].
pub const SERIALIZED_WAIT: Duration = Duration::from_millis(10);

/// The call running on this thread, for the callee helpers. It is a thread-local of its own
/// (three words, constant-initialised), so a helper reads it at a fixed offset from the
/// thread pointer and reaches the service's state in one more load.
#[derive(Clone, Copy)]
pub(crate) struct Current {
    /// This thread's state for the called service; null when no call is running.
    calls: *mut ServiceCalls,
    pub out: *mut u8,
    pub out_len: usize,
}

const NO_CALL: Current = Current {
    calls: std::ptr::null_mut(),
    out: std::ptr::null_mut(),
    out_len: 0,
};

impl Current {
    // Each accessor goes through the raw pointer and touches one field, so that a callee
    // helper holding a reference into the map cache may still read the others.

    #[inline(always)]
    pub fn svc(&self) -> &'static ServiceMap {
        // SAFETY: non-null while a call runs (`current` returns None otherwise), this
        // thread's state for the service.
        unsafe { (*self.calls).svc }
    }

    /// The thread slot this thread holds in the callee's region.
    #[inline(always)]
    pub fn thread_slot(&self) -> u32 {
        // SAFETY: as in `svc`.
        unsafe { (*self.calls).thread_slot }
    }

    /// This thread's map cache for the service (the callee helpers'): only this thread uses
    /// it, and only while a helper runs.
    #[inline(always)]
    pub fn maps(&self) -> *mut MapCache {
        // SAFETY: as in `svc`.
        unsafe { &raw mut (*self.calls).maps }
    }
}

/// One export as this thread calls it: resolved on the thread's first call of it, then read
/// with a few loads per call.
struct EntryCache {
    /// Null until resolved.
    hook: *const HookSlot,
    max_args: u64,
    /// The plan's lock word for a serialised entry; null for the others.
    lock: *const AtomicU64,
    /// The published word this thread last ran, already checked (version, code bounds) and
    /// followed by a coherence step, and its entry point (0 until a word was checked).
    word: u64,
    entry: usize,
    /// The thread's state for the service and its thread slot there, so that a call that
    /// found this entry needs no other lookup.
    sc: *mut ServiceCalls,
    ts: *const ThreadSlot,
}

const UNRESOLVED: EntryCache = EntryCache {
    hook: std::ptr::null(),
    max_args: 0,
    lock: std::ptr::null(),
    word: 0,
    entry: 0,
    sc: std::ptr::null_mut(),
    ts: std::ptr::null(),
};

/// Per thread and attached service: the thread slot held in the service's region, the
/// exports called so far, and the callee helpers' map cache.
pub(crate) struct ServiceCalls {
    pub(crate) svc: &'static ServiceMap,
    pub(crate) thread_slot: u32,
    ts: *const ThreadSlot,
    entries: [EntryCache; MAX_EXPORTS],
    pub(crate) maps: MapCache,
}

/// Per thread: the services it called.
struct ThreadCalls {
    services: [*mut ServiceCalls; MAX_SLOTS],
}

thread_local! {
    // Plain values with const initialisers and no destructors: reading one is a
    // thread-pointer-relative load, with no lazy-initialisation check.
    static CALLS: Cell<*mut ThreadCalls> = const { Cell::new(std::ptr::null_mut()) };
    // The call running on this thread (see `Current`).
    static CURRENT: Cell<Current> = const { Cell::new(NO_CALL) };
    // The target value this thread called last and its resolved entry: a repeated call
    // finds its entry without the walk through `CALLS` (null until a first call).
    static LAST: Cell<(u64, *mut EntryCache)> = const { Cell::new((0, std::ptr::null_mut())) };
    // Registered on a thread's first call: gives back its thread slots when it ends.
    static RELEASE: ReleaseOnExit = const { ReleaseOnExit };
}

struct ReleaseOnExit;

impl Drop for ReleaseOnExit {
    fn drop(&mut self) {
        // The entry it names is freed below.
        let _ = LAST.try_with(|c| c.set((0, std::ptr::null_mut())));
        let Ok(p) = CALLS.try_with(|c| c.replace(std::ptr::null_mut())) else {
            return;
        };
        if p.is_null() {
            return;
        }
        // SAFETY: created by `Box::into_raw` in `thread_calls`, owned by this thread, and no
        // call is running (the thread is ending).
        let calls = unsafe { Box::from_raw(p) };
        for &s in calls.services.iter().filter(|s| !s.is_null()) {
            // SAFETY: as above, for the per-service boxes.
            let s = unsafe { Box::from_raw(s) };
            // SAFETY: a thread slot of a region that stays mapped for the process's life.
            let ts = unsafe { &*s.ts };
            let e = ts.epoch.load(Ordering::Relaxed);
            if e % 2 == 1 {
                ts.epoch.store(e + 1, Ordering::Release);
            }
            ts.owner.store(0, Ordering::Release);
        }
    }
}

/// The call running on this thread: set by `xcall_call` only while it runs the callee here.
#[inline(always)]
pub(crate) fn current() -> Option<Current> {
    let cur = CURRENT.with(|c| c.get());
    (!cur.calls.is_null()).then_some(cur)
}

/// This thread's state, created on its first call.
#[cold]
fn thread_calls() -> Option<*mut ThreadCalls> {
    let p = CALLS.with(|c| c.get());
    if !p.is_null() {
        return Some(p);
    }
    // Without the exit hook the thread's slots would never be given back: refuse instead
    // (only possible while the thread's locals are being destroyed).
    RELEASE.try_with(|_| ()).ok()?;
    let p = Box::into_raw(Box::new(ThreadCalls {
        services: [std::ptr::null_mut(); MAX_SLOTS],
    }));
    CALLS.with(|c| c.set(p));
    Some(p)
}

/// The slow half of a call's setup, on a thread's first call of an export: the allow-list
/// checks, a thread slot in the callee's region, the export's cache entry.
#[cold]
#[inline(never)]
unsafe fn resolve(
    t: Target,
    args_len: u64,
    out: u64,
    out_len: u64,
) -> Result<(*mut ServiceCalls, *mut EntryCache), u64> {
    let Some(svc) = attach::attached(t.slot) else {
        return Err(errno::NOT_MAPPED);
    };
    let index = t.export as usize;
    if index >= svc.export_count {
        return Err(errno::NOT_EXPORTED);
    }
    let export = &svc.exports[index];
    if args_len > export.max_args as u64 {
        return Err(errno::ARGS_TOO_LARGE);
    }
    zero_out(out, out_len);
    let Some(calls) = thread_calls() else {
        return Err(errno::NO_THREAD_SLOT);
    };
    // SAFETY: this thread's state; nothing else holds a reference into it.
    let services = unsafe { &mut (*calls).services };
    let slot = t.slot as usize;
    if services[slot].is_null() {
        let Some(thread_slot) = claim(svc) else {
            return Err(errno::NO_THREAD_SLOT);
        };
        services[slot] = Box::into_raw(Box::new(ServiceCalls {
            svc,
            thread_slot,
            ts: svc.thread_slot(thread_slot),
            entries: [UNRESOLVED; MAX_EXPORTS],
            maps: MapCache::new(svc),
        }));
    }
    let sc = services[slot];
    // SAFETY: as above.
    let e = unsafe { &mut (*sc).entries[index] };
    if e.hook.is_null() {
        *e = EntryCache {
            hook: export.hook,
            max_args: export.max_args as u64,
            lock: if export.serialized {
                export.lock
            } else {
                std::ptr::null()
            },
            word: 0,
            entry: 0,
            sc,
            // SAFETY: as above.
            ts: unsafe { (*sc).ts },
        };
    }
    Ok((sc, e))
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

#[inline(always)]
fn zero_out(out: u64, out_len: u64) {
    // A callee that fails or never replies leaves zeros, not stale caller bytes.
    // SAFETY: writable for `out_len` bytes by the contract of `xcall_call`.
    unsafe {
        if out_len == 8 {
            // The common one-word output without a call to memset.
            (out as *mut u64).write_unaligned(0);
        } else if out_len > 0 {
            std::ptr::write_bytes(out as *mut u8, 0, out_len as usize);
        }
    }
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

fn lock_serialized(lock: &AtomicU64) -> bool {
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
/// After a thread's first call of an export (which checks the allow-list and takes a thread
/// slot, out of line), a call is: the thread's cached entry (three dependent loads), the
/// argument size check, the epoch store, one acquire load of the published word compared
/// with the one this thread last ran, the caller's remaining budget, and the indirect call.
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
    let (last_target, last) = LAST.with(|c| c.get());
    let e = if target == last_target && !last.is_null() {
        // The target this thread called last: its entry is resolved.
        // SAFETY: this thread's state (see `LAST`), which lives until the thread ends.
        if args_len > unsafe { (*last).max_args } {
            return errno::ARGS_TOO_LARGE;
        }
        zero_out(out, out_len);
        last
    } else {
        // SAFETY: the caller's contract on `out`.
        match unsafe { find_entry(target, args_len, out, out_len) } {
            Ok(e) => e,
            Err(r) => return r,
        }
    };
    // SAFETY: this thread's state (see above).
    let (lock, max_args) = unsafe { ((*e).lock, (*e).max_args) };
    if !lock.is_null() || args_len != max_args {
        // A serialised entry, or arguments shorter than declared.
        // SAFETY: the caller's contract.
        return unsafe { run_general(e, args, args_len, out, out_len) };
    }
    // SAFETY: this thread's state; the pointers it holds were set at resolve time to its
    // service state, a hook slot and a thread slot of mappings that are never unmapped.
    let (sc, ts, hook) = unsafe { ((*e).sc, &*(*e).ts, &*(*e).hook) };
    enter(ts);
    // SAFETY: as above.
    let entry = match unsafe { running_entry(e, sc, hook, ts) } {
        Ok(entry) => entry,
        Err(r) => {
            leave(ts);
            return r;
        }
    };
    let r = run_entry(sc, hook, entry, args as *mut u8, out, out_len);
    leave(ts);
    r
}

/// The rest of [`xcall_call`] for a serialised entry (its lock word around the run) or
/// arguments shorter than declared (a zero-padded copy): out of line, so that the common
/// call keeps fewer values live.
///
/// # Safety
/// `e` is a resolved entry of this thread's state; `args` is readable for `args_len` bytes
/// and `out` writable for `out_len` bytes.
#[inline(never)]
unsafe fn run_general(e: *mut EntryCache, args: u64, args_len: u64, out: u64, out_len: u64) -> u64 {
    // SAFETY: this thread's state; the pointers it holds were set at resolve time to its
    // service state, a hook slot, a thread slot and a lock word of mappings that are never
    // unmapped.
    let (sc, ts, hook, lock) = unsafe { ((*e).sc, &*(*e).ts, &*(*e).hook, (*e).lock.as_ref()) };
    if let Some(lock) = lock {
        if !lock_serialized(lock) {
            return errno::BUSY;
        }
    }
    enter(ts);
    // SAFETY: as above.
    let entry = match unsafe { running_entry(e, sc, hook, ts) } {
        Ok(entry) => entry,
        Err(r) => {
            leave(ts);
            if let Some(lock) = lock {
                lock.store(0, Ordering::Release);
            }
            return r;
        }
    };
    // SAFETY: `max_args` of this thread's resolved entry.
    let max_args = unsafe { (*e).max_args };
    let r = if args_len == max_args {
        run_entry(sc, hook, entry, args as *mut u8, out, out_len)
    } else {
        run_padded(sc, hook, entry, max_args, args, args_len, out, out_len)
    };
    leave(ts);
    if let Some(lock) = lock {
        lock.store(0, Ordering::Release);
    }
    r
}

/// The entry of a target other than the one this thread called last: decodes it, finds or
/// resolves the thread's entry for it, checks the argument size and zeroes the output, and
/// makes it the last one.
///
/// # Safety
/// `out` must be writable for `out_len` bytes.
#[inline(never)]
unsafe fn find_entry(
    target: u64,
    args_len: u64,
    out: u64,
    out_len: u64,
) -> Result<*mut EntryCache, u64> {
    let Some(t) = Target::decode(target) else {
        return Err(errno::BAD_TARGET);
    };
    let (slot, index) = (t.slot as usize, t.export as usize);
    let calls = CALLS.with(|c| c.get());
    // SAFETY: `calls` is null or this thread's state, whose boxes live until the thread
    // ends; no reference into them is held across this block.
    let cached = unsafe {
        if calls.is_null() || slot >= MAX_SLOTS || index >= MAX_EXPORTS {
            None
        } else {
            let sc = (*calls).services[slot];
            if sc.is_null() || (*sc).entries[index].hook.is_null() {
                None
            } else {
                Some(&raw mut (*sc).entries[index])
            }
        }
    };
    let e = match cached {
        Some(e) => {
            // SAFETY: a resolved entry of this thread's state.
            if args_len > unsafe { (*e).max_args } {
                return Err(errno::ARGS_TOO_LARGE);
            }
            zero_out(out, out_len);
            e
        }
        // SAFETY: the caller's contract on `out`.
        None => unsafe { resolve(t, args_len, out, out_len) }?.1,
    };
    LAST.with(|c| c.set((target, e)));
    Ok(e)
}

/// The entry point of the version the hook publishes now, which this call runs start to
/// finish: the thread's cached one while the word is unchanged, else [`refresh`]ed.
///
/// # Safety
/// `e` is a resolved entry of this thread's state with `sc`, `hook` and `ts` its pointers,
/// and the caller has entered the epoch (`enter(ts)`).
#[inline(always)]
unsafe fn running_entry(
    e: *mut EntryCache,
    sc: *mut ServiceCalls,
    hook: &HookSlot,
    ts: &ThreadSlot,
) -> Result<EntryFn, u64> {
    let word = hook.active.load(Ordering::Acquire);
    // SAFETY: the caller's contract.
    let (seen, cached) = unsafe { ((*e).word, (*e).entry) };
    // `cached` is 0 until a word was checked: an entry never run here, whatever the word.
    let entry = if word == seen && cached != 0 {
        cached
    } else {
        // SAFETY: the caller's contract.
        refresh(sc, hook, ts, unsafe { &mut *e }, word)?
    };
    // SAFETY: `entry` is the entry point of the version published in `word`, checked by
    // `refresh` to lie in the callee's code arena, where a control plane placed verified
    // code linked for this address; the epoch the caller holds keeps it from being reclaimed.
    Ok(unsafe { std::mem::transmute::<usize, EntryFn>(entry) })
}

/// The published word differs from the one this thread last ran: wait out a hold, check it,
/// run the coherence step, revalidate the thread's map cache for the service, and remember
/// the word with its entry point.
#[cold]
#[inline(never)]
fn refresh(
    sc: *mut ServiceCalls,
    hook: &HookSlot,
    ts: &ThreadSlot,
    e: &mut EntryCache,
    mut word: u64,
) -> Result<usize, u64> {
    // SAFETY: this thread's state for the service.
    let svc = unsafe { (*sc).svc };
    if word & ACTIVE_HOLD != 0 {
        word = wait_for_release(svc, hook, ts, word);
        if word == e.word && e.entry != 0 {
            return Ok(e.entry);
        }
    }
    if active_version(word) == 0 {
        return Err(errno::NOT_DEPLOYED);
    }
    let offset = active_entry_offset(word) as u64;
    let code = svc.info.section(SectionId::Code);
    if offset < code.offset || offset >= code.end() || !offset.is_multiple_of(CODE_ENTRY_ALIGN) {
        hook.errors.fetch_add(1, Ordering::Relaxed);
        hook.rejected_word.store(word, Ordering::Relaxed);
        return Err(errno::CALLEE_FAILED);
    }
    sync_instruction_stream();
    // Maps created since this thread last looked may sit where maps it decoded were: the
    // code of `word`, published after they were created, may use them.
    // SAFETY: this thread's state for the service; no reference into it is live.
    unsafe { (*sc).maps.revalidate() };
    e.word = word;
    e.entry = (svc.base + offset) as usize;
    Ok(e.entry)
}

/// A control plane holds the entry (a collective update's bubble): wait for the release,
/// bounded by the callee region's hold timeout, outside the epoch so that the control plane
/// waiting for quiescence is not blocked by us; then run what is published.
#[cold]
fn wait_for_release(svc: &ServiceMap, hook: &HookSlot, ts: &ThreadSlot, mut word: u64) -> u64 {
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

/// Arguments shorter than declared: the callee may read all `max_args` bytes, so it gets a
/// zero-padded copy instead of the bytes beyond the caller's buffer. Out of line, so that the
/// common exact-size call does not reserve the buffer.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn run_padded(
    sc: *mut ServiceCalls,
    hook: &HookSlot,
    entry: EntryFn,
    max_args: u64,
    args: u64,
    args_len: u64,
    out: u64,
    out_len: u64,
) -> u64 {
    let mut padded = MaybeUninit::<[u8; MAX_ARGS as usize]>::uninit();
    let p = padded.as_mut_ptr() as *mut u8;
    // SAFETY: `max_args <= MAX_ARGS` (checked at attach time), `args` is readable for
    // `args_len < max_args` bytes (checked by `xcall_call`).
    unsafe {
        std::ptr::write_bytes(p, 0, max_args as usize);
        std::ptr::copy_nonoverlapping(args as *const u8, p, args_len as usize);
    }
    run_entry(sc, hook, entry, p, out, out_len)
}

#[inline(always)]
fn run_entry(
    sc: *mut ServiceCalls,
    hook: &HookSlot,
    entry: EntryFn,
    ctx: *mut u8,
    out: u64,
    out_len: u64,
) -> u64 {
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
    let cur = Current {
        calls: sc,
        out: out as *mut u8,
        out_len: out_len as usize,
    };
    // The callee helpers read it on this thread, during the entry call below.
    let previous = CURRENT.with(|c| c.replace(cur));
    let mut run = RunState::new(granted);
    // SAFETY: see `xcall_call`; `ctx` is readable for the declared size.
    let r0 = unsafe { entry(ctx, &mut run) };
    CURRENT.with(|c| c.set(previous));
    if let Some(state) = caller {
        // An exhausted callee left 0: the caller pays all it was granted.
        let spent = granted.saturating_sub(run.budget);
        // SAFETY: as above.
        unsafe { (*state).budget = (*state).budget.saturating_sub(spent) };
    }
    if run.status != RunStatus::Ok as u32 {
        return failed(hook, &run);
    }
    r0
}

#[cold]
fn failed(hook: &HookSlot, run: &RunState) -> u64 {
    hook.failures.fetch_add(1, Ordering::Relaxed);
    if run.status == RunStatus::BudgetExhausted as u32 {
        errno::BUDGET
    } else {
        errno::CALLEE_FAILED
    }
}

/// Why [`call`] failed: the typed form of the helper's negative returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The first argument is not an encoded [`rdx_xcall_plan::Target`].
    #[error("not a call target value")]
    BadTarget,
    /// No sandbox is attached at the target's slot in this process.
    #[error("no service is attached at that slot in this process")]
    NotMapped,
    /// The sandbox exports no entry at the target's index.
    #[error("the service exports no such entry")]
    NotExported,
    /// The entry's hook has no code published.
    #[error("the entry is exported but no code is deployed for it")]
    NotDeployed,
    /// The arguments are larger than the entry declares.
    #[error("the arguments are larger than the entry declares")]
    ArgsTooLarge,
    /// The callee ran out of instruction budget.
    #[error("the callee ran out of instruction budget")]
    Budget,
    /// The callee stopped abnormally, or its published word was invalid.
    #[error("the callee failed")]
    CalleeFailed,
    /// A serialised entry stayed busy past the wait limit.
    #[error("the serialised entry stayed busy")]
    Busy,
    /// Every thread slot of the callee's region is taken.
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
