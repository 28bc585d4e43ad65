//! Fixed storage for map values, allocated once so that value addresses never move.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// `count` values of `value_size` bytes, each starting on an 8-byte boundary (the stride is
/// `value_size` rounded up to 8, as in the kernel), so that programs may use 64-bit atomics on
/// aligned fields of a value.
#[derive(Debug)]
pub struct ValueSlab {
    // `AtomicU64` gives interior mutability: programs write through pointers into this memory
    // while the map is shared.
    words: Box<[AtomicU64]>,
    stride: usize,
    count: usize,
    value_size: usize,
    /// Which slots hold a live entry, for maps whose entries come and go (hash, trie):
    /// checked mode refuses accesses to free slots, which catches use after delete. `None`
    /// for arrays, whose slots are always live.
    live: Option<Box<[AtomicBool]>>,
}

impl ValueSlab {
    /// A zeroed slab, or `None` if it would exceed [`super::MAX_MAP_BYTES`].
    pub fn new(value_size: usize, count: usize) -> Option<Self> {
        Self::build(value_size, count, false)
    }

    /// A slab whose slots start free; see [`ValueSlab::set_live`].
    pub fn with_liveness(value_size: usize, count: usize) -> Option<Self> {
        Self::build(value_size, count, true)
    }

    fn build(value_size: usize, count: usize, track_live: bool) -> Option<Self> {
        let stride = value_size.checked_add(7)? & !7;
        let bytes = stride.checked_mul(count)?;
        if bytes > super::MAX_MAP_BYTES {
            return None;
        }
        let words = (0..bytes / 8).map(|_| AtomicU64::new(0)).collect();
        Some(Self {
            words,
            stride,
            count,
            value_size,
            live: track_live.then(|| (0..count).map(|_| AtomicBool::new(false)).collect()),
        })
    }

    /// Marks slot `index` as holding (or no longer holding) an entry.
    pub fn set_live(&self, index: usize, live: bool) {
        if let Some(l) = &self.live {
            l[index].store(live, Ordering::Release);
        }
    }

    /// Number of value slots.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Bytes of each value (slots are this rounded up to 8).
    pub fn value_size(&self) -> usize {
        self.value_size
    }

    fn base(&self) -> *mut u8 {
        self.words.as_ptr() as *mut u8
    }

    /// Address of value `index` (`index < count`).
    pub fn ptr(&self, index: usize) -> *mut u8 {
        assert!(index < self.count, "slab index {index} out of range");
        // SAFETY: index < count, so the offset stays inside the allocation.
        unsafe { self.base().add(index * self.stride) }
    }

    /// Copies `value` (exactly `value_size` bytes) into slot `index`.
    pub fn write(&self, index: usize, value: &[u8]) {
        assert_eq!(value.len(), self.value_size);
        let dst = self.ptr(index);
        // SAFETY: `dst` addresses `value_size` bytes inside the slab; `value` is a distinct
        // Rust slice, so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), dst, value.len()) };
    }

    /// Zeroes slot `index`.
    pub fn clear(&self, index: usize) {
        let dst = self.ptr(index);
        // SAFETY: as in `write`.
        unsafe { std::ptr::write_bytes(dst, 0, self.value_size) };
    }

    /// Whether `[addr, addr + len)` lies inside a single live value.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        self.slot_of(addr, len).is_some_and(|slot| {
            self.live
                .as_ref()
                .is_none_or(|l| l[slot].load(Ordering::Acquire))
        })
    }

    /// The slot whose value holds `[addr, addr + len)`, live or not.
    pub fn slot_of(&self, addr: u64, len: u64) -> Option<usize> {
        let off = addr.wrapping_sub(self.base() as u64);
        if off >= (self.stride * self.count) as u64 {
            return None;
        }
        let within = off % self.stride as u64;
        let slot = (off / self.stride as u64) as usize;
        within
            .checked_add(len)
            .is_some_and(|end| end <= self.value_size as u64)
            .then_some(slot)
    }
}
