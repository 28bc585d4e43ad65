//! `rdx-transport`: how a control plane touches a data plane's region, and the XState map
//! logic that both planes run over that interface.
//!
//! - [`Transport`]: read, write, compare-and-swap, fetch-and-add, fence and a remote barrier on
//!   region offsets, with batching ([`Op`], [`Transport::submit`]). Every remote operation
//!   of rdx goes through it, so the shared-memory and fabric implementations are
//!   interchangeable.
//! - [`shm::ShmTransport`]: the embedded default — maps a target's region file and checks
//!   its header before anything else.
//! - [`region_file`]: the owner, mode and link checks both planes run on a region file
//!   before trusting it.
//! - [`local::LocalRegion`]: the same operations on a region this process already mapped;
//!   the data-plane runtime uses it so that its helpers run the same map code a control
//!   plane runs remotely, except for the host-side fast paths (`xstate::hash::local`,
//!   `xstate::array::local`), which keep the same per-element protocol.
//! - [`slot`]: the writer side of the hook-slot and epoch protocol (publish, hold, release,
//!   wait for quiescence, recovery of an interrupted hold), with its ordering argument
//!   against the host's hook path. Every control plane changes a hook slot through it.
//! - [`xstate`]: map objects in the scratchpad (array, hash, per-thread array and hash,
//!   program array, ring buffer), one module per type behind one trait.
//!
//! This crate must not load, verify or compile extension code, and keeps no state of its own
//! outside the region: everything a second control plane needs is in the region.
//!
//! ```no_run
//! use rdx_transport::{shm::ShmTransport, Transport};
//! let t = ShmTransport::open("/dev/shm/rdx-1234")?;
//! let hook0 = t.info().hook_offset(0);
//! println!("hook 0 active word {:#x}", t.read_u64(hook0)?);
//! # Ok::<(), rdx_transport::TransportError>(())
//! ```

pub mod context;
pub mod local;
pub mod region_file;
pub mod shm;
pub mod slot;
pub mod xstate;

mod transport;
pub use transport::{Op, Transport, TransportError};
