//! `fabric://` node addresses for every command: the glue between `rdx-control`'s scheme
//! registry and `rdx-fabric`'s transport. It lives here, not in `rdx-fabric`, so that the data
//! plane's side of the fabric never depends on the control plane.

use rdx_control::{ControlError, Result};
use rdx_fabric::{address, FabricAddress, FabricError};
use rdx_transport::{Transport, TransportError};

/// Makes `fabric://HOST:PORT?...` addresses work wherever the control plane connects to a
/// node (`create_codeflow`, hence every `rdx` command, broadcast and recovery).
pub fn register() {
    rdx_control::node::register_scheme(address::SCHEME, connect);
}

fn connect(address: &str) -> Result<Box<dyn Transport>> {
    let parsed = FabricAddress::parse(address).map_err(|e| match e {
        FabricError::BadAddress { address, reason } => ControlError::BadAddress { address, reason },
        other => ControlError::BadAddress {
            address: address::redact(address),
            reason: other.to_string(),
        },
    })?;
    let transport = parsed.connect().map_err(|e| {
        ControlError::Transport(TransportError::Io {
            what: "connecting over the fabric to",
            path: format!("fabric://{}", parsed.bootstrap),
            source: std::io::Error::other(e.to_string()),
        })
    })?;
    Ok(Box::new(transport))
}
