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
