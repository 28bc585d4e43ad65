//! `rdx-control`: the control plane — the CodeFlow API that takes an eBPF program from an
//! object file into a running node's region, and the registry that remembers artifacts,
//! nodes and deployment history.
//!
//! It owns attaching to a node (header, EIM spec and context table checks), the lease that
//! keeps control planes from corrupting one region ([`lease`]), the code-arena and
//! scratchpad allocator persisted in the region ([`alloc`]), linking against the node's
//! context, publication with one compare-and-swap, detach, rollback and epoch-based
//! reclamation ([`codeflow`], each slot step and epoch wait through
//! [`rdx_transport::slot`]), the JIT tier a deploy uses ([`tier`]), and the registry
//! ([`registry`]).
//!
//! Nothing runs natively that the verifier did not accept for that hook's class: a
//! [`Compiled`] is made only from a [`Validated`], carries the hook, class, program and EIM
//! spec it was verified for, and is refused for anything else. A deploy reports its stages
//! to a [`DeployObserver`]; with [`CodeFlow::record_history`], every publication, rollback
//! and detach through the CodeFlow — whoever drives it — is recorded in the registry.
//!
//! It must not run anything in the node: every effect on a node is a one-sided read, write,
//! compare-and-swap or fetch-and-add through [`rdx_transport::Transport`]. The host's CPU
//! never runs loader, verifier or compiler code (a test checks it with strace). It also never
//! holds a lock across nodes: one [`CodeFlow`] per node, independent of the others.
//!
//! ```no_run
//! use rdx_control::{create_codeflow, registry::Registry, Extension, AttachOptions};
//! let registry = Registry::open(&rdx_control::registry::default_state_dir())?;
//! let object = rdx_bpf::loader::load(&std::fs::read("count.o")?)?;
//! let ext = Extension::from_object(&object, None)?;
//! let mut cf = create_codeflow("shm:/dev/shm/rdx-kv-1234", AttachOptions::default())?;
//! let v = cf.deploy("on_get", &ext, None, Some(&registry))?;
//! println!("version {} live (generation {})", v.version, v.generation);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod alloc;
pub mod codeflow;
pub mod error;
pub mod lease;
pub mod node;
pub mod registry;
pub mod tier;

pub use codeflow::{
    create_codeflow, create_codeflow_read_only, AttachOptions, CodeFlow, Compiled, DeployObserver,
    DeployStage, DeployTimings, Extension, HeldVersion, Prepared, Published, Reclaimed, StageDone,
    Validated,
};
pub use error::{ControlError, Result, Unverified};
pub use tier::Tier;
