//! Longest-prefix-match maps (`BPF_MAP_TYPE_LPM_TRIE` semantics). Keys are
//! `[prefixlen: u32][data: key_size - 4 bytes]`, bits counted from the first data byte's most
//! significant bit, as in the kernel.
//!
//! Layout: `max_entries` elements `[ctl: u64][key: key_stride][value: value_stride]`, the same
//! per-element seqlock as [`super::hash`], keys stored with the bits beyond their prefix
//! cleared. A lookup scans every live element and keeps the longest matching prefix: O(n) in
//! the number of elements, a deliberate trade for a layout whose every element a remote party
//! can read, write and validate on its own. Writers take the map lock.

use super::{
    invalid, locked, next_ctl, read_stable, retire_element, Copies, MapError, MapOps, MapRef,
    BUSY_SPIN_LIMIT, MAX_KEY_SIZE, UPDATE_EXIST, UPDATE_NOEXIST,
};
use crate::Transport;
use rdx_region::layout::{offsets, ELEM_BUSY, ELEM_LIVE, ELEM_STATE_MASK};

pub struct LpmMap;

const KEY_BUF: usize = MAX_KEY_SIZE as usize;

fn elem(m: &MapRef, i: u64) -> u64 {
    m.data + i * m.entry_stride as u64
}

fn max_bits(m: &MapRef) -> u32 {
    (m.key_size - 4) * 8
}

/// Prefix length of `key`, checked against the map's data size.
fn prefixlen(m: &MapRef, key: &[u8]) -> Result<u32, MapError> {
    m.check_key(key)?;
    let p = u32::from_le_bytes(key[..4].try_into().expect("4"));
    if p > max_bits(m) {
        return invalid(format!("prefix length {p} above {} bits", max_bits(m)));
    }
    Ok(p)
}

/// Whether the first `bits` bits of `a` and `b` are equal.
fn prefix_eq(a: &[u8], b: &[u8], bits: u32) -> bool {
    let full = (bits / 8) as usize;
    if a[..full] != b[..full] {
        return false;
    }
    let rest = bits % 8;
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[full] & mask == b[full] & mask
    }
}

/// `key` with the bits beyond its prefix cleared.
fn masked(key: &[u8], bits: u32, out: &mut [u8]) {
    out[..key.len()].copy_from_slice(key);
    let data = &mut out[4..key.len()];
    let full = (bits / 8) as usize;
    let rest = bits % 8;
    for (i, b) in data.iter_mut().enumerate() {
        if i > full || (i == full && rest == 0) {
            *b = 0;
        } else if i == full {
            *b &= 0xffu8 << (8 - rest);
        }
    }
}

/// Longest match for `key`: (element, ctl) read consistently.
fn best<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    key: &[u8],
) -> Result<Option<(u64, u64)>, MapError> {
    let want = prefixlen(m, key)?;
    let n = m.key_size as usize;
    let mut buf = [0u8; KEY_BUF];
    let mut found: Option<(u32, u64, u64)> = None;
    for i in 0..m.buckets as u64 {
        let e = elem(m, i);
        for attempt in 0..=BUSY_SPIN_LIMIT {
            if attempt == BUSY_SPIN_LIMIT {
                return Err(MapError::Busy {
                    id: m.id,
                    holder: 0,
                });
            }
            let c = t.read_u64(e)?;
            match c & ELEM_STATE_MASK {
                ELEM_BUSY => {
                    std::hint::spin_loop();
                    continue;
                }
                ELEM_LIVE => {}
                _ => break,
            }
            t.read(e + 8, &mut buf[..n])?;
            if t.read_u64(e)? != c {
                continue;
            }
            let p = u32::from_le_bytes(buf[..4].try_into().expect("4"));
            if p <= want
                && p <= max_bits(m)
                && prefix_eq(&buf[4..n], &key[4..], p)
                && found.is_none_or(|(bp, ..)| p > bp)
            {
                found = Some((p, e, c));
            }
            break;
        }
    }
    Ok(found.map(|(_, e, c)| (e, c)))
}

/// An element's region offset and the control word it was read under.
type Element = (u64, u64);

/// The element holding exactly `key` (same prefix length and masked data) and the first
/// reusable element, under the lock.
fn exact<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    key: &[u8],
) -> Result<(Option<Element>, Option<Element>), MapError> {
    let mut want = [0u8; KEY_BUF];
    let n = m.key_size as usize;
    masked(key, prefixlen(m, key)?, &mut want);
    let mut free = None;
    for i in 0..m.buckets as u64 {
        let e = elem(m, i);
        let c = t.read_u64(e)?;
        if c & ELEM_STATE_MASK == ELEM_LIVE {
            if t.equals(e + 8, &want[..n])? {
                return Ok((Some((e, c)), free));
            }
        } else if free.is_none() {
            free = Some((e, c));
        }
    }
    Ok((None, free))
}

impl MapOps for LpmMap {
    fn lookup_ref<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        _copy: u32,
    ) -> Result<Option<u64>, MapError> {
        Ok(best(t, m, key)?.map(|(e, _)| e + 8 + m.key_stride as u64))
    }

    fn lookup<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        out: &mut [u8],
    ) -> Result<bool, MapError> {
        let len = m.value_size as usize;
        let value_offset = 8 + m.key_stride as u64;
        read_stable(
            t,
            m,
            &mut out[..len],
            || best(t, m, key),
            |e| e + value_offset,
        )
    }

    fn update<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        value: &[u8],
        flags: u64,
        _copies: Copies,
        token: u64,
    ) -> Result<(), MapError> {
        let bits = prefixlen(m, key)?;
        locked(t, m, token, || {
            let (hit, free) = exact(t, m, key)?;
            let (e, c, fresh) = match (hit, free) {
                (Some(_), _) if flags == UPDATE_NOEXIST => return Err(MapError::Exists),
                (Some((e, c)), _) => (e, c, false),
                (None, _) if flags == UPDATE_EXIST => return Err(MapError::NotFound),
                (None, Some((e, c)))
                    if t.read_u64(m.offset + offsets::MAP_COUNT)? < m.max_entries as u64 =>
                {
                    (e, c, true)
                }
                (None, _) => {
                    return Err(MapError::Full {
                        id: m.id,
                        max_entries: m.max_entries,
                    })
                }
            };
            let busy = next_ctl(c, ELEM_BUSY);
            t.write_u64(e, busy)?;
            if fresh {
                let mut k = [0u8; KEY_BUF];
                masked(key, bits, &mut k);
                t.write(e + 8, &k[..m.key_stride as usize])?;
            }
            t.write(e + 8 + m.key_stride as u64, value)?;
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
        prefixlen(m, key)?;
        locked(t, m, token, || {
            let (Some((e, c)), _) = exact(t, m, key)? else {
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
        let n = m.key_size as usize;
        let start = match key {
            None => 0,
            Some(k) => {
                let mut want = [0u8; KEY_BUF];
                masked(k, prefixlen(m, k)?, &mut want);
                let mut at = 0;
                for i in 0..m.buckets as u64 {
                    let e = elem(m, i);
                    if t.read_u64(e)? & ELEM_STATE_MASK == ELEM_LIVE
                        && t.equals(e + 8, &want[..n])?
                    {
                        at = i + 1;
                        break;
                    }
                }
                at
            }
        };
        for i in start..m.buckets as u64 {
            let e = elem(m, i);
            let c = t.read_u64(e)?;
            if c & ELEM_STATE_MASK != ELEM_LIVE {
                continue;
            }
            t.read(e + 8, &mut out[..n])?;
            if t.read_u64(e)? == c {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_and_prefix_comparison() {
        let mut out = [0u8; 8];
        masked(&[12, 0, 0, 0, 0xab, 0xcd, 0xef, 0x12], 12, &mut out);
        assert_eq!(out, [12, 0, 0, 0, 0xab, 0xc0, 0, 0]);
        assert!(prefix_eq(&[0xab, 0xc0], &[0xab, 0xcf], 12));
        assert!(!prefix_eq(&[0xab, 0xc0], &[0xab, 0xdf], 12));
        assert!(prefix_eq(&[1, 2], &[3, 4], 0));
    }
}
