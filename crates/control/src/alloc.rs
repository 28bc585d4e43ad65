//! The control plane's allocator for the code arena and the XState scratchpad, persisted in
//! the region's alloc section so that another control plane (after this one died, or on
//! another machine) recovers exactly what is in use.
//!
//! The section holds a small header and a table of fixed-size extent records:
//!
//! ```text
//! alloc section:  [AllocHeader 128 B][Record 128 B] x capacity
//! Record:   0 state u32 | 4 kind u32 | 8 offset u64 | 16 size u64 | 24 hook u32 | 28 version u32
//!          32 entry/map id u64 | 40 created_ms u64 | 48 generation u64 | 56 map_count u32
//!          60 insn_count u32 | 64 map ids [u16; 16] | 96 content hash prefix [u8; 16]
//!         112 budget u64 | 120 tier u32 (0 optimizing, 1 baseline) | 124 reserved u32
//! ```
//!
//! A record is written body first, then its first word (state and kind) with release order,
//! so a reader never trusts a half-written record. The in-memory [`AllocTable`] mirrors the
//! section while this control plane holds the lease; every change is written through.
//!
//! Record states: `Pending` (allocated by a deploy that has not finished — a control plane
//! that died leaves these, and recovery frees those no hook uses), `Held` (a complete
//! version, active or kept for rollback; or a live map) and `Retired` (waiting for every
//! host thread to leave it before it is freed).

use crate::error::{ControlError, Result};
use crate::tier::Tier;
use rdx_region::geometry::HeaderInfo;
use rdx_region::layout::{align_up, SectionId, CODE_ENTRY_ALIGN, MAP_ALIGN};
use rdx_transport::Transport;
use std::collections::BTreeMap;

/// `"RDXALOC1"` little-endian: the first word of the alloc section.
pub const ALLOC_MAGIC: u64 = u64::from_le_bytes(*b"RDXALOC1");
/// Format version of the alloc section.
pub const ALLOC_VERSION: u32 = 1;
/// Bytes of the alloc section's header.
pub const ALLOC_HEADER_LEN: u64 = 128;
/// Bytes of one extent record.
pub const RECORD_LEN: u64 = 128;
/// Map ids a code record remembers (the maps its version uses).
pub const RECORD_MAPS: usize = 16;
/// Code extents are rounded to cache lines so that two versions never share one.
pub const CODE_GRANULE: u64 = 64;

const H_MAGIC: u64 = 0;
const H_VERSION: u64 = 8;
const H_INCARNATION: u64 = 16;
const H_HOLDER_PID: u64 = 24;
const H_SEQ: u64 = 32;
/// The highest version of any code record freed in this incarnation. New versions start
/// above it, so an active word (version, entry) never comes back with other code behind it:
/// a host thread that ran a word skips the coherence step when it sees that word again.
const H_FREED_VERSION: u64 = 40;

/// Lifecycle of an extent record (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum RecordState {
    /// Unused slot of the table.
    Free = 0,
    /// Allocated by a deploy that has not finished.
    Pending = 1,
    /// A complete version (active or kept for rollback), or a live map.
    Held = 2,
    /// Unpublished; freed once no host thread can be running it.
    Retired = 3,
}

impl RecordState {
    fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Free,
            1 => Self::Pending,
            2 => Self::Held,
            3 => Self::Retired,
            _ => return None,
        })
    }
}

/// Which part of the region an extent lies in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Arena {
    /// The code arena.
    Code = 1,
    /// The XState scratchpad.
    Scratch = 2,
}

impl Arena {
    /// The arena's name in messages (`code`, `scratch`).
    pub fn name(self) -> &'static str {
        match self {
            Arena::Code => "code",
            Arena::Scratch => "XState",
        }
    }
}

/// One extent of the code arena or the scratchpad.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Where the record is in its lifecycle.
    pub state: RecordState,
    /// The arena the extent lies in.
    pub arena: Arena,
    /// Region offset of the extent.
    pub offset: u64,
    /// Bytes of the extent.
    pub size: u64,
    /// Code: hook slot index. Maps: unused.
    pub hook: u32,
    /// Code: version number published in the hook's active word.
    pub version: u32,
    /// Code: region offset of the entry point. Maps: map id.
    pub entry: u64,
    /// When the record was created, in ms since the Unix epoch.
    pub created_ms: u64,
    /// Region generation at publication.
    pub generation: u64,
    /// Code: instructions of the version (for listings).
    pub insn_count: u32,
    /// Code: ids of the maps this version uses.
    pub maps: Vec<u16>,
    /// Code: the first 16 bytes of the artifact's content hash.
    pub hash: [u8; 16],
    /// Code: the instruction budget the hook slot must carry for this version.
    pub budget: u64,
    /// Code: the JIT tier that built this version (maps: [`Tier::Optimizing`]).
    pub tier: Tier,
}

impl Record {
    fn encode(&self) -> [u8; RECORD_LEN as usize] {
        let mut b = [0u8; RECORD_LEN as usize];
        b[0..4].copy_from_slice(&(self.state as u32).to_le_bytes());
        b[4..8].copy_from_slice(&(self.arena as u32).to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.size.to_le_bytes());
        b[24..28].copy_from_slice(&self.hook.to_le_bytes());
        b[28..32].copy_from_slice(&self.version.to_le_bytes());
        b[32..40].copy_from_slice(&self.entry.to_le_bytes());
        b[40..48].copy_from_slice(&self.created_ms.to_le_bytes());
        b[48..56].copy_from_slice(&self.generation.to_le_bytes());
        b[56..60].copy_from_slice(&(self.maps.len() as u32).to_le_bytes());
        b[60..64].copy_from_slice(&self.insn_count.to_le_bytes());
        for (i, m) in self.maps.iter().take(RECORD_MAPS).enumerate() {
            b[64 + 2 * i..66 + 2 * i].copy_from_slice(&m.to_le_bytes());
        }
        b[96..112].copy_from_slice(&self.hash);
        b[112..120].copy_from_slice(&self.budget.to_le_bytes());
        b[120..124].copy_from_slice(&self.tier.code().to_le_bytes());
        b
    }

    fn decode(b: &[u8], index: usize) -> Result<Option<Record>> {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8"));
        let bad = |what: String| ControlError::AllocCorrupt(format!("record {index}: {what}"));
        let state =
            RecordState::from_u32(u32_at(0)).ok_or_else(|| bad(format!("state {}", u32_at(0))))?;
        if state == RecordState::Free {
            return Ok(None);
        }
        let arena = match u32_at(4) {
            1 => Arena::Code,
            2 => Arena::Scratch,
            k => return Err(bad(format!("arena kind {k}"))),
        };
        let tier =
            Tier::from_code(u32_at(120)).ok_or_else(|| bad(format!("tier {}", u32_at(120))))?;
        let map_count = u32_at(56) as usize;
        if map_count > RECORD_MAPS {
            return Err(bad(format!("{map_count} maps")));
        }
        Ok(Some(Record {
            state,
            arena,
            offset: u64_at(8),
            size: u64_at(16),
            hook: u32_at(24),
            version: u32_at(28),
            entry: u64_at(32),
            created_ms: u64_at(40),
            generation: u64_at(48),
            insn_count: u32_at(60),
            maps: (0..map_count)
                .map(|i| u16::from_le_bytes([b[64 + 2 * i], b[65 + 2 * i]]))
                .collect(),
            hash: b[96..112].try_into().expect("16"),
            budget: u64_at(112),
            tier,
        }))
    }
}

/// What the alloc section holds for this incarnation of the host.
enum Stored {
    Table(AllocTable),
    /// Nothing yet (or a previous incarnation's): an empty table of the section's shape,
    /// to be formatted.
    Blank(AllocTable),
}

/// The allocator: the alloc section's table, mirrored in memory.
#[derive(Debug)]
pub struct AllocTable {
    section: u64,
    capacity: u32,
    records: Vec<Option<Record>>,
    /// The records' extents in address order, `(arena, offset, record index) -> end`, so
    /// that finding room walks the arena once, without sorting or allocating per deploy.
    extents: BTreeMap<(u32, u64, usize), u64>,
    code: (u64, u64),
    scratch: (u64, u64),
    freed_version: u32,
}

impl AllocTable {
    /// Reads the table from the region; initialises it if the section is blank or describes
    /// a previous incarnation of the host (whose code and maps are gone with it). Writes:
    /// only under the lease.
    pub fn load(t: &dyn Transport, info: &HeaderInfo, incarnation: u64) -> Result<AllocTable> {
        match Self::read(t, info, incarnation)? {
            Stored::Table(table) => Ok(table),
            Stored::Blank(mut blank) => {
                blank.format(t, incarnation)?;
                Ok(blank)
            }
        }
    }

    /// Reads the table without writing anything: `None` when the region has none for this
    /// incarnation of the host yet (no control plane deployed since it started).
    pub fn peek(
        t: &dyn Transport,
        info: &HeaderInfo,
        incarnation: u64,
    ) -> Result<Option<AllocTable>> {
        Ok(match Self::read(t, info, incarnation)? {
            Stored::Table(table) => Some(table),
            Stored::Blank(_) => None,
        })
    }

    fn read(t: &dyn Transport, info: &HeaderInfo, incarnation: u64) -> Result<Stored> {
        let sec = info.section(SectionId::Alloc);
        let capacity = ((sec.size.saturating_sub(ALLOC_HEADER_LEN)) / RECORD_LEN) as u32;
        if capacity == 0 {
            return Err(ControlError::AllocCorrupt(format!(
                "alloc section of {} bytes holds no record",
                sec.size
            )));
        }
        let code = info.section(SectionId::Code);
        let scratch = info.section(SectionId::Scratch);
        let mut table = AllocTable {
            section: sec.offset,
            capacity,
            records: vec![None; capacity as usize],
            extents: BTreeMap::new(),
            code: (code.offset, code.end()),
            scratch: (
                align_up(scratch.offset + info.scratch_reserved, MAP_ALIGN),
                scratch.end(),
            ),
            freed_version: 0,
        };
        let mut head = [0u8; ALLOC_HEADER_LEN as usize];
        t.read(sec.offset, &mut head)?;
        let magic = u64::from_le_bytes(head[0..8].try_into().expect("8"));
        let version = u32::from_le_bytes(head[8..12].try_into().expect("4"));
        let stored_inc = u64::from_le_bytes(head[16..24].try_into().expect("8"));
        if magic != ALLOC_MAGIC || stored_inc != incarnation {
            if magic != ALLOC_MAGIC && magic != 0 {
                return Err(ControlError::AllocCorrupt(format!(
                    "bad magic {magic:#018x} in the alloc section"
                )));
            }
            return Ok(Stored::Blank(table));
        }
        if version != ALLOC_VERSION {
            return Err(ControlError::AllocCorrupt(format!(
                "allocator table version {version}, this build writes {ALLOC_VERSION}"
            )));
        }
        table.freed_version = u32::from_le_bytes(head[40..44].try_into().expect("4"));
        let mut body = vec![0u8; (capacity as u64 * RECORD_LEN) as usize];
        t.read(sec.offset + ALLOC_HEADER_LEN, &mut body)?;
        for i in 0..capacity as usize {
            let rec = Record::decode(&body[i * RECORD_LEN as usize..][..RECORD_LEN as usize], i)?;
            if let Some(r) = &rec {
                let (lo, hi) = table.bounds(r.arena);
                if r.offset < lo || r.offset.checked_add(r.size).is_none_or(|e| e > hi) {
                    return Err(ControlError::AllocCorrupt(format!(
                        "record {i}: {} extent [{:#x}, +{:#x}) outside its arena",
                        r.arena.name(),
                        r.offset,
                        r.size
                    )));
                }
            }
            table.set_slot(i, rec);
        }
        Ok(Stored::Table(table))
    }

    fn format(&mut self, t: &dyn Transport, incarnation: u64) -> Result<()> {
        let zeros = vec![0u8; (self.capacity as u64 * RECORD_LEN) as usize];
        t.write(self.section + ALLOC_HEADER_LEN, &zeros)?;
        t.write_u64(self.section + H_VERSION, ALLOC_VERSION as u64)?;
        t.write_u64(self.section + H_INCARNATION, incarnation)?;
        t.write_u64(self.section + H_SEQ, 0)?;
        t.write_u64(self.section + H_FREED_VERSION, 0)?;
        t.fence()?;
        t.write_u64(self.section + H_MAGIC, ALLOC_MAGIC)?;
        for r in &mut self.records {
            *r = None;
        }
        self.extents.clear();
        self.freed_version = 0;
        Ok(())
    }

    /// Records who holds the lease ([`crate::lease::holder_record`]: pid and machine tag),
    /// for other control planes' error messages and to break a dead local holder's lease.
    pub fn set_holder_pid(t: &dyn Transport, info: &HeaderInfo, pid: u32) -> Result<()> {
        t.write_u64(
            info.section(SectionId::Alloc).offset + H_HOLDER_PID,
            crate::lease::holder_record(pid),
        )?;
        Ok(())
    }

    /// The lease holder's record (0 when unreadable).
    pub fn holder_record(t: &dyn Transport, info: &HeaderInfo) -> u64 {
        t.read_u64(info.section(SectionId::Alloc).offset + H_HOLDER_PID)
            .unwrap_or(0)
    }

    /// The lease holder's pid.
    pub fn holder_pid(t: &dyn Transport, info: &HeaderInfo) -> u32 {
        crate::lease::holder_record_pid(Self::holder_record(t, info))
    }

    fn bounds(&self, arena: Arena) -> (u64, u64) {
        match arena {
            Arena::Code => self.code,
            Arena::Scratch => self.scratch,
        }
    }

    /// Every used record with its table index.
    pub fn records(&self) -> impl Iterator<Item = (usize, &Record)> {
        self.records
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (i, r)))
    }

    /// The highest version of any code record freed in this incarnation (0 if none).
    pub fn freed_version(&self) -> u32 {
        self.freed_version
    }

    /// Record `index`, if it is in use.
    pub fn get(&self, index: usize) -> Option<&Record> {
        self.records.get(index).and_then(|r| r.as_ref())
    }

    /// Writes record `index` through to the region: body first, then its state word.
    pub fn put(&mut self, t: &dyn Transport, index: usize, rec: Record) -> Result<()> {
        let at = self.section + ALLOC_HEADER_LEN + index as u64 * RECORD_LEN;
        let bytes = rec.encode();
        t.write(at + 8, &bytes[8..])?;
        t.write_u64(at, u64::from_le_bytes(bytes[0..8].try_into().expect("8")))?;
        self.set_slot(index, Some(rec));
        Ok(())
    }

    /// Changes the state of record `index`.
    pub fn set_state(&mut self, t: &dyn Transport, index: usize, state: RecordState) -> Result<()> {
        let at = self.section + ALLOC_HEADER_LEN + index as u64 * RECORD_LEN;
        let Some(rec) = self.records[index].as_mut() else {
            return Ok(());
        };
        if state == RecordState::Free {
            if rec.arena == Arena::Code && rec.version > self.freed_version {
                // Raised before the record goes: a control plane that dies in between
                // leaves a floor that is merely higher than needed.
                t.write_u64(self.section + H_FREED_VERSION, rec.version as u64)?;
                self.freed_version = rec.version;
            }
            t.write_u64(at, 0)?;
            self.set_slot(index, None);
            return Ok(());
        }
        rec.state = state;
        t.write_u64(at, ((rec.arena as u64) << 32) | state as u64)?;
        Ok(())
    }

    /// Finds room for `size` bytes (first fit) and records a pending extent. Returns the
    /// record index and the extent's region offset.
    pub fn allocate(
        &mut self,
        t: &dyn Transport,
        arena: Arena,
        size: u64,
        mut rec: Record,
    ) -> Result<(usize, u64)> {
        let (align, granule) = match arena {
            Arena::Code => (CODE_ENTRY_ALIGN.max(CODE_GRANULE), CODE_GRANULE),
            Arena::Scratch => (MAP_ALIGN, MAP_ALIGN),
        };
        let size = align_up(size.max(1), granule);
        let slot =
            self.records
                .iter()
                .position(|r| r.is_none())
                .ok_or(ControlError::AllocTableFull {
                    capacity: self.capacity,
                })?;
        let offset = self
            .find_gap(arena, size, align)
            .ok_or_else(|| ControlError::ArenaFull {
                arena: arena.name(),
                need: size,
                free: self.largest_gap(arena),
            })?;
        rec.state = RecordState::Pending;
        rec.arena = arena;
        rec.offset = offset;
        rec.size = size;
        self.put(t, slot, rec)?;
        Ok((slot, offset))
    }

    /// Replaces the in-memory record of slot `index`, keeping the extent index in step.
    fn set_slot(&mut self, index: usize, rec: Option<Record>) {
        if let Some(old) = self.records[index].take() {
            self.extents.remove(&(old.arena as u32, old.offset, index));
        }
        if let Some(r) = &rec {
            self.extents.insert(
                (r.arena as u32, r.offset, index),
                r.offset.saturating_add(r.size),
            );
        }
        self.records[index] = rec;
    }

    /// Free gaps of `arena` in address order.
    fn gaps(&self, arena: Arena) -> impl Iterator<Item = (u64, u64)> + '_ {
        let (lo, hi) = self.bounds(arena);
        let kind = arena as u32;
        let mut used = self
            .extents
            .range((kind, 0, 0)..=(kind, u64::MAX, usize::MAX))
            .map(|(&(_, start, _), &end)| (start, end));
        let mut cursor = lo;
        let mut done = false;
        std::iter::from_fn(move || {
            while !done {
                match used.next() {
                    Some((s, e)) => {
                        let gap = (cursor, s);
                        cursor = cursor.max(e);
                        if gap.1 > gap.0 {
                            return Some(gap);
                        }
                    }
                    None => {
                        done = true;
                        if hi > cursor {
                            return Some((cursor, hi));
                        }
                    }
                }
            }
            None
        })
    }

    fn find_gap(&self, arena: Arena, size: u64, align: u64) -> Option<u64> {
        self.gaps(arena).find_map(|(s, e)| {
            let start = align_up(s, align);
            (start.checked_add(size)? <= e).then_some(start)
        })
    }

    /// Bytes in the largest free gap of `arena`.
    pub fn largest_gap(&self, arena: Arena) -> u64 {
        self.gaps(arena).map(|(s, e)| e - s).max().unwrap_or(0)
    }

    /// Free bytes in `arena`.
    pub fn free_bytes(&self, arena: Arena) -> u64 {
        self.gaps(arena).map(|(s, e)| e - s).sum()
    }

    /// Bytes `arena` spans in the region.
    pub fn arena_bytes(&self, arena: Arena) -> u64 {
        let (lo, hi) = self.bounds(arena);
        hi - lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever another control plane (or corruption) left in a record, decoding returns
        /// a record or a typed error, never a panic; valid records round-trip.
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 128)) {
            let _ = Record::decode(&bytes, 3);
        }

        #[test]
        fn records_round_trip(offset in any::<u64>(), size in any::<u64>(), hook in any::<u32>(),
                              version in any::<u32>(), maps in proptest::collection::vec(any::<u16>(), 0..=RECORD_MAPS),
                              held in any::<bool>(), code in any::<bool>(), baseline in any::<bool>()) {
            let r = Record {
                state: if held { RecordState::Held } else { RecordState::Pending },
                arena: if code { Arena::Code } else { Arena::Scratch },
                offset, size, hook, version, entry: offset ^ 1, created_ms: 5, generation: 6,
                insn_count: 7, maps, hash: [9; 16], budget: 10,
                tier: if baseline { Tier::Baseline } else { Tier::Optimizing },
            };
            prop_assert_eq!(Record::decode(&r.encode(), 0).unwrap(), Some(r));
        }
    }

    /// A table of `capacity` records over a scratch buffer (the alloc section at offset 0),
    /// with a code arena [0x10000, 0x20000) and a scratchpad [0x20000, 0x30000).
    fn scratch_table(
        capacity: u32,
        buf: &mut Vec<u64>,
    ) -> (AllocTable, rdx_transport::local::LocalRegion) {
        buf.resize(
            ((ALLOC_HEADER_LEN + capacity as u64 * RECORD_LEN) / 8) as usize,
            0,
        );
        // SAFETY: the buffer is 8-aligned, outlives the region value in the test, and is
        // only accessed through it.
        let region = unsafe {
            rdx_transport::local::LocalRegion::from_raw(
                buf.as_mut_ptr().cast(),
                buf.len() as u64 * 8,
            )
        };
        let table = AllocTable {
            section: 0,
            capacity,
            records: vec![None; capacity as usize],
            extents: BTreeMap::new(),
            code: (0x10000, 0x20000),
            scratch: (0x20000, 0x30000),
            freed_version: 0,
        };
        (table, region)
    }

    fn blank_record() -> Record {
        Record {
            state: RecordState::Pending,
            arena: Arena::Code,
            offset: 0,
            size: 0,
            hook: 0,
            version: 1,
            entry: 0,
            created_ms: 0,
            generation: 0,
            insn_count: 0,
            maps: vec![],
            hash: [0; 16],
            budget: 0,
            tier: Tier::Optimizing,
        }
    }

    #[test]
    fn freeing_code_raises_the_version_floor_in_the_region() {
        let mut buf = Vec::new();
        let (mut table, region) = scratch_table(8, &mut buf);
        let mut rec = blank_record();
        rec.version = 7;
        let (seven, _) = table.allocate(&region, Arena::Code, 64, rec).unwrap();
        let mut rec = blank_record();
        rec.version = 3;
        let (three, _) = table.allocate(&region, Arena::Code, 64, rec).unwrap();
        table.set_state(&region, seven, RecordState::Free).unwrap();
        table.set_state(&region, three, RecordState::Free).unwrap();
        // The floor only rises, and it is in the region for the next control plane.
        assert_eq!(table.freed_version(), 7);
        assert_eq!(region.read_u64(table.section + H_FREED_VERSION).unwrap(), 7);
    }

    proptest! {
        /// Whatever mix of allocations and frees, extents never overlap, stay in their arena,
        /// and the free-space figures match the records.
        #[test]
        fn extents_never_overlap(ops in proptest::collection::vec((any::<bool>(), 1u64..0x3000, any::<bool>(), any::<u8>()), 1..120)) {
            let mut buf = Vec::new();
            let (mut table, region) = scratch_table(32, &mut buf);
            for (alloc, size, code, pick) in ops {
                let arena = if code { Arena::Code } else { Arena::Scratch };
                if alloc {
                    let _ = table.allocate(&region, arena, size, blank_record());
                } else {
                    let victim = table.records().map(|(i, _)| i).nth(pick as usize % 32);
                    if let Some(i) = victim {
                        table.set_state(&region, i, RecordState::Free).unwrap();
                    }
                }
                for arena in [Arena::Code, Arena::Scratch] {
                    let (lo, hi) = table.bounds(arena);
                    let mut used: Vec<(u64, u64)> = table.records()
                        .filter(|(_, r)| r.arena == arena)
                        .map(|(_, r)| (r.offset, r.offset + r.size))
                        .collect();
                    used.sort_unstable();
                    for w in used.windows(2) {
                        prop_assert!(w[0].1 <= w[1].0, "overlap {:?}", w);
                    }
                    for &(s, e) in &used {
                        prop_assert!(s >= lo && e <= hi);
                    }
                    let taken: u64 = used.iter().map(|(s, e)| e - s).sum();
                    prop_assert_eq!(table.free_bytes(arena), (hi - lo) - taken);
                }
            }
        }
    }

    #[test]
    fn record_round_trips() {
        let r = Record {
            state: RecordState::Held,
            arena: Arena::Code,
            offset: 0x10000,
            size: 4096,
            hook: 3,
            version: 9,
            entry: 0x10040,
            created_ms: 123,
            generation: 77,
            insn_count: 1300,
            maps: vec![1, 2, 300],
            hash: [7; 16],
            budget: u64::MAX,
            tier: Tier::Baseline,
        };
        let b = r.encode();
        assert_eq!(Record::decode(&b, 0).unwrap(), Some(r));
        assert_eq!(Record::decode(&[0u8; 128], 0).unwrap(), None);
        let mut bad = b;
        bad[0] = 9;
        assert!(Record::decode(&bad, 4).is_err());
        // A record written before tiers were recorded (zero there) was built by the
        // optimizing tier; an unknown tier is corruption, not a guess.
        let mut old = b;
        old[120..128].fill(0);
        assert_eq!(
            Record::decode(&old, 0).unwrap().unwrap().tier,
            Tier::Optimizing
        );
        let mut bad = b;
        bad[120] = 7;
        assert!(Record::decode(&bad, 5).is_err());
    }
}
