//! In-process execution: maps linked code W^X (writable while it is written, then
//! read+execute, never both) and hands out a callable [`EntryFn`].
//!
//! This is for tests, benchmarks and `rdx run --jit`. The data-plane runtime maps its own code
//! arena and must not depend on this crate.

use std::ptr::NonNull;

use rdx_region::abi::{EntryFn, RunState};

use crate::artifact::{Artifact, FLAG_ENTRY_LENGTH_ARG};
use crate::link::{link_bytes, link_into, LinkError, LinkTarget, SymbolResolver};
use rdx_region::layout::Arch;

/// Why code could not be made executable in this process.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The JIT does not support this machine's architecture.
    #[error("this host's architecture is not supported by the JIT")]
    UnsupportedHost,
    /// Linking the artifact failed.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// A system call failed while mapping the code.
    #[error("{call} failed: {source}")]
    Os {
        /// The call (`mmap`, `mprotect`, ...).
        call: &'static str,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The artifact has no code to run.
    #[error("artifact has no code")]
    Empty,
}

/// Linked code mapped read+execute in this process. Unmapped on drop.
pub struct ExecutableCode {
    base: NonNull<u8>,
    len: usize,
    entry_offset: u32,
    flags: u32,
}

// SAFETY: the mapping is immutable after construction (read+execute) and owned by this value.
unsafe impl Send for ExecutableCode {}
// SAFETY: as above; concurrent calls into immutable code are fine.
unsafe impl Sync for ExecutableCode {}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

fn os_err(call: &'static str) -> ExecError {
    ExecError::Os {
        call,
        source: std::io::Error::last_os_error(),
    }
}

impl ExecutableCode {
    /// Links a parsed artifact for a fresh mapping in this process and makes it executable.
    pub fn load(
        artifact: &Artifact,
        resolver: &dyn SymbolResolver,
    ) -> Result<ExecutableCode, ExecError> {
        let arch = Arch::HOST.ok_or(ExecError::UnsupportedHost)?;
        Self::map_with(artifact.code.len(), artifact.meta.flags, |addr, out| {
            link_into(artifact, LinkTarget::new(arch), resolver, addr, out)?;
            Ok(artifact.meta.entry_offset)
        })
    }

    /// Checks, parses and links a serialised artifact, then maps it. Nothing is mapped
    /// executable unless every check passes.
    pub fn load_bytes(
        bytes: &[u8],
        resolver: &dyn SymbolResolver,
    ) -> Result<ExecutableCode, ExecError> {
        let arch = Arch::HOST.ok_or(ExecError::UnsupportedHost)?;
        // Validate before mapping anything; link again at the real address below.
        let artifact = Artifact::from_bytes(bytes).map_err(LinkError::from)?;
        link_bytes(bytes, LinkTarget::new(arch), resolver, 0)?;
        Self::load(&artifact, resolver)
    }

    fn map_with(
        len: usize,
        flags: u32,
        fill: impl FnOnce(u64, &mut [u8]) -> Result<u32, LinkError>,
    ) -> Result<ExecutableCode, ExecError> {
        if len == 0 {
            return Err(ExecError::Empty);
        }
        let page = page_size();
        let map_len = len.div_ceil(page) * page;
        // SAFETY: anonymous private mapping with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_err("mmap"));
        }
        let base = NonNull::new(p.cast::<u8>()).expect("mmap never returns null on success");
        let mut code = ExecutableCode {
            base,
            len: map_len,
            entry_offset: 0,
            flags,
        };
        // SAFETY: the mapping is map_len >= len bytes, writable, and exclusively ours.
        let out = unsafe { std::slice::from_raw_parts_mut(base.as_ptr(), len) };
        let entry_offset = fill(base.as_ptr() as u64, out)?;
        // SAFETY: same mapping; switching it from RW to RX (W^X: never both).
        if unsafe { libc::mprotect(p, map_len, libc::PROT_READ | libc::PROT_EXEC) } != 0 {
            return Err(os_err("mprotect"));
        }
        flush_icache(base.as_ptr(), len);
        code.entry_offset = entry_offset;
        Ok(code)
    }

    /// The native entry point.
    pub fn entry(&self) -> EntryFn {
        // SAFETY: the entry offset lies inside the mapping (checked when the artifact was
        // parsed) and the mapping holds linked code for this host with the EntryFn ABI.
        unsafe {
            std::mem::transmute::<*const u8, EntryFn>(
                self.base.as_ptr().add(self.entry_offset as usize),
            )
        }
    }

    /// Runs the program on `ctx` with `run` as its per-run state and returns `r0`.
    ///
    /// # Safety
    /// The program was verified for a context of the shape `ctx` points to, and every symbol
    /// it was linked against is still valid.
    pub unsafe fn call(&self, ctx: *mut u8, run: &mut RunState) -> u64 {
        // SAFETY: forwarded to the caller.
        unsafe { (self.entry())(ctx, run) }
    }

    /// Runs with `r2 = len` for code compiled with [`crate::EntryAbi::WithLength`] (the
    /// conformance convention); standard entries ignore the extra argument.
    ///
    /// # Safety
    /// As [`ExecutableCode::call`].
    pub unsafe fn call_with_len(&self, ctx: *mut u8, run: &mut RunState, len: u64) -> u64 {
        type EntryWithLen = unsafe extern "C" fn(*mut u8, *mut RunState, u64) -> u64;
        // SAFETY: both supported C calling conventions pass the first three integer arguments
        // in registers, so an entry that takes two ignores the third.
        unsafe {
            let f = std::mem::transmute::<*const u8, EntryWithLen>(
                self.base.as_ptr().add(self.entry_offset as usize),
            );
            f(ctx, run, len)
        }
    }

    /// Whether the entry reads `r2` from a third argument.
    pub fn takes_length(&self) -> bool {
        self.flags & FLAG_ENTRY_LENGTH_ARG != 0
    }

    /// Address of the first code byte.
    pub fn base_address(&self) -> u64 {
        self.base.as_ptr() as u64
    }
}

impl Drop for ExecutableCode {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping this value owns.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

#[cfg(target_arch = "aarch64")]
fn flush_icache(start: *mut u8, len: usize) {
    extern "C" {
        fn __clear_cache(start: *mut libc::c_char, end: *mut libc::c_char);
    }
    // SAFETY: the range lies inside a live mapping we own.
    unsafe { __clear_cache(start.cast(), start.add(len).cast()) }
}

#[cfg(not(target_arch = "aarch64"))]
fn flush_icache(_start: *mut u8, _len: usize) {
    // x86 keeps instruction fetch coherent with stores; the mprotect system call that made
    // the code executable is already serialising.
}
