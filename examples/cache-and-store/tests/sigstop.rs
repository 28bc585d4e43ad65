//! The example end to end: the demo exits 0 only if every request, including those made
//! while the storage process is stopped with SIGSTOP, is answered correctly.

use std::process::Command;

#[test]
fn calls_complete_while_the_storage_process_is_stopped() {
    let out = Command::new(env!("CARGO_BIN_EXE_cache-and-store"))
        .output()
        .expect("run the demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("storage stopped with SIGSTOP"), "{stdout}");
    assert!(stdout.contains("get 2 -> 200 (storage)"), "{stdout}");
    assert!(
        stdout.contains("served by storage code while it was stopped"),
        "{stdout}"
    );
}
