//! Fuzzes the object loader with arbitrary bytes: it must return `Ok` or a `LoadError`, never
//! panic, and whatever it accepts must re-encode to bytes that decode to the same program.
//! Seed the corpus with real objects for depth:
//! `mkdir -p corpus/loader && cp ../target/*/build/rdx-testdata-*/out/examples/*.o corpus/loader/`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdx_bpf::{isa, loader};

fuzz_target!(|data: &[u8]| {
    if let Ok(object) = loader::load(data) {
        for program in &object.programs {
            let bytes = isa::raw_to_bytes(&isa::encode(&program.insns));
            let again = isa::decode_bytes(&bytes).expect("loaded programs re-decode");
            assert_eq!(again, program.insns);
            for insn in &program.insns {
                if let isa::Insn::LoadImm64 {
                    kind: isa::ImmKind::MapIdx | isa::ImmKind::MapIdxValue,
                    imm_lo,
                    ..
                } = insn
                {
                    assert!((*imm_lo as usize) < object.maps.len(), "map index in range");
                }
            }
        }
    }
});
