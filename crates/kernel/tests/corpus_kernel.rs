//! The differential corpus (`bpf/tests/*.c`) in the kernel alone: every program loads through
//! libbpf and passes the kernel verifier as a socket filter or XDP program, runs with
//! `BPF_PROG_TEST_RUN`, is deterministic (two fresh loads fed the same inputs agree on every
//! return value and map), and its result depends on its input (a program whose outcome is the
//! same for every packet would make the differential test vacuous).

use rdx_kernel::{KernelError, KernelObject, MapSnapshot, ProgType, TestRunInput};

fn kernel_available() -> bool {
    match rdx_kernel::probe() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("SKIPPED: kernel corpus tests need the bpf() system call: {e}");
            false
        }
    }
}

/// A small fixed set of frames of varied shape: minimal, IPv4/UDP, IPv4/TCP, VLAN, IPv6, junk.
fn frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    out.push(vec![0u8; 14]);
    let mut eth_ip_udp = vec![
        0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00, // Ethernet, IPv4
        0x45, 0, 0, 32, 0x12, 0x34, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4
        0x30, 0x39, 0x00, 0x35, 0, 12, 0, 0, // UDP 12345 -> 53
        b'r', b'd', b'x', b'!',
    ];
    out.push(eth_ip_udp.clone());
    eth_ip_udp[23] = 6; // TCP
    eth_ip_udp.extend_from_slice(&[0u8; 16]);
    out.push(eth_ip_udp);
    let mut vlan = vec![0xff; 12];
    vlan.extend_from_slice(&[0x81, 0x00, 0x00, 0x2a, 0x86, 0xdd]);
    vlan.extend_from_slice(&[0x60, 0, 0, 0, 0, 8, 17, 64]);
    vlan.extend((0..32).map(|i| i as u8));
    vlan.extend_from_slice(&[0x04, 0xd2, 0x16, 0x2e, 0, 8, 0, 0]);
    out.push(vlan);
    out.push((0..200u32).map(|i| (i * 37 + 11) as u8).collect());
    out.push((0..61u32).map(|i| (i * 151 + 7) as u8).collect());
    out
}

type Outcome = (u32, Vec<u8>, Vec<MapSnapshot>);

fn run_sequence(path: &std::path::Path, prog: &str, frames: &[Vec<u8>]) -> Vec<Outcome> {
    let object = KernelObject::open(path).unwrap_or_else(|e| panic!("{e}"));
    let program = object.program(prog).unwrap();
    frames
        .iter()
        .map(|frame| {
            let out = program
                .test_run(&TestRunInput::packet(frame))
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (out.retval, out.data_out, object.snapshot().unwrap())
        })
        .collect()
}

#[test]
fn every_corpus_program_loads_runs_deterministically_and_depends_on_its_input() {
    if !kernel_available() {
        return;
    }
    let names = rdx_testdata::objects_in("tests");
    assert!(
        names.len() >= 15,
        "the corpus must hold at least 15 programs, found {names:?}"
    );
    let frames = frames();
    let mut programs = 0;
    for name in &names {
        let path = rdx_testdata::object_path(name);
        let object = KernelObject::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!object.programs().is_empty(), "{name} has no program");
        for program in object.programs() {
            assert!(
                matches!(program.prog_type(), ProgType::SocketFilter | ProgType::Xdp),
                "{name}/{}: section {:?} is neither socket nor xdp",
                program.name(),
                program.section()
            );
            let first = run_sequence(&path, program.name(), &frames);
            let second = run_sequence(&path, program.name(), &frames);
            assert_eq!(
                first,
                second,
                "{name}/{}: two fresh loads disagree on the same inputs",
                program.name()
            );
            // Each frame on a fresh load, so accumulated map state cannot fake a dependence.
            let distinct: std::collections::HashSet<_> = frames
                .iter()
                .map(|f| run_sequence(&path, program.name(), std::slice::from_ref(f)))
                .collect();
            assert!(
                distinct.len() > 1,
                "{name}/{}: every input gave the same return value, packet and maps",
                program.name()
            );
            programs += 1;
        }
    }
    eprintln!("{programs} corpus programs loaded and ran in the kernel");
}

#[test]
fn raw_program_loads_runs_and_reports_verifier_rejections() {
    if !kernel_available() {
        return;
    }
    use rdx_bpf::isa::RawInsn;
    use rdx_kernel::{KernelProgram, LoadOptions};
    // r0 = *(u32 *)(r1 + 0) (skb->len); r0 += 5; exit
    let insns = [
        RawInsn::new(0x61, 0, 1, 0, 0),
        RawInsn::new(0x07, 0, 0, 0, 5),
        RawInsn::new(0x95, 0, 0, 0, 0),
    ];
    let options = LoadOptions {
        log_level: 1,
        ..LoadOptions::default()
    };
    let loaded = KernelProgram::load("len_plus_5", ProgType::SocketFilter, &insns, &options)
        .expect("a valid socket filter loads");
    assert!(loaded.log.contains("processed"), "log: {}", loaded.log);
    for len in [14usize, 60, 1500] {
        let out = loaded
            .program
            .test_run(&TestRunInput::packet(&vec![0u8; len]))
            .unwrap();
        // The kernel pulls the Ethernet header before a socket filter runs.
        assert_eq!(out.retval as usize, len - 14 + 5);
    }
    // Reading r2 before it is written must be rejected with a log naming the register.
    let bad = [
        RawInsn::new(0xbf, 0, 2, 0, 0),
        RawInsn::new(0x95, 0, 0, 0, 0),
    ];
    match KernelProgram::load("bad", ProgType::SocketFilter, &bad, &LoadOptions::default()) {
        Err(KernelError::ProgramRejected { log, errno, .. }) => {
            assert_eq!(errno.0, libc::EACCES);
            assert!(log.contains("R2 !read_ok"), "log: {log}");
        }
        other => panic!("expected a verifier rejection, got {other:?}"),
    }
}

#[test]
fn maps_created_directly_support_update_lookup_iterate_delete() {
    if !kernel_available() {
        return;
    }
    use rdx_kernel::{KernelMap, MapSpec};
    let map = KernelMap::create(&MapSpec::hash("rdx_test_hash", 4, 8, 8)).unwrap();
    for k in 0u32..5 {
        map.update(&k.to_le_bytes(), &(u64::from(k) * 10).to_le_bytes(), 0)
            .unwrap();
    }
    assert_eq!(
        map.lookup(&3u32.to_le_bytes()).unwrap(),
        Some(30u64.to_le_bytes().to_vec())
    );
    assert_eq!(map.keys().unwrap().len(), 5);
    assert!(map.delete(&3u32.to_le_bytes()).unwrap());
    assert!(!map.delete(&3u32.to_le_bytes()).unwrap());
    assert_eq!(map.snapshot().unwrap().entries.len(), 4);
    match map.lookup(&[0u8; 3]) {
        Err(KernelError::InvalidInput { .. }) => {}
        other => panic!("a short key must be refused, got {other:?}"),
    }
}

#[test]
fn a_verifier_log_too_big_for_its_buffer_is_retried_with_the_size_the_kernel_asks_for() {
    if !kernel_available() {
        return;
    }
    use rdx_bpf::isa::RawInsn;
    use rdx_kernel::{KernelProgram, LoadOptions};
    // 200 x `r0 += 1` then exit: a level-2 log of it is far larger than 256 bytes.
    let mut insns = vec![RawInsn::new(0xb7, 0, 0, 0, 0)];
    insns.extend(std::iter::repeat_n(RawInsn::new(0x07, 0, 0, 0, 1), 200));
    insns.push(RawInsn::new(0x95, 0, 0, 0, 0));
    let options = LoadOptions {
        log_level: 2,
        log_size: 256,
        ..LoadOptions::default()
    };
    let loaded = KernelProgram::load("long_log", ProgType::Xdp, &insns, &options)
        .expect("the load succeeds after growing the log buffer");
    assert!(loaded.log.len() > 256, "log of {} bytes", loaded.log.len());
    let out = loaded
        .program
        .test_run(&TestRunInput::packet(&[0u8; 14]))
        .unwrap();
    assert_eq!(out.retval, 200);
}
