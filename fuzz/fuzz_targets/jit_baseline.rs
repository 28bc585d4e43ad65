//! Fuzzes the baseline tier (`Pipeline::Baseline`): any byte string that decodes to
//! instructions must compile or be refused with a typed error for both architectures, never
//! panic (the aarch64 assembler panics on an unencodable immediate, so this also checks that
//! every immediate is range-checked first). Programs the verifier accepts must compile, with
//! array lookups inlined and metering on, into an artifact whose relocations lie inside the
//! code and which survives serialisation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdx_bpf::{MapDef, MapOrigin, MapType};
use rdx_jit::{Arch, Artifact, CompileError, Build, CompileOptions, HelperCalls, Pipeline};
use rdx_verifier::{verify_insns, KernelProgType, Limits, VerifyOptions};

fn maps() -> Vec<MapDef> {
    let def = |name: &str, map_type, key_size, value_size, max_entries| MapDef {
        name: name.into(),
        map_type,
        key_size,
        value_size,
        max_entries,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    };
    vec![def("table", MapType::Array, 4, 16, 4), def("flows", MapType::Hash, 8, 8, 16)]
}

fn check(artifact: &Artifact) {
    for r in &artifact.relocations {
        assert!(r.offset as usize + 8 <= artifact.code.len(), "relocation outside the code");
    }
    let back = Artifact::from_bytes(&artifact.to_bytes()).expect("own artifact reads back");
    assert_eq!(&back, artifact);
}

fuzz_target!(|data: &[u8]| {
    let Ok(insns) = rdx_bpf::isa::decode_bytes(data) else { return };
    let maps = maps();
    // Unverified: anything decodable, in both helper modes.
    for arch in [Arch::X86_64, Arch::Aarch64] {
        for helper_calls in [HelperCalls::Direct, HelperCalls::Table { table_len: 16 }] {
            let mut opts = CompileOptions::new(arch, Build::Generic);
            opts.pipeline = Pipeline::Baseline;
            opts.helper_calls = helper_calls;
            opts.needs_budget = data.first().is_some_and(|b| b & 1 == 1);
            if let Ok(artifact) = rdx_jit::compile(&insns, &opts) {
                check(&artifact);
            }
        }
    }
    let mut vopts = VerifyOptions::kernel(KernelProgType::Xdp);
    vopts.limits = Limits { max_processed: 100_000, ..Limits::default() };
    let Ok(verified) = verify_insns(&insns, &maps, &vopts) else { return };
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let mut opts = CompileOptions::new(arch, Build::Generic);
        opts.pipeline = Pipeline::Baseline;
        opts.needs_budget = verified.needs_budget;
        opts.inline_array_lookups(&maps);
        match rdx_jit::compile(&insns, &opts) {
            Ok(artifact) => check(&artifact),
            // What the optimizing tier refuses too (kfuncs, ...), typed.
            Err(CompileError::Unsupported { .. }) => {}
            Err(e) => panic!("verified program refused by the baseline tier: {e}"),
        }
    }
});
