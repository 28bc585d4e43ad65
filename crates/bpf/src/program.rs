//! The loader's output: programs whose map and subprogram references are resolved to indices
//! into the object's map table, plus that table. This is the form every later stage consumes
//! (verifier, interpreter, JIT); none of them sees ELF.

use crate::isa::Insn;

/// Map types, numbered as in the kernel's `enum bpf_map_type` so that objects written for
/// libbpf keep their meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapType {
    Hash,
    Array,
    ProgArray,
    PerCpuHash,
    PerCpuArray,
    LpmTrie,
    RingBuf,
    /// Any other kernel map type, by number. Loaded and described, but rdx does not run it.
    Other(u32),
}

impl MapType {
    pub fn from_kernel(n: u32) -> Self {
        match n {
            1 => MapType::Hash,
            2 => MapType::Array,
            3 => MapType::ProgArray,
            5 => MapType::PerCpuHash,
            6 => MapType::PerCpuArray,
            11 => MapType::LpmTrie,
            27 => MapType::RingBuf,
            other => MapType::Other(other),
        }
    }

    pub fn to_kernel(self) -> u32 {
        match self {
            MapType::Hash => 1,
            MapType::Array => 2,
            MapType::ProgArray => 3,
            MapType::PerCpuHash => 5,
            MapType::PerCpuArray => 6,
            MapType::LpmTrie => 11,
            MapType::RingBuf => 27,
            MapType::Other(n) => n,
        }
    }
}

/// Where a map came from in the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapOrigin {
    /// A BTF-defined map in `.maps`.
    Btf,
    /// A legacy `struct bpf_map_def` in `maps`.
    Legacy,
    /// A global-data section (`.data`, `.rodata`, `.bss` and their named variants), exposed as
    /// a one-entry array map whose value is the section.
    GlobalData,
}

/// A map as declared by the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapDef {
    /// Symbol name, or the section name for global data.
    pub name: String,
    pub map_type: MapType,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub flags: u32,
    pub origin: MapOrigin,
    /// Initial contents of a global-data map's single value (zeroes for `.bss`).
    pub initial_value: Option<Vec<u8>>,
    /// True for `.rodata`: the program may only read it.
    pub read_only: bool,
}

/// One loaded program: its own code followed by every subprogram it reaches, with calls and
/// map references relocated.
///
/// Map references are `lddw` instructions of kind [`crate::isa::ImmKind::MapIdx`]
/// (`imm_lo` = index into [`Object::maps`]) or [`crate::isa::ImmKind::MapIdxValue`]
/// (`imm_lo` = index, `imm_hi` = byte offset into the value, used for global data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    /// Function name of the entry point.
    pub name: String,
    /// ELF section the entry point lives in (`xdp`, `socket`, `rdx/<hook>`, ...).
    pub section: String,
    pub insns: Vec<Insn>,
}

/// A loaded object file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Object {
    pub programs: Vec<Program>,
    pub maps: Vec<MapDef>,
    /// The object's licence string, if it has a `license` section.
    pub license: Option<String>,
}

impl Object {
    pub fn program(&self, name: &str) -> Option<&Program> {
        self.programs.iter().find(|p| p.name == name)
    }
}
