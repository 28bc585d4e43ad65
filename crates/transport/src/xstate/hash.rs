//! Hash and per-thread hash maps: open addressing with linear probing over `buckets`
//! (a power of two, at least twice `max_entries`) elements of
//! `[ctl: u64][key: key_stride][value: value_stride × copies]`.
//!
//! `ctl` is a per-element seqlock (see [`rdx_region::layout::ELEM_STATE_MASK`]): a writer
//! stores it busy (sequence + 1), writes, then stores it live or deleted (sequence + 1
//! again); a reader copies an element between two equal, non-busy loads of it, so no reader
//! — the host's helpers or a control plane reading remotely — ever returns a torn element.
//! Writers serialise on the map's lock word; deleted elements stay as tombstones that later
//! inserts reuse, so probe chains never break.

use super::{
    hash_key, invalid, locked, next_ctl, read_stable, retire_element, Copies, MapError, MapOps,
    MapRef, BUSY_SPIN_LIMIT, UPDATE_EXIST, UPDATE_NOEXIST,
};
use crate::Transport;
use rdx_region::layout::{
    offsets, ELEM_BUSY, ELEM_DELETED, ELEM_EMPTY, ELEM_LIVE, ELEM_STATE_MASK,
};

/// [`MapOps`] of hash and per-thread hash maps.
pub struct HashMap;

#[inline]
fn elem(m: &MapRef, idx: u64) -> u64 {
    m.data + idx * m.entry_stride as u64
}

#[inline]
fn value_at(m: &MapRef, e: u64, copy: u32) -> u64 {
    e + 8 + m.key_stride as u64 + copy as u64 * m.value_stride as u64
}

/// Loads an element's control word, waiting (bounded) while a writer holds it busy.
#[inline(always)]
fn stable_ctl<T: Transport + ?Sized>(t: &T, m: &MapRef, e: u64) -> Result<u64, MapError> {
    let c = t.read_u64(e)?;
    if c & ELEM_STATE_MASK != ELEM_BUSY {
        return Ok(c);
    }
    wait_not_busy(t, m, e)
}

#[cold]
fn wait_not_busy<T: Transport + ?Sized>(t: &T, m: &MapRef, e: u64) -> Result<u64, MapError> {
    let mut spins = 0u32;
    loop {
        let c = t.read_u64(e)?;
        if c & ELEM_STATE_MASK != ELEM_BUSY {
            return Ok(c);
        }
        spins += 1;
        if spins > BUSY_SPIN_LIMIT {
            return Err(MapError::Busy {
                id: m.id,
                holder: c,
            });
        }
        if spins > 64 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Lock-free search: the element holding `key` and the control word under which its key
/// matched, or `None`.
#[inline]
fn find<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    key: &[u8],
) -> Result<Option<(u64, u64)>, MapError> {
    let mask = m.buckets as u64 - 1;
    let mut idx = hash_key(key) & mask;
    // Word-sized keys (the common case) compare with one load.
    let word_key = <[u8; 8]>::try_from(key).ok().map(u64::from_le_bytes);
    for _ in 0..m.buckets {
        let e = elem(m, idx);
        loop {
            let c = stable_ctl(t, m, e)?;
            match c & ELEM_STATE_MASK {
                ELEM_EMPTY => return Ok(None),
                ELEM_LIVE => {
                    let same = match word_key {
                        Some(k) => t.read_u64(e + 8)? == k,
                        None => t.equals(e + 8, key)?,
                    };
                    if t.read_u64(e)? != c {
                        continue; // changed under us: look at this element again
                    }
                    if same {
                        return Ok(Some((e, c)));
                    }
                }
                _ => {}
            }
            break;
        }
        idx = (idx + 1) & mask;
    }
    Ok(None)
}

/// Search under the writer lock: the element with `key`, else the first reusable element
/// on its probe chain.
enum Slot {
    Found(u64, u64),
    Free(u64, u64),
    Full,
}

/// What an update does with the slot its key search found, under the flags' rules and the
/// map's capacity: `(element, its control word, whether it is new)`. `count` reads the
/// map's element count, needed only for a new element.
#[inline(always)]
fn slot_for_update(
    m: &MapRef,
    slot: Slot,
    flags: u64,
    count: impl FnOnce() -> Result<u64, MapError>,
) -> Result<(u64, u64, bool), MapError> {
    let full = || MapError::Full {
        id: m.id,
        max_entries: m.max_entries,
    };
    match slot {
        Slot::Found(_, _) if flags == UPDATE_NOEXIST => Err(MapError::Exists),
        Slot::Found(e, c) => Ok((e, c, false)),
        Slot::Free(_, _) if flags == UPDATE_EXIST => Err(MapError::NotFound),
        Slot::Free(e, c) => {
            if count()? >= m.max_entries as u64 {
                return Err(full());
            }
            Ok((e, c, true))
        }
        Slot::Full => Err(full()),
    }
}

fn find_for_write<T: Transport + ?Sized>(t: &T, m: &MapRef, key: &[u8]) -> Result<Slot, MapError> {
    let mask = m.buckets as u64 - 1;
    let mut idx = hash_key(key) & mask;
    let mut reusable = None;
    for _ in 0..m.buckets {
        let e = elem(m, idx);
        let c = t.read_u64(e)?;
        match c & ELEM_STATE_MASK {
            ELEM_EMPTY => {
                let (re, rc) = reusable.unwrap_or((e, c));
                return Ok(Slot::Free(re, rc));
            }
            ELEM_LIVE => {
                if t.equals(e + 8, key)? {
                    return Ok(Slot::Found(e, c));
                }
            }
            ELEM_DELETED => {
                if reusable.is_none() {
                    reusable = Some((e, c));
                }
            }
            _ => {
                return Err(MapError::Corrupt {
                    id: m.id,
                    reason: format!("element at {e:#x} busy while the writer lock is held"),
                });
            }
        }
        idx = (idx + 1) & mask;
    }
    Ok(match reusable {
        Some((e, c)) => Slot::Free(e, c),
        None => Slot::Full,
    })
}

/// After element `idx` was deleted (the caller holds the writer lock): every tombstone of
/// its cluster (the run of non-empty elements around it) that no live element's probe path
/// crosses becomes empty again. A live element at `q` whose key hashes to `h` is found by
/// probing `h..=q`, so exactly the tombstones on such paths must stay; the others only make
/// searches for absent keys longer. Without this, a map whose keys come and go while others
/// stay (a connection table) fills with tombstones until every lookup of an absent key walks
/// all of its buckets. No live element moves, so references handed out stay valid, and a
/// concurrent reader sees the same outcome either way: the keys it can find are unchanged.
fn clear_tombstones<T: Transport + ?Sized>(t: &T, m: &MapRef, idx: u64) -> Result<(), MapError> {
    let n = m.buckets as u64;
    let mask = n - 1;
    let state =
        |i: u64| -> Result<u64, MapError> { Ok(t.read_u64(elem(m, i & mask))? & ELEM_STATE_MASK) };
    // The cluster's first element: after the nearest empty one before `idx` (the whole ring,
    // from `idx + 1`, when no element is empty).
    let mut back = 0;
    while back < n && state(idx.wrapping_sub(back + 1))? != ELEM_EMPTY {
        back += 1;
    }
    let (start, len) = if back == n {
        ((idx + 1) & mask, n)
    } else {
        let start = idx.wrapping_sub(back) & mask;
        let mut len = back + 1;
        while len < n && state(start + len)? != ELEM_EMPTY {
            len += 1;
        }
        (start, len)
    };
    let mut key = vec![0u8; m.key_size as usize];
    // Position (from `start`) of the earliest element a live element's path needs; a path
    // that wraps past `start` (only in a ring without empty elements) needs everything from
    // `wrapped` on as well.
    let home_distance = |q: u64, key: &mut [u8]| -> Result<u64, MapError> {
        t.read(elem(m, (start + q) & mask) + 8, key)?;
        Ok(((start + q) & mask).wrapping_sub(hash_key(key)) & mask)
    };
    let mut wrapped = len;
    for q in 0..len {
        if state(start + q)? == ELEM_LIVE {
            let d = home_distance(q, &mut key)?;
            if d > q {
                // Saturating: only a corrupt map places an element before its home in a
                // cluster; it must give errors, not panics.
                wrapped = wrapped.min(len.saturating_sub(d - q));
            }
        }
    }
    let mut reach = len;
    for p in (0..len).rev() {
        let e = elem(m, (start + p) & mask);
        let c = t.read_u64(e)?;
        match c & ELEM_STATE_MASK {
            ELEM_LIVE => {
                let d = home_distance(p, &mut key)?;
                reach = reach.min(p.saturating_sub(d));
            }
            ELEM_DELETED if reach > p && p < wrapped => t.write_u64(e, next_ctl(c, ELEM_EMPTY))?,
            _ => {}
        }
    }
    Ok(())
}

/// After a dead writer's lock was broken (the caller holds the lock now): elements it left
/// busy become deleted (an update it had not finished is lost, never half-visible) and the
/// element count is recomputed.
pub(crate) fn repair<T: Transport + ?Sized>(t: &T, m: &MapRef) -> Result<(), MapError> {
    let mut live = 0u64;
    for idx in 0..m.buckets as u64 {
        let e = elem(m, idx);
        let c = t.read_u64(e)?;
        match c & ELEM_STATE_MASK {
            ELEM_BUSY => t.write_u64(e, next_ctl(c, ELEM_DELETED))?,
            ELEM_LIVE => live += 1,
            _ => {}
        }
    }
    t.write_u64(m.offset + offsets::MAP_COUNT, live)?;
    Ok(())
}

impl MapOps for HashMap {
    #[inline]
    fn lookup_ref<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        copy: u32,
    ) -> Result<Option<u64>, MapError> {
        m.check_key(key)?;
        if copy >= m.copies {
            return invalid(format!("copy {copy} of {}", m.copies));
        }
        Ok(find(t, m, key)?.map(|(e, _)| value_at(m, e, copy)))
    }

    fn lookup<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        out: &mut [u8],
    ) -> Result<bool, MapError> {
        m.check_key(key)?;
        let len = m.lookup_len();
        read_stable(
            t,
            m,
            &mut out[..len],
            || find(t, m, key),
            |e| value_at(m, e, 0),
        )
    }

    fn update<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        value: &[u8],
        flags: u64,
        copies: Copies,
        token: u64,
    ) -> Result<(), MapError> {
        m.check_key(key)?;
        locked(t, m, token, || {
            let (e, c, fresh) = slot_for_update(m, find_for_write(t, m, key)?, flags, || {
                Ok(t.read_u64(m.offset + offsets::MAP_COUNT)?)
            })?;
            let busy = next_ctl(c, ELEM_BUSY);
            t.write_u64(e, busy)?;
            if fresh {
                let mut k =
                    vec![0u8; m.key_stride as usize + m.value_stride as usize * m.copies as usize];
                k[..key.len()].copy_from_slice(key);
                t.write(e + 8, &k)?;
            }
            match copies {
                Copies::One(cp) => t.write(value_at(m, e, cp), value)?,
                Copies::All => {
                    for cp in 0..m.copies {
                        t.write(value_at(m, e, cp), value)?;
                    }
                }
            }
            t.write_u64(e, next_ctl(busy, ELEM_LIVE))?;
            if fresh {
                t.fetch_and_add(m.offset + offsets::MAP_COUNT, 1)?;
            }
            Ok(())
        })
    }

    fn delete<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        token: u64,
    ) -> Result<(), MapError> {
        m.check_key(key)?;
        locked(t, m, token, || {
            let Slot::Found(e, c) = find_for_write(t, m, key)? else {
                return Err(MapError::NotFound);
            };
            retire_element(t, m, e, c)?;
            clear_tombstones(t, m, (e - m.data) / m.entry_stride as u64)
        })
    }

    fn next_key<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: Option<&[u8]>,
        out: &mut [u8],
    ) -> Result<bool, MapError> {
        let start = match key {
            None => 0,
            Some(k) => {
                m.check_key(k)?;
                match find(t, m, k)? {
                    Some((e, _)) => (e - m.data) / m.entry_stride as u64 + 1,
                    None => 0,
                }
            }
        };
        let n = m.key_size as usize;
        for idx in start..m.buckets as u64 {
            let e = elem(m, idx);
            loop {
                let c = stable_ctl(t, m, e)?;
                if c & ELEM_STATE_MASK != ELEM_LIVE {
                    break;
                }
                t.read(e + 8, &mut out[..n])?;
                if t.read_u64(e)? == c {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }
}

/// Host-side fast paths: the same protocol as [`HashMap`]'s `lookup_ref` and `update`, run
/// directly on the host's own mapping of the region (the runtime's map helpers). A
/// [`MapRef`] is checked when decoded (its data lies inside the region and its geometry is
/// the one its sizes imply), so element offsets computed here stay inside the mapping
/// without a bounds check per access, and no `Result` with a [`MapError`] is built on the
/// way. Every case these do not finish (a busy element, a contended or breakable lock, an
/// error) is handed to the generic code, which has the retry, lock-breaking and error
/// logic.
pub mod local {
    use super::{elem, find, find_for_write, slot_for_update, value_at, Slot};
    use crate::local::LocalRegion;
    use crate::xstate::{
        hash_key, hash_key8, next_ctl, Copies, MapError, MapRef, TOKEN_HOST, UPDATE_EXIST,
    };
    use crate::Transport;
    use rdx_region::layout::{offsets, ELEM_BUSY, ELEM_EMPTY, ELEM_LIVE, ELEM_STATE_MASK};
    use std::sync::atomic::{fence, AtomicU64, Ordering};

    /// The word at region offset `at`.
    ///
    /// # Safety
    /// `at` is 8-byte aligned and `at + 8` lies inside `r` (an element word of a checked
    /// [`MapRef`] of this region, or its header's words).
    #[inline(always)]
    unsafe fn word(r: &LocalRegion, at: u64) -> &AtomicU64 {
        debug_assert!(at.is_multiple_of(8) && at + 8 <= r.region_len());
        // SAFETY: by the caller's contract; the region stays mapped while `r` is used and
        // is only accessed atomically.
        unsafe { &*(r.base().add(at as usize) as *const AtomicU64) }
    }

    /// Whether the key stored at element `e` (zero-padded to `key_stride`) is `key`. Loads
    /// are acquire, so the caller's second load of the control word comes after them.
    #[inline(always)]
    fn key_matches(r: &LocalRegion, m: &MapRef, e: u64, key: &[u8]) -> bool {
        let mut at = e + 8;
        let mut chunks = key.chunks(8);
        for _ in 0..m.key_stride / 8 {
            let mut w = [0u8; 8];
            if let Some(c) = chunks.next() {
                w[..c.len()].copy_from_slice(c);
            }
            // SAFETY: inside element `e`'s key of a checked map.
            if unsafe { word(r, at) }.load(Ordering::Acquire) != u64::from_le_bytes(w) {
                return false;
            }
            at += 8;
        }
        true
    }

    /// Region offset of the value of `key` in copy `copy`, or `None` (no such key, or bad
    /// arguments): what `bpf_map_lookup_elem` returns, as [`HashMap`](super::HashMap)'s
    /// `lookup_ref`.
    #[inline]
    pub fn lookup_ref(r: &LocalRegion, m: &MapRef, key: &[u8], copy: u32) -> Option<u64> {
        if key.len() != m.key_size as usize || copy >= m.copies {
            return None;
        }
        if let Ok(k) = <[u8; 8]>::try_from(key) {
            return lookup_ref8(r, m, u64::from_le_bytes(k), copy);
        }
        let mask = m.buckets as u64 - 1;
        let mut idx = hash_key(key) & mask;
        for _ in 0..m.buckets {
            let e = elem(m, idx);
            // SAFETY: `idx < buckets`: an element of a checked map.
            let ctl = unsafe { word(r, e) };
            let c = ctl.load(Ordering::Acquire);
            match c & ELEM_STATE_MASK {
                ELEM_EMPTY => return None,
                ELEM_LIVE => {
                    let same = key_matches(r, m, e, key);
                    if ctl.load(Ordering::Acquire) != c {
                        return lookup_ref_slow(r, m, key, copy);
                    }
                    if same {
                        return Some(value_at(m, e, copy));
                    }
                }
                ELEM_BUSY => return lookup_ref_slow(r, m, key, copy),
                _ => {}
            }
            idx = (idx + 1) & mask;
        }
        None
    }

    /// [`lookup_ref`] of an 8-byte key given as the word `k` (its little-endian bytes), for
    /// callers that load the key as a word: `None` also when the map's keys are not 8 bytes
    /// or `copy` is out of range.
    #[inline]
    pub fn lookup_ref_word(r: &LocalRegion, m: &MapRef, k: u64, copy: u32) -> Option<u64> {
        if m.key_size != 8 || copy >= m.copies {
            return None;
        }
        lookup_ref8(r, m, k, copy)
    }

    /// [`lookup_ref`] of an 8-byte key `k` (its little-endian bytes): one load compares it.
    /// The states are tested live first, in a chain of branches rather than a jump table
    /// indexed by the just-loaded control word.
    #[inline(always)]
    fn lookup_ref8(r: &LocalRegion, m: &MapRef, k: u64, copy: u32) -> Option<u64> {
        let mask = m.buckets as u64 - 1;
        let mut idx = hash_key8(k) & mask;
        for _ in 0..m.buckets {
            let e = elem(m, idx);
            // SAFETY: `idx < buckets`: an element of a checked map, whose key (8 bytes,
            // the key size) follows its control word.
            let (ctl, stored) = unsafe { (word(r, e), word(r, e + 8)) };
            let c = ctl.load(Ordering::Acquire);
            let state = c & ELEM_STATE_MASK;
            if state == ELEM_LIVE {
                let same = stored.load(Ordering::Acquire) == k;
                if ctl.load(Ordering::Acquire) != c {
                    return lookup_ref_slow(r, m, &k.to_le_bytes(), copy);
                }
                if same {
                    return Some(value_at(m, e, copy));
                }
            } else if state == ELEM_EMPTY {
                return None;
            } else if state == ELEM_BUSY {
                return lookup_ref_slow(r, m, &k.to_le_bytes(), copy);
            }
            idx = (idx + 1) & mask;
        }
        None
    }

    /// An element changed or was busy under the lookup: the generic search, which waits
    /// and retries.
    #[cold]
    #[inline(never)]
    fn lookup_ref_slow(r: &LocalRegion, m: &MapRef, key: &[u8], copy: u32) -> Option<u64> {
        find(r, m, key)
            .ok()
            .flatten()
            .map(|(e, _)| value_at(m, e, copy))
    }

    /// `bpf_map_update_elem` on the host: as [`HashMap`](super::HashMap)'s `update`, `value` being
    /// `value_size` bytes and `copies` in range (the helper's contract).
    #[inline]
    pub fn update(
        r: &LocalRegion,
        m: &MapRef,
        key: &[u8],
        value: &[u8],
        flags: u64,
        copies: Copies,
        token: u64,
    ) -> Result<(), MapError> {
        // SAFETY: the lock word of a checked map's header.
        let lock = unsafe { word(r, m.offset + offsets::MAP_LOCK) };
        let copies_ok = match copies {
            Copies::One(cp) => cp < m.copies,
            Copies::All => true,
        };
        if key.len() != m.key_size as usize
            || value.len() != m.value_size as usize
            || flags > UPDATE_EXIST
            || !copies_ok
            || token & TOKEN_HOST == 0
            || lock
                .compare_exchange(0, token, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return update_slow(r, m, key, value, flags, copies, token);
        }
        let r0 = update_locked(r, m, key, value, flags, copies);
        if lock
            .compare_exchange(token, 0, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            // Broken as stale meanwhile: what the generic unlock reports.
            return Err(MapError::Corrupt {
                id: m.id,
                reason: format!(
                    "lock held by {:#x}, not by {token:#x} (broken as stale?)",
                    lock.load(Ordering::Relaxed)
                ),
            });
        }
        r0
    }

    #[cold]
    #[inline(never)]
    fn update_slow(
        r: &LocalRegion,
        m: &MapRef,
        key: &[u8],
        value: &[u8],
        flags: u64,
        copies: Copies,
        token: u64,
    ) -> Result<(), MapError> {
        crate::xstate::update(r, m, key, value, flags, copies, token)
    }

    /// The update under the writer lock (the generic code's, with a fast search for the
    /// key).
    #[inline(always)]
    fn update_locked(
        r: &LocalRegion,
        m: &MapRef,
        key: &[u8],
        value: &[u8],
        flags: u64,
        copies: Copies,
    ) -> Result<(), MapError> {
        let (e, c, fresh) = slot_for_update(m, find_for_write_local(r, m, key)?, flags, || {
            Ok(r.read_u64(m.offset + offsets::MAP_COUNT)?)
        })?;
        // SAFETY: an element of a checked map.
        let ctl = unsafe { word(r, e) };
        let busy = next_ctl(c, ELEM_BUSY);
        ctl.store(busy, Ordering::Release);
        // Readers that see any of the stores below also see the element busy.
        fence(Ordering::Release);
        if fresh {
            let mut at = e + 8;
            let mut chunks = key.chunks(8);
            for _ in 0..m.key_stride / 8 {
                let mut w = [0u8; 8];
                if let Some(k) = chunks.next() {
                    w[..k.len()].copy_from_slice(k);
                }
                // SAFETY: inside element `e`'s key.
                unsafe { word(r, at) }.store(u64::from_le_bytes(w), Ordering::Relaxed);
                at += 8;
            }
            let values = m.value_stride as u64 * m.copies as u64;
            for off in (0..values).step_by(8) {
                // SAFETY: inside element `e`'s values.
                unsafe { word(r, at + off) }.store(0, Ordering::Relaxed);
            }
        }
        let write = |cp: u32| write_value(r, value_at(m, e, cp), value);
        match copies {
            Copies::One(cp) => write(cp),
            Copies::All => (0..m.copies).for_each(write),
        }
        ctl.store(next_ctl(busy, ELEM_LIVE), Ordering::Release);
        if fresh {
            // SAFETY: the count word of a checked map's header.
            unsafe { word(r, m.offset + offsets::MAP_COUNT) }.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }

    /// The generic `find_for_write` with word loads (one per 8 key bytes), which needs no
    /// seqlock check: the caller holds the writer lock, so no element changes meanwhile.
    #[inline(always)]
    fn find_for_write_local(r: &LocalRegion, m: &MapRef, key: &[u8]) -> Result<Slot, MapError> {
        let word_key = <[u8; 8]>::try_from(key).ok().map(u64::from_le_bytes);
        let mask = m.buckets as u64 - 1;
        let mut idx = match word_key {
            Some(k) => hash_key8(k),
            None => hash_key(key),
        } & mask;
        let mut reusable = None;
        for _ in 0..m.buckets {
            let e = elem(m, idx);
            // SAFETY: `idx < buckets`: an element of a checked map.
            let c = unsafe { word(r, e) }.load(Ordering::Acquire);
            match c & ELEM_STATE_MASK {
                ELEM_EMPTY => {
                    let (re, rc) = reusable.unwrap_or((e, c));
                    return Ok(Slot::Free(re, rc));
                }
                ELEM_LIVE => {
                    let same = match word_key {
                        // SAFETY: the element's 8-byte key.
                        Some(k) => unsafe { word(r, e + 8) }.load(Ordering::Acquire) == k,
                        None => key_matches(r, m, e, key),
                    };
                    if same {
                        return Ok(Slot::Found(e, c));
                    }
                }
                ELEM_BUSY => return find_for_write(r, m, key), // reports the corruption
                _ => {
                    if reusable.is_none() {
                        reusable = Some((e, c));
                    }
                }
            }
            idx = (idx + 1) & mask;
        }
        Ok(match reusable {
            Some((e, c)) => Slot::Free(e, c),
            None => Slot::Full,
        })
    }

    /// Writes `value` (at most `value_stride` bytes) at `at`, word by word; the bytes of a
    /// last partial word beyond `value` are left as they are, as the generic write does.
    #[inline(always)]
    fn write_value(r: &LocalRegion, at: u64, value: &[u8]) {
        let mut chunks = value.chunks_exact(8);
        let mut off = at;
        for c in &mut chunks {
            // SAFETY: inside the element's value of `value_stride` bytes.
            unsafe { word(r, off) }.store(
                u64::from_le_bytes(c.try_into().expect("8 bytes")),
                Ordering::Relaxed,
            );
            off += 8;
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            // Byte stores like the generic write, so the bytes after the value keep theirs.
            let _ = r.write(off, rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::elem;
    use crate::local::LocalRegion;
    use crate::xstate::{self, hash_key, hash_key8, Copies, MapError, MapRef, MapSpec};
    use crate::xstate::{array, hash, TOKEN_HOST, UPDATE_EXIST, UPDATE_NOEXIST};
    use crate::Transport;
    use proptest::prelude::*;
    use rdx_region::geometry::{encode_header, HeaderInfo, RegionParams};
    use rdx_region::layout::{Arch, MapType, SectionId};
    use rdx_region::layout::{ELEM_DELETED, ELEM_LIVE, ELEM_STATE_MASK};

    struct Region {
        _mem: Vec<u64>,
        t: LocalRegion,
        info: HeaderInfo,
    }

    fn region() -> Region {
        let params = RegionParams {
            scratch_size: 1 << 20,
            code_size: 1 << 16,
            thread_slots: 4,
            ..RegionParams::default()
        };
        let (head, info) = encode_header(&params, Arch::X86_64, 0, 0, 0, 0, 0, 0, 0).unwrap();
        let mut mem = vec![0u64; info.region_size as usize / 8];
        // SAFETY: `mem` lives as long as the returned Region and is 8-aligned.
        let t = unsafe { LocalRegion::from_raw(mem.as_mut_ptr() as *mut u8, info.region_size) };
        t.write(0, &head).unwrap();
        Region { _mem: mem, t, info }
    }

    fn map(r: &Region, id: u32, n: u64, map_type: MapType, key: u32, value: u32) -> MapRef {
        let spec = MapSpec {
            map_type,
            key_size: key,
            value_size: value,
            max_entries: 64,
            flags: 0,
            name: String::new(),
        };
        let at = r.info.section(SectionId::Scratch).offset + n * 16384;
        xstate::create(&r.t, &r.info, id, at, &spec).unwrap()
    }

    const HOST: u64 = TOKEN_HOST | 1;

    fn errno(r: Result<(), MapError>) -> i64 {
        r.err().map_or(0, |e| e.errno())
    }

    proptest! {
        #[test]
        fn hash_key8_is_hash_key(k: u64) {
            prop_assert_eq!(hash_key8(k), hash_key(&k.to_le_bytes()));
        }

        /// The host's fast paths and the generic code, fed the same operations on two maps
        /// of the same shape, answer alike and leave the same contents (read back with the
        /// generic lookup, as a control plane would).
        #[test]
        fn local_paths_match_generic(
            key_size in prop::sample::select(vec![4u32, 8, 12]),
            value_size in prop::sample::select(vec![4u32, 8, 16]),
            per_thread: bool,
            ops in prop::collection::vec((0u8..3, 0u64..80, any::<u64>(), 0u64..4), 1..120),
        ) {
            let r = region();
            let ty = if per_thread { MapType::PerThreadHash } else { MapType::Hash };
            let (fast, slow) = (map(&r, 1, 0, ty, key_size, value_size), map(&r, 2, 1, ty, key_size, value_size));
            let copies = if per_thread { Copies::One(2) } else { Copies::All };
            let copy = if per_thread { 2 } else { 0 };
            for (op, k, v, flags) in ops {
                let key = &k.to_le_bytes().repeat(2)[..key_size as usize];
                let value = &v.to_le_bytes().repeat(2)[..value_size as usize];
                match op {
                    0 | 1 => {
                        let a = hash::local::update(&r.t, &fast, key, value, flags, copies, HOST);
                        let b = xstate::update(&r.t, &slow, key, value, flags, copies, HOST);
                        prop_assert_eq!(errno(a), errno(b));
                    }
                    _ => {
                        let a = xstate::delete(&r.t, &fast, key, HOST);
                        let b = xstate::delete(&r.t, &slow, key, HOST);
                        prop_assert_eq!(errno(a), errno(b));
                    }
                }
                let a = hash::local::lookup_ref(&r.t, &fast, key, copy).map(|o| o - fast.data);
                let b = xstate::lookup_ref(&r.t, &slow, key, copy).unwrap().map(|o| o - slow.data);
                prop_assert_eq!(a, b);
                let w = <[u8; 8]>::try_from(key).map(u64::from_le_bytes);
                let a = hash::local::lookup_ref_word(&r.t, &fast, *w.as_ref().unwrap_or(&k), copy)
                    .map(|o| o - fast.data);
                prop_assert_eq!(a, if w.is_ok() { b } else { None });
                let (mut x, mut y) = (vec![0; fast.lookup_len()], vec![0; slow.lookup_len()]);
                let fa = xstate::lookup(&r.t, &fast, key, &mut x).unwrap();
                let fb = xstate::lookup(&r.t, &slow, key, &mut y).unwrap();
                prop_assert_eq!((fa, x), (fb, y));
            }
            prop_assert_eq!(xstate::keys(&r.t, &fast).unwrap(), xstate::keys(&r.t, &slow).unwrap());
        }

        /// Reclaiming tombstones never loses a key: after every insert or delete, each key
        /// the model holds is found with its value and no other key is.
        #[test]
        fn deletes_keep_every_live_key_findable(
            ops in prop::collection::vec((any::<bool>(), 0u64..200), 1..400),
        ) {
            let r = region();
            let m = map(&r, 1, 0, MapType::Hash, 8, 8);
            let mut model = std::collections::BTreeMap::new();
            for (insert, k) in ops {
                let key = k.to_le_bytes();
                if insert {
                    if hash::local::update(&r.t, &m, &key, &key, 0, Copies::All, HOST).is_ok() {
                        model.insert(k, ());
                    }
                } else {
                    let a = xstate::delete(&r.t, &m, &key, HOST).is_ok();
                    prop_assert_eq!(a, model.remove(&k).is_some());
                }
                for j in 0..200u64 {
                    let found = xstate::lookup_ref(&r.t, &m, &j.to_le_bytes(), 0).unwrap().is_some();
                    prop_assert_eq!(found, model.contains_key(&j), "key {}", j);
                }
            }
        }

        #[test]
        fn local_array_paths_match_generic(
            value_size in prop::sample::select(vec![4u32, 8, 16]),
            per_thread: bool,
            ops in prop::collection::vec((0u32..80, any::<u64>(), 0u64..4), 1..60),
        ) {
            let r = region();
            let ty = if per_thread { MapType::PerThreadArray } else { MapType::Array };
            let (fast, slow) = (map(&r, 1, 0, ty, 4, value_size), map(&r, 2, 1, ty, 4, value_size));
            let copies = if per_thread { Copies::One(3) } else { Copies::All };
            let copy = if per_thread { 3 } else { 0 };
            for (i, v, flags) in ops {
                let key = i.to_le_bytes();
                let value = &v.to_le_bytes().repeat(2)[..value_size as usize];
                let a = array::local::update(&r.t, &fast, &key, value, flags, copies, HOST);
                let b = xstate::update(&r.t, &slow, &key, value, flags, copies, HOST);
                prop_assert_eq!(errno(a), errno(b));
                let a = array::local::lookup_ref(&fast, &key, copy).map(|o| o - fast.data);
                let b = xstate::lookup_ref(&r.t, &slow, &key, copy).unwrap().map(|o| o - slow.data);
                prop_assert_eq!(a, b);
                let (mut x, mut y) = (vec![0; fast.lookup_len()], vec![0; slow.lookup_len()]);
                let fa = xstate::lookup(&r.t, &fast, &key, &mut x).unwrap();
                let fb = xstate::lookup(&r.t, &slow, &key, &mut y).unwrap();
                prop_assert_eq!((fa, x), (fb, y));
            }
        }
    }

    /// Keys that come and go (a connection table's) leave no tombstones behind: after many
    /// insert/delete pairs of distinct keys no element is left deleted, so a lookup of an
    /// absent key stops at its first empty element instead of walking every bucket.
    #[test]
    fn deleted_elements_are_reclaimed() {
        let r = region();
        for ty in [MapType::Hash, MapType::PerThreadHash] {
            let m = map(&r, 1 + ty as u32, ty as u64, ty, 8, 8);
            let copies = if ty == MapType::Hash {
                Copies::All
            } else {
                Copies::One(0)
            };
            for k in 0..20 * m.buckets as u64 {
                let key = (k * 0x9e37_79b9).to_le_bytes();
                // A few keys stay, so that runs of tombstones have live neighbours.
                hash::local::update(&r.t, &m, &key, &key, 0, copies, HOST).unwrap();
                if k % 16 != 0 || k >= 16 * 40 {
                    xstate::delete(&r.t, &m, &key, HOST).unwrap();
                }
            }
            let deleted = (0..m.buckets as u64)
                .filter(|&i| r.t.read_u64(elem(&m, i)).unwrap() & ELEM_STATE_MASK == ELEM_DELETED)
                .count();
            let live = (0..m.buckets as u64)
                .filter(|&i| r.t.read_u64(elem(&m, i)).unwrap() & ELEM_STATE_MASK == ELEM_LIVE)
                .count();
            assert_eq!(live, 40);
            // Only tombstones followed (through other tombstones) by a live element stay;
            // without reclamation every element not live ends up a tombstone.
            let state = |i: u64| {
                r.t.read_u64(elem(&m, i & (m.buckets as u64 - 1))).unwrap() & ELEM_STATE_MASK
            };
            for i in 0..m.buckets as u64 {
                if state(i) == ELEM_DELETED {
                    let next = (i + 1..i + m.buckets as u64).find(|&j| state(j) != ELEM_DELETED);
                    assert_eq!(
                        next.map(state),
                        Some(ELEM_LIVE),
                        "tombstone {i} runs into an empty element"
                    );
                }
            }
            assert!(
                deleted < m.buckets as usize - live,
                "{ty:?}: {deleted} tombstones left in {} buckets",
                m.buckets
            );
            for k in 0..40u64 {
                let key = (k * 16 * 0x9e37_79b9).to_le_bytes();
                assert!(
                    hash::local::lookup_ref(&r.t, &m, &key, 0).is_some(),
                    "key {k}"
                );
            }
        }
    }

    #[test]
    fn local_hash_update_leaves_a_held_lock_to_the_generic_path() {
        let r = region();
        let m = map(&r, 1, 0, MapType::Hash, 8, 8);
        let k = 5u64.to_le_bytes();
        // Another host thread holds the writer lock: the fast path does not write under it,
        // it waits in the generic code and writes once the lock is released.
        xstate::lock(&r.t, &m, TOKEN_HOST | 3).unwrap();
        std::thread::scope(|s| {
            let writer = s
                .spawn(|| hash::local::update(&r.t, &m, &k, &k, UPDATE_NOEXIST, Copies::All, HOST));
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert_eq!(hash::local::lookup_ref(&r.t, &m, &k, 0), None);
            xstate::unlock(&r.t, &m, TOKEN_HOST | 3).unwrap();
            writer.join().unwrap().unwrap();
        });
        assert!(hash::local::lookup_ref(&r.t, &m, &k, 0).is_some());
        let e = hash::local::update(&r.t, &m, &k, &k, UPDATE_NOEXIST, Copies::All, HOST);
        assert!(matches!(e, Err(MapError::Exists)));
        hash::local::update(&r.t, &m, &k, &k, UPDATE_EXIST, Copies::All, HOST).unwrap();
    }
}
