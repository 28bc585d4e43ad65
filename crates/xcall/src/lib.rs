//! `rdx-xcall`: cross-sandbox direct calls. A sandbox (a host process with an rdx region)
//! exports named entries; an extension in another sandbox calls one with the `call` helper,
//! and the callee's native code runs **on the caller's thread**, against the callee's XState,
//! with no scheduler, no queue and no copy of the arguments in the path.
//!
//! This is the host side. The address plan, [`Target`](rdx_xcall_plan::Target) and the ids
//! both planes share are `rdx-xcall-plan`'s, and deploying an exported entry is
//! `rdx-xcall-control`'s (a control plane links those two, never this crate).
//!
//! What it owns:
//! - [`service`]: joining the plan as a sandbox: the host's region is created at its slot's
//!   address, exports are declared as hooks whose context is the argument buffer, and the
//!   callee-side helper `xcall_reply` is registered.
//! - [`attach`]: mapping another sandbox's region at its planned address in this process
//!   (`MAP_FIXED_NOREPLACE`; a clash is an error, never a silent remap), with a private copy
//!   of the region's helper table that holds *this* process's callee helpers — code compiled
//!   to reach helpers through the table then runs unchanged in every process that maps it.
//! - [`call`]: the `call` helper itself ([`call::xcall_call`]), the epoch it holds on the callee
//!   while the callee runs, and a Rust entry point ([`call::call`]) over the same path.
//!
//! What it must not do: parse, verify, compile or deploy extension code (that is the control
//! plane's, `rdx-xcall-control`), or write into another sandbox's code arena (only a control
//! plane does).
//!
//! The contract between caller and callee, in one place:
//! - the caller's class holds a function capability per (service, entry): a host function id
//!   bound to [`call::xcall_call`] whose first argument is constrained to that entry's
//!   `Target` value, the arguments typed as readable memory of at most the entry's
//!   declared size and the output as writable memory (`rdx_xcall_plan::eim::call_function`);
//! - the callee's context *is* the caller's argument buffer, read-only, of the declared size;
//!   results go only into the caller's output buffer, through `xcall_reply`;
//! - the caller's instruction budget covers the call: the callee runs with its own class's
//!   budget or the caller's remaining budget, whichever is smaller, and the caller is charged
//!   what the callee spent (see [`call`], "Budget"); running out, or failing, returns a
//!   negative errno to the caller's extension ([`errno`]) and both sandboxes keep serving.
//!
//! ```no_run
//! use rdx_xcall::service::Service;
//! use rdx_xcall_plan::{plan::{Plan, PlanSpec}, Target};
//! let plan = Plan::create("/dev/shm/rdx-plan-demo", PlanSpec::default())?;
//! let store = Service::builder(&plan, "storage").slot(1).export("lookup", 8).build()?;
//! // ...a control plane deploys `lookup` with rdx_xcall_control::deploy_export...
//! let svc = rdx_xcall::attach::attach(&plan, 1)?; // in the caller process
//! let mut out = [0u8; 8];
//! let r0 = rdx_xcall::call::call(Target::new(1, 0), &7u64.to_le_bytes(), &mut out)?;
//! # let _ = (store, svc, r0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod attach;
pub mod call;
mod callee;
pub mod service;

use std::path::PathBuf;

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
    /// `xcall_reply` on a thread that is not running a cross-sandbox call.
    pub const NO_CALL: u64 = neg(libc::EPERM);
    /// A helper the callee's code called is not available to cross-sandbox callees.
    pub const NO_HELPER: u64 = neg(libc::ENOSYS);
}

/// Why a service or attach operation failed.
#[derive(Debug, thiserror::Error)]
pub enum XcallError {
    /// A file operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// The operation (`open`, `mmap`, ...).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    #[error(
        "slot {slot}: address range {addr:#x}..+{len:#x} is already in use in this process: {source}"
    )]
    /// The slot's address range is already mapped in this process.
    AddressClash {
        /// The slot.
        slot: u16,
        /// First address of the range.
        addr: u64,
        /// Bytes of the range.
        len: u64,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    #[error(
        "slot {slot}: region of {size:#x} bytes does not fit the plan's {slot_size:#x}-byte slots"
    )]
    /// The sandbox's region does not fit its slot.
    RegionTooLarge {
        /// The slot.
        slot: u16,
        /// The region's size in bytes.
        size: u64,
        /// Bytes per slot in the plan.
        slot_size: u64,
    },
    #[error(
        "slot {slot}: region is mapped at {found:#x} in its host, the plan says {expected:#x}"
    )]
    /// The region is mapped at another address in its host than the plan gives its slot.
    WrongBase {
        /// The slot.
        slot: u16,
        /// The address in the region's header.
        found: u64,
        /// The address the plan gives.
        expected: u64,
    },
    /// The region of a slot is not one this build can trust.
    #[error("region of slot {slot}: {source}")]
    Layout {
        /// The slot.
        slot: u16,
        /// What the header check found.
        #[source]
        source: rdx_region::geometry::LayoutError,
    },
    /// An export that cannot be listed (name, hook, argument size).
    #[error("export {name:?}: {reason}")]
    BadExport {
        /// The export's name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The plan refused the operation, or a file it lists is not trusted.
    #[error(transparent)]
    Plan(#[from] rdx_xcall_plan::PlanError),
    /// The sandbox's runtime failed.
    #[error(transparent)]
    Runtime(#[from] rdx_runtime::RuntimeError),
}
