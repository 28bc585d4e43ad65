//! Everything a control-plane operation can refuse, each naming what was wrong.

use rdx_bpf::interp::PrepareError;
use rdx_jit::{CompileError, LinkError};
use rdx_region::geometry::LayoutError;
use rdx_transport::xstate::MapError;
use rdx_transport::TransportError;
use rdx_verifier::{EimError, VerifyError};

/// Why a CodeFlow operation failed. Every variant leaves the node running the version it ran
/// before the operation started.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("transport: {0}")]
    Transport(#[from] TransportError),
    #[error("node region: {0}")]
    Layout(#[from] LayoutError),
    #[error("node address {address:?}: {reason}")]
    BadAddress { address: String, reason: String },
    #[error("node is not accepting control planes: region state {state} ({reason})")]
    NotReady { state: u32, reason: &'static str },
    #[error("host process {pid} is gone (region left behind at {what})")]
    HostDead { pid: u32, what: String },
    #[error("host restarted since this control plane attached (incarnation {attached} -> {now}); attach again")]
    HostRestarted { attached: u64, now: u64 },
    #[error(
        "node publishes no EIM spec, so no program can be verified for its hooks: the host \
         must store one in its region when it creates it (`Runtime::builder().eim_spec(..)`, \
         or `eim`/`eim_len` of `rdx_options` in C; see docs/runtime.md)"
    )]
    NoEimSpec,
    #[error("node's EIM spec is invalid: {0}")]
    BadEimSpec(#[source] EimError),
    /// The node's EIM spec section is not text.
    #[error("node's EIM spec is invalid: not UTF-8 at byte {valid_up_to}")]
    EimSpecNotUtf8 { valid_up_to: usize },
    #[error("context table: {0}")]
    BadContextTable(String),
    #[error("node has no hook named {hook:?} (hooks: {known})")]
    NoSuchHook { hook: String, known: String },
    #[error("hook {hook:?}: {reason}")]
    NoClass { hook: String, reason: String },
    /// The node's EIM spec does not give the hook and class verifier options.
    #[error("hook {hook:?}: {source}")]
    ClassOptions {
        hook: String,
        #[source]
        source: EimError,
    },
    #[error("node is leased by another control plane (holder {holder:#07x}, pid {pid}) for {remaining_ms} ms more")]
    LeaseHeld {
        holder: u32,
        pid: u32,
        remaining_ms: u64,
    },
    #[error(
        "this control plane lost its lease on the node (now {word:#018x}); nothing was published"
    )]
    LeaseLost { word: u64 },
    /// The verifier rejected the program; `source` names the rule it broke and where.
    #[error("verification failed for hook {hook:?} class {class:?}: {source}")]
    Verify {
        hook: String,
        class: String,
        #[source]
        source: Box<VerifyError>,
    },
    #[error("JIT compilation failed: {0}")]
    Compile(#[source] CompileError),
    /// The CodeFlow's tier is [`crate::Tier::Baseline`] and the build asked for is one the
    /// baseline tier does not produce (elite artifacts, scouting branch counters).
    #[error(
        "the baseline tier does not build {what}; use the optimizing tier (the default) for it"
    )]
    NotInBaseline { what: String },
    #[error("link failed: {0}")]
    Link(String),
    /// The linker refused the artifact (an unresolved symbol, a relocation out of range).
    #[error("link failed: {0}")]
    Linker(#[from] LinkError),
    /// An elite record's fallback image could not be lowered and linked.
    #[error("link failed: fallback image: {0}")]
    FallbackImage(#[source] PrepareError),
    #[error("{arena} arena full: {need} bytes requested, {free} free in the largest gap after reclaiming what no thread uses")]
    ArenaFull {
        arena: &'static str,
        need: u64,
        free: u64,
    },
    #[error("the control-plane allocator table is full ({capacity} records)")]
    AllocTableFull { capacity: u32 },
    #[error("allocator table in the region is corrupt: {0}")]
    AllocCorrupt(String),
    #[error("XState: {0}")]
    Map(#[from] MapError),
    #[error("map {name:?}: {reason}")]
    BadMap { name: String, reason: String },
    #[error("hook {hook:?} changed under us (expected {expected:#018x}, found {found:#018x}); nothing was published")]
    Conflict {
        hook: String,
        expected: u64,
        found: u64,
    },
    #[error("hook {hook:?} is held for a collective update (word {word:#018x})")]
    Held { hook: String, word: u64 },
    #[error("hook {hook:?} has no version {version} held in the code arena (held: {held})")]
    NoSuchVersion {
        hook: String,
        version: u32,
        held: String,
    },
    #[error("hook {hook:?} has nothing to roll back to")]
    NothingToRollBack { hook: String },
    #[error("registry: {0}")]
    Registry(String),
    /// The registry's database failed (`path`: the file, when opening it).
    #[error("registry: {}{source}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    RegistryDatabase {
        path: Option<std::path::PathBuf>,
        #[source]
        source: rusqlite::Error,
    },
    /// An artifact's bytes in the registry do not hash to the key they are stored under.
    #[error("registry artifact {stored}: content hash mismatch (its bytes hash to {actual}); the registry was corrupted or tampered with, refusing to use it (remove the state directory's registry.sqlite or the row to recompile)")]
    ArtifactHashMismatch { stored: String, actual: String },
    /// A cached artifact with intact bytes that was not built for what is being deployed.
    #[error("registry artifact {hash} was built for {what}, not for the program, hook and class being deployed; the registry was tampered with, refusing to use it")]
    ArtifactBinding { hash: String, what: &'static str },
    /// A [`crate::Validated`] or [`crate::Compiled`] offered for something its verdict was
    /// not given for: nothing runs natively that the verifier did not accept for that
    /// hook's class.
    #[error("a program verified for hook {hook:?} class {class:?} is refused for {mismatch}: verify it for that")]
    NotVerifiedFor {
        hook: String,
        class: String,
        mismatch: Unverified,
    },
    /// What `done` says took effect on the node, but the history could not record it.
    #[error("{done}, but the registry could not record it in the history: {source}")]
    NotRecorded {
        done: String,
        #[source]
        source: Box<ControlError>,
    },
    #[error("{0}")]
    Invalid(String),
}

/// What differs between a verdict and the use [`ControlError::NotVerifiedFor`] refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unverified {
    /// Another hook than the one it was verified for.
    #[error("hook {0:?}")]
    Hook(String),
    /// Another program (other bytecode, maps or read-only data).
    #[error("another program")]
    Program,
    /// A node whose EIM spec is not the one the class was read from.
    #[error("a node with another EIM spec")]
    Spec,
    /// A node of another architecture than the code was compiled for.
    #[error("a node of another architecture")]
    Arch,
}

pub type Result<T, E = ControlError> = std::result::Result<T, E>;
