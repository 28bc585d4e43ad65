//! The map helpers' operations for helpers that run in a process mapping the region: a host's
//! own helpers (`rdx-runtime`) and the helpers of cross-sandbox callees (`rdx-xcall`), which
//! both call these instead of dispatching on the map type themselves.
//!
//! Arrays and hashes (plain and per-thread) go through their fast paths for a mapping in this
//! process ([`array::local`], [`hash::local`]); LPM tries through the generic code every party
//! runs. Maps that hold no program data are refused whatever the verifier let through: the
//! verifier refuses these calls too, and this is the second wall.

use super::{array, hash, Copies, MapRef};
use crate::local::LocalRegion;
use rdx_region::layout::MapType;

const EINVAL: u64 = (-(libc::EINVAL as i64)) as u64;

/// Whether a data-map helper (lookup, update, delete) may operate on a map of this type.
/// Program arrays hold jump words (`version << 32 | code offset`) that only control planes
/// write, and ring buffers hold records: neither is program data.
#[inline(always)]
pub fn holds_program_data(map_type: MapType) -> bool {
    !matches!(map_type, MapType::ProgArray | MapType::RingBuf)
}

/// `map_lookup_elem`: the region offset of the value of `key` in copy `copy`, or `None`
/// (also for maps that hold no program data).
#[inline(always)]
pub fn lookup_ref(r: &LocalRegion, m: &MapRef, key: &[u8], copy: u32) -> Option<u64> {
    match m.map_type {
        MapType::Hash | MapType::PerThreadHash => hash::local::lookup_ref(r, m, key, copy),
        MapType::Array | MapType::PerThreadArray => array::local::lookup_ref(m, key, copy),
        other if !holds_program_data(other) => None,
        _ => super::lookup_ref(r, m, key, copy).ok().flatten(),
    }
}

/// `map_update_elem`: what the helper returns, 0 or a negative errno (`-EINVAL` for maps that
/// hold no program data).
#[inline(always)]
pub fn update(
    r: &LocalRegion,
    m: &MapRef,
    key: &[u8],
    value: &[u8],
    flags: u64,
    copies: Copies,
    token: u64,
) -> u64 {
    let done = match m.map_type {
        MapType::Hash | MapType::PerThreadHash => {
            hash::local::update(r, m, key, value, flags, copies, token)
        }
        MapType::Array | MapType::PerThreadArray => {
            array::local::update(r, m, key, value, flags, copies, token)
        }
        other if !holds_program_data(other) => return EINVAL,
        _ => super::update(r, m, key, value, flags, copies, token),
    };
    match done {
        Ok(()) => 0,
        Err(e) => e.errno() as u64,
    }
}

/// `map_delete_elem`: what the helper returns, 0 or a negative errno (`-EINVAL` for maps that
/// hold no program data).
#[inline(always)]
pub fn delete(r: &LocalRegion, m: &MapRef, key: &[u8], token: u64) -> u64 {
    if !holds_program_data(m.map_type) {
        return EINVAL;
    }
    match super::delete(r, m, key, token) {
        Ok(()) => 0,
        Err(e) => e.errno() as u64,
    }
}
