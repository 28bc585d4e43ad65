//! Errors of plans, broadcasts and recovery.

use rdx_control::ControlError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("plan {path}: {reason}")]
    PlanParse { path: PathBuf, reason: String },
    #[error("plan: {0}")]
    PlanInvalid(String),
    #[error("plan: dependency cycle between hooks: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    #[error("plan: update {update} names unknown node {node:?}")]
    UnknownNode { update: String, node: String },
    #[error("plan: {what} names unknown hook {hook:?}")]
    UnknownHook { what: String, hook: String },
    #[error("node {node}: has no hook {hook:?} (the plan updates it there)")]
    HookMissing { node: String, hook: String },
    #[error("node {node}: hook {hook}: program {program} rejected: {reason}")]
    Rejected {
        node: String,
        hook: String,
        program: String,
        reason: String,
    },
    #[error("object {path}: {reason}")]
    Object { path: PathBuf, reason: String },
    #[error("node {node}: {source}")]
    Node {
        node: String,
        #[source]
        source: ControlError,
    },
    #[error("node {node}: hook {hook} changed under the broadcast (expected {expected:#x}, found {found:#x})")]
    Conflict {
        node: String,
        hook: String,
        expected: u64,
        found: u64,
    },
    #[error("node {node}: transport: {source}")]
    Transport {
        node: String,
        #[source]
        source: rdx_transport::TransportError,
    },
    #[error("flow {flow}: requests did not drain: {reason}")]
    DrainTimeout { flow: String, reason: String },
    #[error("intent log {path}: {reason}")]
    Intent { path: PathBuf, reason: String },
    /// A node's update record names an update that is not settled: a new one would
    /// overwrite what its recovery needs.
    #[error(
        "node {node}: update {id} is unfinished there ({decision}); its hooks may still be \
         held: run `rdx recover --node ADDRESS` (any machine that reaches the nodes) to finish \
         or undo it"
    )]
    Unfinished {
        node: String,
        id: String,
        decision: &'static str,
    },
    /// The commit point's compare-and-swap found the update decided otherwise (a recovery
    /// aborted it): nothing was flipped.
    #[error("node {node}: the update was decided aborted by a recovery before it could commit (found {found})")]
    DecidedAbort { node: String, found: &'static str },
    /// A failure after the commit point: the update is decided committed and `rdx recover`
    /// rolls it forward.
    #[error("after the commit point (run `rdx recover` to finish the update): {0}")]
    AfterCommit(Box<FleetError>),
    #[error("broadcast aborted, nothing visible anywhere: {0}")]
    Aborted(Box<FleetError>),
}

pub type Result<T> = std::result::Result<T, FleetError>;

pub(crate) fn node_err(node: &str) -> impl FnOnce(ControlError) -> FleetError + '_ {
    move |source| FleetError::Node {
        node: node.to_string(),
        source,
    }
}

pub(crate) fn transport_err(
    node: &str,
) -> impl FnOnce(rdx_transport::TransportError) -> FleetError + '_ {
    move |source| FleetError::Transport {
        node: node.to_string(),
        source,
    }
}

/// A step on a hook slot that found another word: [`FleetError::Conflict`] on `node`'s
/// `hook`; a transport failure: [`FleetError::Transport`].
pub(crate) fn slot_err<'a>(
    node: &'a str,
    hook: &'a str,
) -> impl FnOnce(rdx_transport::slot::SlotError) -> FleetError + 'a {
    move |e| match e {
        rdx_transport::slot::SlotError::Changed { expected, found } => FleetError::Conflict {
            node: node.to_string(),
            hook: hook.to_string(),
            expected,
            found,
        },
        rdx_transport::slot::SlotError::Transport(source) => FleetError::Transport {
            node: node.to_string(),
            source,
        },
    }
}
