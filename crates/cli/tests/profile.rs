//! `rdx profile` and `rdx optimize` against a live host: this test process is the host and
//! serves requests on a thread of its own while separate `rdx` processes deploy, profile
//! (an instrumented build whose counters live in the node's XState, read remotely),
//! compile an elite build from the profile, and revert.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rdx_runtime::{HookSpec, Runtime};

const EIM: &str = "\
version: 1
hooks:
  - name: on_request
    context:
      size: 16
      fields:
        - {name: value, offset: 0, size: 8, access: read}
        - {name: out, offset: 8, size: 8, access: read_write}
classes:
  - name: default
    hook: on_request
    context: {read: [value, out], write: [out]}
    helpers: [map_lookup_elem, map_update_elem]
    instructions: 100000
    xstate_bytes: 1048576
";

#[repr(C)]
struct Ctx {
    value: u64,
    out: u64,
}

fn rdx(state: &PathBuf, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdx"))
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .output()
        .expect("rdx runs")
}

fn ok(state: &PathBuf, args: &[&str]) -> String {
    let out = rdx(state, args);
    assert!(
        out.status.success(),
        "rdx {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn profile_reads_branch_counters_remotely_and_optimize_plans_from_them() {
    let tag = std::process::id();
    let region = format!("/dev/shm/rdx-cli-profile-{tag}");
    let rt = Runtime::builder()
        .path(&region)
        .eim_spec(EIM)
        .code_size(1 << 20)
        .scratch_size(1 << 20)
        .thread_slots(4)
        .hook(
            "on_request",
            HookSpec::for_context::<Ctx>().default_return(0),
        )
        .build()
        .unwrap();
    rt.register().unwrap();
    let state = std::env::temp_dir().join(format!("rdx-cli-profile-state-{tag}"));
    let _ = std::fs::remove_dir_all(&state);
    let object = rdx_testdata::object_path("deopt/request_classify")
        .display()
        .to_string();
    let profile_file = state.join("profile.json");
    std::fs::create_dir_all(&state).unwrap();

    ok(&state, &["node", "add", "n1", &format!("shm:{region}")]);
    ok(
        &state,
        &["deploy", &object, "--node", "n1", "--hook", "on_request"],
    );

    let stop = AtomicBool::new(false);
    let served = AtomicU64::new(0);
    let wrong = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            rt.register().unwrap();
            let hook = rt.hook("on_request").unwrap();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                // Mostly small values; every 50th is large, never zero.
                let value = if i.is_multiple_of(50) {
                    5000
                } else {
                    1 + i % 900
                };
                let mut c = Ctx { value, out: 0 };
                let r0 = hook.run(&mut c);
                // Before the first deploy lands the hook returns its default 0; afterwards
                // every version (plain or instrumented) must compute the same answer.
                let want = if value < 1000 {
                    (1, value * 2)
                } else {
                    (2, 1000)
                };
                if r0 != 0 && (r0, c.out) != want {
                    wrong.fetch_add(1, Ordering::Relaxed);
                }
                served.fetch_add(1, Ordering::Relaxed);
                if i.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            }
        });

        let rows: serde_json::Value = serde_json::from_str(&ok(
            &state,
            &[
                "profile",
                &object,
                "--node",
                "n1",
                "--hook",
                "on_request",
                "--seconds",
                "1",
                "--min-runs",
                "10",
                "--out",
                profile_file.to_str().unwrap(),
                "--json",
            ],
        ))
        .unwrap();
        stop.store(true, Ordering::Relaxed);

        let rows = rows.as_array().unwrap();
        assert!(rows.len() >= 2, "{rows:?}");
        let total = |r: &serde_json::Value| {
            r["taken"].as_u64().unwrap() + r["fell_through"].as_u64().unwrap()
        };
        // The first branch (`v == 0`) sees every request of the window and goes one way
        // only (which way depends on how clang laid the test out).
        let first = &rows[0];
        assert!(total(first) > 100, "{first}");
        let one_sided = if first["taken"] == 0 {
            "unlikely"
        } else {
            assert_eq!(first["fell_through"], 0, "{first}");
            "likely"
        };
        assert_eq!(first["bias"], one_sided, "{first}");
        // Large values are a real share: the size check is warm both ways.
        assert!(rows
            .iter()
            .any(|r| r["bias"] == "unknown" && r["taken"].as_u64().unwrap() > 0));
    });
    assert_eq!(
        wrong.load(Ordering::Relaxed),
        0,
        "a request got a wrong answer"
    );
    assert!(served.load(Ordering::Relaxed) > 0);

    let history = ok(&state, &["history", "--node", "n1"]);
    assert!(history.contains("profile"), "{history}");

    // The elite build is planned from the saved profile, and not published to a runtime
    // that cannot resume deoptimised runs.
    let out = rdx(
        &state,
        &[
            "optimize",
            &object,
            "--node",
            "n1",
            "--hook",
            "on_request",
            "--profile",
            profile_file.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("guards"), "{stdout}");
    assert!(stderr.contains("not published"), "{stderr}");
    // The hook still runs the plain build.
    let hook = rt.hook("on_request").unwrap();
    let mut c = Ctx { value: 7, out: 0 };
    assert_eq!(hook.run(&mut c), 1);
    assert_eq!(c.out, 14);

    let reverted = ok(
        &state,
        &[
            "optimize",
            &object,
            "--node",
            "n1",
            "--hook",
            "on_request",
            "--revert",
        ],
    );
    assert!(reverted.contains("reverted"), "{reverted}");
    let mut c = Ctx { value: 0, out: 0 };
    assert_eq!(hook.run(&mut c), 0);

    let _ = std::fs::remove_dir_all(&state);
    drop(rt);
    let _ = std::fs::remove_file(&region);
}
