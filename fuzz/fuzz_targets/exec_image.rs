//! Fallback images as a host finds them in its code arena: any bytes must parse to a typed
//! error or an image whose every slot (and the one past the end) decodes to an op or to
//! nothing, never to an invalid operation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdx_exec::image::Image;

fuzz_target!(|data: &[u8]| {
    // 16-byte aligned copy, as images are in the code arena.
    let mut buf = vec![0u128; data.len().div_ceil(16)];
    // SAFETY: `buf` holds at least `data.len()` bytes.
    let bytes = unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), buf.as_mut_ptr().cast::<u8>(), data.len());
        std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), data.len())
    };
    if let Ok(image) = Image::parse(bytes) {
        for pc in 0..=image.slots() {
            let _ = image.op(pc);
        }
    }
});
