//! XState maps: objects in the region's scratchpad that extensions use through helpers and
//! control planes use through a [`Transport`]. One implementation of every algorithm, run by
//! both sides: the data plane through [`crate::local::LocalRegion`], a control plane through
//! shared memory or the fabric.
//!
//! Each map type lives in its own module behind [`MapOps`]; the free functions here dispatch
//! on the type. Layouts (documented in docs/region.md):
//! - [`array`](mod@array): arrays and per-thread arrays; element `i`, copy `c` at
//!   `data + (i * copies + c) * value_stride`.
//! - [`hash`]: hash and per-thread hash tables; open addressing with linear probing over
//!   `buckets` elements of `[ctl u64][key][value × copies]`, `ctl` being a per-element
//!   seqlock so that no reader, local or remote, ever returns a torn element. Writers take the
//!   map's lock word (compare-and-swap, so host threads and control planes exclude each
//!   other); readers never lock.
//! - [`prog_array`]: program arrays for tail calls; each element is an active word (same
//!   encoding as a hook slot's).
//! - [`lpm`]: longest-prefix-match maps; a binary trie of nodes in the map's data, guarded by
//!   the map's write sequence word.
//! - [`ringbuf`]: a multi-producer (host threads), single-consumer (control plane) byte ring.

pub mod array;
pub mod hash;
pub mod lpm;
pub mod prog_array;
pub mod ringbuf;

use crate::{Transport, TransportError};
use rdx_region::geometry::HeaderInfo;
use rdx_region::layout::*;
use std::mem::{offset_of, size_of};

/// Why a map operation failed. [`MapError::errno`] gives the helper return value.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// The key is not in the map (`ENOENT`).
    #[error("no such element")]
    NotFound,
    /// `UPDATE_NOEXIST` for a key already present (`EEXIST`).
    #[error("element exists")]
    Exists,
    /// No free element for a new key (`E2BIG`).
    #[error("map {id} is full ({max_entries} elements)")]
    Full {
        /// The map's id.
        id: u32,
        /// Its capacity.
        max_entries: u32,
    },
    /// The map's lock or an element stayed taken past the spin limit (`EBUSY`): a writer may
    /// have died holding it.
    #[error("map {id} stayed locked or busy for too long (holder token {holder:#x})")]
    Busy {
        /// The map's id.
        id: u32,
        /// The lock word's value: the holder's token (bit 63 set for host threads).
        holder: u64,
    },
    /// A key, value, buffer, flag or spec that does not fit the map (`EINVAL`).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The map's type has no such operation (`EOPNOTSUPP`).
    #[error("operation {op} not supported by {map_type:?} maps")]
    Unsupported {
        /// The operation asked for.
        op: &'static str,
        /// The map's type.
        map_type: MapType,
    },
    /// The map's header or data holds something its writers never write (`EINVAL`).
    #[error("map {id} is corrupt: {reason}")]
    Corrupt {
        /// The map's id.
        id: u32,
        /// What was found.
        reason: String,
    },
    /// Reaching the region failed (`EFAULT`).
    #[error(transparent)]
    Transport(#[from] TransportError),
}

impl MapError {
    /// The negative errno a helper returns for this error, as the kernel's helpers do.
    pub fn errno(&self) -> i64 {
        -(match self {
            MapError::NotFound => libc::ENOENT,
            MapError::Exists => libc::EEXIST,
            MapError::Full { .. } => libc::E2BIG,
            MapError::Busy { .. } => libc::EBUSY,
            MapError::Invalid(_) | MapError::Corrupt { .. } => libc::EINVAL,
            MapError::Unsupported { .. } => libc::EOPNOTSUPP,
            MapError::Transport(_) => libc::EFAULT,
        } as i64)
    }
}

/// `BPF_ANY`, `BPF_NOEXIST`, `BPF_EXIST`.
pub const UPDATE_ANY: u64 = 0;
/// `BPF_NOEXIST`: only insert a key that is not present.
pub const UPDATE_NOEXIST: u64 = 1;
/// `BPF_EXIST`: only replace the value of a key that is present.
pub const UPDATE_EXIST: u64 = 2;

/// Which per-thread copies an update writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copies {
    /// The calling thread's copy (extensions).
    One(u32),
    /// Every copy gets the same value (control planes).
    All,
}

/// What a control plane asks for when it creates a map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapSpec {
    /// The map's type.
    pub map_type: MapType,
    /// Key size in bytes (at most [`MAX_KEY_SIZE`]).
    pub key_size: u32,
    /// Value size in bytes (at most [`MAX_VALUE_SIZE`]).
    pub value_size: u32,
    /// Capacity in entries (ring buffers: data bytes, a power of two of at least 4096).
    pub max_entries: u32,
    /// `BPF_F_*` flags, stored for listings.
    pub flags: u32,
    /// Name for listings and linking, at most [`XSTATE_NAME_LEN`] bytes.
    pub name: String,
}

/// Largest key a map may declare.
pub const MAX_KEY_SIZE: u32 = 512;
/// Largest value a map may declare.
pub const MAX_VALUE_SIZE: u32 = 1 << 20;

/// Geometry of a map object, computed from its spec (identical on both sides).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapLayout {
    /// `key_size` rounded up to 8.
    pub key_stride: u32,
    /// `value_size` rounded up to 8.
    pub value_stride: u32,
    /// Bytes per stored element (layout depends on the type).
    pub entry_stride: u32,
    /// Hash tables: buckets; ring buffers: data bytes; LPM tries: node capacity; else 0.
    pub buckets: u32,
    /// Per-thread maps: copies of each value (the region's thread slots); else 1.
    pub copies: u32,
    /// Bytes from the header to the first data byte.
    pub data_offset: u64,
    /// Bytes of data after it.
    pub data_size: u64,
}

impl MapLayout {
    /// Bytes to allocate for header plus data (a multiple of [`MAP_ALIGN`]).
    pub fn footprint(&self) -> u64 {
        align_up(self.data_offset + self.data_size, MAP_ALIGN)
    }
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, MapError> {
    Err(MapError::Invalid(msg.into()))
}

/// Validates `spec` and computes its layout for a region with `thread_slots` thread slots.
pub fn layout(spec: &MapSpec, thread_slots: u32) -> Result<MapLayout, MapError> {
    if spec.key_size > MAX_KEY_SIZE {
        return invalid(format!("key size {} above {MAX_KEY_SIZE}", spec.key_size));
    }
    if spec.value_size > MAX_VALUE_SIZE {
        return invalid(format!(
            "value size {} above {MAX_VALUE_SIZE}",
            spec.value_size
        ));
    }
    if spec.max_entries == 0 {
        return invalid("max_entries is 0");
    }
    let key_stride = align_up(spec.key_size as u64, 8) as u32;
    let value_stride = align_up(spec.value_size as u64, 8) as u32;
    let data_offset = size_of::<MapHeader>() as u64;
    let (entry_stride, buckets, copies, data_size) = match spec.map_type {
        MapType::Array | MapType::PerThreadArray => {
            if spec.key_size != 4 || spec.value_size == 0 {
                return invalid("arrays need a 4-byte key and a nonzero value size");
            }
            let copies = if spec.map_type == MapType::PerThreadArray {
                thread_slots
            } else {
                1
            };
            let stride = value_stride as u64 * copies as u64;
            let values = stride * spec.max_entries as u64;
            // Values wider than a word get one sequence word per (element, copy) after the
            // values, so that `data` still starts with element 0's value (global data).
            let seqs = if array::seqlocked_value(spec.value_size) {
                8 * copies as u64 * spec.max_entries as u64
            } else {
                0
            };
            (stride as u32, 0, copies, values + seqs)
        }
        MapType::Hash | MapType::PerThreadHash => {
            if spec.key_size == 0 || spec.value_size == 0 {
                return invalid("hash maps need nonzero key and value sizes");
            }
            let copies = if spec.map_type == MapType::PerThreadHash {
                thread_slots
            } else {
                1
            };
            let buckets = (spec.max_entries as u64 * 2).next_power_of_two().max(2);
            if buckets > u32::MAX as u64 {
                return invalid("too many entries");
            }
            let stride = 8 + key_stride as u64 + value_stride as u64 * copies as u64;
            (stride as u32, buckets as u32, copies, stride * buckets)
        }
        MapType::ProgArray => {
            if spec.key_size != 4 || !(spec.value_size == 4 || spec.value_size == 8) {
                return invalid("program arrays need a 4-byte key and a 4- or 8-byte value");
            }
            (8, 0, 1, 8 * spec.max_entries as u64)
        }
        MapType::RingBuf => {
            let size = spec.max_entries as u64;
            if spec.key_size != 0 || spec.value_size != 0 || !size.is_power_of_two() || size < 4096
            {
                return invalid("ring buffers need key and value size 0 and a power-of-two max_entries of at least 4096 bytes");
            }
            (0, spec.max_entries, 1, size)
        }
        MapType::LpmTrie => {
            if spec.key_size <= 4 || spec.value_size == 0 {
                return invalid("LPM maps need a key of a 4-byte prefix length plus data, and a nonzero value size");
            }
            let stride = lpm::NODE_HEADER + key_stride as u64 + value_stride as u64;
            let nodes = 2 * spec.max_entries as u64;
            if nodes > u32::MAX as u64 / 2 {
                return invalid("too many entries");
            }
            (
                stride as u32,
                nodes as u32,
                1,
                lpm::TRIE_HEADER + stride * nodes,
            )
        }
    };
    Ok(MapLayout {
        key_stride,
        value_stride: if spec.map_type == MapType::ProgArray {
            8
        } else {
            value_stride
        },
        entry_stride,
        buckets,
        copies,
        data_offset,
        data_size,
    })
}

/// A map as either side sees it: the header's immutable fields and where it lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapRef {
    /// The map's id (its meta table index).
    pub id: u32,
    /// Region offset of the [`MapHeader`].
    pub offset: u64,
    /// The map's type.
    pub map_type: MapType,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Capacity in entries.
    pub max_entries: u32,
    /// `key_size` rounded up to 8.
    pub key_stride: u32,
    /// `value_size` rounded up to 8.
    pub value_stride: u32,
    /// Bytes per stored element.
    pub entry_stride: u32,
    /// Hash tables: buckets; ring buffers: data bytes; LPM tries: node capacity.
    pub buckets: u32,
    /// Copies of each value: thread slots for per-thread maps, else 1.
    pub copies: u32,
    /// Region offset of the first data byte.
    pub data: u64,
    /// Bytes of data.
    pub data_size: u64,
}

impl MapRef {
    /// Reads and checks the map header at region offset `offset`.
    pub fn read<T: Transport + ?Sized>(t: &T, offset: u64) -> Result<MapRef, MapError> {
        let mut b = [0u8; size_of::<MapHeader>()];
        t.read(offset, &mut b)?;
        Self::from_header_bytes(&b, offset, t.region_len())
    }

    /// Decodes a header from its bytes; `region_len` bounds its data.
    pub fn from_header_bytes(b: &[u8], offset: u64, region_len: u64) -> Result<MapRef, MapError> {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let id = u32_at(offset_of!(MapHeader, id));
        let corrupt = |reason: String| Err(MapError::Corrupt { id, reason });
        if u32_at(0) != MAP_MAGIC {
            return corrupt(format!(
                "bad magic {:#x} at region offset {offset:#x}",
                u32_at(0)
            ));
        }
        let Some(map_type) = MapType::from_u32(u32_at(4)) else {
            return corrupt(format!("unknown map type {}", u32_at(4)));
        };
        let data_offset = u64_at(offset_of!(MapHeader, data_offset));
        let data_size = u64_at(offset_of!(MapHeader, data_size));
        let data = offset.checked_add(data_offset);
        match data.and_then(|d| d.checked_add(data_size)) {
            Some(end) if end <= region_len => {}
            _ => {
                return corrupt(format!(
                    "data [+{data_offset:#x}, +{data_size:#x}) outside the region"
                ))
            }
        }
        let m = MapRef {
            id,
            offset,
            map_type,
            key_size: u32_at(8),
            value_size: u32_at(12),
            max_entries: u32_at(16),
            key_stride: u32_at(24),
            value_stride: u32_at(28),
            entry_stride: u32_at(32),
            buckets: u32_at(36),
            copies: u32_at(40),
            data: offset + data_offset,
            data_size,
        };
        // The geometry must be what the spec implies, or element offsets could leave the data.
        let spec = MapSpec {
            map_type,
            key_size: m.key_size,
            value_size: m.value_size,
            max_entries: m.max_entries,
            flags: 0,
            name: String::new(),
        };
        let threads = if matches!(map_type, MapType::PerThreadArray | MapType::PerThreadHash) {
            m.copies
        } else {
            1
        };
        match layout(&spec, threads) {
            Ok(l)
                if l.data_size == data_size
                    && l.entry_stride == m.entry_stride
                    && l.buckets == m.buckets
                    && l.copies == m.copies
                    && l.key_stride == m.key_stride
                    && l.value_stride == m.value_stride =>
            {
                Ok(m)
            }
            Ok(_) => corrupt("geometry does not match its key/value sizes".into()),
            Err(e) => corrupt(format!("impossible spec: {e}")),
        }
    }

    /// Bytes a consistent lookup copies out: every copy's value, each `value_stride` apart.
    pub fn lookup_len(&self) -> usize {
        if self.copies > 1 {
            self.value_stride as usize * self.copies as usize
        } else {
            self.value_size as usize
        }
    }

    pub(crate) fn check_key(&self, key: &[u8]) -> Result<(), MapError> {
        if key.len() != self.key_size as usize {
            return invalid(format!(
                "key of {} bytes for map {} with key size {}",
                key.len(),
                self.id,
                self.key_size
            ));
        }
        Ok(())
    }
}

/// Operations every lookup-style map type implements.
pub trait MapOps {
    /// Region offset of the value of `key` in copy `copy`, for in-place access by
    /// extension code (the host's `map_lookup_elem`).
    fn lookup_ref<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        copy: u32,
    ) -> Result<Option<u64>, MapError>;
    /// A consistent copy of the value(s) of `key` into `out` ([`MapRef::lookup_len`] bytes).
    fn lookup<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        out: &mut [u8],
    ) -> Result<bool, MapError>;
    /// Writes `value` for `key` under the map's lock held with `token`: into copy `copies`
    /// or all of them, as `flags` ([`UPDATE_ANY`], [`UPDATE_NOEXIST`], [`UPDATE_EXIST`]) allow.
    fn update<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        value: &[u8],
        flags: u64,
        copies: Copies,
        token: u64,
    ) -> Result<(), MapError>;
    /// Removes `key` under the map's lock held with `token`; [`MapError::NotFound`] if absent.
    fn delete<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: &[u8],
        token: u64,
    ) -> Result<(), MapError>;
    /// The key after `key` (or the first one) in iteration order, into `out`.
    fn next_key<T: Transport + ?Sized>(
        t: &T,
        m: &MapRef,
        key: Option<&[u8]>,
        out: &mut [u8],
    ) -> Result<bool, MapError>;
}

macro_rules! dispatch {
    ($m:expr, $op:literal, $f:ident ( $($arg:expr),* )) => {
        match $m.map_type {
            MapType::Array | MapType::PerThreadArray => array::ArrayMap::$f($($arg),*),
            MapType::Hash | MapType::PerThreadHash => hash::HashMap::$f($($arg),*),
            MapType::ProgArray => prog_array::ProgArrayMap::$f($($arg),*),
            MapType::LpmTrie => lpm::LpmMap::$f($($arg),*),
            other => Err(MapError::Unsupported { op: $op, map_type: other }),
        }
    };
}

/// [`MapOps::lookup_ref`] of `m`'s type.
pub fn lookup_ref<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    key: &[u8],
    copy: u32,
) -> Result<Option<u64>, MapError> {
    dispatch!(m, "lookup", lookup_ref(t, m, key, copy))
}

/// [`MapOps::lookup`] of `m`'s type, after checking `out` holds [`MapRef::lookup_len`] bytes.
pub fn lookup<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    key: &[u8],
    out: &mut [u8],
) -> Result<bool, MapError> {
    if out.len() < m.lookup_len() {
        return invalid(format!(
            "lookup buffer of {} bytes, map {} needs {}",
            out.len(),
            m.id,
            m.lookup_len()
        ));
    }
    dispatch!(m, "lookup", lookup(t, m, key, out))
}

/// [`MapOps::update`] of `m`'s type, after checking `flags`, the value's size and the copy.
pub fn update<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    key: &[u8],
    value: &[u8],
    flags: u64,
    copies: Copies,
    token: u64,
) -> Result<(), MapError> {
    if flags > UPDATE_EXIST {
        return invalid(format!("update flags {flags}"));
    }
    if value.len() != m.value_size as usize {
        return invalid(format!(
            "value of {} bytes for map {} with value size {}",
            value.len(),
            m.id,
            m.value_size
        ));
    }
    if let Copies::One(c) = copies {
        if c >= m.copies {
            return invalid(format!("copy {c} of a map with {} copies", m.copies));
        }
    }
    dispatch!(m, "update", update(t, m, key, value, flags, copies, token))
}

/// [`MapOps::delete`] of `m`'s type.
pub fn delete<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    key: &[u8],
    token: u64,
) -> Result<(), MapError> {
    dispatch!(m, "delete", delete(t, m, key, token))
}

/// [`MapOps::next_key`] of `m`'s type, after checking `out` holds a key.
pub fn next_key<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    key: Option<&[u8]>,
    out: &mut [u8],
) -> Result<bool, MapError> {
    if out.len() < m.key_size as usize {
        return invalid("key buffer too small");
    }
    dispatch!(m, "next_key", next_key(t, m, key, out))
}

/// All keys, in iteration order.
pub fn keys<T: Transport + ?Sized>(t: &T, m: &MapRef) -> Result<Vec<Vec<u8>>, MapError> {
    let mut out = Vec::new();
    let mut cur: Option<Vec<u8>> = None;
    let mut buf = vec![0u8; m.key_size as usize];
    let limit = m.max_entries as usize + 1;
    while next_key(t, m, cur.as_deref(), &mut buf)? {
        out.push(buf.clone());
        if out.len() > limit {
            return Err(MapError::Corrupt {
                id: m.id,
                reason: "iteration does not end".into(),
            });
        }
        cur = Some(buf.clone());
    }
    Ok(out)
}

/// Spins allowed on a busy element or a held lock before an operation gives up with
/// [`MapError::Busy`]. Writers hold either for a few hundred nanoseconds; the bound only
/// matters when a writer died while holding one, and then failing beats hanging the host.
pub const BUSY_SPIN_LIMIT: u32 = 1 << 20;

/// The next control word of a keyed element: its sequence advanced by one, in `state`.
/// Every state change bumps the sequence, which is what lets [`read_stable`] detect it.
#[inline]
pub fn next_ctl(c: u64, state: u64) -> u64 {
    ((c & !ELEM_STATE_MASK).wrapping_add(ELEM_SEQ_ONE)) | state
}

/// Deletes the keyed element at `element` whose control word was `c` (caller holds the map's
/// writer lock): busy first so concurrent readers retry, then deleted, then one fewer entry.
pub fn retire_element<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    element: u64,
    c: u64,
) -> Result<(), MapError> {
    let busy = next_ctl(c, ELEM_BUSY);
    t.write_u64(element, busy)?;
    t.write_u64(element, next_ctl(busy, ELEM_DELETED))?;
    t.fetch_and_add(m.offset + offsets::MAP_COUNT, u64::MAX)?;
    Ok(())
}

/// Copies an element's value into `out` under the element's sequence word (the first 8 bytes
/// of an element): `find` locates the element and samples its sequence, the value is read from
/// `value_at(element)`, and the copy counts only if the sequence did not move meanwhile, so a
/// remote reader never returns a torn value. `Ok(false)` when `find` finds nothing.
pub fn read_stable<T: Transport + ?Sized>(
    t: &T,
    m: &MapRef,
    out: &mut [u8],
    mut find: impl FnMut() -> Result<Option<(u64, u64)>, MapError>,
    value_at: impl Fn(u64) -> u64,
) -> Result<bool, MapError> {
    for _ in 0..BUSY_SPIN_LIMIT {
        let Some((element, seq)) = find()? else {
            return Ok(false);
        };
        t.read(value_at(element), out)?;
        if t.read_u64(element)? == seq {
            return Ok(true);
        }
    }
    Err(MapError::Busy {
        id: m.id,
        holder: 0,
    })
}

/// Lock tokens with this bit belong to host threads (`bit 63 | thread slot`). A host thread
/// cannot die without its host, so their locks are never broken.
pub const TOKEN_HOST: u64 = 1 << 63;
/// Lock tokens with this bit (and not [`TOKEN_HOST`]) belong to control planes: the holder's
/// pid in bits 0..32 and, stamped by [`lock`] when it takes the lock, the acquisition time in
/// bits 32..62 (`CLOCK_REALTIME` milliseconds modulo 2^30). Such a lock can be broken when
/// its holder is dead or has held it longer than [`LOCK_LEASE_MS`].
pub const TOKEN_CONTROL: u64 = 1 << 62;
/// Longest a control plane may hold a map lock. Map operations hold it for microseconds; a
/// holder past this is taken for dead even when its liveness cannot be checked (remote
/// transports), so clocks of control planes must agree within a fraction of it.
pub const LOCK_LEASE_MS: u64 = 2_000;
/// Spins between two checks of whether a lock's holder is still entitled to it.
const STEAL_CHECK_PERIOD: u32 = 1 << 12;
const STAMP_MASK: u64 = (1 << 30) - 1;

/// The lock token of a control plane running as process `pid` (see [`TOKEN_CONTROL`]).
pub fn control_plane_token(pid: u32) -> u64 {
    TOKEN_CONTROL | pid as u64
}

fn now_stamp() -> u64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    ms & STAMP_MASK
}

/// Whether the lock word `holder` may be broken: a control plane's lock whose lease ran
/// out, or whose process is gone (checked only where pids are meaningful).
pub fn lock_breakable<T: Transport + ?Sized>(t: &T, holder: u64) -> bool {
    if holder & (TOKEN_HOST | TOKEN_CONTROL) != TOKEN_CONTROL {
        return false;
    }
    let stamp = (holder >> 32) & STAMP_MASK;
    if (now_stamp().wrapping_sub(stamp) & STAMP_MASK) > LOCK_LEASE_MS {
        return true;
    }
    let pid = holder as u32;
    if t.shares_pid_namespace() && pid != 0 && pid <= i32::MAX as u32 {
        // SAFETY: signal 0 only checks that the process exists.
        let rc = unsafe { libc::kill(pid as i32, 0) };
        return rc == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    false
}

/// Takes the map's writer lock with `token` (nonzero), spinning at most [`BUSY_SPIN_LIMIT`].
/// Returns the word now in the lock (the token, time-stamped for control-plane tokens),
/// which [`unlock`] takes back.
///
/// A control plane's lock whose holder died or outlived [`LOCK_LEASE_MS`] is broken: the
/// waiter swaps its own word in with compare-and-swap (so of several waiters one wins) and
/// repairs what the dead writer may have left half-done before it proceeds (elements left
/// busy become deleted and the element count is recomputed; wide array values' sequence
/// words left odd become even).
pub fn lock<T: Transport + ?Sized>(t: &T, m: &MapRef, token: u64) -> Result<u64, MapError> {
    debug_assert_ne!(token, 0);
    let mine = if token & (TOKEN_HOST | TOKEN_CONTROL) == TOKEN_CONTROL {
        (token & !(STAMP_MASK << 32)) | (now_stamp() << 32)
    } else {
        token
    };
    let word = m.offset + offsets::MAP_LOCK;
    let mut holder = 0;
    for i in 0..BUSY_SPIN_LIMIT {
        holder = t.compare_and_swap(word, 0, mine)?;
        if holder == 0 {
            return Ok(mine);
        }
        if i % STEAL_CHECK_PERIOD == STEAL_CHECK_PERIOD - 1
            && lock_breakable(t, holder)
            && t.compare_and_swap(word, holder, mine)? == holder
        {
            repair_after_break(t, m)?;
            return Ok(mine);
        }
        if i > 64 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    Err(MapError::Busy { id: m.id, holder })
}

/// Undoes what a writer that died holding the lock may have left behind.
fn repair_after_break<T: Transport + ?Sized>(t: &T, m: &MapRef) -> Result<(), MapError> {
    match m.map_type {
        MapType::Hash | MapType::PerThreadHash => hash::repair(t, m),
        MapType::LpmTrie => lpm::repair(t, m),
        MapType::Array | MapType::PerThreadArray => array::repair(t, m),
        MapType::ProgArray | MapType::RingBuf => Ok(()),
    }
}

/// Releases a lock taken with `word` (what [`lock`] returned).
pub fn unlock<T: Transport + ?Sized>(t: &T, m: &MapRef, word: u64) -> Result<(), MapError> {
    let prev = t.compare_and_swap(m.offset + offsets::MAP_LOCK, word, 0)?;
    if prev != word {
        return Err(MapError::Corrupt {
            id: m.id,
            reason: format!("lock held by {prev:#x}, not by {word:#x} (broken as stale?)"),
        });
    }
    Ok(())
}

/// Runs `f` with the map's writer lock held.
pub(crate) fn locked<T: Transport + ?Sized, R>(
    t: &T,
    m: &MapRef,
    token: u64,
    f: impl FnOnce() -> Result<R, MapError>,
) -> Result<R, MapError> {
    let held = lock(t, m, token)?;
    let r = f();
    let u = unlock(t, m, held);
    let r = r?;
    u?;
    Ok(r)
}

/// Writes a new map object at region offset `offset` (inside the scratchpad, aligned to
/// [`MAP_ALIGN`]) with zeroed data, then publishes meta entry `id`: the entry goes from
/// free to pending with compare-and-swap, and becomes live only after the object is
/// complete. Allocation is the caller's: it must own `[offset, offset + footprint)`.
pub fn create<T: Transport + ?Sized>(
    t: &T,
    info: &HeaderInfo,
    id: u32,
    offset: u64,
    spec: &MapSpec,
) -> Result<MapRef, MapError> {
    if id >= info.xstate_capacity {
        return invalid(format!(
            "map id {id} beyond the meta table's {} entries",
            info.xstate_capacity
        ));
    }
    if spec.name.len() > XSTATE_NAME_LEN {
        return invalid(format!(
            "map name {:?} longer than {XSTATE_NAME_LEN} bytes",
            spec.name
        ));
    }
    let l = layout(spec, info.thread_slots)?;
    let scratch = info.section(SectionId::Scratch);
    if !offset.is_multiple_of(MAP_ALIGN)
        || offset < scratch.offset
        || offset
            .checked_add(l.footprint())
            .is_none_or(|e| e > scratch.end())
    {
        return invalid(format!(
            "map object [{offset:#x}, +{:#x}) not aligned inside the scratchpad",
            l.footprint()
        ));
    }
    let meta = info.xmeta_offset(id);
    let prev = t.compare_and_swap(meta, 0, XMETA_PENDING as u64)? as u32;
    if prev != XMETA_FREE {
        return invalid(format!("map id {id} is in use (state {prev})"));
    }
    // Before the object can be reached: hosts drop the map headers they decoded earlier,
    // one of which may have lived at this address.
    t.fetch_and_add(offsets::HEADER_XSTATE_GENERATION, 1)?;
    // Zero the data in 64 KiB writes.
    let zeros = vec![0u8; 65536];
    let mut done = 0;
    while done < l.data_size {
        let n = (l.data_size - done).min(zeros.len() as u64);
        t.write(offset + l.data_offset + done, &zeros[..n as usize])?;
        done += n;
    }
    let mut h = [0u8; size_of::<MapHeader>()];
    let mut put32 = |o: usize, v: u32| h[o..o + 4].copy_from_slice(&v.to_le_bytes());
    put32(0, MAP_MAGIC);
    put32(4, spec.map_type as u32);
    put32(8, spec.key_size);
    put32(12, spec.value_size);
    put32(16, spec.max_entries);
    put32(20, spec.flags);
    put32(24, l.key_stride);
    put32(28, l.value_stride);
    put32(32, l.entry_stride);
    put32(36, l.buckets);
    put32(40, l.copies);
    put32(44, id);
    h[48..56].copy_from_slice(&l.data_offset.to_le_bytes());
    h[56..64].copy_from_slice(&l.data_size.to_le_bytes());
    t.write(offset, &h)?;
    let mut e = [0u8; size_of::<XStateMeta>()];
    e[4..8].copy_from_slice(&(spec.map_type as u32).to_le_bytes());
    e[8..16].copy_from_slice(&offset.to_le_bytes());
    e[16..24].copy_from_slice(&l.footprint().to_le_bytes());
    e[24..28].copy_from_slice(&spec.key_size.to_le_bytes());
    e[28..32].copy_from_slice(&spec.value_size.to_le_bytes());
    e[32..36].copy_from_slice(&spec.max_entries.to_le_bytes());
    e[36..40].copy_from_slice(&spec.flags.to_le_bytes());
    e[40..40 + spec.name.len()].copy_from_slice(spec.name.as_bytes());
    // The state word shares its 8 bytes with map_type: write the rest, then publish.
    t.write(meta + 8, &e[8..])?;
    t.fence()?;
    t.write_u64(meta, ((spec.map_type as u64) << 32) | XMETA_LIVE as u64)?;
    MapRef::read(t, offset)
}

/// A live map's meta entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapInfo {
    /// The map's id.
    pub id: u32,
    /// Its name, as created.
    pub name: String,
    /// Its header, read and checked.
    pub map: MapRef,
    /// Bytes allocated for the object.
    pub size: u64,
}

/// Opens map `id` from the meta table.
pub fn open<T: Transport + ?Sized>(t: &T, info: &HeaderInfo, id: u32) -> Result<MapInfo, MapError> {
    if id >= info.xstate_capacity {
        return Err(MapError::NotFound);
    }
    let mut e = [0u8; size_of::<XStateMeta>()];
    t.read(info.xmeta_offset(id), &mut e)?;
    if u32::from_le_bytes(e[0..4].try_into().expect("4")) != XMETA_LIVE {
        return Err(MapError::NotFound);
    }
    let offset = u64::from_le_bytes(e[8..16].try_into().expect("8"));
    let size = u64::from_le_bytes(e[16..24].try_into().expect("8"));
    let scratch = info.section(SectionId::Scratch);
    if offset < scratch.offset
        || offset
            .checked_add(size)
            .is_none_or(|end| end > scratch.end())
    {
        return Err(MapError::Corrupt {
            id,
            reason: format!(
                "meta entry places it at [{offset:#x}, +{size:#x}) outside the scratchpad"
            ),
        });
    }
    let map = MapRef::read(t, offset)?;
    if map.id != id || map.offset + (map.data - map.offset) + map.data_size > offset + size {
        return Err(MapError::Corrupt {
            id,
            reason: "header disagrees with its meta entry".into(),
        });
    }
    let name_raw = &e[40..40 + XSTATE_NAME_LEN];
    let end = name_raw
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(XSTATE_NAME_LEN);
    Ok(MapInfo {
        id,
        name: String::from_utf8_lossy(&name_raw[..end]).into_owned(),
        map,
        size,
    })
}

/// Every live map.
pub fn list<T: Transport + ?Sized>(t: &T, info: &HeaderInfo) -> Result<Vec<MapInfo>, MapError> {
    let mut out = Vec::new();
    for id in 0..info.xstate_capacity {
        match open(t, info, id) {
            Ok(m) => out.push(m),
            Err(MapError::NotFound) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Finds a live map by name.
pub fn find<T: Transport + ?Sized>(
    t: &T,
    info: &HeaderInfo,
    name: &str,
) -> Result<MapInfo, MapError> {
    list(t, info)?
        .into_iter()
        .find(|m| m.name == name)
        .ok_or(MapError::NotFound)
}

/// Key hash shared by both sides (must never change without a layout version bump).
#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    if let Ok(k) = <[u8; 8]>::try_from(key) {
        return hash_key8(u64::from_le_bytes(k));
    }
    let mut h: u64 = 0x243f_6a88_85a3_08d3 ^ key.len() as u64;
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        h = (h ^ u64::from_le_bytes(c.try_into().expect("8"))).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
    }
    h.wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 31)
}

/// [`hash_key`] of an 8-byte key (the little-endian bytes of `k`): the same value, with
/// the chunk loop unrolled away (the host's hash lookups are mostly of such keys).
#[inline(always)]
pub fn hash_key8(k: u64) -> u64 {
    let mut h = ((0x243f_6a88_85a3_08d3 ^ 8) ^ k).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 29;
    h.wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 31)
}
