//! The fabric's untrusted inputs: a bootstrap request as a node reads it off the network, a
//! bootstrap reply as a control plane reads it, and a `fabric://` node address.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = rdx_fabric::auth::decode_request(data);
    if let Ok(grant) = rdx_fabric::auth::decode_reply(data) {
        assert!(grant.provider.len() <= 1024 && grant.address.len() <= 1024);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = rdx_fabric::FabricAddress::parse(text);
    }
});
