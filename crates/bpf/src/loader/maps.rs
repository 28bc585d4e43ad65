//! Map declarations: BTF-defined maps in `.maps`, legacy `struct bpf_map_def` in `maps`, and
//! global-data sections, each turned into a [`MapDef`] with a stable index. The index order is
//! section order, then offset within the section, so the same object always yields the same
//! table.

use std::collections::HashMap;

use crate::program::{MapDef, MapOrigin, ObjectMapType};
use rdx_region::layout::MapType;

use super::btf::{Btf, Kind};
use super::elf::{ElfView, SectionKind, SymbolKind};
use super::LoadError;

/// `BPF_F_RDONLY_PROG`: the program may only read the map (libbpf sets it on `.rodata`).
pub const BPF_F_RDONLY_PROG: u32 = 1 << 7;
/// Global data larger than this is refused: a hostile `.bss` can claim any size without
/// occupying the file, and rdx materialises global data as a zero-filled value.
pub const MAX_GLOBAL_DATA: u64 = 16 << 20;
/// `struct bpf_map_def`: type, key_size, value_size, max_entries, map_flags.
const LEGACY_DEF_SIZE: u64 = 20;

/// The object's maps and how relocations find them.
#[derive(Default)]
pub(crate) struct MapTable {
    pub maps: Vec<MapDef>,
    /// `(section, offset of the declaration)` → map index, for `.maps` and `maps`.
    pub by_location: HashMap<(usize, u64), usize>,
    /// Global-data section → map index.
    pub by_data_section: HashMap<usize, usize>,
}

impl MapTable {
    pub fn collect(elf: &ElfView<'_>, btf: Option<&Btf<'_>>) -> Result<Self, LoadError> {
        let mut table = MapTable::default();
        for section in &elf.sections {
            match section.kind {
                SectionKind::BtfMaps => {
                    let btf = btf.ok_or(LoadError::MissingBtf)?;
                    table.collect_btf_maps(elf, section.index, btf)?;
                }
                SectionKind::LegacyMaps => table.collect_legacy_maps(elf, section.index)?,
                SectionKind::GlobalData { read_only } => {
                    if section.size == 0 {
                        continue;
                    }
                    if section.size > MAX_GLOBAL_DATA {
                        return Err(LoadError::GlobalDataTooLarge {
                            section: section.name.clone(),
                            size: section.size,
                            limit: MAX_GLOBAL_DATA,
                        });
                    }
                    let value = if section.data.is_empty() {
                        vec![0; section.size as usize]
                    } else {
                        section.data.to_vec()
                    };
                    table
                        .by_data_section
                        .insert(section.index, table.maps.len());
                    table.maps.push(MapDef {
                        name: section.name.clone(),
                        map_type: MapType::Array.into(),
                        key_size: 4,
                        value_size: section.size as u32,
                        max_entries: 1,
                        flags: if read_only { BPF_F_RDONLY_PROG } else { 0 },
                        origin: MapOrigin::GlobalData,
                        initial_value: Some(value),
                        read_only,
                    });
                }
                _ => {}
            }
        }
        Ok(table)
    }

    fn collect_btf_maps(
        &mut self,
        elf: &ElfView<'_>,
        section: usize,
        btf: &Btf<'_>,
    ) -> Result<(), LoadError> {
        // Symbols give each declaration's offset; BTF gives its layout. Where a symbol is
        // missing (stripped objects) the DATASEC offset is used.
        let offsets: HashMap<&str, u64> = elf
            .symbols
            .iter()
            .filter(|s| s.section == Some(section) && s.kind != SymbolKind::Section)
            .map(|s| (s.name.as_str(), s.value))
            .collect();
        let mut found = Vec::new();
        for ty in btf.types() {
            let Kind::DataSec { entries } = &ty.kind else {
                continue;
            };
            if btf.name(ty.name_off)? != ".maps" {
                continue;
            }
            for entry in entries {
                let var = btf.ty(entry.type_id)?;
                let Kind::Var { target } = var.kind else {
                    return Err(LoadError::BadMap {
                        map: format!("#{} in .maps", found.len()),
                        reason: format!("BTF entry {} is not a variable", entry.type_id),
                    });
                };
                let name = btf.name(var.name_off)?.into_owned();
                let offset = offsets
                    .get(name.as_str())
                    .copied()
                    .unwrap_or(entry.offset as u64);
                let def = btf_map_def(btf, &name, target)?;
                found.push((offset, def));
            }
        }
        found.sort_by_key(|(offset, _)| *offset);
        for (offset, def) in found {
            if self
                .by_location
                .insert((section, offset), self.maps.len())
                .is_some()
            {
                return Err(LoadError::BadMap {
                    map: def.name,
                    reason: format!("two maps declared at .maps offset {offset:#x}"),
                });
            }
            self.maps.push(def);
        }
        Ok(())
    }

    fn collect_legacy_maps(&mut self, elf: &ElfView<'_>, section: usize) -> Result<(), LoadError> {
        let sec = &elf.sections[section];
        let mut symbols: Vec<_> = elf
            .symbols
            .iter()
            .filter(|s| s.section == Some(section) && s.kind == SymbolKind::Other)
            .filter(|s| !s.name.is_empty())
            .collect();
        symbols.sort_by_key(|s| s.value);
        for sym in symbols {
            let bad = |reason: String| LoadError::BadMap {
                map: sym.name.clone(),
                reason,
            };
            let size = if sym.size == 0 {
                LEGACY_DEF_SIZE
            } else {
                sym.size
            };
            if size < LEGACY_DEF_SIZE {
                return Err(bad(format!(
                    "legacy definition is {size} bytes, smaller than struct bpf_map_def (20)"
                )));
            }
            let bytes = sym
                .value
                .checked_add(LEGACY_DEF_SIZE)
                .and_then(|end| sec.data.get(sym.value as usize..end as usize))
                .ok_or_else(|| {
                    bad(format!(
                        "definition at offset {:#x} lies outside section {} ({} bytes)",
                        sym.value,
                        sec.name,
                        sec.data.len()
                    ))
                })?;
            let field = |i: usize| {
                u32::from_le_bytes([
                    bytes[4 * i],
                    bytes[4 * i + 1],
                    bytes[4 * i + 2],
                    bytes[4 * i + 3],
                ])
            };
            let def = MapDef {
                name: sym.name.clone(),
                map_type: ObjectMapType::from_kernel(field(0)),
                key_size: field(1),
                value_size: field(2),
                max_entries: field(3),
                flags: field(4),
                origin: MapOrigin::Legacy,
                initial_value: None,
                read_only: false,
            };
            validate(&def)?;
            self.by_location
                .insert((section, sym.value), self.maps.len());
            self.maps.push(def);
        }
        Ok(())
    }
}

/// Reads one BTF map declaration: a struct whose members encode numbers as
/// `int (*name)[N]` (`__uint`) and types as `T *name` (`__type`).
fn btf_map_def(btf: &Btf<'_>, name: &str, type_id: u32) -> Result<MapDef, LoadError> {
    let bad = |reason: String| LoadError::BadMap {
        map: name.to_string(),
        reason,
    };
    let (_, ty) = btf.resolve(type_id)?;
    let Kind::Struct { members, .. } = &ty.kind else {
        return Err(bad("BTF map declaration is not a struct".into()));
    };
    let mut def = MapDef {
        name: name.to_string(),
        map_type: ObjectMapType::Other(0),
        key_size: 0,
        value_size: 0,
        max_entries: 0,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    };
    let mut have_type = false;
    let mut key_from_type = None;
    let mut value_from_type = None;
    for m in members {
        let field = btf.name(m.name_off)?;
        let number = || -> Result<u32, LoadError> {
            let (_, ptr) = btf.resolve(m.type_id)?;
            let Kind::Ptr { target } = ptr.kind else {
                return Err(bad(format!("field {field} is not declared with __uint()")));
            };
            match btf.resolve(target)?.1.kind {
                Kind::Array { nelems, .. } => Ok(nelems),
                _ => Err(bad(format!("field {field} is not declared with __uint()"))),
            }
        };
        let type_size = || -> Result<u32, LoadError> {
            let (_, ptr) = btf.resolve(m.type_id)?;
            let Kind::Ptr { target } = ptr.kind else {
                return Err(bad(format!("field {field} is not declared with __type()")));
            };
            let size = btf.size_of(target)?;
            u32::try_from(size)
                .map_err(|_| bad(format!("{field} type of {size} bytes is too large")))
        };
        match field.as_ref() {
            "type" => {
                def.map_type = ObjectMapType::from_kernel(number()?);
                have_type = true;
            }
            "max_entries" => def.max_entries = number()?,
            "map_flags" => def.flags = number()?,
            "key_size" => def.key_size = number()?,
            "value_size" => def.value_size = number()?,
            "key" => key_from_type = Some(type_size()?),
            "value" => value_from_type = Some(type_size()?),
            // Attributes that do not change the map's shape.
            "pinning" | "numa_node" | "map_extra" | "values" => {}
            other => return Err(bad(format!("unknown map field `{other}`"))),
        }
    }
    if !have_type {
        return Err(bad("no `type` field".into()));
    }
    for (from_type, explicit, what) in [
        (key_from_type, &mut def.key_size, "key"),
        (value_from_type, &mut def.value_size, "value"),
    ] {
        if let Some(size) = from_type {
            if *explicit != 0 && *explicit != size {
                return Err(bad(format!(
                    "{what}_size {} disagrees with the {what} type's size {size}",
                    *explicit
                )));
            }
            *explicit = size;
        }
    }
    validate(&def)?;
    Ok(def)
}

fn validate(def: &MapDef) -> Result<(), LoadError> {
    let needs_entries = !matches!(def.map_type, ObjectMapType::Other(_));
    if needs_entries && def.max_entries == 0 {
        return Err(LoadError::BadMap {
            map: def.name.clone(),
            reason: "max_entries is 0".into(),
        });
    }
    Ok(())
}
