//! `BPF_MAP_TYPE_ARRAY` (and the per-CPU array, seen from a single CPU).

use super::{MapError, MapOps, ValueSlab, BPF_NOEXIST};

/// A fixed array of zero-initialised values indexed by a `u32` key.
#[derive(Debug)]
pub struct ArrayMap {
    slab: ValueSlab,
}

impl ArrayMap {
    /// An array of `max_entries` zeroed values; `None` if it would exceed [`super::MAX_MAP_BYTES`].
    pub fn new(value_size: usize, max_entries: usize) -> Option<Self> {
        Some(Self {
            slab: ValueSlab::new(value_size, max_entries)?,
        })
    }

    fn index(&self, key: &[u8]) -> Option<usize> {
        let idx = u32::from_le_bytes(key.try_into().ok()?) as usize;
        (idx < self.slab.count()).then_some(idx)
    }
}

impl MapOps for ArrayMap {
    fn lookup(&self, key: &[u8]) -> Option<*mut u8> {
        self.index(key).map(|i| self.slab.ptr(i))
    }

    fn update(&self, key: &[u8], value: &[u8], flags: u64) -> Result<(), MapError> {
        let i = self.index(key).ok_or(MapError::OutOfRange)?;
        if flags == BPF_NOEXIST {
            // Every index of an array always exists.
            return Err(MapError::Exists);
        }
        self.slab.write(i, value);
        Ok(())
    }

    fn delete(&self, _key: &[u8]) -> Result<(), MapError> {
        Err(MapError::NotSupported)
    }

    fn keys(&self) -> Vec<Vec<u8>> {
        (0..self.slab.count() as u32)
            .map(|i| i.to_le_bytes().to_vec())
            .collect()
    }

    fn slab(&self) -> &ValueSlab {
        &self.slab
    }
}
