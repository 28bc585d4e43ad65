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
    /// Reading or writing the node's region failed.
    #[error("transport: {0}")]
    Transport(#[from] TransportError),
    /// The node's region header is not one this build can trust.
    #[error("node region: {0}")]
    Layout(#[from] LayoutError),
    /// A node address that does not parse.
    #[error("node address {address:?}: {reason}")]
    BadAddress {
        /// The address, with any token redacted.
        address: String,
        /// Which part is wrong and why.
        reason: String,
    },
    /// The host has not registered its region, or tore it down.
    #[error("node is not accepting control planes: region state {state} ({reason})")]
    NotReady {
        /// The region header's state word.
        state: u32,
        /// What that state means here.
        reason: &'static str,
    },
    /// The host process of a region on this machine no longer exists.
    #[error("host process {pid} is gone (region left behind at {what})")]
    HostDead {
        /// The host's pid, from the region header.
        pid: u32,
        /// The region left behind.
        what: String,
    },
    /// The host restarted (a new `ctx_init` of the same region) since this control plane attached.
    #[error("host restarted since this control plane attached (incarnation {attached} -> {now}); attach again")]
    HostRestarted {
        /// The incarnation seen when attaching.
        attached: u64,
        /// The incarnation now.
        now: u64,
    },
    /// The node's region carries no EIM spec.
    #[error(
        "node publishes no EIM spec, so no program can be verified for its hooks: the host \
         must store one in its region when it creates it (`Runtime::builder().eim_spec(..)`, \
         or `eim`/`eim_len` of `rdx_options` in C; see docs/runtime.md)"
    )]
    NoEimSpec,
    /// The node's EIM spec does not parse or validate.
    #[error("node's EIM spec is invalid: {0}")]
    BadEimSpec(#[source] EimError),
    /// The node's EIM spec section is not text.
    #[error("node's EIM spec is invalid: not UTF-8 at byte {valid_up_to}")]
    EimSpecNotUtf8 {
        /// Bytes of valid UTF-8 before the first invalid byte.
        valid_up_to: usize,
    },
    /// The node's context table is inconsistent; what was found.
    #[error("context table: {0}")]
    BadContextTable(String),
    /// The node declares no hook of that name.
    #[error("node has no hook named {hook:?} (hooks: {known})")]
    NoSuchHook {
        /// The hook asked for.
        hook: String,
        /// The hooks the node declares.
        known: String,
    },
    /// No extension class fits the hook (none bound to it, or the one named is not).
    #[error("hook {hook:?}: {reason}")]
    NoClass {
        /// The hook.
        hook: String,
        /// Why no class applies.
        reason: String,
    },
    /// The node's EIM spec does not give the hook and class verifier options.
    #[error("hook {hook:?}: {source}")]
    ClassOptions {
        /// The hook.
        hook: String,
        /// Why no class options could be built for it.
        #[source]
        source: EimError,
    },
    /// Another control plane holds the node's lease and it has not expired.
    #[error("node is leased by another control plane (holder {holder:#07x}, pid {pid}) for {remaining_ms} ms more")]
    LeaseHeld {
        /// The holder's id in the lease word.
        holder: u32,
        /// The holder's pid, from its record (0 if unknown).
        pid: u32,
        /// Milliseconds until the lease expires.
        remaining_ms: u64,
    },
    #[error(
        "this control plane lost its lease on the node (now {word:#018x}); nothing was published"
    )]
    /// This control plane's lease was broken or taken over before it published.
    LeaseLost {
        /// The lease word found.
        word: u64,
    },
    /// The verifier rejected the program; `source` names the rule it broke and where.
    #[error("verification failed for hook {hook:?} class {class:?}: {source}")]
    Verify {
        /// The hook.
        hook: String,
        /// The class.
        class: String,
        /// The verifier's typed verdict (rule, instruction and state).
        #[source]
        source: Box<VerifyError>,
    },
    /// The JIT could not compile the verified program.
    #[error("JIT compilation failed: {0}")]
    Compile(#[source] CompileError),
    /// The CodeFlow's tier is [`crate::Tier::Baseline`] and the build asked for is one the
    /// baseline tier does not produce (elite artifacts, scouting branch counters).
    #[error(
        "the baseline tier does not build {what}; use the optimizing tier (the default) for it"
    )]
    NotInBaseline {
        /// The build asked for.
        what: String,
    },
    /// The artifact could not be linked against the node's exports; why.
    #[error("link failed: {0}")]
    Link(String),
    /// The linker refused the artifact (an unresolved symbol, a relocation out of range).
    #[error("link failed: {0}")]
    Linker(#[from] LinkError),
    /// An elite record's fallback image could not be lowered and linked.
    #[error("link failed: fallback image: {0}")]
    FallbackImage(#[source] PrepareError),
    /// An arena has no gap large enough, even after reclaiming unused versions.
    #[error("{arena} arena full: {need} bytes requested, {free} free in the largest gap after reclaiming what no thread uses")]
    ArenaFull {
        /// `code` or `scratch`.
        arena: &'static str,
        /// Bytes requested.
        need: u64,
        /// Bytes in the largest free gap.
        free: u64,
    },
    /// Reclamation waited for a host thread that stayed inside extension code: the versions
    /// it may still run cannot be freed yet (nothing was freed; a later reclamation finishes
    /// the job once the thread leaves).
    #[error("thread slot {thread_slot} stayed inside extension code for {waited_ms} ms, so the versions it may still run cannot be freed (a host thread stuck in an extension, or a stopped host process); retry once it leaves")]
    ReclaimBlocked {
        /// Index of the thread slot whose epoch did not move.
        thread_slot: u32,
        /// How long reclamation waited (the attach option `reclaim_timeout`).
        waited_ms: u64,
    },
    /// The region's allocator table has no free record.
    #[error("the control-plane allocator table is full ({capacity} records)")]
    AllocTableFull {
        /// Records the table holds.
        capacity: u32,
    },
    /// The region's allocator table holds something no control plane writes; what.
    #[error("allocator table in the region is corrupt: {0}")]
    AllocCorrupt(String),
    /// An XState map operation failed.
    #[error("XState: {0}")]
    Map(#[from] MapError),
    /// A map the program declares cannot be created or reused on the node.
    #[error("map {name:?}: {reason}")]
    BadMap {
        /// The map's name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The hook's active word changed between preparing and publishing (another writer).
    #[error("hook {hook:?} changed under us (expected {expected:#018x}, found {found:#018x}); nothing was published")]
    Conflict {
        /// The hook.
        hook: String,
        /// The word the publish expected.
        expected: u64,
        /// The word found.
        found: u64,
    },
    /// The hook is held by a collective update (fleet broadcast) and cannot be published alone.
    #[error("hook {hook:?} is held for a collective update (word {word:#018x})")]
    Held {
        /// The hook.
        hook: String,
        /// Its active word, hold bit set.
        word: u64,
    },
    /// The version asked for is not held in the node's code arena.
    #[error("hook {hook:?} has no version {version} held in the code arena (held: {held})")]
    NoSuchVersion {
        /// The hook.
        hook: String,
        /// The version asked for.
        version: u32,
        /// The versions held, for the message.
        held: String,
    },
    /// The hook has no earlier version held to return to.
    #[error("hook {hook:?} has nothing to roll back to")]
    NothingToRollBack {
        /// The hook.
        hook: String,
    },
    /// The local registry (SQLite) failed; its message.
    #[error("registry: {0}")]
    Registry(String),
    /// The registry's database failed (`path`: the file, when opening it).
    #[error("registry: {}{source}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    RegistryDatabase {
        /// The database file, when the failure concerns one.
        path: Option<std::path::PathBuf>,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// An artifact's bytes in the registry do not hash to the key they are stored under.
    #[error("registry artifact {stored}: content hash mismatch (its bytes hash to {actual}); the registry was corrupted or tampered with, refusing to use it (remove the state directory's registry.sqlite or the row to recompile)")]
    ArtifactHashMismatch {
        /// The hash the artifact is stored under.
        stored: String,
        /// The hash of its bytes.
        actual: String,
    },
    /// A cached artifact with intact bytes that was not built for what is being deployed.
    #[error("registry artifact {hash} was built for {what}, not for the program, hook and class being deployed; the registry was tampered with, refusing to use it")]
    ArtifactBinding {
        /// The artifact's hash.
        hash: String,
        /// What it was built for instead.
        what: &'static str,
    },
    /// A [`crate::Validated`] or [`crate::Compiled`] offered for something its verdict was
    /// not given for: nothing runs natively that the verifier did not accept for that
    /// hook's class.
    #[error("a program verified for hook {hook:?} class {class:?} is refused for {mismatch}: verify it for that")]
    NotVerifiedFor {
        /// The hook it was verified for.
        hook: String,
        /// The class it was verified under.
        class: String,
        /// What differs from what it is prepared for.
        mismatch: Unverified,
    },
    /// What `done` says took effect on the node, but the history could not record it.
    #[error("{done}, but the registry could not record it in the history: {source}")]
    NotRecorded {
        /// The action that was done on the node.
        done: String,
        /// Why recording it failed.
        #[source]
        source: Box<ControlError>,
    },
    /// An argument or request the operation cannot take; the text says which.
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

/// Result of a control-plane operation.
pub type Result<T, E = ControlError> = std::result::Result<T, E>;
