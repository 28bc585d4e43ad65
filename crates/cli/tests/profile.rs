//! `rdx profile` and `rdx optimize` against a live host: this test process is the host and
//! serves requests on a thread of its own while separate `rdx` processes deploy, profile
//! (an instrumented build whose counters live in the node's XState, read remotely),
//! publish an elite build from the profile (whose failed guards the runtime continues in the
//! fallback image: answers and map updates equal the interpreter's), and revert under
//! traffic.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rdx_test_support::{Rdx, ValueOut};

#[path = "support/request_classify.rs"]
mod request_classify;

/// `(r0, out)` of each request, and the per-class counts, of `values` run in the reference
/// interpreter alone on fresh maps.
fn interpreter_run(object: &str, values: &[u64]) -> (Vec<(u64, u64)>, Vec<u64>) {
    use rdx_bpf::interp::{Config, Input, Vm};
    let obj = rdx_bpf::loader::load(&std::fs::read(object).unwrap()).unwrap();
    let maps = rdx_bpf::maps::MapSet::new(&obj.maps).unwrap();
    let helpers = rdx_bpf::helpers::Helpers::standard();
    let vm = Vm::new(&obj.programs[0].insns, &maps, &helpers, Config::default()).unwrap();
    let answers = values
        .iter()
        .map(|&v| {
            let mut ctx = [0u8; 16];
            ctx[..8].copy_from_slice(&v.to_le_bytes());
            let r0 = vm.run_checked(Input::Bytes(&mut ctx)).unwrap();
            (r0, u64::from_le_bytes(ctx[8..].try_into().unwrap()))
        })
        .collect();
    let counts = (0u32..3)
        .map(|k| {
            let v = maps.get(0).unwrap().lookup(&k.to_le_bytes()).unwrap();
            u64::from_le_bytes(v[..8].try_into().unwrap())
        })
        .collect();
    (answers, counts)
}

#[test]
fn profile_reads_branch_counters_remotely_and_optimize_plans_from_them() {
    let host = request_classify::host("cli-profile");
    let rt = &*host;
    let rdx = Rdx::with_state(env!("CARGO_BIN_EXE_rdx"), "cli-profile");
    let object = request_classify::object();
    let profile_file = rdx.state_dir().join("profile.json");

    rdx.ok(&["node", "add", "n1", &host.address()]);
    rdx.ok(&["deploy", &object, "--node", "n1", "--hook", "on_request"]);

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
                let mut c = ValueOut { value, out: 0 };
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

        let rows = rdx.json(&[
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
        ]);
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

    let history = rdx.ok(&["history", "--node", "n1"]);
    assert!(history.contains("profile"), "{history}");

    // The elite build, published with its fallback image by one transaction.
    let report = rdx.json(&[
        "optimize",
        &object,
        "--node",
        "n1",
        "--hook",
        "on_request",
        "--profile",
        profile_file.to_str().unwrap(),
    ]);
    assert_eq!(report["published"], true, "{report}");
    assert!(report["guards"].as_u64().unwrap() > 0, "{report}");
    let hook = rt.hook("on_request").unwrap();

    // Requests that follow the profile and requests that leave it (zero was never seen:
    // its branch is a guard): every answer and every map update is the interpreter's.
    let sequence = [7u64, 0, 5000, 3, 0, 999, 1000, 0, 12];
    let (reference, reference_counts) = interpreter_run(&object, &sequence);
    let counts_before = request_classify::classes(&rdx);
    let before = hook.stats();
    for (&value, want) in sequence.iter().zip(&reference) {
        let mut c = ValueOut { value, out: 0 };
        let r0 = hook.run(&mut c);
        assert_eq!((r0, c.out), *want, "request {value}");
    }
    let after = hook.stats();
    assert_eq!(after.failures, before.failures, "{after:?}");
    let zeros = sequence.iter().filter(|&&v| v == 0).count() as u64;
    assert!(
        (zeros..=sequence.len() as u64).contains(&(after.deopts - before.deopts)),
        "{before:?} -> {after:?}"
    );
    let delta: Vec<u64> = request_classify::classes(&rdx)
        .iter()
        .zip(&counts_before)
        .map(|(a, b)| a - b)
        .collect();
    assert_eq!(delta, reference_counts, "map updates exactly once");

    // Revert under traffic: no request gets a wrong answer, none fails.
    let stop = AtomicBool::new(false);
    let failures = hook.stats().failures;
    std::thread::scope(|s| {
        s.spawn(|| {
            let hook = rt.hook("on_request").unwrap();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                // Every 7th request leaves the elite build's fast path.
                let value = if i.is_multiple_of(7) { 0 } else { 1 + i % 900 };
                let mut c = ValueOut { value, out: 0 };
                let r0 = hook.run(&mut c);
                let want = if value == 0 { (0, 0) } else { (1, value * 2) };
                if (r0, c.out) != want {
                    wrong.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let reverted = rdx.ok(&[
            "optimize",
            &object,
            "--node",
            "n1",
            "--hook",
            "on_request",
            "--revert",
        ]);
        assert!(reverted.contains("reverted"), "{reverted}");
        std::thread::sleep(std::time::Duration::from_millis(50));
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(
        wrong.load(Ordering::Relaxed),
        0,
        "a request got a wrong answer"
    );
    assert_eq!(hook.stats().failures, failures);
    let deopts = hook.stats().deopts;
    let mut c = ValueOut { value: 0, out: 0 };
    assert_eq!(hook.run(&mut c), 0);
    assert_eq!(hook.stats().deopts, deopts, "the plain build has no guards");
}
