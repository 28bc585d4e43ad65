//! `rdx rollback`: republish an earlier version still held in the node's code arena (the
//! previous one by default), with one compare-and-swap.

use rdx_control::registry::HistoryEntry;

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
    // The program name of that version, from the history that deployed it.
    let deployed = registry
        .history(&node, Some(&args.hook))?
        .into_iter()
        .rev()
        .find(|e| e.action == "deploy" && e.version == p.version);
    registry.record(&HistoryEntry {
        id: 0,
        node: node.clone(),
        hook: args.hook.clone(),
        action: "rollback".into(),
        version: p.version,
        previous_version: p.previous_version,
        program: deployed
            .as_ref()
            .map(|e| e.program.clone())
            .unwrap_or_default(),
        object: deployed
            .as_ref()
            .map(|e| e.object.clone())
            .unwrap_or_default(),
        class: deployed
            .as_ref()
            .map(|e| e.class.clone())
            .unwrap_or_default(),
        artifact: deployed
            .as_ref()
            .map(|e| e.artifact.clone())
            .unwrap_or_default(),
        at_ms: rdx_control::lease::now_ms(),
        generation: p.generation,
    })?;
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
            deployed
                .map(|e| format!(", program {}", e.program))
                .unwrap_or_default()
        );
    }
    Ok(())
}
