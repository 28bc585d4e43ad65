//! `rdx-deopt`: speculative fast paths that continue where they gave up.
//!
//! A profile-specialised (*elite*) JIT artifact handles the common case; its cold branches
//! are guards. When a request leaves the fast path, restarting it in the generic tier would
//! run its side effects (map updates, ring-buffer events) twice. Instead the elite code stops
//! at the failed guard, before the guarded jump executes, with the exact eBPF state in an
//! [`rdx_region::abi::DeoptRunState`], and the run continues in the interpreter from that
//! very instruction:
//!
//! - [`profile`]: branch profiles (read from the counters of an instrumented build), their
//!   classification into likely / unlikely / unknown, and the [`rdx_jit::Speculation`] an
//!   elite compilation takes from them; the re-profiling decision.
//! - [`resume`]: synchronous mode — the same thread continues in the interpreter, on the same
//!   stack memory, and returns the final result.
//! - [`queue`]: queued mode — the state, with copies of the context and packet it points
//!   into (pointers rebased onto the copies), goes to a fallback queue; a worker resumes it
//!   and the hook answers "deferred" at once.
//! - [`tier`]: one elite entry point plus its fallback, the unit a host calls per request.
//!
//! This crate owns the deoptimisation protocol between the tiers. It must not compile (the
//! JIT does, from a [`rdx_jit::Speculation`] this crate plans), verify, or deploy anything:
//! deploying is the control plane's.
//!
//! ```no_run
//! use rdx_deopt::profile::{BranchProfile, Policy};
//! # let insns: Vec<rdx_bpf::isa::Insn> = vec![];
//! # let counters: Vec<u8> = vec![];
//! let profile = BranchProfile::from_counters(&insns, &counters)?;
//! let build = rdx_jit::Build::Elite(profile.speculation(&Policy::default()));
//! let opts = rdx_jit::CompileOptions::new(rdx_jit::Arch::X86_64, build);
//! let (elite, stats) = rdx_jit::Compiler::new(opts.arch)?.compile(&insns, &opts)?;
//! println!("{} guards, {} slots dropped", stats.guards, stats.dropped_insns);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod host;
pub mod profile;
pub mod queue;
pub mod resume;
pub mod tier;

pub use profile::{Bias, BranchProfile, Policy, ProfileError};
pub use queue::{ContextLayout, DeferredRun, FallbackQueue, PacketField};
pub use resume::{resume_checked, resume_unchecked};
pub use tier::{EliteTier, Outcome, TierError};
