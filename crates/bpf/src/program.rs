//! The loader's output: programs whose map and subprogram references are resolved to indices
//! into the object's map table, plus that table. This is the form every later stage consumes
//! (verifier, interpreter, JIT); none of them sees ELF.

use crate::isa::Insn;

/// Map types, numbered as in the kernel's `enum bpf_map_type` so that objects written for
/// libbpf keep their meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapType {
    /// `BPF_MAP_TYPE_HASH` (1).
    Hash,
    /// `BPF_MAP_TYPE_ARRAY` (2).
    Array,
    /// `BPF_MAP_TYPE_PROG_ARRAY` (3): tail-call targets.
    ProgArray,
    /// `BPF_MAP_TYPE_PERCPU_HASH` (5): one value per CPU (per thread slot in rdx).
    PerCpuHash,
    /// `BPF_MAP_TYPE_PERCPU_ARRAY` (6): one value per CPU (per thread slot in rdx).
    PerCpuArray,
    /// `BPF_MAP_TYPE_LPM_TRIE` (11): longest-prefix match.
    LpmTrie,
    /// `BPF_MAP_TYPE_RINGBUF` (27): records for user space.
    RingBuf,
    /// Any other kernel map type, by number. Loaded and described, but rdx does not run it.
    Other(u32),
}

impl MapType {
    /// The type of kernel map type number `n`.
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

    /// The kernel's map type number.
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
    /// The map's type.
    pub map_type: MapType,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Capacity in entries (ring buffers: data bytes).
    pub max_entries: u32,
    /// `BPF_F_*` flags as declared.
    pub flags: u32,
    /// How the object declared it.
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
    /// The linked code, one entry per slot; the entry point at slot 0.
    pub insns: Vec<Insn>,
}

/// A loaded object file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Object {
    /// Every program of the object: each entry point with the subprograms it reaches.
    pub programs: Vec<Program>,
    /// The object's map table, which map references index.
    pub maps: Vec<MapDef>,
    /// The object's licence string, if it has a `license` section.
    pub license: Option<String>,
}

impl Object {
    /// The program whose entry point is called `name`.
    pub fn program(&self, name: &str) -> Option<&Program> {
        self.programs.iter().find(|p| p.name == name)
    }
}
