//! `rdx broadcast`: one transactional update of many hooks on many nodes, from a plan file
//! (see docs/broadcast.md): every node prepared, every hook held, every slot flipped, holds
//! released in the plan's dependency order — or nothing visible anywhere.

use anyhow::Context;
use std::path::PathBuf;

use super::node::StateArgs;

/// Update many nodes and hooks in one transaction, from a YAML plan.
#[derive(clap::Args)]
pub struct Args {
    /// The plan (YAML): nodes, hooks and their dependencies, updates; format in
    /// docs/broadcast.md.
    plan: PathBuf,
    /// Check the plan against every node (hooks, classes, compilation), write nothing.
    #[arg(long)]
    dry_run: bool,
    /// What the intent log's records must survive: `process` (the control plane's death;
    /// enough when every node is shared memory here) or `machine` (fdatasync'ed). Default:
    /// chosen from the nodes' addresses.
    #[arg(long, value_parser = ["process", "machine"])]
    durability: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

/// Environment variable naming a phase (`prepared`, `held`, `decided`, `committed`,
/// `first-flip`, `first-release`) at which `rdx broadcast` and `rdx migrate` kill themselves
/// with SIGKILL: how the tests show that `rdx recover` on another state directory finishes
/// or undoes an update whose control plane died there.
const CRASH_ENV: &str = "RDX_FLEET_CRASH_AT";

/// The phase [`CRASH_ENV`] names, if any.
pub(crate) fn crash_point_from_env() -> Option<rdx_fleet::CrashPoint> {
    std::env::var(CRASH_ENV).ok()?.parse().ok()
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let plan = rdx_fleet::Plan::load(&args.plan)?;
    let state_dir = args
        .state
        .state_dir
        .clone()
        .unwrap_or_else(rdx_control::registry::default_state_dir);
    let opts = rdx_fleet::Options {
        dry_run: args.dry_run,
        durability: args.durability.as_deref().map(|d| match d {
            "machine" => rdx_fleet::intent::Durability::Machine,
            _ => rdx_fleet::intent::Durability::Process,
        }),
        history: Some(args.state.registry()?),
        crash_at: crash_point_from_env(),
        ..rdx_fleet::Options::new(state_dir)
    };
    let report = rdx_fleet::broadcast(&plan, &opts)
        .with_context(|| format!("broadcast of {} failed", args.plan.display()))?;
    for u in &report.unrecorded {
        eprintln!("rdx: the broadcast completed, but the history could not record it: {u}");
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let verb = if report.dry_run {
        "would update"
    } else {
        "updated"
    };
    for u in &report.updates {
        if report.dry_run {
            println!(
                "{verb} {}/{} with {} (class {})",
                u.node, u.hook, u.program, u.class
            );
        } else {
            println!(
                "{verb} {}/{}: version {} -> {} ({}, class {})",
                u.node, u.hook, u.previous_version, u.version, u.program, u.class
            );
        }
    }
    let order: Vec<String> = report.release_order.iter().map(|l| l.join(", ")).collect();
    println!("release order: {}", order.join(" ; "));
    let t = &report.timings;
    if report.dry_run {
        println!("checked in {:.0} us; nothing written", t.check_us);
    } else {
        println!(
            "check {:.0} us, prepare {:.0} us, hold (bubble) {:.1} us of which drain {:.1} us \
             and flip {:.1} us, intent log {:.0} us, total {:.0} us",
            t.check_us, t.prepare_us, t.hold_us, t.drain_us, t.flip_us, t.log_us, t.commit_us
        );
    }
    Ok(())
}
