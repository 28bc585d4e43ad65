//! `rdx watch`: reads hooks' failure, latency and deoptimisation counters remotely, rolls a
//! hook back to its last good version when a threshold is crossed, and re-profiles a hook
//! whose elite version deoptimises too often (see docs/broadcast.md and docs/deopt.md).

use anyhow::{bail, Context as _};
use rdx_control::registry::{HistoryAction, Registry};
use rdx_control::{CodeFlow, Extension};
use rdx_deopt::profile::Policy;
use rdx_fleet::watch::{
    watch_reprofiling, DeoptThresholds, Event, ReoptimizeResult, Reoptimized, Reoptimizer,
    Reprofiling, Target, Thresholds, WatchOptions,
};
use std::time::Duration;

use super::node::StateArgs;
use super::profile::{published_profile_path, save_published_profile, scout, SavedProfile, Scout};

/// Watch hooks: roll each back to its last good version when it starts failing, and
/// re-profile an elite version that deoptimises too often.
#[derive(clap::Args)]
pub struct Args {
    /// Hooks to watch, as NODE/HOOK (NODE: a registered name or an address such as
    /// `shm:/dev/shm/rdx-kv-1234/on_request`; the hook is what follows the last `/`).
    #[arg(required = true, value_name = "NODE/HOOK")]
    targets: Vec<String>,
    /// Time between two reads of the counters.
    #[arg(long, default_value_t = 1.0, value_name = "MS")]
    interval_ms: f64,
    /// Roll back when failed runs / runs in a window exceed this (0: any failure).
    #[arg(long, default_value_t = 0.01, value_name = "RATIO")]
    max_failure_ratio: f64,
    /// Roll back when the sampled average run time in a window exceeds this.
    #[arg(long, value_name = "NS")]
    max_avg_ns: Option<u64>,
    /// Runs a window needs before it is judged healthy.
    #[arg(long, default_value_t = 20, value_name = "RUNS")]
    min_runs: u64,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Stop after this many rollbacks (default: never).
    #[arg(long, value_name = "N")]
    max_rollbacks: Option<usize>,
    /// Re-profile a hook when more than this share of its runs in a window left the elite
    /// version's fast path (deoptimised).
    #[arg(long, default_value_t = 0.05, value_name = "RATIO")]
    max_deopt_ratio: f64,
    /// Runs a window needs before its deoptimisation rate is judged.
    #[arg(long, default_value_t = 1000, value_name = "RUNS")]
    deopt_min_runs: u64,
    /// Length of the scouting window of a re-profile.
    #[arg(long, default_value_t = 1.0, value_name = "SECS")]
    reprofile_seconds: f64,
    /// Re-optimisations per hook; past this the watcher publishes the generic build.
    #[arg(long, default_value_t = 3, value_name = "N")]
    max_reoptimizations: u32,
    /// Never re-profile: deoptimisations are only counted.
    #[arg(long)]
    no_reprofile: bool,
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
    if !(0.0..=1.0).contains(&args.max_deopt_ratio) {
        bail!(
            "--max-deopt-ratio {} is not between 0 and 1",
            args.max_deopt_ratio
        );
    }
    let reprofile_window = Duration::try_from_secs_f64(args.reprofile_seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .context("--reprofile-seconds must be a positive number of seconds")?;
    if !(args.interval_ms > 0.0 && args.interval_ms.is_finite()) {
        bail!("--interval-ms must be a positive number of milliseconds");
    }
    let registry = args.state.registry()?;
    let mut targets = Vec::new();
    for t in &args.targets {
        // The hook is after the last '/': a node given as an address has slashes of its own.
        let (node, hook) = t
            .rsplit_once('/')
            .filter(|(n, h)| !n.is_empty() && !h.is_empty() && !h.contains('/'))
            .with_context(|| format!("target {t:?} is not NODE/HOOK"))?;
        let entry = registry.node(node)?;
        targets.push(Target {
            node: entry.name,
            address: entry.address,
            hook: hook.to_string(),
        });
    }
    if !args.json {
        for t in &targets {
            println!(
                "watching {}/{} at {}: every {} ms, rollback above a failure ratio of {}{}",
                t.node,
                t.hook,
                rdx_control::node::redact_address(&t.address),
                args.interval_ms,
                args.max_failure_ratio,
                args.max_avg_ns
                    .map(|ns| format!(" or an average run above {ns} ns"))
                    .unwrap_or_default()
            );
        }
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
        history: Some(registry.clone()),
    };
    let mut reoptimizer = CliReoptimizer {
        registry: &registry,
        window: reprofile_window,
    };
    let reprofiling = (!args.no_reprofile).then(|| Reprofiling {
        thresholds: DeoptThresholds {
            max_ratio: args.max_deopt_ratio,
            min_runs: args.deopt_min_runs.max(1),
            max_reoptimizations: args.max_reoptimizations,
        },
        reoptimizer: &mut reoptimizer,
    });
    watch_reprofiling(&targets, &opts, reprofiling, |e| {
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
            Event::Reoptimized(r) => println!(
                "{}/{}: version {} {}: {}; {} is version {} ({}, {:.0} ms)",
                r.node,
                r.hook,
                r.from_version,
                match r.outcome {
                    Reoptimized::Elite => "re-profiled",
                    Reoptimized::Generic => "reverted",
                },
                r.reason,
                match r.outcome {
                    Reoptimized::Elite => "the new elite build",
                    Reoptimized::Generic => "the generic build",
                },
                r.to_version,
                r.detail,
                r.took_ms
            ),
            Event::Unhealthy {
                node,
                hook,
                version,
                reason,
            } => println!("{node}/{hook}: version {version} unhealthy: {reason}"),
        }
    })?;
    Ok(())
}

/// Re-optimises a hook from the registry: the history names the object and program of the
/// elite version that deoptimises, the state directory holds the profile it was compiled
/// from. A scouting window (instrumented build, one `tx`) measures the current traffic, the
/// merged profile compiles a new elite build (one `tx`); when it has no stable branch, or
/// anything fails, or the limit is reached, the plain build is published (one `tx`).
struct CliReoptimizer<'a> {
    registry: &'a Registry,
    window: Duration,
}

/// Where an elite version came from.
struct Source {
    ext: Extension,
    class: String,
    /// The profile it was compiled from, when it was kept and fits this program.
    profile: Option<SavedProfile>,
}

impl CliReoptimizer<'_> {
    fn source(&self, target: &Target, version: u32) -> anyhow::Result<Source> {
        let entry = self
            .registry
            .history(&target.node, Some(&target.hook))?
            .into_iter()
            .rev()
            .find(|e| e.version == version && e.action == HistoryAction::Optimize)
            .with_context(|| {
                format!(
                    "version {version} of {}/{} was not published by `rdx optimize` \
                     (no history entry): its program is unknown",
                    target.node, target.hook
                )
            })?;
        let bytes = std::fs::read(&entry.object)
            .with_context(|| format!("cannot read {}", entry.object))?;
        let object = rdx_bpf::loader::load(&bytes)
            .with_context(|| format!("cannot load {}", entry.object))?;
        let ext =
            Extension::from_object(&object, Some(&entry.program))?.with_origin(&entry.object);
        let path = published_profile_path(self.registry.dir(), &target.node, &target.hook, version);
        let profile = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str::<SavedProfile>(&t).ok())
            .filter(|p| p.program_hash == ext.hash_hex() && p.profile.check(ext.insns()).is_ok());
        Ok(Source {
            ext,
            class: entry.class,
            profile,
        })
    }

    /// Publishes the plain build with one `tx`.
    fn revert(&self, cf: &mut CodeFlow, target: &Target, src: &Source) -> anyhow::Result<u32> {
        let checked = cf.validate_code(&src.ext, &target.hook, Some(&src.class))?;
        let compiled = cf.jit_compile_code(&src.ext, &checked, Some(self.registry))?;
        let prepared = cf.prepare_prog(&target.hook, &src.ext, &compiled)?;
        Ok(cf.tx(vec![prepared])?.remove(0).version)
    }

    /// Scouts, merges and publishes a new elite build; `Ok(None)` when the merged profile
    /// has no stable branch.
    fn reprofile(
        &self,
        cf: &mut CodeFlow,
        target: &Target,
        src: &Source,
    ) -> anyhow::Result<Option<(u32, String)>> {
        let scouted = scout(
            cf,
            self.registry,
            &Scout {
                ext: &src.ext,
                hook: &target.hook,
                class: Some(&src.class),
                window: self.window,
                // The next version published is the new elite build (or the plain one).
                keep: true,
            },
        )?;
        let (mut profile, policy, merged) = match &src.profile {
            Some(old) => (old.profile.clone(), old.policy, true),
            None => (Default::default(), Policy::default(), false),
        };
        if merged {
            profile.merge(&scouted.profile);
        } else {
            profile = scouted.profile;
        }
        let speculation = profile.speculation(&policy);
        if speculation.guards.is_empty() {
            return Ok(None);
        }
        let checked = cf.validate_code(&src.ext, &target.hook, Some(&src.class))?;
        let (elite, stats) = cf.jit_compile_elite(&src.ext, &checked, speculation)?;
        let prepared = cf.prepare_prog(&target.hook, &src.ext, &elite)?;
        let published = cf.tx(vec![prepared])?.remove(0);
        let saved = SavedProfile {
            program: src.ext.name().to_string(),
            program_hash: src.ext.hash_hex(),
            node: target.node.clone(),
            hook: target.hook.clone(),
            seconds: src.profile.as_ref().map_or(0.0, |p| p.seconds) + scouted.seconds,
            policy,
            profile,
        };
        save_published_profile(self.registry.dir(), published.version, &saved)?;
        Ok(Some((
            published.version,
            format!(
                "{} guards, {} slots dropped; profile of {:.1} s{} (scouting build was \
                 version {})",
                stats.guards,
                stats.dropped_insns,
                scouted.seconds,
                if merged {
                    " merged into the old one"
                } else {
                    ", no old profile kept"
                },
                scouted.instrumented_version
            ),
        )))
    }
}

impl Reoptimizer for CliReoptimizer<'_> {
    fn reoptimize(
        &mut self,
        cf: &mut CodeFlow,
        target: &Target,
        version: u32,
        revert: bool,
    ) -> ReoptimizeResult {
        self.reoptimize_or_revert(cf, target, version, revert)
            .map_err(|e| format!("{e:#}").into())
    }
}

impl CliReoptimizer<'_> {
    fn reoptimize_or_revert(
        &self,
        cf: &mut CodeFlow,
        target: &Target,
        version: u32,
        revert: bool,
    ) -> anyhow::Result<(Reoptimized, u32, String)> {
        let src = self.source(target, version)?;
        let why = if revert {
            "not re-profiled again".to_string()
        } else {
            match self.reprofile(cf, target, &src) {
                Ok(Some((v, detail))) => return Ok((Reoptimized::Elite, v, detail)),
                Ok(None) => "the new profile has no stable branch".to_string(),
                Err(e) => format!("re-optimising failed: {e:#}"),
            }
        };
        let v = self
            .revert(cf, target, &src)
            .with_context(|| format!("{why}; publishing the plain build failed"))?;
        Ok((Reoptimized::Generic, v, why))
    }
}
