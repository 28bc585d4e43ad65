//! Queued mode: a deoptimised run leaves the hook's thread. Its exact state, with copies of
//! the context and the packet it points into, goes to a fallback queue; the hook answers a
//! "deferred" verdict at once and the fast path keeps serving, while a fallback worker
//! thread finishes the run in the fallback image (`docs/deopt.md`).
//!
//! [`crate::Runtime::queued_fallback`] starts a worker thread for one hook and returns a
//! [`FallbackWorker`], whose [`FallbackWorker::run`] runs the hook and answers the configured
//! verdict for a run that deoptimised and was queued. The state transfer (copy and rebase,
//! packet copies below 4 GiB, the queue) is [`rdx_exec::transfer`], shared with `rdx-deopt`'s
//! in-process tier; the context layout a host configures queued mode with is re-exported here.
//!
//! The worker does not rely on the epoch of the run it continues (which ends when the hook
//! returns): the fallback image is copied out of the code arena when the run is queued
//! (once per published version, cached), the stack, context and packet are copies, and
//! XState maps are never freed while the region lives.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rdx_region::abi::{DeoptRunState, RunStatus};
use rdx_region::layout::SectionId;

use rdx_exec::transfer::{capture, Captured, FallbackQueue, PacketArena};
pub use rdx_exec::transfer::{ContextLayout, PacketField, PacketRole};

use super::{Hook, Prepared};
use crate::inner::Inner;
use crate::thread::{self, ThreadState};
use crate::RuntimeError;

/// Queued mode for one hook ([`crate::Runtime::queued_fallback`]).
#[derive(Clone, Debug)]
pub struct QueuedFallback {
    /// What the hook returns for a run that deoptimised and was queued.
    pub deferred_return: u64,
    /// The hook's context: its size and the fields that point at a packet.
    pub layout: ContextLayout,
    /// Largest packet a queued run may point at (bytes).
    pub packet_slot: usize,
    /// Runs in flight at once; when every slot is taken the hook's thread finishes the run
    /// itself (synchronously) rather than fail it or run it again.
    pub capacity: usize,
}

impl QueuedFallback {
    /// Queued mode for a context of `layout`, answering `deferred_return`; 2 KiB packets,
    /// 256 runs in flight.
    pub fn new(layout: ContextLayout, deferred_return: u64) -> QueuedFallback {
        QueuedFallback {
            deferred_return,
            layout,
            packet_slot: 2048,
            capacity: 256,
        }
    }
}

/// A queued run the fallback worker finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completed {
    /// The ticket [`FallbackWorker::last_ticket`] gave when the run was queued.
    pub ticket: u64,
    /// The run's final `r0`; `None` when it could not be finished (the hook's failure
    /// counter counts it).
    pub result: Option<u64>,
    /// The context and packet after the run (what the host forwards or answers with).
    pub ctx: Vec<u8>,
    /// The packet after the run.
    pub packet: Vec<u8>,
}

/// A fallback image copied out of the code arena, 16-byte aligned.
struct OwnedImage {
    words: Box<[u128]>,
    len: usize,
}

impl OwnedImage {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}

struct Deferred {
    captured: Captured,
    image: Arc<OwnedImage>,
}

/// Images cached per published active word (a word never comes back with other code).
const IMAGE_CACHE: usize = 8;

struct HostQueue {
    runtime_id: u64,
    hook: u32,
    deferred_return: u64,
    layout: ContextLayout,
    arena: Arc<PacketArena>,
    queue: FallbackQueue<Deferred>,
    images: Mutex<VecDeque<(u64, Arc<OwnedImage>)>>,
    /// The XState scratchpad: map values, shared with the worker, never rebased.
    shared: (u64, u64),
}

thread_local! {
    /// The queued run in progress on this thread: its hook's queue (kept alive by the
    /// `FallbackWorker` whose `run` set it) and its context.
    static QUEUED_RUN: Cell<(*const HostQueue, *mut u8)> =
        const { Cell::new((std::ptr::null(), std::ptr::null_mut())) };
    /// Ticket of this thread's last queued run.
    static LAST_TICKET: Cell<u64> = const { Cell::new(0) };
}

impl<'rt> FallbackWorker<'rt> {
    /// Puts `hook` (named `name`) in queued mode and starts its worker thread
    /// ([`crate::Runtime::queued_fallback`]).
    pub(crate) fn start(
        hook: Hook<'rt>,
        name: &str,
        cfg: QueuedFallback,
        mut done: impl FnMut(Completed) + Send + 'static,
    ) -> Result<Self, RuntimeError> {
        cfg.layout
            .check(cfg.layout.size)
            .map_err(|e| RuntimeError::Config(e.to_string()))?;
        let inner = hook.inner;
        let scratch = inner.info.section(SectionId::Scratch);
        let q = Arc::new(HostQueue {
            runtime_id: inner.id,
            hook: hook.index,
            deferred_return: cfg.deferred_return,
            layout: cfg.layout,
            arena: Arc::new(
                PacketArena::new(cfg.packet_slot, cfg.capacity)
                    .map_err(|e| RuntimeError::Config(e.to_string()))?,
            ),
            queue: FallbackQueue::new(cfg.capacity),
            images: Mutex::new(VecDeque::new()),
            shared: (inner.base + scratch.offset, inner.base + scratch.end()),
        });
        let worker_inner = hook.arc.clone();
        let worker_q = q.clone();
        let thread = std::thread::Builder::new()
            .name(format!("rdx-fallback-{name}"))
            .spawn(move || work(&worker_inner, &worker_q, &mut done))
            .map_err(|source| RuntimeError::Io {
                what: "cannot start the fallback worker for",
                path: name.into(),
                source,
            })?;
        Ok(FallbackWorker {
            hook,
            q,
            thread: Some(thread),
        })
    }
}

/// The fallback worker: finishes queued runs until the queue is closed and drained.
fn work(inner: &Arc<Inner>, q: &HostQueue, done: &mut impl FnMut(Completed)) {
    let ts = thread::state_slow(inner);
    while let Some((ticket, mut d)) = q.queue.pop() {
        let result = match ts {
            Some(ts) => {
                // SAFETY: this thread's live state; the reference ends before the run,
                // whose helpers reach it through the thread-local pointer.
                let inside = unsafe { &mut *ts }.enter();
                let state: *mut DeoptRunState = d.captured.state_mut();
                let r = crate::deopt::resume_owned(inner, d.image.bytes(), state);
                // SAFETY: as above; the run has returned.
                unsafe { &mut *ts }.leave(inside);
                r
            }
            None => None,
        };
        if result.is_none() {
            inner.slot(q.hook).failures.fetch_add(1, Ordering::Relaxed);
        }
        done(Completed {
            ticket,
            result,
            ctx: d.captured.ctx().to_vec(),
            packet: d.captured.packet().to_vec(),
        });
    }
}

/// A hook in queued mode and its fallback worker thread. Dropping it finishes the queued
/// runs, stops the worker and ends queued mode.
pub struct FallbackWorker<'rt> {
    hook: Hook<'rt>,
    q: Arc<HostQueue>,
    thread: Option<JoinHandle<()>>,
}

impl FallbackWorker<'_> {
    /// Runs the hook on `ctx`: the program's `r0`, or the deferred verdict when the run
    /// deoptimised and was queued (its ticket is then [`FallbackWorker::last_ticket`]).
    #[inline]
    pub fn run<T>(&self, ctx: &mut T) -> u64 {
        self.run_raw(ctx as *mut T as *mut u8)
    }

    /// [`FallbackWorker::run`] on a raw context pointer (of the layout's size at least).
    pub fn run_raw(&self, ctx: *mut u8) -> u64 {
        // One thread-local access for both the note and its removal.
        QUEUED_RUN.with(|c| {
            let previous = c.replace((Arc::as_ptr(&self.q), ctx));
            let r0 = self.hook.run_raw(ctx);
            c.set(previous);
            r0
        })
    }

    /// The ticket of this thread's last queued run.
    pub fn last_ticket() -> u64 {
        LAST_TICKET.with(|c| c.get())
    }

    /// Runs waiting for the worker.
    pub fn pending(&self) -> usize {
        self.q.queue.len()
    }

    /// The hook.
    pub fn hook(&self) -> Hook<'_> {
        self.hook
    }
}

impl Drop for FallbackWorker<'_> {
    fn drop(&mut self) {
        self.q.queue.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Hook<'_> {
    /// Queues a deoptimised run when this hook is in queued mode and the run came through
    /// its [`FallbackWorker::run`] on this thread (not nested): `Some(deferred verdict)`.
    /// `None` leaves the run to the synchronous path (not queued mode, or no slot free, or
    /// a packet too large for a slot: the state is untouched).
    pub(super) fn defer(&self, ts: *mut ThreadState, run: &Prepared) -> Option<u64> {
        let (q, ctx) = QUEUED_RUN.with(|c| c.get());
        if q.is_null() {
            return None;
        }
        // SAFETY: set by `FallbackWorker::run`, which holds the queue (through its `Arc`)
        // until the hook returns; this is a run inside that call on this thread.
        let q = unsafe { &*q };
        if q.runtime_id != self.runtime_id || q.hook != self.index {
            return None;
        }
        // SAFETY: this thread's live state; the reference ends in this block.
        let (nesting, word, entry) = unsafe {
            let t = &*ts;
            let (w, e) = t.seen[self.index as usize];
            (t.nesting, w, e)
        };
        if nesting != 0 {
            return None;
        }
        let image = q.image(
            self.inner,
            run,
            (entry as usize == run.entry as usize).then_some(word),
        )?;
        // SAFETY: the hook was called with a context of at least the layout's size (the
        // worker's contract), whose packet fields point at the live packet.
        let ctx = unsafe { std::slice::from_raw_parts(ctx.cast_const(), q.layout.size) };
        // SAFETY: `run.state` is this run's DeoptRunState, filled at its failed guard.
        let state = unsafe { &mut *run.state.cast::<DeoptRunState>() };
        let (lo, hi) = q.shared;
        // SAFETY: as above.
        let captured =
            unsafe { capture(state, ctx, &q.layout, &q.arena, |v| (lo..hi).contains(&v)) }.ok()?;
        let ticket = q.queue.push(Deferred { captured, image }).ok()?;
        LAST_TICKET.with(|c| c.set(ticket));
        state.run.status = RunStatus::Ok as u32;
        Some(q.deferred_return)
    }
}

impl HostQueue {
    /// The fallback image of the code `run` ran, copied out of the code arena (cached by
    /// its active word when known).
    fn image(&self, inner: &Inner, run: &Prepared, word: Option<u64>) -> Option<Arc<OwnedImage>> {
        if let Some(w) = word {
            let cache = self.images.lock().expect("image cache");
            if let Some((_, img)) = cache.iter().find(|(k, _)| *k == w) {
                return Some(img.clone());
            }
        }
        let bytes = crate::deopt::image_bytes(inner, run.entry as usize as u64)?;
        let mut words = vec![0u128; bytes.len().div_ceil(16)].into_boxed_slice();
        // SAFETY: `words` holds at least bytes.len() bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast(), bytes.len())
        };
        let img = Arc::new(OwnedImage {
            words,
            len: bytes.len(),
        });
        if let Some(w) = word {
            let mut cache = self.images.lock().expect("image cache");
            if cache.len() >= IMAGE_CACHE {
                cache.pop_front();
            }
            cache.push_back((w, img.clone()));
        }
        Some(img)
    }
}
