//! `rdx-runtime`: the data-plane library a host application links.
//!
//! It creates the host's region (`ctx_init`), publishes what extensions may use — helpers,
//! host functions, host variables, hooks — in the region's context table, exposes the region
//! to control planes (`ctx_register`), and runs whatever program a control plane published
//! in a hook's slot when the host calls that hook. Hooks cost one acquire load and a branch
//! when nothing is attached.
//!
//! Architecture invariant 1 holds here: this crate contains no code that loads, parses,
//! verifies or compiles extensions, and depends on nothing that does. Everything it executes
//! was verified, compiled, linked and written into the region by a control plane.
//!
//! ```no_run
//! use rdx_runtime::{HookSpec, Runtime};
//! #[repr(C)]
//! struct Request { len: u64, verdict: u64 }
//! let rt = Runtime::builder()
//!     .path("/dev/shm/rdx-example")
//!     .hook("on_request", HookSpec::for_context::<Request>().default_return(0))
//!     .build()?;
//! rt.register()?;
//! let hook = rt.hook("on_request")?;
//! let mut req = Request { len: 10, verdict: 0 };
//! let r0 = hook.run(&mut req);
//! # let _ = r0;
//! # Ok::<(), rdx_runtime::RuntimeError>(())
//! ```
//!
//! The C ABI (`include/rdx.h`) wraps the same API in its own crate, `rdx-runtime-c`.

pub mod deopt;
mod helpers;
mod hook;
mod inner;
mod mapping;
mod runtime;
mod thread;

pub use helpers::hook_helper;
/// Queued mode: deoptimised runs finished by a fallback worker thread (`docs/deopt.md`).
pub use hook::queued;
pub use hook::{Hook, HookSpec, HookStats};
pub use runtime::{Runtime, RuntimeBuilder};
pub use thread::current_run_state;

pub use rdx_region as region;
pub use rdx_transport::xstate::MapError;

use std::path::PathBuf;

/// Why a runtime operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A file operation on the region failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// The operation (`open`, `mmap`, ...).
        what: &'static str,
        /// The region file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The region cannot be mapped at the address its header records (something else is there).
    #[error("cannot map the region at {addr:#x} (+{len:#x}): {source}")]
    AddressClash {
        /// The address.
        addr: u64,
        /// Bytes to map.
        len: u64,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The region's layout cannot be planned or its header checked.
    #[error("region layout: {0}")]
    Layout(#[from] rdx_region::geometry::LayoutError),
    /// The region file at the path is refused before its bytes are used.
    #[error("refusing region file {path}: {source}")]
    UntrustedRegion {
        /// The file.
        path: PathBuf,
        /// Why it is refused.
        #[source]
        source: rdx_transport::region_file::UntrustedRegion,
    },
    /// A builder setting or EIM spec that cannot be used; the text says which.
    #[error("configuration: {0}")]
    Config(String),
    /// A hook of that name is already declared.
    #[error("hook {0:?} is already declared")]
    HookExists(String),
    /// No hook of that name is declared.
    #[error("no hook named {0:?}")]
    NoSuchHook(String),
    /// Every hook slot is declared: the number of slots.
    #[error("all {0} hook slots are declared")]
    TooManyHooks(u32),
    /// The context table has no free entry: its capacity.
    #[error("the context table is full ({0} entries)")]
    ContextFull(u32),
    /// A name the context table cannot hold.
    #[error("name {0:?} is empty, contains NUL or is longer than 40 bytes")]
    BadName(String),
    /// A name already exported under another kind.
    #[error("{kind} {name:?} clashes with an existing export")]
    Duplicate {
        /// The kind of the new export.
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// A helper or host-function id already used or past the helper table.
    #[error("id {id} is in use or beyond the helper table ({capacity} entries)")]
    BadId {
        /// The id.
        id: u32,
        /// Entries in the helper table.
        capacity: u32,
    },
    /// The runtime was torn down: hooks no longer run extension code.
    #[error("the runtime was torn down")]
    TornDown,
    /// An XState map operation failed.
    #[error(transparent)]
    Map(#[from] MapError),
    /// Reading or writing the region failed.
    #[error(transparent)]
    Transport(#[from] rdx_transport::TransportError),
}
