//! `rdx inspect`: what an object contains once loaded — programs, maps, the relocations the
//! loader applied and a disassembly of each linked program.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

use rdx_bpf::disasm::{self, InsnText};
use rdx_bpf::isa::{ImmKind, Insn};
use rdx_bpf::loader::{LoadedObject, ProgramLayout, RelocationKind};
use rdx_bpf::program::{MapDef, MapOrigin, Program};
use serde::Serialize;

use crate::object_file::{self, map_type_name};

/// Show the programs, maps, relocations and disassembly of an eBPF object file.
///
/// The object is loaded as every other stage sees it (`rdx run`, `rdx verify`, `rdx deploy`).
#[derive(clap::Args)]
#[command(after_long_help = DETAILS)]
pub struct Args {
    /// Object file (`clang -O2 -g -target bpf -c prog.c -o prog.o`).
    object: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Only this program (all programs if omitted).
    #[arg(long = "prog", value_name = "NAME")]
    program: Option<String>,
}

/// The rest of `rdx inspect --help`: what is printed.
const DETAILS: &str = "\
It prints:

- the programs: name, section, instruction slots (an `lddw` counts two), and the
  subprograms linked into each;
- the maps: index, name, type, key and value sizes, max entries, flags and origin (BTF
  `.maps`, legacy `maps`, global data, read-only for `.rodata`);
- for each program (or only `--prog NAME`), the relocations the loader applied (slot, what
  it now refers to, the ELF symbol) and a disassembly in `llvm-objdump` syntax, with a
  `<function>:` header where each linked function starts.

`--json` prints the same as one JSON document: `file`, `license`, `maps[]` (`index`, `name`,
`type`, `key_size`, `value_size`, `max_entries`, `flags`, `origin`, `read_only`) and
`programs[]` (`name`, `section`, `insns`, `functions[]`, `relocations[]` with `insn`,
`symbol`, `kind` = `map` | `global_data` | `call` | `func_addr` and `map`/`offset`/`function`,
`disassembly[]` with `pc` and `text`).";

pub fn run(args: Args) -> anyhow::Result<()> {
    let loaded = object_file::load(&args.object)?;
    let selected: Vec<usize> = match &args.program {
        None => (0..loaded.object.programs.len()).collect(),
        Some(name) => vec![crate::cmd::run::find_program(&loaded, name)?],
    };
    if args.json {
        let report = Report::new(&args.object, &loaded, &selected);
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", text(&args.object, &loaded, &selected));
    }
    Ok(())
}

#[derive(Serialize)]
struct Report {
    file: String,
    license: Option<String>,
    maps: Vec<MapReport>,
    programs: Vec<ProgramReport>,
}

#[derive(Serialize)]
struct MapReport {
    index: usize,
    name: String,
    #[serde(rename = "type")]
    map_type: String,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    flags: u32,
    origin: &'static str,
    read_only: bool,
}

#[derive(Serialize)]
struct ProgramReport {
    name: String,
    section: String,
    /// Instruction slots (an `lddw` takes two).
    insns: usize,
    functions: Vec<FunctionReport>,
    relocations: Vec<RelocationReport>,
    disassembly: Vec<LineReport>,
}

#[derive(Serialize)]
struct FunctionReport {
    name: String,
    section: String,
    start: usize,
    len: usize,
}

#[derive(Serialize)]
struct RelocationReport {
    insn: usize,
    symbol: String,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    map: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function: Option<String>,
}

#[derive(Serialize)]
struct LineReport {
    pc: usize,
    text: String,
}

fn origin_name(origin: MapOrigin) -> &'static str {
    match origin {
        MapOrigin::Btf => "btf",
        MapOrigin::Legacy => "legacy",
        MapOrigin::GlobalData => "global_data",
    }
}

fn map_names(maps: &[MapDef]) -> Vec<String> {
    maps.iter().map(|m| m.name.clone()).collect()
}

impl Report {
    fn new(path: &std::path::Path, loaded: &LoadedObject, selected: &[usize]) -> Self {
        let obj = &loaded.object;
        let names = map_names(&obj.maps);
        Report {
            file: path.display().to_string(),
            license: obj.license.clone(),
            maps: obj
                .maps
                .iter()
                .enumerate()
                .map(|(index, m)| MapReport {
                    index,
                    name: m.name.clone(),
                    map_type: map_type_name(m.map_type),
                    key_size: m.key_size,
                    value_size: m.value_size,
                    max_entries: m.max_entries,
                    flags: m.flags,
                    origin: origin_name(m.origin),
                    read_only: m.read_only,
                })
                .collect(),
            programs: selected
                .iter()
                .map(|&i| {
                    let (p, layout) = (&obj.programs[i], &loaded.layouts[i]);
                    ProgramReport {
                        name: p.name.clone(),
                        section: p.section.clone(),
                        insns: p.insns.len(),
                        functions: layout
                            .functions
                            .iter()
                            .map(|f| FunctionReport {
                                name: f.name.clone(),
                                section: f.section.clone(),
                                start: f.start,
                                len: f.len,
                            })
                            .collect(),
                        relocations: layout
                            .relocations
                            .iter()
                            .map(|r| {
                                let (kind, map, offset, function) = match &r.kind {
                                    RelocationKind::Map { map } => ("map", Some(*map), None, None),
                                    RelocationKind::GlobalData { map, offset } => {
                                        ("global_data", Some(*map), Some(*offset), None)
                                    }
                                    RelocationKind::Call { function } => {
                                        ("call", None, None, Some(function.clone()))
                                    }
                                    RelocationKind::FuncAddr { function } => {
                                        ("func_addr", None, None, Some(function.clone()))
                                    }
                                };
                                RelocationReport {
                                    insn: r.insn,
                                    symbol: r.symbol.clone(),
                                    kind,
                                    map,
                                    offset,
                                    function,
                                }
                            })
                            .collect(),
                        disassembly: listing(p, &names)
                            .into_iter()
                            .map(|(pc, text)| LineReport { pc, text })
                            .collect(),
                    }
                })
                .collect(),
        }
    }
}

/// `(slot, text)` for every instruction, `lddw` second slots folded into their first.
fn listing(p: &Program, map_names: &[String]) -> Vec<(usize, String)> {
    p.insns
        .iter()
        .enumerate()
        .filter(|(_, insn)| **insn != Insn::LoadImm64Hi)
        .map(|(pc, insn)| {
            let text = InsnText {
                insn,
                pc,
                map_names,
            }
            .to_string();
            (pc, text)
        })
        .collect()
}

fn text(path: &std::path::Path, loaded: &LoadedObject, selected: &[usize]) -> String {
    let obj = &loaded.object;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} program{}, {} map{}, license {}",
        path.display(),
        obj.programs.len(),
        if obj.programs.len() == 1 { "" } else { "s" },
        obj.maps.len(),
        if obj.maps.len() == 1 { "" } else { "s" },
        obj.license
            .as_deref()
            .map_or("(none)".to_string(), |l| format!("\"{l}\""))
    );

    let _ = writeln!(out, "\nprograms:");
    let _ = writeln!(out, "  {:<20} {:<20} {:>6}  linked functions", "name", "section", "insns");
    for (p, layout) in obj.programs.iter().zip(&loaded.layouts) {
        let subs: Vec<&str> = layout.functions[1..].iter().map(|f| f.name.as_str()).collect();
        let _ = writeln!(
            out,
            "  {:<20} {:<20} {:>6}  {}",
            p.name,
            p.section,
            p.insns.len(),
            if subs.is_empty() { "-".to_string() } else { subs.join(", ") }
        );
    }

    let _ = writeln!(out, "\nmaps:");
    if obj.maps.is_empty() {
        let _ = writeln!(out, "  (none)");
    } else {
        let _ = writeln!(
            out,
            "  {:>3}  {:<20} {:<13} {:>5} {:>6} {:>8} {:>6}  origin",
            "#", "name", "type", "key", "value", "entries", "flags"
        );
        for (i, m) in obj.maps.iter().enumerate() {
            let origin = match m.origin {
                MapOrigin::Btf => "BTF (.maps)",
                MapOrigin::Legacy => "legacy (maps)",
                MapOrigin::GlobalData if m.read_only => "global data, read-only",
                MapOrigin::GlobalData => "global data",
            };
            let _ = writeln!(
                out,
                "  {:>3}  {:<20} {:<13} {:>5} {:>6} {:>8} {:>#6x}  {}",
                i,
                m.name,
                map_type_name(m.map_type),
                m.key_size,
                m.value_size,
                m.max_entries,
                m.flags,
                origin
            );
        }
    }

    let names = map_names(&obj.maps);
    for &i in selected {
        let (p, layout) = (&obj.programs[i], &loaded.layouts[i]);
        let _ = writeln!(out, "\nrelocations in {}:", p.name);
        if layout.relocations.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for r in &layout.relocations {
            let what = match &r.kind {
                RelocationKind::Map { map } => format!("map #{map} {}", names[*map]),
                RelocationKind::GlobalData { map, offset } => {
                    format!("global data #{map} {} + {offset}", names[*map])
                }
                RelocationKind::Call { function } => format!("call {function}"),
                RelocationKind::FuncAddr { function } => format!("address of {function}"),
            };
            let _ = writeln!(out, "  {:>6}: {:<40} (symbol {})", r.insn, what, r.symbol);
        }
        let _ = writeln!(out, "\ndisassembly of {} (section {}):", p.name, p.section);
        out.push_str(&disassembly(p, layout, &names));
    }
    out
}

/// An objdump-style listing with a `<function>:` header where each linked function starts.
fn disassembly(p: &Program, layout: &ProgramLayout, map_names: &[String]) -> String {
    let targets: BTreeSet<i64> = p
        .insns
        .iter()
        .enumerate()
        .filter_map(|(pc, i)| {
            i.jump_target(pc).or_else(|| i.call_target(pc)).or(match *i {
                // Callbacks passed to helpers: `lddw rX, func` is relative like a call.
                Insn::LoadImm64 {
                    kind: ImmKind::Func,
                    imm_lo,
                    ..
                } => Some(pc as i64 + 1 + imm_lo as i64),
                _ => None,
            })
        })
        .collect();
    let mut out = String::new();
    for (pc, text) in listing(p, map_names) {
        if let Some(f) = layout.functions.iter().find(|f| f.start == pc) {
            let from = if f.section == p.section {
                String::new()
            } else {
                format!(" (from {})", f.section)
            };
            let _ = writeln!(out, "<{}>{from}:", f.name);
        }
        if targets.contains(&(pc as i64)) {
            let _ = writeln!(out, "{}:", disasm::label(pc as i64));
        }
        let _ = writeln!(out, "{pc:>6}:\t{text}");
    }
    out
}
