//! What a node holds and freeing what no thread can run: the held versions of a hook, and
//! [`CodeFlow::reclaim`], which retires unpublished versions and unused maps and frees them
//! once every thread has left them.

use super::{hex, CodeFlow};
use crate::alloc::{AllocTable, Arena, RecordState};
use crate::error::{ControlError, Result};
use crate::node::HookInfo;
use crate::tier::Tier;
use rdx_region::layout::*;
use rdx_transport::slot::{self, QuiesceError};
use rdx_transport::Transport;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A held version of a hook, from the node's allocator table.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HeldVersion {
    /// The version number.
    pub version: u32,
    /// Whether it is the one the hook runs.
    pub active: bool,
    /// Region offset of its code record.
    pub code_offset: u64,
    /// Bytes of its code record.
    pub code_len: u64,
    /// Instructions of the program.
    pub insns: u32,
    /// When it was prepared, in ms since the Unix epoch.
    pub created_ms: u64,
    /// Hex of the first bytes of its artifact's content hash.
    pub hash_prefix: String,
    /// The map ids its code uses.
    pub map_ids: Vec<u16>,
    /// The JIT tier that built this version.
    pub tier: Tier,
}

/// What [`CodeFlow::reclaim`] freed.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reclaimed {
    /// Code versions freed.
    pub code_versions: u32,
    /// Code bytes freed.
    pub code_bytes: u64,
    /// Maps freed.
    pub maps: u32,
    /// Map bytes freed.
    pub map_bytes: u64,
}

fn held_versions(
    t: &dyn Transport,
    table: &AllocTable,
    hook: &HookInfo,
) -> Result<Vec<HeldVersion>> {
    let active = slot::read_active(t, hook.slot_offset)?;
    let mut v: Vec<HeldVersion> = table
        .records()
        .filter(|(_, r)| {
            r.arena == Arena::Code && r.hook == hook.index && r.state == RecordState::Held
        })
        .map(|(_, r)| HeldVersion {
            version: r.version,
            active: active_version(active) == r.version
                && active_entry_offset(active) as u64 == r.entry,
            code_offset: r.offset,
            code_len: r.size,
            insns: r.insn_count,
            created_ms: r.created_ms,
            hash_prefix: hex(&r.hash[..8]),
            map_ids: r.maps.clone(),
            tier: r.tier,
        })
        .collect();
    v.sort_by_key(|b| std::cmp::Reverse(b.version));
    Ok(v)
}

impl CodeFlow {
    /// Versions of a hook still held in the code arena, newest first (takes the lease).
    pub fn versions(&mut self, hook: &str) -> Result<Vec<HeldVersion>> {
        self.begin()?;
        let hook = self.view.hook(hook)?;
        held_versions(self.t.as_ref(), self.alloc.as_ref().expect("loaded"), &hook)
    }

    /// Versions of a hook still held, read without the lease (for `node show`, `history`).
    pub fn versions_readonly(&self, hook: &str) -> Result<Vec<HeldVersion>> {
        let hook = self.view.hook(hook)?;
        match AllocTable::peek(self.t.as_ref(), &self.view.info, self.view.incarnation)? {
            Some(table) => held_versions(self.t.as_ref(), &table, &hook),
            None => Ok(Vec::new()),
        }
    }

    pub(super) fn reclaim_for(&mut self, arena: Arena) -> Result<Reclaimed> {
        // First keep one previous version per hook (a rollback target); then everything.
        let r = self.reclaim(1)?;
        if self.alloc().largest_gap(arena) > 0 && (r.code_versions > 0 || r.maps > 0) {
            return Ok(r);
        }
        self.reclaim(0)
    }

    /// Frees code versions that no hook publishes (keeping the newest `keep_previous` per
    /// hook for rollback) and maps that no remaining version uses, once the node's epoch words
    /// show that no host thread can still be running them: the records are marked retired,
    /// then [`slot::wait_quiescent`] (remote barrier, epoch snapshot, every thread that was
    /// inside extension code moves on) before they are freed.
    pub fn reclaim(&mut self, keep_previous: usize) -> Result<Reclaimed> {
        self.begin()?;
        let info = self.view.info.clone();
        let mut active = BTreeMap::new();
        for h in self.view.hooks() {
            active.insert(h.index, self.active_word(&h)?);
        }
        let table = self.alloc.as_ref().expect("loaded");
        let mut per_hook: BTreeMap<u32, Vec<(u32, usize)>> = BTreeMap::new();
        let mut retire = Vec::new();
        for (i, r) in table.records() {
            if r.arena != Arena::Code {
                continue;
            }
            if r.state == RecordState::Retired {
                retire.push(i);
                continue;
            }
            if r.state != RecordState::Held {
                continue;
            }
            let is_active = active.get(&r.hook).is_some_and(|w| {
                active_entry_offset(*w) as u64 == r.entry && active_version(*w) == r.version
            });
            if !is_active {
                per_hook.entry(r.hook).or_default().push((r.version, i));
            }
        }
        for (_, mut vs) in per_hook {
            vs.sort_by_key(|b| std::cmp::Reverse(b.0));
            retire.extend(vs.into_iter().skip(keep_previous).map(|(_, i)| i));
        }
        // Maps no longer used by any code record that stays.
        let used: Vec<u16> = table
            .records()
            .filter(|(i, r)| r.arena == Arena::Code && !retire.contains(i))
            .flat_map(|(_, r)| r.maps.clone())
            .collect();
        let maps: Vec<usize> = if keep_previous == 0 {
            table
                .records()
                .filter(|(_, r)| {
                    r.arena == Arena::Scratch
                        && r.state != RecordState::Pending
                        && !used.contains(&(r.entry as u16))
                })
                .map(|(i, _)| i)
                .collect()
        } else {
            table
                .records()
                .filter(|(_, r)| r.arena == Arena::Scratch && r.state == RecordState::Retired)
                .map(|(i, _)| i)
                .collect()
        };
        if retire.is_empty() && maps.is_empty() {
            return Ok(Reclaimed::default());
        }
        let t = self.t.as_ref();
        let table = self.alloc.as_mut().expect("loaded");
        for &i in retire.iter().chain(&maps) {
            table.set_state(t, i, RecordState::Retired)?;
        }
        // Maps leave the meta table first so no new lookup finds them.
        for &i in &maps {
            let id = table.get(i).expect("retired").entry as u32;
            t.write_u64(info.xmeta_offset(id), 0)?;
        }
        let deadline = Instant::now() + self.reclaim_timeout;
        let pause = slot::Poll::Sleep(Duration::from_micros(50));
        match slot::wait_quiescent(t, &info, deadline, pause) {
            Ok(()) => {}
            // Leave them retired: a later reclamation finishes the job.
            Err(QuiesceError::StillInside { thread_slot }) => {
                return Err(ControlError::ReclaimBlocked {
                    thread_slot,
                    waited_ms: self.reclaim_timeout.as_millis() as u64,
                })
            }
            Err(QuiesceError::Transport(e)) => return Err(e.into()),
        }
        let mut out = Reclaimed::default();
        for &i in retire.iter().chain(&maps) {
            let r = table.get(i).expect("retired").clone();
            match r.arena {
                Arena::Code => {
                    out.code_versions += 1;
                    out.code_bytes += r.size;
                }
                Arena::Scratch => {
                    out.maps += 1;
                    out.map_bytes += r.size;
                }
            }
            table.set_state(t, i, RecordState::Free)?;
        }
        if !maps.is_empty() {
            self.map_names = None;
        }
        Ok(out)
    }

    /// Free and total bytes of the code arena and the scratchpad (needs the lease).
    pub fn arena_usage(&mut self) -> Result<[(u64, u64); 2]> {
        self.begin()?;
        let a = self.alloc.as_ref().expect("loaded");
        Ok([
            (a.free_bytes(Arena::Code), a.arena_bytes(Arena::Code)),
            (a.free_bytes(Arena::Scratch), a.arena_bytes(Arena::Scratch)),
        ])
    }
}
