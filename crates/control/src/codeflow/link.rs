//! Linking: the node's symbol table ([`CodeFlow::resolver`]), code linked for its place in
//! the code arena and written there, and an elite record's fallback locator and image.

use super::{CodeFlow, Compiled, Extension};
use crate::error::{ControlError, Result};
use rdx_jit::{LinkTarget, Symbol};
use rdx_region::abi::{FallbackLocator, FALLBACK_MAGIC};
use rdx_region::layout::*;
use rdx_transport::xstate;

/// Where an elite record keeps its fallback image (`docs/region.md`, "Elite code records").
pub(super) struct ImageLayout {
    /// Bytes from the entry point to the image.
    pub(super) from_entry: u64,
    pub(super) len: u64,
}

/// The shape of a code record: the linked code alone, or (elite artifacts) a fallback
/// locator, the code, and the fallback image.
pub(super) struct FallbackLayout {
    pub(super) image: Option<ImageLayout>,
}

impl FallbackLayout {
    pub(super) fn of(compiled: &Compiled, ext: &Extension) -> Result<FallbackLayout> {
        let meta = &compiled.artifact().meta;
        if !meta.deoptimises() {
            return Ok(FallbackLayout { image: None });
        }
        if meta.entry_offset != 0 {
            return Err(ControlError::Link(format!(
                "elite artifact's entry is at {:#x}: its fallback locator needs it first",
                meta.entry_offset
            )));
        }
        let code = compiled.artifact().code.len() as u64;
        Ok(FallbackLayout {
            image: Some(ImageLayout {
                from_entry: code.next_multiple_of(16),
                len: rdx_exec::image::image_len(ext.insns().len()) as u64,
            }),
        })
    }

    /// Where the code starts in the record.
    pub(super) fn code_at(&self) -> u64 {
        if self.image.is_some() {
            FallbackLocator::BYTES
        } else {
            0
        }
    }

    /// Bytes of the record holding `code` bytes of code.
    pub(super) fn record_len(&self, code: u64) -> u64 {
        match &self.image {
            Some(i) => FallbackLocator::BYTES + i.from_entry + i.len,
            None => code,
        }
    }
}

impl CodeFlow {
    /// The symbol table a program links against on this node: helpers and host functions
    /// by id, host variables by name, the helper table, and the program's maps by index.
    pub fn resolver(&self, map_ids: &[u32]) -> Result<impl Fn(&Symbol) -> Option<u64> + '_> {
        let info = &self.view.info;
        let mut maps = Vec::with_capacity(map_ids.len());
        for &id in map_ids {
            let m = xstate::open(self.t.as_ref(), info, id)?;
            maps.push((
                info.base_address + m.map.offset,
                info.base_address + m.map.data,
            ));
        }
        let base = info.base_address;
        let helper_table = base + info.section(SectionId::HelperTable).offset;
        let symbols = &self.view.symbols;
        Ok(move |s: &Symbol| -> Option<u64> {
            match s {
                Symbol::Helper(id) => symbols
                    .iter()
                    .find(|c| {
                        matches!(c.kind, ContextKind::Helper | ContextKind::HostFunction)
                            && c.id == *id
                    })
                    .map(|c| c.addr),
                Symbol::Map(i) => maps.get(*i as usize).map(|m| m.0),
                Symbol::MapValue(i) => maps.get(*i as usize).map(|m| m.1),
                Symbol::Var(n) if n == rdx_jit::artifact::HELPER_TABLE_SYMBOL => Some(helper_table),
                Symbol::Var(n) => symbols
                    .iter()
                    .find(|c| c.kind == ContextKind::HostVariable && c.name == *n)
                    .map(|c| c.addr),
                Symbol::Fn(n) => symbols
                    .iter()
                    .find(|c| c.kind == ContextKind::HostFunction && c.name == *n)
                    .map(|c| c.addr),
            }
        })
    }

    /// `link_code`: final code bytes for region offset `code_offset` on this node.
    pub fn link_code(
        &self,
        compiled: &Compiled,
        map_ids: &[u32],
        code_offset: u64,
    ) -> Result<Vec<u8>> {
        let resolver = self.resolver(map_ids)?;
        let linked = rdx_jit::link::link(
            compiled.artifact(),
            LinkTarget::new(self.arch),
            &resolver,
            self.view.info.base_address + code_offset,
        )?;
        Ok(linked.code)
    }

    /// Links `compiled` for `code_offset` and writes it there: on a mapped region straight
    /// into the (allocated, unpublished) extent — one copy of the code plus its relocations —
    /// otherwise into a reused buffer written with one transport write.
    pub(super) fn write_code(
        &mut self,
        compiled: &Compiled,
        map_ids: &[u32],
        code_offset: u64,
    ) -> Result<()> {
        let len = compiled.artifact().code.len();
        let target = LinkTarget::new(self.arch);
        let load_address = self.view.info.base_address + code_offset;
        if let Some(region) = self.mapped {
            let end = code_offset.checked_add(len as u64);
            if end.is_none_or(|e| e > self.t.region_len()) {
                return Err(ControlError::Link(format!(
                    "code extent [{code_offset:#x}, +{len:#x}) is outside the region"
                )));
            }
            let resolver = self.resolver(map_ids)?;
            // SAFETY: the extent is inside the mapping (checked above; `self.t` keeps it
            // mapped) and was just allocated to this deploy under the lease: no host thread
            // runs or reads it (nothing publishes it yet, and reclamation freed it only after
            // every thread left), and no other control plane writes it (the lease). So this
            // is the only access to those bytes until the publishing CAS, which orders these
            // stores before the new word.
            let out = unsafe {
                std::slice::from_raw_parts_mut(region.base().add(code_offset as usize), len)
            };
            return rdx_jit::link::link_into(
                compiled.artifact(),
                target,
                &resolver,
                load_address,
                out,
            )
            .map_err(ControlError::from);
        }
        let mut buf = std::mem::take(&mut self.link_buf);
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let linked = self.resolver(map_ids).and_then(|resolver| {
            rdx_jit::link::link_into(
                compiled.artifact(),
                target,
                &resolver,
                load_address,
                &mut buf[..len],
            )
            .map_err(ControlError::from)
        });
        let written = linked.and_then(|()| Ok(self.t.write(code_offset, &buf[..len])?));
        self.link_buf = buf;
        written
    }

    /// Writes an elite record's fallback locator (before the entry) and image (after the
    /// code): `ext` lowered with its maps linked at the addresses the native code got.
    pub(super) fn write_fallback(
        &mut self,
        ext: &Extension,
        map_ids: &[u32],
        record: u64,
        layout: &ImageLayout,
    ) -> Result<()> {
        let resolver = self.resolver(map_ids)?;
        let ops = rdx_bpf::interp::lower_linked(ext.insns(), |kind, index, offset| {
            let index = u32::try_from(index).ok()?;
            match kind {
                rdx_bpf::isa::ImmKind::MapIdx => resolver(&Symbol::Map(index)),
                rdx_bpf::isa::ImmKind::MapIdxValue => {
                    resolver(&Symbol::MapValue(index))?.checked_add(u64::try_from(offset).ok()?)
                }
                _ => None,
            }
        })
        .map_err(ControlError::FallbackImage)?;
        let image = rdx_exec::image::encode(&ops);
        if image.len() as u64 != layout.len {
            return Err(ControlError::Link(format!(
                "fallback image is {} bytes, {} were allocated",
                image.len(),
                layout.len
            )));
        }
        let locator = FallbackLocator {
            magic: FALLBACK_MAGIC,
            image_offset: layout.from_entry as u32,
            image_len: image.len() as u32,
        };
        self.t.write(record, &locator.to_bytes())?;
        self.t
            .write(record + FallbackLocator::BYTES + layout.from_entry, &image)?;
        Ok(())
    }
}
