//! Without privileges, every entry point must return `KernelError::Unavailable` with a reason
//! (never panic, never pretend to work), so callers can skip with a printed message.
//!
//! The test re-runs itself in a child process that has no capabilities (`setpriv` with an
//! empty bounding set: root without CAP_BPF/CAP_SYS_ADMIN), where the bpf() system call fails
//! with EPERM, and checks what the child saw.

use std::process::Command;

use rdx_kernel::{
    KernelError, KernelMap, KernelObject, KernelProgram, LoadOptions, MapSpec, ProgType,
};

const CHILD_ENV: &str = "RDX_KERNEL_UNPRIVILEGED_CHILD";

fn check_everything_is_unavailable() {
    let probe = rdx_kernel::probe().expect_err("bpf() must fail without capabilities");
    assert!(probe.is_unavailable(), "{probe:?}");
    match &probe {
        KernelError::Unavailable { errno, .. } => assert_eq!(errno.0, libc::EPERM),
        other => panic!("{other:?}"),
    }
    let insns = [
        rdx_bpf::RawInsn::new(0xb7, 0, 0, 0, 0),
        rdx_bpf::RawInsn::new(0x95, 0, 0, 0, 0),
    ];
    let errors = [
        KernelMap::create(&MapSpec::array("x", 4, 4, 1)).unwrap_err(),
        KernelProgram::load("x", ProgType::Xdp, &insns, &LoadOptions::default()).unwrap_err(),
        KernelObject::open(rdx_testdata::object_path("tests/alu64")).unwrap_err(),
    ];
    for e in errors {
        assert!(e.is_unavailable(), "expected Unavailable, got {e:?}");
    }
    println!("CHILD-SAW-UNAVAILABLE: {probe}");
}

#[test]
fn without_capabilities_every_entry_point_reports_unavailable() {
    if std::env::var_os(CHILD_ENV).is_some() {
        check_everything_is_unavailable();
        return;
    }
    if rdx_kernel::probe().is_err() {
        eprintln!("SKIPPED: already unprivileged here; the other tests show the skip path");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let output = match Command::new("setpriv")
        .args(["--inh-caps=-all", "--bounding-set=-all"])
        .arg(&exe)
        .args([
            "without_capabilities_every_entry_point_reports_unavailable",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .output()
    {
        Ok(output) => output,
        Err(e) => {
            eprintln!("SKIPPED: cannot run setpriv (util-linux) to drop capabilities: {e}");
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("CHILD-SAW-UNAVAILABLE"),
        "unprivileged child failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}
