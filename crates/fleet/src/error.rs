//! Errors of plans, broadcasts and recovery.

use rdx_control::ControlError;
use std::path::PathBuf;

/// Why a broadcast, migration, watch or recovery failed.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The plan file does not parse.
    #[error("plan {path}: {reason}")]
    PlanParse {
        /// The plan file.
        path: PathBuf,
        /// The parser's message.
        reason: String,
    },
    /// The plan parses but is inconsistent; the text says how.
    #[error("plan: {0}")]
    PlanInvalid(String),
    /// The hooks' `depends_on` form a cycle: the hooks on it.
    #[error("plan: dependency cycle between hooks: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    /// An update names a node the plan does not list.
    #[error("plan: update {update} names unknown node {node:?}")]
    UnknownNode {
        /// The update's label.
        update: String,
        /// The node named.
        node: String,
    },
    /// Something in the plan names a hook it does not list.
    #[error("plan: {what} names unknown hook {hook:?}")]
    UnknownHook {
        /// What names it.
        what: String,
        /// The hook named.
        hook: String,
    },
    /// A node lacks a hook the plan updates there.
    #[error("node {node}: has no hook {hook:?} (the plan updates it there)")]
    HookMissing {
        /// The node.
        node: String,
        /// The hook.
        hook: String,
    },
    /// A node's verifier, class or compiler refused a program.
    #[error("node {node}: hook {hook}: program {program} rejected: {reason}")]
    Rejected {
        /// The node.
        node: String,
        /// The hook.
        hook: String,
        /// The program.
        program: String,
        /// Why it was refused.
        reason: String,
    },
    /// An object file cannot be read or loaded.
    #[error("object {path}: {reason}")]
    Object {
        /// The object file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A control-plane operation on a node failed.
    #[error("node {node}: {source}")]
    Node {
        /// The node.
        node: String,
        /// What failed.
        #[source]
        source: ControlError,
    },
    /// A hook's active word changed between prepare and flip (another writer).
    #[error("node {node}: hook {hook} changed under the broadcast (expected {expected:#x}, found {found:#x})")]
    Conflict {
        /// The node.
        node: String,
        /// The hook.
        hook: String,
        /// The word the flip expected.
        expected: u64,
        /// The word found.
        found: u64,
    },
    /// Reaching a node's region failed.
    #[error("node {node}: transport: {source}")]
    Transport {
        /// The node.
        node: String,
        /// What failed.
        #[source]
        source: rdx_transport::TransportError,
    },
    /// A flow's in-flight requests did not leave it within the drain timeout.
    #[error("flow {flow}: requests did not drain: {reason}")]
    DrainTimeout {
        /// The flow (`entry -> exit`).
        flow: String,
        /// What was still in flight.
        reason: String,
    },
    /// The intent log cannot be written or read back.
    #[error("intent log {path}: {reason}")]
    Intent {
        /// The log file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A node's update record names an update that is not settled: a new one would
    /// overwrite what its recovery needs.
    #[error(
        "node {node}: update {id} is unfinished there ({decision}); its hooks may still be \
         held: run `rdx recover --node ADDRESS` (any machine that reaches the nodes) to finish \
         or undo it"
    )]
    Unfinished {
        /// The node.
        node: String,
        /// The unsettled update's id.
        id: String,
        /// The name of the decision the node's record holds for it.
        decision: &'static str,
    },
    /// The commit point's compare-and-swap found the update decided otherwise (a recovery
    /// aborted it): nothing was flipped.
    #[error("node {node}: the update was decided aborted by a recovery before it could commit (found {found})")]
    DecidedAbort {
        /// The node holding the decision.
        node: String,
        /// The decision found.
        found: &'static str,
    },
    /// A failure after the commit point: the update is decided committed and `rdx recover`
    /// rolls it forward.
    #[error("after the commit point (run `rdx recover` to finish the update): {0}")]
    AfterCommit(Box<FleetError>),
    /// The broadcast failed before its commit record and was undone everywhere: why it failed.
    #[error("broadcast aborted, nothing visible anywhere: {0}")]
    Aborted(Box<FleetError>),
}

/// Result of a fleet operation.
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
