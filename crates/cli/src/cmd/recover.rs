//! `rdx recover`: finishes or undoes broadcasts whose control plane died, from their intent
//! logs, so that no hook stays held and every node of a broadcast agrees.

use super::node::StateArgs;

/// Finish or roll back interrupted broadcasts (after a control-plane crash).
#[derive(clap::Args)]
pub struct Args {
    /// Also recover logs whose control plane still seems alive (its pid exists).
    #[arg(long)]
    force: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let dir = args
        .state
        .state_dir
        .clone()
        .unwrap_or_else(rdx_control::registry::default_state_dir);
    let done = rdx_fleet::recover(&dir, args.force)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&done)?);
        return Ok(());
    }
    if done.is_empty() {
        println!("nothing to recover");
    }
    for r in &done {
        println!("broadcast {}: {}", r.id, r.outcome.replace('_', " "));
        for a in &r.actions {
            println!("  {a}");
        }
    }
    Ok(())
}
