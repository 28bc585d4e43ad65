//! `BPF_MAP_TYPE_LPM_TRIE`: longest-prefix match over `struct bpf_lpm_trie_key`
//! (`u32 prefixlen` followed by the data bytes, most significant bit first).

use std::collections::HashMap as StdHashMap;
use std::sync::Mutex;

use super::{MapError, MapOps, ValueSlab, BPF_EXIST, BPF_NOEXIST};

/// Entries keyed by their normalised prefix. Lookups scan the stored prefixes longest first;
/// tries in rdx programs are rule tables of modest size, where this is simple and predictable.
#[derive(Debug)]
pub struct LpmTrie {
    data_len: usize,
    slab: ValueSlab,
    entries: Mutex<Entries>,
}

#[derive(Debug)]
struct Entries {
    slots: StdHashMap<(u32, Vec<u8>), usize>,
    /// Prefixes sorted by length, longest first.
    by_len: Vec<(u32, Vec<u8>)>,
    free: Vec<usize>,
}

fn mask(data: &[u8], prefix_len: u32) -> Vec<u8> {
    data.iter()
        .enumerate()
        .map(|(i, &b)| {
            let bit = (i * 8) as u32;
            if prefix_len >= bit + 8 {
                b
            } else if prefix_len <= bit {
                0
            } else {
                b & (0xffu8 << (8 - (prefix_len - bit)))
            }
        })
        .collect()
}

impl LpmTrie {
    /// An empty trie for keys of a 4-byte prefix length plus `key_size - 4` data bytes; `None`
    /// if it would exceed [`super::MAX_MAP_BYTES`].
    pub fn new(key_size: usize, value_size: usize, max_entries: usize) -> Option<Self> {
        Some(Self {
            data_len: key_size - 4,
            slab: ValueSlab::with_liveness(value_size, max_entries)?,
            entries: Mutex::new(Entries {
                slots: StdHashMap::new(),
                by_len: Vec::new(),
                free: (0..max_entries).rev().collect(),
            }),
        })
    }

    fn split(&self, key: &[u8]) -> Result<(u32, Vec<u8>), MapError> {
        let prefix_len = u32::from_le_bytes(key[..4].try_into().expect("4-byte prefix"));
        if prefix_len as usize > self.data_len * 8 {
            return Err(MapError::InvalidKey("prefix length exceeds the key's data"));
        }
        Ok((prefix_len, mask(&key[4..], prefix_len)))
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl MapOps for LpmTrie {
    fn lookup(&self, key: &[u8]) -> Option<*mut u8> {
        let (limit, _) = self.split(key).ok()?;
        let data = &key[4..];
        let e = self.entries();
        e.by_len
            .iter()
            .filter(|(len, _)| *len <= limit)
            .find(|(len, prefix)| mask(data, *len) == *prefix)
            .map(|k| self.slab.ptr(e.slots[k]))
    }

    fn update(&self, key: &[u8], value: &[u8], flags: u64) -> Result<(), MapError> {
        let k = self.split(key)?;
        let mut e = self.entries();
        if let Some(&slot) = e.slots.get(&k) {
            if flags == BPF_NOEXIST {
                return Err(MapError::Exists);
            }
            self.slab.write(slot, value);
            return Ok(());
        }
        if flags == BPF_EXIST {
            return Err(MapError::NotFound);
        }
        // The kernel's trie reports a full map as ENOSPC, unlike the hash map's E2BIG.
        let slot = e.free.pop().ok_or(MapError::NoSpace)?;
        self.slab.write(slot, value);
        self.slab.set_live(slot, true);
        e.slots.insert(k.clone(), slot);
        let pos = e.by_len.partition_point(|(len, _)| *len >= k.0);
        e.by_len.insert(pos, k);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<(), MapError> {
        let k = self.split(key)?;
        let mut e = self.entries();
        let slot = e.slots.remove(&k).ok_or(MapError::NotFound)?;
        e.by_len.retain(|x| *x != k);
        self.slab.set_live(slot, false);
        e.free.push(slot);
        self.slab.clear(slot);
        Ok(())
    }

    fn keys(&self) -> Vec<Vec<u8>> {
        self.entries()
            .by_len
            .iter()
            .map(|(len, data)| {
                let mut k = len.to_le_bytes().to_vec();
                k.extend_from_slice(data);
                k
            })
            .collect()
    }

    fn slab(&self) -> &ValueSlab {
        &self.slab
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(len: u32, ip: [u8; 4]) -> Vec<u8> {
        let mut k = len.to_le_bytes().to_vec();
        k.extend_from_slice(&ip);
        k
    }

    #[test]
    fn longest_prefix_wins() {
        let t = LpmTrie::new(8, 4, 8).unwrap();
        t.update(&key(8, [10, 0, 0, 0]), &1u32.to_le_bytes(), 0)
            .unwrap();
        t.update(&key(24, [10, 1, 2, 99]), &2u32.to_le_bytes(), 0)
            .unwrap();
        let get = |ip| {
            t.lookup(&key(32, ip)).map(|p| {
                // SAFETY: a lookup's pointer addresses the entry's 4-byte value, which
                // lives as long as the trie.
                unsafe { std::ptr::read_unaligned(p as *const u32) }
            })
        };
        assert_eq!(get([10, 1, 2, 3]), Some(2));
        assert_eq!(get([10, 9, 9, 9]), Some(1));
        assert_eq!(get([11, 0, 0, 0]), None);
        t.delete(&key(24, [10, 1, 2, 0])).unwrap();
        assert_eq!(get([10, 1, 2, 3]), Some(1));
        assert_eq!(
            t.update(&key(33, [0; 4]), &[0; 4], 0).unwrap_err().errno(),
            -22
        );
        let t = LpmTrie::new(8, 4, 1).unwrap();
        t.update(&key(8, [1, 0, 0, 0]), &[0; 4], 0).unwrap();
        assert_eq!(
            t.update(&key(8, [2, 0, 0, 0]), &[0; 4], 0)
                .unwrap_err()
                .errno(),
            -28
        );
    }
}
