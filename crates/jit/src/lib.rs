//! `rdx-jit`: compiles verified eBPF to native code with Cranelift, for a target architecture
//! chosen by the caller (x86-64 or aarch64, from either host), as a relocatable
//! [`Artifact`] that names every process-specific address symbolically; links artifacts
//! against a target context; and maps linked code W^X in this process for tests and tools.
//!
//! Besides generic code it compiles *elite* artifacts ([`Speculation`]: cold branches become
//! guards whose exits hand the exact eBPF state to the interpreter, `docs/deopt.md`) and
//! instrumented scouting builds ([`BranchCounters`]).
//!
//! It owns the eBPF → native translation, the artifact format (`docs/artifact.md`) and the
//! linker. It must not verify programs (the verifier decides what may run and whether a run
//! needs an instruction budget), and nothing in the data-plane runtime may depend on it: the
//! runtime only executes code this crate produced elsewhere.
//!
//! ```no_run
//! use rdx_jit::{CompileOptions, Compiler, link::{link, LinkTarget}};
//! use rdx_region::layout::Arch;
//! # let insns: Vec<rdx_bpf::isa::Insn> = vec![];
//! let compiler = Compiler::new(Arch::Aarch64)?;
//! let (artifact, _stats) = compiler.compile(&insns, &CompileOptions::new(Arch::Aarch64))?;
//! let bytes = artifact.to_bytes(); // cache, ship, ...
//! let resolver = |_: &rdx_jit::Symbol| Some(0x1000u64);
//! let linked = rdx_jit::link::link_bytes(&bytes, LinkTarget::new(Arch::Aarch64), &resolver, 0x7f00_0000_0000)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod artifact;
mod baseline;
mod compile;
pub mod exec;
pub mod link;
mod loops;
mod stack;
mod target;
mod translate;

pub use artifact::{Artifact, ArtifactError, Symbol};
pub use compile::{
    branch_sites, compile, BranchCounters, CompileError, CompileOptions, CompileStats, Compiler,
    EntryAbi, Expect, HelperCalls, InlineArray, Pipeline, Speculation,
};
pub use exec::{ExecError, ExecutableCode};
pub use link::{LinkError, LinkTarget, LinkedCode, SymbolResolver};
