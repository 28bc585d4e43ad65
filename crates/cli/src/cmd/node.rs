//! `rdx node add|ls|show|rm`: the nodes this control plane knows, and what a node runs, read
//! remotely from its region (hooks, versions, counters, maps, lease).
//!
//! Also the pieces every control-plane subcommand shares: the state directory option, the
//! registry, and resolving `--node` to an attached CodeFlow.

use std::path::PathBuf;

use anyhow::Context as _;
use rdx_control::node::{hook_status, redact_address, HookStatus};
use rdx_control::registry::{default_state_dir, Registry};
use rdx_control::{create_codeflow, create_codeflow_read_only, CodeFlow, AttachOptions, HeldVersion};
use rdx_region::layout::offsets;
use serde::Serialize;

/// Where the control plane keeps its registry.
#[derive(clap::Args, Clone, Debug)]
pub struct StateArgs {
    /// State directory (default: $RDX_STATE_DIR, $XDG_STATE_HOME/rdx or ~/.local/state/rdx).
    #[arg(long, value_name = "DIR", global = true)]
    pub state_dir: Option<PathBuf>,
}

impl StateArgs {
    pub fn registry(&self) -> anyhow::Result<Registry> {
        let dir = self.state_dir.clone().unwrap_or_else(default_state_dir);
        Registry::open(&dir)
            .with_context(|| format!("cannot open the registry in {}", dir.display()))
    }
}

/// Attaches to a node by registered name or address.
pub fn attach(registry: &Registry, node: &str) -> anyhow::Result<(String, CodeFlow)> {
    let (name, mut cf) = attach_with(registry, node, create_codeflow)?;
    cf.record_history(registry.clone(), &name);
    Ok((name, cf))
}

/// [`attach`] for commands that only read the node: a shared-memory region is mapped
/// read-only, so nothing such a command does can change it.
pub fn attach_read_only(registry: &Registry, node: &str) -> anyhow::Result<(String, CodeFlow)> {
    attach_with(registry, node, create_codeflow_read_only)
}

fn attach_with<E>(
    registry: &Registry,
    node: &str,
    create: impl FnOnce(&str, AttachOptions) -> Result<CodeFlow, E>,
) -> anyhow::Result<(String, CodeFlow)>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let entry = registry.node(node)?;
    let cf = create(&entry.address, AttachOptions::default()).with_context(|| {
        format!(
            "cannot attach to node {} ({})",
            entry.name,
            entry.shown_address()
        )
    })?;
    Ok((entry.name, cf))
}

/// The refusal of a deploy, rollback or detach on a held hook, with the update that holds
/// it (read from the node's update record) and the way out; other errors unchanged.
pub fn explain_held<'a>(
    cf: &'a CodeFlow,
    node: &'a str,
) -> impl FnOnce(rdx_control::ControlError) -> anyhow::Error + 'a {
    move |e| {
        if !matches!(e, rdx_control::ControlError::Held { .. }) {
            return e.into();
        }
        let update = rdx_fleet::record::unfinished(cf.transport(), cf.view().incarnation)
            .ok()
            .flatten();
        let by = match update {
            Some(u) => format!(
                "update {} ({} on this node, coordinated by pid {})",
                u.id,
                u.decision.name(),
                rdx_control::lease::holder_record_pid(u.coordinator)
            ),
            None => "a broadcast or migration".into(),
        };
        anyhow::Error::new(e).context(format!(
            "node {node}: held by {by}; if its control plane died, `rdx recover --node {node}` \
             (on any machine that reaches the nodes) finishes or undoes it"
        ))
    }
}

/// Manage and inspect nodes.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: NodeCommand,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(clap::Subcommand)]
enum NodeCommand {
    /// Register a node: `rdx node add kv-1 shm:/dev/shm/rdx-kv-1234`.
    Add {
        /// Name the other commands' `--node` will use.
        name: String,
        /// Transport address: `shm:<region file>` on this host, or
        /// `fabric://HOST:PORT?token-file=PATH` across hosts (docs/fabric.md).
        address: String,
        /// Register even if the node cannot be reached now.
        #[arg(long)]
        no_check: bool,
        /// Re-point a name already registered at another address (refused without it, so
        /// that a typo does not silently redirect every command that uses the name; a new
        /// inline token for the same node needs no --force).
        #[arg(long)]
        force: bool,
    },
    /// List registered nodes.
    Ls {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show what a node runs: hooks, versions, counters, maps, lease (read remotely).
    Show {
        /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`, `fabric://HOST:PORT?...`).
        name: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Forget a node.
    Rm {
        /// Registered node name.
        name: String,
    },
}

#[derive(Serialize)]
struct HookReport {
    name: String,
    index: u32,
    #[serde(flatten)]
    status: HookStatus,
    /// The JIT tier of the active version (`null` when nothing runs).
    tier: Option<rdx_control::Tier>,
    held_versions: Vec<HeldVersion>,
}

#[derive(Serialize)]
struct MapReport {
    id: u32,
    name: String,
    #[serde(rename = "type")]
    map_type: String,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    bytes: u64,
}

#[derive(Serialize)]
struct NodeReport {
    name: String,
    address: String,
    arch: String,
    host_pid: u32,
    region_bytes: u64,
    incarnation: u64,
    generation: u64,
    /// How long a caller waits on a held hook before it runs the published version anyway.
    hold_timeout_ns: u64,
    lease: String,
    /// The collective update (broadcast or migration) recorded in the region for this host,
    /// if any: unsettled, its hooks may still be held.
    update: Option<rdx_fleet::record::NodeIntent>,
    hooks: Vec<HookReport>,
    maps: Vec<MapReport>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let registry = args.state.registry()?;
    match args.command {
        NodeCommand::Add {
            name,
            address,
            no_check,
            force,
        } => {
            // The address may carry a token: only its redacted form is ever printed.
            let shown = redact_address(&address);
            // Another token for the same node (a rotated inline token) is no re-pointing.
            let registered = registry.nodes()?.into_iter().find(|n| n.name == name);
            if let Some(old) = registered.filter(|n| n.shown_address() != shown) {
                if !force {
                    anyhow::bail!(
                        "node {name} is already registered at {}; pass --force to re-point it \
                         to {shown}, or choose another name",
                        old.shown_address()
                    );
                }
                eprintln!("re-pointing {name} from {}", old.shown_address());
            }
            if address != shown {
                eprintln!(
                    "warning: the token in this address is stored in the registry ({}); prefer ?token-file=PATH",
                    registry.dir().join("registry.sqlite").display()
                );
            }
            if !no_check {
                // Registering only reads the node: map it read-only.
                let cf = create_codeflow_read_only(&address, AttachOptions::default()).with_context(|| {
                    format!("cannot reach {shown} (use --no-check to add it anyway)")
                })?;
                let hooks: Vec<String> = cf.view().hooks().into_iter().map(|h| h.name).collect();
                println!(
                    "added {name}: {shown} (pid {}, hooks: {})",
                    cf.view().info.host_pid,
                    if hooks.is_empty() {
                        "none".into()
                    } else {
                        hooks.join(", ")
                    }
                );
                if cf.view().eim_text.is_none() {
                    eprintln!(
                        "warning: {name} publishes no EIM spec, so every deploy to it is refused \
                         until its host stores one in its region (`Runtime::builder().eim_spec(..)`, \
                         or `eim` of `rdx_options` in C)"
                    );
                }
            } else {
                println!("added {name}: {shown}");
            }
            registry.add_node(&name, &address)?;
        }
        NodeCommand::Ls { json } => {
            let nodes = registry.nodes()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&nodes)?);
            } else if nodes.is_empty() {
                println!("no nodes (add one with `rdx node add NAME shm:/dev/shm/<region>`)");
            } else {
                println!("{:<20} ADDRESS", "NAME");
                for n in nodes {
                    println!("{:<20} {}", n.name, n.shown_address());
                }
            }
        }
        NodeCommand::Rm { name } => {
            if !registry.remove_node(&name)? {
                anyhow::bail!("unknown node {name:?}");
            }
            println!("removed {name}");
        }
        NodeCommand::Show { name, json } => {
            let entry = registry.node(&name)?;
            let (name, cf) = attach_read_only(&registry, &name)?;
            let report = report(&name, &entry.shown_address(), &cf)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print_report(&report);
            }
        }
    }
    Ok(())
}

fn report(name: &str, address: &str, cf: &CodeFlow) -> anyhow::Result<NodeReport> {
    let t = cf.transport();
    let view = cf.view();
    let info = &view.info;
    let mut hooks = Vec::new();
    for h in view.hooks() {
        let held_versions = cf.versions_readonly(&h.name)?;
        hooks.push(HookReport {
            status: hook_status(t, info, h.index)?,
            tier: held_versions.iter().find(|v| v.active).map(|v| v.tier),
            held_versions,
            name: h.name,
            index: h.index,
        });
    }
    let maps = rdx_transport::xstate::list(t, info)?
        .into_iter()
        .map(|m| MapReport {
            id: m.id,
            name: m.name,
            map_type: format!("{:?}", m.map.map_type).to_lowercase(),
            key_size: m.map.key_size,
            value_size: m.map.value_size,
            max_entries: m.map.max_entries,
            bytes: m.size,
        })
        .collect();
    let lease = match rdx_control::lease::inspect(t)? {
        (_, rdx_control::lease::LeaseState::Free) => "free".to_string(),
        (_, rdx_control::lease::LeaseState::Held { holder, expiry_ms }) => format!(
            "held by {holder:#07x} for {} ms",
            expiry_ms.saturating_sub(rdx_control::lease::now_ms())
        ),
        (_, rdx_control::lease::LeaseState::Expired { holder, .. }) => {
            format!("expired (last holder {holder:#07x})")
        }
    };
    Ok(NodeReport {
        name: name.into(),
        address: address.into(),
        arch: info.arch.name().into(),
        host_pid: info.host_pid,
        region_bytes: info.region_size,
        incarnation: view.incarnation,
        generation: t.read_u64(offsets::HEADER_GENERATION)?,
        hold_timeout_ns: info.hold_timeout_ns,
        lease,
        update: rdx_fleet::record::read(t)?.filter(|u| u.incarnation == view.incarnation),
        hooks,
        maps,
    })
}

fn print_report(r: &NodeReport) {
    println!("node {} ({})", r.name, r.address);
    println!(
        "  host pid {}, {}, region {} KiB, incarnation {}, generation {}, lease {}, hold \
         timeout {:?}",
        r.host_pid,
        r.arch,
        r.region_bytes / 1024,
        r.incarnation,
        r.generation,
        r.lease,
        std::time::Duration::from_nanos(r.hold_timeout_ns)
    );
    if let Some(u) = &r.update {
        println!(
            "  update {} ({}{}), {} node(s){}",
            u.id,
            u.decision.name(),
            if u.settled { ", settled" } else { "" },
            u.participants,
            if u.settled {
                String::new()
            } else {
                format!(
                    "; unfinished: run `rdx recover --node {}` if its control plane died",
                    r.name
                )
            }
        );
    }
    println!("hooks:");
    println!(
        "  {:<20} {:>7} {:<10} {:>12} {:>9} {:>7} {:>8} {:<4} {:>13}  HELD VERSIONS",
        "NAME", "VERSION", "TIER", "RUNS", "FAILURES", "ERRORS", "AVG NS", "HOLD", "HOLD TIMEOUTS"
    );
    for h in &r.hooks {
        let held: Vec<String> = h
            .held_versions
            .iter()
            .map(|v| {
                if v.active {
                    format!("{}*", v.version)
                } else {
                    v.version.to_string()
                }
            })
            .collect();
        println!(
            "  {:<20} {:>7} {:<10} {:>12} {:>9} {:>7} {:>8} {:<4} {:>13}  {}",
            h.name,
            if h.status.version == 0 {
                "-".to_string()
            } else {
                h.status.version.to_string()
            },
            h.tier.map_or("-", |t| t.name()),
            h.status.runs,
            h.status.failures,
            h.status.errors,
            h.status
                .avg_ns
                .map(|n| n.to_string())
                .unwrap_or_else(|| "-".into()),
            if h.status.held { "held" } else { "-" },
            h.status.hold_timeouts,
            if held.is_empty() {
                "-".into()
            } else {
                held.join(" ")
            }
        );
    }
    println!("maps:");
    if r.maps.is_empty() {
        println!("  none");
    }
    for m in &r.maps {
        println!(
            "  {:>3} {:<24} {:<14} key {:>3} value {:>5} max {:>7}",
            m.id, m.name, m.map_type, m.key_size, m.value_size, m.max_entries
        );
    }
}
