//! Which libfabric provider to use.

use crate::sys::Endpoint;
use crate::FabricError;

/// Providers tried, in order, when neither a flag nor `FI_PROVIDER` chooses: verbs first
/// (one-sided in the NIC, present only with RDMA hardware), then `sockets` (its own
/// progress thread completes remote operations while the node is idle), then `tcp;ofi_rxm`
/// (needs target-side progress; see docs/fabric.md).
pub const PREFERENCE: &[&str] = &["verbs;ofi_rxm", "sockets", "tcp;ofi_rxm"];

/// A provider choice: a name (`sockets`, `tcp;ofi_rxm`, `verbs;ofi_rxm`, ...) or automatic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Provider {
    /// `FI_PROVIDER` if set in the environment (libfabric applies it), else [`PREFERENCE`].
    #[default]
    Auto,
    /// This provider by name (`sockets`, `tcp;ofi_rxm`, `verbs;ofi_rxm`, ...).
    Named(String),
}

impl Provider {
    /// From a command-line flag value; `auto` or nothing means [`Provider::Auto`].
    pub fn from_flag(flag: Option<&str>) -> Self {
        match flag {
            None | Some("") | Some("auto") => Self::Auto,
            Some(name) => Self::Named(name.to_string()),
        }
    }

    fn candidates(&self) -> Vec<Option<String>> {
        match self {
            Self::Named(n) => vec![Some(n.clone())],
            Self::Auto if std::env::var_os("FI_PROVIDER").is_some() => vec![None],
            Self::Auto => PREFERENCE.iter().map(|p| Some(p.to_string())).collect(),
        }
    }

    pub(crate) fn open(&self, node: Option<&str>, listen: bool) -> Result<Endpoint, FabricError> {
        let mut tried = Vec::new();
        for candidate in self.candidates() {
            match Endpoint::open(candidate.as_deref(), node, None, listen) {
                Ok(ep) => return Ok(ep),
                Err(m) => tried.push(format!(
                    "{}: {m}",
                    candidate.as_deref().unwrap_or("FI_PROVIDER's choice")
                )),
            }
        }
        Err(FabricError::NoProvider {
            node: node.unwrap_or("any address").to_string(),
            tried: tried.join("; "),
        })
    }
}
