//! `rdx rollback`: republish an earlier version still held in the node's code arena (the
//! previous one by default), with one compare-and-swap.

use rdx_control::registry::HistoryAction;

use super::node::{attach, explain_held, StateArgs};

/// Roll a hook back to an earlier version.
#[derive(clap::Args)]
pub struct Args {
    /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`, `fabric://HOST:PORT?...`).
    #[arg(long)]
    node: String,
    /// Hook name, as the node's EIM spec declares it.
    #[arg(long)]
    hook: String,
    /// Version to go back to (default: the newest one older than the active version).
    #[arg(long, value_name = "VERSION")]
    to: Option<u32>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let registry = args.state.registry()?;
    let (node, mut cf) = attach(&registry, &args.node)?;
    let p = cf
        .rollback(&args.hook, args.to)
        .map_err(explain_held(&cf, &node))?;
    // The program of that version, as the history entry of the rollback names it (from the
    // deploy that first published it).
    let program = registry
        .history(&node, Some(&args.hook))?
        .pop()
        .filter(|e| e.action == HistoryAction::Rollback && e.version == p.version)
        .map(|e| e.program)
        .filter(|program| !program.is_empty());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
    } else {
        println!(
            "{node}/{}: version {} active (was {}){}",
            args.hook,
            p.version,
            if p.previous_version == 0 {
                "detached".to_string()
            } else {
                p.previous_version.to_string()
            },
            program
                .map(|program| format!(", program {program}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}
