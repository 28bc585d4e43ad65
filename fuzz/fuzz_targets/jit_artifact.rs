//! Serialised JIT artifacts: parsing and linking arbitrary bytes must never panic, and
//! whatever parses must link for its own architecture or fail with a typed error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdx_jit::link::{link_bytes, LinkTarget};
use rdx_jit::{Artifact, Symbol};

fuzz_target!(|data: &[u8]| {
    if let Ok(artifact) = Artifact::from_bytes(data) {
        let resolve = |_: &Symbol| Some(0x1000u64);
        let _ = link_bytes(data, LinkTarget::new(artifact.meta.arch), &resolve, 0x10000);
        assert_eq!(Artifact::from_bytes(&artifact.to_bytes()).unwrap(), artifact);
    }
});
