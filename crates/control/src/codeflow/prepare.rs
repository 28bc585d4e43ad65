//! Stage 3, prepare: [`CodeFlow::prepare_prog`] writes a version (maps, linked code, its
//! allocator record) into the node without making it visible, after checking the
//! [`Compiled`] was verified for that hook on this node; [`CodeFlow::abort`] undoes it.

use super::{link::FallbackLayout, CodeFlow, Compiled, Extension};
use crate::alloc::{Arena, Record, RecordState, RECORD_MAPS};
use crate::error::{ControlError, Result, Unverified};
use crate::lease;
use crate::node::HookInfo;
use crate::registry::HistoryAction;
use crate::tier::Tier;
use rdx_jit::Build;
use rdx_region::layout::*;

/// A version written into the node but not yet visible.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The hook it will be published in.
    pub hook: HookInfo,
    /// The version it will be published as.
    pub version: u32,
    /// The hook's active word when prepared: the publish CAS expects it.
    pub expected: u64,
    /// The active word that publishes it.
    pub new_word: u64,
    /// The instruction budget the slot must carry.
    pub budget: u64,
    /// The JIT tier that built it.
    pub tier: Tier,
    /// Alloc records created for it (code first, then new maps).
    pub(super) records: Vec<usize>,
    /// Meta ids of maps created for it (freed on abort).
    pub(super) new_maps: Vec<u32>,
    /// Region offset of its code record.
    pub code_offset: u64,
    /// Bytes of its code record.
    pub code_len: u64,
    /// The map ids its code uses, by map index.
    pub map_ids: Vec<u32>,
    /// What the history records when it is published.
    pub(super) record: PublishRecord,
}

impl Prepared {
    /// Records its publication in the history as `action` instead of the one its build
    /// implies (an ACL policy published with the generic enforcement build).
    pub fn record_as(&mut self, action: HistoryAction) {
        self.record.action = action;
    }
}

/// What the history says about a prepared version once [`CodeFlow::tx`] publishes it.
#[derive(Clone, Debug)]
pub(super) struct PublishRecord {
    pub(super) action: HistoryAction,
    pub(super) program: String,
    pub(super) origin: String,
    pub(super) class: String,
    pub(super) artifact_hash: [u8; 32],
}

impl CodeFlow {
    /// Above every version this hook holds or runs, and above every version freed on this
    /// node, so that no active word is ever reused for other code.
    fn next_version(&self, hook: &HookInfo, active: u64) -> u32 {
        let held = self
            .alloc
            .as_ref()
            .map(|a| {
                a.records()
                    .filter(|(_, r)| r.arena == Arena::Code && r.hook == hook.index)
                    .map(|(_, r)| r.version)
                    .max()
                    .unwrap_or(0)
                    .max(a.freed_version())
            })
            .unwrap_or(0);
        held.max(active_version(active)).wrapping_add(1).max(1)
    }

    /// Writes a version of `ext` for `hook` into the node — maps, code, record — without
    /// making it visible. [`CodeFlow::tx`] publishes it; [`CodeFlow::abort`] undoes it.
    /// `compiled` must have been verified for `hook` on a node with this node's EIM spec,
    /// from `ext`'s code, and compiled for this node's architecture
    /// ([`ControlError::NotVerifiedFor`] otherwise, before anything is written).
    pub fn prepare_prog(
        &mut self,
        hook: &str,
        ext: &Extension,
        compiled: &Compiled,
    ) -> Result<Prepared> {
        self.check_verified_for(&compiled.verified, ext, Some(hook))?;
        if compiled.artifact().meta.arch != self.arch {
            return Err(ControlError::NotVerifiedFor {
                hook: compiled.verified.hook.clone(),
                class: compiled.verified.class.clone(),
                mismatch: Unverified::Arch,
            });
        }
        self.begin()?;
        let hook = self.view.hook(hook)?;
        let expected = self.active_word(&hook)?;
        if expected & ACTIVE_HOLD != 0 {
            return Err(ControlError::Held {
                hook: hook.name,
                word: expected,
            });
        }
        let version = self.next_version(&hook, expected);
        let fallback = FallbackLayout::of(compiled, ext)?;
        let code_len = fallback.record_len(compiled.artifact().code.len() as u64);
        let entry_rel = compiled.artifact().meta.entry_offset as u64 + fallback.code_at();
        if !entry_rel.is_multiple_of(CODE_ENTRY_ALIGN) {
            return Err(ControlError::Link(format!(
                "entry offset {entry_rel:#x} is not {CODE_ENTRY_ALIGN}-byte aligned"
            )));
        }
        let rec = Record {
            state: RecordState::Pending,
            arena: Arena::Code,
            offset: 0,
            size: 0,
            hook: hook.index,
            version,
            entry: 0,
            created_ms: lease::now_ms(),
            generation: 0,
            insn_count: ext.insns().len() as u32,
            maps: vec![],
            hash: compiled.artifact_hash()[..16].try_into().expect("16"),
            budget: compiled.budget(),
            tier: compiled.tier(),
        };
        let (code_rec, code_offset) = match self.allocate(Arena::Code, code_len, rec.clone()) {
            Ok(x) => x,
            Err(ControlError::ArenaFull { .. }) => {
                self.reclaim_for(Arena::Code)?;
                self.allocate(Arena::Code, code_len, rec)?
            }
            Err(e) => return Err(e),
        };
        let (map_ids, map_recs, new_maps) = match self.maps_for(ext) {
            Ok(x) => x,
            Err(e) => {
                self.abort_records(&[code_rec], &[])?;
                return Err(e);
            }
        };
        let mut records = vec![code_rec];
        records.extend(map_recs);
        let written = (|| -> Result<()> {
            if map_ids.len() > RECORD_MAPS {
                return Err(ControlError::Invalid(format!(
                    "a program may use at most {RECORD_MAPS} maps, it has {}",
                    map_ids.len()
                )));
            }
            self.write_code(compiled, &map_ids, code_offset + fallback.code_at())?;
            if let Some(layout) = &fallback.image {
                self.write_fallback(ext, &map_ids, code_offset, layout)?;
            }
            let mut r = self
                .alloc
                .as_ref()
                .expect("loaded")
                .get(code_rec)
                .expect("allocated")
                .clone();
            r.entry = code_offset + entry_rel;
            r.maps = map_ids.iter().map(|&m| m as u16).collect();
            let t = self.t.as_ref();
            self.alloc.as_mut().expect("loaded").put(t, code_rec, r)?;
            Ok(())
        })();
        if let Err(e) = written {
            self.abort_records(&records, &new_maps)?;
            return Err(e);
        }
        let entry = code_offset + entry_rel;
        Ok(Prepared {
            new_word: active_word(version, entry as u32),
            hook,
            version,
            expected,
            budget: compiled.budget(),
            tier: compiled.tier(),
            records,
            new_maps,
            code_offset,
            code_len,
            map_ids,
            record: PublishRecord {
                action: match compiled.build() {
                    Build::Generic => HistoryAction::Deploy,
                    Build::Elite(_) => HistoryAction::Optimize,
                    Build::Scouting(_) => HistoryAction::Profile,
                },
                program: ext.name().to_string(),
                origin: ext.origin().to_string(),
                class: compiled.verified.class.clone(),
                artifact_hash: *compiled.artifact_hash(),
            },
        })
    }

    /// Undoes a prepared version that will not be published: frees its code and new maps.
    pub fn abort(&mut self, p: Prepared) -> Result<()> {
        self.abort_records(&p.records, &p.new_maps)
    }
}
