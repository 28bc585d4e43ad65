//! The state transfer of a deoptimised run that leaves its thread (queued mode,
//! `docs/deopt.md`): its exact state, with copies of the context and the packet it points
//! into, is captured for another thread to continue. Both executors that continue such runs
//! use it: the host's queued mode (`rdx-runtime`, in the fallback image) and the in-process
//! elite tier of `rdx-deopt` (in the interpreter).
//!
//! - [`ContextLayout`]: a hook's context size and the fields that point at a packet;
//! - [`LowMemory`] and the [`PacketArena`]: packet copies below 4 GiB, where 32-bit context
//!   fields can point;
//! - [`capture`]: copy and rebase, into a [`Captured`] that owns the copies;
//! - [`FallbackQueue`]: the queue from the hook's thread to the worker.
//!
//! Pointers are rebased onto the copies: a 64-bit word of the state — a register of the
//! innermost frame, a callee-saved register of a caller frame, or an 8-byte-aligned word of a
//! live stack frame — whose value lies in the old stack (its end included: the entry frame's
//! `r10`), the old context, or the 64 KiB from the old packet's start (packet pointers may
//! point past `data_end` before a bounds check fails, and must keep comparing the same way
//! against it) without lying in shared memory (a map value), is moved by the distance
//! between the old and the new copy; the context's packet fields ([`ContextLayout`]) are
//! rewritten to point into the packet copy. Map pointers stay as they are: maps are shared
//! with the worker. Verified programs spill pointers only as aligned 8-byte words, so the
//! rule finds every pointer; a scalar that happens to equal an address in those ranges
//! would be moved too, which a verified program cannot observe except by comparing it with
//! a pointer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rdx_region::abi::{DeoptRunState, RunState, RunStatus, DEOPT_FRAME_BYTES, DEOPT_MAX_FRAMES};

/// How far past its start a packet pointer may point (the verifier's largest packet
/// offset), so that pointers past `data_end` are rebased too.
pub const PACKET_POINTER_REACH: u64 = 1 << 16;

/// Which part of the packet a context field points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketRole {
    /// The packet's first byte (`data`).
    Start,
    /// One past its last byte (`data_end`).
    End,
    /// The start of its metadata (`data_meta`).
    Meta,
}

/// A context field holding a packet pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketField {
    /// Offset of the field in the context.
    pub offset: usize,
    /// 4 (a 32-bit field such as `xdp_md.data`: the copy is placed below 4 GiB) or 8.
    pub width: usize,
    /// Which part of the packet it points at.
    pub role: PacketRole,
}

/// The shape of a hook's context as far as copying it is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextLayout {
    /// The context's size in bytes.
    pub size: usize,
    /// Its fields that point into a packet.
    pub packet_fields: Vec<PacketField>,
}

impl ContextLayout {
    /// A context of `size` bytes that points at no packet.
    pub fn plain(size: usize) -> ContextLayout {
        ContextLayout {
            size,
            packet_fields: Vec::new(),
        }
    }

    /// `struct xdp_md` as programs see it: `data`, `data_end`, `data_meta` are 32-bit.
    pub fn xdp_md() -> ContextLayout {
        let f = |offset, role| PacketField {
            offset,
            width: 4,
            role,
        };
        ContextLayout {
            size: 24,
            packet_fields: vec![
                f(0, PacketRole::Start),
                f(4, PacketRole::End),
                f(8, PacketRole::Meta),
            ],
        }
    }

    /// The value of packet field `f` in `ctx` (which holds at least `self.size` bytes).
    pub fn read(&self, ctx: &[u8], f: &PacketField) -> u64 {
        let b = &ctx[f.offset..f.offset + f.width];
        if f.width == 4 {
            u32::from_le_bytes(b.try_into().expect("4 bytes")) as u64
        } else {
            u64::from_le_bytes(b.try_into().expect("8 bytes"))
        }
    }

    fn field(&self, ctx: &[u8], role: PacketRole) -> Option<u64> {
        self.packet_fields
            .iter()
            .find(|f| f.role == role)
            .map(|f| self.read(ctx, f))
    }

    /// The packet `ctx` points at, from its metadata (or start) to its end: `(lo, end)`;
    /// `(0, 0)` for a layout without packet fields.
    pub fn packet_bounds(&self, ctx: &[u8]) -> Result<(u64, u64), QueueError> {
        self.check(ctx.len())?;
        let start = self.field(ctx, PacketRole::Start).unwrap_or(0);
        let end = self.field(ctx, PacketRole::End).unwrap_or(start);
        let lo = self
            .field(ctx, PacketRole::Meta)
            .map_or(start, |m| m.min(start));
        if end < lo {
            return Err(QueueError::Context(format!(
                "packet end {end:#x} is below its start {lo:#x}"
            )));
        }
        Ok((lo, end))
    }

    /// Checks that a context of `ctx_len` bytes fits the layout and its fields fit in it.
    pub fn check(&self, ctx_len: usize) -> Result<(), QueueError> {
        if ctx_len < self.size {
            return Err(QueueError::Context(format!(
                "context is {ctx_len} bytes, the layout needs {}",
                self.size
            )));
        }
        for f in &self.packet_fields {
            if !matches!(f.width, 4 | 8) || f.offset + f.width > self.size {
                return Err(QueueError::Context(format!(
                    "packet field at {} of width {} does not fit",
                    f.offset, f.width
                )));
            }
        }
        Ok(())
    }
}

/// Why a deoptimised run could not be queued.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The run state handed over is not one that can be continued.
    #[error("state to queue: {0}")]
    State(String),
    /// The context does not match its layout.
    #[error("context: {0}")]
    Context(String),
    /// The packet is larger than a slot of the arena.
    #[error("packet of {len} bytes exceeds the queue's {slot}-byte packet slots")]
    PacketTooLarge {
        /// The packet's length.
        len: usize,
        /// The arena's slot size.
        slot: usize,
    },
    /// Every slot of the queue is taken.
    #[error("fallback queue is full ({0} runs waiting)")]
    Full(usize),
    /// The arena's memory below 4 GiB could not be mapped.
    #[error("cannot map the packet arena: {0}")]
    Arena(std::io::Error),
    /// The queue was closed: no more runs are taken.
    #[error("the queue is closed")]
    Closed,
}

/// Anonymous read+write memory below 4 GiB, where the 32-bit packet pointers of an `xdp_md`
/// context (`data`, `data_end`) can point: packet copies here, packet buffers of hosts and
/// tools that run packet programs in-process. Unmapped on drop.
pub struct LowMemory {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by this value; access goes through `&self`/`&mut self` or raw
// pointers whose users take on the aliasing rules.
unsafe impl Send for LowMemory {}
// SAFETY: as above.
unsafe impl Sync for LowMemory {}

impl LowMemory {
    /// Maps `len` bytes below 4 GiB (`MAP_32BIT` on x86-64); an error when the kernel
    /// places them higher.
    pub fn new(len: usize) -> std::io::Result<LowMemory> {
        #[cfg(target_arch = "x86_64")]
        let low = libc::MAP_32BIT;
        #[cfg(not(target_arch = "x86_64"))]
        let low = 0;
        // SAFETY: fresh anonymous mapping, result checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | low,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        if (p as u64) + len as u64 > 1 << 32 {
            // SAFETY: our mapping.
            unsafe { libc::munmap(p, len) };
            return Err(std::io::Error::other(
                "no memory below 4 GiB for 32-bit packet pointers",
            ));
        }
        Ok(LowMemory { ptr: p.cast(), len })
    }

    /// The mapping's first byte (below 4 GiB, so it fits a 32-bit context field).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: our mapping of `len` bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The mapping's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: our mapping of `len` bytes, borrowed exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for LowMemory {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Fixed-size packet slots in one mapping below 4 GiB, so that 32-bit context fields can
/// point into copies; and run states to copy deoptimised states into, recycled so that
/// queueing a run allocates nothing in the steady state.
pub struct PacketArena {
    memory: LowMemory,
    slot: usize,
    slots: usize,
    /// One lock for both: a capture takes a slot and a spare, a finished run gives both back.
    free: Mutex<Free>,
}

/// Free packet slots, and run states and context buffers of finished runs.
struct Free {
    slots: Vec<usize>,
    spares: Vec<(Box<DeoptRunState>, Vec<u64>)>,
}

// SAFETY: the mapping is owned by the arena; slots are handed out exclusively (free list
// under a mutex) and each is only touched by the run that holds it.
unsafe impl Send for PacketArena {}
// SAFETY: as above.
unsafe impl Sync for PacketArena {}

impl PacketArena {
    /// `slots` packet slots of at least `slot` bytes each (rounded up to 64).
    pub fn new(slot: usize, slots: usize) -> Result<PacketArena, QueueError> {
        let slot = slot.max(64).next_multiple_of(64);
        let slots = slots.max(1);
        let memory = LowMemory::new(slot * slots).map_err(QueueError::Arena)?;
        Ok(PacketArena {
            memory,
            slot,
            slots,
            free: Mutex::new(Free {
                slots: (0..slots).rev().collect(),
                spares: Vec::new(),
            }),
        })
    }

    /// Bytes of one packet slot.
    pub fn slot_bytes(&self) -> usize {
        self.slot
    }
}

/// A packet copy in the arena; the slot returns to the arena when its [`Captured`] drops.
struct PacketCopy {
    arena: Arc<PacketArena>,
    index: usize,
    len: usize,
}

impl PacketCopy {
    fn addr(&self) -> u64 {
        self.arena.memory.as_ptr() as u64 + (self.index * self.arena.slot) as u64
    }
}

/// A deoptimised state with its own copies of the context and packet, every pointer
/// rebased onto them: what a fallback worker resumes.
pub struct Captured {
    /// Always `Some` until drop, which returns it to the arena's spares with `ctx`.
    state: Option<Box<DeoptRunState>>,
    ctx: Vec<u64>,
    ctx_len: usize,
    packet: PacketCopy,
}

// SAFETY: the raw pointers inside the state point into this value's own copies (stack,
// context, packet slot) or into maps shared by design; the run is moved, never shared.
unsafe impl Send for Captured {}

impl Captured {
    /// The state to resume (its pointers designate this value's copies).
    pub fn state_mut(&mut self) -> &mut DeoptRunState {
        self.state.as_mut().expect("present until drop")
    }

    /// The context copy.
    pub fn ctx(&self) -> &[u8] {
        // SAFETY: ctx holds ctx_len bytes.
        unsafe { std::slice::from_raw_parts(self.ctx.as_ptr().cast::<u8>(), self.ctx_len) }
    }

    /// The state and the context copy at once (a resumed run uses both).
    pub fn parts_mut(&mut self) -> (&mut DeoptRunState, &mut [u8]) {
        // SAFETY: ctx holds ctx_len bytes, a separate allocation from the state.
        let ctx = unsafe {
            std::slice::from_raw_parts_mut(self.ctx.as_mut_ptr().cast::<u8>(), self.ctx_len)
        };
        (self.state.as_mut().expect("present until drop"), ctx)
    }

    /// Address and length of the packet copy.
    pub fn packet_region(&self) -> (u64, usize) {
        (self.packet.addr(), self.packet.len)
    }

    /// The packet copy.
    pub fn packet(&self) -> &[u8] {
        // SAFETY: inside the arena, exclusively ours while this value lives.
        unsafe { std::slice::from_raw_parts(self.packet.addr() as *const u8, self.packet.len) }
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        let mut free = self.packet.arena.free.lock().expect("arena lock");
        free.slots.push(self.packet.index);
        if let Some(state) = self.state.take() {
            free.spares.push((state, std::mem::take(&mut self.ctx)));
        }
    }
}

/// Copies a deoptimised state (status `Deopt`) with the context and packet it points into,
/// rebasing every pointer onto the copies; `shared(v)` says that address `v` lies in memory
/// shared with the worker (a map value), which is never rebased.
///
/// # Safety
/// `ctx` is the context the elite run used; the packet fields of `layout` in it point at
/// readable packet memory (as when the hook was called).
pub unsafe fn capture(
    state: &DeoptRunState,
    ctx: &[u8],
    layout: &ContextLayout,
    arena: &Arc<PacketArena>,
    shared: impl Fn(u64) -> bool,
) -> Result<Captured, QueueError> {
    if state.run.status != RunStatus::Deopt as u32 {
        return Err(QueueError::State(format!(
            "run status {} is not Deopt",
            state.run.status
        )));
    }
    let depth = state.depth as usize;
    if depth >= DEOPT_MAX_FRAMES {
        return Err(QueueError::State(format!("depth {depth}")));
    }
    let (lo, end) = layout.packet_bounds(ctx)?;
    let len = (end - lo) as usize;
    if len > arena.slot {
        return Err(QueueError::PacketTooLarge {
            len,
            slot: arena.slot,
        });
    }
    let (index, spare) = {
        let mut free = arena.free.lock().expect("arena lock");
        let index = free.slots.pop().ok_or(QueueError::Full(arena.slots))?;
        (index, free.spares.pop())
    };
    let packet = PacketCopy {
        arena: arena.clone(),
        index,
        len,
    };
    // SAFETY: the caller vouches that [lo, end) is readable; the slot is ours and at least
    // `len` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(lo as *const u8, packet.addr() as *mut u8, len);
    }
    let (mut copy, mut ctx_copy) = spare.unwrap_or_else(|| (DeoptRunState::boxed(0), Vec::new()));
    ctx_copy.clear();
    ctx_copy.resize(ctx.len().div_ceil(8), 0);
    // SAFETY: the copy has at least ctx.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(ctx.as_ptr(), ctx_copy.as_mut_ptr().cast(), ctx.len()) };

    copy.run = RunState {
        budget: state.run.budget,
        status: state.run.status,
        reserved: 0,
        env: state.run.env,
    };
    copy.pc = state.pc;
    copy.depth = state.depth;
    copy.regs = state.regs;
    // Only the callers' frames are live (a spare state's others are stale, never read).
    copy.frames[..depth].copy_from_slice(&state.frames[..depth]);
    // Only the live frames: frame k lies below top - 512 k.
    let live = (depth + 1) * DEOPT_FRAME_BYTES;
    let total = copy.stack.len();
    copy.stack[total - live..].copy_from_slice(&state.stack[total - live..]);

    let old_stack = (state.stack_top() - total as u64, state.stack_top());
    let new_stack_lo = copy.stack_top() - total as u64;
    let old_ctx = (ctx.as_ptr() as u64, ctx.as_ptr() as u64 + ctx.len() as u64);
    let new_ctx = ctx_copy.as_ptr() as u64;
    let new_packet = packet.addr();
    let has_packet = !layout.packet_fields.is_empty();
    let rebase = |v: u64| -> u64 {
        // The stack's end is included: it is the entry frame's r10.
        if (old_stack.0..=old_stack.1).contains(&v) {
            v - old_stack.0 + new_stack_lo
        } else if (old_ctx.0..old_ctx.1).contains(&v) {
            v - old_ctx.0 + new_ctx
        } else if has_packet
            && (lo..lo.saturating_add(PACKET_POINTER_REACH)).contains(&v)
            && !shared(v)
        {
            v - lo + new_packet
        } else {
            v
        }
    };
    for r in copy.regs.iter_mut() {
        *r = rebase(*r);
    }
    for f in copy.frames[..depth].iter_mut() {
        for r in f.saved.iter_mut() {
            *r = rebase(*r);
        }
    }
    for word in copy.stack[total - live..].chunks_exact_mut(8) {
        let v = u64::from_le_bytes(word.try_into().expect("8 bytes"));
        let r = rebase(v);
        if r != v {
            word.copy_from_slice(&r.to_le_bytes());
        }
    }
    // SAFETY: ctx_copy holds ctx.len() >= layout.size bytes.
    let ctx_bytes =
        unsafe { std::slice::from_raw_parts_mut(ctx_copy.as_mut_ptr().cast::<u8>(), ctx.len()) };
    for f in &layout.packet_fields {
        let v = rebase(layout.read(ctx, f));
        if f.width == 4 {
            ctx_bytes[f.offset..f.offset + 4].copy_from_slice(&(v as u32).to_le_bytes());
        } else {
            ctx_bytes[f.offset..f.offset + 8].copy_from_slice(&v.to_le_bytes());
        }
    }
    Ok(Captured {
        state: Some(copy),
        ctx: ctx_copy,
        ctx_len: ctx.len(),
        packet,
    })
}

struct Pending<T> {
    runs: VecDeque<(u64, T)>,
    closed: bool,
    /// Workers blocked in `pop` that no push has woken yet: a push only wakes one (a
    /// futex system call) when there is one.
    sleepers: usize,
}

/// Deoptimised runs waiting for a fallback worker, each with a ticket.
pub struct FallbackQueue<T> {
    pending: Mutex<Pending<T>>,
    ready: Condvar,
    next_ticket: AtomicU64,
    /// Runs queued, for a worker to spin on without the lock before it sleeps.
    queued: AtomicUsize,
}

/// Polls of [`FallbackQueue::queued`] (then yields) before a worker sleeps: a wake-up is a
/// futex call on the pushing thread and a context switch, which bursts of deoptimisations
/// would otherwise pay per run.
const SPINS: u32 = 256;
const YIELDS: u32 = 16;

impl<T> FallbackQueue<T> {
    /// An empty queue that holds at most `capacity` runs.
    pub fn new(capacity: usize) -> FallbackQueue<T> {
        FallbackQueue {
            pending: Mutex::new(Pending {
                runs: VecDeque::with_capacity(capacity),
                closed: false,
                sleepers: 0,
            }),
            ready: Condvar::new(),
            next_ticket: AtomicU64::new(1),
            queued: AtomicUsize::new(0),
        }
    }

    /// Hands a run to the workers; returns its ticket.
    pub fn push(&self, run: T) -> Result<u64, QueueError> {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let mut p = self.pending.lock().expect("queue lock");
        if p.closed {
            return Err(QueueError::Closed);
        }
        p.runs.push_back((ticket, run));
        self.queued.fetch_add(1, Ordering::Release);
        let wake = p.sleepers > 0;
        if wake {
            p.sleepers -= 1;
        }
        drop(p);
        if wake {
            self.ready.notify_one();
        }
        Ok(ticket)
    }

    /// Runs waiting.
    pub fn len(&self) -> usize {
        self.pending.lock().expect("queue lock").runs.len()
    }

    /// Whether no run is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// No more runs: workers finish what is queued and return.
    pub fn close(&self) {
        let mut p = self.pending.lock().expect("queue lock");
        p.closed = true;
        p.sleepers = 0;
        drop(p);
        self.ready.notify_all();
    }

    /// Takes the next run, waiting for one (spinning briefly before it sleeps); `None` once
    /// the queue is closed and drained.
    pub fn pop(&self) -> Option<(u64, T)> {
        let mut polls = 0u32;
        loop {
            let mut p = self.pending.lock().expect("queue lock");
            if let Some(r) = p.runs.pop_front() {
                self.queued.fetch_sub(1, Ordering::Relaxed);
                return Some(r);
            }
            if p.closed {
                return None;
            }
            if polls < SPINS + YIELDS {
                drop(p);
                while polls < SPINS + YIELDS && self.queued.load(Ordering::Acquire) == 0 {
                    if polls < SPINS {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                    polls += 1;
                }
                continue;
            }
            polls = 0;
            p.sleepers += 1;
            // A push that finds this sleeper counts it off and wakes it; a spurious wake-up
            // leaves it counted, which costs at most one needless wake-up later.
            drop(self.ready.wait(p).expect("queue lock"));
        }
    }
}
