//! The loader against real objects compiled by clang from `bpf/examples/`.

use rdx_bpf::isa::{self, CallTarget, ImmKind, Insn};
use rdx_bpf::loader::{self, LoadedObject, RelocationKind};
use rdx_bpf::program::MapOrigin;
use rdx_region::layout::MapType;

fn load(name: &str) -> LoadedObject {
    let bytes = rdx_testdata::object(name);
    loader::load_detailed(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn map_index(obj: &LoadedObject, name: &str) -> usize {
    obj.object
        .maps
        .iter()
        .position(|m| m.name == name)
        .unwrap_or_else(|| panic!("no map {name} in {:?}", obj.object.maps))
}

/// `lddw` references of a program: (slot, kind, imm_lo, imm_hi).
fn lddws(insns: &[Insn]) -> Vec<(usize, ImmKind, i32, i32)> {
    insns
        .iter()
        .enumerate()
        .filter_map(|(pc, i)| match *i {
            Insn::LoadImm64 {
                kind,
                imm_lo,
                imm_hi,
                ..
            } => Some((pc, kind, imm_lo, imm_hi)),
            _ => None,
        })
        .collect()
}

#[test]
fn hello_has_one_socket_program_and_one_btf_map() {
    let obj = load("examples/hello");
    let o = &obj.object;
    assert_eq!(o.license.as_deref(), Some("GPL"));
    assert_eq!(o.programs.len(), 1);
    let p = &o.programs[0];
    assert_eq!((p.name.as_str(), p.section.as_str()), ("hello", "socket"));
    assert_eq!(o.maps.len(), 1);
    let m = &o.maps[0];
    assert_eq!(m.name, "packets");
    assert_eq!(m.map_type, MapType::Array);
    assert_eq!((m.key_size, m.value_size, m.max_entries), (4, 8, 1));
    assert_eq!(m.origin, MapOrigin::Btf);
    let refs = lddws(&p.insns);
    assert_eq!(refs.len(), 1);
    assert_eq!((refs[0].1, refs[0].2, refs[0].3), (ImmKind::MapIdx, 0, 0));
    assert_eq!(
        obj.layouts[0].relocations[0].kind,
        RelocationKind::Map { map: 0 }
    );
}

#[test]
fn multi_has_every_program_in_section_order() {
    let obj = load("examples/multi");
    let names: Vec<_> = obj
        .object
        .programs
        .iter()
        .map(|p| (p.name.as_str(), p.section.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("classify", "socket"),
            ("xdp_gate", "xdp"),
            ("on_request", "rdx/request")
        ]
    );
    assert_eq!(obj.object.license.as_deref(), Some("Dual BSD/GPL"));
}

#[test]
fn multi_maps_cover_btf_and_global_data() {
    let obj = load("examples/multi");
    let maps = &obj.object.maps;
    let by_proto = &maps[map_index(&obj, "bytes_by_proto")];
    assert_eq!(by_proto.map_type, MapType::Hash);
    assert_eq!(
        (by_proto.key_size, by_proto.value_size, by_proto.max_entries),
        (4, 8, 64)
    );
    let stats = &maps[map_index(&obj, "stats")];
    assert_eq!(stats.map_type, MapType::Array);
    assert_eq!(
        (stats.key_size, stats.value_size, stats.max_entries),
        (4, 24, 4)
    );

    let rodata = &maps[map_index(&obj, ".rodata")];
    assert!(rodata.read_only);
    assert_eq!(rodata.origin, MapOrigin::GlobalData);
    assert_eq!(rodata.flags, loader::BPF_F_RDONLY_PROG);
    let init = rodata.initial_value.as_ref().unwrap();
    assert_eq!(&init[..4], &1000u32.to_le_bytes());
    assert_eq!(init[4], 17);

    let data = &maps[map_index(&obj, ".data")];
    assert!(!data.read_only);
    assert_eq!(data.initial_value.as_deref(), Some(&7u64.to_le_bytes()[..]));
    let bss = &maps[map_index(&obj, ".bss")];
    assert_eq!(bss.initial_value.as_deref(), Some(&[0u8; 8][..]));
    for m in [data, bss] {
        assert_eq!(
            (m.map_type, m.key_size, m.value_size, m.max_entries),
            (MapType::Array.into(), 4, 8, 1)
        );
    }
}

#[test]
fn subprograms_are_appended_and_calls_land_on_them() {
    let obj = load("examples/multi");
    for (program, layout) in obj.object.programs.iter().zip(&obj.layouts) {
        assert_eq!(layout.functions[0].name, program.name);
        assert_eq!(layout.functions[0].start, 0);
        let total: usize = layout.functions.iter().map(|f| f.len).sum();
        assert_eq!(total, program.insns.len(), "{}", program.name);
        let starts: Vec<usize> = layout.functions.iter().map(|f| f.start).collect();
        for (pc, insn) in program.insns.iter().enumerate() {
            if let Insn::Call(CallTarget::Local(_)) = insn {
                let target = insn.call_target(pc).unwrap() as usize;
                assert!(
                    starts.contains(&target),
                    "{}: call at {pc} lands at {target}, not a function start {starts:?}",
                    program.name
                );
            }
        }
    }
    let names = |p: &str| -> Vec<String> {
        let (_, layout) = obj.program(p).unwrap();
        layout.functions.iter().map(|f| f.name.clone()).collect()
    };
    assert_eq!(names("classify"), ["classify", "should_drop", "account"]);
    assert_eq!(names("xdp_gate"), ["xdp_gate", "should_drop", "account"]);
    assert_eq!(names("on_request"), ["on_request", "mix"]);
    let (_, layout) = obj.program("on_request").unwrap();
    assert!(layout.functions[1..].iter().all(|f| f.section == ".text"));
}

#[test]
fn global_data_references_carry_map_and_offset() {
    let obj = load("examples/multi");
    let rodata = map_index(&obj, ".rodata") as i32;
    let data = map_index(&obj, ".data") as i32;
    let bss = map_index(&obj, ".bss") as i32;
    let (classify, _) = obj.program("classify").unwrap();
    let refs = lddws(&classify.insns);
    let value_refs: Vec<(i32, i32)> = refs
        .iter()
        .filter(|r| r.1 == ImmKind::MapIdxValue)
        .map(|r| (r.2, r.3))
        .collect();
    // drop_proto is .rodata+4, drop_threshold .rodata+0, seen_total .data+0.
    assert!(value_refs.contains(&(rodata, 4)), "{value_refs:?}");
    assert!(value_refs.contains(&(rodata, 0)), "{value_refs:?}");
    assert!(value_refs.contains(&(data, 0)), "{value_refs:?}");
    let (hook, _) = obj.program("on_request").unwrap();
    let hook_refs: Vec<(ImmKind, i32, i32)> =
        lddws(&hook.insns).iter().map(|r| (r.1, r.2, r.3)).collect();
    let requests = map_index(&obj, ".data.requests") as i32;
    // hook_calls (.bss+0), last_request_words (.data.requests+0), the printk format (.rodata).
    assert!(
        hook_refs.contains(&(ImmKind::MapIdxValue, bss, 0)),
        "{hook_refs:?}"
    );
    assert!(
        hook_refs.contains(&(ImmKind::MapIdxValue, requests, 0)),
        "{hook_refs:?}"
    );
    assert!(
        hook_refs
            .iter()
            .any(|&(k, m, off)| k == ImmKind::MapIdxValue && m == rodata && off >= 5),
        "{hook_refs:?}"
    );
}

#[test]
fn named_data_sections_are_maps_of_their_own() {
    let obj = load("examples/multi");
    let requests = &obj.object.maps[map_index(&obj, ".data.requests")];
    assert_eq!(requests.origin, MapOrigin::GlobalData);
    assert!(!requests.read_only);
    assert_eq!(
        requests.initial_value.as_deref(),
        Some(&[1, 0, 0, 0, 2, 0, 0, 0][..])
    );
    let rodata = &obj.object.maps[map_index(&obj, ".rodata")];
    let text = rodata.initial_value.as_ref().unwrap();
    assert!(
        text.windows(12).any(|w| w == b"request %llu"),
        "printk format string lives in .rodata"
    );
}

#[test]
fn legacy_maps_section_is_read() {
    let obj = load("examples/legacy_maps");
    let counters = &obj.object.maps[map_index(&obj, "counters")];
    assert_eq!(counters.origin, MapOrigin::Legacy);
    assert_eq!(counters.map_type, MapType::Array);
    assert_eq!(
        (counters.key_size, counters.value_size, counters.max_entries),
        (4, 8, 8)
    );
    let flows = &obj.object.maps[map_index(&obj, "flows")];
    assert_eq!(flows.map_type, MapType::Hash);
    assert_eq!(
        (
            flows.key_size,
            flows.value_size,
            flows.max_entries,
            flows.flags
        ),
        (8, 4, 1024, 1)
    );
    let p = &obj.object.programs[0];
    let referenced: Vec<i32> = lddws(&p.insns)
        .iter()
        .filter(|r| r.1 == ImmKind::MapIdx)
        .map(|r| r.2)
        .collect();
    assert!(referenced.contains(&(map_index(&obj, "counters") as i32)));
    assert!(referenced.contains(&(map_index(&obj, "flows") as i32)));
}

/// Every object the repository compiles loads, references only maps that exist, and
/// re-encodes to bytes that decode to the same program.
#[test]
fn every_compiled_object_loads_consistently() {
    let mut count = 0;
    for (rel, _) in rdx_testdata::OBJECTS {
        let name = rel.trim_end_matches(".o");
        let obj = load(name);
        for p in &obj.object.programs {
            for (_, kind, imm_lo, imm_hi) in lddws(&p.insns) {
                assert!(
                    !matches!(kind, ImmKind::MapFd | ImmKind::MapValue),
                    "{name}/{}: unrelocated map reference",
                    p.name
                );
                if matches!(kind, ImmKind::MapIdx | ImmKind::MapIdxValue) {
                    let map = &obj.object.maps[imm_lo as usize];
                    if kind == ImmKind::MapIdxValue {
                        assert!((imm_hi as u32) < map.value_size);
                    }
                }
            }
            let bytes = isa::raw_to_bytes(&isa::encode(&p.insns));
            assert_eq!(isa::decode_bytes(&bytes).unwrap(), p.insns);
        }
        count += 1;
    }
    assert!(count >= 3, "expected the examples to be compiled");
}

#[test]
fn loading_is_deterministic() {
    let bytes = rdx_testdata::object("examples/multi");
    assert_eq!(
        loader::load_detailed(&bytes).unwrap(),
        loader::load_detailed(&bytes).unwrap()
    );
}

#[test]
fn callbacks_are_linked_as_function_references() {
    let obj = load("examples/callback");
    let (program, layout) = obj.program("sum_indices").unwrap();
    assert_eq!(program.section, "rdx/sum");
    let names: Vec<&str> = layout.functions.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["sum_indices", "add_index"]);
    let callback_start = layout.functions[1].start as i64;
    let refs: Vec<(usize, i32)> = lddws(&program.insns)
        .into_iter()
        .filter(|r| r.1 == ImmKind::Func)
        .map(|r| (r.0, r.2))
        .collect();
    assert_eq!(refs.len(), 1, "{refs:?}");
    let (pc, imm) = refs[0];
    assert_eq!(pc as i64 + 1 + imm as i64, callback_start);
    let reloc = layout.relocations.iter().find(|r| r.insn == pc).unwrap();
    assert_eq!(
        reloc.kind,
        RelocationKind::FuncAddr {
            function: "add_index".into()
        }
    );
    // The reference is against the nameless .text section symbol; it is reported by section.
    assert_eq!(reloc.symbol, ".text");
}
