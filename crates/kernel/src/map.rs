use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::error::{Errno, KernelError};

/// Kernel map type numbers (`enum bpf_map_type`) this crate names.
pub mod map_type {
    /// `BPF_MAP_TYPE_HASH`.
    pub const HASH: u32 = 1;
    /// `BPF_MAP_TYPE_ARRAY`.
    pub const ARRAY: u32 = 2;
}

/// What to create: the kernel's `BPF_MAP_CREATE` attributes this crate exposes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapSpec {
    /// Up to 15 bytes are kept by the kernel; longer names are truncated.
    pub name: String,
    /// Kernel map type number (see [`map_type`]).
    pub map_type: u32,
    /// Key size in bytes (4 for arrays).
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Capacity in entries (an array's fixed length).
    pub max_entries: u32,
    /// `BPF_F_*` map flags passed to `BPF_MAP_CREATE`.
    pub flags: u32,
}

impl MapSpec {
    /// An array map called `name`: `max_entries` values of `value_size` bytes, indexed by
    /// 4-byte keys (`key_size` should be 4).
    pub fn array(name: &str, key_size: u32, value_size: u32, max_entries: u32) -> Self {
        MapSpec {
            name: name.into(),
            map_type: map_type::ARRAY,
            key_size,
            value_size,
            max_entries,
            flags: 0,
        }
    }

    /// A hash map called `name` of at most `max_entries` entries.
    pub fn hash(name: &str, key_size: u32, value_size: u32, max_entries: u32) -> Self {
        MapSpec {
            map_type: map_type::HASH,
            ..Self::array(name, key_size, value_size, max_entries)
        }
    }
}

/// A kernel map, owned through its file descriptor (closing it frees the map unless a
/// program still holds it).
#[derive(Debug)]
pub struct KernelMap {
    fd: OwnedFd,
    spec: MapSpec,
}

/// Every entry of a map at one moment, keys in byte order: the form comparisons use.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MapSnapshot {
    /// The map's name (libbpf's name for maps of an object).
    pub name: String,
    /// Key bytes to value bytes, for every entry present.
    pub entries: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl KernelMap {
    /// Creates a map (`BPF_MAP_CREATE`).
    pub fn create(spec: &MapSpec) -> Result<KernelMap, KernelError> {
        crate::probe()?;
        Self::create_unprobed(spec)
    }

    pub(crate) fn create_unprobed(spec: &MapSpec) -> Result<KernelMap, KernelError> {
        let name = kernel_name(&spec.name);
        let opts = libbpf_sys::bpf_map_create_opts {
            sz: size_of::<libbpf_sys::bpf_map_create_opts>() as _,
            map_flags: spec.flags,
            ..Default::default()
        };
        // SAFETY: `name` is a NUL-terminated string and `opts` a fully initialised options
        // struct with its size set; both outlive the call, which only reads them.
        let ret = unsafe {
            libbpf_sys::bpf_map_create(
                spec.map_type,
                name.as_ptr(),
                spec.key_size,
                spec.value_size,
                spec.max_entries,
                &opts,
            )
        };
        if ret < 0 {
            return Err(KernelError::Map {
                map: spec.name.clone(),
                operation: "BPF_MAP_CREATE",
                errno: Errno::from_ret(ret),
            });
        }
        // SAFETY: a non-negative return of bpf_map_create is a new descriptor we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(ret) };
        Ok(KernelMap {
            fd,
            spec: spec.clone(),
        })
    }

    /// A second handle on a map that something else (libbpf) owns.
    pub(crate) fn from_borrowed(fd: BorrowedFd<'_>, spec: MapSpec) -> Result<Self, KernelError> {
        let fd = fd.try_clone_to_owned().map_err(|e| KernelError::Map {
            map: spec.name.clone(),
            operation: "dup",
            errno: Errno(e.raw_os_error().unwrap_or(0)),
        })?;
        Ok(KernelMap { fd, spec })
    }

    /// What the map was created with (or, for maps of an object, what libbpf reported).
    pub fn spec(&self) -> &MapSpec {
        &self.spec
    }

    /// The map's name as given (the kernel keeps only its first 15 bytes).
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The value under `key`, or `None` if there is none.
    pub fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>, KernelError> {
        self.check_len("key", key.len(), self.spec.key_size)?;
        let mut value = vec![0u8; self.spec.value_size as usize];
        // SAFETY: `key` holds key_size bytes and `value` value_size bytes, which is exactly
        // what the kernel reads and writes for this map.
        let ret = unsafe {
            libbpf_sys::bpf_map_lookup_elem(
                self.fd.as_raw_fd(),
                key.as_ptr().cast(),
                value.as_mut_ptr().cast(),
            )
        };
        match ret {
            0 => Ok(Some(value)),
            r if Errno::from_ret(r).0 == libc::ENOENT => Ok(None),
            r => Err(self.error("BPF_MAP_LOOKUP_ELEM", r)),
        }
    }

    /// Sets `key` to `value` (`flags`: 0 = any, 1 = only new, 2 = only existing).
    pub fn update(&self, key: &[u8], value: &[u8], flags: u64) -> Result<(), KernelError> {
        self.check_len("key", key.len(), self.spec.key_size)?;
        self.check_len("value", value.len(), self.spec.value_size)?;
        // SAFETY: both buffers have the sizes the kernel reads for this map.
        let ret = unsafe {
            libbpf_sys::bpf_map_update_elem(
                self.fd.as_raw_fd(),
                key.as_ptr().cast(),
                value.as_ptr().cast(),
                flags,
            )
        };
        if ret < 0 {
            return Err(self.error("BPF_MAP_UPDATE_ELEM", ret));
        }
        Ok(())
    }

    /// Deletes `key`; returns whether it was present.
    pub fn delete(&self, key: &[u8]) -> Result<bool, KernelError> {
        self.check_len("key", key.len(), self.spec.key_size)?;
        // SAFETY: `key` has the size the kernel reads for this map.
        let ret =
            unsafe { libbpf_sys::bpf_map_delete_elem(self.fd.as_raw_fd(), key.as_ptr().cast()) };
        match ret {
            0 => Ok(true),
            r if Errno::from_ret(r).0 == libc::ENOENT => Ok(false),
            r => Err(self.error("BPF_MAP_DELETE_ELEM", r)),
        }
    }

    /// The key after `key` in the kernel's iteration order (the first key for `None`), or
    /// `None` at the end.
    pub fn next_key(&self, key: Option<&[u8]>) -> Result<Option<Vec<u8>>, KernelError> {
        if let Some(key) = key {
            self.check_len("key", key.len(), self.spec.key_size)?;
        }
        let mut next = vec![0u8; self.spec.key_size as usize];
        let key_ptr = key.map_or(std::ptr::null(), |k| k.as_ptr().cast());
        // SAFETY: `key_ptr` is null or key_size bytes; `next` has key_size bytes.
        let ret = unsafe {
            libbpf_sys::bpf_map_get_next_key(self.fd.as_raw_fd(), key_ptr, next.as_mut_ptr().cast())
        };
        match ret {
            0 => Ok(Some(next)),
            r if Errno::from_ret(r).0 == libc::ENOENT => Ok(None),
            r => Err(self.error("BPF_MAP_GET_NEXT_KEY", r)),
        }
    }

    /// Every key, in the kernel's iteration order.
    pub fn keys(&self) -> Result<Vec<Vec<u8>>, KernelError> {
        let mut keys = Vec::new();
        let mut cursor: Option<Vec<u8>> = None;
        while let Some(next) = self.next_key(cursor.as_deref())? {
            // A hash map that changes under us could cycle; entries are bounded by max_entries.
            if keys.len() > self.spec.max_entries as usize {
                return Err(self.error("BPF_MAP_GET_NEXT_KEY", -libc::ELOOP));
            }
            keys.push(next.clone());
            cursor = Some(next);
        }
        Ok(keys)
    }

    /// Every entry, keyed in byte order.
    pub fn snapshot(&self) -> Result<MapSnapshot, KernelError> {
        let mut entries = BTreeMap::new();
        for key in self.keys()? {
            // An entry deleted between get_next_key and lookup is simply not in the snapshot.
            if let Some(value) = self.lookup(&key)? {
                entries.insert(key, value);
            }
        }
        Ok(MapSnapshot {
            name: self.spec.name.clone(),
            entries,
        })
    }

    fn check_len(&self, what: &str, got: usize, want: u32) -> Result<(), KernelError> {
        if got != want as usize {
            return Err(KernelError::InvalidInput {
                what: format!("map {:?}", self.spec.name),
                reason: format!("{what} has {got} bytes, the map's {what} size is {want}"),
            });
        }
        Ok(())
    }

    fn error(&self, operation: &'static str, ret: i32) -> KernelError {
        KernelError::Map {
            map: self.spec.name.clone(),
            operation,
            errno: Errno::from_ret(ret),
        }
    }
}

impl AsFd for KernelMap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The kernel keeps object names of at most 15 bytes of `[A-Za-z0-9_.]`.
pub(crate) fn kernel_name(name: &str) -> CString {
    let cleaned: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
        .take(15)
        .collect();
    CString::new(cleaned).expect("filtered name has no NUL")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_are_cut_to_what_the_kernel_keeps() {
        assert_eq!(kernel_name("results").to_str().unwrap(), "results");
        assert_eq!(
            kernel_name("a_very_long_map_name_indeed").to_str().unwrap(),
            "a_very_long_map"
        );
        assert_eq!(kernel_name("x-y z/.bss").to_str().unwrap(), "xyz.bss");
    }
}
