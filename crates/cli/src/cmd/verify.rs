//! `rdx verify`: runs the verifier on the programs of an object file, against an EIM hook and
//! extension class or, without `--eim`, against the kernel-compatible program type.

use std::path::PathBuf;

use anyhow::{bail, Context as _};
use rdx_verifier::{format_report, EimSpec, KernelProgType, LogLevel, VerifyOptions};
use serde::Serialize;

use crate::object_file;

/// Verify the programs of an eBPF object: safety, and the capabilities of an EIM class.
#[derive(clap::Args)]
pub struct Args {
    /// Object file (`clang -O2 -g -target bpf -c prog.c -o prog.o`).
    object: PathBuf,
    /// EIM spec (YAML) of the target host; requires --hook and --class.
    #[arg(long, value_name = "SPEC.yaml", requires_all = ["hook", "class"])]
    eim: Option<PathBuf>,
    /// Hook of the EIM spec the program is for.
    #[arg(long)]
    hook: Option<String>,
    /// Extension class the program is verified under.
    #[arg(long)]
    class: Option<String>,
    /// Kernel-compatible program type without --eim: `xdp` or `socket_filter` (default: from
    /// the program's section).
    #[arg(long = "kernel-type", value_name = "TYPE", conflicts_with = "eim")]
    kernel_type: Option<String>,
    /// Only this program (all programs if omitted).
    #[arg(long = "prog", value_name = "NAME")]
    program: Option<String>,
    /// Print the full verification log (every instruction with its abstract state).
    #[arg(long)]
    log: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Outcome {
    program: String,
    accepted: bool,
    worst_case_insns: Option<u64>,
    needs_budget: Option<bool>,
    max_stack_depth: Option<u32>,
    helpers_used: Vec<i32>,
    processed_insns: Option<u64>,
    rule: Option<String>,
    pc: Option<usize>,
    insn: Option<String>,
    message: Option<String>,
    state: Option<String>,
    log: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let loaded = object_file::load(&args.object)?;
    let spec = match &args.eim {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            Some(
                EimSpec::from_yaml(&text)
                    .with_context(|| format!("invalid EIM spec {}", path.display()))?,
            )
        }
        None => None,
    };
    if loaded.object.programs.is_empty() {
        bail!(
            "{} has no program entry: every function is in `.text`, which holds subprograms \
             that run only when a program calls them; give the entry function a section of \
             its own, e.g. SEC(\"rdx/<hook>\") or SEC(\"xdp\")",
            args.object.display()
        );
    }
    let selected: Vec<usize> = match &args.program {
        None => (0..loaded.object.programs.len()).collect(),
        Some(name) => vec![crate::cmd::run::find_program(&loaded, name)?],
    };
    let log = if args.log {
        LogLevel::Verbose
    } else {
        LogLevel::Off
    };
    let mut outcomes = Vec::new();
    let mut rejected = 0;
    for i in selected {
        let prog = &loaded.object.programs[i];
        let opts = match &spec {
            Some(spec) => {
                let (hook, class) = (args.hook.as_deref().unwrap_or_default(), args.class.as_deref().unwrap_or_default());
                VerifyOptions::eim(spec, hook, class)?
            }
            None => {
                let ty = match args.kernel_type.as_deref() {
                    Some("xdp") => KernelProgType::Xdp,
                    Some("socket_filter" | "socket") => KernelProgType::SocketFilter,
                    Some(other) => bail!("unknown kernel program type {other:?} (expected xdp or socket_filter)"),
                    None => KernelProgType::from_section(&prog.section).with_context(|| {
                        format!(
                            "program {} is in section {:?}: pass --eim/--hook/--class, or --kernel-type",
                            prog.name, prog.section
                        )
                    })?,
                };
                VerifyOptions::kernel(ty)
            }
        }
        .with_log(log);
        let result = rdx_verifier::verify(prog, &loaded.object.maps, &opts);
        if result.is_err() {
            rejected += 1;
        }
        if args.json {
            outcomes.push(match &result {
                Ok(v) => Outcome {
                    program: prog.name.clone(),
                    accepted: true,
                    worst_case_insns: v.worst_case_insns,
                    needs_budget: Some(v.needs_budget),
                    max_stack_depth: Some(v.max_stack_depth),
                    helpers_used: v.helpers_used.iter().copied().collect(),
                    processed_insns: Some(v.processed_insns),
                    rule: None,
                    pc: None,
                    insn: None,
                    message: None,
                    state: None,
                    log: v.log.clone(),
                },
                Err(e) => Outcome {
                    program: prog.name.clone(),
                    accepted: false,
                    worst_case_insns: None,
                    needs_budget: None,
                    max_stack_depth: None,
                    helpers_used: Vec::new(),
                    processed_insns: None,
                    rule: Some(e.rule.id().to_string()),
                    pc: e.pc,
                    insn: e.insn.clone(),
                    message: Some(e.message.clone()),
                    state: e.state.clone(),
                    log: e.log.clone(),
                },
            });
        } else {
            println!("{}: {}", prog.name, format_report(&result).trim_end());
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcomes)?);
    }
    if rejected > 0 {
        bail!("{rejected} program(s) rejected by the verifier");
    }
    Ok(())
}
