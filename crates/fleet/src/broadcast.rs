//! The collective update: prepare everywhere (with each node's update record), hold, decide,
//! flip, release in dependency order. Recovery of a broadcast whose control plane died is
//! [`mod@crate::recover`]'s.
//!
//! Per node, the work runs on its own thread with its own [`CodeFlow`] (its own lease):
//! nothing is shared between nodes and no lock spans remote operations. The hold, flip and
//! release phases are single compare-and-swaps per hook issued from the coordinating thread
//! in a tight sequence, because on shared memory each costs tens of nanoseconds and a
//! thread handoff would lengthen the bubble rather than shorten it.
//!
//! Hold protocol on a hook slot's active word `w`: hold is `w -> w|1`; the flip is
//! `w|1 -> new|1`; the release is `new|1 -> new`. While the hold bit is set, the host's
//! callers wait (at most the header's hold timeout) and then run the published version.
//! Every step on a slot is [`rdx_transport::slot`]'s, which documents why the protocol's
//! order is correct against the host's hook path; the flip reuses [`CodeFlow::tx`] with
//! the held words, so the records are marked held and the class budget written exactly as
//! for a single deploy.
//!
//! `run` reads as the sequence of phases: `check`, `begin`, `prepare`, `log_prepared`,
//! `hold` (with `drain_flows`), the commit point (`record::commit`: the decision node's
//! record, then a copy on every node), `flip`, `release`; `abort` undoes a broadcast that
//! failed before its commit point.

use crate::error::{node_err, slot_err, transport_err, FleetError, Result};
use crate::intent::{Durability, Entry, IntentLog};
use crate::plan::Plan;
use crate::record::{self, Decision, NodeIntent};
use rdx_control::node::hook_status;
use rdx_control::registry::Registry;
use rdx_control::{
    create_codeflow, AttachOptions, CodeFlow, Compiled, ControlError, Extension, Prepared,
};
use rdx_region::layout::{active_version, offsets, IntentSlot};
use rdx_transport::slot::{self, QuiesceError};
use serde::Serialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Where a test may stop the control plane dead (SIGKILL) to exercise recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// After every node is prepared and logged, before any hold.
    Prepared,
    /// After every hold is taken, before the commit point.
    Held,
    /// After the commit point (the decision node's record), before the decision is copied
    /// to any other node.
    Decided,
    /// After the decision is on every node, before any flip.
    Committed,
    /// After the first node's flip.
    FirstFlip,
    /// After the first release level.
    FirstRelease,
}

impl std::str::FromStr for CrashPoint {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Ok(match s {
            "prepared" => CrashPoint::Prepared,
            "held" => CrashPoint::Held,
            "decided" => CrashPoint::Decided,
            "committed" => CrashPoint::Committed,
            "first-flip" => CrashPoint::FirstFlip,
            "first-release" => CrashPoint::FirstRelease,
            _ => return Err(format!("unknown crash point {s:?}")),
        })
    }
}

/// How a broadcast or migration runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// The control plane's state directory; intent logs go under `<dir>/fleet/`.
    pub state_dir: PathBuf,
    /// Check everything (plan, nodes, hooks, classes, compilation), write nothing.
    pub dry_run: bool,
    /// Lease duration taken on every node for the broadcast.
    pub lease_ttl: Duration,
    /// Test only: SIGKILL this process at that point.
    pub crash_at: Option<CrashPoint>,
    /// What the intent log's records must survive; default: chosen from the nodes'
    /// addresses ([`Durability::for_addresses`]).
    pub durability: Option<Durability>,
    /// Where each node's CodeFlow records what the broadcast publishes, under the plan's
    /// node names (default: nowhere).
    pub history: Option<Registry>,
}

impl Options {
    /// Options for a control plane whose state lives in `state_dir`: a real run, the default
    /// lease TTL, durability chosen from the nodes' addresses.
    pub fn new(state_dir: impl Into<PathBuf>) -> Options {
        Options {
            state_dir: state_dir.into(),
            dry_run: false,
            lease_ttl: AttachOptions::default().lease_ttl,
            crash_at: None,
            durability: None,
            history: None,
        }
    }
}

/// One hook updated on one node.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct HookUpdate {
    /// The node's name in the plan.
    pub node: String,
    /// The hook.
    pub hook: String,
    /// The program published.
    pub program: String,
    /// The class it was verified under.
    pub class: String,
    /// The version active before (0 if none).
    pub previous_version: u32,
    /// The version now active.
    pub version: u32,
}

/// Phase durations of one broadcast, in microseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timings {
    /// Attach, validate and compile on every node (nothing written).
    pub check_us: f64,
    /// Writing every artifact everywhere.
    pub prepare_us: f64,
    /// The bubble: first hold taken to last hold released.
    pub hold_us: f64,
    /// Flipping every slot (inside the bubble).
    pub flip_us: f64,
    /// Inside the bubble: waiting for the requests already past each flow's entry to leave
    /// the flow.
    pub drain_us: f64,
    /// Time spent writing and syncing the intent log.
    pub log_us: f64,
    /// Prepare through release (the update proper, without the check).
    pub commit_us: f64,
}

/// What a broadcast did.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The broadcast's id (also its intent log's name).
    pub id: String,
    /// Whether it was a dry run (nothing written).
    pub dry_run: bool,
    /// The release order: hooks (`node/hook`) released together, level by level.
    pub release_order: Vec<Vec<String>>,
    /// Every hook updated.
    pub updates: Vec<HookUpdate>,
    /// Phase durations.
    pub timings: Timings,
    /// The intent log written, if any (none for a dry run).
    pub intent_log: Option<PathBuf>,
    /// Publications the history ([`Options::history`]) could not record; the broadcast
    /// itself completed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unrecorded: Vec<String>,
}

/// One node's share of the broadcast.
struct NodeWork {
    name: String,
    cf: CodeFlow,
    /// (update index, compiled code, class) per hook to update on this node.
    items: Vec<(usize, Compiled)>,
    prepared: Vec<Prepared>,
    /// The update's record is written in the node's region.
    recorded: bool,
}

/// What every node's update record says besides its own slots.
struct RecordPlan<'a> {
    id: &'a str,
    holder: u32,
    participants: u32,
    decider_address: &'a str,
}

impl RecordPlan<'_> {
    fn for_node(&self, w: &NodeWork, is_decider: bool) -> NodeIntent {
        NodeIntent {
            id: self.id.to_string(),
            decision: Decision::Prepared,
            settled: false,
            incarnation: w.cf.view().incarnation,
            coordinator: rdx_control::lease::holder_record(std::process::id()),
            holder: self.holder,
            participants: self.participants,
            is_decider,
            node_name: w.name.clone(),
            decider_address: self.decider_address.to_string(),
            slots: w.prepared.iter().map(intent_slot).collect(),
        }
    }
}

/// A prepared hook as its node's record names it.
fn intent_slot(p: &Prepared) -> IntentSlot {
    IntentSlot {
        slot_offset: p.hook.slot_offset,
        expected: p.expected,
        new_word: p.new_word,
        budget: p.budget,
    }
}

/// The nodes whose record is written, the decision node (the plan's first) first.
fn participants(work: &[NodeWork]) -> Vec<record::Participant<'_>> {
    work.iter()
        .filter(|w| w.recorded)
        .map(|w| (w.name.as_str(), w.cf.transport()))
        .collect()
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// Loads every update's program from its object file.
pub fn load_extensions(plan: &Plan) -> Result<Vec<Extension>> {
    plan.updates
        .iter()
        .map(|u| {
            let path = plan.object_path(u);
            let bytes = std::fs::read(&path).map_err(|e| FleetError::Object {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            let object = rdx_bpf::loader::load(&bytes).map_err(|e| FleetError::Object {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            Extension::from_object(&object, u.program.as_deref()).map_err(|e| FleetError::Object {
                path: path.clone(),
                reason: e.to_string(),
            })
        })
        .collect()
}

/// Runs `f` on every element, on up to `workers` threads; results in input order.
///
/// Shared-memory nodes make the per-node work CPU-bound: more threads than cores only adds
/// scheduling (the machine is shared with the hosts themselves). Remote nodes make it
/// latency-bound: one thread per node overlaps the round trips. See [`workers_for`].
pub(crate) fn per_node<T: Send, R: Send>(
    items: Vec<T>,
    workers: usize,
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let n = items.len();
    let workers = workers.clamp(1, n.max(1));
    if workers == 1 {
        return items.into_iter().map(f).collect();
    }
    let inputs: Vec<std::sync::Mutex<Option<T>>> = items
        .into_iter()
        .map(|t| std::sync::Mutex::new(Some(t)))
        .collect();
    let outputs: Vec<std::sync::Mutex<Option<R>>> =
        (0..n).map(|_| std::sync::Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let item = inputs[i]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                    .expect("each item taken once");
                let r = f(item);
                *outputs[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
        }
    });
    outputs
        .into_iter()
        .map(|o| {
            o.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("every item ran")
        })
        .collect()
}

/// Worker threads for per-node work: the machine's cores when every node is shared memory
/// here, one per node otherwise.
pub(crate) fn workers_for<'a>(addresses: impl Iterator<Item = &'a str>) -> usize {
    let addresses: Vec<&str> = addresses.collect();
    if addresses.iter().all(|a| a.starts_with("shm:")) {
        std::thread::available_parallelism().map_or(2, |n| n.get())
    } else {
        addresses.len()
    }
}

/// Attaches to every node (or reuses the session's attachment) and checks every update
/// there (hook present, class accepts the program, compiles) without writing anything.
fn check(
    plan: &Plan,
    exts: &[Extension],
    holder: u32,
    opts: &Options,
    attached: &mut HashMap<String, CodeFlow>,
    compiled_cache: &mut CompileCache,
) -> Result<Vec<NodeWork>> {
    let spec = AttachOptions {
        holder: Some(holder),
        lease_ttl: opts.lease_ttl,
        ..AttachOptions::default()
    };
    let workers = workers_for(plan.nodes.iter().map(|n| n.address.as_str()));
    let nodes: Vec<_> = plan
        .nodes
        .iter()
        .map(|n| (n.clone(), attached.remove(&n.address)))
        .collect();
    let compiled = std::sync::Mutex::new(std::mem::take(&mut *compiled_cache));
    let results = per_node(nodes, workers, |(n, reused)| -> Result<NodeWork> {
        // A host that restarted since the last broadcast is a new region: attach afresh.
        let reused = reused.filter(|cf| {
            cf.transport()
                .read_u64(offsets::HEADER_INCARNATION)
                .is_ok_and(|now| now == cf.view().incarnation)
        });
        let mut cf = match reused {
            Some(cf) => cf,
            None => create_codeflow(&n.address, spec.clone()).map_err(node_err(&n.name))?,
        };
        if let Some(registry) = &opts.history {
            cf.record_history(registry.clone(), &n.name);
        }
        for f in plan.flows.iter().filter(|f| f.exit.node == n.name) {
            if cf.view().hook(&f.exit.hook).is_err() {
                return Err(FleetError::HookMissing {
                    node: n.name.clone(),
                    hook: f.exit.hook.clone(),
                });
            }
        }
        let mut items = Vec::new();
        for (i, u) in plan.updates.iter().enumerate() {
            if !plan.nodes_of(u).any(|m| m.name == n.name) {
                continue;
            }
            if cf.view().hook(&u.hook).is_err() {
                return Err(FleetError::HookMissing {
                    node: n.name.clone(),
                    hook: u.hook.clone(),
                });
            }
            let rejected = |reason: String| FleetError::Rejected {
                node: n.name.clone(),
                hook: u.hook.clone(),
                program: exts[i].name().to_string(),
                reason,
            };
            let class = cf
                .resolve_class(&u.hook, u.class.as_deref())
                .map_err(|e| rejected(e.to_string()))?;
            // Verification and compilation depend only on the bytecode, the node's EIM
            // spec (hook context, class limits), the class and the architecture: nodes
            // that agree on all of them share one verdict and one artifact.
            let key = CompileKey {
                program: exts[i].hash_hex(),
                arch: cf.arch().name(),
                eim: cf.view().eim_text.clone().unwrap_or_default(),
                hook: u.hook.clone(),
                class: class.clone(),
            };
            let cell = {
                let mut map = compiled.lock().unwrap_or_else(|e| e.into_inner());
                map.entry(key).or_default().clone()
            };
            let result = cell.get_or_init(|| {
                let checked = cf
                    .validate_code(&exts[i], &u.hook, Some(&class))
                    .map_err(|e| e.to_string())?;
                cf.jit_compile_code(&exts[i], &checked, None)
                    .map_err(|e| e.to_string())
            });
            items.push((i, result.clone().map_err(rejected)?));
        }
        Ok(NodeWork {
            name: n.name,
            cf,
            items,
            prepared: Vec::new(),
            recorded: false,
        })
    });
    let mut kept = compiled.into_inner().unwrap_or_else(|e| e.into_inner());
    if kept.len() > COMPILE_CACHE_ENTRIES {
        kept.clear();
    }
    *compiled_cache = kept;
    results.into_iter().collect()
}

/// What a verdict and an artifact depend on (see [`check`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CompileKey {
    program: String,
    arch: &'static str,
    eim: String,
    hook: String,
    class: String,
}

/// One verdict and artifact per key, computed by the first node that needs it (the others
/// wait for it rather than verify and compile the same program again).
type CompileCache = HashMap<CompileKey, Arc<OnceLock<std::result::Result<Compiled, String>>>>;

/// A session forgets its artifacts past this many (programs, classes and specs seen).
const COMPILE_CACHE_ENTRIES: usize = 64;

/// Returns the nodes of a completed broadcast to the session, leases still held.
fn keep(attached: &mut HashMap<String, CodeFlow>, work: Vec<NodeWork>) {
    for w in work {
        attached.insert(w.cf.address().to_string(), w.cf);
    }
}

pub(crate) fn crash_if(opts: &Options, here: CrashPoint) {
    if opts.crash_at == Some(here) {
        // SAFETY: signalling our own process; SIGKILL does not return.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

pub(crate) fn broadcast_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{}-{:09}-{}",
        now.as_secs(),
        now.subsec_nanos(),
        std::process::id()
    )
}

/// The intent log of one broadcast, with the time spent appending to it.
struct TimedLog {
    log: IntentLog,
    us: f64,
}

impl TimedLog {
    fn append(&mut self, entries: &[Entry]) -> Result<()> {
        let t = Instant::now();
        let r = self.log.append(entries);
        self.us += us(t);
        r
    }
}

/// Begin: creates the intent log and records the lease holder id, this process and the
/// nodes, before anything is written to a node.
fn begin(plan: &Plan, opts: &Options, id: &str, holder: u32) -> Result<TimedLog> {
    let durability = opts.durability.unwrap_or_else(|| {
        Durability::for_addresses(plan.nodes.iter().map(|n| n.address.as_str()))
    });
    let mut log = TimedLog {
        log: IntentLog::create(&opts.state_dir, id, durability)?,
        us: 0.0,
    };
    log.append(&[Entry::Begin {
        id: id.to_string(),
        holder,
        pid: std::process::id(),
        nodes: plan
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.address.clone()))
            .collect(),
    }])?;
    Ok(log)
}

/// Prepare: writes every update on every node in parallel, nothing visible, then the node's
/// update record. A node that fails undoes its own part; the first failure is returned (the
/// caller aborts the rest).
fn prepare(
    plan: &Plan,
    exts: &[Extension],
    work: &mut Vec<NodeWork>,
    records: &RecordPlan,
) -> Result<()> {
    // A node attached earlier with its lease and allocator table in hand prepares in a few
    // microseconds on shared memory: starting threads would cost more than it saves.
    let local = plan.nodes.iter().all(|n| n.address.starts_with("shm:"));
    let workers = if local && work.iter().all(|w| w.cf.is_warm()) {
        1
    } else {
        workers_for(plan.nodes.iter().map(|n| n.address.as_str()))
    };
    let results = per_node(std::mem::take(work), workers, |mut w| {
        let mut prepared = Vec::new();
        for (i, c) in &w.items {
            match w.cf.prepare_prog(&plan.updates[*i].hook, &exts[*i], c) {
                Ok(p) => prepared.push(p),
                Err(e) => {
                    for p in prepared {
                        let _ = w.cf.abort(p);
                    }
                    let name = w.name.clone();
                    return (w, Err(node_err(&name)(e)));
                }
            }
        }
        w.prepared = prepared;
        let is_decider = w.name == plan.nodes[0].name;
        let written = record::write(w.cf.transport(), &w.name, &records.for_node(&w, is_decider));
        if let Err(e) = written {
            for p in std::mem::take(&mut w.prepared) {
                let _ = w.cf.abort(p);
            }
            return (w, Err(e));
        }
        w.recorded = true;
        (w, Ok(()))
    });
    let mut failure = None;
    for (w, r) in results {
        if let (Err(e), None) = (r, &failure) {
            failure = Some(e);
        }
        work.push(w);
    }
    failure.map_or(Ok(()), Err)
}

/// Log: one `prepared` record per (node, hook), what recovery needs to finish or undo the
/// slot, then the `hold` record.
fn log_prepared(log: &mut TimedLog, work: &[NodeWork]) -> Result<()> {
    let mut entries = Vec::new();
    for w in work {
        for p in &w.prepared {
            entries.push(Entry::Prepared {
                node: w.name.clone(),
                hook: p.hook.name.clone(),
                slot_offset: p.hook.slot_offset,
                expected: p.expected,
                new_word: p.new_word,
                budget: p.budget,
                version: p.version,
            });
        }
    }
    entries.push(Entry::Hold);
    log.append(&entries)
}

/// Hold: the bubble starts. Flow entries first, then the drain, then every other hook: a
/// hook downstream of an entry must keep running the old version until the requests
/// already past the entry have left the flow. On failure the holds taken are released.
fn hold(plan: &Plan, work: &[NodeWork], timings: &mut Timings) -> Result<()> {
    let is_entry = |w: &NodeWork, p: &Prepared| {
        plan.flows
            .iter()
            .any(|f| f.entry.node == w.name && f.entry.hook == p.hook.name)
    };
    let mut first = Vec::new();
    let mut rest = Vec::new();
    for w in work {
        for p in &w.prepared {
            if is_entry(w, p) {
                first.push((w, p));
            } else {
                rest.push((w, p));
            }
        }
    }
    let mut held = Vec::new();
    let mut taken = take_holds(&first, &mut held);
    if taken.is_ok() && !plan.flows.is_empty() {
        let t_drain = Instant::now();
        taken = drain_flows(plan, work);
        timings.drain_us = us(t_drain);
    }
    if taken.is_ok() {
        taken = take_holds(&rest, &mut held);
    }
    if taken.is_err() {
        for (w, p) in held {
            let _ = slot::release(w.cf.transport(), p.hook.slot_offset, p.expected);
        }
    }
    taken
}

/// Holds the listed slots on the words they were prepared against, recording each hold
/// taken.
fn take_holds<'a>(
    which: &[(&'a NodeWork, &'a Prepared)],
    held: &mut Vec<(&'a NodeWork, &'a Prepared)>,
) -> Result<()> {
    for &(w, p) in which {
        slot::hold(w.cf.transport(), p.hook.slot_offset, p.expected)
            .map_err(slot_err(&w.name, &p.hook.name))?;
        held.push((w, p));
    }
    Ok(())
}

/// Flip: every slot to its new version, still held. Each node's [`CodeFlow::tx`] with the
/// held words, so the records are marked held and the class budget written exactly as for
/// a single deploy. Returns what the history could not record: that must not stop the
/// broadcast between flip and release.
fn flip(work: &mut [NodeWork], opts: &Options) -> Result<Vec<String>> {
    let mut unrecorded = Vec::new();
    for (wi, w) in work.iter_mut().enumerate() {
        let batch: Vec<Prepared> = w
            .prepared
            .iter()
            .cloned()
            .map(|mut p| {
                p.expected = slot::held(p.expected);
                p.new_word = slot::held(p.new_word);
                p
            })
            .collect();
        // Cannot fail while we hold every slot unless the lease was lost or the host died:
        // recovery (roll forward: the nodes' records say committed) is the way out.
        match w.cf.tx(batch) {
            Ok(_) => {}
            Err(e @ ControlError::NotRecorded { .. }) => {
                unrecorded.push(format!("node {}: {e}", w.name));
            }
            Err(e) => return Err(node_err(&w.name)(e)),
        }
        if wi == 0 {
            crash_if(opts, CrashPoint::FirstFlip);
        }
    }
    Ok(unrecorded)
}

/// Release: every hold, by levels of the dependency order (a hook's dependencies before it).
fn release(release_order: &[Vec<String>], work: &[NodeWork], opts: &Options) -> Result<()> {
    for (li, level) in release_order.iter().enumerate() {
        for w in work {
            for p in w.prepared.iter().filter(|p| level.contains(&p.hook.name)) {
                slot::release(w.cf.transport(), p.hook.slot_offset, p.new_word)
                    .map_err(slot_err(&w.name, &p.hook.name))?;
            }
        }
        if li == 0 {
            crash_if(opts, CrashPoint::FirstRelease);
        }
    }
    Ok(())
}

/// Abort (before the commit point): frees everything prepared on every node (nothing was
/// visible) and records why. Returns the error to report.
fn abort(work: &mut [NodeWork], mut log: TimedLog, tag: u64, e: FleetError) -> FleetError {
    abort_all(work);
    record::abort(&participants(work), tag);
    let logged = log
        .append(&[Entry::Aborted {
            reason: e.to_string(),
        }])
        .and_then(|()| log.log.finish());
    match logged {
        Ok(_) => FleetError::Aborted(Box::new(e)),
        Err(log_error) => log_error,
    }
}

/// Releases every hold still on the word it was prepared against (a recovery that decided
/// abort first may have released some already: those are left as they are).
fn release_holds(work: &[NodeWork]) {
    for w in work {
        for p in &w.prepared {
            let _ = slot::release(w.cf.transport(), p.hook.slot_offset, p.expected);
        }
    }
}

/// Frees everything prepared on every node (nothing was visible).
fn abort_all(work: &mut [NodeWork]) {
    for w in work.iter_mut() {
        for p in std::mem::take(&mut w.prepared) {
            // Best effort: a failure here leaves a pending record that the next lease
            // holder frees (it is unpublished).
            let _ = w.cf.abort(p);
        }
    }
}

/// Every update of the plan as a report line; with the versions once `prepared`.
fn describe(plan: &Plan, exts: &[Extension], work: &[NodeWork], prepared: bool) -> Vec<HookUpdate> {
    let mut out = Vec::new();
    for w in work {
        for (k, (i, c)) in w.items.iter().enumerate() {
            let u = &plan.updates[*i];
            let (prev, ver) = match w.prepared.get(k) {
                Some(p) if prepared => (active_version(p.expected), p.version),
                _ => (0, 0),
            };
            out.push(HookUpdate {
                node: w.name.clone(),
                hook: u.hook.clone(),
                program: exts[*i].name().to_string(),
                class: c.class().to_string(),
                previous_version: prev,
                version: ver,
            });
        }
    }
    out
}

fn node_of<'a>(work: &'a [NodeWork], name: &str) -> &'a NodeWork {
    work.iter()
        .find(|w| w.name == name)
        .expect("validated: every flow names a plan node")
}

/// Waits until every request that ran a flow's (held) entry has run its exit: first until
/// no host thread is still inside code it entered before the hold (its epoch word moved
/// on), then until the exit's run counter has caught up with the entry's. Bounded by half
/// the entry node's hold timeout, so that callers queued on the hold never give up on it.
fn drain_flows(plan: &Plan, work: &[NodeWork]) -> Result<()> {
    for f in &plan.flows {
        let entry = node_of(work, &f.entry.node);
        let exit = node_of(work, &f.exit.node);
        let budget = Duration::from_nanos(entry.cf.view().info.hold_timeout_ns / 2);
        let start = Instant::now();
        let timed_out = || start.elapsed() > budget;
        let entry_hook = entry
            .cf
            .view()
            .hook(&f.entry.hook)
            .map_err(node_err(&entry.name))?;
        let exit_hook = exit
            .cf
            .view()
            .hook(&f.exit.hook)
            .map_err(node_err(&exit.name))?;
        let quiet = slot::wait_quiescent(
            entry.cf.transport(),
            &entry.cf.view().info,
            start + budget,
            slot::Poll::Spin,
        );
        match quiet {
            Ok(()) => {}
            Err(QuiesceError::StillInside { thread_slot }) => {
                return Err(FleetError::DrainTimeout {
                    flow: format!("{} -> {}", f.entry, f.exit),
                    reason: format!("thread slot {thread_slot} stayed inside the entry's code"),
                })
            }
            Err(QuiesceError::Transport(e)) => return Err(transport_err(&entry.name)(e)),
        }
        let runs = |w: &NodeWork, h: &rdx_control::node::HookInfo| {
            hook_status(w.cf.transport(), &w.cf.view().info, h.index)
                .map(|s| s.runs)
                .map_err(node_err(&w.name))
        };
        let entered = runs(entry, &entry_hook)?;
        let mut spins = 0u32;
        loop {
            let left = runs(exit, &exit_hook)?;
            if left >= entered {
                break;
            }
            if timed_out() {
                return Err(FleetError::DrainTimeout {
                    flow: format!("{} -> {}", f.entry, f.exit),
                    reason: format!(
                        "{entered} requests entered, {left} left after {budget:?} (does every \
                         request that runs the entry run the exit, both attached since the \
                         host started?)"
                    ),
                });
            }
            spins += 1;
            if spins > 64 {
                std::thread::yield_now();
            }
        }
    }
    Ok(())
}

/// `broadcast(group, updates)`: one transactional update of every hook of the plan on
/// every node. Either every hook ends on its new version, or none does. Attaches to every
/// node and gives every lease back at the end (a one-shot control plane such as
/// `rdx broadcast`); a control plane that broadcasts repeatedly keeps a [`Session`].
pub fn broadcast(plan: &Plan, opts: &Options) -> Result<Report> {
    Session::new().broadcast(plan, opts)
}

/// A control plane's standing attachment to the nodes it broadcasts to: one [`CodeFlow`]
/// per node address, kept between broadcasts with its lease, allocator table and map
/// names, so that a broadcast does not map, read and recover every node's region again.
///
/// While a session holds a node's lease (until its TTL runs out unused, or
/// [`Session::release`], or drop), other control planes wait for that node, exactly as
/// with a [`CodeFlow`] kept open for repeated deploys. Every broadcast of a session uses
/// its one lease holder id, which the intent log records for recovery.
#[derive(Debug)]
pub struct Session {
    holder: u32,
    attached: HashMap<String, CodeFlow>,
    compiled: CompileCache,
}

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

impl Session {
    /// A session with a fresh lease holder id and no node attached yet.
    pub fn new() -> Session {
        Session {
            holder: rdx_control::lease::new_holder_id(),
            attached: HashMap::new(),
            compiled: HashMap::new(),
        }
    }

    /// The lease holder id of every broadcast of this session.
    pub fn holder(&self) -> u32 {
        self.holder
    }

    /// Gives every node's lease back and detaches.
    pub fn release(&mut self) -> Result<()> {
        for (address, mut cf) in self.attached.drain() {
            cf.release().map_err(node_err(&address))?;
        }
        Ok(())
    }

    /// [`broadcast`], reusing the nodes attached by earlier broadcasts of this session.
    /// Nodes whose broadcast failed are detached (their leases given back).
    pub fn broadcast(&mut self, plan: &Plan, opts: &Options) -> Result<Report> {
        let report = run(
            plan,
            opts,
            self.holder,
            &mut self.attached,
            &mut self.compiled,
        )?;
        Ok(report)
    }
}

/// One broadcast: check, then begin, prepare, log, hold, commit, flip, release, done (see
/// docs/broadcast.md, "The protocol"). Before the commit point a failure undoes
/// everything; after it, recovery rolls forward.
fn run(
    plan: &Plan,
    opts: &Options,
    holder: u32,
    attached: &mut HashMap<String, CodeFlow>,
    compiled: &mut CompileCache,
) -> Result<Report> {
    let release_order = plan.validate()?;
    let exts = load_extensions(plan)?;
    let t_check = Instant::now();
    let mut work = check(plan, &exts, holder, opts, attached, compiled)?;
    let mut timings = Timings {
        check_us: us(t_check),
        ..Timings::default()
    };
    let id = broadcast_id();
    if opts.dry_run {
        let updates = describe(plan, &exts, &work, false);
        keep(attached, work);
        return Ok(Report {
            id,
            dry_run: true,
            release_order,
            updates,
            timings,
            intent_log: None,
            unrecorded: Vec::new(),
        });
    }

    let t_commit = Instant::now();
    let mut log = begin(plan, opts, &id, holder)?;
    let tag = record::tag_of(&id);
    let records = RecordPlan {
        id: &id,
        holder,
        participants: work.len() as u32,
        decider_address: &plan.nodes[0].address,
    };
    let t_prepare = Instant::now();
    let prepared = prepare(plan, &exts, &mut work, &records);
    timings.prepare_us = us(t_prepare);
    if let Err(e) = prepared {
        return Err(abort(&mut work, log, tag, e));
    }
    log_prepared(&mut log, &work)?;
    crash_if(opts, CrashPoint::Prepared);
    // Before the bubble: nothing in it but the protocol's own steps.
    let updates = describe(plan, &exts, &work, true);

    let t_hold = Instant::now();
    if let Err(e) = hold(plan, &work, &mut timings) {
        return Err(abort(&mut work, log, tag, e));
    }
    crash_if(opts, CrashPoint::Held);
    let committed = record::commit(&participants(&work), tag, || {
        crash_if(opts, CrashPoint::Decided)
    });
    if let Err(e @ FleetError::DecidedAbort { .. }) = committed {
        release_holds(&work);
        return Err(abort(&mut work, log, tag, e));
    }
    committed.map_err(|e| FleetError::AfterCommit(Box::new(e)))?;
    crash_if(opts, CrashPoint::Committed);

    let t_flip = Instant::now();
    let unrecorded = flip(&mut work, opts)?;
    timings.flip_us = us(t_flip);
    release(&release_order, &work, opts)?;
    timings.hold_us = us(t_hold);
    record::settle_all(&participants(&work), tag);

    log.append(&[Entry::Done])?;
    timings.log_us = log.us;
    let path = log.log.finish()?;
    timings.commit_us = us(t_commit);
    keep(attached, work);
    Ok(Report {
        id,
        dry_run: false,
        release_order,
        updates,
        timings,
        intent_log: Some(path),
        unrecorded,
    })
}
