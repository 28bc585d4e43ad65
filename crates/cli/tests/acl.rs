//! `rdx acl` end to end: the real binary on the policies and traces of tools/acl-traffic.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn rdx(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdx"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_compile_and_test() {
    let policy = repo("tools/acl-traffic/policies/server.acl");
    let policy = policy.to_str().unwrap();
    let (ok, out, err) = rdx(&["acl", "check", policy]);
    assert!(ok, "{err}");
    assert!(out.contains("ok: 11 policies"), "{out}");

    let image = std::env::temp_dir().join(format!("rdx-acl-cli-{}.bin", std::process::id()));
    let (ok, out, err) = rdx(&["acl", "compile", policy, "-o", image.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("from cm_forged"), "{out}");
    let bytes = std::fs::read(&image).unwrap();
    assert_eq!(&bytes[..6], b"RDXACL");
    std::fs::remove_file(&image).unwrap();

    let trace = repo("crates/acl/tests/data/attacks.pcap");
    let (ok, out, err) = rdx(&["acl", "test", policy, trace.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("deny   policy cm_connect_others"), "{out}");
    assert!(out.contains("malformed.unknown_opcode"), "{out}");
}

#[test]
fn errors_point_at_the_line() {
    let dir = std::env::temp_dir().join(format!("rdx-acl-cli-err-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.acl");
    std::fs::write(
        &bad,
        "policy a {\n  predicate = match(sport = 99999)\n  action = deny\n}\n",
    )
    .unwrap();
    let (ok, _, err) = rdx(&["acl", "check", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("bad.acl:2:29: invalid value `99999` for sport"),
        "{err}"
    );
    assert!(err.contains("^"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
