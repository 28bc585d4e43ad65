//! Deployment from another process: this test process is the control plane. It maps the
//! host's region through the shared-memory transport, writes native code into the code
//! arena and publishes it with one compare-and-swap; the host (`rdx-test-host runtime`) only runs
//! its hooks. Nothing is ever loaded by the host.
//!
//! Until the JIT is available here, the programs are tiny hand-assembled x86-64 functions
//! (clearly marked below); they follow the same entry ABI as compiled extensions.

#![cfg(target_arch = "x86_64")]

mod common;

use common::{Host, Node};
use rdx_region::layout::{active_word, offsets, SectionId, ACTIVE_HOLD};
use rdx_transport::context::read_context;
use rdx_transport::shm::ShmTransport;
use rdx_transport::xstate::{self, Copies, MapSpec, UPDATE_ANY};
use rdx_transport::{Transport, TransportError};

// ---- Hand-assembled x86-64 programs (stand-ins for JIT output; System V: rdi = ctx,
// rsi = RunState). ----

/// `mov eax, 42; ret`
const RET_42: &[u8] = &[0xb8, 42, 0, 0, 0, 0xc3];
/// `mov rax, [rdi]; add rax, 1; mov [rdi+8], rax; ret`: out = value + 1, returns it.
const INCREMENT: &[u8] = &[
    0x48, 0x8b, 0x07, 0x48, 0x83, 0xc0, 0x01, 0x48, 0x89, 0x47, 0x08, 0xc3,
];
/// `mov dword [rsi+8], 1; mov eax, 7; ret`: what metered code does when its budget runs out.
const EXHAUST: &[u8] = &[0xc7, 0x46, 0x08, 0x01, 0, 0, 0, 0xb8, 7, 0, 0, 0, 0xc3];

/// Calls `map_lookup_elem(map, &key)` through the helper's linked address and returns the
/// first 8 bytes of the value, or 0 when missing.
fn lookup_program(helper: u64, map: u64, key: u32) -> Vec<u8> {
    let mut c = vec![0x48, 0x83, 0xec, 0x08]; // sub rsp, 8
    c.extend([0x48, 0xc7, 0x04, 0x24]); // mov qword [rsp], imm32
    c.extend(key.to_le_bytes());
    c.extend([0x48, 0xbf]); // movabs rdi, map
    c.extend(map.to_le_bytes());
    c.extend([0x48, 0x89, 0xe6]); // mov rsi, rsp
    c.extend([0x48, 0xb8]); // movabs rax, helper
    c.extend(helper.to_le_bytes());
    c.extend([0xff, 0xd0]); // call rax
    c.extend([0x48, 0x85, 0xc0, 0x74, 0x03]); // test rax, rax; jz +3
    c.extend([0x48, 0x8b, 0x00]); // mov rax, [rax]
    c.extend([0x48, 0x83, 0xc4, 0x08, 0xc3]); // add rsp, 8; ret
    c
}

#[test]
fn deploy_update_and_contain_from_another_process() {
    let mut host = Host::start(&[]);
    let mut node = Node::attach(&host);
    assert_eq!(
        node.t.read_u64(offsets::HEADER_STATE).unwrap(),
        2,
        "registered"
    );
    // Empty hook: the default.
    assert_eq!(host.run(5), (u64::MAX, 0));

    let v1 = active_word(1, node.place(RET_42));
    node.flip(0, v1);
    assert_eq!(host.run(5), (42, 0));

    let v2 = active_word(2, node.place(INCREMENT));
    node.flip(v1, v2);
    assert_eq!(host.run(41), (42, 42));

    // Containment: a run that stops on its budget returns the class default and counts.
    node.t
        .write_u64(node.hook + offsets::HOOK_DEFAULT_RET, 9)
        .unwrap();
    let v3 = active_word(3, node.place(EXHAUST));
    node.flip(v2, v3);
    assert_eq!(host.run(1), (9, 0));
    assert_eq!(host.stats()[1], 1, "failure counted");

    // An active word outside the code arena: empty + error, and the host keeps serving.
    let scratch = node.t.info().section(SectionId::Scratch).offset as u32;
    let bad = active_word(4, scratch);
    node.flip(v3, bad);
    assert_eq!(host.run(1), (9, 0));
    assert_eq!(host.stats()[2], 1, "error counted");
    assert_eq!(
        node.t.read_u64(node.hook + offsets::HOOK_REJECTED).unwrap(),
        bad
    );
    let misaligned = active_word(5, node.t.info().section(SectionId::Code).offset as u32 + 8);
    node.flip(bad, misaligned);
    assert_eq!(host.run(1), (9, 0));
    assert_eq!(host.stats()[2], 2);
    node.flip(misaligned, v2);
    assert_eq!(host.run(1), (2, 2));

    let s = host.stats();
    assert_eq!(
        s[0], 4,
        "runs of extension code (invalid slots run nothing): {s:?}"
    );
    // Detach.
    node.flip(v2, 0);
    assert_eq!(host.run(1), (u64::MAX, 0));
}

#[test]
fn map_created_remotely_is_used_by_the_hosts_helpers() {
    let mut host = Host::start(&[]);
    let mut node = Node::attach(&host);
    let info = node.t.info().clone();
    let at = info.section(SectionId::Scratch).offset + info.scratch_reserved;
    let spec = MapSpec {
        map_type: rdx_region::layout::MapType::Hash,
        key_size: 4,
        value_size: 8,
        max_entries: 64,
        flags: 0,
        name: "counts".into(),
    };
    let m = xstate::create(&node.t, &info, 1, at, &spec).unwrap();
    xstate::update(
        &node.t,
        &m,
        &7u32.to_le_bytes(),
        &1234u64.to_le_bytes(),
        UPDATE_ANY,
        Copies::All,
        1,
    )
    .unwrap();
    let helper = node.symbol("helper:1");
    let prog = lookup_program(helper, info.base_address + m.offset, 7);
    let v1 = active_word(1, node.place(&prog));
    node.flip(0, v1);
    assert_eq!(host.run(0).0, 1234);
    xstate::update(
        &node.t,
        &m,
        &7u32.to_le_bytes(),
        &99u64.to_le_bytes(),
        UPDATE_ANY,
        Copies::All,
        1,
    )
    .unwrap();
    assert_eq!(host.run(0).0, 99);
    xstate::delete(&node.t, &m, &7u32.to_le_bytes(), 1).unwrap();
    assert_eq!(host.run(0).0, 0);
}

#[test]
fn held_hook_waits_for_the_flip_then_runs_the_new_version() {
    let mut host = Host::start(&["--hold-timeout-ms", "5000"]);
    let mut node = Node::attach(&host);
    let v1 = active_word(1, node.place(RET_42));
    node.flip(0, v1);
    let v2 = active_word(2, node.place(INCREMENT));
    node.flip(v1, v1 | ACTIVE_HOLD);
    host.send("run h 10");
    std::thread::sleep(std::time::Duration::from_millis(50));
    node.flip(v1 | ACTIVE_HOLD, v2 | ACTIVE_HOLD);
    node.flip(v2 | ACTIVE_HOLD, v2);
    assert_eq!(
        host.line(),
        "ret 11 out 11",
        "the caller saw only the new version"
    );
    assert_eq!(host.stats()[3], 0);
}

#[test]
fn hold_timeout_runs_the_published_version_and_counts() {
    let mut host = Host::start(&["--hold-timeout-ms", "20"]);
    let mut node = Node::attach(&host);
    let v1 = active_word(1, node.place(RET_42));
    node.flip(0, v1 | ACTIVE_HOLD);
    assert_eq!(host.run(0), (42, 0));
    assert_eq!(host.stats()[3], 1);
}

#[test]
fn bad_regions_are_refused_and_the_host_keeps_serving() {
    let mut host = Host::start(&[]);
    let mut node = Node::attach(&host);
    let v1 = active_word(1, node.place(RET_42));
    node.flip(0, v1);
    let original = std::fs::read(&host.path).unwrap();
    let refuse = |bytes: &[u8], what: &str| {
        let p = format!("{}-copy", host.path);
        std::fs::write(&p, bytes).unwrap();
        let r = ShmTransport::open(&p);
        std::fs::remove_file(&p).unwrap();
        match r {
            Err(TransportError::Layout { source, .. }) => {
                assert!(source.to_string().contains(what), "{source}")
            }
            other => panic!("expected a layout error about {what}, got {other:?}"),
        }
    };
    refuse(&original[..100], "too short");
    refuse(&original[..original.len() / 2], "declared region");
    let mut b = original.clone();
    b[0] = b'X';
    refuse(&b, "bad magic");
    let mut b = original.clone();
    b[8] = 77;
    refuse(&b, "layout version 77");
    let mut b = original.clone();
    b[12] = 2;
    refuse(&b, "architecture");
    let mut b = original.clone();
    b[100] ^= 0xff;
    refuse(&b, "checksum");
    assert!(matches!(
        ShmTransport::open_for(&host.path, rdx_region::layout::Arch::Aarch64),
        Err(TransportError::Layout { .. })
    ));

    // Overwrite the live header: new control planes refuse it, the host keeps running v1.
    node.t.write(0, b"garbage!").unwrap();
    assert!(matches!(
        ShmTransport::open(&host.path),
        Err(TransportError::Layout { .. })
    ));
    assert_eq!(host.run(0), (42, 0));
    node.t.write(0, &original[..8]).unwrap();
    ShmTransport::open(&host.path).unwrap();
}

#[test]
fn exports_are_linkable_symbols() {
    let host = Host::start(&[]);
    let node = Node::attach(&host);
    let ctx = read_context(&node.t, node.t.info()).unwrap();
    for s in [
        "helper:1",
        "helper:2",
        "helper:3",
        "helper:5",
        "helper:6",
        "helper:7",
        "helper:8",
        "helper:12",
        "helper:130",
        "helper:1000",
        "var:host_counter",
        "var:rdx_helper_table",
        "hook:h",
        "hook:other",
    ] {
        assert!(ctx.iter().any(|c| c.symbol() == s), "{s} missing");
    }
    // The helper table holds the same addresses as the context table.
    let table = node.symbol("var:rdx_helper_table");
    let info = node.t.info();
    for id in [1u64, 2, 1000] {
        let via_table = node.t.read_u64(table - info.base_address + 8 * id).unwrap();
        assert_eq!(via_table, node.symbol(&format!("helper:{id}")));
    }
}
