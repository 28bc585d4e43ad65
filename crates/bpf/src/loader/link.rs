//! Program extraction and linking in the libbpf model: every function in a program section is
//! a program; the subprograms it calls (in `.text`, or elsewhere) are appended after it once
//! each, local calls and function references are rewritten to the new positions, and map and
//! global-data references become `lddw` of kind `MapIdx` / `MapIdxValue`.

use std::collections::{HashMap, VecDeque};

use crate::isa::{self, op, RawInsn, INSN_SIZE};
use crate::program::Program;

use super::elf::{ElfView, SectionKind, SymbolKind, R_BPF_64_32, R_BPF_64_64, R_BPF_NONE};
use super::maps::MapTable;
use super::{FunctionSpan, LoadError, ProgramLayout, Relocation, RelocationKind};

/// The kernel's limit on instructions in one program; a linked program larger than this is a
/// hostile or broken object.
pub const MAX_PROGRAM_INSNS: usize = 1_000_000;

const CALL: u8 = op::CLASS_JMP | op::JMP_CALL;
const LDDW: u8 = op::CLASS_LD | op::MODE_IMM | op::SIZE_DW;

struct Function {
    name: String,
    section: usize,
    /// First instruction slot in the section.
    start: u64,
    len: u64,
}

pub(crate) struct Linker<'e, 'a> {
    elf: &'e ElfView<'a>,
    maps: &'e MapTable,
    functions: Vec<Function>,
    /// `(section, first slot)` → function.
    by_start: HashMap<(usize, u64), usize>,
    /// `(section, byte offset)` → relocation.
    relocations: HashMap<(usize, u64), super::elf::Relocation>,
}

fn insn_at(data: &[u8], slot: u64) -> RawInsn {
    let start = slot as usize * INSN_SIZE;
    let mut bytes = [0u8; INSN_SIZE];
    bytes.copy_from_slice(&data[start..start + INSN_SIZE]);
    RawInsn::from_bytes(bytes)
}

impl<'e, 'a> Linker<'e, 'a> {
    pub fn new(elf: &'e ElfView<'a>, maps: &'e MapTable) -> Result<Self, LoadError> {
        let mut linker = Linker {
            elf,
            maps,
            functions: Vec::new(),
            by_start: HashMap::new(),
            relocations: HashMap::new(),
        };
        linker.collect_functions()?;
        linker.collect_relocations()?;
        Ok(linker)
    }

    fn collect_functions(&mut self) -> Result<(), LoadError> {
        for section in &self.elf.sections {
            if !matches!(section.kind, SectionKind::Program | SectionKind::Text) {
                continue;
            }
            if section.data.len() % INSN_SIZE != 0 {
                return Err(LoadError::PartialInstruction {
                    section: section.name.clone(),
                    size: section.data.len() as u64,
                });
            }
            if section.kind == SectionKind::Program && section.data.is_empty() {
                return Err(LoadError::EmptyProgramSection {
                    section: section.name.clone(),
                });
            }
            let mut in_section: Vec<_> = self
                .elf
                .symbols
                .iter()
                .filter(|s| s.section == Some(section.index) && s.kind == SymbolKind::Func)
                .collect();
            in_section.sort_by_key(|s| s.value);
            if section.kind == SectionKind::Program && in_section.is_empty() {
                return Err(LoadError::NoProgramSymbol {
                    section: section.name.clone(),
                });
            }
            for sym in in_section {
                let bad = |reason: &'static str| LoadError::BadFunctionSymbol {
                    section: section.name.clone(),
                    symbol: sym.name.clone(),
                    offset: sym.value,
                    size: sym.size,
                    reason,
                };
                if sym.value % INSN_SIZE as u64 != 0 || sym.size % INSN_SIZE as u64 != 0 {
                    return Err(bad("is not aligned to 8-byte instructions"));
                }
                if sym.size == 0 {
                    return Err(bad("is empty"));
                }
                match sym.value.checked_add(sym.size) {
                    Some(end) if end <= section.data.len() as u64 => {}
                    _ => return Err(bad("extends past the end of the section")),
                }
                let start = sym.value / INSN_SIZE as u64;
                if self
                    .by_start
                    .insert((section.index, start), self.functions.len())
                    .is_some()
                {
                    return Err(bad("starts where another function starts"));
                }
                self.functions.push(Function {
                    name: sym.name.clone(),
                    section: section.index,
                    start,
                    len: sym.size / INSN_SIZE as u64,
                });
            }
        }
        Ok(())
    }

    fn collect_relocations(&mut self) -> Result<(), LoadError> {
        for (&section, list) in &self.elf.code_relocations {
            let sec = &self.elf.sections[section];
            for rel in list {
                let bad = |reason: String| LoadError::BadRelocation {
                    section: sec.name.clone(),
                    offset: rel.offset,
                    reason,
                };
                if rel.r_type == R_BPF_NONE {
                    continue;
                }
                if rel.r_type != R_BPF_64_64 && rel.r_type != R_BPF_64_32 {
                    return Err(bad(format!("unsupported relocation type {}", rel.r_type)));
                }
                if rel.offset % INSN_SIZE as u64 != 0 {
                    return Err(bad("offset is not instruction-aligned".into()));
                }
                if rel.offset >= sec.data.len() as u64 {
                    return Err(bad(format!(
                        "offset is past the end of the section ({} bytes)",
                        sec.data.len()
                    )));
                }
                let Some(symbol) = self.elf.symbols.get(rel.symbol).filter(|_| rel.symbol != 0)
                else {
                    return Err(LoadError::MissingSymbol {
                        section: sec.name.clone(),
                        offset: rel.offset,
                        index: rel.symbol,
                    });
                };
                if symbol.undefined {
                    return Err(LoadError::UndefinedSymbol {
                        section: sec.name.clone(),
                        offset: rel.offset,
                        symbol: symbol.name.clone(),
                    });
                }
                if self
                    .relocations
                    .insert((section, rel.offset), *rel)
                    .is_some()
                {
                    return Err(bad("two relocations for one instruction".into()));
                }
            }
        }
        Ok(())
    }

    /// Every program of the object, in section order then offset order.
    pub fn link_all(&self) -> Result<(Vec<Program>, Vec<ProgramLayout>), LoadError> {
        let mut programs = Vec::new();
        let mut layouts = Vec::new();
        let mut entries: Vec<usize> = (0..self.functions.len())
            .filter(|&f| self.elf.sections[self.functions[f].section].kind == SectionKind::Program)
            .collect();
        entries.sort_by_key(|&f| (self.functions[f].section, self.functions[f].start));
        for f in entries {
            let (program, layout) = self.link(f)?;
            programs.push(program);
            layouts.push(layout);
        }
        Ok((programs, layouts))
    }

    fn section_name(&self, section: usize) -> String {
        self.elf.section_name(section).to_string()
    }

    fn link(&self, entry: usize) -> Result<(Program, ProgramLayout), LoadError> {
        let mut code: Vec<RawInsn> = Vec::new();
        let mut placed: HashMap<usize, usize> = HashMap::new();
        let mut spans: Vec<(usize, usize)> = Vec::new(); // (function, position)
        let mut relocations = Vec::new();
        let mut queue = VecDeque::new();
        self.place(entry, &mut code, &mut placed, &mut spans, &mut queue)?;

        while let Some(f) = queue.pop_front() {
            let func = &self.functions[f];
            let base = placed[&f];
            let section = func.section;
            for i in 0..func.len as usize {
                let pos = base + i;
                let slot = func.start + i as u64;
                let byte_offset = slot * INSN_SIZE as u64;
                let raw = code[pos];
                let rel = self.relocations.get(&(section, byte_offset));
                let is_local_call = raw.code == CALL && raw.src == op::PSEUDO_CALL;
                if is_local_call {
                    let (target_section, target_slot, symbol) = match rel {
                        Some(rel) => {
                            let sym = &self.elf.symbols[rel.symbol];
                            if rel.r_type != R_BPF_64_32 {
                                return Err(LoadError::BadRelocation {
                                    section: self.section_name(section),
                                    offset: byte_offset,
                                    reason: "call relocated with a 64-bit relocation".into(),
                                });
                            }
                            let target = (sym.value / INSN_SIZE as u64) as i64 + raw.imm as i64 + 1;
                            (sym.section, target, sym.name.clone())
                        }
                        None => (
                            Some(section),
                            slot as i64 + raw.imm as i64 + 1,
                            String::new(),
                        ),
                    };
                    let callee = self.function_at(section, slot, target_section, target_slot)?;
                    let callee_pos =
                        self.place(callee, &mut code, &mut placed, &mut spans, &mut queue)?;
                    code[pos].imm = relative(callee_pos, pos, &self.functions[entry].name)?;
                    relocations.push(Relocation {
                        insn: pos,
                        symbol: if symbol.is_empty() {
                            self.functions[callee].name.clone()
                        } else {
                            symbol
                        },
                        kind: RelocationKind::Call {
                            function: self.functions[callee].name.clone(),
                        },
                    });
                    continue;
                }
                let Some(rel) = rel else {
                    if raw.code == LDDW
                        && matches!(
                            raw.src,
                            op::PSEUDO_MAP_FD
                                | op::PSEUDO_MAP_VALUE
                                | op::PSEUDO_MAP_IDX
                                | op::PSEUDO_MAP_IDX_VALUE
                        )
                    {
                        return Err(LoadError::UnrelocatedMapReference {
                            section: self.section_name(section),
                            insn: slot,
                            src: raw.src,
                        });
                    }
                    continue;
                };
                let bad = |reason: String| LoadError::BadRelocation {
                    section: self.section_name(section),
                    offset: byte_offset,
                    reason,
                };
                if raw.code != LDDW {
                    return Err(bad(format!(
                        "relocated instruction has opcode {:#04x}; only lddw and calls are relocated",
                        raw.code
                    )));
                }
                if rel.r_type != R_BPF_64_64 {
                    return Err(bad("lddw relocated with a 32-bit relocation".into()));
                }
                if i + 1 >= func.len as usize {
                    return Err(bad("lddw is missing its second slot".into()));
                }
                let sym = &self.elf.symbols[rel.symbol];
                let sym_section = sym.section.map(|s| (s, self.elf.sections[s].kind));
                let addend = sym.value as i64 + raw.imm as i64;
                match sym_section {
                    Some((s, SectionKind::BtfMaps | SectionKind::LegacyMaps)) => {
                        let map = u64::try_from(addend)
                            .ok()
                            .and_then(|off| self.maps.by_location.get(&(s, off)))
                            .ok_or_else(|| {
                                bad(format!(
                                    "symbol `{}` in section {} is not a map declaration",
                                    sym.name,
                                    self.section_name(s)
                                ))
                            })?;
                        code[pos].src = op::PSEUDO_MAP_IDX;
                        code[pos].imm = *map as i32;
                        code[pos + 1].imm = 0;
                        relocations.push(Relocation {
                            insn: pos,
                            symbol: sym.name.clone(),
                            kind: RelocationKind::Map { map: *map },
                        });
                    }
                    Some((s, SectionKind::GlobalData { .. })) => {
                        let &map = self.maps.by_data_section.get(&s).ok_or_else(|| {
                            bad(format!("section {} is empty", self.section_name(s)))
                        })?;
                        let size = self.maps.maps[map].value_size as i64;
                        if addend < 0 || addend >= size {
                            return Err(bad(format!(
                                "offset {addend} of `{}` is outside section {} ({size} bytes)",
                                sym.name,
                                self.section_name(s)
                            )));
                        }
                        code[pos].src = op::PSEUDO_MAP_IDX_VALUE;
                        code[pos].imm = map as i32;
                        code[pos + 1].imm = addend as i32;
                        relocations.push(Relocation {
                            insn: pos,
                            symbol: sym.name.clone(),
                            kind: RelocationKind::GlobalData {
                                map,
                                offset: addend as u32,
                            },
                        });
                    }
                    Some((s, SectionKind::Program | SectionKind::Text)) => {
                        if addend < 0 || addend % INSN_SIZE as i64 != 0 {
                            return Err(bad(format!(
                                "function reference to `{}`{:+} is not an instruction boundary",
                                sym.name, raw.imm
                            )));
                        }
                        let target = addend / INSN_SIZE as i64;
                        let callee = self.function_at(section, slot, Some(s), target)?;
                        let callee_pos =
                            self.place(callee, &mut code, &mut placed, &mut spans, &mut queue)?;
                        code[pos].src = op::PSEUDO_FUNC;
                        code[pos].imm = relative(callee_pos, pos, &self.functions[entry].name)?;
                        code[pos + 1].imm = 0;
                        relocations.push(Relocation {
                            insn: pos,
                            symbol: sym.name.clone(),
                            kind: RelocationKind::FuncAddr {
                                function: self.functions[callee].name.clone(),
                            },
                        });
                    }
                    _ => {
                        let held_in = sym.section.map_or("<none>", |s| self.elf.section_name(s));
                        return Err(bad(format!(
                            "symbol `{}` is in section {held_in}, which holds no maps, \
                             global data or code",
                            sym.name
                        )));
                    }
                }
            }
        }

        let entry_fn = &self.functions[entry];
        let insns = self.decode(&code, &spans)?;
        let functions = spans
            .iter()
            .map(|&(f, start)| FunctionSpan {
                name: self.functions[f].name.clone(),
                section: self.section_name(self.functions[f].section),
                start,
                len: self.functions[f].len as usize,
            })
            .collect();
        relocations.sort_by_key(|r| r.insn);
        Ok((
            Program {
                name: entry_fn.name.clone(),
                section: self.section_name(entry_fn.section),
                insns,
            },
            ProgramLayout {
                functions,
                relocations,
            },
        ))
    }

    /// Appends `f` to the program unless it is already there; returns its position.
    fn place(
        &self,
        f: usize,
        code: &mut Vec<RawInsn>,
        placed: &mut HashMap<usize, usize>,
        spans: &mut Vec<(usize, usize)>,
        queue: &mut VecDeque<usize>,
    ) -> Result<usize, LoadError> {
        if let Some(&pos) = placed.get(&f) {
            return Ok(pos);
        }
        let func = &self.functions[f];
        let pos = code.len();
        let total = pos + func.len as usize;
        if total > MAX_PROGRAM_INSNS {
            let entry = spans.first().map_or(f, |s| s.0);
            return Err(LoadError::ProgramTooLarge {
                program: self.functions[entry].name.clone(),
                insns: total,
                limit: MAX_PROGRAM_INSNS,
            });
        }
        let data = self.elf.sections[func.section].data;
        code.extend((func.start..func.start + func.len).map(|slot| insn_at(data, slot)));
        placed.insert(f, pos);
        spans.push((f, pos));
        queue.push_back(f);
        Ok(pos)
    }

    fn function_at(
        &self,
        from_section: usize,
        from_slot: u64,
        target_section: Option<usize>,
        target_slot: i64,
    ) -> Result<usize, LoadError> {
        let found = target_section.and_then(|s| {
            u64::try_from(target_slot)
                .ok()
                .and_then(|t| self.by_start.get(&(s, t)).copied())
        });
        found.ok_or_else(|| LoadError::CallTargetNotFunction {
            section: self.section_name(from_section),
            insn: from_slot,
            target_section: target_section
                .map_or("<undefined>".to_string(), |s| self.section_name(s)),
            target_insn: target_slot,
        })
    }

    /// Strictly decodes the linked program, reporting failures in section coordinates, and
    /// checks that no jump leaves the function it belongs to.
    fn decode(
        &self,
        code: &[RawInsn],
        spans: &[(usize, usize)],
    ) -> Result<Vec<isa::Insn>, LoadError> {
        let locate = |pos: usize| {
            let &(f, start) = spans
                .iter()
                .rev()
                .find(|&&(_, start)| start <= pos)
                .unwrap_or(&spans[0]);
            let func = &self.functions[f];
            (func, start)
        };
        let insns = isa::decode(code).map_err(|e| {
            let (func, start) = locate(e.index);
            LoadError::BadInstruction {
                section: self.section_name(func.section),
                function: func.name.clone(),
                insn: func.start + (e.index - start) as u64,
                code: e.code,
                kind: e.kind,
            }
        })?;
        for &(f, start) in spans {
            let func = &self.functions[f];
            let end = start + func.len as usize;
            for (pos, insn) in insns.iter().enumerate().take(end).skip(start) {
                if let Some(target) = insn.jump_target(pos) {
                    if target < start as i64 || target >= end as i64 {
                        return Err(LoadError::JumpOutOfFunction {
                            section: self.section_name(func.section),
                            function: func.name.clone(),
                            insn: func.start + (pos - start) as u64,
                            target: func.start as i64 + (target - start as i64),
                            start: func.start,
                            end: func.start + func.len,
                        });
                    }
                }
            }
        }
        Ok(insns)
    }
}

fn relative(target: usize, pos: usize, program: &str) -> Result<i32, LoadError> {
    i32::try_from(target as i64 - pos as i64 - 1).map_err(|_| LoadError::ProgramTooLarge {
        program: program.to_string(),
        insns: target,
        limit: MAX_PROGRAM_INSNS,
    })
}
