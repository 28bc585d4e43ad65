//! `rdx migrate`: moves a hook's program with its XState contents from one node to another
//! (a scale-out replica) so that no update is lost (see docs/broadcast.md).

use anyhow::Context as _;
use rdx_control::registry::{HistoryAction, HistoryEntry};
use rdx_control::Extension;
use rdx_fleet::plan::NodeSpec;
use std::path::PathBuf;

use super::node::StateArgs;

/// Move a hook's program and its maps' contents from one node to another.
#[derive(clap::Args)]
pub struct Args {
    /// Object file of the program the source runs (default: the one its history deployed).
    object: Option<PathBuf>,
    /// Program in the object (default: its only one, or the history's).
    #[arg(long, value_name = "NAME")]
    prog: Option<String>,
    /// Node the program leaves (registered name or address).
    #[arg(long, value_name = "NODE")]
    from: String,
    /// Node the program moves to (registered name or address).
    #[arg(long, value_name = "NODE")]
    to: String,
    /// Hook whose program moves (the same hook on both nodes).
    #[arg(long)]
    hook: String,
    /// Class of the target's EIM spec (default: the only class bound to the hook).
    #[arg(long)]
    class: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let registry = args.state.registry()?;
    let from = registry.node(&args.from)?;
    let to = registry.node(&args.to)?;
    let (object, prog) = match args.object {
        Some(o) => (o, args.prog),
        None => {
            let cf = rdx_control::create_codeflow(&from.address, Default::default())
                .with_context(|| format!("cannot attach to node {}", from.name))?;
            let active = cf
                .versions_readonly(&args.hook)?
                .into_iter()
                .find(|v| v.active)
                .with_context(|| format!("{}/{} runs nothing", from.name, args.hook))?;
            let deployed = registry
                .history(&from.name, Some(&args.hook))?
                .into_iter()
                .rev()
                .find(|e| e.action == HistoryAction::Deploy && e.version == active.version)
                .with_context(|| {
                    format!(
                        "no deploy of version {} of {}/{} in the history: name the object file",
                        active.version, from.name, args.hook
                    )
                })?;
            (
                PathBuf::from(deployed.object),
                args.prog.or(Some(deployed.program)),
            )
        }
    };
    let bytes =
        std::fs::read(&object).with_context(|| format!("cannot read {}", object.display()))?;
    let loaded = rdx_bpf::loader::load(&bytes)
        .with_context(|| format!("cannot load {}", object.display()))?;
    let ext = Extension::from_object(&loaded, prog.as_deref())?;
    let state_dir = args
        .state
        .state_dir
        .clone()
        .unwrap_or_else(rdx_control::registry::default_state_dir);
    let report = rdx_fleet::migrate::migrate(
        &NodeSpec {
            name: from.name.clone(),
            address: from.address.clone(),
        },
        &NodeSpec {
            name: to.name.clone(),
            address: to.address.clone(),
        },
        &args.hook,
        &ext,
        args.class.as_deref(),
        &rdx_fleet::Options {
            crash_at: super::broadcast::crash_point_from_env(),
            ..rdx_fleet::Options::new(state_dir)
        },
    )
    .with_context(|| {
        format!(
            "migration of {}/{} to {} failed",
            from.name, args.hook, to.name
        )
    })?;
    let now = rdx_control::lease::now_ms();
    // The migration's CodeFlows are fleet's: the command records both ends itself.
    let entry = |node: &str, action: HistoryAction, version: u32, previous: u32| HistoryEntry {
        id: 0,
        node: node.into(),
        hook: args.hook.clone(),
        action,
        version,
        previous_version: previous,
        program: ext.name().to_string(),
        object: object.display().to_string(),
        class: args.class.clone().unwrap_or_default(),
        artifact: String::new(),
        at_ms: now,
        generation: 0,
    };
    registry.record(&entry(
        &to.name,
        HistoryAction::Deploy,
        report.target_version,
        0,
    ))?;
    registry.record(&entry(
        &from.name,
        HistoryAction::Detach,
        0,
        report.source_version,
    ))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "moved {} ({}) from {} version {} to {} version {}",
        args.hook, report.program, from.name, report.source_version, to.name, report.target_version
    );
    for m in &report.maps {
        println!(
            "  map {}: {} entries (id {} -> {})",
            m.name, m.entries, m.source_id, m.target_id
        );
    }
    let t = &report.timings;
    println!(
        "check {:.0} us, prepare {:.0} us, source frozen {:.0} us (copy {:.0} us), total {:.0} us",
        t.check_us, t.prepare_us, t.freeze_us, t.copy_us, t.total_us
    );
    Ok(())
}
