//! The relocatable artifact: native code that is not yet specific to any process, plus
//! everything a linker needs to make it so, in a versioned, self-checking binary format.
//!
//! The byte format is specified in `docs/artifact.md`; [`Artifact::to_bytes`] and
//! [`Artifact::from_bytes`] are its only writer and reader. The reader checks the header
//! (magic, format version, architecture, flags, length, SHA-256 of the body) before it looks
//! at a single byte of the body, and then bounds-checks every field, so a truncated, corrupted
//! or tampered artifact is refused with a typed error long before any code could be mapped
//! executable.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

use rdx_region::layout::Arch;

/// First eight bytes of every serialised artifact.
pub const MAGIC: [u8; 8] = *b"\x7fRDXJIT\0";
/// Version of the byte format described in `docs/artifact.md`. Bump it on any change of the
/// layout or of the meaning of a field; readers refuse every other version.
pub const FORMAT_VERSION: u32 = 2;
/// Size of the fixed header that precedes the body.
pub const HEADER_LEN: usize = 64;

/// Largest code size the format accepts (64 MiB): keeps every offset in a `u32` and bounds the
/// memory a hostile header can make a reader allocate.
pub const MAX_CODE_LEN: usize = 64 << 20;
/// Longest symbol name the format accepts.
pub const MAX_SYMBOL_LEN: usize = 255;

/// Header flag: the code meters executed instructions against [`rdx_region::abi::RunState`].
pub const FLAG_NEEDS_BUDGET: u32 = 1 << 0;
/// Header flag: the entry point takes a third argument that initialises `r2` (the
/// conformance-suite convention: `r1` = memory, `r2` = its length).
pub const FLAG_ENTRY_LENGTH_ARG: u32 = 1 << 1;
/// Header flag: helpers are called through the table named `var:rdx_helper_table`.
pub const FLAG_HELPER_TABLE: u32 = 1 << 2;
/// Header flag: an elite (speculative) artifact. Its run pointer designates an
/// [`rdx_region::abi::DeoptRunState`], not a bare `RunState`, and a run may end with
/// `RunStatus::Deopt`, which the caller must complete in the generic tier. A runtime that
/// does not resume deoptimised runs must refuse such an artifact.
pub const FLAG_DEOPT: u32 = 1 << 3;
const KNOWN_FLAGS: u32 = FLAG_NEEDS_BUDGET | FLAG_ENTRY_LENGTH_ARG | FLAG_HELPER_TABLE | FLAG_DEOPT;

/// Name of the helper table symbol in [`crate::HelperCalls::Table`] mode.
pub const HELPER_TABLE_SYMBOL: &str = "rdx_helper_table";

/// Something outside the code that the code refers to, resolved only by the linker.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Symbol {
    /// `helper:<id>`: a helper or host function by its numeric id.
    Helper(u32),
    /// `map:<index>`: the address of map object `index` of the program's object (what map
    /// helpers take in `r1`).
    Map(u32),
    /// `mapvalue:<index>`: the base address of the single value of global-data map `index`;
    /// the relocation addend is the offset into it.
    MapValue(u32),
    /// `var:<name>`: a host variable (or a runtime table such as the helper table).
    Var(String),
    /// `fn:<name>`: a host function by name.
    Fn(String),
}

impl fmt::Display for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Symbol::Helper(id) => write!(f, "helper:{id}"),
            Symbol::Map(i) => write!(f, "map:{i}"),
            Symbol::MapValue(i) => write!(f, "mapvalue:{i}"),
            Symbol::Var(n) => write!(f, "var:{n}"),
            Symbol::Fn(n) => write!(f, "fn:{n}"),
        }
    }
}

/// A symbol name that does not follow the `kind:value` grammar of [`Symbol`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed symbol name `{0}` (expected helper:<id>, map:<i>, mapvalue:<i>, var:<name> or fn:<name>)")]
pub struct BadSymbol(pub String);

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= MAX_SYMBOL_LEN
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-'))
}

impl FromStr for Symbol {
    type Err = BadSymbol;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || BadSymbol(s.to_string());
        let (kind, value) = s.split_once(':').ok_or_else(bad)?;
        let number = || -> Result<u32, BadSymbol> {
            // Canonical decimal only, so that every symbol has exactly one spelling.
            if value.is_empty() || (value.len() > 1 && value.starts_with('0')) {
                return Err(bad());
            }
            value.parse().map_err(|_| bad())
        };
        match kind {
            "helper" => Ok(Symbol::Helper(number()?)),
            "map" => Ok(Symbol::Map(number()?)),
            "mapvalue" => Ok(Symbol::MapValue(number()?)),
            "var" if valid_name(value) => Ok(Symbol::Var(value.to_string())),
            "fn" if valid_name(value) => Ok(Symbol::Fn(value.to_string())),
            _ => Err(bad()),
        }
    }
}

/// How a relocation patches the code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RelocKind {
    /// Write `address(symbol) + addend` as a little-endian 64-bit word at the offset.
    Abs64 = 1,
    /// Write `load_address + addend` as a little-endian 64-bit word (a pointer into the code
    /// itself; the relocation's symbol index is unused and must be zero).
    CodeAbs64 = 2,
}

impl RelocKind {
    fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(RelocKind::Abs64),
            2 => Some(RelocKind::CodeAbs64),
            _ => None,
        }
    }
}

/// One place in the code the linker must patch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relocation {
    /// Byte offset in the code.
    pub offset: u32,
    /// How to patch the word at `offset`.
    pub kind: RelocKind,
    /// Index into [`Artifact::symbols`] (for [`RelocKind::Abs64`]).
    pub symbol: u32,
    /// Added to the resolved address.
    pub addend: i64,
}

/// Facts about the code that a loader or runtime needs and that never change at link time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// The architecture the code is for.
    pub arch: Arch,
    /// Header flags (`FLAG_*`).
    pub flags: u32,
    /// Offset of the entry point in the code.
    pub entry_offset: u32,
    /// eBPF stack bytes the deepest chain of calls uses (512 per frame).
    pub stack_bytes: u32,
    /// Number of eBPF functions (entry plus subprograms) compiled.
    pub functions: u32,
    /// Number of eBPF instruction slots compiled.
    pub insn_count: u32,
    /// SHA-256 of the source bytecode (the encoded slots).
    pub source_hash: [u8; 32],
    /// SHA-256 of what else decided the code: compile options and the EIM class.
    pub options_hash: [u8; 32],
}

impl Metadata {
    /// Whether the code meters instructions ([`FLAG_NEEDS_BUDGET`]).
    pub fn needs_budget(&self) -> bool {
        self.flags & FLAG_NEEDS_BUDGET != 0
    }

    /// Whether the entry point takes a length argument ([`FLAG_ENTRY_LENGTH_ARG`]).
    pub fn entry_takes_length(&self) -> bool {
        self.flags & FLAG_ENTRY_LENGTH_ARG != 0
    }

    /// Whether this is an elite artifact (see [`FLAG_DEOPT`]).
    pub fn deoptimises(&self) -> bool {
        self.flags & FLAG_DEOPT != 0
    }
}

/// Compiled code, relocatable and free of any process-specific address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// Facts fixed at compile time.
    pub meta: Metadata,
    /// Machine code, position-independent except at the relocations.
    pub code: Vec<u8>,
    /// The symbols the relocations name, by index.
    pub symbols: Vec<Symbol>,
    /// The places the linker patches.
    pub relocations: Vec<Relocation>,
}

/// Why a serialised artifact was refused. Every variant is detected before anything is
/// mapped executable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    /// The bytes end before a part of the artifact.
    #[error("artifact is truncated: {what} needs bytes {needed_end} but the artifact has {len}")]
    Truncated {
        /// The part being read.
        what: &'static str,
        /// The byte offset its end needs.
        needed_end: usize,
        /// The artifact's length in bytes.
        len: usize,
    },
    /// The first eight bytes are not the artifact magic.
    #[error("not an rdx artifact (bad magic {found:02x?})")]
    BadMagic {
        /// The bytes found.
        found: [u8; 8],
    },
    /// The artifact's format version is not this build's.
    #[error("artifact format version {found} is not supported (this build reads version {FORMAT_VERSION})")]
    UnsupportedVersion {
        /// The version found.
        found: u32,
    },
    /// An architecture code this build does not know: the code.
    #[error("artifact names unknown architecture code {0}")]
    UnknownArch(u32),
    /// Header flags this build does not know: the unknown bits.
    #[error("artifact has unknown flags {0:#x}")]
    UnknownFlags(u32),
    /// The header's body length differs from the bytes that follow it.
    #[error("artifact header says the body is {declared} bytes but {actual} follow it")]
    LengthMismatch {
        /// The length the header declares.
        declared: u64,
        /// The bytes that follow.
        actual: usize,
    },
    /// The body does not hash to the header's body hash.
    #[error("artifact body hash mismatch: the artifact was corrupted or tampered with")]
    HashMismatch,
    /// A header field differs from the body's copy of it: the field.
    #[error("artifact header and body disagree on {0}")]
    HeaderBodyMismatch(&'static str),
    /// The code is longer than [`MAX_CODE_LEN`]: its length.
    #[error("artifact code is {0} bytes, more than the {MAX_CODE_LEN}-byte limit")]
    CodeTooLarge(usize),
    /// The entry point lies outside the code.
    #[error("entry offset {entry} is outside the {code_len}-byte code")]
    EntryOutOfRange {
        /// The entry offset.
        entry: u32,
        /// The code's length in bytes.
        code_len: usize,
    },
    /// A symbol that does not parse.
    #[error("symbol {index}: {source}")]
    BadSymbol {
        /// Its index in the symbol table.
        index: usize,
        /// What is wrong with it.
        source: BadSymbol,
    },
    /// A symbol name that is not UTF-8.
    #[error("symbol {index} is not valid UTF-8")]
    SymbolNotUtf8 {
        /// Its index in the symbol table.
        index: usize,
    },
    /// A relocation of an unknown kind.
    #[error("relocation {index}: unknown kind {kind}")]
    BadRelocKind {
        /// Its index.
        index: usize,
        /// The kind byte.
        kind: u8,
    },
    /// A relocation whose 8-byte patch reaches past the code.
    #[error("relocation {index}: offset {offset} + 8 is outside the {code_len}-byte code")]
    RelocOutOfRange {
        /// Its index.
        index: usize,
        /// Its byte offset in the code.
        offset: u32,
        /// The code's length in bytes.
        code_len: usize,
    },
    /// A relocation names a symbol index past the symbol table.
    #[error("relocation {index}: symbol index {symbol} is outside the {count}-entry symbol table")]
    RelocBadSymbol {
        /// Its index.
        index: usize,
        /// The symbol index named.
        symbol: u32,
        /// Entries in the symbol table.
        count: usize,
    },
    /// Bytes left after the body: how many.
    #[error("{0} trailing bytes after the artifact body")]
    TrailingBytes(usize),
}

/// SHA-256 helper shared by the compiler and the format.
pub(crate) fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

impl Artifact {
    /// The symbol a relocation refers to.
    pub fn symbol_of(&self, r: &Relocation) -> Option<&Symbol> {
        match r.kind {
            RelocKind::Abs64 => self.symbols.get(r.symbol as usize),
            RelocKind::CodeAbs64 => None,
        }
    }

    fn body_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.code.len() + 256);
        let m = &self.meta;
        b.extend_from_slice(&m.source_hash);
        b.extend_from_slice(&m.options_hash);
        for v in [
            m.arch as u32,
            m.flags,
            m.entry_offset,
            m.stack_bytes,
            m.functions,
            m.insn_count,
            self.code.len() as u32,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.code);
        b.extend_from_slice(&(self.symbols.len() as u32).to_le_bytes());
        for s in &self.symbols {
            let name = s.to_string();
            b.extend_from_slice(&(name.len() as u16).to_le_bytes());
            b.extend_from_slice(name.as_bytes());
        }
        b.extend_from_slice(&(self.relocations.len() as u32).to_le_bytes());
        for r in &self.relocations {
            b.extend_from_slice(&r.offset.to_le_bytes());
            b.push(r.kind as u8);
            b.extend_from_slice(&[0; 3]);
            b.extend_from_slice(&r.symbol.to_le_bytes());
            b.extend_from_slice(&r.addend.to_le_bytes());
        }
        b
    }

    /// Serialises the artifact (format in `docs/artifact.md`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let body = self.body_bytes();
        let mut out = Vec::with_capacity(HEADER_LEN + body.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.meta.arch as u32).to_le_bytes());
        out.extend_from_slice(&self.meta.flags.to_le_bytes());
        out.extend_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&sha256(&[&body]));
        debug_assert_eq!(out.len(), HEADER_LEN);
        out.extend_from_slice(&body);
        out
    }

    /// Reads only the fixed header: magic, version, architecture, flags, declared length and
    /// body hash (checked against the bytes that follow). Cheap enough to run before deciding
    /// whether an artifact is worth parsing at all.
    pub fn check_header(bytes: &[u8]) -> Result<Header, ArtifactError> {
        let mut r = Reader::new(bytes);
        let magic: [u8; 8] = r.array("header magic")?;
        if magic != MAGIC {
            return Err(ArtifactError::BadMagic { found: magic });
        }
        let version = r.u32("header format version")?;
        if version != FORMAT_VERSION {
            return Err(ArtifactError::UnsupportedVersion { found: version });
        }
        let arch_code = r.u32("header architecture")?;
        let arch = Arch::from_u32(arch_code).ok_or(ArtifactError::UnknownArch(arch_code))?;
        let flags = r.u32("header flags")?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(ArtifactError::UnknownFlags(flags & !KNOWN_FLAGS));
        }
        let header_len = r.u32("header length")?;
        if header_len as usize != HEADER_LEN {
            return Err(ArtifactError::UnsupportedVersion { found: version });
        }
        let body_len = r.u64("header body length")?;
        let hash: [u8; 32] = r.array("header hash")?;
        let actual = bytes.len() - HEADER_LEN;
        if body_len != actual as u64 {
            if body_len > actual as u64 {
                return Err(ArtifactError::Truncated {
                    what: "body",
                    needed_end: HEADER_LEN.saturating_add(body_len as usize),
                    len: bytes.len(),
                });
            }
            return Err(ArtifactError::LengthMismatch {
                declared: body_len,
                actual,
            });
        }
        if sha256(&[&bytes[HEADER_LEN..]]) != hash {
            return Err(ArtifactError::HashMismatch);
        }
        Ok(Header {
            version,
            arch,
            flags,
            body_hash: hash,
        })
    }

    /// Parses and validates a serialised artifact.
    pub fn from_bytes(bytes: &[u8]) -> Result<Artifact, ArtifactError> {
        let header = Self::check_header(bytes)?;
        let mut r = Reader::new(bytes);
        r.pos = HEADER_LEN;
        let source_hash = r.array("source hash")?;
        let options_hash = r.array("options hash")?;
        let arch_code = r.u32("architecture")?;
        if Arch::from_u32(arch_code) != Some(header.arch) {
            return Err(ArtifactError::HeaderBodyMismatch("architecture"));
        }
        let flags = r.u32("flags")?;
        if flags != header.flags {
            return Err(ArtifactError::HeaderBodyMismatch("flags"));
        }
        let entry_offset = r.u32("entry offset")?;
        let stack_bytes = r.u32("stack bytes")?;
        let functions = r.u32("function count")?;
        let insn_count = r.u32("instruction count")?;
        let code_len = r.u32("code length")? as usize;
        if code_len > MAX_CODE_LEN {
            return Err(ArtifactError::CodeTooLarge(code_len));
        }
        if entry_offset as usize >= code_len {
            return Err(ArtifactError::EntryOutOfRange {
                entry: entry_offset,
                code_len,
            });
        }
        let code = r.bytes(code_len, "code")?.to_vec();
        let nsyms = r.u32("symbol count")? as usize;
        let mut symbols = Vec::with_capacity(nsyms.min(4096));
        for index in 0..nsyms {
            let len = r.u16("symbol length")? as usize;
            let raw = r.bytes(len, "symbol name")?;
            let name =
                std::str::from_utf8(raw).map_err(|_| ArtifactError::SymbolNotUtf8 { index })?;
            let sym = name
                .parse()
                .map_err(|source| ArtifactError::BadSymbol { index, source })?;
            symbols.push(sym);
        }
        let nrelocs = r.u32("relocation count")? as usize;
        let mut relocations = Vec::with_capacity(nrelocs.min(4096));
        for index in 0..nrelocs {
            let offset = r.u32("relocation offset")?;
            let kind_code = r.bytes(4, "relocation kind")?[0];
            let kind = RelocKind::from_code(kind_code).ok_or(ArtifactError::BadRelocKind {
                index,
                kind: kind_code,
            })?;
            let symbol = r.u32("relocation symbol")?;
            let addend = r.u64("relocation addend")? as i64;
            if offset as usize + 8 > code_len {
                return Err(ArtifactError::RelocOutOfRange {
                    index,
                    offset,
                    code_len,
                });
            }
            let symbol_ok = match kind {
                RelocKind::Abs64 => (symbol as usize) < symbols.len(),
                RelocKind::CodeAbs64 => symbol == 0,
            };
            if !symbol_ok {
                return Err(ArtifactError::RelocBadSymbol {
                    index,
                    symbol,
                    count: symbols.len(),
                });
            }
            relocations.push(Relocation {
                offset,
                kind,
                symbol,
                addend,
            });
        }
        if r.pos != bytes.len() {
            return Err(ArtifactError::TrailingBytes(bytes.len() - r.pos));
        }
        Ok(Artifact {
            meta: Metadata {
                arch: header.arch,
                flags,
                entry_offset,
                stack_bytes,
                functions,
                insn_count,
                source_hash,
                options_hash,
            },
            code,
            symbols,
            relocations,
        })
    }
}

/// The fixed header of a serialised artifact, as [`Artifact::check_header`] validated it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Format version.
    pub version: u32,
    /// Architecture the code is for.
    pub arch: Arch,
    /// Header flags (`FLAG_*`).
    pub flags: u32,
    /// SHA-256 of the body.
    pub body_hash: [u8; 32],
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ArtifactError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let s = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(ArtifactError::Truncated {
                what,
                needed_end: self.pos.saturating_add(n),
                len: self.bytes.len(),
            }),
        }
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ArtifactError> {
        Ok(self.bytes(N, what)?.try_into().expect("length checked"))
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, ArtifactError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, ArtifactError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, ArtifactError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(crate) fn sample() -> Artifact {
        Artifact {
            meta: Metadata {
                arch: Arch::Aarch64,
                flags: FLAG_NEEDS_BUDGET,
                entry_offset: 0,
                stack_bytes: 512,
                functions: 1,
                insn_count: 3,
                source_hash: [1; 32],
                options_hash: [2; 32],
            },
            code: (0..32).collect(),
            symbols: vec![
                Symbol::Helper(1),
                Symbol::MapValue(3),
                Symbol::Var("x".into()),
            ],
            relocations: vec![
                Relocation {
                    offset: 8,
                    kind: RelocKind::Abs64,
                    symbol: 1,
                    addend: 16,
                },
                Relocation {
                    offset: 20,
                    kind: RelocKind::CodeAbs64,
                    symbol: 0,
                    addend: 4,
                },
            ],
        }
    }

    #[test]
    fn roundtrip() {
        let a = sample();
        assert_eq!(Artifact::from_bytes(&a.to_bytes()).unwrap(), a);
    }

    #[test]
    fn symbol_names_roundtrip_and_reject_junk() {
        for s in [
            "helper:1",
            "map:0",
            "mapvalue:12",
            "var:rdx_helper_table",
            "fn:log",
        ] {
            assert_eq!(s.parse::<Symbol>().unwrap().to_string(), s);
        }
        for s in [
            "helper:",
            "helper:01",
            "map:-1",
            "nope:1",
            "var:",
            "var:a b",
            "x",
        ] {
            assert!(s.parse::<Symbol>().is_err(), "{s}");
        }
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = sample().to_bytes();
        for len in 0..bytes.len() {
            let err = Artifact::from_bytes(&bytes[..len]).unwrap_err();
            assert!(
                matches!(err, ArtifactError::Truncated { .. }),
                "len {len}: {err}"
            );
        }
    }

    #[test]
    fn tampering_is_refused() {
        let bytes = sample().to_bytes();
        let mut body = bytes.clone();
        *body.last_mut().unwrap() ^= 1;
        assert_eq!(
            Artifact::from_bytes(&body).unwrap_err(),
            ArtifactError::HashMismatch
        );
        let mut version = bytes.clone();
        version[8] = 9;
        assert_eq!(
            Artifact::from_bytes(&version).unwrap_err(),
            ArtifactError::UnsupportedVersion { found: 9 }
        );
        let mut magic = bytes.clone();
        magic[1] = b'X';
        assert!(matches!(
            Artifact::from_bytes(&magic).unwrap_err(),
            ArtifactError::BadMagic { .. }
        ));
        let mut arch = bytes.clone();
        arch[12] = 7;
        assert_eq!(
            Artifact::from_bytes(&arch).unwrap_err(),
            ArtifactError::UnknownArch(7)
        );
        // Changing the architecture in the header alone is caught by the body cross-check.
        let mut swapped = bytes.clone();
        swapped[12] = 1;
        assert_eq!(
            Artifact::from_bytes(&swapped).unwrap_err(),
            ArtifactError::HeaderBodyMismatch("architecture")
        );
        let mut extra = bytes;
        extra.push(0);
        assert!(matches!(
            Artifact::from_bytes(&extra).unwrap_err(),
            ArtifactError::LengthMismatch { .. }
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = Artifact::from_bytes(&bytes);
        }

        #[test]
        fn bit_flips_are_refused(pos in 0usize..10_000, bit in 0u8..8) {
            let mut bytes = sample().to_bytes();
            let pos = pos % bytes.len();
            bytes[pos] ^= 1 << bit;
            prop_assert!(Artifact::from_bytes(&bytes).is_err());
        }
    }
}
