//! Reading a host's exports (the context table) and hooks, as a control plane does before
//! linking: symbol name → address.

use crate::{Transport, TransportError};
use rdx_region::geometry::HeaderInfo;
use rdx_region::layout::{ContextEntry, ContextKind, CONTEXT_NAME_LEN};
use std::mem::size_of;

/// One published export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextSymbol {
    /// Helper, host function, host variable or hook.
    pub kind: ContextKind,
    /// Helper or host-function id, or hook slot index.
    pub id: u32,
    /// Host virtual address (helpers, functions, variables) or region offset (hooks).
    pub addr: u64,
    /// Variable or hook-context size in bytes; 0 for functions.
    pub size: u64,
    /// The exported name.
    pub name: String,
}

impl ContextSymbol {
    /// The linker symbol this export resolves: `helper:<id>` for helpers and host
    /// functions, `var:<name>` for variables, `hook:<name>` for hooks.
    pub fn symbol(&self) -> String {
        match self.kind {
            ContextKind::Helper | ContextKind::HostFunction => format!("helper:{}", self.id),
            ContextKind::HostVariable => format!("var:{}", self.name),
            ContextKind::Hook => format!("hook:{}", self.name),
        }
    }
}

/// Reads every published context entry. Entries with an unknown kind, a name that is not
/// UTF-8, a hook slot beyond the region's hooks, or a count beyond the capacity are refused
/// as corrupt.
pub fn read_context<T: Transport + ?Sized>(
    t: &T,
    info: &HeaderInfo,
) -> Result<Vec<ContextSymbol>, ContextError> {
    let table = info.section(rdx_region::layout::SectionId::Context).offset;
    let count = t.read_u64(table)?;
    if count > info.context_capacity as u64 {
        return Err(ContextError::Corrupt(format!(
            "count {count} above capacity {}",
            info.context_capacity
        )));
    }
    let mut raw = vec![0u8; count as usize * size_of::<ContextEntry>()];
    t.read(info.context_entry_offset(0), &mut raw)?;
    raw.chunks_exact(size_of::<ContextEntry>())
        .enumerate()
        .map(|(i, e)| {
            let kind_raw = u32::from_le_bytes(e[0..4].try_into().expect("4"));
            let kind = ContextKind::from_u32(kind_raw).ok_or_else(|| {
                ContextError::Corrupt(format!("entry {i}: unknown kind {kind_raw}"))
            })?;
            let name_raw = &e[24..24 + CONTEXT_NAME_LEN];
            let end = name_raw
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(CONTEXT_NAME_LEN);
            let name = std::str::from_utf8(&name_raw[..end])
                .map_err(|_| ContextError::Corrupt(format!("entry {i}: name is not UTF-8")))?;
            let id = u32::from_le_bytes(e[4..8].try_into().expect("4"));
            if kind == ContextKind::Hook && id >= info.max_hooks {
                return Err(ContextError::Corrupt(format!(
                    "entry {i}: hook {name:?} at slot {id} of {}",
                    info.max_hooks
                )));
            }
            Ok(ContextSymbol {
                kind,
                id,
                addr: u64::from_le_bytes(e[8..16].try_into().expect("8")),
                size: u64::from_le_bytes(e[16..24].try_into().expect("8")),
                name: name.to_string(),
            })
        })
        .collect()
}

/// Why a context table could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// An entry or the table's count is impossible; the text says which.
    #[error("context table is corrupt: {0}")]
    Corrupt(String),
    /// Reading the table failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
}
