//! Arrays and per-thread arrays: fixed elements indexed by a 4-byte key, preallocated and
//! zeroed; no element is ever deleted. Element `i`, copy `c` lives at
//! `data + (i * copies + c) * value_stride`.
//!
//! Values are written in place without a seqlock (as the kernel's arrays): a value wider
//! than 8 bytes written concurrently with a remote read can be seen half-updated. Use a hash
//! map where remote readers need whole values.

use super::{invalid, Copies, MapError, MapOps, MapRef, UPDATE_NOEXIST};
use crate::Transport;

pub struct ArrayMap;

fn index(m: &MapRef, key: &[u8]) -> Result<Option<u32>, MapError> {
    m.check_key(key)?;
    let i = u32::from_le_bytes(key.try_into().expect("4-byte key"));
    Ok((i < m.max_entries).then_some(i))
}

fn element(m: &MapRef, i: u32, copy: u32) -> u64 {
    m.data + (i as u64 * m.copies as u64 + copy as u64) * m.value_stride as u64
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
        let len = m.lookup_len();
        t.read(element(m, i, 0), &mut out[..len])?;
        Ok(true)
    }

    fn update<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        value: &[u8],
        flags: u64,
        copies: Copies,
        _token: u64,
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
        match copies {
            Copies::One(c) => t.write(element(m, i, c), value)?,
            Copies::All => {
                for c in 0..m.copies {
                    t.write(element(m, i, c), value)?;
                }
            }
        }
        Ok(())
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
