//! Program arrays for tail calls: each element is one 8-byte active word with the same
//! encoding as a hook slot's ([`rdx_region::layout::active_word`]), 0 when empty. Control
//! planes set and clear elements with single 8-byte writes, so a tail call sees an old or a
//! new program, never a mix. Extensions cannot look elements up, and the host's map helpers
//! refuse to write them: only control planes do.
//!
//! A host enters an element's entry only if the control plane published it as a tail-call
//! target: a [`TailEntryTag`] with the element's version right before the entry, in the
//! code arena (which the host cannot write). [`publish_target`] writes the tag and then the
//! element; [`retract_target`] clears the element and [`forget_target`] the tag, once no
//! run can still be using it (after the epoch wait of `docs/region.md`).

use super::{invalid, Copies, MapError, MapOps, MapRef, UPDATE_EXIST, UPDATE_NOEXIST};
use crate::Transport;
use rdx_region::abi::TailEntryTag;
use rdx_region::geometry::HeaderInfo;
use rdx_region::layout::{active_word, SectionId, CODE_ENTRY_ALIGN};

/// Publishes the code whose entry point is at region offset `entry` (already written,
/// linked for this region and, on aarch64, made coherent) as element `index` of the program
/// array `m`, under `version` (nonzero): writes its [`TailEntryTag`] into the 16 bytes
/// before the entry, then the element. `metered` must say whether the code charges its
/// instructions to the run's budget; a host enters only metered targets (a tail call runs
/// on what is left of the budget of the run that made it).
///
/// The 16 bytes before the entry must belong to the code's own record (the code is placed
/// at least 16 bytes into it); an elite record's fallback locator is there, so elite code
/// cannot be a tail-call target.
pub fn publish_target<T: Transport + ?Sized>(
    t: &T,
    info: &HeaderInfo,
    m: &MapRef,
    index: u32,
    version: u32,
    entry: u64,
    metered: bool,
) -> Result<(), MapError> {
    if m.map_type != rdx_region::layout::MapType::ProgArray {
        return invalid(format!("map {} is not a program array", m.id));
    }
    if index >= m.max_entries {
        return Err(MapError::Full {
            id: m.id,
            max_entries: m.max_entries,
        });
    }
    if version == 0 {
        return invalid("a tail-call target needs a nonzero version");
    }
    let code = info.section(SectionId::Code);
    let tag_at = entry.checked_sub(TailEntryTag::BYTES);
    if !entry.is_multiple_of(CODE_ENTRY_ALIGN)
        || entry >= code.end()
        || tag_at.is_none_or(|at| at < code.offset)
    {
        return invalid(format!(
            "entry {entry:#x} is not a {CODE_ENTRY_ALIGN}-byte aligned offset in the code arena at least {} bytes past its start",
            TailEntryTag::BYTES
        ));
    }
    let flags = if metered { TailEntryTag::METERED } else { 0 };
    let tag_at = entry - TailEntryTag::BYTES;
    if t.read_u64(tag_at)? == rdx_region::abi::FALLBACK_MAGIC {
        // Overwriting the locator would cost the elite code its fallback image, and a tail
        // call could not continue its deoptimised runs anyway (the hook's image is not its).
        return invalid(format!(
            "entry {entry:#x} is elite code (a fallback locator precedes it): not a tail-call target"
        ));
    }
    t.write(tag_at, &TailEntryTag::new(version, flags).to_bytes())?;
    // The tag is visible before the element that leads to it.
    t.fence()?;
    t.write_u64(
        m.data + index as u64 * 8,
        active_word(version, entry as u32),
    )?;
    Ok(())
}

/// Empties element `index` of the program array `m`: no tail call enters it afterwards.
/// Runs that already read it may still be in its code until the epoch wait.
pub fn retract_target<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    index: u32,
) -> Result<(), MapError> {
    if m.map_type != rdx_region::layout::MapType::ProgArray || index >= m.max_entries {
        return invalid(format!("no element {index} in program array {}", m.id));
    }
    t.write_u64(m.data + index as u64 * 8, 0)?;
    Ok(())
}

/// Clears the tag of a tail-call target at `entry` whose elements were all retracted and
/// whose runs are over (after the epoch wait): a stale element that still names it, or a
/// forged one, is then refused even before the record is reused.
pub fn forget_target<T: Transport + ?Sized>(t: &T, entry: u64) -> Result<(), MapError> {
    let tag_at = entry
        .checked_sub(TailEntryTag::BYTES)
        .ok_or_else(|| MapError::Invalid(format!("entry {entry:#x} has no tag before it")))?;
    t.write(tag_at, &[0u8; TailEntryTag::BYTES as usize])?;
    Ok(())
}

/// [`MapOps`] of program arrays: raw active words, each set or cleared with one 8-byte
/// write (tail-call targets are published with [`publish_target`]).
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
