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

pub use helpers::{helper_ids, HELPERS};
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
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot map the region at {addr:#x} (+{len:#x}): {source}")]
    AddressClash {
        addr: u64,
        len: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("region layout: {0}")]
    Layout(#[from] rdx_region::geometry::LayoutError),
    #[error("refusing region file {path}: {source}")]
    UntrustedRegion {
        path: PathBuf,
        #[source]
        source: rdx_transport::region_file::UntrustedRegion,
    },
    #[error("configuration: {0}")]
    Config(String),
    #[error("hook {0:?} is already declared")]
    HookExists(String),
    #[error("no hook named {0:?}")]
    NoSuchHook(String),
    #[error("all {0} hook slots are declared")]
    TooManyHooks(u32),
    #[error("the context table is full ({0} entries)")]
    ContextFull(u32),
    #[error("name {0:?} is empty, contains NUL or is longer than 40 bytes")]
    BadName(String),
    #[error("{kind} {name:?} clashes with an existing export")]
    Duplicate { kind: &'static str, name: String },
    #[error("id {id} is in use or beyond the helper table ({capacity} entries)")]
    BadId { id: u32, capacity: u32 },
    #[error("the runtime was torn down")]
    TornDown,
    #[error(transparent)]
    Map(#[from] MapError),
    #[error(transparent)]
    Transport(#[from] rdx_transport::TransportError),
}
