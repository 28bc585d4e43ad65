//! The program a CodeFlow handles: an [`Extension`] picked from an object file, immutable,
//! with the hashes a verdict and the compile cache are keyed by.

use crate::error::{ControlError, Result};
use rdx_bpf::isa::{encode, raw_to_bytes, Insn};
use rdx_bpf::program::{MapDef, Object};
use sha2::{Digest, Sha256};

/// An extension program as the control plane handles it: decoded instructions and the maps
/// they reference, from one program of an object file.
///
/// Immutable once built: its hashes are computed from its instructions and maps, and a
/// [`Validated`](super::Validated) or [`Compiled`](super::Compiled) is bound to them, so instructions cannot change between the
/// verifier's verdict and the code that runs.
#[derive(Clone, Debug)]
pub struct Extension {
    name: String,
    section: String,
    insns: Vec<Insn>,
    maps: Vec<MapDef>,
    /// SHA-256 of the bytecode and map declarations with every initial value: the compile
    /// cache key's first part.
    hash: [u8; 32],
    /// SHA-256 of what the verifier and the compiler read (see [`Extension::code_hash`]).
    code_hash: [u8; 32],
    /// Where the program came from (an object file's path), for the history; not hashed.
    origin: String,
}

impl Extension {
    /// Picks program `name` (or the only program) of a loaded object.
    pub fn from_object(object: &Object, name: Option<&str>) -> Result<Extension> {
        let names = || {
            object
                .programs
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let prog = match name {
            Some(n) => object
                .programs
                .iter()
                .find(|p| p.name == n)
                .ok_or_else(|| {
                    ControlError::Invalid(format!(
                        "no program {n:?} in the object (programs: {})",
                        names()
                    ))
                })?,
            None => match object.programs.as_slice() {
                [one] => one,
                [] => return Err(ControlError::Invalid("the object has no program".into())),
                _ => {
                    return Err(ControlError::Invalid(format!(
                        "the object has several programs; choose one with --prog ({})",
                        names()
                    )))
                }
            },
        };
        Ok(Extension::new(
            &prog.name,
            &prog.section,
            prog.insns.clone(),
            object.maps.clone(),
        ))
    }

    /// An extension of program `name` (in ELF section `section`) with its instructions and
    /// the maps they reference by index.
    pub fn new(name: &str, section: &str, insns: Vec<Insn>, maps: Vec<MapDef>) -> Extension {
        let mut all = Sha256::new();
        let mut code = Sha256::new();
        let bytecode = raw_to_bytes(&encode(&insns));
        all.update(&bytecode);
        code.update(&bytecode);
        for m in &maps {
            let declaration = format!(
                "{}|{:?}|{}|{}|{}|{}|{:?}|{}",
                m.name,
                m.map_type,
                m.key_size,
                m.value_size,
                m.max_entries,
                m.flags,
                m.origin,
                m.read_only
            );
            all.update(&declaration);
            code.update(&declaration);
            if let Some(v) = &m.initial_value {
                all.update(v);
                if m.read_only {
                    code.update(v);
                }
            }
        }
        Extension {
            name: name.into(),
            section: section.into(),
            insns,
            maps,
            hash: all.finalize().into(),
            code_hash: code.finalize().into(),
            origin: String::new(),
        }
    }

    /// The same extension, recorded in the history as coming from `origin` (an object
    /// file's path).
    pub fn with_origin(mut self, origin: impl Into<String>) -> Extension {
        self.origin = origin.into();
        self
    }

    /// The program's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ELF section the program came from.
    pub fn section(&self) -> &str {
        &self.section
    }

    /// The decoded instructions (slot-indexed).
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// The maps the instructions reference by index, with their initial contents.
    pub fn maps(&self) -> &[MapDef] {
        &self.maps
    }

    /// Where the program came from (an object file's path; empty if not given).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// SHA-256 of the bytecode and the map declarations with all their initial contents
    /// (the compile cache key's first part, and what a saved profile belongs to).
    pub fn hash(&self) -> &[u8; 32] {
        &self.hash
    }

    /// [`Extension::hash`] in hex.
    pub fn hash_hex(&self) -> String {
        hex(&self.hash)
    }

    /// SHA-256 of what the verifier judges and the compiler translates: the bytecode, the
    /// map declarations and the initial contents of read-only maps. Writable maps' initial
    /// contents are left out: they are data the program may overwrite at any time, so the
    /// verdict cannot depend on them, and one verified and compiled program may be deployed
    /// with other initial data (an ACL policy's rules). A [`Validated`](super::Validated) and a [`Compiled`](super::Compiled)
    /// are bound to this hash.
    pub fn code_hash(&self) -> &[u8; 32] {
        &self.code_hash
    }
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
