//! `rdx xcall`: cross-sandbox calls from the command line — list an address plan's sandboxes
//! and exports, and deploy an exported entry (see docs/xcall.md).

use anyhow::Context;
use rdx_control::{create_codeflow, AttachOptions, Extension};
use rdx_xcall_plan::plan::{Plan, EXPORT_SERIALIZED};
use serde::Serialize;
use std::path::PathBuf;

/// Cross-sandbox calls: inspect an address plan, deploy exported entries.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// List the plan's sandboxes, their slot addresses and exports with their call targets.
    Plan {
        /// The plan file (e.g. /dev/shm/rdx-plan-demo).
        plan: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Verify, compile (helpers through the table) and publish an exported entry.
    Deploy {
        /// The plan file (e.g. /dev/shm/rdx-plan-demo).
        #[arg(long)]
        plan: PathBuf,
        /// Sandbox name in the plan.
        #[arg(long)]
        service: String,
        /// Exported entry.
        #[arg(long)]
        entry: String,
        /// eBPF object file.
        object: PathBuf,
        /// Program in the object (default: the only one).
        #[arg(long)]
        prog: Option<String>,
        /// EIM class (default: the only one bound to the entry's hook).
        #[arg(long)]
        class: Option<String>,
    },
}

#[derive(Serialize)]
struct ExportRow {
    name: String,
    index: u16,
    target: String,
    max_args: u32,
    serialized: bool,
}

#[derive(Serialize)]
struct SlotRow {
    slot: u16,
    name: String,
    pid: u64,
    address: String,
    region: String,
    exports: Vec<ExportRow>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.action {
        Action::Plan { plan, json } => {
            let p = Plan::open(&plan)?;
            let rows: Vec<SlotRow> = p
                .slots()
                .into_iter()
                .map(|s| SlotRow {
                    slot: s.slot,
                    name: s.name,
                    pid: s.pid,
                    address: format!("{:#x}", s.address),
                    region: s.path.display().to_string(),
                    exports: s
                        .exports
                        .iter()
                        .map(|x| ExportRow {
                            name: x.name.clone(),
                            index: x.index,
                            target: format!(
                                "{:#x}",
                                rdx_xcall_plan::Target::new(s.slot, x.index).encode()
                            ),
                            max_args: x.max_args,
                            serialized: x.flags & EXPORT_SERIALIZED != 0,
                        })
                        .collect(),
                })
                .collect();
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(());
            }
            let spec = p.spec();
            println!(
                "plan {}: {} slots of {:#x} bytes from {:#x}",
                plan.display(),
                spec.slots,
                spec.slot_size,
                spec.base
            );
            for r in rows {
                println!(
                    "slot {:>2}  {:<16} pid {:<8} at {}  {}",
                    r.slot, r.name, r.pid, r.address, r.region
                );
                for x in r.exports {
                    println!(
                        "          export {:<16} target {}  args <= {} bytes{}",
                        x.name,
                        x.target,
                        x.max_args,
                        if x.serialized { "  serialised" } else { "" }
                    );
                }
            }
            Ok(())
        }
        Action::Deploy {
            plan,
            service,
            entry,
            object,
            prog,
            class,
        } => {
            let p = Plan::open(&plan)?;
            let s = p.find(&service)?;
            let bytes =
                std::fs::read(&object).with_context(|| format!("reading {}", object.display()))?;
            let obj = rdx_bpf::loader::load(&bytes)
                .with_context(|| format!("loading {}", object.display()))?;
            let ext = Extension::from_object(&obj, prog.as_deref())?;
            let address = format!("shm:{}", s.path.display());
            let mut cf = create_codeflow(&address, AttachOptions::default())?;
            let published =
                rdx_xcall_control::deploy_export(&mut cf, &entry, &ext, class.as_deref())?;
            let target = p.target(&service, &entry)?;
            println!(
                "{service}.{entry}: version {} live (previous {}), target {:#x}",
                published.version,
                published.previous_version,
                target.encode()
            );
            Ok(())
        }
    }
}
