//! Fuzzes the verifier: any byte string that decodes to a program must be accepted or
//! rejected with a reason, never panic or run away, in the kernel-compatible modes and under
//! an EIM class (with a budget, so that loop widening runs too). Every program accepted as
//! XDP also runs in the checked interpreter under state embedding (`rdx_verifier::embed`) on
//! two packets: a run-time fault or a machine state no recorded state describes is a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdx_bpf::{MapDef, MapOrigin, MapType};
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Vm, XdpMd};
use rdx_bpf::maps::MapSet;
use rdx_verifier::embed::{run_embedded, EmbeddedRun};
use rdx_verifier::{verify_insns, EimSpec, KernelProgType, Limits, VerifyOptions};

const SPEC: &str = include_str!("../../eim/packet.yaml");

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
    vec![def("table", MapType::Array, 4, 16, 4), def("flows", MapType::Hash, 8, 8, 16), def("events", MapType::RingBuf, 0, 0, 4096)]
}

fuzz_target!(|data: &[u8]| {
    let Ok(insns) = rdx_bpf::isa::decode_bytes(data) else { return };
    let maps = maps();
    // A smaller exploration limit keeps each input fast; the limits logic is the same.
    let limits = Limits { max_processed: 100_000, ..Limits::default() };
    for ty in [KernelProgType::Xdp, KernelProgType::SocketFilter] {
        let mut opts = VerifyOptions::kernel(ty);
        opts.limits = limits;
        let _ = verify_insns(&insns, &maps, &opts);
    }
    embed_xdp(&insns, &maps, limits);
    let spec = EimSpec::from_yaml(SPEC).expect("the shipped spec is valid");
    let mut opts = VerifyOptions::eim(&spec, "packet_in", "filter").expect("hook and class exist");
    opts.limits = limits;
    let _ = verify_insns(&insns, &maps, &opts);
});

/// Verifies as XDP with recorded states and runs every accepted program under embedding.
fn embed_xdp(insns: &[rdx_bpf::isa::Insn], maps: &[MapDef], limits: Limits) {
    let opts = VerifyOptions {
        limits,
        liveness: false,
        record_states: true,
        ..VerifyOptions::kernel(KernelProgType::Xdp)
    };
    let Ok(v) = verify_insns(insns, maps, &opts) else { return };
    let set = MapSet::new(maps).expect("the fuzz maps are supported");
    let Ok(vm) = Vm::new(insns, &set, &Helpers::standard(), Config::default()) else { return };
    for len in [0usize, 64] {
        let mut ctx = XdpMd::new(vec![0xa5; len]);
        match run_embedded(&vm, &set, &mut ctx, &v.states) {
            EmbeddedRun::Agreed(Ok(_)) => {}
            EmbeddedRun::Agreed(Err(e)) => panic!("accepted program faulted: {e}"),
            EmbeddedRun::Diverged(d) => panic!("state embedding: {d}"),
        }
    }
}
