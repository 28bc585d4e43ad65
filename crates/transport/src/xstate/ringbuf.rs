//! Ring buffers: host threads produce, one control plane consumes remotely.
//!
//! Data is `buckets` bytes (a power of two) of records `[hdr: u64][data, padded to 8]`; the
//! low 32 bits of `hdr` are the data length plus [`RINGBUF_BUSY`] while the producer
//! fills it and [`RINGBUF_DISCARD`] for discarded records and wrap padding. Positions in
//! the header count bytes ever produced/consumed. Producers serialise their (short)
//! reservation on the map lock and fill records concurrently; the consumer stops at the
//! first busy record, so records are consumed in reservation order.

use super::{invalid, lock, unlock, MapError, MapRef};
use crate::Transport;
use rdx_region::layout::{offsets, MapType, RINGBUF_BUSY, RINGBUF_DISCARD, RINGBUF_HDR_LEN};

fn check(m: &MapRef) -> Result<(), MapError> {
    if m.map_type != MapType::RingBuf {
        return Err(MapError::Unsupported {
            op: "ring buffer operation",
            map_type: m.map_type,
        });
    }
    Ok(())
}

/// Reserves `len` bytes; returns the region offset of the record's data, or `None` when
/// the consumer is too far behind (counted in the map's `dropped` word).
pub fn reserve<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    len: u64,
    token: u64,
) -> Result<Option<u64>, MapError> {
    check(m)?;
    let size = m.buckets as u64;
    let rec = (RINGBUF_HDR_LEN + len + 7) & !7;
    if len == 0 || len >= RINGBUF_BUSY as u64 || rec > size / 2 {
        return invalid(format!(
            "record of {len} bytes for a {size}-byte ring buffer"
        ));
    }
    let held = lock(t, m, token)?;
    let r = (|| {
        let cons = t.read_u64(m.offset + offsets::MAP_CONSUMER)?;
        let mut prod = t.read_u64(m.offset + offsets::MAP_PRODUCER)?;
        let at = prod & (size - 1);
        let pad = if at + rec > size { size - at } else { 0 };
        if prod + pad + rec - cons > size {
            t.fetch_and_add(m.offset + offsets::MAP_DROPPED, 1)?;
            return Ok(None);
        }
        if pad > 0 {
            t.write_u64(
                m.data + at,
                (pad - RINGBUF_HDR_LEN) | RINGBUF_DISCARD as u64,
            )?;
            prod += pad;
        }
        let hdr = m.data + (prod & (size - 1));
        // The high half says how far back the map header is, so that `commit` can find the
        // map from a record pointer alone (what the submit/discard helpers receive).
        t.write_u64(hdr, ((hdr - m.offset) << 32) | len | RINGBUF_BUSY as u64)?;
        t.write_u64(m.offset + offsets::MAP_PRODUCER, prod + rec)?;
        Ok(Some(hdr + RINGBUF_HDR_LEN))
    })();
    unlock(t, m, held)?;
    r
}

/// Makes the reserved record whose data starts at region offset `data` visible to the
/// consumer (or skipped, if `discard`). The map is found from the record itself.
pub fn commit<T: Transport + ?Sized>(t: &T, data: u64, discard: bool) -> Result<(), MapError> {
    let bad = || MapError::Invalid(format!("{data:#x} is not a reserved ring buffer record"));
    let hdr = data.checked_sub(RINGBUF_HDR_LEN).ok_or_else(bad)?;
    if hdr % 8 != 0 {
        return Err(bad());
    }
    let w = t.read_u64(hdr)?;
    if w & RINGBUF_BUSY as u64 == 0 {
        return Err(bad());
    }
    let m = MapRef::read(t, hdr.checked_sub(w >> 32).ok_or_else(bad)?)?;
    check(&m)?;
    if hdr < m.data || hdr >= m.data + m.data_size {
        return Err(bad());
    }
    let len = w & 0x3fff_ffff;
    t.write_u64(hdr, len | if discard { RINGBUF_DISCARD as u64 } else { 0 })?;
    Ok(())
}

/// Copies `data` into a new record and commits it.
pub fn output<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    data: &[u8],
    token: u64,
) -> Result<bool, MapError> {
    let Some(at) = reserve(t, m, data.len() as u64, token)? else {
        return Ok(false);
    };
    t.write(at, data)?;
    commit(t, at, false)?;
    Ok(true)
}

/// Consumes every committed record (in order, up to the first one still being written),
/// passing each one's bytes to `f`; returns how many were consumed. One consumer at a time.
pub fn consume<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    mut f: impl FnMut(&[u8]),
) -> Result<usize, MapError> {
    check(m)?;
    let size = m.buckets as u64;
    let mut cons = t.read_u64(m.offset + offsets::MAP_CONSUMER)?;
    let prod = t.read_u64(m.offset + offsets::MAP_PRODUCER)?;
    if prod.wrapping_sub(cons) > size {
        return Err(MapError::Corrupt {
            id: m.id,
            reason: format!("producer {prod} and consumer {cons} more than {size} bytes apart"),
        });
    }
    let mut n = 0;
    let mut buf = Vec::new();
    while cons < prod {
        let hdr = t.read_u64(m.data + (cons & (size - 1)))?;
        if hdr & RINGBUF_BUSY as u64 != 0 {
            break;
        }
        let len = hdr & 0x3fff_ffff;
        let rec = (RINGBUF_HDR_LEN + len + 7) & !7;
        if rec > size - (cons & (size - 1)) {
            return Err(MapError::Corrupt {
                id: m.id,
                reason: format!("record of {len} bytes at position {cons} crosses the end"),
            });
        }
        if hdr & RINGBUF_DISCARD as u64 == 0 {
            buf.resize(len as usize, 0);
            t.read(m.data + (cons & (size - 1)) + RINGBUF_HDR_LEN, &mut buf)?;
            f(&buf);
            n += 1;
        }
        cons += rec;
    }
    t.write_u64(m.offset + offsets::MAP_CONSUMER, cons)?;
    Ok(n)
}

/// Records dropped because the ring was full.
pub fn dropped<T: Transport + ?Sized>(t: &T, m: &MapRef) -> Result<u64, MapError> {
    check(m)?;
    Ok(t.read_u64(m.offset + offsets::MAP_DROPPED)?)
}
