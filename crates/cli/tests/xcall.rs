//! `rdx xcall plan` and `rdx xcall deploy` against a sandbox joined to a real plan file.

use rdx_runtime::Runtime;
use rdx_xcall::service::Service;
use rdx_xcall_plan::plan::{Plan, PlanSpec};
use std::process::Command;

const STORAGE_EIM: &str = include_str!("../../../examples/cache-and-store/storage.eim.yaml");

fn rdx(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rdx"))
        .args(args)
        .output()
        .expect("run rdx");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn plan_lists_exports_and_deploy_publishes_one() {
    let path = format!("/dev/shm/rdx-cli-xcall-{}", std::process::id());
    let _ = std::fs::remove_file(&path);
    let plan = Plan::create(&path, PlanSpec::default()).unwrap();
    let svc = Service::builder(&plan, "storage")
        .slot(3)
        .export("lookup", 8)
        .runtime(Runtime::builder().eim_spec(STORAGE_EIM))
        .build()
        .unwrap();

    let (ok, out) = rdx(&["xcall", "plan", &path]);
    assert!(ok, "{out}");
    assert!(out.contains("storage"), "{out}");
    assert!(
        out.contains("export lookup") && out.contains("target 0x5843000000030000"),
        "{out}"
    );

    let object = rdx_testdata::object_path("xcall/storage");
    let object = object.to_str().unwrap();
    let common = ["xcall", "deploy", "--plan", &path, "--service", "storage"];
    let (ok, out) = rdx(&[
        &common[..],
        &["--entry", "lookup", "--prog", "lookup", object],
    ]
    .concat());
    assert!(ok, "{out}");
    assert!(out.contains("version 1 live"), "{out}");
    assert!(svc.runtime().hook("lookup").unwrap().is_attached());

    // An entry the sandbox does not have is refused, naming it; so is a missing plan.
    let (ok, out) = rdx(&[
        &common[..],
        &["--entry", "nosuch", "--prog", "lookup", object],
    ]
    .concat());
    assert!(!ok && out.contains("nosuch"), "{out}");
    let (ok, out) = rdx(&["xcall", "plan", "/dev/shm/rdx-cli-xcall-missing"]);
    assert!(!ok && out.contains("rdx-cli-xcall-missing"), "{out}");

    let _ = svc.runtime().unlink();
    drop(svc);
    let _ = std::fs::remove_file(&path);
}
