//! Fuzzes the JIT on verified programs: any byte string that decodes to a program the verifier
//! accepts must compile (or be refused with a typed error) for both architectures and both
//! Cranelift pipelines, with array lookups inlined, so that stack promotion, compile-time
//! range checks and loop layout see arbitrary verified code. Never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdx_bpf::{MapDef, MapOrigin, MapType};
use rdx_jit::{Arch, Build, CompileOptions, Compiler, Pipeline};
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

fuzz_target!(|data: &[u8]| {
    let Ok(insns) = rdx_bpf::isa::decode_bytes(data) else { return };
    let maps = maps();
    let mut vopts = VerifyOptions::kernel(KernelProgType::Xdp);
    vopts.limits = Limits { max_processed: 100_000, ..Limits::default() };
    let Ok(verified) = verify_insns(&insns, &maps, &vopts) else { return };
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let compiler = Compiler::new(arch).expect("both targets are built in");
        for pipeline in [Pipeline::Optimizing, Pipeline::Fast] {
            let mut opts = CompileOptions::new(arch, Build::Generic);
            opts.needs_budget = verified.needs_budget;
            opts.inline_array_lookups(&maps);
            opts.pipeline = pipeline;
            opts.verify_ir = true;
            let _ = compiler.compile(&insns, &opts);
        }
    }
});
