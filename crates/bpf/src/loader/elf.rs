//! A checked view of an eBPF ELF object: its sections, symbols and code relocations, read with
//! the `object` crate's ELF layer. Nothing here interprets eBPF; it only makes sure every
//! offset, size and index that later passes use is inside the file.

use std::collections::HashMap;

use object::elf::{self, FileHeader64};
use object::read::elf::{FileHeader, Rel, SectionHeader, Sym};
use object::LittleEndian;

use super::LoadError;

/// EM_BPF from the ELF machine registry.
const EM_BPF: u16 = 247;

/// What the loader does with a section, decided from its name and flags the way libbpf does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SectionKind {
    /// An executable section other than `.text`: every function in it is a program.
    Program,
    /// `.text`: subprograms, linked into the programs that call them.
    Text,
    /// `.maps`: BTF-defined maps.
    BtfMaps,
    /// `maps` (and `maps/...`): legacy `struct bpf_map_def` maps.
    LegacyMaps,
    /// `.data`, `.rodata`, `.bss` and their `.name.*` variants.
    GlobalData {
        read_only: bool,
    },
    Btf,
    BtfExt,
    License,
    Other,
}

pub(crate) struct Section<'a> {
    pub index: usize,
    pub name: String,
    pub kind: SectionKind,
    /// File bytes; empty for `SHT_NOBITS` (`.bss`).
    pub data: &'a [u8],
    /// `sh_size`: for `.bss` the only record of its size.
    pub size: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SymbolKind {
    Func,
    Section,
    Other,
}

pub(crate) struct Symbol {
    pub name: String,
    /// Defining section; `None` for undefined (extern) and special symbols.
    pub section: Option<usize>,
    pub undefined: bool,
    pub value: u64,
    pub size: u64,
    pub kind: SymbolKind,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Relocation {
    /// Byte offset of the relocated instruction in its section.
    pub offset: u64,
    pub symbol: usize,
    pub r_type: u32,
}

pub(crate) const R_BPF_NONE: u32 = 0;
pub(crate) const R_BPF_64_64: u32 = 1;
pub(crate) const R_BPF_64_32: u32 = 10;

pub(crate) struct ElfView<'a> {
    pub sections: Vec<Section<'a>>,
    /// Indexed by ELF symbol index; entry 0 is the null symbol.
    pub symbols: Vec<Symbol>,
    /// Relocations of executable sections, by section index.
    pub code_relocations: HashMap<usize, Vec<Relocation>>,
}

fn machine_name(machine: u16) -> &'static str {
    match machine {
        3 => "x86",
        8 => "MIPS",
        20 => "PowerPC",
        21 => "PowerPC64",
        22 => "s390",
        40 => "ARM",
        62 => "x86-64",
        183 => "AArch64",
        243 => "RISC-V",
        258 => "LoongArch",
        _ => "not eBPF",
    }
}

fn classify(name: &str, executable: bool) -> SectionKind {
    let is =
        |base: &str| name == base || name.strip_prefix(base).is_some_and(|r| r.starts_with('.'));
    if executable {
        return if name == ".text" {
            SectionKind::Text
        } else {
            SectionKind::Program
        };
    }
    if name == ".maps" {
        SectionKind::BtfMaps
    } else if name == "maps" || name.starts_with("maps/") {
        SectionKind::LegacyMaps
    } else if is(".rodata") {
        SectionKind::GlobalData { read_only: true }
    } else if is(".data") || is(".bss") {
        SectionKind::GlobalData { read_only: false }
    } else if name == ".BTF" {
        SectionKind::Btf
    } else if name == ".BTF.ext" {
        SectionKind::BtfExt
    } else if name == "license" {
        SectionKind::License
    } else {
        SectionKind::Other
    }
}

fn malformed(what: impl Into<String>) -> impl FnOnce(object::read::Error) -> LoadError {
    let what = what.into();
    move |e| LoadError::MalformedElf {
        what,
        reason: e.to_string(),
    }
}

/// Checks the identification bytes first so that the common mistakes (not ELF, a native
/// object, a big-endian eBPF object) get their own message rather than a parse error.
fn check_ident(data: &[u8]) -> Result<(), LoadError> {
    if data.len() < 4 || data[..4] != elf::ELFMAG {
        return Err(if data.len() < 4 && elf::ELFMAG.starts_with(data) {
            LoadError::Truncated(data.len())
        } else {
            LoadError::NotElf
        });
    }
    if data.len() < 64 {
        return Err(LoadError::Truncated(data.len()));
    }
    let big_endian = data[5] == elf::ELFDATA2MSB.0;
    let machine = if big_endian {
        u16::from_be_bytes([data[18], data[19]])
    } else {
        u16::from_le_bytes([data[18], data[19]])
    };
    if machine != EM_BPF {
        return Err(LoadError::WrongMachine {
            machine,
            name: machine_name(machine),
        });
    }
    if data[4] != elf::ELFCLASS64.0 {
        return Err(LoadError::WrongClass);
    }
    if big_endian {
        return Err(LoadError::WrongEndianness);
    }
    Ok(())
}

impl<'a> ElfView<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Self, LoadError> {
        check_ident(data)?;
        let endian = LittleEndian;
        let header = FileHeader64::<LittleEndian>::parse(data).map_err(malformed("ELF header"))?;
        let table = header
            .sections(endian, data)
            .map_err(malformed("section headers"))?;

        let mut sections = Vec::with_capacity(table.len());
        for (index, sh) in table.enumerate() {
            let name = table
                .section_name(endian, sh)
                .map_err(malformed(format!("name of section {}", index.0)))?;
            let name = String::from_utf8_lossy(name).into_owned();
            let executable = sh.sh_flags(endian).0 & elf::SHF_EXECINSTR.0 != 0;
            let data = sh
                .data(endian, data)
                .map_err(malformed(format!("section {name}")))?;
            sections.push(Section {
                index: index.0,
                kind: classify(&name, executable),
                name,
                data,
                size: sh.sh_size(endian),
            });
        }

        let symtab = table
            .symbols(endian, data, elf::SHT_SYMTAB)
            .map_err(malformed("symbol table"))?;
        let mut symbols = Vec::with_capacity(symtab.len());
        for (index, sym) in symtab.enumerate() {
            let name = symtab
                .symbol_name(endian, sym)
                .map_err(malformed(format!("name of symbol {}", index.0)))?;
            let section = symtab
                .symbol_section(endian, sym, index)
                .map_err(malformed(format!("section of symbol {}", index.0)))?
                .map(|s| s.0)
                .filter(|&s| s < sections.len());
            let st_type = sym.st_type();
            let mut name = String::from_utf8_lossy(name).into_owned();
            if name.is_empty() && st_type == elf::STT_SECTION {
                // Section symbols are nameless in ELF; messages read better with the section.
                if let Some(s) = section.and_then(|s| sections.get(s)) {
                    name = s.name.clone();
                }
            }
            symbols.push(Symbol {
                name,
                section,
                undefined: sym.st_shndx(endian) == elf::SHN_UNDEF,
                value: sym.st_value(endian),
                size: sym.st_size(endian),
                kind: if st_type == elf::STT_FUNC {
                    SymbolKind::Func
                } else if st_type == elf::STT_SECTION {
                    SymbolKind::Section
                } else {
                    SymbolKind::Other
                },
            });
        }

        let mut code_relocations: HashMap<usize, Vec<Relocation>> = HashMap::new();
        for (index, sh) in table.enumerate() {
            let target = sh.sh_info(endian) as usize;
            let Some(target_section) = sections.get(target) else {
                continue;
            };
            if !matches!(
                target_section.kind,
                SectionKind::Program | SectionKind::Text
            ) {
                // Debug-info and BTF relocations do not change the code.
                continue;
            }
            let target_name = target_section.name.clone();
            if sh.sh_type(endian) == elf::SHT_RELA {
                return Err(LoadError::BadRelocation {
                    section: target_name,
                    offset: 0,
                    reason: "RELA relocations are not used by eBPF objects".into(),
                });
            }
            let Some((rels, link)) = sh
                .rel(endian, data)
                .map_err(malformed(format!("relocations of section {target_name}")))?
            else {
                continue;
            };
            if link != symtab.section() {
                return Err(LoadError::MalformedElf {
                    what: format!("relocation section {}", index.0),
                    reason: "links to a section that is not the symbol table".into(),
                });
            }
            let list = code_relocations.entry(target).or_default();
            for rel in rels {
                list.push(Relocation {
                    offset: rel.r_offset(endian),
                    symbol: rel.r_sym(endian) as usize,
                    r_type: rel.r_type(endian).0,
                });
            }
        }

        Ok(ElfView {
            sections,
            symbols,
            code_relocations,
        })
    }

    pub fn section_name(&self, index: usize) -> &str {
        self.sections
            .get(index)
            .map_or("<missing section>", |s| s.name.as_str())
    }
}
