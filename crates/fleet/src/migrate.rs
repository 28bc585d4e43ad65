//! Live migration (`rdx migrate`): moves a hook's program, with the contents of its XState
//! maps, from one node to another (a scale-out replica) so that no update is lost.
//!
//! It is a two-node broadcast whose bubble also copies state: the target's version is
//! prepared (maps created or reused, code written, nothing visible); both slots are held;
//! the source's host threads still inside the program finish (their epoch words move on);
//! every map of the source's active version is copied into the target's maps with one-sided
//! reads and writes; the commit point is passed (the target is the decision node); the
//! target flips to the new version and the source to nothing; the holds are released.
//! Callers that waited on the source's hold find the hook empty (its default return) and go
//! to the target, which already has every update the source made. The records (local log,
//! both nodes' update records) are a broadcast's, so `rdx recover` finishes or undoes a
//! migration whose control plane died at any phase.

use crate::broadcast::{crash_if, per_node, CrashPoint, Options};
use crate::error::{node_err, slot_err, transport_err, FleetError, Result};
use crate::intent::{Durability, Entry, IntentLog};
use crate::plan::NodeSpec;
use crate::record::{self, Decision, NodeIntent};
use rdx_control::{create_codeflow, AttachOptions, CodeFlow, Extension, Prepared};
use rdx_region::layout::{active_version, IntentSlot, MapType};
use rdx_transport::slot::{self, QuiesceError};
use rdx_transport::xstate::{self, Copies, MapRef, UPDATE_ANY};
use serde::Serialize;
use std::time::{Duration, Instant};

/// One map copied from the source to the target.
#[derive(Clone, Debug, Serialize)]
pub struct MapCopy {
    /// The map's name.
    pub name: String,
    /// Its id on the source.
    pub source_id: u32,
    /// Its id on the target.
    pub target_id: u32,
    /// Entries copied.
    pub entries: usize,
}

/// Phase durations of one migration, in microseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MigrationTimings {
    /// Attach both nodes, check the source's maps, validate and compile for the target.
    pub check_us: f64,
    /// Write the target's version (nothing visible).
    pub prepare_us: f64,
    /// The source's bubble: hold taken to hold released (callers wait).
    pub freeze_us: f64,
    /// Copying the maps, inside the bubble.
    pub copy_us: f64,
    /// Prepare through release.
    pub total_us: f64,
}

/// What a migration did.
#[derive(Clone, Debug, Serialize)]
pub struct MigrationReport {
    /// The migration's id (also its intent log's name).
    pub id: String,
    /// The hook migrated.
    pub hook: String,
    /// The program.
    pub program: String,
    /// The source node.
    pub source: String,
    /// The target node.
    pub target: String,
    /// The version the source ran (now detached there, still held for a rollback).
    pub source_version: u32,
    /// The version now active on the target.
    pub target_version: u32,
    /// Every map copied.
    pub maps: Vec<MapCopy>,
    /// Phase durations.
    pub timings: MigrationTimings,
    /// The intent log written.
    pub intent_log: std::path::PathBuf,
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

fn refuse(reason: String) -> FleetError {
    FleetError::PlanInvalid(format!("migration: {reason}"))
}

/// Lock token for map writes by this control plane: a control-plane token (pid and stamp), so
/// another control plane can break the lock if this process dies mid-copy.
fn token() -> u64 {
    xstate::control_plane_token(std::process::id())
}

/// The source's maps for its active version of `hook`, checked against `ext`'s declarations
/// (the migrated program must be the one the source runs).
fn source_maps(cf: &CodeFlow, node: &str, hook: &str, ext: &Extension) -> Result<Vec<MapRef>> {
    let versions = cf.versions_readonly(hook).map_err(node_err(node))?;
    let active = versions
        .iter()
        .find(|v| v.active)
        .ok_or_else(|| refuse(format!("{node}/{hook} runs nothing: nothing to migrate")))?;
    if active.map_ids.len() != ext.maps().len() {
        return Err(refuse(format!(
            "{node}/{hook} runs a version with {} maps, {} declares {}",
            active.map_ids.len(),
            ext.name(),
            ext.maps().len()
        )));
    }
    let mut out = Vec::new();
    for (&id, want) in active.map_ids.iter().zip(ext.maps()) {
        let m = xstate::open(cf.transport(), &cf.view().info, id as u32)
            .map_err(|e| refuse(format!("{node}: map {id} of the active version: {e}")))?;
        let r = m.map;
        if matches!(r.map_type, MapType::ProgArray | MapType::RingBuf) {
            return Err(refuse(format!(
                "map {} is a {:?}: its contents cannot move to another node",
                m.name, r.map_type
            )));
        }
        if (r.key_size, r.value_size, r.max_entries)
            != (want.key_size, want.value_size, want.max_entries)
        {
            return Err(refuse(format!(
                "{node}: map {} has shape {}/{}/{}, {} declares {} as {}/{}/{}",
                m.name,
                r.key_size,
                r.value_size,
                r.max_entries,
                ext.name(),
                want.name,
                want.key_size,
                want.value_size,
                want.max_entries
            )));
        }
        out.push(r);
    }
    Ok(out)
}

/// Copies every element of `from` (on the source) into `to` (on the target).
fn copy_map(src: &CodeFlow, dst: &CodeFlow, from: &MapRef, to: &MapRef) -> Result<usize> {
    let err =
        |e: xstate::MapError| FleetError::PlanInvalid(format!("copying map {}: {e}", from.id));
    if from.copies != to.copies && (from.copies > 1 || to.copies > 1) {
        return Err(refuse(format!(
            "map {} keeps {} per-thread copies on the source, {} on the target",
            from.id, from.copies, to.copies
        )));
    }
    let (ts, td) = (src.transport(), dst.transport());
    let keys = xstate::keys(ts, from).map_err(err)?;
    let mut value = vec![0u8; from.lookup_len()];
    let mut n = 0;
    for k in &keys {
        if !xstate::lookup(ts, from, k, &mut value).map_err(err)? {
            continue;
        }
        if from.copies > 1 {
            let stride = from.value_stride as usize;
            for c in 0..from.copies {
                let v = &value[c as usize * stride..][..from.value_size as usize];
                xstate::update(td, to, k, v, UPDATE_ANY, Copies::One(c), token()).map_err(err)?;
            }
        } else {
            xstate::update(
                td,
                to,
                k,
                &value[..from.value_size as usize],
                UPDATE_ANY,
                Copies::All,
                token(),
            )
            .map_err(err)?;
        }
        n += 1;
    }
    Ok(n)
}

/// Waits until no host thread of the node is still inside code it entered before now.
fn quiesce(cf: &CodeFlow, node: &str, budget: Duration) -> Result<()> {
    let deadline = Instant::now() + budget;
    let info = &cf.view().info;
    slot::wait_quiescent(cf.transport(), info, deadline, slot::Poll::Spin).map_err(|e| match e {
        QuiesceError::StillInside { thread_slot } => FleetError::DrainTimeout {
            flow: format!("{node} (migration source)"),
            reason: format!("thread slot {thread_slot} stayed inside extension code"),
        },
        QuiesceError::Transport(e) => transport_err(node)(e),
    })
}

/// Moves `hook`'s program `ext` with its maps' contents from `source` to `target`.
pub fn migrate(
    source: &NodeSpec,
    target: &NodeSpec,
    hook: &str,
    ext: &Extension,
    class: Option<&str>,
    opts: &Options,
) -> Result<MigrationReport> {
    if source.name == target.name || source.address == target.address {
        return Err(refuse("source and target are the same node".into()));
    }
    let holder = rdx_control::lease::new_holder_id();
    let spec = AttachOptions {
        holder: Some(holder),
        lease_ttl: opts.lease_ttl,
        ..AttachOptions::default()
    };
    let t_check = Instant::now();
    let mut cfs = per_node(vec![source.clone(), target.clone()], 2, |n| {
        create_codeflow(&n.address, spec.clone()).map_err(node_err(&n.name))
    })
    .into_iter();
    let mut src = cfs.next().expect("two")?;
    let mut dst = cfs.next().expect("two")?;
    let (sname, dname) = (source.name.as_str(), target.name.as_str());
    for (cf, n) in [(&src, sname), (&dst, dname)] {
        if cf.view().hook(hook).is_err() {
            return Err(FleetError::HookMissing {
                node: n.into(),
                hook: hook.into(),
            });
        }
    }
    let from_maps = source_maps(&src, sname, hook, ext)?;
    let rejected = |e: rdx_control::ControlError| FleetError::Rejected {
        node: dname.into(),
        hook: hook.into(),
        program: ext.name().to_string(),
        reason: e.to_string(),
    };
    let checked = dst.validate_code(ext, hook, class).map_err(rejected)?;
    let compiled = dst
        .jit_compile_code(ext, &checked, None)
        .map_err(rejected)?;
    let mut timings = MigrationTimings {
        check_us: us(t_check),
        ..Default::default()
    };

    let id = crate::broadcast::broadcast_id();
    let durability = opts.durability.unwrap_or_else(|| {
        Durability::for_addresses([source.address.as_str(), target.address.as_str()].into_iter())
    });
    let mut log = IntentLog::create(&opts.state_dir, &id, durability)?;
    log.append(&[Entry::Begin {
        id: id.clone(),
        holder,
        pid: std::process::id(),
        nodes: vec![
            (sname.into(), source.address.clone()),
            (dname.into(), target.address.clone()),
        ],
    }])?;
    let t_total = Instant::now();
    src.mutual_excl().map_err(node_err(sname))?;
    let s_hook = src.view().hook(hook).map_err(node_err(sname))?;
    let s_word =
        slot::read_active(src.transport(), s_hook.slot_offset).map_err(transport_err(sname))?;
    let s_budget =
        slot::read_budget(src.transport(), s_hook.slot_offset).map_err(transport_err(sname))?;
    let t_prepare = Instant::now();
    let prepared: Prepared = dst
        .prepare_prog(hook, ext, &compiled)
        .map_err(node_err(dname))?;
    timings.prepare_us = us(t_prepare);
    log.append(&[
        Entry::Prepared {
            node: dname.into(),
            hook: hook.into(),
            slot_offset: prepared.hook.slot_offset,
            expected: prepared.expected,
            new_word: prepared.new_word,
            budget: prepared.budget,
            version: prepared.version,
        },
        Entry::Prepared {
            node: sname.into(),
            hook: hook.into(),
            slot_offset: s_hook.slot_offset,
            expected: s_word,
            new_word: 0,
            budget: s_budget,
            version: 0,
        },
        Entry::Hold,
    ])?;
    // The update's record on both nodes, the target (the decision node) first.
    let tag = record::tag_of(&id);
    let intent = |node: &CodeFlow, name: &str, is_decider: bool, slot: IntentSlot| NodeIntent {
        id: id.clone(),
        decision: Decision::Prepared,
        settled: false,
        incarnation: node.view().incarnation,
        coordinator: rdx_control::lease::holder_record(std::process::id()),
        holder,
        participants: 2,
        is_decider,
        node_name: name.into(),
        decider_address: target.address.clone(),
        slots: vec![slot],
    };
    let d_intent = intent(
        &dst,
        dname,
        true,
        IntentSlot {
            slot_offset: prepared.hook.slot_offset,
            expected: prepared.expected,
            new_word: prepared.new_word,
            budget: prepared.budget,
        },
    );
    let s_intent = intent(
        &src,
        sname,
        false,
        IntentSlot {
            slot_offset: s_hook.slot_offset,
            expected: s_word,
            new_word: 0,
            budget: s_budget,
        },
    );
    let recorded = record::write(dst.transport(), dname, &d_intent)
        .and_then(|()| record::write(src.transport(), sname, &s_intent));
    if let Err(e) = recorded {
        record::abort(&[(dname, dst.transport())], tag);
        let _ = dst.abort(prepared);
        let _ = src.release();
        let _ = dst.release();
        log.append(&[Entry::Aborted {
            reason: e.to_string(),
        }])?;
        log.finish()?;
        return Err(FleetError::Aborted(Box::new(e)));
    }
    crash_if(opts, CrashPoint::Prepared);

    let (d_slot, s_slot) = (prepared.hook.slot_offset, s_hook.slot_offset);
    // Own connections for the slot words: the CodeFlows stay free for tx and abort.
    let ts_conn = rdx_control::node::connect(&source.address).map_err(node_err(sname))?;
    let td_conn = rdx_control::node::connect(&target.address).map_err(node_err(dname))?;
    let (ts, td) = (ts_conn.as_ref(), td_conn.as_ref());
    let t_freeze = Instant::now();
    // The bubble: target first (idle), then the source, whose callers now wait.
    let mut held_dst = false;
    let mut held_src = false;
    let bubble = (|| -> Result<Vec<MapCopy>> {
        slot::hold(td, d_slot, prepared.expected).map_err(slot_err(dname, hook))?;
        held_dst = true;
        slot::hold(ts, s_slot, s_word).map_err(slot_err(sname, hook))?;
        held_src = true;
        let budget = Duration::from_nanos(src.view().info.hold_timeout_ns / 2);
        quiesce(&src, sname, budget)?;
        let t_copy = Instant::now();
        let mut copies = Vec::new();
        for (from, &to_id) in from_maps.iter().zip(&prepared.map_ids) {
            let to = xstate::open(td, &dst.view().info, to_id)
                .map_err(|e| refuse(format!("{dname}: map {to_id}: {e}")))?;
            let entries = copy_map(&src, &dst, from, &to.map)?;
            copies.push(MapCopy {
                name: to.name,
                source_id: from.id,
                target_id: to_id,
                entries,
            });
        }
        timings.copy_us = us(t_copy);
        Ok(copies)
    })();
    let parts = [(dname, dst.transport()), (sname, src.transport())];
    let bubble = bubble.and_then(|maps| {
        crash_if(opts, CrashPoint::Held);
        match record::commit(&parts, tag, || crash_if(opts, CrashPoint::Decided)) {
            Ok(()) => Ok(maps),
            Err(e @ FleetError::DecidedAbort { .. }) => Err(e),
            // Committed on the decision node: only rolling forward is right now, which is
            // recovery's to do.
            Err(e) => Err(FleetError::AfterCommit(Box::new(e))),
        }
    });
    if let Err(FleetError::AfterCommit(e)) = bubble {
        return Err(*e);
    }
    let maps = match bubble {
        Ok(m) => m,
        Err(e) => {
            record::abort(&parts, tag);
            if held_src {
                let _ = slot::release(ts, s_slot, s_word);
            }
            if held_dst {
                let _ = slot::release(td, d_slot, prepared.expected);
            }
            let _ = dst.abort(prepared);
            let _ = src.release();
            let _ = dst.release();
            log.append(&[Entry::Aborted {
                reason: e.to_string(),
            }])?;
            log.finish()?;
            return Err(FleetError::Aborted(Box::new(e)));
        }
    };
    crash_if(opts, CrashPoint::Committed);

    let mut flip = prepared.clone();
    flip.expected = slot::held(flip.expected);
    flip.new_word = slot::held(flip.new_word);
    dst.tx(vec![flip]).map_err(node_err(dname))?;
    crash_if(opts, CrashPoint::FirstFlip);
    // The source publishes nothing, still held.
    slot::publish(ts, s_slot, slot::held(s_word), slot::held(0), None)
        .map_err(slot_err(sname, hook))?;
    // Release the target first: callers leaving the source's bubble go there next.
    for (t, at, word, node) in [
        (td, d_slot, prepared.new_word, dname),
        (ts, s_slot, 0, sname),
    ] {
        slot::release(t, at, word).map_err(slot_err(node, hook))?;
        if node == dname {
            crash_if(opts, CrashPoint::FirstRelease);
        }
    }
    timings.freeze_us = us(t_freeze);
    timings.total_us = us(t_total);
    record::settle_all(&[(dname, dst.transport()), (sname, src.transport())], tag);
    log.append(&[Entry::Done])?;
    let intent_log = log.finish()?;
    src.release().map_err(node_err(sname))?;
    dst.release().map_err(node_err(dname))?;
    Ok(MigrationReport {
        id,
        hook: hook.into(),
        program: ext.name().to_string(),
        source: sname.into(),
        target: dname.into(),
        source_version: active_version(s_word),
        target_version: prepared.version,
        maps,
        timings,
        intent_log,
    })
}
