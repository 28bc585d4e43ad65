//! Queued mode: a deoptimised run leaves the hook's thread. Its exact state, with copies of
//! the context and the packet it points into, goes to a [`FallbackQueue`]; the hook answers
//! "deferred" at once and the fast path keeps serving, while a fallback worker resumes the
//! run in the interpreter.
//!
//! Pointers are rebased onto the copies: a 64-bit word of the state — a register of the
//! innermost frame, a callee-saved register of a caller frame, or an 8-byte-aligned word of a
//! live stack frame — whose value lies in the old stack (its end included: the entry frame's
//! `r10`), the old context, or the 64 KiB from the old packet's start (packet pointers may
//! point past `data_end` before a bounds check fails, and must keep comparing the same way
//! against it) without lying in a map value, is moved by the distance between the old and
//! the new copy; the context's packet fields ([`ContextLayout`]) are rewritten to
//! point into the packet copy. Map pointers stay as they are: maps are shared with the worker.
//! Verified programs spill pointers only as aligned 8-byte words, so the rule finds every
//! pointer; a scalar that happens to equal an address in those ranges would be moved too,
//! which a verified program cannot observe except by comparing it with a pointer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rdx_bpf::interp::{PacketRegion, ResumeError, Vm};
use rdx_bpf::maps::MapSet;
use rdx_region::abi::{DeoptRunState, RunStatus, DEOPT_FRAME_BYTES, DEOPT_MAX_FRAMES};

/// How far past its start a packet pointer may point (the verifier's largest packet
/// offset), so that pointers past `data_end` are rebased too.
const PACKET_POINTER_REACH: u64 = 1 << 16;

/// Which part of the packet a context field points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketRole {
    Start,
    End,
    Meta,
}

/// A context field holding a packet pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketField {
    pub offset: usize,
    /// 4 (a 32-bit field such as `xdp_md.data`: the copy is placed below 4 GiB) or 8.
    pub width: usize,
    pub role: PacketRole,
}

/// The shape of a hook's context as far as copying it is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextLayout {
    pub size: usize,
    pub packet_fields: Vec<PacketField>,
}

impl ContextLayout {
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

    fn read(&self, ctx: &[u8], f: &PacketField) -> u64 {
        let b = &ctx[f.offset..f.offset + f.width];
        if f.width == 4 {
            u32::from_le_bytes(b.try_into().expect("4 bytes")) as u64
        } else {
            u64::from_le_bytes(b.try_into().expect("8 bytes"))
        }
    }

    /// The packet region a context of this layout points at (from its start, or metadata,
    /// to its end), for resuming on the original context.
    pub fn packet_region(&self, ctx: &[u8]) -> Option<PacketRegion> {
        self.check(ctx.len()).ok()?;
        let field = |role| {
            self.packet_fields
                .iter()
                .find(|f| f.role == role)
                .map(|f| self.read(ctx, f))
        };
        let start = field(PacketRole::Start)?;
        let end = field(PacketRole::End)?;
        let lo = field(PacketRole::Meta).map_or(start, |m| m.min(start));
        (end >= lo).then_some(PacketRegion {
            addr: lo,
            len: end - lo,
            writable: true,
        })
    }

    fn check(&self, ctx_len: usize) -> Result<(), QueueError> {
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
    #[error("state to queue: {0}")]
    State(String),
    #[error("context: {0}")]
    Context(String),
    #[error("packet of {len} bytes exceeds the queue's {slot}-byte packet slots")]
    PacketTooLarge { len: usize, slot: usize },
    #[error("fallback queue is full ({0} runs waiting)")]
    Full(usize),
    #[error("cannot map the packet arena: {0}")]
    Arena(std::io::Error),
    #[error("the queue is closed")]
    Closed,
}

/// Fixed-size packet slots in one mapping below 4 GiB, so that 32-bit context fields can
/// point into copies; and run states to copy deoptimised states into, recycled so that
/// queueing a run allocates nothing in the steady state.
struct PacketArena {
    base: *mut u8,
    slot: usize,
    slots: usize,
    free: Mutex<Vec<usize>>,
    spare_states: Mutex<Vec<Box<DeoptRunState>>>,
}

// SAFETY: the mapping is owned by the arena; slots are handed out exclusively (free list
// under a mutex) and each is only touched by the run that holds it.
unsafe impl Send for PacketArena {}
// SAFETY: as above.
unsafe impl Sync for PacketArena {}

impl PacketArena {
    fn new(slot: usize, slots: usize) -> Result<PacketArena, QueueError> {
        let len = slot * slots;
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
            return Err(QueueError::Arena(std::io::Error::last_os_error()));
        }
        if (p as u64) + len as u64 > 1 << 32 {
            // SAFETY: our mapping.
            unsafe { libc::munmap(p, len) };
            return Err(QueueError::Arena(std::io::Error::other(
                "no memory below 4 GiB for 32-bit packet pointers",
            )));
        }
        Ok(PacketArena {
            base: p.cast(),
            slot,
            slots,
            free: Mutex::new((0..slots).rev().collect()),
            spare_states: Mutex::new(Vec::new()),
        })
    }
}

impl Drop for PacketArena {
    fn drop(&mut self) {
        // SAFETY: our mapping; every slot holder keeps the arena alive through an Arc.
        unsafe { libc::munmap(self.base.cast(), self.slot * self.slots) };
    }
}

/// A packet copy in the arena; the slot returns to the arena on drop.
struct PacketCopy {
    arena: Arc<PacketArena>,
    index: usize,
    len: usize,
}

impl PacketCopy {
    fn addr(&self) -> u64 {
        self.arena.base as u64 + (self.index * self.arena.slot) as u64
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: inside the arena, exclusively ours while this value lives.
        unsafe { std::slice::from_raw_parts(self.addr() as *const u8, self.len) }
    }
}

impl Drop for PacketCopy {
    fn drop(&mut self) {
        self.arena.free.lock().expect("arena lock").push(self.index);
    }
}

/// A deoptimised run waiting for the fallback worker: its state and its own copies of the
/// context and packet, every pointer rebased onto them.
pub struct DeferredRun {
    /// Always `Some` until drop, which returns it to the arena's spares.
    state: Option<Box<DeoptRunState>>,
    ctx: Box<[u64]>,
    ctx_len: usize,
    packet: PacketCopy,
    metered: bool,
}

// SAFETY: the raw pointers inside the state point into this value's own copies (stack,
// context, packet slot) or into maps shared by design; the run is moved, never shared.
unsafe impl Send for DeferredRun {}

/// A finished deferred run.
#[derive(Debug)]
pub struct Completed {
    pub ticket: u64,
    pub result: Result<u64, ResumeError>,
    /// The context and packet after the run (what a host would forward or answer with).
    pub ctx: Vec<u8>,
    pub packet: Vec<u8>,
}

impl DeferredRun {
    /// Copies a deoptimised state with the context and packet it points into.
    ///
    /// # Safety
    /// `ctx` is the context the elite run used; the packet fields of `layout` in it point
    /// at readable packet memory (as when the hook was called).
    pub unsafe fn capture(
        state: &DeoptRunState,
        ctx: &[u8],
        layout: &ContextLayout,
        maps: &MapSet,
        queue: &FallbackQueue,
        metered: bool,
    ) -> Result<DeferredRun, QueueError> {
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
        layout.check(ctx.len())?;
        let field = |role| {
            layout
                .packet_fields
                .iter()
                .find(|f| f.role == role)
                .map(|f| layout.read(ctx, f))
        };
        let start = field(PacketRole::Start).unwrap_or(0);
        let end = field(PacketRole::End).unwrap_or(start);
        let lo = field(PacketRole::Meta).map_or(start, |m| m.min(start));
        if end < lo {
            return Err(QueueError::Context(format!(
                "packet end {end:#x} is below its start {lo:#x}"
            )));
        }
        let len = (end - lo) as usize;
        if len > queue.arena.slot {
            return Err(QueueError::PacketTooLarge {
                len,
                slot: queue.arena.slot,
            });
        }
        let index = queue
            .arena
            .free
            .lock()
            .expect("arena lock")
            .pop()
            .ok_or(QueueError::Full(queue.arena.slots))?;
        let packet = PacketCopy {
            arena: queue.arena.clone(),
            index,
            len,
        };
        // SAFETY: the caller vouches that [lo, end) is readable; the slot is ours and at
        // least `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(lo as *const u8, packet.addr() as *mut u8, len);
        }
        let mut ctx_copy = vec![0u64; ctx.len().div_ceil(8)].into_boxed_slice();
        // SAFETY: the copy has at least ctx.len() bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(ctx.as_ptr(), ctx_copy.as_mut_ptr().cast(), ctx.len())
        };

        let spare = queue.arena.spare_states.lock().expect("arena lock").pop();
        let mut copy = spare.unwrap_or_else(|| DeoptRunState::boxed(0));
        copy.run = rdx_region::abi::RunState {
            budget: state.run.budget,
            status: state.run.status,
            reserved: 0,
            env: state.run.env,
        };
        copy.pc = state.pc;
        copy.depth = state.depth;
        copy.regs = state.regs;
        copy.frames = state.frames;
        let live = (depth + 1) * DEOPT_FRAME_BYTES;
        let total = copy.stack.len();
        copy.stack[total - live..].copy_from_slice(&state.stack[total - live..]);

        let old_stack = (state.stack_top() - total as u64, state.stack_top());
        let new_stack_lo = copy.stack_top() - total as u64;
        let old_ctx = (ctx.as_ptr() as u64, ctx.as_ptr() as u64 + ctx.len() as u64);
        let new_ctx = ctx_copy.as_ptr() as u64;
        let new_packet = packet.addr();
        let rebase = |v: u64| -> u64 {
            // The stack's end is included: it is the entry frame's r10.
            if (old_stack.0..=old_stack.1).contains(&v) {
                v - old_stack.0 + new_stack_lo
            } else if (old_ctx.0..old_ctx.1).contains(&v) {
                v - old_ctx.0 + new_ctx
            } else if (lo..lo + PACKET_POINTER_REACH).contains(&v)
                && maps.value_access(v, 1).is_none()
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
            word.copy_from_slice(&rebase(v).to_le_bytes());
        }
        // SAFETY: ctx_copy holds ctx.len() >= layout.size bytes.
        let ctx_bytes = unsafe {
            std::slice::from_raw_parts_mut(ctx_copy.as_mut_ptr().cast::<u8>(), ctx.len())
        };
        for f in &layout.packet_fields {
            let v = rebase(layout.read(ctx, f));
            if f.width == 4 {
                ctx_bytes[f.offset..f.offset + 4].copy_from_slice(&(v as u32).to_le_bytes());
            } else {
                ctx_bytes[f.offset..f.offset + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        Ok(DeferredRun {
            state: Some(copy),
            ctx: ctx_copy,
            ctx_len: ctx.len(),
            packet,
            metered,
        })
    }

    /// Finishes the run in the interpreter (checked mode) on the copies.
    pub fn resume(mut self, vm: &Vm, ticket: u64) -> Completed {
        // SAFETY: ctx holds ctx_len bytes.
        let ctx = unsafe {
            std::slice::from_raw_parts_mut(self.ctx.as_mut_ptr().cast::<u8>(), self.ctx_len)
        };
        let packet = PacketRegion {
            addr: self.packet.addr(),
            len: self.packet.len as u64,
            writable: true,
        };
        let state = self.state.as_mut().expect("present until drop");
        let result = crate::resume::resume_checked(vm, state, ctx, Some(packet), self.metered);
        Completed {
            ticket,
            result,
            ctx: ctx.to_vec(),
            packet: self.packet.bytes().to_vec(),
        }
    }
}

impl Drop for DeferredRun {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            self.packet
                .arena
                .spare_states
                .lock()
                .expect("arena lock")
                .push(state);
        }
    }
}

struct Pending {
    runs: VecDeque<(u64, DeferredRun)>,
    closed: bool,
}

/// Deoptimised runs waiting for a fallback worker.
pub struct FallbackQueue {
    pending: Mutex<Pending>,
    ready: Condvar,
    arena: Arc<PacketArena>,
    next_ticket: AtomicU64,
}

impl FallbackQueue {
    /// A queue whose packet copies are at most `packet_slot` bytes, `capacity` of them in
    /// flight at once.
    pub fn new(packet_slot: usize, capacity: usize) -> Result<FallbackQueue, QueueError> {
        let slot = packet_slot.max(64).next_multiple_of(64);
        Ok(FallbackQueue {
            pending: Mutex::new(Pending {
                runs: VecDeque::with_capacity(capacity),
                closed: false,
            }),
            ready: Condvar::new(),
            arena: Arc::new(PacketArena::new(slot, capacity.max(1))?),
            next_ticket: AtomicU64::new(1),
        })
    }

    /// Hands a run to the workers; returns its ticket.
    pub fn push(&self, run: DeferredRun) -> Result<u64, QueueError> {
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let mut p = self.pending.lock().expect("queue lock");
        if p.closed {
            return Err(QueueError::Closed);
        }
        p.runs.push_back((ticket, run));
        drop(p);
        self.ready.notify_one();
        Ok(ticket)
    }

    /// Runs waiting.
    pub fn len(&self) -> usize {
        self.pending.lock().expect("queue lock").runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// No more runs: workers finish what is queued and return.
    pub fn close(&self) {
        self.pending.lock().expect("queue lock").closed = true;
        self.ready.notify_all();
    }

    /// Takes the next run, waiting for one; `None` once the queue is closed and drained.
    pub fn pop(&self) -> Option<(u64, DeferredRun)> {
        let mut p = self.pending.lock().expect("queue lock");
        loop {
            if let Some(r) = p.runs.pop_front() {
                return Some(r);
            }
            if p.closed {
                return None;
            }
            p = self.ready.wait(p).expect("queue lock");
        }
    }

    /// A fallback worker: resumes queued runs in `vm` until the queue is closed and empty,
    /// handing each result to `done`.
    pub fn work(&self, vm: &Vm, mut done: impl FnMut(Completed)) {
        while let Some((ticket, run)) = self.pop() {
            done(run.resume(vm, ticket));
        }
    }
}
