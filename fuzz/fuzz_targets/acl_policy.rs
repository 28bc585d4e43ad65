//! Arbitrary policy text: parse, normalise, check, compile and round-trip the rule image;
//! errors are fine, panics and runaway memory are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdx_acl::compile::{compile, rule_count, RuleImage};

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(set) = rdx_acl::policy::parse(src) else {
        return;
    };
    if rule_count(&set) > 50_000 {
        return;
    }
    if let Ok(rules) = compile(&set) {
        let image = RuleImage::to_bytes(&rules);
        let back = RuleImage::from_bytes(&image).expect("an image we wrote must decode");
        assert_eq!(back.rules, rules.rules);
        // Decoding arbitrary bytes must fail cleanly too.
        let _ = RuleImage::from_bytes(data);
    }
});
