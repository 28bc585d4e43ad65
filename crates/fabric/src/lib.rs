//! `rdx-fabric`: rdx's transport across hosts, over libfabric.
//!
//! - [`FabricTransport`] (control plane): implements [`rdx_transport::Transport`] with RMA
//!   reads and writes and 64-bit atomics (compare-and-swap, fetch-and-add) on an RDM
//!   endpoint; batches are posted together and completed with delivery-complete semantics,
//!   so a write that returned is in the node's memory before a later compare-and-swap.
//! - [`serve`] (data plane): registers a region file through a read+write alias mapping
//!   that extension code has no pointer to, and answers a token-checked bootstrap exchange
//!   with the endpoint address and key ([`auth`]).
//! - [`Provider`]: provider choice by flag, by libfabric's `FI_PROVIDER`, or by preference.
//! - [`FabricAddress`]: the `fabric://HOST:PORT?token-file=...` node addresses of the control
//!   plane's registry. The `rdx` binary registers them as a scheme of `rdx-control`'s
//!   connections; this crate does not depend on the control plane, so a host that serves
//!   its region over the fabric never links the verifier or the compiler.
//! - [`serve_from_env`]: the data plane's opt-in (`RDX_FABRIC_LISTEN`, ...) right after the
//!   runtime registered its region.
//!
//! This crate must not load, verify or compile extensions, and on the node it must not run
//! anything that reads region requests: the provider serves them. The only rdx threads on the
//! node are the bootstrap listener and, for providers that need it, a thread that only
//! drives libfabric's progress.

pub mod address;
pub mod auth;
mod client;
mod host;
mod provider;
mod serve;
mod sys;

pub use address::{connect_address, FabricAddress};
pub use auth::{read_token_file, Doorbell, Grant, Token};
pub use client::{ConnectOptions, FabricTransport};
pub use host::{serve_from_env, ENV_LISTEN, ENV_PROVIDER, ENV_TOKEN_FILE};
pub use provider::{Provider, PREFERENCE};
pub use serve::{serve, BootstrapStats, FabricServer, ProgressThread, ServeConfig};

/// Why connecting or serving failed.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// A system call or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// The operation that failed, with the peer or file it concerned.
        what: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// libfabric returned an error.
    #[error("{what}: {message}")]
    Fabric {
        /// The libfabric call that failed, with what it was for.
        what: String,
        /// libfabric's text for the error.
        message: String,
    },
    /// No provider with RDM endpoints, RMA and 64-bit atomics could serve the node.
    #[error("no libfabric provider with RDM endpoints, RMA and 64-bit atomics could serve {node} (tried {tried})")]
    NoProvider {
        /// The node, as a `fabric://` address.
        node: String,
        /// The providers tried, in preference order.
        tried: String,
    },
    /// The node's bootstrap listener refused the presented token.
    #[error("node {node} refused the token")]
    Refused {
        /// The node, as a `fabric://` address.
        node: String,
    },
    /// The node's bootstrap reply did not parse.
    #[error("node {node} sent a malformed bootstrap reply: {message}")]
    Protocol {
        /// The node, as a `fabric://` address.
        node: String,
        /// What was wrong with the reply.
        message: String,
    },
    /// The node's region (reached over the fabric) failed to attach or check.
    #[error("region of {node}: {source}")]
    Region {
        /// The node, as a `fabric://` address.
        node: String,
        /// What the transport found wrong with the region.
        #[source]
        source: rdx_transport::TransportError,
    },
    /// A token that is not an even-length hex string of the allowed size.
    #[error("bad token: {0}")]
    BadToken(String),
    /// A `fabric://` address that does not parse.
    #[error("node address {address:?}: {reason}")]
    BadAddress {
        /// The address as given, with any inline token redacted.
        address: String,
        /// Which part is wrong and why.
        reason: String,
    },
    /// An `RDX_FABRIC_*` environment variable with a value that cannot be used.
    #[error("${var}: {reason}")]
    BadEnvironment {
        /// The variable's name.
        var: &'static str,
        /// Why its value cannot be used.
        reason: String,
    },
}
