//! The maps a version uses: live maps of the same name and shape are reused, others are
//! created in the scratchpad ([`CodeFlow::deploy_xstate`]) as part of preparing a version.

use super::{CodeFlow, Extension};
use crate::alloc::{Arena, Record, RecordState};
use crate::error::{ControlError, Result};
use crate::lease;
use crate::tier::Tier;
use rdx_bpf::program::{MapDef, MapOrigin, ObjectMapType};
use rdx_region::layout::*;
use rdx_transport::xstate::{self, MapSpec};
use std::collections::BTreeMap;

fn region_map_type(m: &MapDef) -> Result<MapType> {
    match m.map_type {
        ObjectMapType::Supported(t) => Ok(t),
        ObjectMapType::Other(n) => Err(ControlError::BadMap {
            name: m.name.clone(),
            reason: format!("map type {n} is not supported by rdx"),
        }),
    }
}

impl CodeFlow {
    fn live_maps(&mut self) -> Result<&mut BTreeMap<String, (u32, MapSpec)>> {
        if self.map_names.is_none() {
            let mut names = BTreeMap::new();
            // One read of the meta table, then only the live entries opened (rather than
            // a read per possible map id).
            let info = &self.view.info;
            let entry = std::mem::size_of::<XStateMeta>();
            let mut meta = vec![0u8; info.xstate_capacity as usize * entry];
            self.t.read(info.xmeta_offset(0), &mut meta)?;
            let live = (0..info.xstate_capacity).filter(|&id| {
                let o = id as usize * entry;
                u32::from_le_bytes(meta[o..o + 4].try_into().expect("4")) == XMETA_LIVE
            });
            for id in live {
                let m = match xstate::open(self.t.as_ref(), info, id) {
                    Ok(m) => m,
                    // Freed between the two reads: not live.
                    Err(xstate::MapError::NotFound) => continue,
                    Err(e) => return Err(e.into()),
                };
                names.insert(
                    m.name.clone(),
                    (
                        m.id,
                        MapSpec {
                            map_type: m.map.map_type,
                            key_size: m.map.key_size,
                            value_size: m.map.value_size,
                            max_entries: m.map.max_entries,
                            flags: 0,
                            name: m.name,
                        },
                    ),
                );
            }
            self.map_names = Some(names);
        }
        Ok(self.map_names.as_mut().expect("just filled"))
    }

    /// `deploy_xstate`: allocates a map in the scratchpad, writes its header and zeroed data,
    /// publishes its meta entry. Returns the map id and its alloc record (pending until the
    /// version using it is published).
    pub fn deploy_xstate(
        &mut self,
        spec: &MapSpec,
        initial: Option<&[u8]>,
    ) -> Result<(u32, usize)> {
        self.begin()?;
        let info = self.view.info.clone();
        let layout = xstate::layout(spec, info.thread_slots)?;
        // A free meta id that no pending record claims.
        let mut meta = vec![0u8; info.xstate_capacity as usize * std::mem::size_of::<XStateMeta>()];
        self.t.read(info.xmeta_offset(0), &mut meta)?;
        let claimed: Vec<u64> = self
            .alloc()
            .records()
            .filter(|(_, r)| r.arena == Arena::Scratch)
            .map(|(_, r)| r.entry)
            .collect();
        let id = (0..info.xstate_capacity)
            .find(|&id| {
                let o = id as usize * std::mem::size_of::<XStateMeta>();
                u32::from_le_bytes(meta[o..o + 4].try_into().expect("4")) == XMETA_FREE
                    && id != info.trace_map_id
                    && !claimed.contains(&(id as u64))
            })
            .ok_or_else(|| ControlError::BadMap {
                name: spec.name.clone(),
                reason: format!(
                    "all {} XState meta entries are in use",
                    info.xstate_capacity
                ),
            })?;
        let rec = Record {
            state: RecordState::Pending,
            arena: Arena::Scratch,
            offset: 0,
            size: 0,
            hook: u32::MAX,
            version: 0,
            entry: id as u64,
            created_ms: lease::now_ms(),
            generation: 0,
            insn_count: 0,
            maps: vec![],
            hash: [0; 16],
            budget: 0,
            tier: Tier::Optimizing,
        };
        let (slot, offset) = match self.allocate(Arena::Scratch, layout.footprint(), rec.clone()) {
            Ok(x) => x,
            Err(ControlError::ArenaFull { .. }) => {
                self.reclaim_for(Arena::Scratch)?;
                self.allocate(Arena::Scratch, layout.footprint(), rec)?
            }
            Err(e) => return Err(e),
        };
        let created = xstate::create(self.t.as_ref(), &info, id, offset, spec).and_then(|m| {
            if let Some(v) = initial {
                if v.len() > m.value_size as usize {
                    return Err(xstate::MapError::Invalid(format!(
                        "initial value of {} bytes for a {}-byte value",
                        v.len(),
                        m.value_size
                    )));
                }
                self.t.write(m.data, v)?;
            }
            Ok(m)
        });
        if let Err(e) = created {
            let t = self.t.as_ref();
            self.alloc
                .as_mut()
                .expect("loaded")
                .set_state(t, slot, RecordState::Free)?;
            return Err(e.into());
        }
        if !spec.name.starts_with('.') && !spec.name.contains('.') {
            let s = spec.clone();
            self.live_maps()?.insert(s.name.clone(), (id, s));
        }
        Ok((id, slot))
    }

    /// Map ids for an extension's maps: live maps of the same name and shape are reused (their
    /// contents survive a new version and a rollback); others, and every global-data map, are
    /// created. Returns (ids, records of created maps, created ids).
    pub(super) fn maps_for(&mut self, ext: &Extension) -> Result<(Vec<u32>, Vec<usize>, Vec<u32>)> {
        let mut ids = Vec::new();
        let mut recs = Vec::new();
        let mut created = Vec::new();
        let result = (|| -> Result<()> {
            for m in ext.maps() {
                let map_type = region_map_type(m)?;
                let global = m.origin == MapOrigin::GlobalData;
                let name = if global {
                    let short: String = ext
                        .name()
                        .chars()
                        .take(XSTATE_NAME_LEN - m.name.len().min(12))
                        .collect();
                    let mut n = format!("{short}{}", m.name);
                    n.truncate(XSTATE_NAME_LEN);
                    n
                } else {
                    let mut n = m.name.clone();
                    if n.len() > XSTATE_NAME_LEN {
                        return Err(ControlError::BadMap {
                            name: n,
                            reason: format!("name longer than {XSTATE_NAME_LEN} bytes"),
                        });
                    }
                    n.truncate(XSTATE_NAME_LEN);
                    n
                };
                let spec = MapSpec {
                    map_type,
                    key_size: m.key_size,
                    value_size: m.value_size,
                    max_entries: m.max_entries,
                    flags: 0,
                    name: name.clone(),
                };
                if !global {
                    if let Some((id, live)) = self.live_maps()?.get(&name) {
                        if live.map_type == spec.map_type
                            && live.key_size == spec.key_size
                            && live.value_size == spec.value_size
                            && live.max_entries == spec.max_entries
                        {
                            ids.push(*id);
                            continue;
                        }
                        return Err(ControlError::BadMap {
                            name,
                            reason: format!(
                                "a live map of that name has another shape ({:?} {}/{}/{}, the program wants {:?} {}/{}/{})",
                                live.map_type, live.key_size, live.value_size, live.max_entries,
                                spec.map_type, spec.key_size, spec.value_size, spec.max_entries
                            ),
                        });
                    }
                }
                let (id, rec) = self.deploy_xstate(&spec, m.initial_value.as_deref())?;
                ids.push(id);
                recs.push(rec);
                created.push(id);
            }
            Ok(())
        })();
        if let Err(e) = result {
            self.abort_records(&recs, &created)?;
            return Err(e);
        }
        Ok((ids, recs, created))
    }

    pub(super) fn abort_records(&mut self, recs: &[usize], maps: &[u32]) -> Result<()> {
        let info = self.view.info.clone();
        for &id in maps {
            self.t.write_u64(info.xmeta_offset(id), 0)?;
        }
        if let Some(names) = self.map_names.as_mut() {
            names.retain(|_, (id, _)| !maps.contains(id));
        }
        let t = self.t.as_ref();
        let table = self.alloc.as_mut().expect("loaded");
        for &r in recs {
            table.set_state(t, r, RecordState::Free)?;
        }
        Ok(())
    }
}
