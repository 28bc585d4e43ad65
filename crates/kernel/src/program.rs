use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use rdx_bpf::isa::RawInsn;

use crate::error::{Errno, KernelError};
use crate::map::kernel_name;
use crate::run::{test_run, TestRunInput, TestRunOutput};

/// The program types rdx compares against (the kernel's `enum bpf_prog_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProgType {
    /// `BPF_PROG_TYPE_SOCKET_FILTER` (`SEC("socket")`): context `struct __sk_buff`.
    SocketFilter,
    /// `BPF_PROG_TYPE_SCHED_CLS` (`SEC("tc")`): context `struct __sk_buff` with direct
    /// packet access.
    SchedCls,
    /// `BPF_PROG_TYPE_XDP` (`SEC("xdp")`): context `struct xdp_md`.
    Xdp,
    /// Any other type, by kernel number.
    Other(u32),
}

impl ProgType {
    /// The kernel's `enum bpf_prog_type` number for this type.
    pub fn to_kernel(self) -> u32 {
        match self {
            ProgType::SocketFilter => libbpf_sys::BPF_PROG_TYPE_SOCKET_FILTER,
            ProgType::SchedCls => libbpf_sys::BPF_PROG_TYPE_SCHED_CLS,
            ProgType::Xdp => libbpf_sys::BPF_PROG_TYPE_XDP,
            ProgType::Other(n) => n,
        }
    }

    /// The type of kernel number `n`; numbers this crate does not name become [`ProgType::Other`].
    pub fn from_kernel(n: u32) -> Self {
        match n {
            libbpf_sys::BPF_PROG_TYPE_SOCKET_FILTER => ProgType::SocketFilter,
            libbpf_sys::BPF_PROG_TYPE_SCHED_CLS => ProgType::SchedCls,
            libbpf_sys::BPF_PROG_TYPE_XDP => ProgType::Xdp,
            other => ProgType::Other(other),
        }
    }
}

/// Largest verifier log buffer a load retries with after ENOSPC.
const MAX_LOG_SIZE: usize = 64 << 20;

/// Options of [`KernelProgram::load`].
#[derive(Clone, Debug)]
pub struct LoadOptions<'a> {
    /// Licence string; helpers marked GPL-only need a GPL-compatible one.
    pub license: &'a str,
    /// Map descriptors for `lddw` instructions whose source is `BPF_PSEUDO_MAP_IDX` (5) or
    /// `BPF_PSEUDO_MAP_IDX_VALUE` (6): `imm` indexes this array. This is exactly the form
    /// rdx's loader produces (`ImmKind::MapIdx`/`MapIdxValue`), so its output loads as is.
    pub fd_array: &'a [BorrowedFd<'a>],
    /// Verifier log level: 0 = no log unless the load fails, 1 = log, 2 = verbose. With 0
    /// a failed load is retried once with level 1 so that the error carries the log.
    pub log_level: u32,
    /// Size of the log buffer in bytes. If a requested log does not fit, the kernel fails the
    /// load with ENOSPC and reports the size it needed; the load is retried once with that
    /// size (at most 64 MiB).
    pub log_size: usize,
}

impl Default for LoadOptions<'_> {
    fn default() -> Self {
        LoadOptions {
            license: "GPL",
            fd_array: &[],
            log_level: 0,
            log_size: 1 << 20,
        }
    }
}

/// A program loaded from raw instructions, with what the kernel said about it.
#[derive(Debug)]
pub struct LoadedProgram {
    /// The program, loaded: run it with [`KernelProgram::test_run`].
    pub program: KernelProgram,
    /// Verifier log (empty when `log_level` was 0 and the load succeeded).
    pub log: String,
    /// Wall time of the successful `BPF_PROG_LOAD` call (verification and JIT).
    pub load_time: Duration,
}

/// A program in the kernel, owned through its file descriptor.
#[derive(Debug)]
pub struct KernelProgram {
    fd: OwnedFd,
    name: String,
    prog_type: ProgType,
}

impl KernelProgram {
    /// Loads a raw instruction array (`BPF_PROG_LOAD`).
    ///
    /// A verifier rejection is [`KernelError::ProgramRejected`] with the log.
    pub fn load(
        name: &str,
        prog_type: ProgType,
        insns: &[RawInsn],
        options: &LoadOptions<'_>,
    ) -> Result<LoadedProgram, KernelError> {
        crate::probe()?;
        Self::load_unprobed(name, prog_type, insns, options)
    }

    /// Loads a program given as little-endian instruction bytes.
    pub fn load_bytes(
        name: &str,
        prog_type: ProgType,
        bytes: &[u8],
        options: &LoadOptions<'_>,
    ) -> Result<LoadedProgram, KernelError> {
        let insns = rdx_bpf::isa::raw_from_bytes(bytes).map_err(|e| KernelError::InvalidInput {
            what: format!("program {name:?}"),
            reason: e.to_string(),
        })?;
        Self::load(name, prog_type, &insns, options)
    }

    pub(crate) fn load_unprobed(
        name: &str,
        prog_type: ProgType,
        insns: &[RawInsn],
        options: &LoadOptions<'_>,
    ) -> Result<LoadedProgram, KernelError> {
        let invalid = |reason: String| KernelError::InvalidInput {
            what: format!("program {name:?}"),
            reason,
        };
        if insns.is_empty() {
            return Err(invalid("no instructions".into()));
        }
        let license = std::ffi::CString::new(options.license)
            .map_err(|_| invalid("licence string contains a NUL byte".into()))?;
        let c_name = kernel_name(name);
        // The kernel's `struct bpf_insn` has exactly the 8-byte little-endian layout of a slot.
        let kernel_insns: Vec<libbpf_sys::bpf_insn> = insns
            .iter()
            .map(|i| {
                let mut k = libbpf_sys::bpf_insn {
                    code: i.code,
                    off: i.off,
                    imm: i.imm,
                    ..Default::default()
                };
                k.set_dst_reg(i.dst);
                k.set_src_reg(i.src);
                k
            })
            .collect();
        let fd_array: Vec<i32> = options.fd_array.iter().map(|f| f.as_raw_fd()).collect();

        let mut log_level = options.log_level;
        let mut log_size = options.log_size;
        loop {
            let mut log = vec![0u8; if log_level > 0 { log_size } else { 0 }];
            let mut opts = libbpf_sys::bpf_prog_load_opts {
                sz: size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
                fd_array: if fd_array.is_empty() {
                    std::ptr::null()
                } else {
                    fd_array.as_ptr()
                },
                log_level,
                log_size: log.len() as u32,
                log_buf: if log.is_empty() {
                    std::ptr::null_mut()
                } else {
                    log.as_mut_ptr().cast()
                },
                ..Default::default()
            };
            let started = Instant::now();
            // SAFETY: every pointer handed to libbpf (name, licence, instructions, fd array,
            // log buffer) points to a live buffer of the advertised length for the whole call;
            // `opts.sz` tells libbpf which fields we set.
            let ret = unsafe {
                libbpf_sys::bpf_prog_load(
                    prog_type.to_kernel(),
                    c_name.as_ptr(),
                    license.as_ptr(),
                    kernel_insns.as_ptr(),
                    kernel_insns.len() as _,
                    &mut opts,
                )
            };
            let load_time = started.elapsed();
            let log_text = c_string_lossy(&log);
            if ret >= 0 {
                // SAFETY: a non-negative return of bpf_prog_load is a new descriptor we own.
                let fd = unsafe { OwnedFd::from_raw_fd(ret) };
                return Ok(LoadedProgram {
                    program: KernelProgram {
                        fd,
                        name: name.into(),
                        prog_type,
                    },
                    log: log_text,
                    load_time,
                });
            }
            let errno = Errno::from_ret(ret);
            if log_level == 0 && !matches!(errno.0, libc::EPERM | libc::ENOSYS) {
                log_level = 1;
                continue;
            }
            // The log did not fit: kernels since 6.4 say how much it needs; retry once with
            // that much (bounded, so a huge verifier log cannot exhaust memory).
            let needed = opts.log_true_size as usize;
            if errno.0 == libc::ENOSPC && needed > log.len() && log_size < MAX_LOG_SIZE {
                log_size = needed.min(MAX_LOG_SIZE);
                continue;
            }
            return Err(KernelError::ProgramRejected {
                name: name.into(),
                insns: insns.len(),
                errno,
                log: log_text,
            });
        }
    }

    /// The name the program was loaded under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The program type it was loaded as.
    pub fn prog_type(&self) -> ProgType {
        self.prog_type
    }

    /// Runs the program once or `repeat` times with `BPF_PROG_TEST_RUN`.
    pub fn test_run(&self, input: &TestRunInput<'_>) -> Result<TestRunOutput, KernelError> {
        test_run(self.fd.as_fd(), &self.name, input)
    }
}

impl AsFd for KernelProgram {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

pub(crate) fn c_string_lossy(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
