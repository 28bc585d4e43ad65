//! Everything a control-plane operation can refuse, each naming what was wrong.

use rdx_region::geometry::LayoutError;
use rdx_transport::xstate::MapError;
use rdx_transport::TransportError;

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
    BadEimSpec(String),
    #[error("context table: {0}")]
    BadContextTable(String),
    #[error("node has no hook named {hook:?} (hooks: {known})")]
    NoSuchHook { hook: String, known: String },
    #[error("hook {hook:?}: {reason}")]
    NoClass { hook: String, reason: String },
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
    #[error("verification failed for hook {hook:?} class {class:?}: {message}")]
    Verify {
        hook: String,
        class: String,
        message: String,
    },
    #[error("JIT compilation failed: {0}")]
    Compile(String),
    /// The CodeFlow's tier is [`crate::Tier::Baseline`] and the build asked for is one the
    /// baseline tier does not produce (elite artifacts, scouting branch counters).
    #[error(
        "the baseline tier does not build {what}; use the optimizing tier (the default) for it"
    )]
    NotInBaseline { what: String },
    #[error("link failed: {0}")]
    Link(String),
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
    /// An artifact's bytes in the registry do not hash to the key they are stored under.
    #[error("registry artifact {stored}: content hash mismatch (its bytes hash to {actual}); the registry was corrupted or tampered with, refusing to use it (remove the state directory's registry.sqlite or the row to recompile)")]
    ArtifactHashMismatch { stored: String, actual: String },
    /// A cached artifact with intact bytes that was not built for what is being deployed.
    #[error("registry artifact {hash} was built for {what}, not for the program, hook and class being deployed; the registry was tampered with, refusing to use it")]
    ArtifactBinding { hash: String, what: &'static str },
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = ControlError> = std::result::Result<T, E>;
