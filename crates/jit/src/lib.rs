//! `rdx-jit`: compiles verified eBPF to native code with Cranelift, for a target architecture
//! chosen by the caller (x86-64 or aarch64, from either host), as a relocatable
//! [`Artifact`] that names every process-specific address symbolically; links artifacts
//! against a target context; and maps linked code W^X in this process for tests and tools.
//!
//! Every compilation is one [`Build`]: generic code, an *elite* artifact ([`Speculation`]:
//! cold branches become guards whose exits hand the exact eBPF state to the interpreter,
//! `docs/deopt.md`) or an instrumented scouting build ([`BranchCounters`]).
//!
//! It owns the eBPF → native translation, the artifact format (`docs/artifact.md`) and the
//! linker. It must not verify programs (the verifier decides what may run and whether a run
//! needs an instruction budget), and nothing in the data-plane runtime may depend on it: the
//! runtime only executes code this crate produced elsewhere.
//!
//! ```no_run
//! use rdx_jit::{Arch, Build, CompileOptions, Compiler, link::{link, LinkTarget}};
//! # let insns: Vec<rdx_bpf::isa::Insn> = vec![];
//! let compiler = Compiler::new(Arch::Aarch64)?;
//! let (artifact, _stats) = compiler.compile(&insns, &CompileOptions::new(Arch::Aarch64, Build::Generic))?;
//! let bytes = artifact.to_bytes(); // cache, ship, ...
//! let resolver = |_: &rdx_jit::Symbol| Some(0x1000u64);
//! let linked = rdx_jit::link::link_bytes(&bytes, LinkTarget::new(Arch::Aarch64), &resolver, 0x7f00_0000_0000)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// The compiler's stages, each depending only on those before it:
// options <- plan <- (translate | baseline, with blinding) <- compile (the driver).
pub mod artifact;
mod baseline;
mod blinding;
mod compile;
mod error;
pub mod exec;
pub mod link;
mod options;
mod plan;
pub mod target;
mod translate;

pub use artifact::{Artifact, ArtifactError, Symbol};
pub use compile::{compile, CompileStats, Compiler};
pub use error::CompileError;
pub use exec::{ExecError, ExecutableCode};
pub use link::{LinkError, LinkTarget, LinkedCode, SymbolResolver};
pub use options::{
    branch_sites, BranchCounters, Build, CompileOptions, EntryAbi, Expect, HelperCalls,
    InlineArray, Pipeline, Speculation,
};
pub use target::Arch;
