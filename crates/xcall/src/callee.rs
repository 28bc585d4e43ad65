//! The helpers callee code finds in this process's private copy of a service's helper table.
//!
//! They act on the service whose entry is running on this thread (set by the `call` helper
//! for the duration of the callee's run): map helpers resolve map addresses inside *that*
//! region and run the same XState code every other party runs ([`rdx_transport::xstate`]);
//! `xcall_reply` copies the callee's result into the caller's output buffer. Every other
//! table entry returns [`errno::NO_HELPER`], so a helper that has no cross-sandbox meaning
//! fails the call instead of jumping anywhere.

use crate::attach::ServiceMap;
use crate::call::{current, Current};
use crate::errno;
use rdx_region::abi::HelperFn;
use rdx_region::helpers::HelperId;
use rdx_region::layout::{offsets, MapHeader, MapType, MAP_ALIGN};
use rdx_transport::xstate::{self, Copies, MapRef};
use rdx_transport::Transport;
use rdx_xcall_plan::REPLY_ID;
use std::cell::Cell;
use std::mem::size_of;
use std::sync::atomic::{AtomicU64, Ordering};

const EINVAL: u64 = (-(libc::EINVAL as i64)) as u64;

/// The callee's implementation of helper `id`: the table entries bound by
/// [`Binders::CALLEE`](rdx_region::helpers::Binders::CALLEE) and `xcall_reply`, exactly what [`rdx_xcall_plan::callee_may_call`]
/// lets the deploy step accept.
fn callee_helper(id: HelperId) -> Option<HelperFn> {
    Some(match id {
        HelperId::MAP_LOOKUP_ELEM => map_lookup_elem,
        HelperId::MAP_UPDATE_ELEM => map_update_elem,
        HelperId::MAP_DELETE_ELEM => map_delete_elem,
        HelperId::KTIME_GET_NS => ktime_get_ns,
        HelperId::GET_PRANDOM_U32 => get_prandom_u32,
        HelperId::GET_SMP_PROCESSOR_ID => get_smp_processor_id,
        id if id.get() == REPLY_ID => reply,
        _ => return None,
    })
}

/// The function behind helper-table entry `id` in attached regions: [`errno::NO_HELPER`]
/// for any helper a callee may not call.
pub(crate) fn helper_for(id: HelperId) -> HelperFn {
    callee_helper(id).unwrap_or(unsupported)
}

/// Lines of a thread's map cache per service (direct-mapped by header address).
const MAP_CACHE: usize = 16;

/// The maps a thread's calls into one service decoded.
///
/// Valid while the service region's `xstate_generation` is what it was when the thread last
/// looked — the rule the runtime's own map helpers follow: the generation advances before a
/// new map becomes visible, and only a newly created map can occupy the address of one decoded
/// earlier (a control plane frees a map only after no published program refers to it). Code
/// that uses a map created after the thread last looked was published after that creation,
/// so its published word is new to the thread, and the call path revalidates the cache
/// ([`MapCache::revalidate`]) whenever a thread first runs a word. A hit is then the line's
/// address comparison, with no load of the region header.
pub(crate) struct MapCache {
    generation_word: *const AtomicU64,
    generation: u64,
    lines: [Option<(u64, MapRef)>; MAP_CACHE],
}

impl MapCache {
    pub(crate) fn new(svc: &ServiceMap) -> MapCache {
        MapCache {
            generation_word: (svc.base + offsets::HEADER_XSTATE_GENERATION) as *const AtomicU64,
            generation: 0,
            lines: [None; MAP_CACHE],
        }
    }

    /// Drops every line if a map was created since the last revalidation.
    pub(crate) fn revalidate(&mut self) {
        // SAFETY: a word of the service's region header, mapped for the process's life.
        let generation = unsafe { &*self.generation_word }.load(Ordering::Acquire);
        if generation != self.generation {
            self.lines = [None; MAP_CACHE];
            self.generation = generation;
        }
    }
}

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// The map whose header is at `addr` in the running callee's region: a reference into this
/// thread's cache (no copy of the decoded map on the hot path).
#[inline(always)]
fn map_at(cur: &Current, addr: u64) -> Option<&MapRef> {
    // SAFETY: this thread's cache for the running call's service (see `Current::maps`); the
    // reference returned is dropped before the helper returns.
    let line = unsafe { &mut (*cur.maps()).lines[(addr / MAP_ALIGN) as usize % MAP_CACHE] };
    if !matches!(line, Some((a, _)) if *a == addr) {
        *line = Some((addr, decode_map(cur.svc(), addr)?));
    }
    line.as_ref().map(|(_, m)| m)
}

#[cold]
#[inline(never)]
fn decode_map(svc: &ServiceMap, addr: u64) -> Option<MapRef> {
    let offset = addr.checked_sub(svc.base)?;
    if offset.checked_add(size_of::<MapHeader>() as u64)? > svc.data.region_len()
        || offset % MAP_ALIGN != 0
    {
        return None;
    }
    let mut b = [0u8; size_of::<MapHeader>()];
    svc.data.read(offset, &mut b).ok()?;
    MapRef::from_header_bytes(&b, offset, svc.data.region_len()).ok()
}

/// # Safety
/// `ptr` must be readable for `len` bytes (the verifier proved it for the callee).
unsafe fn bytes<'a>(ptr: u64, len: usize) -> &'a [u8] {
    // SAFETY: by the caller's contract.
    unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }
}

fn token(cur: &Current) -> u64 {
    // The token scheme of the host's own threads: the thread slot we hold in that region.
    (1 << 63) | cur.thread_slot() as u64
}

unsafe extern "C" fn map_lookup_elem(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    let Some(cur) = current() else { return 0 };
    let Some(m) = map_at(&cur, map) else { return 0 };
    if m.map_type == MapType::Hash && m.key_size == 8 {
        // The common case inline: a shared hash map with word keys, the key loaded as a word.
        let svc = cur.svc();
        // SAFETY: the verifier proved `key` readable for the map's key size, 8 bytes.
        let k = unsafe { (key as *const u64).read_unaligned() };
        return match xstate::hash::local::lookup_ref_word(&svc.data, m, k, 0) {
            Some(off) => svc.base + off,
            None => 0,
        };
    }
    // SAFETY: as for the helper.
    unsafe { lookup_other(&cur, m, key) }
}

/// `map_lookup_elem` for the other map types and key sizes.
///
/// # Safety
/// `key` must be readable for the map's key size.
#[inline(never)]
unsafe fn lookup_other(cur: &Current, m: &MapRef, key: u64) -> u64 {
    // SAFETY: the verifier proved `key` readable for the map's key size.
    let key = unsafe { bytes(key, m.key_size as usize) };
    let copy = if m.copies > 1 { cur.thread_slot() } else { 0 };
    let svc = cur.svc();
    // The map helpers' operations for a mapping in this process (the runtime's own helpers
    // call the same ones).
    match xstate::local::lookup_ref(&svc.data, m, key, copy) {
        Some(off) => svc.base + off,
        None => 0,
    }
}

unsafe extern "C" fn map_update_elem(map: u64, key: u64, value: u64, flags: u64, _: u64) -> u64 {
    let Some(cur) = current() else { return EINVAL };
    let Some(m) = map_at(&cur, map) else {
        return EINVAL;
    };
    // SAFETY: the verifier proved both readable for the map's sizes.
    let (key, value) = unsafe {
        (
            bytes(key, m.key_size as usize),
            bytes(value, m.value_size as usize),
        )
    };
    let copies = if m.copies > 1 {
        Copies::One(cur.thread_slot())
    } else {
        Copies::All
    };
    xstate::local::update(&cur.svc().data, m, key, value, flags, copies, token(&cur))
}

unsafe extern "C" fn map_delete_elem(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    let Some(cur) = current() else { return EINVAL };
    let Some(m) = map_at(&cur, map) else {
        return EINVAL;
    };
    // SAFETY: the verifier proved `key` readable for the map's key size.
    let key = unsafe { bytes(key, m.key_size as usize) };
    xstate::local::delete(&cur.svc().data, m, key, token(&cur))
}

unsafe extern "C" fn ktime_get_ns(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into our local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

unsafe extern "C" fn get_prandom_u32(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    RNG.with(|r| {
        let mut x = r.get();
        if x == 0 {
            // SAFETY: gettid has no preconditions.
            x = (unsafe { libc::gettid() } as u64) << 32 ^ 0x9e37_79b9_7f4a_7c15;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        r.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) & 0xffff_ffff
    })
}

/// The thread slot held in the callee's region: what per-thread maps index by.
unsafe extern "C" fn get_smp_processor_id(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    current().map(|c| c.thread_slot() as u64).unwrap_or(0)
}

unsafe extern "C" fn unsupported(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    errno::NO_HELPER
}

/// `xcall_reply(data, len)`: copies the callee's result into the caller's output buffer.
/// Returns `len`, [`errno::REPLY_TOO_LARGE`] if the caller's buffer is smaller, or
/// [`errno::NO_CALL`] when no cross-sandbox call is running on this thread (the entry was run
/// as a plain hook by its own host).
pub(crate) unsafe extern "C" fn reply(data: u64, len: u64, _: u64, _: u64, _: u64) -> u64 {
    let Some(cur) = current() else {
        return errno::NO_CALL;
    };
    if len > cur.out_len as u64 {
        return errno::REPLY_TOO_LARGE;
    }
    // SAFETY: the verifier proved `data` readable for `len` bytes in the callee; the caller's
    // verifier proved `out` writable for `out_len >= len` bytes, and the caller's frame is
    // below us on this very thread.
    unsafe {
        if len == 8 {
            // The common reply (one word) without a call to memcpy.
            (cur.out as *mut u64).write_unaligned((data as *const u64).read_unaligned());
        } else {
            std::ptr::copy_nonoverlapping(data as *const u8, cur.out, len as usize);
        }
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    use rdx_xcall_plan::{callee_helper_ids, callee_may_call};

    #[test]
    fn binds_exactly_the_callee_entries_of_the_table_and_the_reply() {
        let implemented: Vec<u32> = (0..4096)
            .filter(|id| callee_helper(HelperId::new(*id)).is_some())
            .collect();
        assert_eq!(implemented, callee_helper_ids());
        let allowed: Vec<u32> = (0..4096)
            .filter(|id| callee_may_call(HelperId::new(*id)))
            .collect();
        assert_eq!(allowed, implemented);
        assert!(callee_helper_ids().contains(&REPLY_ID));
        assert!(rdx_region::helpers::by_id(HelperId::new(REPLY_ID)).is_none());
    }
}
