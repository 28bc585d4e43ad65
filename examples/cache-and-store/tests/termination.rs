//! Stopping either process leaves no file behind: SIGTERM to the demo removes the plan and
//! both regions and ends the storage process; the storage process removes its region on
//! SIGTERM and when its stdin ends.

use rdx_xcall_plan::plan::{Plan, PlanSpec};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn sigterm(child: &Child) {
    // SAFETY: signalling a child this test spawned and has not reaped, by its pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
}

/// Whether `pid` is gone or a zombie (killed, not yet reaped by its new parent).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Err(_) => true,
        Ok(status) => status
            .lines()
            .any(|l| l.starts_with("State:") && l.contains('Z')),
    }
}

fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts `cache-and-store store --plan PLAN` and returns it with the region it serves.
fn start_storage(plan: &Path) -> (Child, PathBuf) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cache-and-store"))
        .arg("store")
        .arg("--plan")
        .arg(plan)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let region = line.trim().strip_prefix("ready shm:").unwrap().into();
    (child, region)
}

#[test]
fn the_storage_process_removes_its_region_on_sigterm_and_at_the_end_of_stdin() {
    let plan_path = format!("/dev/shm/rdx-test-cas-plan-{}", std::process::id());
    let _plan = Plan::create(&plan_path, PlanSpec::default()).unwrap();

    let (mut child, region) = start_storage(Path::new(&plan_path));
    assert!(region.exists());
    sigterm(&child);
    assert!(child.wait().unwrap().success());
    assert!(!region.exists(), "{} left after SIGTERM", region.display());

    let (mut child, region) = start_storage(Path::new(&plan_path));
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    assert!(
        !region.exists(),
        "{} left after stdin ended",
        region.display()
    );
    let _ = std::fs::remove_file(&plan_path);
}

#[test]
fn sigterm_to_the_demo_removes_the_plan_and_regions_and_ends_the_storage_process() {
    let mut demo = Command::new(env!("CARGO_BIN_EXE_cache-and-store"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(demo.stdout.take().unwrap()).lines();
    // "storage sandbox: pid P, slot 1, region shm:PATH"
    let started = lines.next().unwrap().unwrap();
    let words: Vec<&str> = started.split_whitespace().collect();
    assert_eq!(words[..3], ["storage", "sandbox:", "pid"], "{started}");
    let storage_pid: u32 = words[3].trim_end_matches(',').parse().unwrap();
    let storage_region = PathBuf::from(words[7].strip_prefix("shm:").unwrap());
    let plan = PathBuf::from(format!("/dev/shm/rdx-cache-and-store-{}", demo.id()));
    assert!(plan.exists() && storage_region.exists());
    sigterm(&demo);
    demo.wait().unwrap();
    assert!(!plan.exists(), "{} left after SIGTERM", plan.display());
    assert!(
        !storage_region.exists(),
        "{} left",
        storage_region.display()
    );
    eventually("the storage process outlived the demo", || {
        ended(storage_pid)
    });
}
