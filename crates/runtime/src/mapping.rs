//! Creating the region file and mapping it: data sections read+write, the code arena
//! read+execute, at one contiguous address range.

use crate::RuntimeError;
use rdx_region::geometry::HeaderInfo;
use rdx_region::layout::{offsets, SectionId, MAGIC};
use rdx_transport::region_file::{self, OpenRefusal, TrustedOwners};
use std::fs::{File, OpenOptions};
use std::os::fd::IntoRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where a host's region file goes.
#[derive(Clone, Debug)]
pub(crate) enum RegionPath {
    /// A path the host's operator chose. Created exclusively; a file already there is reused
    /// (a restarted host keeps its region's incarnation count) only if it is a regular file
    /// of this user that no one else can write.
    Chosen(PathBuf),
    /// A fresh `/dev/shm/rdx-<pid>-<random>` name: 64 random bits, so another local user
    /// cannot create it first.
    Fresh,
}

/// Names tried for [`RegionPath::Fresh`] before giving up: a clash of 64 random bits means
/// something is wrong with the random source, not bad luck.
const FRESH_NAME_ATTEMPTS: usize = 4;

/// Opens the region file: `O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600, so that neither a file
/// another user created at the path nor a symbolic link planted there is ever adopted or
/// written through.
fn open_region_file(path: &RegionPath) -> Result<(File, PathBuf), RuntimeError> {
    let create = |p: &Path| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(p)
    };
    match path {
        RegionPath::Fresh => {
            let mut last = None;
            for _ in 0..FRESH_NAME_ATTEMPTS {
                let p = PathBuf::from(format!(
                    "/dev/shm/rdx-{}-{:016x}",
                    std::process::id(),
                    random_u64()?
                ));
                match create(&p) {
                    Ok(f) => return Ok((f, p)),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some((p, e)),
                    Err(source) => {
                        return Err(RuntimeError::Io {
                            what: "creating",
                            path: p,
                            source,
                        })
                    }
                }
            }
            let (path, source) = last.expect("at least one attempt");
            Err(RuntimeError::Io {
                what: "creating (every fresh name was taken)",
                path,
                source,
            })
        }
        RegionPath::Chosen(p) => match create(p) {
            Ok(f) => Ok((f, p.clone())),
            // O_EXCL fails on a symbolic link too (it never follows one); the open below
            // tells a link from a file.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let untrusted = |source| RuntimeError::UntrustedRegion {
                    path: p.clone(),
                    source,
                };
                let file = region_file::open_existing(p, true).map_err(|e| match e {
                    OpenRefusal::Untrusted(source) => untrusted(source),
                    OpenRefusal::Io(source) => RuntimeError::Io {
                        what: "opening the existing",
                        path: p.clone(),
                        source,
                    },
                })?;
                // Only this user's own files: a host trusts no other user with its code,
                // root included (a root-owned leftover is for a root host to reuse).
                let stat_err = |source| RuntimeError::Io {
                    what: "stat of",
                    path: p.clone(),
                    source,
                };
                region_file::check_open_file(&file, &TrustedOwners::only_own_user())
                    .map_err(stat_err)?
                    .map_err(untrusted)?;
                // It is about to be truncated: it must not be another region by another name.
                region_file::check_single_link(&file)
                    .map_err(stat_err)?
                    .map_err(untrusted)?;
                Ok((file, p.clone()))
            }
            Err(source) => Err(RuntimeError::Io {
                what: "creating",
                path: p.clone(),
                source,
            }),
        },
    }
}

/// 64 bits from the kernel's random generator.
fn random_u64() -> Result<u64, RuntimeError> {
    let mut b = [0u8; 8];
    let mut done = 0;
    while done < b.len() {
        // SAFETY: getrandom writes at most `b.len() - done` bytes into our buffer.
        let rc = unsafe { libc::getrandom(b[done..].as_mut_ptr().cast(), b.len() - done, 0) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(RuntimeError::Io {
                what: "getrandom for a region name in",
                path: PathBuf::from("/dev/shm"),
                source: e,
            });
        }
        done += rc as usize;
    }
    Ok(u64::from_le_bytes(b))
}

/// The host's mapping of its region. Unmapped (and the file left in place) on drop.
pub(crate) struct Mapping {
    pub base: *mut u8,
    pub len: usize,
    pub path: PathBuf,
    pub fd: libc::c_int,
}

// SAFETY: the mapping is shared memory accessed only through atomics and the raw pointers
// handed to extension code; the struct itself is immutable after creation.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

fn os_err(what: &'static str, path: &Path) -> RuntimeError {
    RuntimeError::Io {
        what,
        path: path.to_path_buf(),
        source: std::io::Error::last_os_error(),
    }
}

impl Mapping {
    /// Creates the file at `path` (or reuses one this user made there before), sizes it for
    /// the layout and maps it. Returns the mapping and the previous incarnation counter found
    /// in the file, if any.
    pub fn create(
        path: &RegionPath,
        region_size: u64,
        code: (u64, u64),
        fixed_base: Option<u64>,
    ) -> Result<(Mapping, u64), RuntimeError> {
        let (file, path) = open_region_file(path)?;
        let path = path.as_path();
        let fd = file.into_raw_fd();
        let close = |e: RuntimeError| {
            // SAFETY: closing the fd we opened, on an error path.
            unsafe { libc::close(fd) };
            e
        };
        let previous = previous_incarnation(fd);
        // Truncate to zero first so that every byte of the new region starts zeroed.
        // SAFETY: plain system calls on our fd.
        if unsafe { libc::ftruncate(fd, 0) } != 0
            // SAFETY: as above.
            || unsafe { libc::ftruncate(fd, region_size as libc::off_t) } != 0
        {
            return Err(close(os_err("sizing", path)));
        }
        let len = region_size as usize;
        let (code_off, code_len) = code;
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        let hint = match fixed_base {
            Some(addr) => {
                flags |= libc::MAP_FIXED_NOREPLACE;
                addr as *mut libc::c_void
            }
            None => std::ptr::null_mut(),
        };
        // Reserve the whole range first, then map the file's two parts into it.
        // SAFETY: an anonymous reservation; result checked.
        let base = unsafe { libc::mmap(hint, len, libc::PROT_NONE, flags, -1, 0) };
        if base == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(close(match fixed_base {
                Some(addr) => RuntimeError::AddressClash {
                    addr,
                    len: region_size,
                    source: e,
                },
                None => RuntimeError::Io {
                    what: "reserving address space for",
                    path: path.into(),
                    source: e,
                },
            }));
        }
        if fixed_base.is_some_and(|a| a != base as u64) {
            // Kernels before 4.17 ignore MAP_FIXED_NOREPLACE and treat it as a hint.
            // SAFETY: unmapping our reservation.
            unsafe { libc::munmap(base, len) };
            return Err(close(RuntimeError::AddressClash {
                addr: fixed_base.unwrap_or(0),
                len: region_size,
                source: std::io::Error::from_raw_os_error(libc::EEXIST),
            }));
        }
        let map_part = |off: u64, size: u64, prot: libc::c_int| -> Result<(), RuntimeError> {
            // SAFETY: replacing part of our own reservation with a shared file mapping.
            let p = unsafe {
                libc::mmap(
                    (base as *mut u8).add(off as usize) as *mut libc::c_void,
                    size as usize,
                    prot,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd,
                    off as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(os_err("mapping", path));
            }
            Ok(())
        };
        let r = map_part(0, code_off, libc::PROT_READ | libc::PROT_WRITE)
            .and_then(|_| map_part(code_off, code_len, libc::PROT_READ | libc::PROT_EXEC));
        if let Err(e) = r {
            // SAFETY: unmapping our reservation on an error path.
            unsafe { libc::munmap(base, len) };
            return Err(close(e));
        }
        Ok((
            Mapping {
                base: base as *mut u8,
                len,
                path: path.to_path_buf(),
                fd,
            },
            previous,
        ))
    }

    /// Region offsets `[0, code.offset)` as a transport (the code arena is not writable here).
    pub fn data_len(info: &HeaderInfo) -> u64 {
        info.section(SectionId::Code).offset
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping what `create` mapped; every user holds the Arc that owns us.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.len);
            libc::close(self.fd);
        }
    }
}

fn previous_incarnation(fd: libc::c_int) -> u64 {
    let mut head = [0u8; 8];
    let mut inc = [0u8; 8];
    // SAFETY: reads into local buffers from our fd.
    let ok = unsafe {
        libc::pread(fd, head.as_mut_ptr() as *mut libc::c_void, 8, 0) == 8
            && libc::pread(
                fd,
                inc.as_mut_ptr() as *mut libc::c_void,
                8,
                offsets::HEADER_INCARNATION as libc::off_t,
            ) == 8
    };
    if ok && u64::from_le_bytes(head) == MAGIC {
        u64::from_le_bytes(inc)
    } else {
        0
    }
}
