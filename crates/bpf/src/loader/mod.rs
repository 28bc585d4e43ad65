//! The object loader: ELF files as `clang -O2 -g -target bpf` writes them, with libbpf's
//! conventions, turned into an [`Object`] whose programs are fully linked and strictly
//! decoded.
//!
//! What it understands:
//! - programs: every function in an executable section other than `.text` (`SEC("socket")`,
//!   `SEC("xdp")`, `SEC("rdx/<hook>")`, any libbpf section name), named by its symbol;
//! - subprograms: functions in `.text` (or any executable section) reached by a BPF-to-BPF
//!   call or a function reference, appended once to each program that reaches them, with the
//!   call offsets rewritten — the libbpf model, so every [`Program`] is self-contained;
//! - maps: BTF-defined maps in `.maps`, legacy `struct bpf_map_def` in `maps`, and global
//!   data (`.data`, `.rodata`, `.bss` and their `.name.*` variants) as one-entry array maps;
//! - relocations: map references become `lddw` of kind [`ImmKind::MapIdx`], global-data
//!   references [`ImmKind::MapIdxValue`] (`imm_lo` = map index, `imm_hi` = byte offset).
//!
//! It makes no system calls and never panics on malformed input: every failure is a
//! [`LoadError`] naming the section, symbol, offset or instruction at fault.
//!
//! ```no_run
//! let bytes = std::fs::read("prog.o").unwrap();
//! let object = rdx_bpf::loader::load(&bytes)?;
//! for program in &object.programs {
//!     println!("{} ({}): {} slots", program.name, program.section, program.insns.len());
//! }
//! # Ok::<(), rdx_bpf::loader::LoadError>(())
//! ```
//!
//! [`ImmKind::MapIdx`]: crate::isa::ImmKind::MapIdx
//! [`ImmKind::MapIdxValue`]: crate::isa::ImmKind::MapIdxValue

mod btf;
mod elf;
mod error;
mod link;
mod maps;

pub use btf::BtfError;
pub use error::LoadError;
pub use link::MAX_PROGRAM_INSNS;
pub use maps::{BPF_F_RDONLY_PROG, MAX_GLOBAL_DATA};

use crate::program::{Object, Program};

use elf::{ElfView, SectionKind};

/// A loaded object plus how each program was put together, for tools that explain it
/// (`rdx inspect`). `layouts[i]` describes `object.programs[i]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedObject {
    /// The object, its programs linked and relocated.
    pub object: Object,
    /// How each program was put together, by program index.
    pub layouts: Vec<ProgramLayout>,
}

/// The functions a program is made of and the relocations applied to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramLayout {
    /// The entry function first, then each appended subprogram, in instruction order.
    pub functions: Vec<FunctionSpan>,
    /// Relocations in instruction order.
    pub relocations: Vec<Relocation>,
}

/// Where one function sits inside a linked program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSpan {
    /// The function's name.
    pub name: String,
    /// ELF section the function came from.
    pub section: String,
    /// First slot in the linked program.
    pub start: usize,
    /// Number of slots.
    pub len: usize,
}

/// One relocation applied to a linked program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relocation {
    /// Slot of the relocated instruction in the linked program.
    pub insn: usize,
    /// The ELF symbol the relocation named (a map, a variable, a function or a section).
    pub symbol: String,
    /// What the relocation resolved to.
    pub kind: RelocationKind,
}

/// What a relocation resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelocationKind {
    /// `lddw rX, map` → [`crate::isa::ImmKind::MapIdx`].
    Map {
        /// Index into the object's map table.
        map: usize,
    },
    /// `lddw rX, &global` → [`crate::isa::ImmKind::MapIdxValue`].
    GlobalData {
        /// Index into the object's map table of the global-data map.
        map: usize,
        /// Byte offset of the variable in the map's value.
        offset: u32,
    },
    /// A BPF-to-BPF call, now relative to the callee's position in this program.
    Call {
        /// The callee's name.
        function: String,
    },
    /// `lddw rX, function` (callbacks) → [`crate::isa::ImmKind::Func`].
    FuncAddr {
        /// The function's name.
        function: String,
    },
}

/// Loads an object file: programs, maps, relocations applied, every program strictly decoded.
pub fn load(bytes: &[u8]) -> Result<Object, LoadError> {
    load_detailed(bytes).map(|loaded| loaded.object)
}

/// Like [`load`], keeping the per-program layout and relocation record.
pub fn load_detailed(bytes: &[u8]) -> Result<LoadedObject, LoadError> {
    let elf = ElfView::parse(bytes)?;
    let btf = elf
        .sections
        .iter()
        .find(|s| s.kind == SectionKind::Btf)
        .map(|s| btf::Btf::parse(s.data))
        .transpose()?;
    if let Some(ext) = elf.sections.iter().find(|s| s.kind == SectionKind::BtfExt) {
        if let Some(bytes) = btf::core_relocation_bytes(ext.data) {
            return Err(LoadError::UnsupportedCoRe { bytes });
        }
    }
    let maps = maps::MapTable::collect(&elf, btf.as_ref())?;
    let linker = link::Linker::new(&elf, &maps)?;
    let (programs, layouts) = linker.link_all()?;
    let license = elf
        .sections
        .iter()
        .find(|s| s.kind == SectionKind::License)
        .map(|s| {
            let text = s.data.split(|&b| b == 0).next().unwrap_or_default();
            String::from_utf8_lossy(text).into_owned()
        });
    Ok(LoadedObject {
        object: Object {
            programs,
            maps: maps.maps,
            license,
        },
        layouts,
    })
}

impl LoadedObject {
    /// The program called `name` with its layout.
    pub fn program(&self, name: &str) -> Option<(&Program, &ProgramLayout)> {
        let i = self.object.programs.iter().position(|p| p.name == name)?;
        Some((&self.object.programs[i], &self.layouts[i]))
    }
}
