//! `BPF_MAP_TYPE_RINGBUF`: a multi-producer, single-consumer ring of variable-length records.
//!
//! Programs reserve a record (`bpf_ringbuf_reserve`), fill it in place and submit or discard
//! it; `bpf_ringbuf_output` copies a record in one step. User space drains committed records in
//! order with [`RingBuf::consume`]. As in the kernel, each record takes an 8-byte header plus
//! its length rounded up to 8 bytes of the ring's capacity, and a record is handed to the
//! consumer only when every record before it was submitted or discarded.
//!
//! The header holds the address of the [`RingBuf`], which is how the native
//! `bpf_ringbuf_submit`/`discard` twins find the ring from a record pointer alone. A record
//! never wraps around the end of the data area: when it would, the producer skips to the start
//! with a discarded padding record (the kernel maps the area twice instead).

use std::collections::VecDeque;
use std::sync::Mutex;

use super::{MapError, MapOps, ValueSlab};

/// Bytes of the header before each record.
pub const RINGBUF_HEADER: u64 = 8;

/// `bpf_ringbuf_query` flags.
pub const BPF_RB_AVAIL_DATA: u64 = 0;
pub const BPF_RB_RING_SIZE: u64 = 1;
pub const BPF_RB_CONS_POS: u64 = 2;
pub const BPF_RB_PROD_POS: u64 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecordState {
    Reserved,
    Committed,
    Discarded,
}

#[derive(Debug)]
struct Record {
    /// Position of the header (monotonic, not wrapped).
    pos: u64,
    /// Bytes of data the program asked for.
    len: u64,
    /// Capacity taken: header + len rounded up to 8 (+ any padding before it).
    taken: u64,
    state: RecordState,
}

#[derive(Debug, Default)]
struct State {
    producer: u64,
    consumer: u64,
    records: VecDeque<Record>,
}

/// The ring. Its data area is one slab of `size` bytes (a power of two).
#[derive(Debug)]
pub struct RingBuf {
    data: ValueSlab,
    size: u64,
    state: Mutex<State>,
}

impl RingBuf {
    /// A ring of `size` data bytes; the kernel requires a power of two that is a multiple of
    /// the page size (4096).
    pub fn new(size: usize) -> Option<Self> {
        if !size.is_power_of_two() || !size.is_multiple_of(4096) {
            return None;
        }
        Some(Self {
            data: ValueSlab::new(size, 1)?,
            size: size as u64,
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn base(&self) -> u64 {
        self.data.ptr(0) as u64
    }

    /// Reserves `len` bytes; the address of the record's data, or `None` when the ring is
    /// full (or `len` is 0 or larger than the ring).
    pub fn reserve(&self, len: u64) -> Option<u64> {
        if len == 0 || len > self.size / 2 {
            return None;
        }
        let need = RINGBUF_HEADER + len.div_ceil(8) * 8;
        let mut st = self.state();
        let mut pos = st.producer;
        let wrapped = pos % self.size;
        // A record must not straddle the end of the data area.
        let pad = if wrapped + need > self.size {
            self.size - wrapped
        } else {
            0
        };
        if st.producer + pad + need - st.consumer > self.size {
            return None;
        }
        if pad > 0 {
            st.records.push_back(Record {
                pos,
                len: 0,
                taken: pad,
                state: RecordState::Discarded,
            });
            pos += pad;
        }
        st.records.push_back(Record {
            pos,
            len,
            taken: need,
            state: RecordState::Reserved,
        });
        st.producer = pos + need;
        let header = self.base() + pos % self.size;
        let me = self as *const RingBuf as u64;
        // SAFETY: the header lies inside the data slab (the record does not wrap) and is
        // 8-aligned (positions are multiples of 8); no program may touch it.
        unsafe { (header as *mut u64).write(me) };
        Some(header + RINGBUF_HEADER)
    }

    fn finish(&self, data: u64, state: RecordState) -> bool {
        let mut st = self.state();
        let base = self.base();
        let size = self.size;
        match st.records.iter_mut().find(|r| {
            r.state == RecordState::Reserved && base + r.pos % size + RINGBUF_HEADER == data
        }) {
            Some(r) => {
                r.state = state;
                true
            }
            None => false,
        }
    }

    /// Commits the record whose data starts at `data`; false if there is no such reservation.
    pub fn submit(&self, data: u64) -> bool {
        self.finish(data, RecordState::Committed)
    }

    /// Drops the record whose data starts at `data`; false if there is no such reservation.
    pub fn discard(&self, data: u64) -> bool {
        self.finish(data, RecordState::Discarded)
    }

    /// Reserves, copies and commits `bytes`; false when the ring is full.
    pub fn output(&self, bytes: &[u8]) -> bool {
        match self.reserve(bytes.len() as u64) {
            Some(p) => {
                // SAFETY: `p` addresses a fresh reservation of `bytes.len()` bytes inside the
                // data slab.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p as *mut u8, bytes.len()) };
                self.submit(p)
            }
            None => false,
        }
    }

    /// Whether the record whose data starts at `data` is reserved in this ring.
    pub fn owns_reservation(&self, data: u64) -> bool {
        let base = self.base();
        self.state().records.iter().any(|r| {
            r.state == RecordState::Reserved && base + r.pos % self.size + RINGBUF_HEADER == data
        })
    }

    /// Takes every committed record at the head of the ring, in order, stopping at the first
    /// record still reserved.
    pub fn consume(&self) -> Vec<Vec<u8>> {
        let mut st = self.state();
        let mut out = Vec::new();
        while let Some(r) = st.records.front() {
            match r.state {
                RecordState::Reserved => break,
                RecordState::Committed => {
                    let p = self.base() + r.pos % self.size + RINGBUF_HEADER;
                    let mut v = vec![0u8; r.len as usize];
                    // SAFETY: a committed record's data lies inside the slab.
                    unsafe {
                        std::ptr::copy_nonoverlapping(p as *const u8, v.as_mut_ptr(), v.len())
                    };
                    out.push(v);
                }
                RecordState::Discarded => {}
            }
            st.consumer = r.pos + r.taken;
            st.records.pop_front();
        }
        out
    }

    /// `bpf_ringbuf_query`.
    pub fn query(&self, flags: u64) -> u64 {
        let st = self.state();
        match flags {
            BPF_RB_AVAIL_DATA => st.producer - st.consumer,
            BPF_RB_RING_SIZE => self.size,
            BPF_RB_CONS_POS => st.consumer,
            BPF_RB_PROD_POS => st.producer,
            _ => 0,
        }
    }
}

impl MapOps for RingBuf {
    fn lookup(&self, _key: &[u8]) -> Option<*mut u8> {
        None
    }

    fn update(&self, _key: &[u8], _value: &[u8], _flags: u64) -> Result<(), MapError> {
        Err(MapError::NotSupported)
    }

    fn delete(&self, _key: &[u8]) -> Result<(), MapError> {
        Err(MapError::NotSupported)
    }

    fn keys(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }

    fn slab(&self) -> &ValueSlab {
        &self.data
    }

    /// Only the data of records currently reserved is program memory.
    fn value_access(&self, addr: u64, len: u64) -> bool {
        let base = self.base();
        if addr.wrapping_sub(base) >= self.size {
            return false;
        }
        self.state().records.iter().any(|r| {
            let start = base + r.pos % self.size + RINGBUF_HEADER;
            r.state == RecordState::Reserved
                && addr >= start
                && addr
                    .checked_add(len)
                    .is_some_and(|end| end <= start + r.len)
        })
    }

    fn as_ringbuf(&self) -> Option<&RingBuf> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_flow_in_order_and_wrap() {
        let rb = RingBuf::new(4096).unwrap();
        assert!(RingBuf::new(1000).is_none());
        let a = rb.reserve(10).unwrap();
        let b = rb.reserve(3).unwrap();
        assert!(rb.value_access(a, 10));
        assert!(!rb.value_access(a, 11));
        assert!(rb.submit(b));
        // `a` is still reserved, so nothing is consumable yet.
        assert!(rb.consume().is_empty());
        assert!(rb.discard(a));
        assert!(!rb.submit(a));
        assert_eq!(rb.consume().len(), 1);
        // Fill and drain repeatedly to cross the end of the area.
        for round in 0..50u8 {
            assert!(rb.output(&[round; 200]));
            assert_eq!(rb.consume(), vec![vec![round; 200]]);
        }
        assert_eq!(rb.query(BPF_RB_AVAIL_DATA), 0);
        // Full: 4096 bytes hold 19 records of 208 + 8 bytes.
        let mut n = 0;
        while rb.output(&[1; 200]) {
            n += 1;
        }
        assert!(n >= 18, "{n}");
        assert_eq!(rb.consume().len(), n);
    }
}
