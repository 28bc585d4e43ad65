//! `rdx detach`: the hook stops running its program (one compare-and-swap); the program stays
//! held in the node so that `rdx rollback` can re-attach it.

use serde::Serialize;

use super::node::{attach, explain_held, StateArgs};

/// Detach the program from a node's hook.
#[derive(clap::Args)]
pub struct Args {
    /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`, `fabric://HOST:PORT?...`).
    #[arg(long)]
    node: String,
    /// Hook name, as the node's EIM spec declares it.
    #[arg(long)]
    hook: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Serialize)]
struct Report {
    node: String,
    hook: String,
    detached_version: u32,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let registry = args.state.registry()?;
    let (node, mut cf) = attach(&registry, &args.node)?;
    let was = cf.detach(&args.hook).map_err(explain_held(&cf, &node))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&Report {
                node,
                hook: args.hook,
                detached_version: was
            })?
        );
    } else if was == 0 {
        println!("{node}/{}: nothing attached", args.hook);
    } else {
        println!(
            "{node}/{}: detached version {was} (still held; `rdx rollback` re-attaches it)",
            args.hook
        );
    }
    Ok(())
}
