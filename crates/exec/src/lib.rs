//! `rdx-exec`: the eBPF execution core, with no loader, verifier or compiler in it.
//!
//! It owns the pre-lowered op form ([`op`]), the semantics of every operation and the
//! dispatch loop ([`machine`]), written once: the reference interpreter (`rdx-bpf`) runs its
//! checked and unchecked modes through [`machine::run`] with environments of its own, and
//! [`image::resume`] runs the same loop over a *fallback image* — a verified program that a
//! control plane lowered and linked for one region ahead of time — to continue a run an
//! elite (speculative) artifact deoptimised, in the host.
//!
//! [`transfer`] captures a deoptimised run that leaves its thread (state, context and packet
//! copied, pointers rebased) for a worker to continue: the host's queued mode and the
//! in-process elite tier of `rdx-deopt` both use it.
//!
//! What this crate must not do: parse ELF, decode eBPF bytecode, verify or lower programs.
//! A host links it (the data plane may execute; architecture invariant 1 forbids it only to
//! load, verify or compile), so everything it needs arrives already lowered.

pub mod image;
pub mod machine;
pub mod op;
pub mod transfer;

pub use image::{Image, ImageError};
pub use machine::{Env, Fault, ResumeFrame, MAX_FRAMES};
pub use op::{Code, Op, RegMasks};
