//! `rdx watch`: reads hooks' failure and latency counters remotely and rolls a hook back to
//! its last good version when a threshold is crossed (see docs/broadcast.md).

use anyhow::{bail, Context as _};
use rdx_control::registry::HistoryEntry;
use rdx_fleet::watch::{watch, Event, Target, Thresholds, WatchOptions};
use std::time::Duration;

use super::node::StateArgs;

/// Watch hooks and roll each back to its last good version when it starts failing.
#[derive(clap::Args)]
pub struct Args {
    /// Hooks to watch, as NODE/HOOK (NODE: a registered name or an address).
    #[arg(required = true, value_name = "NODE/HOOK")]
    targets: Vec<String>,
    /// Time between two reads of the counters.
    #[arg(long, default_value_t = 1.0, value_name = "MS")]
    interval_ms: f64,
    /// Roll back when failed runs / runs in a window exceed this (0: any failure).
    #[arg(long, default_value_t = 0.01)]
    max_failure_ratio: f64,
    /// Roll back when the sampled average run time in a window exceeds this.
    #[arg(long, value_name = "NS")]
    max_avg_ns: Option<u64>,
    /// Runs a window needs before it is judged healthy.
    #[arg(long, default_value_t = 20)]
    min_runs: u64,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Stop after this many rollbacks.
    #[arg(long)]
    max_rollbacks: Option<usize>,
    /// One JSON object per event and line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !(0.0..=1.0).contains(&args.max_failure_ratio) {
        bail!(
            "--max-failure-ratio {} is not between 0 and 1",
            args.max_failure_ratio
        );
    }
    if !(args.interval_ms > 0.0 && args.interval_ms.is_finite()) {
        bail!("--interval-ms must be a positive number of milliseconds");
    }
    let registry = args.state.registry()?;
    let mut targets = Vec::new();
    for t in &args.targets {
        let (node, hook) = t
            .split_once('/')
            .filter(|(n, h)| !n.is_empty() && !h.is_empty() && !h.contains('/'))
            .with_context(|| format!("target {t:?} is not NODE/HOOK"))?;
        let entry = registry.node(node)?;
        targets.push(Target {
            node: entry.name,
            address: entry.address,
            hook: hook.to_string(),
        });
    }
    let opts = WatchOptions {
        interval: Duration::from_secs_f64(args.interval_ms / 1e3),
        thresholds: Thresholds {
            max_failure_ratio: args.max_failure_ratio,
            max_avg_ns: args.max_avg_ns,
            min_runs: args.min_runs.max(1),
        },
        duration: args
            .duration
            .map(Duration::try_from_secs_f64)
            .transpose()
            .context("--duration")?,
        max_rollbacks: args.max_rollbacks,
    };
    let mut failed_record = None;
    watch(&targets, &opts, |e| {
        if let Event::RolledBack(r) = e {
            let recorded = registry.record(&HistoryEntry {
                id: 0,
                node: r.node.clone(),
                hook: r.hook.clone(),
                action: "rollback".into(),
                version: r.to_version,
                previous_version: r.from_version,
                program: String::new(),
                object: String::new(),
                class: String::new(),
                artifact: String::new(),
                at_ms: rdx_control::lease::now_ms(),
                generation: 0,
            });
            if let Err(err) = recorded {
                failed_record.get_or_insert(err);
            }
        }
        if args.json {
            if let Ok(line) = serde_json::to_string(e) {
                println!("{line}");
            }
            return;
        }
        match e {
            Event::Good {
                node,
                hook,
                version,
                runs,
            } => println!("{node}/{hook}: version {version} good ({runs} runs)"),
            Event::RolledBack(r) => println!(
                "{}/{}: version {} rolled back to {}: {}; fault to rollback at most {:.0} us \
                 (detection to rollback {:.0} us)",
                r.node,
                r.hook,
                r.from_version,
                r.to_version,
                r.reason,
                r.fault_to_rollback_us,
                r.rollback_us
            ),
            Event::Unhealthy {
                node,
                hook,
                version,
                reason,
            } => println!("{node}/{hook}: version {version} unhealthy: {reason}"),
        }
    })?;
    if let Some(e) = failed_record {
        return Err(e).context("a rollback was done but could not be recorded in the history");
    }
    Ok(())
}
