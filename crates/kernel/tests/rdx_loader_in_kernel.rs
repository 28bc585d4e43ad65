//! rdx's loader checked by the kernel: every corpus program, as rdx's loader linked it (map
//! references by index, global data, BPF-to-BPF calls), must pass the kernel verifier, and
//! must behave in the kernel exactly like the same program loaded by libbpf, on the same
//! inputs: same return values, packets and map contents after every run. This isolates
//! rdx's relocations from its interpreter: a difference here is a loader bug.

use std::collections::BTreeMap;

use rdx_kernel::{create_maps, load_linked, KernelObject, ProgType, TestRunInput};

fn kernel_available() -> bool {
    match rdx_kernel::probe() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("SKIPPED: rdx-loader-in-kernel test needs the bpf() system call: {e}");
            false
        }
    }
}

/// Frames of several shapes and lengths (IPv4/UDP with a valid header, IPv6, noise).
fn frames() -> Vec<Vec<u8>> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut udp = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    udp.extend_from_slice(&[
        0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ]);
    udp.extend_from_slice(&[0x30, 0x39, 0x00, 0x35, 0, 8, 0, 0]);
    let mut v6 = vec![0xff; 12];
    v6.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
    v6.extend(0..32u8);
    v6.extend_from_slice(&[0x04, 0xd2, 0x16, 0x2e, 0, 8, 0, 0]);
    let mut out = vec![udp, v6, vec![0; 14]];
    for len in [14usize, 15, 40, 64, 99, 300, 1000] {
        let mut f: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        // Keep socket filters runnable: an EtherType the kernel needs no L3 header for.
        f[12] = 0x88;
        f[13] = 0xb5;
        out.push(f);
    }
    out
}

type Outcome = (u32, Vec<u8>, Vec<BTreeMap<Vec<u8>, Vec<u8>>>);

#[test]
fn rdx_linked_programs_verify_and_match_libbpf_in_the_kernel() {
    if !kernel_available() {
        return;
    }
    let frames = frames();
    let mut checked = 0;
    let mut verify_ns = Vec::new();
    for name in rdx_testdata::objects_in("tests") {
        let path = rdx_testdata::object_path(&name);
        let bytes = std::fs::read(&path).unwrap();
        let object = rdx_bpf::loader::load(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        for program in &object.programs {
            let prog_type = ProgType::from_section(&program.section)
                .unwrap_or_else(|| panic!("{name}: unexpected section {}", program.section));

            // rdx's linking, kernel's verifier.
            let maps = create_maps(&object.maps).unwrap_or_else(|e| panic!("{name}: {e}"));
            let license = object.license.as_deref().unwrap_or("GPL");
            let loaded = load_linked(program, prog_type, &maps, license, 0)
                .unwrap_or_else(|e| panic!("{name}/{}: rdx's linked program: {e}", program.name));
            verify_ns.push(loaded.load_time.as_nanos());

            // libbpf's linking, the reference.
            let reference = KernelObject::open(&path).unwrap();
            let reference_prog = reference.program(&program.name).unwrap();
            // Both loaders must create the same set of maps; they are matched by name below
            // (libbpf prefixes global-data maps with the object name).
            assert_eq!(
                reference.maps().len(),
                maps.len(),
                "{name}: libbpf made {:?}, rdx {:?}",
                reference.maps().iter().map(|m| &m.name).collect::<Vec<_>>(),
                object.maps.iter().map(|m| &m.name).collect::<Vec<_>>()
            );
            for (frame_index, frame) in frames.iter().enumerate() {
                let ctx = (prog_type == ProgType::SocketFilter).then(|| vec![0u8; 192]);
                let input = TestRunInput {
                    data_in: frame,
                    ctx_in: ctx.as_deref(),
                    repeat: 1,
                };
                let ours = loaded.program.test_run(&input).unwrap();
                let theirs = reference_prog.test_run(&input).unwrap();
                let snapshot_ours: Vec<_> =
                    maps.iter().map(|m| m.snapshot().unwrap().entries).collect();
                let mut snapshot_theirs = Vec::new();
                for rdx_def in &object.maps {
                    let m = reference
                        .maps()
                        .iter()
                        .find(|m| {
                            m.name == rdx_def.name
                                || m.global_data_section.as_deref() == Some(rdx_def.name.as_str())
                        })
                        .unwrap_or_else(|| panic!("{name}: libbpf has no map {}", rdx_def.name));
                    snapshot_theirs.push(m.map.snapshot().unwrap().entries);
                }
                let a: Outcome = (ours.retval, ours.data_out, snapshot_ours);
                let b: Outcome = (theirs.retval, theirs.data_out, snapshot_theirs);
                assert_eq!(
                    a, b,
                    "{name}/{}: frame {frame_index}: rdx-linked (left) and libbpf-linked (right) differ in the kernel",
                    program.name
                );
            }
            checked += 1;
        }
    }
    verify_ns.sort_unstable();
    eprintln!(
        "{checked} rdx-linked programs verified by the kernel and matched libbpf's; \
         BPF_PROG_LOAD median {} us, max {} us",
        verify_ns[verify_ns.len() / 2] / 1000,
        verify_ns[verify_ns.len() - 1] / 1000
    );
    assert!(checked >= 15);
}
