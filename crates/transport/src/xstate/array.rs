//! Arrays and per-thread arrays: fixed elements indexed by a 4-byte key, preallocated and
//! zeroed; no element is ever deleted. Element `i`, copy `c` lives at
//! `data + (i * copies + c) * value_stride`.
//!
//! No reader, local or remote, sees a torn value written through this module:
//! - values of at most 8 bytes are written and read as one aligned 8-byte word (the value
//!   zero-extended into its stride);
//! - wider values have a sequence word per (element, copy), in a table after the values
//!   (`data + max_entries * copies * value_stride + (i * copies + c) * 8`). Writers take the
//!   map's writer lock, make the word odd, write, make it even; readers copy the value
//!   between two equal, even loads of it.
//!
//! Values that extension code modifies in place through a lookup pointer are not covered
//! (as in the kernel).

use super::{invalid, locked, Copies, MapError, MapOps, MapRef, BUSY_SPIN_LIMIT, UPDATE_NOEXIST};
use crate::Transport;

/// [`MapOps`] of arrays and per-thread arrays.
pub struct ArrayMap;

/// Whether values of `value_size` bytes are guarded by sequence words.
pub fn seqlocked_value(value_size: u32) -> bool {
    value_size > 8
}

fn index(m: &MapRef, key: &[u8]) -> Result<Option<u32>, MapError> {
    m.check_key(key)?;
    let i = u32::from_le_bytes(key.try_into().expect("4-byte key"));
    Ok((i < m.max_entries).then_some(i))
}

fn element(m: &MapRef, i: u32, copy: u32) -> u64 {
    m.data + (i as u64 * m.copies as u64 + copy as u64) * m.value_stride as u64
}

/// Region offset of the sequence word of (`i`, `copy`) in a seqlocked array.
pub fn seq_word(m: &MapRef, i: u32, copy: u32) -> u64 {
    m.data
        + m.max_entries as u64 * m.copies as u64 * m.value_stride as u64
        + (i as u64 * m.copies as u64 + copy as u64) * 8
}

/// Writes one copy's value. The caller holds the map lock when the value is seqlocked.
fn write_value<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    i: u32,
    copy: u32,
    value: &[u8],
) -> Result<(), MapError> {
    let at = element(m, i, copy);
    if !seqlocked_value(m.value_size) {
        let mut w = [0u8; 8];
        w[..value.len()].copy_from_slice(value);
        t.write_u64(at, u64::from_le_bytes(w))?;
        return Ok(());
    }
    let seq_at = seq_word(m, i, copy);
    let s = t.read_u64(seq_at)?;
    // Even unless a writer died mid-write (its lock was then broken): continue from odd.
    let odd = s | 1;
    t.write_u64(seq_at, odd)?;
    t.write(at, value)?;
    t.write_u64(seq_at, odd + 1)?;
    Ok(())
}

/// A consistent copy of one copy's value into `out` (`value_size` bytes).
fn read_value<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    i: u32,
    copy: u32,
    out: &mut [u8],
) -> Result<(), MapError> {
    let at = element(m, i, copy);
    if !seqlocked_value(m.value_size) {
        let w = t.read_u64(at)?.to_le_bytes();
        out.copy_from_slice(&w[..out.len()]);
        return Ok(());
    }
    let seq_at = seq_word(m, i, copy);
    for spin in 0..BUSY_SPIN_LIMIT {
        let s = t.read_u64(seq_at)?;
        if s & 1 == 0 {
            t.read(at, out)?;
            if t.read_u64(seq_at)? == s {
                return Ok(());
            }
        }
        if spin > 64 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    Err(MapError::Busy {
        id: m.id,
        holder: 0,
    })
}

/// After a dead writer's lock was broken: sequence words it left odd become even again.
/// The value under such a word may be partly written; it is whole from now on.
pub(crate) fn repair<T: Transport + ?Sized>(t: &T, m: &MapRef) -> Result<(), MapError> {
    if !seqlocked_value(m.value_size) {
        return Ok(());
    }
    for i in 0..m.max_entries {
        for c in 0..m.copies {
            let at = seq_word(m, i, c);
            let s = t.read_u64(at)?;
            if s & 1 == 1 {
                t.write_u64(at, s + 1)?;
            }
        }
    }
    Ok(())
}

impl MapOps for ArrayMap {
    #[inline]
    fn lookup_ref<T: Transport + ?Sized>(
        _t: &T,
        m: &MapRef,
        key: &[u8],
        copy: u32,
    ) -> Result<Option<u64>, MapError> {
        if copy >= m.copies {
            return invalid(format!("copy {copy} of {}", m.copies));
        }
        Ok(index(m, key)?.map(|i| element(m, i, copy)))
    }

    fn lookup<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        out: &mut [u8],
    ) -> Result<bool, MapError> {
        let Some(i) = index(m, key)? else {
            return Ok(false);
        };
        let stride = m.value_stride as usize;
        let n = m.value_size as usize;
        for c in 0..m.copies {
            let at = c as usize * stride;
            read_value(t, m, i, c, &mut out[at..at + n])?;
        }
        Ok(true)
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
        let Some(i) = index(m, key)? else {
            return Err(MapError::Full {
                id: m.id,
                max_entries: m.max_entries,
            });
        };
        if flags == UPDATE_NOEXIST {
            return Err(MapError::Exists);
        }
        let write = || match copies {
            Copies::One(c) => write_value(t, m, i, c, value),
            Copies::All => (0..m.copies).try_for_each(|c| write_value(t, m, i, c, value)),
        };
        if seqlocked_value(m.value_size) {
            locked(t, m, token, write)
        } else {
            write()
        }
    }

    fn delete<T: Transport + ?Sized>(
        _t: &T,
        m: &MapRef,
        _key: &[u8],
        _token: u64,
    ) -> Result<(), MapError> {
        invalid(format!("elements of array map {} cannot be deleted", m.id))
    }

    fn next_key<T: Transport + ?Sized>(
        _t: &T,
        m: &MapRef,
        key: Option<&[u8]>,
        out: &mut [u8],
    ) -> Result<bool, MapError> {
        let next = match key {
            None => 0,
            Some(k) => match index(m, k)? {
                Some(i) => i + 1,
                None => 0,
            },
        };
        if next >= m.max_entries {
            return Ok(false);
        }
        out[..4].copy_from_slice(&next.to_le_bytes());
        Ok(true)
    }
}

/// Host-side fast paths for the runtime's map helpers on the host's own mapping: what
/// [`ArrayMap`]'s `lookup_ref` and `update` do, without a bounds check per access (a checked
/// [`MapRef`]'s elements lie inside the region) and without building a `Result` on the
/// way. Seqlocked (wider than 8 bytes) values and bad arguments go to the generic code.
pub mod local {
    use super::{element, seqlocked_value};
    use crate::local::LocalRegion;
    use crate::xstate::{Copies, MapError, MapRef, UPDATE_EXIST, UPDATE_NOEXIST};
    use crate::Transport;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// The element index a 4-byte key names, if in range.
    #[inline(always)]
    fn index(m: &MapRef, key: &[u8]) -> Option<u32> {
        let i = u32::from_le_bytes(key.try_into().ok()?);
        (i < m.max_entries).then_some(i)
    }

    /// Region offset of the value of `key` in copy `copy`, or `None`.
    #[inline]
    pub fn lookup_ref(m: &MapRef, key: &[u8], copy: u32) -> Option<u64> {
        if key.len() != m.key_size as usize || copy >= m.copies {
            return None;
        }
        Some(element(m, index(m, key)?, copy))
    }

    /// `bpf_map_update_elem` on the host, as [`super::ArrayMap`]'s `update`.
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
        let cp = match copies {
            Copies::One(cp) => cp,
            Copies::All if m.copies == 1 => 0,
            Copies::All => return update_slow(r, m, key, value, flags, copies, token),
        };
        if key.len() != m.key_size as usize
            || value.len() != m.value_size as usize
            || flags > UPDATE_EXIST
            || cp >= m.copies
            || seqlocked_value(m.value_size)
        {
            return update_slow(r, m, key, value, flags, copies, token);
        }
        let Some(i) = index(m, key) else {
            return Err(MapError::Full {
                id: m.id,
                max_entries: m.max_entries,
            });
        };
        if flags == UPDATE_NOEXIST {
            return Err(MapError::Exists);
        }
        let mut w = [0u8; 8];
        w[..value.len()].copy_from_slice(value);
        let at = element(m, i, cp);
        debug_assert!(at.is_multiple_of(8) && at + 8 <= r.region_len());
        // SAFETY: `i < max_entries` and `cp < copies`: an 8-byte-aligned element of a
        // checked map, inside the region, which stays mapped while `r` is used.
        let word = unsafe { &*(r.base().add(at as usize) as *const AtomicU64) };
        word.store(u64::from_le_bytes(w), Ordering::Release);
        Ok(())
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
}
