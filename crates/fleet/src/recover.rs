//! Recovery of a collective update (a broadcast or a migration) whose control plane died:
//! from the update records the nodes themselves hold ([`crate::record`]), on any machine
//! that reaches the nodes, with or without the dead control plane's state directory.
//!
//! Per unfinished update: the decision is read from its decision node, or made there (abort,
//! with the same compare-and-swap the coordinator's commit would have used, so exactly one
//! of the two happened); it is copied to every reachable participant; then each node's
//! slots are finished or undone ([`slot::recover`]), its lease taken with the update's
//! holder id (which frees what was prepared but never published), and its record marked
//! settled, the decision node's last. The local intent logs under the state directory are
//! the fast path: they name the nodes, so `rdx recover` on the coordinator's machine needs
//! no addresses.

use crate::error::{node_err, transport_err, Result};
use crate::intent::{self, Entry, IntentLog};
use crate::plan::NodeSpec;
use crate::record::{self, Decision, NodeIntent};
use rdx_control::{create_codeflow, AttachOptions};
use rdx_region::layout::{offsets, IntentSlot};
use rdx_transport::slot::{self, HeldUpdate};
use rdx_transport::Transport;
use serde::Serialize;
use std::path::PathBuf;

/// Where recovery looks for unfinished updates, and what it may do.
#[derive(Clone, Debug)]
pub struct RecoverOptions {
    /// A control plane's state directory: its unfinished intent logs (`<dir>/fleet/`) name
    /// the nodes of the updates it started.
    pub state_dir: PathBuf,
    /// Nodes whose update records to read besides those the intent logs name.
    pub nodes: Vec<NodeSpec>,
    /// Also recover updates whose control plane still seems alive (its pid exists on this
    /// machine, or its lease is live), settle a decision node although some participants
    /// were not reached, and abort an update whose decision node cannot be reached and whose
    /// decision no participant holds (the operator asserts the missing nodes are gone).
    pub force: bool,
}

impl RecoverOptions {
    /// Recovery of the intent logs under `state_dir` (and the nodes they name) only.
    pub fn new(state_dir: impl Into<PathBuf>) -> RecoverOptions {
        RecoverOptions {
            state_dir: state_dir.into(),
            nodes: Vec::new(),
            force: false,
        }
    }
}

/// What recovery did with one unfinished update.
#[derive(Clone, Debug, Serialize)]
pub struct Recovery {
    /// The coordinator's intent log, when it was found (renamed `.done` once finished).
    pub intent_log: Option<PathBuf>,
    /// The update's id.
    pub id: String,
    /// `rolled_forward` (decided committed), `rolled_back` (decided aborted), `undecided`
    /// (the decision node could not be reached and no participant holds the decision) or
    /// `left_running` (its control plane is alive).
    pub outcome: String,
    /// Per node and hook: what was found and done.
    pub actions: Vec<String>,
}

/// An unfinished log: the update it started and the nodes it names.
struct LogRef {
    path: PathBuf,
    id: String,
    holder: u32,
    nodes: Vec<(String, String)>,
}

/// A node recovery reached, with the update record it holds for its current host.
struct Reached {
    name: String,
    address: String,
    t: Box<dyn Transport>,
    record: Option<NodeIntent>,
}

fn reach(name: &str, address: &str) -> std::result::Result<Reached, String> {
    let t = rdx_control::node::connect(address).map_err(|e| e.to_string())?;
    let incarnation = t
        .read_u64(offsets::HEADER_INCARNATION)
        .map_err(|e| e.to_string())?;
    let record = record::read(t.as_ref())
        .map_err(|e| e.to_string())?
        .filter(|r| r.incarnation == incarnation);
    Ok(Reached {
        name: name.into(),
        address: address.into(),
        t,
        record,
    })
}

fn process_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid != 0 && unsafe { libc::kill(pid as i32, 0) } == 0 && pid != std::process::id()
}

/// Why the update's control plane may still be running, if it may: a process of this
/// machine that exists, or (another machine's) a lease still live on a participant. A dead
/// control plane of this machine is known dead at once; another machine's, once its lease
/// ran out (it renews the lease while it works).
fn coordinator_running(first: &NodeIntent, members: &[(&Reached, &NodeIntent)]) -> Option<String> {
    use rdx_control::lease;
    let machine = (first.coordinator >> 32) as u32;
    if machine != 0 && machine == lease::local_holder_tag() {
        let pid = lease::holder_record_pid(first.coordinator);
        return process_alive(pid).then(|| {
            format!("its control plane (pid {pid}) is still running; --force to recover anyway")
        });
    }
    members
        .iter()
        .find_map(|(r, rec)| match lease::inspect(r.t.as_ref()) {
            Ok((_, lease::LeaseState::Held { holder, expiry_ms })) if holder == rec.holder => {
                Some(format!(
                    "{}: its control plane's lease is live for {} ms more; run again after it \
                 expires, or --force",
                    r.name,
                    expiry_ms.saturating_sub(lease::now_ms())
                ))
            }
            _ => None,
        })
}

/// `rdx recover`: finishes or undoes every unfinished update found in the intent logs
/// under the state directory and in the records of the nodes they and
/// [`RecoverOptions::nodes`] name, so that no hook stays held and every node of an update
/// agrees.
pub fn recover(opts: &RecoverOptions) -> Result<Vec<Recovery>> {
    let mut out = Vec::new();
    let mut logs = Vec::new();
    let mut candidates: Vec<(String, String)> = opts
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.address.clone()))
        .collect();
    for path in intent::pending(&opts.state_dir)? {
        let entries = intent::read(&path)?;
        let Some(Entry::Begin {
            id,
            holder,
            pid,
            nodes,
        }) = entries.first().cloned()
        else {
            // Died before the first record reached the disk: nothing was written anywhere.
            IntentLog::reopen(&path)?.finish()?;
            continue;
        };
        if !opts.force && process_alive(pid) {
            continue;
        }
        let ended = entries.iter().find_map(|e| match e {
            Entry::Done => Some("rolled_forward"),
            Entry::Aborted { .. } => Some("rolled_back"),
            _ => None,
        });
        if let Some(outcome) = ended {
            // Finished but for the rename.
            out.push(Recovery {
                intent_log: Some(IntentLog::reopen(&path)?.finish()?),
                id,
                outcome: outcome.into(),
                actions: Vec::new(),
            });
            continue;
        }
        candidates.extend(nodes.iter().cloned());
        logs.push(LogRef {
            path,
            id,
            holder,
            nodes,
        });
    }

    let mut reached: Vec<Reached> = Vec::new();
    let mut unreachable: Vec<(String, String)> = Vec::new();
    for (name, address) in candidates {
        if reached.iter().any(|r| r.address == address)
            || unreachable.iter().any(|(_, a)| *a == address)
        {
            continue;
        }
        match reach(&name, &address) {
            Ok(r) => reached.push(r),
            Err(e) => unreachable.push((name, format!("{address} ({e})"))),
        }
    }

    let mut ids: Vec<String> = logs.iter().map(|l| l.id.clone()).collect();
    for r in &reached {
        if let Some(rec) = r.record.as_ref().filter(|rec| !rec.settled) {
            if !ids.contains(&rec.id) {
                ids.push(rec.id.clone());
            }
        }
    }
    for id in ids {
        let log = logs.iter().find(|l| l.id == id);
        let mut recovery = match log {
            Some(l) if !reached.iter().any(|r| names(r, &id)) => {
                recover_unrecorded(l, &reached, &unreachable)?
            }
            _ => recover_recorded(&id, log, &reached, &unreachable, opts.force)?,
        };
        if let Some(l) = log {
            let ended = match recovery.outcome.as_str() {
                "rolled_forward" => Some(Entry::Done),
                "rolled_back" => Some(Entry::Aborted {
                    reason: "recovered after the control plane died".into(),
                }),
                _ => None,
            };
            if let Some(entry) = ended {
                let mut file = IntentLog::reopen(&l.path)?;
                file.append(&[entry])?;
                recovery.intent_log = Some(file.finish()?);
            } else {
                recovery.intent_log = Some(l.path.clone());
            }
        }
        out.push(recovery);
    }
    Ok(out)
}

/// Whether the node holds a record of update `id`.
fn names(r: &Reached, id: &str) -> bool {
    r.record.as_ref().is_some_and(|rec| rec.id == id)
}

/// An update whose intent log names nodes none of which holds its record: it died before
/// writing any record, so nothing was held and nothing published. Frees what it prepared.
fn recover_unrecorded(
    log: &LogRef,
    reached: &[Reached],
    unreachable: &[(String, String)],
) -> Result<Recovery> {
    let mut actions = Vec::new();
    for (name, address) in &log.nodes {
        if reached.iter().any(|r| &r.address == address) {
            actions.extend(settle_node(name, address, log.holder, &[], false)?);
        } else if let Some((_, why)) = unreachable.iter().find(|(n, _)| n == name) {
            actions.push(format!("{name}: unreachable: {why}; skipped"));
        }
    }
    Ok(Recovery {
        intent_log: None,
        id: log.id.clone(),
        outcome: "rolled_back".into(),
        actions,
    })
}

/// An update recorded on at least one reached node: decide (or learn the decision), copy it
/// to every reached participant, settle each, the decision node last. Nodes its intent log
/// names that hold no record of it (the coordinator died before writing it there) only have
/// what it prepared freed.
fn recover_recorded(
    id: &str,
    log: Option<&LogRef>,
    reached: &[Reached],
    unreachable: &[(String, String)],
    force: bool,
) -> Result<Recovery> {
    let tag = record::tag_of(id);
    let members: Vec<(&Reached, &NodeIntent)> = reached
        .iter()
        .filter_map(|r| {
            r.record
                .as_ref()
                .filter(|rec| rec.id == id)
                .map(|rec| (r, rec))
        })
        .collect();
    let first = members[0].1;
    let mut actions = Vec::new();
    let result = |outcome: &str, actions: Vec<String>| Recovery {
        intent_log: None,
        id: id.into(),
        outcome: outcome.into(),
        actions,
    };
    if !force {
        if let Some(why) = coordinator_running(first, &members) {
            actions.push(why);
            return Ok(result("left_running", actions));
        }
    }

    // The decision: on the decision node, else a copy.
    let copied = members
        .iter()
        .map(|(_, rec)| rec.decision)
        .find(|d| *d != Decision::Prepared);
    let decider_member = members.iter().find(|(_, rec)| rec.is_decider).map(|m| m.0);
    let decider_extra;
    let decider: Option<&Reached> = match decider_member {
        Some(r) => Some(r),
        None => {
            // Recorded redacted: a node given with its token is matched by its redacted form.
            let address = &first.decider_address;
            let given = |r: &&Reached| &rdx_control::node::redact_address(&r.address) == address;
            decider_extra = (!reached.iter().any(|r| given(&r))).then(|| reach(address, address));
            match (&decider_extra, reached.iter().find(given)) {
                (_, Some(r)) => Some(r),
                (Some(Ok(r)), None) => Some(r),
                (Some(Err(e)), None) => {
                    actions.push(format!("decision node {address}: unreachable ({e})"));
                    None
                }
                (None, None) => None,
            }
        }
    };
    let decision = match decider {
        Some(d) if names(d, id) => record::decide(d.t.as_ref(), tag, Decision::Aborted)
            .map_err(transport_err(&d.name))?
            .unwrap_or(Decision::Aborted),
        // The decision node's record of this update is gone (its host restarted, or the
        // coordinator died before writing it): nothing was committed without it, or a copy
        // says so.
        Some(_) => copied.unwrap_or(Decision::Aborted),
        None => match copied {
            Some(d) => d,
            // The operator says the decision node is gone, with its region: no node can have
            // flipped (flips follow the copies), so aborting leaves the others agreeing.
            None if force => Decision::Aborted,
            None => {
                actions.push(
                    "no reachable participant holds the decision: nothing done; run again \
                     when the decision node is reachable (or --force if its host is gone)"
                        .into(),
                );
                return Ok(result("undecided", actions));
            }
        },
    };
    let committed = decision == Decision::Committed;
    actions.push(format!("decision: {}", decision.name()));
    for (r, _) in &members {
        record::decide(r.t.as_ref(), tag, decision).map_err(transport_err(&r.name))?;
    }
    let decider_address = decider.map(|d| d.address.clone());
    for (r, rec) in &members {
        if Some(&r.address) == decider_address.as_ref() || rec.settled {
            continue;
        }
        actions.extend(settle_node(
            &r.name, &r.address, rec.holder, &rec.slots, committed,
        )?);
        record::settle(r.t.as_ref(), tag).map_err(transport_err(&r.name))?;
    }
    if let Some(d) = decider.filter(|d| names(d, id)) {
        let rec = d.record.as_ref().expect("names the update");
        if !rec.settled {
            actions.extend(settle_node(
                &d.name, &d.address, rec.holder, &rec.slots, committed,
            )?);
            // The decision node counts itself when it was reached through its address only.
            let reached_count = members.len() + usize::from(decider_member.is_none());
            if reached_count >= rec.participants as usize || force {
                record::settle(d.t.as_ref(), tag).map_err(transport_err(&d.name))?;
            } else {
                actions.push(format!(
                    "{}: {} of {} participants reached: the decision stays recorded here until \
                     the others are recovered (or --force)",
                    d.name, reached_count, rec.participants
                ));
            }
        }
    }
    for (name, address) in log.map_or(&[][..], |l| &l.nodes[..]) {
        let unrecorded = reached
            .iter()
            .any(|r| &r.address == address && !names(r, id));
        if unrecorded {
            // Only frees what was prepared there; another control plane holding the lease
            // frees it as well when it next takes it.
            match settle_node(name, address, first.holder, &[], false) {
                Ok(done) => actions.extend(done),
                Err(e) => actions.push(format!("{name}: prepared versions left pending: {e}")),
            }
        }
    }
    for (name, why) in unreachable {
        actions.push(format!("{name}: unreachable: {why}; skipped"));
    }
    Ok(result(
        if committed {
            "rolled_forward"
        } else {
            "rolled_back"
        },
        actions,
    ))
}

/// Recovery on one node: attaches with the update's holder id, finishes or undoes each of
/// its slots there ([`slot::recover`]), then takes the lease in earnest (which frees what the
/// update prepared but never published, and marks held what it published) and gives it
/// back. Returns what it found and did, per hook.
fn settle_node(
    name: &str,
    address: &str,
    holder: u32,
    slots: &[IntentSlot],
    committed: bool,
) -> Result<Vec<String>> {
    let spec = AttachOptions {
        holder: Some(holder),
        ..AttachOptions::default()
    };
    let mut cf = match create_codeflow(address, spec) {
        Ok(cf) => cf,
        Err(e) => {
            // A host that died or restarted lost its region with everything prepared in
            // it: nothing to agree on there.
            return Ok(vec![format!("{name}: unreachable ({e}); skipped")]);
        }
    };
    let hooks = cf.view().hooks();
    let mut actions = Vec::new();
    for s in slots {
        let hook = hooks
            .iter()
            .find(|h| h.slot_offset == s.slot_offset)
            .map_or_else(|| format!("slot@{:#x}", s.slot_offset), |h| h.name.clone());
        let t = cf.transport();
        let original = slot::read_active(t, s.slot_offset).map_err(transport_err(name))?;
        let update = HeldUpdate {
            expected: s.expected,
            new_word: s.new_word,
            budget: s.budget,
        };
        let word =
            slot::recover(t, s.slot_offset, &update, committed).map_err(transport_err(name))?;
        let target = if committed { s.new_word } else { s.expected };
        actions.push(format!(
            "{name}/{hook}: found {original:#x}, now {word:#x}{}",
            if word == target {
                ""
            } else {
                " (changed by someone else since; left as is)"
            }
        ));
    }
    cf.mutual_excl().map_err(node_err(name))?;
    cf.release().map_err(node_err(name))?;
    Ok(actions)
}
