//! `BPF_MAP_TYPE_HASH` (and the per-CPU hash, seen from a single CPU), preallocated.

use std::collections::HashMap as StdHashMap;
use std::sync::Mutex;

use super::{MapError, MapOps, ValueSlab, BPF_EXIST, BPF_NOEXIST};

/// A hash table with `max_entries` preallocated value slots. The index (key → slot) is behind
/// a mutex; values live in the slab, so a pointer from a lookup stays valid after the entry is
/// deleted (it then addresses a free slot, as with the kernel's preallocated hash maps).
#[derive(Debug)]
pub struct HashMap {
    slab: ValueSlab,
    index: Mutex<Index>,
}

#[derive(Debug)]
struct Index {
    slots: StdHashMap<Box<[u8]>, usize>,
    /// Insertion order, for stable iteration.
    order: Vec<Box<[u8]>>,
    free: Vec<usize>,
}

impl HashMap {
    /// An empty table of at most `max_entries` entries; `None` if it would exceed
    /// [`super::MAX_MAP_BYTES`].
    pub fn new(_key_size: usize, value_size: usize, max_entries: usize) -> Option<Self> {
        Some(Self {
            slab: ValueSlab::with_liveness(value_size, max_entries)?,
            index: Mutex::new(Index {
                slots: StdHashMap::new(),
                order: Vec::new(),
                free: (0..max_entries).rev().collect(),
            }),
        })
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        // A panic while holding the lock cannot leave the index inconsistent (every mutation
        // is a single insert/remove), so a poisoned lock is still usable.
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl MapOps for HashMap {
    fn lookup(&self, key: &[u8]) -> Option<*mut u8> {
        let slot = *self.index().slots.get(key)?;
        Some(self.slab.ptr(slot))
    }

    fn update(&self, key: &[u8], value: &[u8], flags: u64) -> Result<(), MapError> {
        let mut idx = self.index();
        if let Some(&slot) = idx.slots.get(key) {
            if flags == BPF_NOEXIST {
                return Err(MapError::Exists);
            }
            self.slab.write(slot, value);
            return Ok(());
        }
        if flags == BPF_EXIST {
            return Err(MapError::NotFound);
        }
        let slot = idx.free.pop().ok_or(MapError::Full)?;
        self.slab.write(slot, value);
        self.slab.set_live(slot, true);
        idx.slots.insert(key.into(), slot);
        idx.order.push(key.into());
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<(), MapError> {
        let mut idx = self.index();
        let slot = idx.slots.remove(key).ok_or(MapError::NotFound)?;
        idx.order.retain(|k| &**k != key);
        self.slab.set_live(slot, false);
        idx.free.push(slot);
        Ok(())
    }

    fn keys(&self) -> Vec<Vec<u8>> {
        self.index().order.iter().map(|k| k.to_vec()).collect()
    }

    fn slab(&self) -> &ValueSlab {
        &self.slab
    }
}
