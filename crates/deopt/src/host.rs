//! In-process hosting of elite code for tests, benchmarks and tools: real `xdp_md` memory
//! with the packet below 4 GiB (its `data` fields are 32-bit), and the symbol table that
//! links an artifact against a [`MapSet`] with the interpreter crate's native helpers.

use std::collections::HashMap;

use rdx_bpf::helpers::native_helpers;
use rdx_bpf::interp::{PacketRegion, XdpMd};
use rdx_bpf::maps::MapSet;
use rdx_exec::transfer::LowMemory;
use rdx_jit::Symbol;

/// Symbols of a program's maps (`map:<i>`, `mapvalue:<i>`) and of every native helper, for
/// linking in this process against `maps` — the maps the interpreter of the generic tier
/// uses too, so both tiers see one state.
pub fn native_symbols(maps: &MapSet) -> HashMap<Symbol, u64> {
    let mut syms = HashMap::new();
    for (i, m) in maps.iter().enumerate() {
        syms.insert(Symbol::Map(i as u32), m.address());
        if let Some(v) = m.value_address(0) {
            syms.insert(Symbol::MapValue(i as u32), v);
        }
    }
    for (id, f) in native_helpers() {
        syms.insert(Symbol::Helper(id.get()), f as *const () as u64);
    }
    syms
}

/// Packet memory below 4 GiB, where 32-bit context fields can point.
pub struct LowPacket {
    memory: LowMemory,
    len: usize,
}

impl LowPacket {
    /// A packet buffer of `cap` bytes below 4 GiB, empty.
    pub fn new(cap: usize) -> std::io::Result<LowPacket> {
        Ok(LowPacket {
            memory: LowMemory::new(cap)?,
            len: 0,
        })
    }

    /// The most bytes a packet may have.
    pub fn capacity(&self) -> usize {
        self.memory.len()
    }

    /// Replaces the packet with `bytes` (at most the capacity).
    pub fn set(&mut self, bytes: &[u8]) {
        assert!(
            bytes.len() <= self.memory.len(),
            "packet larger than its buffer"
        );
        self.memory.as_mut_slice()[..bytes.len()].copy_from_slice(bytes);
        self.len = bytes.len();
    }

    /// The packet's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.memory.as_slice()[..self.len]
    }

    /// The packet as a memory region the interpreter may read and write.
    pub fn region(&self) -> PacketRegion {
        PacketRegion {
            addr: self.memory.as_ptr() as u64,
            len: self.len as u64,
            writable: true,
        }
    }

    /// The `xdp_md` a program sees for this packet (received on ifindex 1, queue 0).
    pub fn xdp_md(&self) -> [u8; XdpMd::SIZE] {
        let mut ctx = [0u8; XdpMd::SIZE];
        let data = self.memory.as_ptr() as u64 as u32;
        let mut put = |off: usize, v: u32| ctx[off..off + 4].copy_from_slice(&v.to_le_bytes());
        put(XdpMd::OFF_DATA, data);
        put(XdpMd::OFF_DATA_END, data + self.len as u32);
        put(XdpMd::OFF_DATA_META, data);
        put(XdpMd::OFF_INGRESS_IFINDEX, 1);
        ctx
    }
}
