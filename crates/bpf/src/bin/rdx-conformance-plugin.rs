//! A plugin for the public bpf_conformance runner (`bpf_conformance_runner --plugin_path ...`).
//!
//! Contract of the runner: the program arrives on stdin as hex bytes (`b7 00 00 00 ...`, or an
//! ELF object in hex when `--elf` is given), the input memory as hex bytes in the first
//! argument (absent when the vector has no memory); the plugin prints `r0` in hex on stdout and
//! exits 0, or prints an error on stderr and exits nonzero.
//!
//! Tier selection: `--tier checked` (default) or `--tier unchecked` runs rdx's interpreter in
//! that mode. The unchecked tier is guarded: the plugin has no verifier, so it first runs the
//! program in checked mode on a copy of the input and only then runs it unchecked (runs are
//! deterministic, so the unchecked run makes exactly the accesses that were just checked).
//! Helper 5 is the suite's "unwind" helper.

use std::io::Read;
use std::process::ExitCode;

use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Vm};
use rdx_bpf::maps::MapSet;

fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    text.split_whitespace()
        .map(|t| {
            u8::from_str_radix(t.trim_start_matches("0x"), 16)
                .map_err(|_| format!("invalid hex byte `{t}`"))
        })
        .collect()
}

fn run() -> Result<u64, String> {
    let mut memory: Option<Vec<u8>> = None;
    let mut elf = false;
    let mut checked = true;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--elf" => elf = true,
            "--tier" => match args.next().as_deref() {
                Some("checked") => checked = true,
                Some("unchecked") => checked = false,
                other => return Err(format!("unknown tier {other:?} (checked, unchecked)")),
            },
            "-h" | "--help" => {
                println!(
                    "usage: rdx-conformance-plugin [MEMORY_HEX] [--elf] [--tier checked|unchecked] < PROGRAM_HEX"
                );
                std::process::exit(0);
            }
            hex if memory.is_none() => memory = Some(parse_hex(hex)?),
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    let mut stdin = String::new();
    std::io::stdin()
        .read_to_string(&mut stdin)
        .map_err(|e| format!("reading stdin: {e}"))?;
    let bytes = parse_hex(&stdin)?;
    let (insns, maps) = if elf {
        let object = rdx_bpf::loader::load(&bytes).map_err(|e| e.to_string())?;
        let program = object
            .programs
            .first()
            .ok_or("the object has no program")?
            .insns
            .clone();
        let maps = MapSet::new(&object.maps).map_err(|e| e.to_string())?;
        (program, maps)
    } else {
        (
            rdx_bpf::isa::decode_bytes(&bytes).map_err(|e| e.to_string())?,
            MapSet::default(),
        )
    };
    let vm = Vm::new(
        &insns,
        &maps,
        &Helpers::conformance(),
        Config {
            max_steps: 1 << 24,
            ..Config::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let mut mem = memory.clone().unwrap_or_default();
    let mem_copy = mem.clone();
    let memory_present = memory.is_some();
    let input = match memory {
        Some(_) => Input::Bytes(&mut mem),
        None => Input::Empty,
    };
    if checked {
        return vm.run_checked(input).map_err(|e| e.to_string());
    }
    let mut guard_mem = mem_copy;
    let guard_input = if memory_present {
        Input::Bytes(&mut guard_mem)
    } else {
        Input::Empty
    };
    vm.run_checked(guard_input).map_err(|e| e.to_string())?;
    // SAFETY: the same program just completed in checked mode on an identical input; runs are
    // deterministic (no helper with effects outside the run is available here), so this run
    // makes exactly the accesses that were checked.
    unsafe { vm.run_unchecked(input) }.map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    match run() {
        Ok(r0) => {
            println!("{r0:x}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
