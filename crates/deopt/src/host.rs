//! In-process hosting of elite code for tests, benchmarks and tools: real `xdp_md` memory
//! with the packet below 4 GiB (its `data` fields are 32-bit), and the symbol table that
//! links an artifact against a [`MapSet`] with the interpreter crate's native helpers.

use std::collections::HashMap;

use rdx_bpf::helpers::native_helper;
use rdx_bpf::interp::{PacketRegion, XdpMd};
use rdx_bpf::maps::MapSet;
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
    for id in 0..256 {
        if let Some(f) = native_helper(id) {
            syms.insert(Symbol::Helper(id as u32), f as *const () as u64);
        }
    }
    syms
}

/// Packet memory below 4 GiB, where 32-bit context fields can point.
pub struct LowPacket {
    ptr: *mut u8,
    cap: usize,
    len: usize,
}

impl LowPacket {
    pub fn new(cap: usize) -> std::io::Result<LowPacket> {
        #[cfg(target_arch = "x86_64")]
        let low = libc::MAP_32BIT;
        #[cfg(not(target_arch = "x86_64"))]
        let low = 0;
        // SAFETY: fresh anonymous mapping, result checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                cap,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | low,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        if p as u64 + cap as u64 > 1 << 32 {
            // SAFETY: our mapping.
            unsafe { libc::munmap(p, cap) };
            return Err(std::io::Error::other("no memory below 4 GiB"));
        }
        Ok(LowPacket {
            ptr: p.cast(),
            cap,
            len: 0,
        })
    }

    /// Replaces the packet with `bytes` (at most the capacity).
    pub fn set(&mut self, bytes: &[u8]) {
        assert!(bytes.len() <= self.cap, "packet larger than its buffer");
        self.bytes_mut_full()[..bytes.len()].copy_from_slice(bytes);
        self.len = bytes.len();
    }

    fn bytes_mut_full(&mut self) -> &mut [u8] {
        // SAFETY: our mapping of `cap` bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.cap) }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: our mapping; len <= cap.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn region(&self) -> PacketRegion {
        PacketRegion {
            addr: self.ptr as u64,
            len: self.len as u64,
            writable: true,
        }
    }

    /// The `xdp_md` a program sees for this packet (received on ifindex 1, queue 0).
    pub fn xdp_md(&self) -> [u8; XdpMd::SIZE] {
        let mut ctx = [0u8; XdpMd::SIZE];
        let data = self.ptr as u64 as u32;
        let mut put = |off: usize, v: u32| ctx[off..off + 4].copy_from_slice(&v.to_le_bytes());
        put(XdpMd::OFF_DATA, data);
        put(XdpMd::OFF_DATA_END, data + self.len as u32);
        put(XdpMd::OFF_DATA_META, data);
        put(XdpMd::OFF_INGRESS_IFINDEX, 1);
        ctx
    }
}

impl Drop for LowPacket {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.cap) };
    }
}
