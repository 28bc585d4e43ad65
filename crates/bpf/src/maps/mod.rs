//! In-memory maps for the interpreter and for native (JIT-compiled) code.
//!
//! Every map lives behind an [`Arc`] at a stable address for its whole life, and every value it
//! hands out lives in a slab allocated once at creation (like the kernel's preallocated maps):
//! a value pointer returned by a lookup stays valid, and the address of a [`Map`] is what
//! `lddw` of a map reference loads into a register. The helpers in [`crate::helpers`] receive
//! that address in `r1`, both when the interpreter calls them and when native code calls the
//! `extern "C"` versions from [`crate::helpers::native_helper`], so both tiers share the same
//! maps and the same helpers.
//!
//! Each map type has its own module behind [`MapOps`]; [`Map`] adds what is common (the
//! definition, the address, region checks for the interpreter's checked mode).
//!
//! Concurrency: the index of a hash or trie is behind a mutex; value bytes are plain shared
//! memory, read and written by programs without locks exactly as in the kernel (use atomics in
//! the program where that matters). Rust code reads and writes values only through raw
//! pointer copies, never through references that would assert exclusivity.

mod array;
mod hash;
mod lpm;
mod ringbuf;
mod slab;

use std::sync::Arc;

use crate::isa::ImmKind;
use crate::program::{MapDef, MapOrigin, MapType};

pub use array::ArrayMap;
pub use hash::HashMap;
pub use lpm::LpmTrie;
pub use ringbuf::{RingBuf, RINGBUF_HEADER};
pub use slab::ValueSlab;

/// `BPF_ANY`: create or update.
pub const BPF_ANY: u64 = 0;
/// `BPF_NOEXIST`: create only.
pub const BPF_NOEXIST: u64 = 1;
/// `BPF_EXIST`: update only.
pub const BPF_EXIST: u64 = 2;

/// Largest value slab a single map may allocate (256 MiB): a corrupt object must not be able
/// to make the runtime allocate without bound.
pub const MAX_MAP_BYTES: usize = 256 << 20;

/// Why a map could not be created or an operation on it failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// The map's type has no in-memory implementation.
    #[error("map `{name}`: type {map_type:?} is not supported by the in-memory maps")]
    UnsupportedType {
        /// The map's name.
        name: String,
        /// Its type.
        map_type: MapType,
    },
    /// The definition cannot make a map (sizes, flags, global-data shape).
    #[error("map `{name}`: invalid definition: {reason}")]
    InvalidDefinition {
        /// The map's name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A key of the wrong size.
    #[error("key is {got} bytes, the map's keys are {expected}")]
    KeySize {
        /// The map's key size.
        expected: usize,
        /// The key's size.
        got: usize,
    },
    /// A value of the wrong size.
    #[error("value is {got} bytes, the map's values are {expected}")]
    ValueSize {
        /// The map's value size.
        expected: usize,
        /// The value's size.
        got: usize,
    },
    /// The key is not in the map (`ENOENT`).
    #[error("no such key")]
    NotFound,
    /// `BPF_NOEXIST` for a key already present (`EEXIST`).
    #[error("key already exists")]
    Exists,
    /// No room for a new key (`E2BIG`).
    #[error("map is full")]
    Full,
    /// The trie has no free node for the new prefix (`ENOSPC`).
    #[error("trie is full")]
    NoSpace,
    /// A key the map type cannot hold (e.g. an LPM prefix length past the data).
    #[error("invalid key: {0}")]
    InvalidKey(&'static str),
    /// An array index at or past `max_entries` (`E2BIG`).
    #[error("key is out of range for this map")]
    OutOfRange,
    /// Update flags other than `BPF_ANY`, `BPF_NOEXIST` and `BPF_EXIST`.
    #[error("invalid update flags {0:#x}")]
    InvalidFlags(u64),
    /// The map type has no such operation (`EOPNOTSUPP`).
    #[error("operation not supported by this map type")]
    NotSupported,
}

impl MapError {
    /// The negative errno a helper returns for this error, as the kernel's helpers do.
    pub fn errno(&self) -> i64 {
        match self {
            MapError::NotFound => -2,      // ENOENT
            MapError::Exists => -17,       // EEXIST
            MapError::Full => -7,          // E2BIG
            MapError::NoSpace => -28,      // ENOSPC
            MapError::OutOfRange => -7,    // E2BIG (array index past max_entries)
            MapError::NotSupported => -95, // EOPNOTSUPP
            _ => -22,                      // EINVAL
        }
    }
}

/// The operations one map type implements. Keys and values are checked for size by [`Map`]
/// before they get here.
pub trait MapOps: Send + Sync {
    /// Address of the value stored under `key`, valid for the map's lifetime.
    fn lookup(&self, key: &[u8]) -> Option<*mut u8>;
    /// Stores `value` under `key` as `flags` ([`BPF_ANY`], [`BPF_NOEXIST`], [`BPF_EXIST`]) allow.
    fn update(&self, key: &[u8], value: &[u8], flags: u64) -> Result<(), MapError>;
    /// Removes `key`.
    fn delete(&self, key: &[u8]) -> Result<(), MapError>;
    /// Every key currently present, in the map's iteration order.
    fn keys(&self) -> Vec<Vec<u8>>;
    /// The slab every value of this map lives in.
    fn slab(&self) -> &ValueSlab;
    /// Whether `[addr, addr + len)` is memory a program may access in this map.
    fn value_access(&self, addr: u64, len: u64) -> bool {
        self.slab().contains(addr, len)
    }
    /// The ring buffer behind this map, if it is one.
    fn as_ringbuf(&self) -> Option<&RingBuf> {
        None
    }
}

/// One map: its definition and its storage, at a stable address.
pub struct Map {
    def: MapDef,
    ops: Box<dyn MapOps>,
}

impl std::fmt::Debug for Map {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Map")
            .field("name", &self.def.name)
            .field("type", &self.def.map_type)
            .field("address", &format_args!("{:#x}", self.address()))
            .finish()
    }
}

impl Map {
    /// Creates an empty map (or, for global data, one initialised from
    /// [`MapDef::initial_value`]).
    pub fn new(def: &MapDef) -> Result<Arc<Map>, MapError> {
        let invalid = |reason: &str| MapError::InvalidDefinition {
            name: def.name.clone(),
            reason: reason.to_string(),
        };
        if def.map_type == MapType::RingBuf {
            if def.key_size != 0 || def.value_size != 0 {
                return Err(invalid("ring buffers have no keys or values"));
            }
            let rb = RingBuf::new(def.max_entries as usize).ok_or_else(|| {
                invalid("max_entries must be a power of two and a multiple of 4096")
            })?;
            return Ok(Arc::new(Map {
                def: def.clone(),
                ops: Box::new(rb),
            }));
        }
        if def.value_size == 0 {
            return Err(invalid("value_size is 0"));
        }
        let ops: Box<dyn MapOps> = match def.map_type {
            MapType::Array | MapType::PerCpuArray => {
                if def.key_size != 4 {
                    return Err(invalid("array maps need 4-byte keys"));
                }
                if def.max_entries == 0 {
                    return Err(invalid("max_entries is 0"));
                }
                Box::new(
                    ArrayMap::new(def.value_size as usize, def.max_entries as usize)
                        .ok_or_else(|| invalid("values do not fit the in-memory limit"))?,
                )
            }
            MapType::Hash | MapType::PerCpuHash => {
                if def.key_size == 0 || def.max_entries == 0 {
                    return Err(invalid("key_size and max_entries must be nonzero"));
                }
                Box::new(
                    HashMap::new(
                        def.key_size as usize,
                        def.value_size as usize,
                        def.max_entries as usize,
                    )
                    .ok_or_else(|| invalid("values do not fit the in-memory limit"))?,
                )
            }
            MapType::LpmTrie => {
                if def.key_size <= 4 || def.key_size > 4 + 256 || def.max_entries == 0 {
                    return Err(invalid(
                        "LPM trie keys are a 4-byte prefix length and 1..=256 data bytes",
                    ));
                }
                Box::new(
                    LpmTrie::new(
                        def.key_size as usize,
                        def.value_size as usize,
                        def.max_entries as usize,
                    )
                    .ok_or_else(|| invalid("values do not fit the in-memory limit"))?,
                )
            }
            other => {
                return Err(MapError::UnsupportedType {
                    name: def.name.clone(),
                    map_type: other,
                })
            }
        };
        let map = Map {
            def: def.clone(),
            ops,
        };
        if def.origin == MapOrigin::GlobalData {
            if def.max_entries != 1 || def.map_type != MapType::Array {
                return Err(invalid("global data must be a one-entry array"));
            }
            if let Some(init) = &def.initial_value {
                if init.len() > def.value_size as usize {
                    return Err(invalid("initial value is larger than value_size"));
                }
                let mut value = vec![0u8; def.value_size as usize];
                value[..init.len()].copy_from_slice(init);
                map.ops.update(&0u32.to_le_bytes(), &value, BPF_ANY)?;
            }
        }
        Ok(Arc::new(map))
    }

    /// The definition the map was created from.
    pub fn def(&self) -> &MapDef {
        &self.def
    }

    /// The map's name.
    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// The address a map reference (`lddw` of [`ImmKind::MapIdx`]) loads, and the `r1` the map
    /// helpers expect. Stable for as long as the map lives.
    pub fn address(&self) -> u64 {
        self as *const Map as u64
    }

    /// Reinterprets a map address.
    ///
    /// # Safety
    /// `addr` must be [`Map::address`] of a map that outlives `'a`.
    pub unsafe fn from_address<'a>(addr: u64) -> &'a Map {
        // SAFETY: guaranteed by the caller.
        unsafe { &*(addr as *const Map) }
    }

    fn check_key(&self, key: &[u8]) -> Result<(), MapError> {
        if key.len() != self.def.key_size as usize {
            return Err(MapError::KeySize {
                expected: self.def.key_size as usize,
                got: key.len(),
            });
        }
        Ok(())
    }

    /// Address of the value under `key`; valid for the map's lifetime.
    pub fn lookup_ptr(&self, key: &[u8]) -> Option<*mut u8> {
        self.check_key(key).ok()?;
        self.ops.lookup(key)
    }

    /// A copy of the value under `key`.
    pub fn lookup(&self, key: &[u8]) -> Option<Vec<u8>> {
        let ptr = self.lookup_ptr(key)?;
        let mut out = vec![0u8; self.def.value_size as usize];
        // SAFETY: `ptr` addresses value_size bytes of this map's slab, which lives as long as
        // `self`; a raw copy tolerates concurrent writers (no reference is formed).
        unsafe { std::ptr::copy_nonoverlapping(ptr, out.as_mut_ptr(), out.len()) };
        Some(out)
    }

    /// Stores `value` under `key` as `flags` allow, after checking both sizes and the flags.
    pub fn update(&self, key: &[u8], value: &[u8], flags: u64) -> Result<(), MapError> {
        self.check_key(key)?;
        if value.len() != self.def.value_size as usize {
            return Err(MapError::ValueSize {
                expected: self.def.value_size as usize,
                got: value.len(),
            });
        }
        if flags > BPF_EXIST {
            return Err(MapError::InvalidFlags(flags));
        }
        self.ops.update(key, value, flags)
    }

    /// Removes `key`, after checking its size.
    pub fn delete(&self, key: &[u8]) -> Result<(), MapError> {
        self.check_key(key)?;
        self.ops.delete(key)
    }

    /// Every key present.
    pub fn keys(&self) -> Vec<Vec<u8>> {
        self.ops.keys()
    }

    /// Whether `[addr, addr + len)` lies inside one value of this map, and whether the
    /// program may write it (`Some(writable)`), for the interpreter's checked mode.
    pub fn value_access(&self, addr: u64, len: u64) -> Option<bool> {
        self.ops
            .value_access(addr, len)
            .then_some(!self.def.read_only)
    }

    /// Whether `[addr, addr + len)` lies inside one value slot of this map's storage, whether
    /// or not an entry holds it now. A value pointer a program got from a lookup stays such a
    /// pointer when the entry is deleted during the run (the slot stays, as the kernel keeps
    /// the element until the program ends): the verifier's claim the state embedding checks.
    pub fn value_slot(&self, addr: u64, len: u64) -> bool {
        self.ops.slab().slot_of(addr, len).is_some()
    }

    /// The ring buffer, if this is a `BPF_MAP_TYPE_RINGBUF` map.
    pub fn ringbuf(&self) -> Option<&RingBuf> {
        self.ops.as_ringbuf()
    }

    /// Address of byte `offset` of the value under key 0 (global data, `lddw` of
    /// [`ImmKind::MapIdxValue`]).
    pub fn value_address(&self, offset: u32) -> Option<u64> {
        if offset >= self.def.value_size {
            return None;
        }
        let base = self.ops.lookup(&0u32.to_le_bytes())?;
        Some(base as u64 + offset as u64)
    }
}

/// The maps of one object, indexed as [`crate::program::Object::maps`] is.
#[derive(Clone, Debug, Default)]
pub struct MapSet {
    maps: Vec<Arc<Map>>,
}

/// A map reference that cannot be resolved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// An `lddw` names a map index past the object's map table.
    #[error("map index {0} is not in the object's map table")]
    NoSuchMap(i32),
    /// An `lddw` points outside a map's value.
    #[error("offset {offset} is outside the {size}-byte value of map `{map}`")]
    BadValueOffset {
        /// The map's name.
        map: String,
        /// The offset asked for.
        offset: i32,
        /// The value's size in bytes.
        size: u32,
    },
    /// An `lddw` points into a map that has no value at key 0.
    #[error("map `{0}` has no value at key 0 to point into")]
    NoValue(String),
    /// An `lddw` kind that only a kernel can resolve (fd, BTF id).
    #[error("lddw kind {0:?} needs a kernel and cannot be resolved in rdx")]
    Unsupported(ImmKind),
}

impl MapSet {
    /// Creates every map of an object, in order.
    pub fn new(defs: &[MapDef]) -> Result<MapSet, MapError> {
        Ok(MapSet {
            maps: defs.iter().map(Map::new).collect::<Result<_, _>>()?,
        })
    }

    /// A set of maps already created, in table order.
    pub fn from_maps(maps: Vec<Arc<Map>>) -> MapSet {
        MapSet { maps }
    }

    /// Number of maps.
    pub fn len(&self) -> usize {
        self.maps.len()
    }

    /// Whether the object has no maps.
    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }

    /// Map `index` of the table.
    pub fn get(&self, index: usize) -> Option<&Arc<Map>> {
        self.maps.get(index)
    }

    /// The map called `name`.
    pub fn by_name(&self, name: &str) -> Option<&Arc<Map>> {
        self.maps.iter().find(|m| m.name() == name)
    }

    /// Every map, in table order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Map>> {
        self.maps.iter()
    }

    /// The map whose [`Map::address`] is `addr`, if it belongs to this set.
    pub fn by_address(&self, addr: u64) -> Option<&Arc<Map>> {
        self.maps.iter().find(|m| m.address() == addr)
    }

    /// The 64-bit value an `lddw` of `kind` loads: a map's address for
    /// [`ImmKind::MapIdx`], the address of a byte of its value for
    /// [`ImmKind::MapIdxValue`], the constant itself for [`ImmKind::Imm`]. The JIT uses the
    /// same resolution so that both tiers see the same maps.
    pub fn resolve_lddw(
        &self,
        kind: ImmKind,
        imm_lo: i32,
        imm_hi: i32,
    ) -> Result<u64, ResolveError> {
        match kind {
            ImmKind::Imm => Ok(crate::isa::Insn::imm64(imm_lo, imm_hi)),
            ImmKind::MapIdx => {
                let map = self.get_idx(imm_lo)?;
                Ok(map.address())
            }
            ImmKind::MapIdxValue => {
                let map = self.get_idx(imm_lo)?;
                if imm_hi < 0 || imm_hi as u32 >= map.def.value_size {
                    return Err(ResolveError::BadValueOffset {
                        map: map.name().to_string(),
                        offset: imm_hi,
                        size: map.def.value_size,
                    });
                }
                map.value_address(imm_hi as u32)
                    .ok_or_else(|| ResolveError::NoValue(map.name().to_string()))
            }
            other => Err(ResolveError::Unsupported(other)),
        }
    }

    fn get_idx(&self, idx: i32) -> Result<&Arc<Map>, ResolveError> {
        usize::try_from(idx)
            .ok()
            .and_then(|i| self.maps.get(i))
            .ok_or(ResolveError::NoSuchMap(idx))
    }

    /// The access a program may make to `[addr, addr + len)` through a map value:
    /// `Some(writable)` if it lies inside one value of one of these maps.
    pub fn value_access(&self, addr: u64, len: u64) -> Option<bool> {
        self.maps.iter().find_map(|m| m.value_access(addr, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn def(map_type: MapType, key: u32, value: u32, max: u32) -> MapDef {
        MapDef {
            name: "m".into(),
            map_type,
            key_size: key,
            value_size: value,
            max_entries: max,
            flags: 0,
            origin: MapOrigin::Btf,
            initial_value: None,
            read_only: false,
        }
    }

    #[test]
    fn array_basics() {
        let m = Map::new(&def(MapType::Array, 4, 8, 4)).unwrap();
        assert_eq!(m.lookup(&1u32.to_le_bytes()).unwrap(), vec![0; 8]);
        m.update(&1u32.to_le_bytes(), &7u64.to_le_bytes(), BPF_ANY)
            .unwrap();
        assert_eq!(m.lookup(&1u32.to_le_bytes()).unwrap(), 7u64.to_le_bytes());
        assert!(m.lookup(&4u32.to_le_bytes()).is_none());
        assert_eq!(
            m.update(&1u32.to_le_bytes(), &[0; 8], BPF_NOEXIST),
            Err(MapError::Exists)
        );
        assert_eq!(m.delete(&1u32.to_le_bytes()), Err(MapError::NotSupported));
        let p = m.lookup_ptr(&3u32.to_le_bytes()).unwrap() as u64;
        assert_eq!(m.value_access(p, 8), Some(true));
        assert_eq!(m.value_access(p + 1, 8), None);
        assert_eq!(m.keys().len(), 4);
    }

    #[test]
    fn hash_basics() {
        let m = Map::new(&def(MapType::Hash, 4, 4, 2)).unwrap();
        let k = |i: u32| i.to_le_bytes();
        assert!(m.lookup(&k(1)).is_none());
        m.update(&k(1), &k(10), BPF_ANY).unwrap();
        m.update(&k(2), &k(20), BPF_NOEXIST).unwrap();
        assert_eq!(m.update(&k(3), &k(30), BPF_ANY), Err(MapError::Full));
        assert_eq!(m.update(&k(3), &k(30), BPF_EXIST), Err(MapError::NotFound));
        let p = m.lookup_ptr(&k(2)).unwrap();
        m.update(&k(2), &k(21), BPF_EXIST).unwrap();
        // Updates land in place: an earlier lookup sees the new value.
        assert_eq!(m.lookup_ptr(&k(2)).unwrap(), p);
        assert_eq!(m.lookup(&k(2)).unwrap(), k(21));
        m.delete(&k(1)).unwrap();
        assert_eq!(m.delete(&k(1)), Err(MapError::NotFound));
        m.update(&k(3), &k(30), BPF_ANY).unwrap();
        let mut keys = m.keys();
        keys.sort();
        assert_eq!(keys, vec![k(2).to_vec(), k(3).to_vec()]);
        assert_eq!(
            m.update(&[0; 3], &k(0), BPF_ANY),
            Err(MapError::KeySize {
                expected: 4,
                got: 3
            })
        );
    }

    #[test]
    fn global_data_is_initialised_and_resolvable() {
        let mut d = def(MapType::Array, 4, 6, 1);
        d.origin = MapOrigin::GlobalData;
        d.read_only = true;
        d.initial_value = Some(b"hello".to_vec());
        let set = MapSet::new(&[d]).unwrap();
        let m = set.get(0).unwrap();
        assert_eq!(m.lookup(&0u32.to_le_bytes()).unwrap(), b"hello\0");
        let addr = set.resolve_lddw(ImmKind::MapIdxValue, 0, 2).unwrap();
        assert_eq!(m.value_access(addr, 4), Some(false));
        assert_eq!(
            set.resolve_lddw(ImmKind::MapIdx, 0, 0).unwrap(),
            m.address()
        );
        assert!(set.resolve_lddw(ImmKind::MapIdx, 1, 0).is_err());
        assert!(set.resolve_lddw(ImmKind::MapIdxValue, 0, 6).is_err());
        assert!(set.by_address(m.address()).is_some());
    }

    #[test]
    fn unsupported_types_are_errors() {
        assert!(Map::new(&def(MapType::RingBuf, 0, 0, 4096))
            .unwrap()
            .ringbuf()
            .is_some());
        assert!(Map::new(&def(MapType::RingBuf, 0, 0, 4095)).is_err());
        assert!(matches!(
            Map::new(&def(MapType::ProgArray, 4, 4, 1)),
            Err(MapError::UnsupportedType { .. })
        ));
        assert!(Map::new(&def(MapType::Array, 8, 4, 1)).is_err());
    }
}
