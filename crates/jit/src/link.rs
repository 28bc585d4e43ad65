//! The linker: turns a relocatable [`Artifact`] into final code bytes for one process and one
//! load address, by resolving every symbol through a target context.
//!
//! Linking is pure: bytes in, bytes out, no system calls, so the control plane can link for a
//! remote process it only reaches through one-sided writes. Everything that can be wrong
//! with an artifact is refused here, before anything is mapped executable.

use std::collections::HashMap;

use crate::artifact::{Artifact, ArtifactError, RelocKind, Symbol, FORMAT_VERSION};
use rdx_region::layout::Arch;

/// A target context: the addresses of the symbols an artifact may refer to, as one process
/// exports them (helpers, host functions and variables, maps, tables).
pub trait SymbolResolver {
    /// The address of `symbol` in the target process, or `None` if it does not export it.
    fn resolve(&self, symbol: &Symbol) -> Option<u64>;
}

impl SymbolResolver for HashMap<Symbol, u64> {
    fn resolve(&self, symbol: &Symbol) -> Option<u64> {
        self.get(symbol).copied()
    }
}

/// Symbols keyed by their textual names (`helper:1`, `map:0`, ...).
impl SymbolResolver for HashMap<String, u64> {
    fn resolve(&self, symbol: &Symbol) -> Option<u64> {
        self.get(&symbol.to_string()).copied()
    }
}

impl<F: Fn(&Symbol) -> Option<u64>> SymbolResolver for F {
    fn resolve(&self, symbol: &Symbol) -> Option<u64> {
        self(symbol)
    }
}

/// Why an artifact could not be linked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The artifact itself is invalid.
    #[error("invalid artifact: {0}")]
    Artifact(#[from] ArtifactError),
    /// The artifact was compiled for another architecture.
    #[error("artifact is for {found}, the target is {expected}")]
    WrongArch {
        /// The target's architecture.
        expected: Arch,
        /// The artifact's.
        found: Arch,
    },
    /// The artifact's format version is not the target's.
    #[error("artifact format version {found} does not match the target's {expected}")]
    VersionMismatch {
        /// The target's version.
        expected: u32,
        /// The artifact's.
        found: u32,
    },
    /// Symbols the target does not export.
    #[error("unresolved symbols: {}", .0.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "))]
    Unresolved(Vec<Symbol>),
    /// The load address is not 16-byte aligned: the address.
    #[error("load address {0:#x} is not 16-byte aligned")]
    MisalignedLoadAddress(u64),
    /// The output buffer is smaller than the code.
    #[error("output buffer is {have} bytes, the code needs {need}")]
    BufferTooSmall {
        /// Bytes in the buffer.
        have: usize,
        /// Bytes of code.
        need: usize,
    },
}

/// What a link produces: final bytes for one load address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkedCode {
    /// The architecture the code is for.
    pub arch: Arch,
    /// The address the code was linked to run at.
    pub load_address: u64,
    /// The linked bytes.
    pub code: Vec<u8>,
    /// Offset of the entry point in `code`.
    pub entry_offset: u32,
    /// The artifact's header flags (`FLAG_*`).
    pub flags: u32,
}

impl LinkedCode {
    /// The entry point's address.
    pub fn entry_address(&self) -> u64 {
        self.load_address + self.entry_offset as u64
    }
}

/// What the linker expects of an artifact: the target's architecture and the artifact format
/// it was built to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkTarget {
    /// Architecture the code will run on.
    pub arch: Arch,
    /// Artifact format version the target accepts.
    pub format_version: u32,
}

impl LinkTarget {
    /// A target of `arch` accepting this build's artifact format.
    pub fn new(arch: Arch) -> Self {
        Self {
            arch,
            format_version: FORMAT_VERSION,
        }
    }
}

/// Parses, validates and links a serialised artifact in one step.
pub fn link_bytes(
    bytes: &[u8],
    target: LinkTarget,
    resolver: &dyn SymbolResolver,
    load_address: u64,
) -> Result<LinkedCode, LinkError> {
    let header = Artifact::check_header(bytes)?;
    if header.version != target.format_version {
        return Err(LinkError::VersionMismatch {
            expected: target.format_version,
            found: header.version,
        });
    }
    if header.arch != target.arch {
        return Err(LinkError::WrongArch {
            expected: target.arch,
            found: header.arch,
        });
    }
    let artifact = Artifact::from_bytes(bytes)?;
    link(&artifact, target, resolver, load_address)
}

/// Links a parsed artifact for `load_address`.
pub fn link(
    artifact: &Artifact,
    target: LinkTarget,
    resolver: &dyn SymbolResolver,
    load_address: u64,
) -> Result<LinkedCode, LinkError> {
    let mut code = artifact.code.clone();
    link_into(artifact, target, resolver, load_address, &mut code)?;
    Ok(LinkedCode {
        arch: artifact.meta.arch,
        load_address,
        code,
        entry_offset: artifact.meta.entry_offset,
        flags: artifact.meta.flags,
    })
}

/// Links into a caller-provided buffer (for example a writable view of a code arena); `out`
/// must be at least as long as the code. On error `out` is left untouched.
pub fn link_into(
    artifact: &Artifact,
    target: LinkTarget,
    resolver: &dyn SymbolResolver,
    load_address: u64,
    out: &mut [u8],
) -> Result<(), LinkError> {
    if target.format_version != FORMAT_VERSION {
        return Err(LinkError::VersionMismatch {
            expected: target.format_version,
            found: FORMAT_VERSION,
        });
    }
    if artifact.meta.arch != target.arch {
        return Err(LinkError::WrongArch {
            expected: target.arch,
            found: artifact.meta.arch,
        });
    }
    if !load_address.is_multiple_of(16) {
        return Err(LinkError::MisalignedLoadAddress(load_address));
    }
    let need = artifact.code.len();
    if out.len() < need {
        return Err(LinkError::BufferTooSmall {
            have: out.len(),
            need,
        });
    }
    // Resolve everything first: refuse before writing a single byte.
    let mut addresses = Vec::with_capacity(artifact.symbols.len());
    let mut missing = Vec::new();
    for s in &artifact.symbols {
        match resolver.resolve(s) {
            Some(a) => addresses.push(a),
            None => {
                missing.push(s.clone());
                addresses.push(0);
            }
        }
    }
    if !missing.is_empty() {
        return Err(LinkError::Unresolved(missing));
    }
    for (index, r) in artifact.relocations.iter().enumerate() {
        // Parsed artifacts were bounds-checked; hand-built ones are checked here.
        if r.offset as usize + 8 > need {
            return Err(ArtifactError::RelocOutOfRange {
                index,
                offset: r.offset,
                code_len: need,
            }
            .into());
        }
        if r.kind == RelocKind::Abs64 && r.symbol as usize >= addresses.len() {
            return Err(ArtifactError::RelocBadSymbol {
                index,
                symbol: r.symbol,
                count: addresses.len(),
            }
            .into());
        }
    }
    out[..need].copy_from_slice(&artifact.code);
    for r in &artifact.relocations {
        let value = match r.kind {
            RelocKind::Abs64 => addresses[r.symbol as usize].wrapping_add(r.addend as u64),
            RelocKind::CodeAbs64 => load_address.wrapping_add(r.addend as u64),
        };
        let at = r.offset as usize;
        out[at..at + 8].copy_from_slice(&value.to_le_bytes());
    }
    Ok(())
}
