//! `rdx-xcall`: cross-sandbox direct calls. A sandbox (a host process with an rdx region)
//! exports named entries; an extension in another sandbox calls one with the `call` helper,
//! and the callee's native code runs **on the caller's thread**, against the callee's XState,
//! with no scheduler, no queue and no copy of the arguments in the path.
//!
//! What it owns:
//! - [`plan`]: the address plan, a small shared file that gives every sandbox a fixed slot of
//!   virtual address space and lists each sandbox's exported entries (the allow-list).
//! - [`service`]: joining the plan as a sandbox: the host's region is created at its slot's
//!   address, exports are declared as hooks whose context is the argument buffer, and the
//!   callee-side helper `xcall_reply` is registered.
//! - [`attach`]: mapping another sandbox's region at its planned address in this process
//!   (`MAP_FIXED_NOREPLACE`; a clash is an error, never a silent remap), with a private copy
//!   of the region's helper table that holds *this* process's callee helpers — code compiled
//!   to reach helpers through the table then runs unchanged in every process that maps it.
//! - [`call`]: the `call` helper itself ([`call::xcall_call`]), the epoch it holds on the callee
//!   while the callee runs, and a Rust entry point ([`call::call`]) over the same path.
//! - `deploy` (feature `control`): verifying, compiling and publishing an exported entry
//!   through the control plane (helpers reached through the table, so the code is portable).
//!
//! What it must not do: parse, verify or compile extension code on the data plane side (only
//! the `control` feature does, for the control plane), or write into another sandbox's code
//! arena (only a control plane does).
//!
//! The contract between caller and callee, in one place:
//! - the caller's class holds a function capability per (service, entry): a host function id
//!   bound to [`call::xcall_call`] whose first argument is constrained to that entry's
//!   [`Target`] value, the arguments typed as readable memory of at most the entry's
//!   declared size and the output as writable memory ([`eim::call_function`]);
//! - the callee's context *is* the caller's argument buffer, read-only, of the declared size;
//!   results go only into the caller's output buffer, through `xcall_reply`;
//! - the caller's instruction budget covers the call: the callee runs with its own class's
//!   budget or the caller's remaining budget, whichever is smaller, and the caller is charged
//!   what the callee spent (see [`call`], "Budget"); running out, or failing, returns a
//!   negative errno to the caller's extension ([`errno`]) and both sandboxes keep serving.
//!
//! ```no_run
//! use rdx_xcall::{plan::{Plan, PlanSpec}, service::Service, Target};
//! let plan = Plan::create("/dev/shm/rdx-plan-demo", PlanSpec::default())?;
//! let store = Service::builder(&plan, "storage").slot(1).export("lookup", 8).build()?;
//! // ...a control plane deploys `lookup` with rdx_xcall::deploy::deploy_export...
//! let svc = rdx_xcall::attach::attach(&plan, 1)?; // in the caller process
//! let mut out = [0u8; 8];
//! let r0 = rdx_xcall::call::call(Target::new(1, 0), &7u64.to_le_bytes(), &mut out)?;
//! # let _ = (store, svc, r0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod attach;
pub mod call;
mod callee;
#[cfg(feature = "control")]
pub mod deploy;
pub mod eim;
pub mod plan;
pub mod service;

pub use callee::{callee_helper_ids, callee_may_call};

use std::path::PathBuf;

/// Host-function id of `xcall_reply(data, len)`, the callee's way to write its result into the
/// caller's output buffer.
pub const REPLY_ID: u32 = 1900;
/// Name of the reply function in EIM specs and the context table.
pub const REPLY_NAME: &str = "xcall_reply";
/// First host-function id a caller host conventionally binds `call` capabilities to.
pub const FIRST_CALL_ID: u32 = 1100;

/// Slots in an address plan (and in a process's table of attached services).
pub const MAX_SLOTS: usize = 64;
/// Exports per sandbox.
pub const MAX_EXPORTS: usize = 16;
/// Largest argument buffer an export may declare. A caller that passes fewer bytes than the
/// entry declares has them copied into a zeroed buffer of the declared size on its stack, so
/// the callee never reads past the caller's buffer.
pub const MAX_ARGS: u32 = 4096;

/// Marks a [`Target`] value ("XC"), so that a stray number is not taken for a target.
const TARGET_MAGIC: u64 = 0x5843 << 48;

/// One exported entry of one sandbox: what the caller passes as the `call` helper's first
/// argument (and what its capability constrains that argument to).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub slot: u16,
    pub export: u16,
}

impl Target {
    pub const fn new(slot: u16, export: u16) -> Self {
        Self { slot, export }
    }

    /// The 64-bit value eBPF code passes (positive as an `i64`, so EIM constraints hold it).
    pub const fn encode(self) -> u64 {
        TARGET_MAGIC | (self.slot as u64) << 16 | self.export as u64
    }

    pub const fn decode(raw: u64) -> Option<Target> {
        if raw & 0xffff_ffff_0000_0000 != TARGET_MAGIC {
            return None;
        }
        Some(Target {
            slot: (raw >> 16) as u16,
            export: raw as u16,
        })
    }
}

/// Negative errno values the `call` helper returns to the caller's extension (as `u64`, two's
/// complement), and [`call::CallError`]'s mapping of them.
pub mod errno {
    const fn neg(e: i32) -> u64 {
        (-(e as i64)) as u64
    }
    /// The first argument is not a target value.
    pub const BAD_TARGET: u64 = neg(libc::EINVAL);
    /// No service is attached at that slot in this process.
    pub const NOT_MAPPED: u64 = neg(libc::ENXIO);
    /// The service exports no entry with that index (not on the allow-list).
    pub const NOT_EXPORTED: u64 = neg(libc::ENOENT);
    /// The entry is exported but no code is deployed for it.
    pub const NOT_DEPLOYED: u64 = neg(libc::ESRCH);
    /// The arguments are larger than the entry declares.
    pub const ARGS_TOO_LARGE: u64 = neg(libc::E2BIG);
    /// The callee spent its instruction budget (its class's, or what the caller had left), or
    /// the caller had no budget left to call with.
    pub const BUDGET: u64 = neg(libc::ETIME);
    /// The callee stopped abnormally, or its published word was invalid.
    pub const CALLEE_FAILED: u64 = neg(libc::EFAULT);
    /// A serialised entry stayed busy past the wait limit.
    pub const BUSY: u64 = neg(libc::EBUSY);
    /// Every thread slot of the callee's region is taken.
    pub const NO_THREAD_SLOT: u64 = neg(libc::EAGAIN);
    /// `xcall_reply` outside a call, or with more bytes than the caller's output buffer.
    pub const REPLY_TOO_LARGE: u64 = neg(libc::EMSGSIZE);
    pub const NO_CALL: u64 = neg(libc::EPERM);
    /// A helper the callee's code called is not available to cross-sandbox callees.
    pub const NO_HELPER: u64 = neg(libc::ENOSYS);
}

/// Opens a shared file of a plan (the plan itself or a region it lists) with `O_NOFOLLOW`
/// and checks, on the open descriptor, that it is a regular file of this user (or root)
/// that no one else can write: whoever controls either file controls code this process
/// maps executable.
pub(crate) fn open_shared_file(
    path: &std::path::Path,
    flags: libc::c_int,
) -> Result<std::os::fd::OwnedFd, XcallError> {
    use rdx_transport::region_file::{self, OpenRefusal, TrustedOwners};
    use std::os::fd::{AsFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    let cpath =
        std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| XcallError::BadPlan {
            path: path.into(),
            reason: "path contains NUL".into(),
        })?;
    // SAFETY: open on a NUL-terminated path we own; result checked.
    let raw = unsafe {
        libc::open(
            cpath.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600,
        )
    };
    if raw < 0 {
        return Err(
            match region_file::classify_open_error(path, std::io::Error::last_os_error()) {
                OpenRefusal::Untrusted(source) => XcallError::Untrusted {
                    path: path.into(),
                    source,
                },
                OpenRefusal::Io(source) => XcallError::Io {
                    what: "opening",
                    path: path.into(),
                    source,
                },
            },
        );
    }
    // SAFETY: `raw` is a descriptor we just opened and own from here on.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
    region_file::check_fd(fd.as_fd(), &TrustedOwners::own_user())
        .map_err(|source| XcallError::Io {
            what: "inspecting",
            path: path.into(),
            source,
        })?
        .map_err(|source| XcallError::Untrusted {
            path: path.into(),
            source,
        })?;
    Ok(fd)
}

/// Why a plan, service or attach operation failed.
#[derive(Debug, thiserror::Error)]
pub enum XcallError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("address plan {path}: {reason}")]
    BadPlan { path: PathBuf, reason: String },
    /// A plan or region file another user made or can write, or a link (`docs/security.md`).
    #[error("refusing {path}: {source}")]
    Untrusted {
        path: PathBuf,
        #[source]
        source: rdx_transport::region_file::UntrustedRegion,
    },
    #[error("slot {slot} is outside the plan's {slots} slots")]
    NoSuchSlot { slot: u32, slots: u32 },
    #[error("slot {slot} is taken by {name:?} (pid {pid})")]
    SlotTaken { slot: u16, name: String, pid: u64 },
    #[error("every slot of the plan is taken")]
    PlanFull,
    #[error("no sandbox named {0:?} in the plan")]
    NoSuchService(String),
    #[error("slot {0} holds no live sandbox")]
    EmptySlot(u16),
    #[error(
        "slot {slot}: address range {addr:#x}..+{len:#x} is already in use in this process: {source}"
    )]
    AddressClash {
        slot: u16,
        addr: u64,
        len: u64,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "slot {slot}: region of {size:#x} bytes does not fit the plan's {slot_size:#x}-byte slots"
    )]
    RegionTooLarge {
        slot: u16,
        size: u64,
        slot_size: u64,
    },
    #[error(
        "slot {slot}: region is mapped at {found:#x} in its host, the plan says {expected:#x}"
    )]
    WrongBase {
        slot: u16,
        found: u64,
        expected: u64,
    },
    #[error("region of slot {slot}: {source}")]
    Layout {
        slot: u16,
        #[source]
        source: rdx_region::geometry::LayoutError,
    },
    #[error("export {name:?}: {reason}")]
    BadExport { name: String, reason: String },
    #[error(transparent)]
    Runtime(#[from] rdx_runtime::RuntimeError),
}
