//! Broadcast plans: arbitrary text is parsed and validated (names, references, dependency
//! cycles) without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(plan) = rdx_fleet::Plan::from_yaml(text, std::path::Path::new(".")) {
            let _ = plan.validate();
        }
    }
});
