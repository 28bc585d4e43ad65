//! Output piped into a reader that stops early ends `rdx` quietly, as any Unix tool: no
//! panic message, the status a SIGPIPE death gives (141).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn a_reader_that_stops_early_ends_the_command_quietly() {
    // The ACL enforcement object: its disassembly is far larger than a pipe's buffer.
    let object = rdx_testdata::object_path("acl/enforce");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdx"))
        .arg("inspect")
        .arg(&object)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is dropped here, as `head -1` exits.
    assert!(first.contains("1 program"), "{first}");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
}
