//! An open-addressing table keyed by precomputed 64-bit hashes, with one slot per cache-line
//! sized entry, so a lookup usually costs one memory access and several tuples' probes can be
//! issued before any of them is needed (see `TupleSpace::classify`).

/// Starts loading the cache line holding `at` into all cache levels; a hint that never faults,
/// whatever the address.
#[inline(always)]
pub(super) fn prefetch_line(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch does not access memory architecturally and cannot fault, even for an
    // unmapped address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(at.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

#[derive(Clone, Debug)]
struct Slot<V> {
    /// The key's hash (never 0); 0 marks a never-used slot.
    tag: u64,
    /// `None` once removed (the slot keeps its tag so probe chains stay intact).
    val: Option<V>,
}

/// Hash-keyed table with linear probing, load factor at most 1/2.
#[derive(Clone, Debug)]
pub(super) struct HashTable<V> {
    slots: Vec<Slot<V>>,
    mask: usize,
    used: usize,
    live: usize,
}

#[inline(always)]
fn tag_of(h: u64) -> u64 {
    h | (h == 0) as u64
}

impl<V> HashTable<V> {
    pub(super) fn new() -> HashTable<V> {
        let mut slots = Vec::with_capacity(8);
        slots.resize_with(8, || Slot { tag: 0, val: None });
        HashTable {
            slots,
            mask: 7,
            used: 0,
            live: 0,
        }
    }

    /// Index of the slot where `h` starts probing: touching it early warms the cache line.
    #[inline(always)]
    pub(super) fn home(&self, h: u64) -> usize {
        // The high bits: the tuple hash's low bits are the least mixed.
        (h >> 20) as usize & self.mask
    }

    /// Asks the memory system for the home slot without waiting for it (batch lookups issue
    /// these for many packets before reading any of them).
    #[inline(always)]
    pub(super) fn prefetch(&self, h: u64) {
        prefetch_line((&self.slots[self.home(h)] as *const Slot<V>).cast::<u8>());
    }

    #[inline]
    fn find(&self, h: u64) -> Option<usize> {
        let tag = tag_of(h);
        let mut i = self.home(h);
        loop {
            let s = &self.slots[i];
            if s.tag == tag {
                return Some(i);
            }
            if s.tag == 0 {
                return None;
            }
            i = (i + 1) & self.mask;
        }
    }

    #[inline]
    pub(super) fn get(&self, h: u64) -> Option<&V> {
        self.find(h).and_then(|i| self.slots[i].val.as_ref())
    }

    pub(super) fn get_mut(&mut self, h: u64) -> Option<&mut V> {
        self.find(h).and_then(|i| self.slots[i].val.as_mut())
    }

    pub(super) fn insert(&mut self, h: u64, v: V) {
        if let Some(i) = self.find(h) {
            if self.slots[i].val.is_none() {
                self.live += 1;
            }
            self.slots[i].val = Some(v);
            return;
        }
        if (self.used + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let mut i = self.home(h);
        while self.slots[i].tag != 0 {
            i = (i + 1) & self.mask;
        }
        self.slots[i] = Slot {
            tag: tag_of(h),
            val: Some(v),
        };
        self.used += 1;
        self.live += 1;
    }

    pub(super) fn remove(&mut self, h: u64) {
        if let Some(i) = self.find(h) {
            if self.slots[i].val.take().is_some() {
                self.live -= 1;
            }
        }
    }

    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        let mut slots = Vec::with_capacity(n);
        slots.resize_with(n, || Slot { tag: 0, val: None });
        let old = std::mem::replace(&mut self.slots, slots);
        self.mask = n - 1;
        self.used = 0;
        self.live = 0;
        for s in old {
            if let Some(v) = s.val {
                // Tags are hashes with bit 0 forced for 0 only; re-inserting by tag is exact.
                self.insert(s.tag, v);
            }
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.live == 0
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.slots.iter().filter_map(|s| s.val.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::HashTable;

    #[test]
    fn insert_get_remove_grow() {
        let mut t = HashTable::new();
        for i in 1..1000u64 {
            t.insert(i.wrapping_mul(0x9e37_79b9_7f4a_7c15), i);
        }
        t.insert(0, 77);
        for i in 1..1000u64 {
            assert_eq!(t.get(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)), Some(&i));
        }
        assert_eq!(t.get(0), Some(&77));
        t.remove(5u64.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        assert_eq!(t.get(5u64.wrapping_mul(0x9e37_79b9_7f4a_7c15)), None);
        assert_eq!(t.get(6u64.wrapping_mul(0x9e37_79b9_7f4a_7c15)), Some(&6));
        assert_eq!(t.values().count(), 999);
        assert!(!t.is_empty());
    }
}
