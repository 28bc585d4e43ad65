//! The shared-memory transport: the control plane maps the target's region file.

use crate::local::LocalRegion;
use crate::{Transport, TransportError};
use rdx_region::geometry::{check_header, HeaderInfo};
use rdx_region::layout::{Arch, RegionHeader, HOST_FLAG_MEMBARRIER_EXPEDITED};
use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// A control plane's read+write mapping of a target's region file, including its code arena
/// (which the target itself maps read+execute only).
pub struct ShmTransport {
    region: LocalRegion,
    len: usize,
    info: HeaderInfo,
    path: PathBuf,
}

impl std::fmt::Debug for ShmTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmTransport")
            .field("path", &self.path)
            .field("len", &self.len)
            .finish()
    }
}

impl ShmTransport {
    /// Maps the region at `path` after checking its header against this build (magic,
    /// layout version, architecture of this machine, checksum, section bounds, file length).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TransportError> {
        let arch = Arch::HOST.expect("rdx supports x86_64 and aarch64 hosts");
        Self::open_for(path, arch)
    }

    /// Like [`ShmTransport::open`], for a region whose host runs `arch`.
    pub fn open_for(path: impl AsRef<Path>, arch: Arch) -> Result<Self, TransportError> {
        let path = path.as_ref().to_path_buf();
        let shown = path.display().to_string();
        let io = |what, source| TransportError::Io {
            what,
            path: shown.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| io("opening", e))?;
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
        // SAFETY: mapping a file we opened read+write, shared; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io("mapping", std::io::Error::last_os_error()));
        }
        // SAFETY: `base` maps `len` bytes until `Drop` unmaps them; mmap is page-aligned.
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
        let info = match check_header(&head, len, arch) {
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
        })
    }

    /// The header as it was checked at open.
    pub fn info(&self) -> &HeaderInfo {
        &self.info
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The local mapping (for tools that need pointers, e.g. to flush caches on aarch64).
    pub fn local(&self) -> LocalRegion {
        self.region
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
        self.region.write(offset, data)
    }
    fn read_u64(&self, offset: u64) -> Result<u64, TransportError> {
        self.region.read_u64(offset)
    }
    fn write_u64(&self, offset: u64, value: u64) -> Result<(), TransportError> {
        self.region.write_u64(offset, value)
    }
    fn compare_and_swap(
        &self,
        offset: u64,
        expected: u64,
        new: u64,
    ) -> Result<u64, TransportError> {
        self.region.compare_and_swap(offset, expected, new)
    }
    fn fetch_and_add(&self, offset: u64, delta: u64) -> Result<u64, TransportError> {
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
