//! `rdx history`: what was deployed, rolled back and detached on a node, from the registry,
//! with the versions the node still holds (and can roll back to) marked.

use std::collections::BTreeMap;

use rdx_control::registry::HistoryAction;
use serde::Serialize;

use super::node::{attach_read_only, StateArgs};

/// Show the deployment history of a node (or one of its hooks).
#[derive(clap::Args)]
pub struct Args {
    /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`, `fabric://HOST:PORT?...`).
    #[arg(long)]
    node: String,
    /// Only this hook (all hooks if omitted).
    #[arg(long)]
    hook: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Serialize)]
struct Row {
    #[serde(flatten)]
    entry: rdx_control::registry::HistoryEntry,
    /// The JIT tier of the version: as the deploy recorded it, else as the node holds it.
    tier: Option<rdx_control::Tier>,
    /// Whether the node still holds this version (a rollback target), when reachable.
    held: Option<bool>,
    active: Option<bool>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let registry = args.state.registry()?;
    let node = registry.node(&args.node)?.name;
    let entries = registry.history_with_tiers(&node, args.hook.as_deref())?;
    // Held versions per hook, if the node answers.
    let mut held: BTreeMap<String, Vec<(u32, bool, rdx_control::Tier)>> = BTreeMap::new();
    let reachable = match attach_read_only(&registry, &args.node) {
        Ok((_, cf)) => {
            for h in cf.view().hooks() {
                let v = cf.versions_readonly(&h.name)?;
                held.insert(
                    h.name,
                    v.into_iter()
                        .map(|v| (v.version, v.active, v.tier))
                        .collect(),
                );
            }
            true
        }
        Err(e) => {
            if !args.json {
                eprintln!("note: node unreachable, held versions unknown: {e:#}");
            }
            false
        }
    };
    let rows: Vec<Row> = entries
        .into_iter()
        .map(|(e, tier)| {
            let h = held.get(&e.hook).and_then(|v| {
                v.iter()
                    .find(|(ver, _, _)| *ver == e.version && e.version != 0)
            });
            Row {
                held: reachable.then_some(h.is_some()),
                active: reachable
                    .then_some(h.is_some_and(|(_, a, _)| *a) && e.action != HistoryAction::Detach),
                tier: tier.or(h.map(|(_, _, t)| *t)),
                entry: e,
            }
        })
        .collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if rows.is_empty() {
        println!(
            "no history for {node}{}",
            args.hook.map(|h| format!("/{h}")).unwrap_or_default()
        );
        return Ok(());
    }
    println!(
        "{:<5} {:<19} {:<14} {:<9} {:>7} {:>5} {:<18} {:<12} {:<10} STATE",
        "ID", "TIME (UTC)", "HOOK", "ACTION", "VERSION", "FROM", "PROGRAM", "ARTIFACT", "TIER"
    );
    for r in rows {
        let e = &r.entry;
        let state = match (r.held, r.active) {
            (Some(true), Some(true)) => "active",
            (Some(true), _) => "held",
            (Some(false), _) if e.version != 0 => "reclaimed",
            _ => "",
        };
        println!(
            "{:<5} {:<19} {:<14} {:<9} {:>7} {:>5} {:<18} {:<12} {:<10} {}",
            e.id,
            utc(e.at_ms),
            e.hook,
            e.action,
            if e.version == 0 {
                "-".into()
            } else {
                e.version.to_string()
            },
            if e.previous_version == 0 {
                "-".into()
            } else {
                e.previous_version.to_string()
            },
            e.program,
            e.artifact.get(..12).unwrap_or(&e.artifact),
            r.tier.map_or("-", |t| t.name()),
            state
        );
    }
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SS` from Unix milliseconds (civil-from-days, proleptic Gregorian).
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86400) as i64;
    let (h, m, s) = ((secs % 86400) / 3600, (secs % 3600) / 60, secs % 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(mo <= 2);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{m:02}:{s:02}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_formats_known_instants() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00");
        assert_eq!(super::utc(1_700_000_000_000), "2023-11-14 22:13:20");
    }
}
