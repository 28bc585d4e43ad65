//! The region parsers both planes run on bytes they do not control: the header check, map
//! headers, the context table and the XState meta table, over a region built from the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdx_region::geometry::check_header;
use rdx_region::layout::Arch;
use rdx_transport::local::LocalRegion;
use rdx_transport::xstate::{self, MapRef};

fuzz_target!(|data: &[u8]| {
    let _ = check_header(data, data.len() as u64, Arch::X86_64);
    if data.len() >= 128 {
        let _ = MapRef::from_header_bytes(&data[..128], 0, data.len() as u64);
    }
    let mut mem = vec![0u64; data.len().div_ceil(8)];
    // SAFETY: `mem` outlives `t`, is 8-aligned and `data.len()` bytes long at least.
    let t = unsafe { LocalRegion::from_raw(mem.as_mut_ptr() as *mut u8, data.len() as u64) };
    let _ = rdx_transport::Transport::write(&t, 0, data);
    if let Ok(info) = check_header(data, data.len() as u64, Arch::X86_64) {
        let _ = rdx_transport::context::read_context(&t, &info);
        if let Ok(maps) = xstate::list(&t, &info) {
            for m in maps {
                let _ = xstate::keys(&t, &m.map);
            }
        }
    }
});
