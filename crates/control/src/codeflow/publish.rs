//! Stage 4, publish: [`CodeFlow::tx`] makes prepared versions visible through the slot
//! protocol ([`rdx_transport::slot`]), and detach and rollback publish "nothing" or an
//! earlier held version the same way.

use super::{hex, prepare::PublishRecord, CodeFlow, Compiled, Extension, Prepared};
use crate::alloc::{Arena, Record, RecordState};
use crate::error::{ControlError, Result};
use crate::node::HookInfo;
use crate::registry::{HistoryAction, HistoryEntry};
use crate::tier::Tier;
use rdx_region::layout::*;
use rdx_transport::slot::{self, SlotError};

/// A version made visible.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Published {
    /// The hook.
    pub hook: String,
    /// The version now active.
    pub version: u32,
    /// The version active before (0 if none).
    pub previous_version: u32,
    /// The active word written.
    pub word: u64,
    /// The region generation after the publish.
    pub generation: u64,
    /// Region offset of the code record.
    pub code_offset: u64,
    /// Bytes of the code record.
    pub code_len: u64,
    /// The map ids the code uses, by map index.
    pub map_ids: Vec<u32>,
    /// The JIT tier that built the version now published.
    pub tier: Tier,
}

impl CodeFlow {
    /// `cc_event`: coherence for new code. On the writer's side every byte written must be
    /// visible before the publishing CAS: a fence on the transport (a store fence on shared
    /// memory, a completion wait on the fabric). The host's side of coherence (a serialising
    /// instruction on x86, instruction-cache maintenance on aarch64) runs in its hook path
    /// when it sees a new version number in the slot.
    pub fn cc_event(&self) -> Result<()> {
        Ok(self.t.fence()?)
    }

    /// `tx`: publishes prepared versions, one [`slot::publish`] per hook (the
    /// [`CodeFlow::cc_event`] fence, then one 8-byte compare-and-swap). A hook whose word
    /// changed since it was prepared is refused with [`ControlError::Conflict`] (and its
    /// version aborted); earlier ones stay published. Every version published is recorded in the history ([`CodeFlow::record_history`]).
    pub fn tx(&mut self, prepared: Vec<Prepared>) -> Result<Vec<Published>> {
        let mut published = Vec::with_capacity(prepared.len());
        let outcome = self.publish_each(prepared, &mut published);
        let entries = published.iter().map(|(p, r)| {
            let entry = HistoryEntry {
                version: p.version,
                previous_version: p.previous_version,
                program: r.program.clone(),
                object: r.origin.clone(),
                class: r.class.clone(),
                artifact: hex(&r.artifact_hash),
                generation: p.generation,
                ..self.history_entry(&p.hook, r.action)
            };
            (entry, Some(p.tier))
        });
        let recorded = self.record(entries, || {
            let versions: Vec<String> = published
                .iter()
                .map(|(p, _)| format!("version {} of hook {:?}", p.version, p.hook))
                .collect();
            format!("{} published", versions.join(", "))
        });
        // A refused publish is the error to report; what did publish is recorded either way.
        outcome?;
        recorded?;
        Ok(published.into_iter().map(|(p, _)| p).collect())
    }

    /// Publishes each prepared version in turn (see [`CodeFlow::tx`]), appending what it
    /// published to `out`.
    fn publish_each(
        &mut self,
        prepared: Vec<Prepared>,
        out: &mut Vec<(Published, PublishRecord)>,
    ) -> Result<()> {
        let mut iter = prepared.into_iter();
        while let Some(p) = iter.next() {
            let checked = self
                .check_host()
                .and_then(|_| self.lease.verify(self.t.as_ref()));
            if let Err(e) = checked {
                self.abort(p)?;
                for rest in iter {
                    self.abort(rest)?;
                }
                return Err(e);
            }
            // Mark held first: if we die after the CAS, recovery must not free live code.
            let t = self.t.as_ref();
            let table = self.alloc.as_mut().expect("loaded");
            for &r in &p.records {
                table.set_state(t, r, RecordState::Held)?;
            }
            let published = slot::publish(
                t,
                p.hook.slot_offset,
                p.expected,
                p.new_word,
                Some(p.budget),
            );
            let generation = match published {
                Ok(generation) => generation,
                Err(SlotError::Changed { expected, found }) => {
                    let hook = p.hook.name.clone();
                    self.abort(p)?;
                    for rest in iter {
                        self.abort(rest)?;
                    }
                    return Err(ControlError::Conflict {
                        hook,
                        expected,
                        found,
                    });
                }
                Err(SlotError::Transport(e)) => return Err(e.into()),
            };
            out.push((
                Published {
                    hook: p.hook.name.clone(),
                    version: p.version,
                    previous_version: active_version(p.expected),
                    word: p.new_word,
                    generation,
                    code_offset: p.code_offset,
                    code_len: p.code_len,
                    map_ids: p.map_ids.clone(),
                    tier: p.tier,
                },
                p.record,
            ));
        }
        Ok(())
    }

    /// `deploy_prog`: prepare (allocate, link, write) then `tx`. On any error nothing is
    /// visible and the hook keeps its previous version.
    pub fn deploy_prog(
        &mut self,
        hook: &str,
        ext: &Extension,
        compiled: &Compiled,
    ) -> Result<Published> {
        let p = self.prepare_prog(hook, ext, compiled)?;
        Ok(self.tx(vec![p])?.remove(0))
    }

    /// Publishes `new_word` on a hook with one CAS (for detach and rollback).
    fn swap(
        &mut self,
        hook: &HookInfo,
        expected: u64,
        new_word: u64,
        budget: Option<u64>,
    ) -> Result<u64> {
        if expected & ACTIVE_HOLD != 0 {
            return Err(ControlError::Held {
                hook: hook.name.clone(),
                word: expected,
            });
        }
        self.lease.verify(self.t.as_ref())?;
        slot::publish(
            self.t.as_ref(),
            hook.slot_offset,
            expected,
            new_word,
            budget,
        )
        .map_err(|e| match e {
            SlotError::Changed { expected, found } => ControlError::Conflict {
                hook: hook.name.clone(),
                expected,
                found,
            },
            SlotError::Transport(e) => e.into(),
        })
    }

    /// `detach`: the hook runs nothing (its default). The detached version stays held, so
    /// a rollback can re-attach it. Returns the version that was active (0 if none).
    pub fn detach(&mut self, hook: &str) -> Result<u32> {
        self.begin()?;
        let hook = self.view.hook(hook)?;
        let current = self.active_word(&hook)?;
        let was = active_version(current);
        if was == 0 {
            return Ok(0);
        }
        let generation = self.swap(&hook, current, 0, None)?;
        let entry = HistoryEntry {
            previous_version: was,
            generation,
            ..self.history_entry(&hook.name, HistoryAction::Detach)
        };
        self.record([(entry, None)], || {
            format!("hook {:?} detached from version {was}", hook.name)
        })?;
        Ok(was)
    }

    /// `rollback`: republishes an earlier version still held in the code arena — `to`, or
    /// the newest one older than the active version (the newest held one if detached).
    pub fn rollback(&mut self, hook: &str, to: Option<u32>) -> Result<Published> {
        self.begin()?;
        let info = self.view.hook(hook)?;
        let current = self.active_word(&info)?;
        let cur_v = active_version(current);
        let held: Vec<Record> = self
            .alloc
            .as_ref()
            .expect("loaded")
            .records()
            .filter(|(_, r)| {
                r.arena == Arena::Code && r.hook == info.index && r.state == RecordState::Held
            })
            .map(|(_, r)| r.clone())
            .collect();
        let target =
            match to {
                Some(v) => held.iter().find(|r| r.version == v).ok_or_else(|| {
                    ControlError::NoSuchVersion {
                        hook: hook.into(),
                        version: v,
                        held: {
                            let mut vs: Vec<u32> = held.iter().map(|r| r.version).collect();
                            vs.sort_unstable();
                            if vs.is_empty() {
                                "none".into()
                            } else {
                                vs.iter()
                                    .map(|v| v.to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            }
                        },
                    }
                })?,
                None => held
                    .iter()
                    .filter(|r| if cur_v == 0 { true } else { r.version < cur_v })
                    .max_by_key(|r| r.version)
                    .ok_or_else(|| ControlError::NothingToRollBack { hook: hook.into() })?,
            };
        let word = active_word(target.version, target.entry as u32);
        let generation = if word == current {
            slot::generation(self.t.as_ref())?
        } else {
            self.swap(&info, current, word, Some(target.budget))?
        };
        self.record_rollback(hook, target.version, cur_v, generation)?;
        Ok(Published {
            hook: hook.into(),
            version: target.version,
            previous_version: cur_v,
            word,
            generation,
            code_offset: target.offset,
            code_len: target.size,
            map_ids: target.maps.iter().map(|&m| m as u32).collect(),
            tier: target.tier,
        })
    }
}
