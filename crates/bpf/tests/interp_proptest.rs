//! Random bytes and random, mostly well-formed instruction streams through the decoder, the
//! disassembler, the assembler's inverse and the checked interpreter: nothing may panic, and a
//! checked run ends in a result or a typed error.

use proptest::prelude::*;
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Vm};
use rdx_bpf::isa::{self, RawInsn};
use rdx_bpf::maps::MapSet;
use rdx_bpf::program::{MapDef, MapOrigin};
use rdx_region::layout::MapType;

/// Every opcode byte RFC 9669 defines (plus a few it does not, to exercise rejection).
const OPCODES: &[u8] = &[
    // ALU / ALU64, K and X
    0x04, 0x0c, 0x14, 0x1c, 0x24, 0x2c, 0x34, 0x3c, 0x44, 0x4c, 0x54, 0x5c, 0x64, 0x6c, 0x74, 0x7c,
    0x84, 0x94, 0x9c, 0xa4, 0xac, 0xb4, 0xbc, 0xc4, 0xcc, 0xd4, 0xdc, 0x07, 0x0f, 0x17, 0x1f, 0x27,
    0x2f, 0x37, 0x3f, 0x47, 0x4f, 0x57, 0x5f, 0x67, 0x6f, 0x77, 0x7f, 0x87, 0x97, 0x9f, 0xa7, 0xaf,
    0xb7, 0xbf, 0xc7, 0xcf, 0xd7, // JMP / JMP32
    0x05, 0x15, 0x1d, 0x25, 0x2d, 0x35, 0x3d, 0x45, 0x4d, 0x55, 0x5d, 0x65, 0x6d, 0x75, 0x7d, 0x85,
    0x8d, 0x95, 0xa5, 0xad, 0xb5, 0xbd, 0xc5, 0xcd, 0xd5, 0xdd, 0x06, 0x16, 0x1e, 0x26, 0x2e, 0x36,
    0x3e, 0x46, 0x4e, 0x56, 0x5e, 0x66, 0x6e, 0x76, 0x7e, 0xa6, 0xae, 0xb6, 0xbe, 0xc6, 0xce, 0xd6,
    0xde, // loads, stores, sign-extending loads, atomics, lddw
    0x61, 0x69, 0x71, 0x79, 0x81, 0x89, 0x91, 0x62, 0x6a, 0x72, 0x7a, 0x63, 0x6b, 0x73, 0x7b, 0xc3,
    0xdb, 0x18, 0x00, // undefined
    0x20, 0x28, 0xe4, 0xff,
];

fn raw_insn() -> impl Strategy<Value = RawInsn> {
    (
        prop::sample::select(OPCODES),
        0u8..12,
        0u8..12,
        prop_oneof![-24i16..24, -520i16..0, any::<i16>()],
        prop_oneof![
            -8i32..72,
            Just(0x01),
            Just(0x40),
            Just(0x51),
            Just(0xa0),
            Just(0xe1),
            Just(0xf1),
            Just(16),
            Just(32),
            Just(64),
            any::<i32>()
        ],
    )
        .prop_map(|(code, dst, src, off, imm)| RawInsn::new(code, dst, src, off, imm))
}

fn exit_slot() -> RawInsn {
    RawInsn::new(0x95, 0, 0, 0, 0)
}

fn maps() -> MapSet {
    MapSet::new(&[MapDef {
        name: "h".into(),
        map_type: MapType::Hash.into(),
        key_size: 4,
        value_size: 8,
        max_entries: 4,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    }])
    .unwrap()
}

fn exercise(raw: &[RawInsn], maps: &MapSet) {
    let Ok(insns) = isa::decode(raw) else {
        return;
    };
    let _ = rdx_bpf::disasm::disassemble(&insns);
    let config = Config {
        max_steps: 2_000,
        ..Config::default()
    };
    for helpers in [Helpers::standard(), Helpers::conformance()] {
        if let Ok(vm) = Vm::new(&insns, maps, &helpers, config.clone()) {
            let mut mem = [0x5au8; 64];
            let _ = vm.run_checked(Input::Bytes(&mut mem));
            let _ = vm.run_checked(Input::Empty);
            let mut xdp = rdx_bpf::interp::XdpMd::new(vec![1; 40]);
            let _ = vm.run_checked(Input::Context(&mut xdp));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(raw) = isa::raw_from_bytes(&bytes) {
            exercise(&raw, &maps());
        }
    }

    #[test]
    fn random_instruction_streams_never_panic(
        mut body in prop::collection::vec(raw_insn(), 1..40),
        init in prop::collection::vec((0u8..10, any::<i32>()), 0..6),
    ) {
        // Initialise a few registers so that runs get past the first instructions, and end
        // with an exit so that some programs complete.
        let mut raw: Vec<RawInsn> = init
            .into_iter()
            .map(|(r, imm)| RawInsn::new(0xb7, r, 0, 0, imm))
            .collect();
        raw.append(&mut body);
        raw.push(exit_slot());
        exercise(&raw, &maps());
    }
}
