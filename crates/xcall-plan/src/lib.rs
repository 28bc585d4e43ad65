//! `rdx-xcall-plan`: what both planes of cross-sandbox direct calls share. The host side
//! (`rdx-xcall`: service, attach, the `call` helper) and the control side (`rdx-xcall-control`:
//! deploying exported entries, and the `rdx xcall` commands) both read the same plan file and
//! speak of the same entries; this crate is that common ground.
//!
//! What it owns:
//! - [`plan`]: the address plan, a small shared file that gives every sandbox a fixed slot of
//!   virtual address space and lists each sandbox's exported entries (the allow-list).
//! - [`Target`]: the value naming one exported entry, which a caller passes to `call`.
//! - [`eim`]: the EIM text of the function capabilities a caller's class holds and of the
//!   callee's `xcall_reply`.
//! - the ids and limits both sides agree on ([`REPLY_ID`], [`MAX_SLOTS`], [`MAX_ARGS`]...),
//!   and which helpers a callee may call ([`callee_may_call`]), from the ABI's helper table.
//!
//! What it must not do: depend on the data-plane runtime or on anything that loads,
//! verifies, compiles or deploys extensions; it is linked by both planes.

pub mod eim;
pub mod plan;

use rdx_region::helpers::{Binders, HelperId};
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
    /// The sandbox's slot in the plan.
    pub slot: u16,
    /// The entry's index in the sandbox's export list.
    pub export: u16,
}

impl Target {
    /// The entry `export` of the sandbox in `slot`.
    pub const fn new(slot: u16, export: u16) -> Self {
        Self { slot, export }
    }

    /// The 64-bit value eBPF code passes (positive as an `i64`, so EIM constraints hold it).
    pub const fn encode(self) -> u64 {
        TARGET_MAGIC | (self.slot as u64) << 16 | self.export as u64
    }

    /// The target `raw` encodes, or `None` if it is not a target value.
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

/// Whether a cross-sandbox callee may call helper `id` (the deploy step refuses any other):
/// the entries of the ABI's helper table bound by [`Binders::CALLEE`], and `xcall_reply`.
/// The host side implements exactly these (a test of `rdx-xcall` checks it).
pub fn callee_may_call(id: HelperId) -> bool {
    id.get() == REPLY_ID
        || rdx_region::helpers::by_id(id).is_some_and(|h| h.bound_by(Binders::CALLEE))
}

/// The ids [`callee_may_call`] allows, in order.
pub fn callee_helper_ids() -> Vec<u32> {
    let mut ids: Vec<u32> = rdx_region::helpers::bound_by(Binders::CALLEE)
        .map(|h| h.id.get())
        .chain([REPLY_ID])
        .collect();
    ids.sort_unstable();
    ids
}

/// Opens a shared file of a plan (the plan itself or a region it lists) with `O_NOFOLLOW`
/// and checks, on the open descriptor, that it is a regular file of this user (or root)
/// that no one else can write: whoever controls either file controls code this process
/// maps executable.
pub fn open_shared_file(
    path: &std::path::Path,
    flags: libc::c_int,
) -> Result<std::os::fd::OwnedFd, PlanError> {
    use rdx_transport::region_file::{self, OpenRefusal, TrustedOwners};
    use std::os::fd::{AsFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    let cpath =
        std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| PlanError::BadPlan {
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
                OpenRefusal::Untrusted(source) => PlanError::Untrusted {
                    path: path.into(),
                    source,
                },
                OpenRefusal::Io(source) => PlanError::Io {
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
        .map_err(|source| PlanError::Io {
            what: "inspecting",
            path: path.into(),
            source,
        })?
        .map_err(|source| PlanError::Untrusted {
            path: path.into(),
            source,
        })?;
    Ok(fd)
}

/// Why a plan operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A system call on the plan or a file it lists failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done ("opening", "mapping"...).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The plan file is not a plan this crate can use.
    #[error("address plan {path}: {reason}")]
    BadPlan {
        /// The plan file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A plan or region file another user made or can write, or a link (`docs/security.md`).
    #[error("refusing {path}: {source}")]
    Untrusted {
        /// The refused file.
        path: PathBuf,
        /// Why it is not trusted.
        #[source]
        source: rdx_transport::region_file::UntrustedRegion,
    },
    /// A slot number beyond the plan's slots.
    #[error("slot {slot} is outside the plan's {slots} slots")]
    NoSuchSlot {
        /// The slot asked for.
        slot: u32,
        /// Slots in the plan.
        slots: u32,
    },
    /// The slot asked for is held by a live sandbox.
    #[error("slot {slot} is taken by {name:?} (pid {pid})")]
    SlotTaken {
        /// The slot asked for.
        slot: u16,
        /// The sandbox holding it.
        name: String,
        /// Its host's process id.
        pid: u64,
    },
    /// No slot is free.
    #[error("every slot of the plan is taken")]
    PlanFull,
    /// No live sandbox has that name.
    #[error("no sandbox named {0:?} in the plan")]
    NoSuchService(String),
    /// The slot holds no live sandbox.
    #[error("slot {0} holds no live sandbox")]
    EmptySlot(u16),
    /// An export the plan cannot list (or does not list).
    #[error("export {name:?}: {reason}")]
    BadExport {
        /// The export's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
}
