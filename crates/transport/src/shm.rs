//! The shared-memory transport: the control plane maps the target's region file.

use crate::local::LocalRegion;
use crate::region_file::{self, OpenRefusal, TrustedOwners};
use crate::{Transport, TransportError};
use rdx_region::geometry::{check_header, HeaderInfo};
use rdx_region::layout::{Arch, RegionHeader, HOST_FLAG_MEMBARRIER_EXPEDITED};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// A control plane's mapping of a target's region file, including its code arena (which the
/// target itself maps read+execute only): read+write, or read-only for commands that only
/// look ([`ShmOptions::read_only`]).
///
/// Only region files that [`region_file::check_open_file`] accepts are mapped: regular
/// files, not reached through a symbolic link, owned by this process's user, root or a user
/// named in [`ShmOptions::trust_owner`], and writable by no one but their owner.
pub struct ShmTransport {
    region: LocalRegion,
    len: usize,
    info: HeaderInfo,
    path: PathBuf,
    read_only: bool,
}

/// How [`ShmTransport::open_with`] opens a region.
#[derive(Debug, Clone)]
pub struct ShmOptions {
    /// The architecture the region's code must be for (default: this machine's).
    pub arch: Arch,
    /// Map the region read-only (writes then fail with [`TransportError::ReadOnly`]).
    pub read_only: bool,
    /// The users whose region files are accepted.
    pub trusted: TrustedOwners,
}

impl Default for ShmOptions {
    fn default() -> Self {
        Self {
            arch: Arch::HOST.expect("rdx supports x86_64 and aarch64 hosts"),
            read_only: false,
            trusted: TrustedOwners::own_user(),
        }
    }
}

impl ShmOptions {
    /// Maps the region read-only: every write, compare-and-swap and fetch-and-add fails with
    /// [`TransportError::ReadOnly`].
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Also accepts region files owned by `uid`.
    pub fn trust_owner(mut self, uid: u32) -> Self {
        self.trusted = self.trusted.and(uid);
        self
    }

    /// Expects a region whose host runs `arch` (the header check refuses any other).
    pub fn arch(mut self, arch: Arch) -> Self {
        self.arch = arch;
        self
    }
}

impl std::fmt::Debug for ShmTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmTransport")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl ShmTransport {
    /// Maps the region at `path` after checking its header against this build (magic,
    /// layout version, architecture of this machine, checksum, section bounds, file length).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TransportError> {
        Self::open_with(path, &ShmOptions::default())
    }

    /// Like [`ShmTransport::open`], for a region whose host runs `arch`.
    pub fn open_for(path: impl AsRef<Path>, arch: Arch) -> Result<Self, TransportError> {
        Self::open_with(path, &ShmOptions::default().arch(arch))
    }

    /// Like [`ShmTransport::open`], mapped read-only.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Self, TransportError> {
        Self::open_with(path, &ShmOptions::default().read_only())
    }

    /// Opens (never through a symbolic link), checks owner and mode, maps and checks the
    /// header of the region at `path`.
    pub fn open_with(path: impl AsRef<Path>, options: &ShmOptions) -> Result<Self, TransportError> {
        let path = path.as_ref().to_path_buf();
        let shown = path.display().to_string();
        let io = |what, source| TransportError::Io {
            what,
            path: shown.clone(),
            source,
        };
        let untrusted = |source| TransportError::Untrusted {
            path: shown.clone(),
            source,
        };
        let file = region_file::open_existing(&path, !options.read_only).map_err(|e| match e {
            OpenRefusal::Untrusted(source) => untrusted(source),
            OpenRefusal::Io(e) => io("opening", e),
        })?;
        region_file::check_open_file(&file, &options.trusted)
            .map_err(|e| io("stat of", e))?
            .map_err(untrusted)?;
        let len = file.metadata().map_err(|e| io("stat of", e))?.len();
        let header_len = std::mem::size_of::<RegionHeader>() as u64;
        if len < header_len {
            return Err(TransportError::Layout {
                path: shown,
                source: rdx_region::geometry::LayoutError::Truncated {
                    what: "header",
                    len,
                    need: header_len,
                },
            });
        }
        let prot = if options.read_only {
            libc::PROT_READ
        } else {
            libc::PROT_READ | libc::PROT_WRITE
        };
        // SAFETY: mapping a file we opened with the access `prot` asks for, shared; the
        // result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io("mapping", std::io::Error::last_os_error()));
        }
        // SAFETY: `base` maps `len` bytes until `Drop` unmaps them; mmap is page-aligned. A
        // read-only mapping is only ever read through it: `ShmTransport` refuses every
        // writing operation before it reaches the region, and `local` hands it out only
        // when the mapping is writable.
        let region = unsafe { LocalRegion::from_raw(base as *mut u8, len) };
        let unmap = || {
            // SAFETY: unmapping exactly what we mapped above, on an error path.
            unsafe { libc::munmap(base, len as usize) };
        };
        let mut head = vec![0u8; header_len as usize];
        if let Err(e) = region.read(0, &mut head) {
            unmap();
            return Err(e);
        }
        let info = match check_header(&head, len, options.arch) {
            Ok(info) => info,
            Err(source) => {
                unmap();
                return Err(TransportError::Layout {
                    path: shown,
                    source,
                });
            }
        };
        Ok(Self {
            region,
            len: len as usize,
            info,
            path,
            read_only: options.read_only,
        })
    }

    /// Whether the region is mapped read-only (every write fails).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn writable(&self) -> Result<(), TransportError> {
        if self.read_only {
            return Err(TransportError::ReadOnly {
                path: self.path.display().to_string(),
            });
        }
        Ok(())
    }

    /// The header as it was checked at open.
    pub fn info(&self) -> &HeaderInfo {
        &self.info
    }

    /// The region file this transport mapped.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The local mapping (for tools that need pointers, e.g. to flush caches on aarch64);
    /// `None` when the region is mapped read-only.
    pub fn local(&self) -> Option<LocalRegion> {
        (!self.read_only).then_some(self.region)
    }
}

impl Drop for ShmTransport {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping created in `open_for`; no references into it remain
        // (LocalRegion copies handed out by `local` must not outlive self, as documented).
        unsafe { libc::munmap(self.region.base() as *mut libc::c_void, self.len) };
    }
}

impl Transport for ShmTransport {
    fn region_len(&self) -> u64 {
        self.region.region_len()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), TransportError> {
        self.region.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), TransportError> {
        self.writable()?;
        self.region.write(offset, data)
    }
    fn read_u64(&self, offset: u64) -> Result<u64, TransportError> {
        self.region.read_u64(offset)
    }
    fn write_u64(&self, offset: u64, value: u64) -> Result<(), TransportError> {
        self.writable()?;
        self.region.write_u64(offset, value)
    }
    fn compare_and_swap(
        &self,
        offset: u64,
        expected: u64,
        new: u64,
    ) -> Result<u64, TransportError> {
        self.writable()?;
        self.region.compare_and_swap(offset, expected, new)
    }
    fn fetch_and_add(&self, offset: u64, delta: u64) -> Result<u64, TransportError> {
        self.writable()?;
        self.region.fetch_and_add(offset, delta)
    }
    fn fence(&self) -> Result<(), TransportError> {
        self.region.fence()
    }
    fn equals(&self, offset: u64, bytes: &[u8]) -> Result<bool, TransportError> {
        self.region.equals(offset, bytes)
    }

    fn shares_pid_namespace(&self) -> bool {
        true
    }

    /// Every running thread of the host passes a full barrier before this returns. A host
    /// that registered for the expedited command (header flag) gets an IPI to the CPUs
    /// running it (microseconds); otherwise `MEMBARRIER_CMD_GLOBAL` waits for an RCU grace
    /// period on the whole machine (milliseconds).
    fn remote_barrier(&self) -> Result<(), TransportError> {
        const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
        const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
        // Read from the region, not the header seen at open: a host restarted on the same
        // file may run a runtime that did not register.
        let mut flags = [0u8; 4];
        self.region.read(
            std::mem::offset_of!(RegionHeader, host_flags) as u64,
            &mut flags,
        )?;
        let cmd = if u32::from_le_bytes(flags) & HOST_FLAG_MEMBARRIER_EXPEDITED != 0 {
            MEMBARRIER_CMD_GLOBAL_EXPEDITED
        } else {
            MEMBARRIER_CMD_GLOBAL
        };
        // SAFETY: a plain system call with no pointers.
        let rc = unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) };
        if rc != 0 {
            return Err(TransportError::Io {
                what: "membarrier for",
                path: self.path.display().to_string(),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(())
    }
}
