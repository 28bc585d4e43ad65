//! What a control plane learns about a node by reading its region: header, EIM spec, context
//! table, hooks and their counters. Reads only; no lease needed.

use crate::error::{ControlError, Result};
use rdx_region::geometry::{check_header, HeaderInfo};
use rdx_region::layout::*;
use rdx_transport::context::{read_context, ContextError, ContextSymbol};
use rdx_transport::local::LocalRegion;
use rdx_transport::shm::{ShmOptions, ShmTransport};
use rdx_transport::Transport;
use std::mem::size_of;

/// `address` with the value of every `token` query parameter replaced by `<redacted>`: the
/// form of a node address that messages, listings, JSON and `Debug` output show. Addresses
/// of every scheme go through it, so a secret in one is never printed whatever transport
/// it belongs to.
pub fn redact_address(address: &str) -> String {
    let Some((head, query)) = address.split_once('?') else {
        return address.to_string();
    };
    let parts: Vec<String> = query
        .split('&')
        .map(|part| match part.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("token") => format!("{key}=<redacted>"),
            _ => part.to_string(),
        })
        .collect();
    format!("{head}?{}", parts.join("&"))
}

/// Opens a transport for an address of a registered scheme (`fabric:...`).
pub type Connector = fn(&str) -> Result<Box<dyn Transport>>;

static SCHEMES: std::sync::RwLock<Vec<(&'static str, Connector)>> =
    std::sync::RwLock::new(Vec::new());

/// Lets another transport (the fabric) serve addresses `<scheme>:...` in [`connect`], so
/// every CodeFlow operation and CLI command works over it unchanged.
pub fn register_scheme(scheme: &'static str, connector: Connector) {
    let mut s = SCHEMES.write().unwrap_or_else(|e| e.into_inner());
    s.retain(|(n, _)| *n != scheme);
    s.push((scheme, connector));
}

/// Opens a transport to a node address. `shm:<path>` (or a bare path) maps a region file on
/// this machine; schemes added with [`register_scheme`] go to their transport.
pub fn connect(address: &str) -> Result<Box<dyn Transport>> {
    Ok(connect_mapped(address, Access::ReadWrite)?.0)
}

/// [`connect`] for commands that only look: a shared-memory region is mapped read-only, so
/// nothing such a command does can change the node. Transports of registered schemes (the
/// fabric) have no read-only mode and connect as [`connect`] does.
pub fn connect_read_only(address: &str) -> Result<Box<dyn Transport>> {
    Ok(connect_mapped(address, Access::ReadOnly)?.0)
}

/// Whether a connection may change the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// May publish, roll back, detach and create maps (takes the lease).
    ReadWrite,
    /// Reads only; the region is mapped read-only where the transport allows.
    ReadOnly,
}

/// [`connect`], also returning the region's mapping in this process when the address is a
/// shared-memory one opened read+write, so the control plane can link code straight into
/// the code arena.
pub(crate) fn connect_mapped(
    address: &str,
    access: Access,
) -> Result<(Box<dyn Transport>, Option<LocalRegion>)> {
    if let Some((scheme, _)) = address.split_once(':') {
        let found = SCHEMES
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(n, _)| *n == scheme)
            .map(|(_, c)| *c);
        if let Some(connector) = found {
            return Ok((connector(address)?, None));
        }
    }
    let path = match address.split_once(':') {
        Some(("shm", path)) => path,
        Some((scheme, _)) if !address.starts_with('/') => {
            return Err(ControlError::BadAddress {
                address: redact_address(address),
                reason: format!("unknown transport scheme {scheme:?} (supported: shm)"),
            })
        }
        _ => address,
    };
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    if path.is_empty() {
        return Err(ControlError::BadAddress {
            address: redact_address(address),
            reason: "empty path".into(),
        });
    }
    let mut options = ShmOptions::default();
    if access == Access::ReadOnly {
        options = options.read_only();
    }
    for uid in shm_trusted_owners(address, query)? {
        options = options.trust_owner(uid);
    }
    let shm = ShmTransport::open_with(path, &options)?;
    let local = shm.local();
    Ok((Box::new(shm), local))
}

/// The users a `shm:PATH?owner=UID[&owner=UID...]` address trusts besides this process's
/// own user and root: the operator's explicit decision, recorded with the node, that a
/// region owned by that user (a host running as a service user) is the node's.
fn shm_trusted_owners(address: &str, query: &str) -> Result<Vec<u32>> {
    let bad = |reason: String| ControlError::BadAddress {
        address: redact_address(address),
        reason,
    };
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|part| match part.split_once('=') {
            Some(("owner", uid)) => uid
                .parse::<u32>()
                .map_err(|_| bad(format!("owner {uid:?} is not a numeric user id"))),
            _ => Err(bad(format!(
                "unknown parameter {part:?} (shm addresses take owner=UID)"
            ))),
        })
        .collect()
}

/// A hook as declared in the context table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookInfo {
    /// The hook's name.
    pub name: String,
    /// Its slot index.
    pub index: u32,
    /// Region offset of its slot.
    pub slot_offset: u64,
    /// Size of its context structure in bytes.
    pub ctx_size: u64,
}

/// A hook slot's state and counters, read remotely.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HookStatus {
    /// The slot's active word (version, entry, hold bit).
    pub active_word: u64,
    /// The published version (0 = nothing attached).
    pub version: u32,
    /// Whether a collective update holds the slot.
    pub held: bool,
    /// Instruction budget per run.
    pub budget: u64,
    /// Runs of extension code (summed over threads).
    pub runs: u64,
    /// Runs that stopped abnormally (budget exhausted).
    pub failures: u64,
    /// Times the host refused an invalid active word.
    pub errors: u64,
    /// Callers that gave up waiting on a held slot.
    pub hold_timeouts: u64,
    /// Runs of elite code that left at a failed guard (summed over threads).
    pub deopts: u64,
    /// Average run time in ns, from the sampled runs; `None` before any was sampled.
    pub avg_ns: Option<u64>,
}

/// What attaching to a node established.
#[derive(Debug, Clone)]
pub struct NodeView {
    /// The region header, checked.
    pub info: HeaderInfo,
    /// The host's incarnation when attached: a change means it restarted.
    pub incarnation: u64,
    /// The EIM spec the host publishes, if any.
    pub eim_text: Option<String>,
    /// The host's exports (the context table).
    pub symbols: Vec<ContextSymbol>,
}

/// Reads and checks the header of the region behind `t` for `arch`.
pub fn read_header(t: &dyn Transport, arch: Arch) -> Result<HeaderInfo> {
    let mut head = vec![0u8; size_of::<RegionHeader>()];
    t.read(0, &mut head)?;
    Ok(check_header(&head, t.region_len(), arch)?)
}

/// Checks the host still serves this region: registered, and (on this machine) alive.
pub fn check_alive(t: &dyn Transport, info: &HeaderInfo) -> Result<()> {
    let state = t.read_u64(offsets::HEADER_STATE)? as u32;
    match RegionState::from_u32(state) {
        Some(RegionState::Registered) => {}
        Some(RegionState::TornDown) => {
            return Err(ControlError::NotReady {
                state,
                reason: "the host tore its runtime down",
            })
        }
        Some(RegionState::Initializing) | Some(RegionState::Ready) => {
            return Err(ControlError::NotReady {
                state,
                reason: "the host has not registered the region yet",
            })
        }
        None => {
            return Err(ControlError::NotReady {
                state,
                reason: "unknown state value",
            })
        }
    }
    if info.host_pid != 0 && !pid_alive(info.host_pid) {
        return Err(ControlError::HostDead {
            pid: info.host_pid,
            what: "the region file".into(),
        });
    }
    Ok(())
}

/// Whether `pid` runs on this machine. A fabric transport reaches other machines, where the
/// pid means nothing; there the region's state word is what tells (the fabric transport
/// fails its operations when the host is gone).
fn pid_alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

impl NodeView {
    /// Reads everything a control plane needs before it can check or link a program.
    pub fn read(t: &dyn Transport, arch: Arch) -> Result<NodeView> {
        let info = read_header(t, arch)?;
        check_alive(t, &info)?;
        let incarnation = t.read_u64(offsets::HEADER_INCARNATION)?;
        let eim_text = if info.eim_len == 0 {
            None
        } else {
            let mut b = vec![0u8; info.eim_len as usize];
            t.read(info.section(SectionId::Eim).offset, &mut b)?;
            Some(
                String::from_utf8(b).map_err(|e| ControlError::EimSpecNotUtf8 {
                    valid_up_to: e.utf8_error().valid_up_to(),
                })?,
            )
        };
        let symbols = read_context(t, &info).map_err(|e| match e {
            ContextError::Corrupt(what) => ControlError::BadContextTable(what),
            ContextError::Transport(e) => ControlError::Transport(e),
        })?;
        Ok(NodeView {
            info,
            incarnation,
            eim_text,
            symbols,
        })
    }

    /// Every hook the host declares.
    pub fn hooks(&self) -> Vec<HookInfo> {
        self.symbols
            .iter()
            .filter(|s| s.kind == ContextKind::Hook)
            .map(|s| HookInfo {
                name: s.name.clone(),
                index: s.id,
                slot_offset: self.info.hook_offset(s.id),
                ctx_size: s.size,
            })
            .collect()
    }

    /// The hook called `name`, or [`crate::ControlError::NoSuchHook`].
    pub fn hook(&self, name: &str) -> Result<HookInfo> {
        let hooks = self.hooks();
        hooks
            .iter()
            .find(|h| h.name == name)
            .cloned()
            .ok_or_else(|| ControlError::NoSuchHook {
                hook: name.into(),
                known: if hooks.is_empty() {
                    "none declared".into()
                } else {
                    hooks
                        .iter()
                        .map(|h| h.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            })
    }

    /// The hook in slot `index`.
    pub fn hook_by_index(&self, index: u32) -> Option<HookInfo> {
        self.hooks().into_iter().find(|h| h.index == index)
    }
}

/// Reads a hook's slot and sums its per-thread counters.
pub fn hook_status(t: &dyn Transport, info: &HeaderInfo, index: u32) -> Result<HookStatus> {
    let slot = info.hook_offset(index);
    let mut b = [0u8; size_of::<HookSlot>()];
    t.read(slot, &mut b)?;
    let w = |o: u64| u64::from_le_bytes(b[o as usize..o as usize + 8].try_into().expect("8"));
    let active = t.read_u64(slot + offsets::HOOK_ACTIVE)?;
    let mut s = HookStatus {
        active_word: active,
        version: active_version(active),
        held: active & ACTIVE_HOLD != 0,
        budget: w(offsets::HOOK_BUDGET),
        failures: w(offsets::HOOK_FAILURES),
        errors: w(offsets::HOOK_ERRORS),
        hold_timeouts: w(offsets::HOOK_HOLD_TIMEOUTS),
        ..Default::default()
    };
    let stride = size_of::<HookCounters>() as u64;
    let (mut timed_runs, mut timed_ns) = (0u64, 0u64);
    let mut c = [0u8; 32];
    for thread in 0..info.thread_slots {
        t.read(
            info.counters_offset(thread, index),
            &mut c[..stride as usize],
        )?;
        let f = |o: u64| u64::from_le_bytes(c[o as usize..o as usize + 8].try_into().expect("8"));
        s.runs = s.runs.wrapping_add(f(offsets::COUNTER_RUNS));
        timed_runs = timed_runs.wrapping_add(f(offsets::COUNTER_TIMED_RUNS));
        timed_ns = timed_ns.wrapping_add(f(offsets::COUNTER_TIMED_NS));
        s.deopts = s.deopts.wrapping_add(f(offsets::COUNTER_DEOPTS));
    }
    s.avg_ns = (timed_runs > 0).then(|| timed_ns / timed_runs);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_every_token_parameter_and_keeps_the_rest() {
        assert_eq!(
            redact_address("fabric://h:1?timeout-ms=5&token=abcd&TOKEN=ef"),
            "fabric://h:1?timeout-ms=5&token=<redacted>&TOKEN=<redacted>"
        );
        assert_eq!(redact_address("shm:/dev/shm/x"), "shm:/dev/shm/x");
        assert_eq!(shm_trusted_owners("a", "owner=7&owner=9").unwrap(), [7, 9]);
        assert!(shm_trusted_owners("a", "owner=bob").is_err());
        assert!(shm_trusted_owners("a", "mode=1").is_err());
        assert_eq!(
            redact_address("fabric://h:1?token-file=/etc/t"),
            "fabric://h:1?token-file=/etc/t"
        );
    }
}
