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
            let (e, c, fresh) = match find_for_write(t, m, key)? {
                Slot::Found(e, c) => {
                    if flags == UPDATE_NOEXIST {
                        return Err(MapError::Exists);
                    }
                    (e, c, false)
                }
                Slot::Free(e, c) => {
                    if flags == UPDATE_EXIST {
                        return Err(MapError::NotFound);
                    }
                    if t.read_u64(m.offset + offsets::MAP_COUNT)? >= m.max_entries as u64 {
                        return Err(MapError::Full {
                            id: m.id,
                            max_entries: m.max_entries,
                        });
                    }
                    (e, c, true)
                }
                Slot::Full => {
                    return Err(MapError::Full {
                        id: m.id,
                        max_entries: m.max_entries,
                    })
                }
            };
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
            retire_element(t, m, e, c)
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
