//! Rollback on fault (`rdx watch`): reads each watched hook's failure and latency counters
//! remotely, remembers the versions that ran healthy, and republishes the last good one
//! (one compare-and-swap, [`CodeFlow::rollback`]) when a version crosses a threshold.
//!
//! A version is judged per window of samples: the counters' deltas since the window began
//! (the version was published or the previous window closed). A window with at least
//! `min_runs` runs and no threshold crossed marks the version good and starts a new window;
//! a window whose failure ratio or sampled average run time crosses its threshold rolls the
//! hook back. Nothing runs in the node: counters are read, the rollback is one CAS.
//!
//! The watcher acts only on the version it judged: it takes the node's lease, checks under
//! it that the hook still publishes that version, and only then rolls back (or re-profiles).
//! While another control plane holds the lease (a deploy between its publish and its
//! release, a broadcast, a session) the watcher waits for it: the window stays open and is
//! judged again at every sample, so the rollback happens at the first sample after the lease
//! is given back, unless that control plane published another version meanwhile (which is
//! then judged afresh). A wait longer than the lease's TTL is reported once as `Unhealthy`.
//!
//! Re-profiling ([`watch_reprofiling`]): the same samples carry the hook's `deopts` counter
//! (runs of an elite version that left their fast path at a failed guard). When a version
//! deoptimises more than a share of its runs over a window of at least `min_runs` runs
//! ([`rdx_deopt::profile::reprofile_decision`]), the watcher hands the hook to a
//! [`Reoptimizer`] (the command line's: scout, merge the profiles, publish a new elite
//! version, or revert to the generic one), each change one `tx`.

use crate::error::{node_err, transport_err, Result};
use rdx_control::registry::Registry;
use rdx_control::{create_codeflow, lease, AttachOptions, CodeFlow, ControlError};
use rdx_deopt::profile::{reprofile_decision, Reprofile};
use rdx_region::layout::{active_version, offsets, HookCounters};
use rdx_transport::slot;
use serde::Serialize;
use std::time::{Duration, Instant};

/// One hook to watch.
#[derive(Clone, Debug)]
pub struct Target {
    /// The node's name, for events.
    pub node: String,
    /// Its address.
    pub address: String,
    /// The hook.
    pub hook: String,
}

/// When a window is judged, and when it is unhealthy.
#[derive(Clone, Debug)]
pub struct Thresholds {
    /// Roll back when failures / runs in a window exceed this (0.0: any failure).
    pub max_failure_ratio: f64,
    /// Roll back when the window's sampled average run time exceeds this.
    pub max_avg_ns: Option<u64>,
    /// Runs a window needs before it is judged (healthy or not).
    pub min_runs: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            max_failure_ratio: 0.01,
            max_avg_ns: None,
            min_runs: 20,
        }
    }
}

/// How the watcher samples and when it stops.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// Time between samples.
    pub interval: Duration,
    /// When a window is healthy or not.
    pub thresholds: Thresholds,
    /// Stop after this long (default: never).
    pub duration: Option<Duration>,
    /// Stop after this many rollbacks (default: never).
    pub max_rollbacks: Option<usize>,
    /// Where the rollbacks and re-optimisations are recorded, each target's under its node
    /// name (default: nowhere).
    pub history: Option<Registry>,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            interval: Duration::from_millis(1),
            thresholds: Thresholds::default(),
            duration: None,
            max_rollbacks: None,
            history: None,
        }
    }
}

/// What the watcher saw or did.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A version ran a healthy window: it becomes a rollback target.
    Good {
        /// The node.
        node: String,
        /// The hook.
        hook: String,
        /// The version judged good.
        version: u32,
        /// Runs in the window.
        runs: u64,
    },
    /// A version crossed a threshold and the hook was rolled back.
    RolledBack(Rollback),
    /// An elite version deoptimised too often: the hook was re-profiled and a new elite
    /// version published, or the generic version published instead.
    Reoptimized(Reoptimization),
    /// A version crossed a threshold but nothing could be rolled back to (no good version
    /// held), or the rollback (or re-optimisation) failed, or it has waited longer than the
    /// lease's TTL for another control plane's lease (reported once per wait; the rollback
    /// still happens when the lease is given back); the watcher keeps watching.
    Unhealthy {
        /// The node.
        node: String,
        /// The hook.
        hook: String,
        /// The version judged.
        version: u32,
        /// What went wrong, and what the watcher does about it.
        reason: String,
    },
}

/// A rollback the watcher made.
#[derive(Clone, Debug, Serialize)]
pub struct Rollback {
    /// The node.
    pub node: String,
    /// The hook.
    pub hook: String,
    /// The version rolled back from.
    pub from_version: u32,
    /// The version rolled back to.
    pub to_version: u32,
    /// The threshold crossed (and, when the rollback had to wait for another control
    /// plane's lease, how long it waited).
    pub reason: String,
    /// Runs in the window that crossed the threshold.
    pub window_runs: u64,
    /// Failures in that window.
    pub window_failures: u64,
    /// From the last sample that showed no new failure (the fault happened after it) to
    /// the rollback's compare-and-swap: an upper bound of the time from fault to rollback.
    pub fault_to_rollback_us: f64,
    /// From the sample that crossed the threshold to the rollback's compare-and-swap.
    pub rollback_us: f64,
    /// When the rollback completed.
    #[serde(skip)]
    pub at: Option<Instant>,
}

/// What re-optimising a hook published.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reoptimized {
    /// A new elite version, compiled from the merged profile.
    Elite,
    /// The generic (plain) build.
    Generic,
}

/// A re-optimisation the watcher made.
#[derive(Clone, Debug, Serialize)]
pub struct Reoptimization {
    /// The node.
    pub node: String,
    /// The hook.
    pub hook: String,
    /// The version that deoptimised too often.
    pub from_version: u32,
    /// The version published instead.
    pub to_version: u32,
    /// Whether that is a new elite version or the generic build.
    pub outcome: Reoptimized,
    /// Why the hook was re-profiled (the deoptimisation rate).
    pub reason: String,
    /// What was published and why (guards of the new version, or why it reverted).
    pub detail: String,
    /// Runs in the window.
    pub window_runs: u64,
    /// Deoptimisations in the window.
    pub window_deopts: u64,
    /// Re-optimisations of this hook so far, this one included.
    pub count: u32,
    /// From the sample that crossed the threshold to the last `tx` (the scouting window
    /// included).
    pub took_ms: f64,
}

/// When an elite version deoptimises too often.
#[derive(Clone, Debug)]
pub struct DeoptThresholds {
    /// Re-profile when deopts / runs in a window exceed this share.
    pub max_ratio: f64,
    /// Runs a window needs before its deoptimisation rate is judged.
    pub min_runs: u64,
    /// Re-optimisations of one hook after which the watcher publishes the generic build
    /// instead of re-profiling again.
    pub max_reoptimizations: u32,
}

impl Default for DeoptThresholds {
    fn default() -> Self {
        DeoptThresholds {
            max_ratio: 0.05,
            min_runs: 1000,
            max_reoptimizations: 3,
        }
    }
}

/// The result a [`Reoptimizer`] reports: what it published, its version, and a line saying
/// what it did.
pub type ReoptimizeResult =
    std::result::Result<(Reoptimized, u32, String), Box<dyn std::error::Error + Send + Sync>>;

/// Re-profiles and redeploys one hook whose elite version deoptimises too often. The
/// command line implements it (it can scout and compile); every version it publishes must
/// be one `tx`, so that each request runs a complete version, and a run already deoptimised
/// finishes in the fallback image of the version it started in whatever is published.
pub trait Reoptimizer {
    /// Called with the version that crossed the threshold. `revert` is true when the hook
    /// reached its limit of re-optimisations: publish the generic build.
    fn reoptimize(
        &mut self,
        cf: &mut CodeFlow,
        target: &Target,
        version: u32,
        revert: bool,
    ) -> ReoptimizeResult;
}

/// Re-profiling settings of [`watch_reprofiling`].
pub struct Reprofiling<'a> {
    /// When a version deoptimises too often.
    pub thresholds: DeoptThresholds,
    /// What re-profiles and republishes the hook.
    pub reoptimizer: &'a mut dyn Reoptimizer,
}

/// Counters of one hook, summed over the node's thread slots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// The hook's active word.
    pub word: u64,
    /// Runs (any outcome).
    pub runs: u64,
    /// Runs that stopped abnormally.
    pub failures: u64,
    /// Runs whose duration was sampled.
    pub timed_runs: u64,
    /// Total ns of the sampled runs.
    pub timed_ns: u64,
    /// Runs that left an elite version's fast path (`HookCounters::deopts`).
    pub deopts: u64,
}

/// Reads a hook's active word and counters remotely.
pub fn sample(cf: &CodeFlow, node: &str, hook_index: u32) -> Result<Sample> {
    let t = cf.transport();
    let info = &cf.view().info;
    let slot_offset = info.hook_offset(hook_index);
    let te = transport_err(node);
    let word = slot::read_active(t, slot_offset).map_err(te)?;
    let failures = t
        .read_u64(slot_offset + offsets::HOOK_FAILURES)
        .map_err(transport_err(node))?;
    let stride = std::mem::size_of::<HookCounters>();
    const _: () = assert!(offsets::COUNTER_DEOPTS == 24);
    let mut c = vec![0u8; stride];
    let mut s = Sample {
        word,
        failures,
        ..Sample::default()
    };
    let f = |c: &[u8], i: usize| u64::from_le_bytes(c[i * 8..i * 8 + 8].try_into().expect("8"));
    for thread in 0..info.thread_slots {
        t.read(info.counters_offset(thread, hook_index), &mut c)
            .map_err(transport_err(node))?;
        s.runs = s.runs.wrapping_add(f(&c, 0));
        s.timed_runs = s.timed_runs.wrapping_add(f(&c, 1));
        s.timed_ns = s.timed_ns.wrapping_add(f(&c, 2));
        s.deopts = s.deopts.wrapping_add(f(&c, 3));
    }
    Ok(s)
}

/// Judges one window: `Some(reason)` when a threshold is crossed, `None` when healthy,
/// and the caller waits for more runs when `runs < min_runs` and nothing failed badly.
pub fn judge(start: &Sample, now: &Sample, th: &Thresholds) -> Verdict {
    let runs = now.runs.wrapping_sub(start.runs);
    let failures = now.failures.wrapping_sub(start.failures);
    let timed = now.timed_runs.wrapping_sub(start.timed_runs);
    let ns = now.timed_ns.wrapping_sub(start.timed_ns);
    if runs == 0 {
        return Verdict::Wait;
    }
    let ratio = failures as f64 / runs as f64;
    // Failures are judged as soon as they are certain to cross the ratio whatever the
    // window's remaining runs do: `failures > ratio * min_runs` with fewer runs than that.
    let certain = failures as f64 > th.max_failure_ratio * th.min_runs.max(runs) as f64;
    if ratio > th.max_failure_ratio && (runs >= th.min_runs || certain) {
        return Verdict::Bad(format!(
            "{failures} failures in {runs} runs ({:.1}% > {:.1}%)",
            ratio * 100.0,
            th.max_failure_ratio * 100.0
        ));
    }
    if runs < th.min_runs {
        return Verdict::Wait;
    }
    if let (Some(max), true) = (th.max_avg_ns, timed > 0) {
        let avg = ns / timed;
        if avg > max {
            return Verdict::Bad(format!(
                "average run time {avg} ns over {timed} sampled runs > {max} ns"
            ));
        }
    }
    Verdict::Healthy
}

/// What [`judge`] concluded about a window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Too few runs yet: keep the window open.
    Wait,
    /// Enough runs and no threshold crossed.
    Healthy,
    /// A threshold was crossed; which, with the figures.
    Bad(String),
}

struct Watched {
    target: Target,
    cf: CodeFlow,
    index: u32,
    /// Versions that ran a healthy window, oldest first.
    good: Vec<u32>,
    window_start: Sample,
    /// Start of the window the deoptimisation rate is judged over.
    deopt_start: Sample,
    reoptimizations: u32,
    /// A version the reoptimizer failed on: not handed to it again.
    failed_version: Option<u32>,
    last: Sample,
    last_clean: Instant,
    /// Since when a rollback or re-profile of the current word waits for another control
    /// plane's lease, and whether that wait was reported.
    lease_wait: Option<(Instant, bool)>,
}

/// Takes `cf`'s lease on the node and checks under it that `hook` still publishes `judged`,
/// the word the watcher judged: nobody else publishes while the lease is ours, so what the
/// watcher then does applies to that version. `Ok(false)`, lease given back, when another
/// control plane published meanwhile. `LeaseHeld` while another control plane holds it.
fn lease_judged(cf: &mut CodeFlow, hook: &str, judged: u64) -> rdx_control::Result<bool> {
    cf.mutual_excl()?;
    let slot_offset = cf.view().hook(hook)?.slot_offset;
    if slot::read_active(cf.transport(), slot_offset)? == judged {
        return Ok(true);
    }
    cf.release()?;
    Ok(false)
}

/// What an attempt to act on a judged version (roll back, re-profile) came to.
enum Attempt<T> {
    Done(T),
    /// Another control plane published another version: it is judged from the next sample.
    Superseded,
    /// Another control plane holds the lease: try again at the next sample.
    Wait(ControlError),
    Failed(ControlError),
}

impl<T> From<rdx_control::Result<Option<T>>> for Attempt<T> {
    fn from(r: rdx_control::Result<Option<T>>) -> Self {
        match r {
            Ok(Some(t)) => Attempt::Done(t),
            Ok(None) => Attempt::Superseded,
            Err(e @ ControlError::LeaseHeld { .. }) => Attempt::Wait(e),
            Err(e) => Attempt::Failed(e),
        }
    }
}

impl Watched {
    /// Notes that acting on `version` waits for another control plane's lease (`e`);
    /// reports it once, when the wait outlives the lease's TTL (its holder renews it).
    fn wait_for_lease(
        &mut self,
        version: u32,
        what: &str,
        e: &ControlError,
        on_event: &mut impl FnMut(&Event),
    ) {
        let (since, reported) = self.lease_wait.get_or_insert((Instant::now(), false));
        if !*reported && since.elapsed() >= lease::DEFAULT_TTL {
            *reported = true;
            on_event(&Event::Unhealthy {
                node: self.target.node.clone(),
                hook: self.target.hook.clone(),
                version,
                reason: format!(
                    "{what} waits for the lease since {:.1} s: {e}",
                    since.elapsed().as_secs_f64()
                ),
            });
        }
    }
}

/// Judges the deoptimisation window that began at `start` at `now`: `Some((runs, deopts))` when it
/// crossed the threshold; a window of enough runs that did not starts a new one.
pub fn judge_deopts(start: &mut Sample, now: &Sample, th: &DeoptThresholds) -> Option<(u64, u64)> {
    if now.word != start.word {
        *start = *now;
        return None;
    }
    let runs = now.runs.wrapping_sub(start.runs);
    let deopts = now.deopts.wrapping_sub(start.deopts);
    match reprofile_decision(runs, deopts, th.min_runs, th.max_ratio) {
        Reprofile::Reprofile => Some((runs, deopts)),
        Reprofile::Keep => {
            if runs >= th.min_runs.max(1) {
                *start = *now;
            }
            None
        }
    }
}

/// Watches `targets` until the duration or rollback count of `opts` is reached, calling
/// `on_event` for every event. Returns the rollbacks done.
pub fn watch(
    targets: &[Target],
    opts: &WatchOptions,
    on_event: impl FnMut(&Event),
) -> Result<Vec<Rollback>> {
    watch_reprofiling(targets, opts, None, on_event)
}

/// [`watch`], and with `reprofiling` also re-profiles hooks whose elite version
/// deoptimises more than its thresholds allow. The re-optimisation runs on the watcher's
/// thread: other targets are not sampled during its scouting window.
pub fn watch_reprofiling(
    targets: &[Target],
    opts: &WatchOptions,
    mut reprofiling: Option<Reprofiling<'_>>,
    mut on_event: impl FnMut(&Event),
) -> Result<Vec<Rollback>> {
    let mut watched = Vec::new();
    for t in targets {
        let mut cf =
            create_codeflow(&t.address, AttachOptions::default()).map_err(node_err(&t.node))?;
        if let Some(registry) = &opts.history {
            cf.record_history(registry.clone(), &t.node);
        }
        let index = cf.view().hook(&t.hook).map_err(node_err(&t.node))?.index;
        let s = sample(&cf, &t.node, index)?;
        watched.push(Watched {
            target: t.clone(),
            cf,
            index,
            good: Vec::new(),
            window_start: s,
            deopt_start: s,
            reoptimizations: 0,
            failed_version: None,
            last: s,
            last_clean: Instant::now(),
            lease_wait: None,
        });
    }
    let started = Instant::now();
    let mut rollbacks = Vec::new();
    loop {
        if opts.duration.is_some_and(|d| started.elapsed() >= d)
            || opts.max_rollbacks.is_some_and(|n| rollbacks.len() >= n)
        {
            return Ok(rollbacks);
        }
        for w in &mut watched {
            let now = sample(&w.cf, &w.target.node, w.index)?;
            let seen_at = Instant::now();
            if now.failures == w.last.failures {
                w.last_clean = seen_at;
            }
            w.last = now;
            if now.word != w.window_start.word {
                // A new version (or a hold): judge it from here on.
                w.window_start = now;
                w.lease_wait = None;
                continue;
            }
            let version = active_version(now.word);
            if version == 0 || slot::is_held(now.word) {
                continue;
            }
            if let Some(rp) = reprofiling
                .as_mut()
                .filter(|_| w.failed_version != Some(version))
            {
                if let Some((runs, deopts)) = judge_deopts(&mut w.deopt_start, &now, &rp.thresholds)
                {
                    reoptimize(w, rp, now.word, seen_at, runs, deopts, &mut on_event)?;
                    continue;
                }
            }
            match judge(&w.window_start, &now, &opts.thresholds) {
                Verdict::Wait => {}
                Verdict::Healthy => {
                    if w.good.last() != Some(&version) {
                        w.good.retain(|&v| v != version);
                        w.good.push(version);
                        on_event(&Event::Good {
                            node: w.target.node.clone(),
                            hook: w.target.hook.clone(),
                            version,
                            runs: now.runs.wrapping_sub(w.window_start.runs),
                        });
                    }
                    w.window_start = now;
                }
                Verdict::Bad(reason) => {
                    w.good.retain(|&v| v != version);
                    let to = w.good.last().copied();
                    match roll_back(&mut w.cf, &w.target.hook, now.word, to).into() {
                        Attempt::Done(to_version) => {
                            let done = Instant::now();
                            let reason = match w.lease_wait.take() {
                                Some((since, _)) => format!(
                                    "{reason}; waited {:.1} ms for another control plane's lease",
                                    (done - since).as_secs_f64() * 1e3
                                ),
                                None => reason,
                            };
                            let r = Rollback {
                                node: w.target.node.clone(),
                                hook: w.target.hook.clone(),
                                from_version: version,
                                to_version,
                                reason,
                                window_runs: now.runs.wrapping_sub(w.window_start.runs),
                                window_failures: now.failures.wrapping_sub(w.window_start.failures),
                                fault_to_rollback_us: (done - w.last_clean).as_secs_f64() * 1e6,
                                rollback_us: (done - seen_at).as_secs_f64() * 1e6,
                                at: Some(done),
                            };
                            on_event(&Event::RolledBack(r.clone()));
                            rollbacks.push(r);
                            let s = sample(&w.cf, &w.target.node, w.index)?;
                            w.window_start = s;
                            w.last = s;
                            w.last_clean = Instant::now();
                        }
                        Attempt::Superseded => w.lease_wait = None,
                        // The window stays open: judged again (and rolled back) at the next
                        // sample, unless another version is published meanwhile.
                        Attempt::Wait(e) => {
                            w.wait_for_lease(version, "the rollback", &e, &mut on_event)
                        }
                        Attempt::Failed(e) => {
                            w.lease_wait = None;
                            on_event(&Event::Unhealthy {
                                node: w.target.node.clone(),
                                hook: w.target.hook.clone(),
                                version,
                                reason: format!("{reason}; not rolled back: {e}"),
                            });
                            // Judge a fresh window rather than repeat the report each tick.
                            w.window_start = now;
                        }
                    }
                }
            }
        }
        std::thread::sleep(opts.interval);
    }
}

/// Hands `w`'s hook, publishing `word`, to the reoptimizer under the watcher's lease and
/// reports what it did; the windows start again from a fresh sample either way. While
/// another control plane holds the lease nothing is done: the window is judged again at the
/// next sample.
fn reoptimize(
    w: &mut Watched,
    rp: &mut Reprofiling<'_>,
    word: u64,
    seen_at: Instant,
    runs: u64,
    deopts: u64,
    on_event: &mut impl FnMut(&Event),
) -> Result<()> {
    let th = &rp.thresholds;
    let reason = format!(
        "{deopts} deoptimisations in {runs} runs ({:.1}% > {:.1}%)",
        deopts as f64 * 100.0 / runs as f64,
        th.max_ratio * 100.0
    );
    let version = active_version(word);
    let revert = w.reoptimizations >= th.max_reoptimizations;
    let r = match lease_judged(&mut w.cf, &w.target.hook, word)
        .map(|judged| judged.then_some(()))
        .into()
    {
        Attempt::Done(()) => rp
            .reoptimizer
            .reoptimize(&mut w.cf, &w.target, version, revert),
        Attempt::Superseded => {
            w.lease_wait = None;
            return Ok(());
        }
        Attempt::Wait(e) => {
            w.wait_for_lease(version, "re-profiling", &e, on_event);
            return Ok(());
        }
        Attempt::Failed(e) => Err(e.into()),
    };
    w.lease_wait = None;
    // Give the lease back whatever happened, so other control planes are not blocked.
    let _ = w.cf.release();
    match r {
        Ok((outcome, to_version, detail)) => {
            if outcome == Reoptimized::Elite {
                w.reoptimizations += 1;
            }
            let detail = if revert {
                format!(
                    "{detail} (limit of {} re-optimisations reached)",
                    th.max_reoptimizations
                )
            } else {
                detail
            };
            on_event(&Event::Reoptimized(Reoptimization {
                node: w.target.node.clone(),
                hook: w.target.hook.clone(),
                from_version: version,
                to_version,
                outcome,
                reason,
                detail,
                window_runs: runs,
                window_deopts: deopts,
                count: w.reoptimizations,
                took_ms: seen_at.elapsed().as_secs_f64() * 1e3,
            }));
        }
        Err(e) => {
            w.failed_version = Some(version);
            on_event(&Event::Unhealthy {
                node: w.target.node.clone(),
                hook: w.target.hook.clone(),
                version,
                reason: format!(
                    "{reason}; not re-optimised (not tried again for this version): {e}"
                ),
            })
        }
    }
    let s = sample(&w.cf, &w.target.node, w.index)?;
    w.window_start = s;
    w.deopt_start = s;
    w.last = s;
    w.last_clean = Instant::now();
    Ok(())
}

/// Rolls the hook publishing `judged` back to `to` (or the newest held version older than
/// the active one) and gives the lease back, so that deploys by other control planes are
/// not blocked by the watcher. `Ok(None)` when another version was published meanwhile.
fn roll_back(
    cf: &mut CodeFlow,
    hook: &str,
    judged: u64,
    to: Option<u32>,
) -> rdx_control::Result<Option<u32>> {
    let r = match lease_judged(cf, hook, judged) {
        Ok(true) => cf.rollback(hook, to).map(|p| Some(p.version)),
        other => other.map(|_| None),
    };
    let released = cf.release();
    let v = r?;
    released?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(runs: u64, failures: u64, timed_runs: u64, timed_ns: u64) -> Sample {
        Sample {
            word: 1 << 32,
            runs,
            failures,
            timed_runs,
            timed_ns,
            deopts: 0,
        }
    }

    #[test]
    fn deopt_windows_need_min_runs_and_restart_when_healthy_or_republished() {
        let th = DeoptThresholds {
            max_ratio: 0.05,
            min_runs: 100,
            max_reoptimizations: 3,
        };
        let d = |runs, deopts| Sample {
            deopts,
            ..s(runs, 0, 0, 0)
        };
        let mut start = d(1000, 10);
        // 50 deoptimisations in 50 runs: not judged before 100 runs.
        assert_eq!(judge_deopts(&mut start, &d(1050, 60), &th), None);
        assert_eq!(judge_deopts(&mut start, &d(1100, 16), &th), Some((100, 6)));
        // 5 in 100 is not more than 5%: a new window starts there.
        assert_eq!(judge_deopts(&mut start, &d(1100, 15), &th), None);
        assert_eq!(start, d(1100, 15));
        // A new version restarts the window.
        let other = Sample {
            word: 2 << 32,
            ..d(1300, 100)
        };
        assert_eq!(judge_deopts(&mut start, &other, &th), None);
        assert_eq!(start, other);
    }

    #[test]
    fn windows_are_judged_by_their_deltas() {
        let th = Thresholds {
            max_failure_ratio: 0.1,
            max_avg_ns: Some(1000),
            min_runs: 10,
        };
        let base = s(1000, 500, 10, 1_000_000);
        assert_eq!(judge(&base, &base, &th), Verdict::Wait);
        assert_eq!(
            judge(&base, &s(1005, 500, 10, 1_000_000), &th),
            Verdict::Wait
        );
        assert_eq!(
            judge(&base, &s(1010, 501, 11, 1_000_500), &th),
            Verdict::Healthy
        );
        assert!(matches!(
            judge(&base, &s(1010, 502, 10, 0), &th),
            Verdict::Bad(_)
        ));
        // Two failures in two runs: certain to cross 10% of a 10-run window already.
        assert!(matches!(
            judge(&base, &s(1002, 502, 10, 0), &th),
            Verdict::Bad(_)
        ));
        // One failure in one run is not certain yet (1 of 10 is not above 10%).
        assert_eq!(judge(&base, &s(1001, 501, 10, 0), &th), Verdict::Wait);
        assert!(
            matches!(judge(&base, &s(1010, 500, 12, 1_010_000), &th), Verdict::Bad(r) if r.contains("average run time"))
        );
    }
}
