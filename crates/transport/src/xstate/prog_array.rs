//! Program arrays for tail calls: each element is one 8-byte active word with the same
//! encoding as a hook slot's ([`rdx_region::layout::active_word`]), 0 when empty. Control
//! planes set and clear elements with single 8-byte writes, so a tail call sees an old or a
//! new program, never a mix. Extensions cannot look elements up.

use super::{invalid, Copies, MapError, MapOps, MapRef, UPDATE_EXIST, UPDATE_NOEXIST};
use crate::Transport;

pub struct ProgArrayMap;

fn element(m: &MapRef, key: &[u8]) -> Result<Option<u64>, MapError> {
    m.check_key(key)?;
    let i = u32::from_le_bytes(key.try_into().expect("4-byte key"));
    Ok((i < m.max_entries).then(|| m.data + i as u64 * 8))
}

impl MapOps for ProgArrayMap {
    fn lookup_ref<T: Transport + ?Sized>(
        _t: &T,
        _m: &MapRef,
        _key: &[u8],
        _copy: u32,
    ) -> Result<Option<u64>, MapError> {
        Ok(None)
    }

    fn lookup<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        out: &mut [u8],
    ) -> Result<bool, MapError> {
        let Some(e) = element(m, key)? else {
            return Ok(false);
        };
        let w = t.read_u64(e)?;
        if w == 0 {
            return Ok(false);
        }
        let n = m.value_size as usize;
        out[..n].copy_from_slice(&w.to_le_bytes()[..n]);
        Ok(true)
    }

    fn update<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        value: &[u8],
        flags: u64,
        _copies: Copies,
        _token: u64,
    ) -> Result<(), MapError> {
        let Some(e) = element(m, key)? else {
            return Err(MapError::Full {
                id: m.id,
                max_entries: m.max_entries,
            });
        };
        let mut b = [0u8; 8];
        b[..value.len()].copy_from_slice(value);
        let new = u64::from_le_bytes(b);
        if new == 0 {
            return invalid("a program array element cannot be set to 0; delete it");
        }
        let cur = t.read_u64(e)?;
        if flags == UPDATE_NOEXIST && cur != 0 {
            return Err(MapError::Exists);
        }
        if flags == UPDATE_EXIST && cur == 0 {
            return Err(MapError::NotFound);
        }
        t.write_u64(e, new)?;
        Ok(())
    }

    fn delete<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        _token: u64,
    ) -> Result<(), MapError> {
        let Some(e) = element(m, key)? else {
            return Err(MapError::NotFound);
        };
        if t.read_u64(e)? == 0 {
            return Err(MapError::NotFound);
        }
        t.write_u64(e, 0)?;
        Ok(())
    }

    fn next_key<T: Transport + ?Sized>(
        _t: &T,
        m: &MapRef,
        key: Option<&[u8]>,
        out: &mut [u8],
    ) -> Result<bool, MapError> {
        let next = match key {
            None => 0,
            Some(k) => {
                m.check_key(k)?;
                u32::from_le_bytes(k.try_into().expect("4")).saturating_add(1)
            }
        };
        if next >= m.max_entries {
            return Ok(false);
        }
        out[..4].copy_from_slice(&next.to_le_bytes());
        Ok(true)
    }
}
