//! The state a runtime shares: its mapping, region header, context table exports and the
//! typed views of the region's sections (hook slots, thread slots, counters, code entries).
//! One [`Inner`] per runtime, held by its [`crate::Runtime`] handles, [`crate::Hook`]s, the
//! thread states of the threads that ran its hooks and fallback workers, so that the mapping
//! outlives every pointer into it. It depends on nothing else in this crate but the mapping.

use crate::mapping::Mapping;
use crate::RuntimeError;
use rdx_region::abi::{EntryFn, HelperFn};
use rdx_region::geometry::HeaderInfo;
use rdx_region::layout::*;
use rdx_transport::local::LocalRegion;
use rdx_transport::xstate::MapRef;
use rdx_transport::Transport;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;

/// What the host exported so far, guarded by [`Inner::exports`]: the names and helper ids
/// taken, the declared hooks, and how many context table entries are written.
#[derive(Default)]
pub(crate) struct Exports {
    pub names: HashSet<(u32, String)>,
    pub ids: HashSet<u32>,
    /// Declared hooks by slot index: name, and what the hook returns while nothing is
    /// attached.
    pub hooks: Vec<(String, u64)>,
    pub count: u32,
}

/// Everything a runtime owns; shared by its handles and by the threads that ran its hooks
/// (so that the mapping outlives every thread slot that points into it).
///
/// `repr(C)` with the two fields every attached hook run reads first, on one cache line.
#[repr(C)]
pub(crate) struct Inner {
    pub id: u64,
    pub torn_down: AtomicBool,
    pub base: u64,
    pub map: Mapping,
    pub info: HeaderInfo,
    /// The data part of the region (everything before the code arena).
    pub data: LocalRegion,
    pub trace: MapRef,
    pub exports: Mutex<Exports>,
}

impl Inner {
    pub fn slot(&self, index: u32) -> &HookSlot {
        debug_assert!(index < self.info.max_hooks);
        // SAFETY: in bounds of the hooks section (index < max_hooks), 64-byte aligned, in
        // the mapping this Inner owns; HookSlot is all atomics.
        unsafe { &*((self.base + self.info.hook_offset(index)) as *const HookSlot) }
    }

    pub fn thread_slot(&self, index: u32) -> &ThreadSlot {
        debug_assert!(index < self.info.thread_slots);
        // SAFETY: as for `slot`, in the threads section.
        unsafe { &*((self.base + self.info.thread_offset(index)) as *const ThreadSlot) }
    }

    /// The header word that `xstate::create` advances before a new map becomes visible.
    pub fn xstate_generation(&self) -> &AtomicU64 {
        // SAFETY: inside the header page of the mapping this Inner owns, 8-byte aligned.
        unsafe { &*((self.base + offsets::HEADER_XSTATE_GENERATION) as *const AtomicU64) }
    }

    pub fn counters(&self, thread: u32, hook: u32) -> &HookCounters {
        // SAFETY: as for `slot`, in the counters section (thread < thread_slots,
        // hook < max_hooks).
        unsafe { &*((self.base + self.info.counters_offset(thread, hook)) as *const HookCounters) }
    }

    pub fn set_helper(&self, id: u32, f: HelperFn) -> Result<(), RuntimeError> {
        self.data
            .write_u64(self.info.helper_entry_offset(id), f as usize as u64)?;
        Ok(())
    }

    /// Appends a context table entry and publishes it (count incremented last, release).
    pub fn export(
        &self,
        kind: ContextKind,
        id: u32,
        addr: u64,
        size: u64,
        name: &str,
    ) -> Result<(), RuntimeError> {
        let mut ex = self.exports.lock().unwrap_or_else(|e| e.into_inner());
        self.export_locked(&mut ex, kind, id, addr, size, name)
    }

    pub fn export_locked(
        &self,
        ex: &mut Exports,
        kind: ContextKind,
        id: u32,
        addr: u64,
        size: u64,
        name: &str,
    ) -> Result<(), RuntimeError> {
        let encoded =
            ContextEntry::encode_name(name).ok_or_else(|| RuntimeError::BadName(name.into()))?;
        // Hooks, variables and functions share the symbol namespace of their kind.
        let ns = match kind {
            ContextKind::Helper | ContextKind::HostFunction => 1,
            ContextKind::HostVariable => 2,
            ContextKind::Hook => 3,
        };
        if ex.names.contains(&(ns, name.to_string())) {
            return Err(RuntimeError::Duplicate {
                kind: "name",
                name: name.into(),
            });
        }
        if ns == 1 && ex.ids.contains(&id) {
            return Err(RuntimeError::BadId {
                id,
                capacity: self.info.helper_capacity,
            });
        }
        if ex.count >= self.info.context_capacity {
            return Err(RuntimeError::ContextFull(self.info.context_capacity));
        }
        let mut e = [0u8; std::mem::size_of::<ContextEntry>()];
        e[0..4].copy_from_slice(&(kind as u32).to_le_bytes());
        e[4..8].copy_from_slice(&id.to_le_bytes());
        e[8..16].copy_from_slice(&addr.to_le_bytes());
        e[16..24].copy_from_slice(&size.to_le_bytes());
        e[24..].copy_from_slice(&encoded);
        self.data
            .write(self.info.context_entry_offset(ex.count), &e)?;
        ex.count += 1;
        self.data.write_u64(
            self.info.section(SectionId::Context).offset,
            ex.count as u64,
        )?;
        ex.names.insert((ns, name.to_string()));
        if ns == 1 {
            ex.ids.insert(id);
        }
        Ok(())
    }

    /// Decodes an active word (hook slot or program array element) into an entry point inside
    /// the code arena: `None` (an invalid slot) unless it designates a well-formed code entry
    /// in this region's code arena.
    #[inline]
    pub fn entry_of(&self, word: u64) -> Option<EntryFn> {
        let offset = active_entry_offset(word) as u64;
        let code = self.info.section(SectionId::Code);
        if active_version(word) == 0
            || offset < code.offset
            || offset >= code.end()
            || !offset.is_multiple_of(CODE_ENTRY_ALIGN)
        {
            return None;
        }
        // SAFETY: a pointer into the read+execute code arena of this process's mapping; that it
        // holds valid code is the control plane's contract (see `Hook::run_with`).
        Some(unsafe { std::mem::transmute::<usize, EntryFn>((self.base + offset) as usize) })
    }
}
