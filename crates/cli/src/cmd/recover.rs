//! `rdx recover`: finishes or undoes broadcasts and migrations whose control plane died,
//! from the update records the nodes hold (any machine that reaches them) and this state
//! directory's intent logs, so that no hook stays held and every node of an update agrees.

use super::node::StateArgs;

/// Finish or roll back interrupted broadcasts and migrations (after a control-plane crash),
/// from what the nodes themselves record.
#[derive(clap::Args)]
pub struct Args {
    /// A node to read update records from: a registered name or an address (repeatable).
    /// Without it: every registered node, and the nodes this state directory's unfinished
    /// intent logs name.
    #[arg(long = "node", value_name = "NODE")]
    nodes: Vec<String>,
    /// Also recover updates whose control plane still seems alive (its pid exists here, or
    /// its lease is live), settle a decision node although some participants were not
    /// reached, and abort an update whose decision node is unreachable with no participant
    /// holding its decision: say that the missing nodes are gone.
    #[arg(long)]
    force: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let registry = args.state.registry()?;
    let entries = if args.nodes.is_empty() {
        registry.nodes()?
    } else {
        args.nodes
            .iter()
            .map(|n| registry.node(n))
            .collect::<Result<_, _>>()?
    };
    let opts = rdx_fleet::RecoverOptions {
        nodes: entries
            .into_iter()
            .map(|e| rdx_fleet::plan::NodeSpec {
                name: e.name,
                address: e.address,
            })
            .collect(),
        force: args.force,
        ..rdx_fleet::RecoverOptions::new(registry.dir())
    };
    let done = rdx_fleet::recover(&opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&done)?);
        return Ok(());
    }
    if done.is_empty() {
        println!("nothing to recover");
    }
    for r in &done {
        println!("update {}: {}", r.id, r.outcome.replace('_', " "));
        for a in &r.actions {
            println!("  {a}");
        }
    }
    Ok(())
}
