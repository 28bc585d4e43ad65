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

/// `rdx acl apply` against a live host that declares the ACL packet hook (this test process,
/// through the runtime library): the policy takes effect, a second apply replaces it, and a
/// program the policy does not fit is refused while the node keeps its version.
#[cfg(target_arch = "x86_64")]
#[test]
fn apply_deploys_the_policy_into_a_running_hook() {
    use rdx_acl::enforce::{self, AclContext};
    use rdx_acl::packet::LinkType;
    use rdx_acl::policy::Action;
    use rdx_runtime::{HookSpec, Runtime};

    let region = format!("/dev/shm/rdx-acl-cli-apply-{}", std::process::id());
    let rt = Runtime::builder()
        .path(&region)
        .eim_spec(enforce::EIM_SPEC.as_bytes().to_vec())
        .code_size(8 << 20)
        .scratch_size(512 << 20)
        .hook(
            enforce::HOOK,
            HookSpec::for_context::<AclContext>().default_return(1),
        )
        .build()
        .unwrap();
    rt.register().unwrap();
    let state = std::env::temp_dir().join(format!("rdx-acl-cli-state-{}", std::process::id()));
    let node = format!("shm:{region}");
    let policy = repo("tools/acl-traffic/policies/server.acl");
    let (ok, out, err) = rdx(&[
        "acl",
        "apply",
        policy.to_str().unwrap(),
        "--node",
        &node,
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("version 1 (was 0)"), "{out}");

    let trace = rdx_acl::pcap::read(&repo("crates/acl/tests/data/attacks.pcap")).unwrap();
    let report = rdx_acl::api::test(&policy, &repo("crates/acl/tests/data/attacks.pcap")).unwrap();
    let hook = rt.hook(enforce::HOOK).unwrap();
    for (i, (frame, want)) in trace.packets.iter().zip(&report.verdicts).enumerate() {
        let mut ctx = AclContext::for_frame(trace.link, frame);
        let ret = hook.run(&mut ctx);
        assert_eq!(ctx.outcome(ret).action, want.action, "frame {i}");
    }
    // The program's counters, read by `rdx acl stats`, agree with the native engine's.
    let (ok, out, err) = rdx(&[
        "acl",
        "stats",
        "--node",
        &node,
        "--json",
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let c = &report.counters;
    assert_eq!(v["packets"], trace.packets.len() as u64, "{out}");
    assert_eq!(v["allowed"], c.allowed, "{out}");
    assert_eq!(v["denied"], c.denied, "{out}");
    for (r, n) in rdx_acl::packet::MalformedReason::ALL
        .iter()
        .zip(c.malformed)
    {
        assert_eq!(v["malformed"][r.name()], n, "{out}");
    }
    assert!(c.malformed.iter().sum::<u64>() > 0);

    // A policy that denies everything replaces it.
    let deny_all = std::env::temp_dir().join(format!("rdx-acl-deny-{}.acl", std::process::id()));
    std::fs::write(&deny_all, "default deny\n").unwrap();
    let (ok, out, err) = rdx(&[
        "acl",
        "apply",
        deny_all.to_str().unwrap(),
        "--node",
        &node,
        "--generation",
        "77",
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("version 2 (was 1)"), "{out}");
    let benign = &trace.packets[0];
    let mut ctx = AclContext::for_frame(LinkType::Ethernet, benign);
    let ret = hook.run(&mut ctx);
    assert_eq!(ctx.outcome(ret).action, Action::Deny);
    assert_eq!(ctx.generation, 77);

    // Not the enforcement program: refused, version 2 stays.
    let other = rdx_testdata::object_path("control/plus_one");
    let (ok, _, err) = rdx(&[
        "acl",
        "apply",
        deny_all.to_str().unwrap(),
        "--node",
        &node,
        "--object",
        other.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("not the ACL enforcement program"), "{err}");
    let mut ctx = AclContext::for_frame(LinkType::Ethernet, benign);
    hook.run(&mut ctx);
    assert_eq!(ctx.generation, 77);

    let _ = std::fs::remove_file(&deny_all);
    let _ = std::fs::remove_dir_all(&state);
    let _ = rt.teardown(std::time::Duration::from_millis(200));
    let _ = rt.unlink();
}
