//! The bpf_conformance plugin binary, driven the way the public runner drives it: program
//! bytes in hex on stdin, memory in hex as the first argument, `r0` in hex on stdout. It runs
//! rdx's own ISA vectors always and the external bpf_conformance suite when it is present
//! (`rdx_testdata::vectors`).

use std::io::Write;
use std::process::{Command, Stdio};

use rdx_bpf::asm::TestVector;
use rdx_testdata::vectors;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x} ")).collect()
}

fn plugin(program: &[u8], mem: Option<&[u8]>, tier: &str) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rdx-conformance-plugin"));
    if let Some(m) = mem {
        cmd.arg(hex(m));
    }
    let mut child = cmd
        .args(["--tier", tier])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("plugin starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(hex(program).as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

#[test]
fn plugin_passes_every_vector_in_both_tiers() {
    let mut failures = Vec::new();
    for set in vectors::all() {
        for f in set.positive() {
            let v = TestVector::parse(&f.text).unwrap_or_else(|e| panic!("{}: {e}", f.id));
            // The vector's own bytes, as the runner sends them.
            let bytes = v.bytes().unwrap_or_else(|e| panic!("{}: {e}", f.id));
            let want = format!("{:x}", v.result.expect("positive vectors carry a result"));
            for tier in ["checked", "unchecked"] {
                let (ok, out, err) = plugin(&bytes, v.mem.as_deref(), tier);
                if !ok || out != want {
                    failures.push(format!("{} ({tier}): {out} {err}, want {want}", f.id));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn plugin_reports_errors_on_stderr() {
    // `mov r0, r3; exit`: r3 is uninitialised.
    let prog = [0xbf, 0x30, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];
    let (ok, out, err) = plugin(&prog, None, "unchecked");
    assert!(!ok);
    assert!(out.is_empty());
    assert!(err.contains("r3 is read before it holds a value"), "{err}");
}
