//! Decoder, disassembler and checked interpreter on arbitrary bytes: decoding must return a
//! program or a typed error, and a decoded program must disassemble and run in checked mode
//! (bounded by a step limit) to a result or a typed error, never a panic or a fault.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Vm, XdpMd};
use rdx_bpf::maps::MapSet;

fuzz_target!(|data: &[u8]| {
    // The first 16 bytes (if any) are the input memory; the rest is the program.
    let (mem, code) = data.split_at(data.len().min(16));
    let Ok(insns) = rdx_bpf::isa::decode_bytes(code) else {
        return;
    };
    let _ = rdx_bpf::disasm::disassemble(&insns);
    let config = Config {
        max_steps: 10_000,
        ..Config::default()
    };
    for helpers in [Helpers::standard(), Helpers::conformance()] {
        let Ok(vm) = Vm::new(&insns, &MapSet::default(), &helpers, config.clone()) else {
            continue;
        };
        let mut bytes = mem.to_vec();
        let _ = vm.run_checked(Input::Bytes(&mut bytes));
        let _ = vm.run_checked(Input::Empty);
        let mut xdp = XdpMd::new(mem.to_vec());
        let _ = vm.run_checked(Input::Context(&mut xdp));
    }
});
