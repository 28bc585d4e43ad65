//! Map, ring buffer and tail-call helpers.

use super::{host_token, EINVAL};
use crate::inner::Inner;
use crate::thread::{self, ThreadState, MAP_CACHE};
use rdx_region::abi::{EntryFn, RunState, RunStatus, TailEntryTag, TAIL_ENTRY_MAGIC};
use rdx_region::layout::{
    active_entry_offset, active_version, MapHeader, MapType, SectionId, MAP_ALIGN,
};
use rdx_transport::xstate::{self, ringbuf, Copies, MapRef};
use rdx_transport::Transport;
use std::mem::size_of;
use std::sync::atomic::Ordering;

/// Maximum tail calls in one run, as in the kernel.
pub const MAX_TAIL_CALLS: u32 = 33;

/// The map whose header is at host address `addr`, for the running thread's runtime.
///
/// Decoding and checking a header costs more than most map operations, so each thread keeps
/// the maps it decoded in a small direct-mapped cache. The cache is valid while the region
/// header's `xstate_generation` is unchanged: `xstate::create` advances it before a new map
/// becomes visible, and only a newly created map can occupy the address of one this thread
/// decoded earlier (a control plane frees a map only after no published program refers to
/// it, and any program that refers to the new one was published after the creation). So a
/// hit costs one load of that word and one comparison, instead of re-validating the header.
#[inline(always)]
fn with_map<R>(addr: u64, f: impl FnOnce(&ThreadState, &MapRef) -> R) -> Option<R> {
    let ts = thread::current()?;
    // SAFETY: points into the header of the mapping that `ts.inner` keeps alive.
    let generation = unsafe { &*ts.xstate_generation }.load(Ordering::Acquire);
    let line = (addr / MAP_ALIGN) as usize % MAP_CACHE;
    if generation != ts.maps_generation {
        *ts.maps = [None; MAP_CACHE];
        ts.maps_generation = generation;
    }
    if !matches!(ts.maps[line], Some((a, _)) if a == addr) {
        let m = decode_map(ts, addr)?;
        ts.maps[line] = Some((addr, m));
    }
    let ts: &ThreadState = ts;
    let (_, m) = ts.maps[line].as_ref()?;
    Some(f(ts, m))
}

/// [`with_map`] for helpers that need the thread state mutably: a copy of the map.
#[inline]
fn map_at(addr: u64) -> Option<(&'static mut ThreadState, MapRef)> {
    let m = with_map(addr, |_, m| *m)?;
    Some((thread::current()?, m))
}

#[cold]
#[inline(never)]
fn decode_map(ts: &ThreadState, addr: u64) -> Option<MapRef> {
    let offset = addr.checked_sub(ts.inner.base)?;
    if offset.checked_add(size_of::<MapHeader>() as u64)? > ts.inner.data.region_len()
        || offset % MAP_ALIGN != 0
    {
        return None;
    }
    let mut b = [0u8; size_of::<MapHeader>()];
    ts.inner.data.read(offset, &mut b).ok()?;
    MapRef::from_header_bytes(&b, offset, ts.inner.data.region_len()).ok()
}

/// Whether a data-map helper (lookup, update, delete) may operate on a map of this type.
/// Program arrays hold jump words (`version << 32 | code offset`) that only control planes
/// write, and ring buffers hold records: neither is program data, whatever the verifier let
/// through (it refuses these calls too; this is the second wall).
#[inline(always)]
pub(crate) fn holds_program_data(map_type: MapType) -> bool {
    !matches!(map_type, MapType::ProgArray | MapType::RingBuf)
}

/// # Safety
/// `ptr` must be readable for `len` bytes (the verifier proved it for the program).
unsafe fn bytes<'a>(ptr: u64, len: usize) -> &'a [u8] {
    // SAFETY: by the caller's contract.
    unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }
}

/// `bpf_map_lookup_elem(map, key)`: the value's address in the region, or 0.
pub(crate) unsafe extern "C" fn map_lookup_elem(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    with_map(map, |ts, m| {
        // SAFETY: the verifier proved `key` readable for the map's key size.
        let key = unsafe { bytes(key, m.key_size as usize) };
        let copy = if m.copies > 1 { ts.slot_index } else { 0 };
        let found = match m.map_type {
            MapType::Hash | MapType::PerThreadHash => {
                xstate::hash::local::lookup_ref(&ts.inner.data, m, key, copy)
            }
            MapType::Array | MapType::PerThreadArray => {
                xstate::array::local::lookup_ref(m, key, copy)
            }
            other if !holds_program_data(other) => None,
            _ => xstate::lookup_ref(&ts.inner.data, m, key, copy)
                .ok()
                .flatten(),
        };
        match found {
            Some(off) => ts.inner.base + off,
            None => 0,
        }
    })
    .unwrap_or(0)
}

/// `bpf_map_update_elem(map, key, value, flags)`: 0 or a negative errno.
pub(crate) unsafe extern "C" fn map_update_elem(
    map: u64,
    key: u64,
    value: u64,
    flags: u64,
    _: u64,
) -> u64 {
    with_map(map, |ts, m| {
        // SAFETY: the verifier proved both readable for the map's sizes.
        let (key, value) = unsafe {
            (
                bytes(key, m.key_size as usize),
                bytes(value, m.value_size as usize),
            )
        };
        let copies = if m.copies > 1 {
            Copies::One(ts.slot_index)
        } else {
            Copies::All
        };
        let (r, token) = (&ts.inner.data, host_token(ts.slot_index));
        let done = match m.map_type {
            MapType::Hash | MapType::PerThreadHash => {
                xstate::hash::local::update(r, m, key, value, flags, copies, token)
            }
            MapType::Array | MapType::PerThreadArray => {
                xstate::array::local::update(r, m, key, value, flags, copies, token)
            }
            other if !holds_program_data(other) => return EINVAL,
            _ => xstate::update(r, m, key, value, flags, copies, token),
        };
        match done {
            Ok(()) => 0,
            Err(e) => e.errno() as u64,
        }
    })
    .unwrap_or(EINVAL)
}

/// `bpf_map_delete_elem(map, key)`: 0 or a negative errno.
pub(crate) unsafe extern "C" fn map_delete_elem(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    with_map(map, |ts, m| {
        if !holds_program_data(m.map_type) {
            return EINVAL;
        }
        // SAFETY: the verifier proved `key` readable for the map's key size.
        let key = unsafe { bytes(key, m.key_size as usize) };
        match xstate::delete(&ts.inner.data, m, key, host_token(ts.slot_index)) {
            Ok(()) => 0,
            Err(e) => e.errno() as u64,
        }
    })
    .unwrap_or(EINVAL)
}

/// `bpf_ringbuf_output(ringbuf, data, size, flags)`: 0, or a negative errno when the ring
/// is full.
pub(crate) unsafe extern "C" fn ringbuf_output(
    map: u64,
    data: u64,
    size: u64,
    _flags: u64,
    _: u64,
) -> u64 {
    let Some((ts, m)) = map_at(map) else {
        return EINVAL;
    };
    // SAFETY: the verifier proved `data` readable for `size` bytes.
    let data = unsafe { bytes(data, size as usize) };
    match ringbuf::output(&ts.inner.data, &m, data, host_token(ts.slot_index)) {
        Ok(true) => 0,
        Ok(false) => (-(libc::EAGAIN as i64)) as u64,
        Err(e) => e.errno() as u64,
    }
}

/// `bpf_ringbuf_reserve(ringbuf, size, flags)`: the record's address, or 0.
pub(crate) unsafe extern "C" fn ringbuf_reserve(
    map: u64,
    size: u64,
    _flags: u64,
    _: u64,
    _: u64,
) -> u64 {
    let Some((ts, m)) = map_at(map) else { return 0 };
    match ringbuf::reserve(&ts.inner.data, &m, size, host_token(ts.slot_index)) {
        Ok(Some(off)) => ts.inner.base + off,
        _ => 0,
    }
}

fn commit(data: u64, discard: bool) -> u64 {
    let Some(ts) = thread::current() else {
        return 0;
    };
    if let Some(off) = data.checked_sub(ts.inner.base) {
        let _ = ringbuf::commit(&ts.inner.data, off, discard);
    }
    0
}

/// `bpf_ringbuf_submit(data, flags)`.
pub(crate) unsafe extern "C" fn ringbuf_submit(
    data: u64,
    _flags: u64,
    _: u64,
    _: u64,
    _: u64,
) -> u64 {
    commit(data, false)
}

/// `bpf_ringbuf_discard(data, flags)`.
pub(crate) unsafe extern "C" fn ringbuf_discard(
    data: u64,
    _flags: u64,
    _: u64,
    _: u64,
    _: u64,
) -> u64 {
    commit(data, true)
}

/// `bpf_tail_call(ctx, prog_array, index)`.
///
/// Native code cannot replace its own frame through a C-ABI call, so the contract with
/// generated code is: on success this helper runs the target program to the end of the run
/// (same context, same run state, so the same remaining instruction budget), records its
/// result for the hook, sets the run status to [`RunStatus::TailCalled`] and returns 0;
/// the caller sees the status and returns at once (every tier of the JIT checks it after
/// this call), and the hook substitutes the recorded result. On failure (empty, unpublished
/// or unmetered element, too many tail calls) it returns a negative errno, leaves the
/// status alone and the caller continues, as in the kernel.
///
/// Only entries the control plane published as tail-call targets are entered: the element
/// must designate, with its version, an entry preceded by a [`TailEntryTag`] in the code
/// arena (which only a control plane writes), and that tag must say the code is metered,
/// so that every instruction of the chain is charged to the run's one budget.
pub(crate) unsafe extern "C" fn tail_call(ctx: u64, map: u64, index: u64, _: u64, _: u64) -> u64 {
    let Some((ts, m)) = map_at(map) else {
        return EINVAL;
    };
    if m.map_type != MapType::ProgArray || index >= m.max_entries as u64 || !ts.in_run() {
        return EINVAL;
    }
    if ts.tail_depth >= MAX_TAIL_CALLS {
        return (-(libc::E2BIG as i64)) as u64;
    }
    let word = match ts.inner.data.read_u64(m.data + index * 8) {
        Ok(w) => w,
        Err(_) => return EINVAL,
    };
    let Some(entry) = published_tail_entry(&ts.inner, word) else {
        return (-(libc::ENOENT as i64)) as u64;
    };
    let run = ts.current_run().cast::<RunState>();
    ts.tail_depth += 1;
    // SAFETY: `entry` is a code-arena entry that the control plane published as a metered
    // tail-call target (its tag, checked above, is only ever written by a control plane,
    // beside code it placed and linked for this region); `run` is the current run's state,
    // alive for the whole hook run that called us.
    let r0 = unsafe { entry(ctx as *mut u8, run) };
    let ts = thread::current().expect("still inside the run");
    ts.tail_depth -= 1;
    // SAFETY: as above; the entry returned.
    let status = unsafe { (*run).status };
    if status == RunStatus::Deopt as u32 {
        ts.tail_deopt = true;
    } else if status == RunStatus::Ok as u32 {
        // The target ended the run normally: its r0 is the run's result.
        ts.tail_result = Some(r0);
        // SAFETY: as above.
        unsafe { (*run).status = RunStatus::TailCalled as u32 };
    }
    // Otherwise a deeper tail call already recorded the result (`TailCalled`), or the
    // target stopped the run (budget spent, bad helper), which the status tells the hook.
    0
}

/// The entry point of a program array element, if the control plane published it as a
/// metered tail-call target: inside the code arena, aligned, with a nonzero version, and
/// preceded by a [`TailEntryTag`] of that version with the metered flag. `None` refuses the
/// tail call.
fn published_tail_entry(inner: &Inner, word: u64) -> Option<EntryFn> {
    let entry = inner.entry_of(word)?;
    let code = inner.info.section(SectionId::Code);
    let offset = active_entry_offset(word) as u64;
    let tag_at = offset.checked_sub(TailEntryTag::BYTES)?;
    if tag_at < code.offset {
        return None;
    }
    // SAFETY: 16 bytes inside the code arena (checked), mapped readable for the runtime's
    // lifetime; 16-byte aligned, as the entry is.
    let tag = TailEntryTag::from_bytes(unsafe { &*((inner.base + tag_at) as *const [u8; 16]) });
    (tag.magic == TAIL_ENTRY_MAGIC
        && tag.version == active_version(word)
        && tag.flags & TailEntryTag::METERED != 0)
        .then_some(entry)
}
