//! The `rdx` binary end to end on objects clang compiled from `bpf/examples/`.

use rdx_test_support::{Rdx, ScratchDir};

fn rdx() -> Rdx {
    Rdx::new(env!("CARGO_BIN_EXE_rdx"))
}

fn object(name: &str) -> String {
    rdx_testdata::object_path(name).display().to_string()
}

/// An Ethernet frame of `len` bytes carrying IPv4 (EtherType 0x0800).
fn frame(len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[12] = 0x08;
    f
}

#[test]
fn inspect_lists_programs_maps_relocations_and_code() {
    let text = rdx().ok(&["inspect", &object("examples/multi")]);
    for needle in [
        "3 programs, 6 maps",
        "classify",
        "rdx/request",
        "bytes_by_proto",
        "global data, read-only",
        "call should_drop",
        "map #3 bytes_by_proto",
        "<account> (from .text):",
        "exit",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn inspect_json_describes_the_object() {
    let json = rdx().ok(&["inspect", "--json", &object("examples/legacy_maps")]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let maps = v["maps"].as_array().unwrap();
    assert_eq!(maps.len(), 2);
    assert_eq!(maps[0]["name"], "counters");
    assert_eq!(maps[0]["origin"], "legacy");
    assert_eq!(maps[1]["type"], "hash");
    let prog = &v["programs"][0];
    assert_eq!(prog["name"], "count_len");
    assert_eq!(prog["section"], "socket");
    let relocs = prog["relocations"].as_array().unwrap();
    assert!(relocs.iter().all(|r| r["kind"] == "map"));
    assert_eq!(relocs.len(), 2);
    assert!(!prog["disassembly"].as_array().unwrap().is_empty());
}

#[test]
fn run_hello_follows_the_packet_length() {
    // hello returns skb->len > 64; the skb model strips the 14-byte Ethernet header.
    let dir = ScratchDir::new("cli-test");
    let long = dir.write("long.bin", frame(100));
    let short = dir.write("short.bin", frame(70));
    let hello = object("examples/hello");
    let out = rdx().ok(&["run", &hello, "--packet", long.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["r0"], 1);
    assert_eq!(v["ctx_model"], "skb");
    assert_eq!(v["map_changes"][0]["map"], "packets");
    assert_eq!(v["map_changes"][0]["after"], "0100000000000000");

    let out = rdx().ok(&[
        "run",
        &hello,
        "--prog",
        "hello",
        "--packet",
        short.to_str().unwrap(),
        "--repeat",
        "3",
    ]);
    assert!(out.contains("r0 = 0 (0x0)"), "{out}");
    assert!(out.contains("packets[00000000]"), "{out}");
    assert!(out.contains("[0 -> 3]"), "{out}");
}

#[test]
fn run_xdp_program_uses_the_xdp_model() {
    // xdp_gate drops (XDP_DROP = 1) frames whose byte 13 is the configured protocol (17).
    let mut udp = frame(60);
    udp[13] = 17;
    let dir = ScratchDir::new("cli-test");
    let path = dir.write("udp.bin", udp);
    let out = rdx().ok(&[
        "run",
        &object("examples/multi"),
        "--prog",
        "xdp", // a section name selects that section's only program
        "--packet",
        path.to_str().unwrap(),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ctx_model"], "xdp");
    assert_eq!(v["r0"], 1);
}

#[test]
fn run_jit_gives_the_interpreters_answers_and_map_changes() {
    // The same programs natively (`--jit`: verified, compiled, linked against the native
    // helpers, packet below 4 GiB) and in the interpreter: r0 and every map change agree.
    let dir = ScratchDir::new("cli-test");
    let long = dir.write("long.bin", frame(100));
    let mut udp = frame(60);
    udp[13] = 17;
    let udp = dir.write("udp.bin", udp);
    let hello = object("examples/hello");
    let multi = object("examples/multi");
    let cases: [&[&str]; 2] = [
        &[
            "run",
            &hello,
            "--packet",
            long.to_str().unwrap(),
            "--repeat",
            "2",
        ],
        &[
            "run",
            &multi,
            "--prog",
            "xdp",
            "--packet",
            udp.to_str().unwrap(),
        ],
    ];
    for args in cases {
        let interp: serde_json::Value =
            serde_json::from_str(&rdx().ok(&[args, &["--json"]].concat())).unwrap();
        let jit: serde_json::Value =
            serde_json::from_str(&rdx().ok(&[args, &["--json", "--jit"]].concat())).unwrap();
        assert_eq!(jit["r0"], interp["r0"], "{args:?}");
        assert_eq!(jit["map_changes"], interp["map_changes"], "{args:?}");
        assert!(
            !jit["map_changes"].as_array().unwrap().is_empty(),
            "{args:?}"
        );
    }
}

#[test]
fn run_hook_program_with_raw_context() {
    // on_request: hook_calls++ (.bss), then mix(ctx[0], hook_calls) in .text:
    // (a ^ (b << 7)) + (b >> 3). With ctx[0] = 5: run 1 -> 5 ^ 128, run 2 -> 5 ^ 256.
    let dir = ScratchDir::new("cli-test");
    let ctx = dir.write("ctx.bin", 5u64.to_le_bytes());
    let multi = object("examples/multi");
    let ctx = ctx.to_str().unwrap();
    let out = rdx().ok(&[
        "run",
        &multi,
        "--prog",
        "on_request",
        "--ctx",
        ctx,
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ctx_model"], "raw");
    assert_eq!(v["r0"], 5 ^ 128);
    assert_eq!(v["trace"][0], "request 1");
    let out = rdx().ok(&[
        "run",
        &multi,
        "--prog",
        "on_request",
        "--ctx",
        ctx,
        "--repeat",
        "2",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["r0"], 5 ^ 256);
    let bss = v["map_changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["map"] == ".bss")
        .unwrap();
    assert_eq!(bss["after"], "0200000000000000");
}

#[test]
fn errors_name_the_problem_and_fail() {
    let dir = ScratchDir::new("cli-test");
    let bad = dir.write("bad.o", b"definitely not ELF");
    let out = rdx().output(&["inspect", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("rdx: cannot load "), "{err}");
    assert!(err.contains("not an ELF file"), "{err}");

    let out = rdx().output(&["run", &object("examples/multi")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("choose one with --prog NAME"), "{err}");
    assert!(err.contains("xdp_gate (xdp)"), "{err}");

    let out = rdx().output(&["run", &object("examples/multi"), "--prog", "missing"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no program or section named missing"));

    // on_request dereferences its context; without one the checked interpreter stops it.
    let out = rdx().output(&["run", &object("examples/multi"), "--prog", "on_request"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("program on_request failed: instruction"),
        "{err}"
    );
}
