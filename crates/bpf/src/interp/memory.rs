//! The regions a running program may touch, and the checks of checked mode.

use super::context::PacketRegion;
use crate::maps::MapSet;

/// How an access may proceed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Plain memory: read or write it.
    Plain,
    /// The context structure: ask the model.
    Context,
    /// Inside a region, but writing read-only memory (`.rodata`).
    ReadOnly,
    /// Outside every region.
    Denied,
}

/// One run's memory map.
#[derive(Debug)]
pub(crate) struct Regions<'a> {
    /// Lowest stack address the current frame may use (its `r10 - 512`).
    pub stack_lo: u64,
    /// One past the top of the outermost frame.
    pub stack_hi: u64,
    /// The plain byte input (`Input::Bytes`), if any.
    pub input: (u64, u64),
    /// The modelled context structure (`Input::Context`): its anchor and size.
    pub ctx: (u64, u64),
    pub packet: Option<PacketRegion>,
    pub maps: &'a MapSet,
}

#[inline(always)]
fn within(addr: u64, len: u64, base: u64, size: u64) -> bool {
    let off = addr.wrapping_sub(base);
    off < size && len <= size - off
}

impl Regions<'_> {
    /// Classifies `[addr, addr + len)` for a read (`write == false`) or a write.
    pub fn access(&self, addr: u64, len: u64, write: bool) -> Access {
        if within(addr, len, self.stack_lo, self.stack_hi - self.stack_lo)
            || within(addr, len, self.input.0, self.input.1)
        {
            return Access::Plain;
        }
        if let Some(p) = self.packet {
            if within(addr, len, p.addr, p.len) {
                return if write && !p.writable {
                    Access::ReadOnly
                } else {
                    Access::Plain
                };
            }
        }
        if within(addr, len, self.ctx.0, self.ctx.1) {
            return Access::Context;
        }
        match self.maps.value_access(addr, len) {
            Some(true) => Access::Plain,
            Some(false) if !write => Access::Plain,
            Some(false) => Access::ReadOnly,
            None => Access::Denied,
        }
    }

    /// Whether `addr` lies in the context structure (the only check unchecked mode makes,
    /// because context accesses must reach the model whatever the mode).
    #[inline(always)]
    pub fn is_context(&self, addr: u64) -> bool {
        addr.wrapping_sub(self.ctx.0) < self.ctx.1
    }
}
