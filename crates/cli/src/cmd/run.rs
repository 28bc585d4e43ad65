//! `rdx run`: runs one program of an object in the reference interpreter, in checked mode,
//! and reports `r0` and what the run changed in the maps.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context as _};
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, SkBuff, Vm, XdpMd};
use rdx_bpf::loader::LoadedObject;
use rdx_bpf::maps::MapSet;
use serde::Serialize;

use crate::object_file::{self, hex};

/// Run a program in the reference interpreter (checked mode) and show r0 and map changes.
///
/// Checked mode checks every memory access against the regions the program may touch, so an
/// unverified program that misbehaves stops with an error naming the instruction, never with
/// undefined behaviour. Maps start as the object declares them (global data with its initial
/// contents) and live for the whole command, so the runs of `--repeat N` accumulate in them.
#[derive(clap::Args)]
#[command(after_long_help = DETAILS)]
pub struct Args {
    /// Object file (`clang -O2 -g -target bpf -c prog.c -o prog.o`).
    object: PathBuf,
    /// Program (function) name, or a section holding exactly one program (`--prog xdp`); may
    /// be omitted when the object has exactly one.
    #[arg(long = "prog", value_name = "NAME")]
    program: Option<String>,
    /// Raw context bytes: r1 points to a copy of them, r2 holds their length (raw model).
    #[arg(long, value_name = "FILE", conflicts_with = "packet")]
    ctx: Option<PathBuf>,
    /// Packet bytes, an Ethernet frame for the skb model (served as the kernel's
    /// BPF_PROG_TEST_RUN does for a socket filter), the packet for xdp, the memory for raw.
    #[arg(long, value_name = "FILE")]
    packet: Option<PathBuf>,
    /// What r1 points to. Default: from the section (socket, sk_skb, classifier, tc → skb;
    /// xdp → xdp; anything else → raw).
    #[arg(long, value_enum, value_name = "MODEL")]
    ctx_model: Option<CtxModel>,
    /// Run this many times; maps keep their contents between runs, r0 is the last run's.
    #[arg(long, default_value_t = 1, value_name = "N")]
    repeat: u64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Run natively through rdx's JIT instead of the interpreter, after the verifier accepts
    /// the program as the kernel program type of its section (`xdp`, `socket`); the output is
    /// the same. Programs for an rdx hook (`rdx/<hook>`) are verified against the hook's EIM:
    /// run them with `rdx deploy`.
    #[arg(long)]
    jit: bool,
}

/// The rest of `rdx run --help`: how input becomes context, and what is printed.
const DETAILS: &str = "\
Context models (what r1 points to) follow from the program's section unless --ctx-model
overrides them:

- `skb` (sections `socket`, `sk_skb/*`, `classifier`, `tc`, `tcx/*`, `cgroup_skb/*`): a
  `struct __sk_buff`. `--packet` is an Ethernet frame, presented as the kernel's
  `BPF_PROG_TEST_RUN` presents it to a socket filter: data after the Ethernet header, `len`
  without it, `protocol` from the EtherType.
- `xdp` (sections `xdp`, `xdp.frags`, `xdp/*`): a `struct xdp_md`. `--packet` is the packet
  from its first byte.
- `raw` (anything else: `rdx/<hook>`, ...): `--ctx` or `--packet` are the bytes r1 points to,
  with their length in r2; without input r1 = r2 = 0.

The standard helpers are available: map lookup, update and delete, `ktime_get_ns`,
`trace_printk` (printed as `trace:` lines), `get_prandom_u32` (seeded, reproducible),
`get_smp_processor_id`, `skb_load_bytes`.

Output: the program and model, r0 in decimal and hex, trace lines, and every map entry the
run(s) changed, as hex key and old → new value (with the number when the value is 4 or 8
bytes). With `--repeat N` above 1 it also prints the mean wall time per run, which includes
building the context each run. `--json` prints `program`, `section`, `ctx_model`,
`input_bytes`, `runs`, `r0`, `map_changes[]` (`map`, `key`, `before`, `after`; `null` for an
absent entry) and `trace[]`.";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CtxModel {
    /// `struct __sk_buff` over a packet.
    Skb,
    /// `struct xdp_md` over a packet.
    Xdp,
    /// Plain bytes: r1 = their address, r2 = their length (r1 = r2 = 0 without input).
    Raw,
}

impl std::fmt::Display for CtxModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CtxModel::Skb => "skb",
            CtxModel::Xdp => "xdp",
            CtxModel::Raw => "raw",
        })
    }
}

/// The context model a program's section implies, as libbpf's section names define them.
pub fn model_for_section(section: &str) -> CtxModel {
    let kind = section.split('/').next().unwrap_or(section);
    match kind {
        "socket" | "sk_skb" | "classifier" | "tc" | "tcx" | "cgroup_skb" => CtxModel::Skb,
        "xdp" | "xdp.frags" => CtxModel::Xdp,
        _ => CtxModel::Raw,
    }
}

/// Index of the program called `name`, or else of the only program in section `name` (so
/// `--prog xdp` works on an object with one XDP program); an error lists what there is.
pub fn find_program(loaded: &LoadedObject, name: &str) -> anyhow::Result<usize> {
    let programs = &loaded.object.programs;
    if let Some(i) = programs.iter().position(|p| p.name == name) {
        return Ok(i);
    }
    let in_section: Vec<usize> = (0..programs.len())
        .filter(|&i| programs[i].section == name)
        .collect();
    match in_section[..] {
        [i] => Ok(i),
        [] => bail!(
            "no program or section named {name}; the object has: {}",
            program_list(loaded)
        ),
        _ => bail!(
            "section {name} holds several programs; choose one by name: {}",
            program_list(loaded)
        ),
    }
}

fn program_list(loaded: &LoadedObject) -> String {
    loaded
        .object
        .programs
        .iter()
        .map(|p| format!("{} ({})", p.name, p.section))
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Serialize)]
struct RunReport {
    program: String,
    section: String,
    ctx_model: CtxModel,
    input_bytes: usize,
    runs: u64,
    r0: u64,
    map_changes: Vec<MapChange>,
    trace: Vec<String>,
    #[serde(skip)]
    elapsed_ns: u128,
}

#[derive(Serialize)]
struct MapChange {
    map: String,
    key: String,
    before: Option<String>,
    after: Option<String>,
}

type Snapshot = Vec<BTreeMap<Vec<u8>, Vec<u8>>>;

fn snapshot(maps: &MapSet) -> Snapshot {
    maps.iter()
        .map(|m| {
            m.keys()
                .into_iter()
                .filter_map(|k| m.lookup(&k).map(|v| (k, v)))
                .collect()
        })
        .collect()
}

fn diff(maps: &MapSet, before: &Snapshot, after: &Snapshot) -> Vec<MapChange> {
    let mut changes = Vec::new();
    for ((map, b), a) in maps.iter().zip(before).zip(after) {
        let keys: std::collections::BTreeSet<&Vec<u8>> = b.keys().chain(a.keys()).collect();
        for key in keys {
            let (old, new) = (b.get(key), a.get(key));
            if old != new {
                changes.push(MapChange {
                    map: map.name().to_string(),
                    key: hex(key),
                    before: old.map(|v| hex(v)),
                    after: new.map(|v| hex(v)),
                });
            }
        }
    }
    changes
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    let loaded = object_file::load(&args.object)?;
    let index = match &args.program {
        Some(name) => find_program(&loaded, name)?,
        None if loaded.object.programs.len() == 1 => 0,
        None if loaded.object.programs.is_empty() => {
            bail!("{} contains no programs", args.object.display())
        }
        None => bail!(
            "{} has several programs; choose one with --prog NAME: {}",
            args.object.display(),
            program_list(&loaded)
        ),
    };
    let program = &loaded.object.programs[index];
    let model = args
        .ctx_model
        .unwrap_or_else(|| model_for_section(&program.section));
    let read = |path: &PathBuf| {
        std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
    };
    if args.ctx.is_some() && model != CtxModel::Raw {
        bail!(
            "--ctx gives raw context bytes, but program {} runs with the {model} model \
             (from section {}); pass the packet with --packet, or force --ctx-model raw",
            program.name,
            program.section
        );
    }
    let input = match (&args.ctx, &args.packet) {
        (Some(path), _) | (None, Some(path)) => Some(read(path)?),
        (None, None) => None,
    };

    let maps = MapSet::new(&loaded.object.maps)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("cannot create the maps of {}", args.object.display()))?;
    let vm = Vm::new(&program.insns, &maps, &Helpers::standard(), Config::default())
        .with_context(|| format!("cannot prepare program {}", program.name))?;

    let mut jit = if args.jit {
        Some(crate::cmd::compile::JitRunner::new(&loaded, index, &maps)?)
    } else {
        None
    };
    let before = snapshot(&maps);
    let mut r0 = 0;
    let started = Instant::now();
    for _ in 0..args.repeat {
        r0 = match jit.as_mut() {
            Some(jit) => jit.run(model, input.as_deref()),
            None => run_once(&vm, model, input.as_deref()),
        }
            .with_context(|| format!("program {} failed", program.name))?;
    }
    let elapsed_ns = started.elapsed().as_nanos();
    let after = snapshot(&maps);

    let report = RunReport {
        program: program.name.clone(),
        section: program.section.clone(),
        ctx_model: model,
        input_bytes: input.as_ref().map_or(0, Vec::len),
        runs: args.repeat,
        r0,
        map_changes: diff(&maps, &before, &after),
        trace: vm.take_trace(),
        elapsed_ns,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(())
}

fn run_once(vm: &Vm, model: CtxModel, input: Option<&[u8]>) -> anyhow::Result<u64> {
    let r0 = match (model, input) {
        (CtxModel::Skb, Some(frame)) => {
            let mut skb = SkBuff::socket_filter_test_run(frame).with_context(|| {
                format!(
                    "the skb model takes an Ethernet frame; {} bytes is shorter than its \
                     14-byte header",
                    frame.len()
                )
            })?;
            vm.run_checked(Input::Context(&mut skb))?
        }
        (CtxModel::Skb, None) => vm.run_checked(Input::Context(&mut SkBuff::new(Vec::new())))?,
        (CtxModel::Xdp, packet) => {
            let mut xdp = XdpMd::new(packet.unwrap_or_default().to_vec());
            vm.run_checked(Input::Context(&mut xdp))?
        }
        // A fresh copy per run: the program may write its input.
        (CtxModel::Raw, Some(bytes)) => vm.run_checked(Input::Bytes(&mut bytes.to_vec()))?,
        (CtxModel::Raw, None) => vm.run_checked(Input::Empty)?,
    };
    Ok(r0)
}

fn print_text(r: &RunReport) {
    let input = match r.input_bytes {
        0 => "no input".to_string(),
        n => format!("{n} input bytes"),
    };
    println!(
        "program {} (section {}), context {}, {}",
        r.program, r.section, r.ctx_model, input
    );
    let per_run = r.elapsed_ns / r.runs as u128;
    if r.runs > 1 {
        println!("runs: {} ({per_run} ns per run)", r.runs);
    }
    println!("r0 = {} ({:#x})", r.r0, r.r0);
    for line in &r.trace {
        println!("trace: {line}");
    }
    if r.map_changes.is_empty() {
        println!("maps: unchanged");
        return;
    }
    println!("maps changed:");
    for c in &r.map_changes {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".into());
        let number = |v: &Option<String>| v.as_deref().and_then(le_number);
        let numbers = match (number(&c.before), number(&c.after)) {
            (Some(b), Some(a)) => format!("  [{b} -> {a}]"),
            (None, Some(a)) if c.before.is_none() => format!("  [new: {a}]"),
            _ => String::new(),
        };
        println!(
            "  {}[{}]: {} -> {}{numbers}",
            c.map,
            c.key,
            show(&c.before),
            show(&c.after)
        );
    }
}

/// A 4- or 8-byte little-endian value, as a number: map counters read better that way.
fn le_number(hex: &str) -> Option<u64> {
    if hex.len() != 8 && hex.len() != 16 {
        return None;
    }
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect::<Option<_>>()?;
    let mut b = [0u8; 8];
    b[..bytes.len()].copy_from_slice(&bytes);
    Some(u64::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_names_pick_the_context_model() {
        assert_eq!(model_for_section("socket"), CtxModel::Skb);
        assert_eq!(model_for_section("sk_skb/stream_verdict"), CtxModel::Skb);
        assert_eq!(model_for_section("tc"), CtxModel::Skb);
        assert_eq!(model_for_section("xdp"), CtxModel::Xdp);
        assert_eq!(model_for_section("xdp.frags/devmap"), CtxModel::Xdp);
        assert_eq!(model_for_section("rdx/request"), CtxModel::Raw);
        assert_eq!(model_for_section("kprobe/do_sys_open"), CtxModel::Raw);
    }

    #[test]
    fn counters_print_as_numbers() {
        assert_eq!(le_number("e803000000000000"), Some(1000));
        assert_eq!(le_number("07000000"), Some(7));
        assert_eq!(le_number("0700"), None);
    }
}
