//! `rdx watch` and `rdx migrate` end to end: this test process is the host (it links the
//! runtime, declares `on_request` and keeps requests running on a thread); every deploy,
//! watch and migration is a separate `rdx` process working on its region.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdx_runtime::Runtime;
use rdx_test_support::eim::{self, MAP_HELPERS};
use rdx_test_support::{LocalHost, Rdx, ShmPath, ValueOut};

fn rdx(tag: &str) -> Rdx {
    Rdx::with_state(env!("CARGO_BIN_EXE_rdx"), &format!("cli-fleet-state-{tag}"))
}

fn object(name: &str) -> String {
    rdx_testdata::object_path(&format!("fleet/{name}"))
        .display()
        .to_string()
}

fn host(tag: &str) -> LocalHost {
    let region = ShmPath::new(&format!("cli-fleet-{tag}"));
    let builder = LocalHost::builder(&region, &eim::on_request(&MAP_HELPERS))
        .hold_timeout(Duration::from_secs(1));
    LocalHost::with(region, builder)
}

/// Requests run on a thread of the host until dropped; counts what each run stamped.
struct Traffic {
    stop: Arc<AtomicBool>,
    runs: Arc<[AtomicU64; 4]>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Traffic {
    fn start(rt: &Arc<Runtime>) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let runs: Arc<[AtomicU64; 4]> = Arc::new(Default::default());
        let (rt, s, r) = (rt.clone(), stop.clone(), runs.clone());
        let thread = std::thread::spawn(move || {
            let hook = rt.hook("on_request").unwrap();
            let mut i = 0;
            while !s.load(Ordering::Relaxed) {
                let mut c = ValueOut { value: i, out: 0 };
                hook.run(&mut c);
                r[(c.out as usize).min(3)].fetch_add(1, Ordering::Relaxed);
                i += 1;
                std::thread::sleep(Duration::from_micros(20));
            }
        });
        Traffic {
            stop,
            runs,
            thread: Some(thread),
        }
    }

    /// Runs that stamped `out` (0: the hook's default, i.e. the run failed or ran nothing).
    fn count(&self, out: usize) -> u64 {
        self.runs[out].load(Ordering::Relaxed)
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn watch_rolls_a_faulting_release_back() {
    let host = host("watch");
    let env = rdx("watch");
    env.ok(&["node", "add", "kv", &host.address()]);
    assert!(env.fails(&["watch", "kv"]).contains("is not NODE/HOOK"));
    // An address works as the node, and the watcher says what it watches.
    let by_address = format!("{}/on_request", host.address());
    let said = env.ok(&["watch", &by_address, "--duration", "0.2", "--no-reprofile"]);
    assert!(
        said.contains("/on_request at shm:") && said.contains("every 1 ms"),
        "{said}"
    );
    assert!(env
        .fails(&["watch", "kv/on_request", "--max-failure-ratio", "2"])
        .contains("between 0 and 1"));
    env.ok(&[
        "deploy",
        &object("stamp_v1"),
        "--node",
        "kv",
        "--hook",
        "on_request",
    ]);
    let traffic = Traffic::start(host.runtime());
    let mut watcher = env
        .command(&[
            "watch",
            "kv/on_request",
            "--interval-ms",
            "0.5",
            "--max-rollbacks",
            "1",
            "--duration",
            "30",
            "--json",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut events = BufReader::new(watcher.stdout.take().unwrap()).lines();
    let mut next = || -> serde_json::Value {
        serde_json::from_str(&events.next().expect("an event").unwrap()).unwrap()
    };
    let good = next();
    assert_eq!(
        (good["event"].as_str(), good["version"].as_u64()),
        (Some("good"), Some(1))
    );
    env.ok(&[
        "deploy",
        &object("stamp_fault"),
        "--node",
        "kv",
        "--hook",
        "on_request",
    ]);
    let rolled = loop {
        let e = next();
        if e["event"] == "rolled_back" {
            break e;
        }
    };
    assert!(watcher.wait().unwrap().success());
    assert_eq!(rolled["from_version"], 2);
    assert_eq!(rolled["to_version"], 1);
    println!(
        "rdx watch: fault to rollback at most {} us (detection to rollback {} us)",
        rolled["fault_to_rollback_us"], rolled["rollback_us"]
    );
    let ones = traffic.count(1);
    let start = Instant::now();
    while traffic.count(1) < ones + 50 {
        assert!(start.elapsed() < Duration::from_secs(10), "v1 runs again");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(traffic.count(0) > 0, "the faulty version failed runs");
    assert_eq!(
        traffic.count(3),
        0,
        "the faulty version never completes a run"
    );
    let history = env.ok(&["history", "--node", "kv"]);
    assert!(history.contains("rollback"), "{history}");
    drop(traffic);
}

#[test]
fn migrate_moves_the_program_and_its_map_contents() {
    let (src, dst) = (host("mig-s"), host("mig-t"));
    let env = rdx("migrate");
    env.ok(&["node", "add", "s", &src.address()]);
    env.ok(&["node", "add", "t", &dst.address()]);
    assert!(env
        .fails(&[
            "migrate",
            "--from",
            "s",
            "--to",
            "t",
            "--hook",
            "on_request"
        ])
        .contains("runs nothing"));
    env.ok(&[
        "deploy",
        &object("stamp_v1"),
        "--node",
        "s",
        "--hook",
        "on_request",
    ]);
    let run = |h: &LocalHost| h.request(0).0;
    for _ in 0..25 {
        assert_eq!(run(&src), 1);
    }
    // The object comes from the source's deploy history.
    let report: serde_json::Value = serde_json::from_str(&env.ok(&[
        "migrate",
        "--from",
        "s",
        "--to",
        "t",
        "--hook",
        "on_request",
        "--json",
    ]))
    .unwrap();
    assert_eq!(report["source_version"], 1);
    assert_eq!(report["maps"][0]["entries"], 1);
    assert_eq!(run(&src), 0, "the source runs nothing any more");
    assert_eq!(run(&dst), 1, "the target runs v1");
    let hits = {
        let region = dst.region();
        let m = rdx_transport::xstate::find(&region, dst.info(), "hits").unwrap();
        let mut v = [0u8; 8];
        assert!(
            rdx_transport::xstate::lookup(&region, &m.map, &0u32.to_le_bytes(), &mut v).unwrap()
        );
        u64::from_le_bytes(v)
    };
    assert_eq!(hits, 26, "25 updates made on the source, 1 on the target");
    let history = env.ok(&["history", "--node", "s"]);
    assert!(history.contains("detach"), "{history}");
}

#[test]
fn broadcast_drains_a_declared_flow_and_refuses_a_bad_one() {
    let (a, b) = (host("flow-a"), host("flow-b"));
    let env = rdx("flow");
    let plan = |entry_node: &str, only: &str| {
        let p = env
            .state_dir()
            .join(format!("plan-{entry_node}-{only}.yaml"));
        std::fs::write(
            &p,
            format!(
                "nodes:\n  - {{name: a, address: '{}'}}\n  \
                 - {{name: b, address: '{}'}}\n\
                 updates:\n  - {{hook: on_request, object: '{}', nodes: [{only}]}}\n\
                 flows:\n  - {{entry: {{node: {entry_node}, hook: on_request}}, \
                 exit: {{node: b, hook: on_request}}}}\n",
                a.address(),
                b.address(),
                object("stamp_v2")
            ),
        )
        .unwrap();
        p.display().to_string()
    };
    let refused = env.fails(&["broadcast", &plan("a", "b")]);
    assert!(
        refused.contains("entry a/on_request is not updated"),
        "{refused}"
    );
    let out = env.ok(&["broadcast", &plan("a", "a, b"), "--durability", "machine"]);
    assert!(out.contains("of which drain"), "{out}");
    for h in [&a, &b] {
        assert_eq!(h.request(0).0, 2);
    }
}

/// `rdx broadcast` killed (SIGKILL) before its commit point, after it and mid-flip: the
/// hooks stay held; `rdx deploy`, `rollback` and `detach` are refused naming the update and
/// `rdx recover`; `rdx node show` shows the holds; `rdx recover` from another state
/// directory, given only the node addresses, leaves every node on one version with no hold.
#[test]
fn a_killed_broadcast_is_recovered_from_another_state_directory() {
    use std::os::unix::process::ExitStatusExt;
    let (a, b) = (host("kill-a"), host("kill-b"));
    let env = rdx("kill");
    let elsewhere = rdx("kill-elsewhere");
    let plan = |version: u32| {
        let p = env.state_dir().join(format!("plan-v{version}.yaml"));
        std::fs::write(
            &p,
            format!(
                "nodes:\n  - {{name: a, address: '{}'}}\n  - {{name: b, address: '{}'}}\n\
                 updates:\n  - {{hook: on_request, object: '{}'}}\n",
                a.address(),
                b.address(),
                object(&format!("stamp_v{version}"))
            ),
        )
        .unwrap();
        p.display().to_string()
    };
    let (v1, v2) = (plan(1), plan(2));
    let hook_of = |show: &serde_json::Value| show["hooks"][0].clone();
    // An earlier version to roll back to.
    env.ok(&["broadcast", &v2]);
    for (phase, forward) in [("held", false), ("decided", true), ("first-flip", true)] {
        env.ok(&["broadcast", &v1]);
        let out = env
            .command(&["broadcast", &v2])
            .env("RDX_FLEET_CRASH_AT", phase)
            .output()
            .unwrap();
        assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{phase}: {out:?}");

        for args in [
            vec!["deploy", &object("stamp_v1"), "--hook", "on_request"],
            vec!["rollback", "--hook", "on_request"],
            vec!["detach", "--hook", "on_request"],
        ] {
            let mut args = args.clone();
            let address = a.address();
            args.extend(["--node", &address]);
            let refused = env.fails(&args);
            assert!(
                refused.contains("held by update ") && refused.contains("rdx recover --node"),
                "{phase}: {args:?}: {refused}"
            );
        }
        let show = env.json(&["node", "show", &a.address()]);
        assert_eq!(hook_of(&show)["held"], true, "{phase}: {show}");
        assert!(hook_of(&show)["hold_timeouts"].is_u64(), "{phase}: {show}");
        assert_eq!(show["update"]["settled"], false, "{phase}: {show}");
        let text = env.ok(&["node", "show", &a.address()]);
        assert!(
            text.contains("HOLD TIMEOUTS")
                && text.contains(" held ")
                && text.contains("hold timeout 1s")
                && text.contains("unfinished"),
            "{phase}: {text}"
        );

        let recovered =
            elsewhere.json(&["recover", "--node", &a.address(), "--node", &b.address()]);
        let want = if forward {
            "rolled_forward"
        } else {
            "rolled_back"
        };
        assert_eq!(recovered[0]["outcome"], want, "{phase}: {recovered}");
        let version = if forward { 2 } else { 1 };
        for h in [&a, &b] {
            assert_eq!(h.request(0).0, version, "{phase}: no mixed versions");
            let show = env.json(&["node", "show", &h.address()]);
            assert_eq!(hook_of(&show)["held"], false, "{phase}: {show}");
            assert_eq!(show["update"]["settled"], true, "{phase}: {show}");
            let hook = hook_of(&show);
            assert!(
                hook["held_versions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|v| v["version"] == hook["version"] && v["active"] == true),
                "{phase}: the active version's code is still held: {show}"
            );
        }
        // The dead control plane's own log is then only closed.
        let closed = env.json(&["recover"]);
        assert_eq!(closed[0]["outcome"], want, "{phase}: {closed}");
        assert!(elsewhere
            .ok(&["recover", "--node", &a.address()])
            .contains("nothing to recover"));
    }
}

/// `rdx migrate` killed right after its commit point (the target's record says committed,
/// no copy on the source yet): `rdx recover` from another state directory moves the program
/// to the target and leaves no hold.
#[test]
fn a_killed_migration_is_recovered_from_another_state_directory() {
    use std::os::unix::process::ExitStatusExt;
    let (src, dst) = (host("kill-mig-s"), host("kill-mig-t"));
    let env = rdx("kill-mig");
    let elsewhere = rdx("kill-mig-elsewhere");
    let (s, t) = (src.address(), dst.address());
    env.ok(&[
        "deploy",
        &object("stamp_v1"),
        "--node",
        &s,
        "--hook",
        "on_request",
    ]);
    assert_eq!(src.request(0).0, 1);
    let out = env
        .command(&[
            "migrate",
            &object("stamp_v1"),
            "--from",
            &s,
            "--to",
            &t,
            "--hook",
            "on_request",
        ])
        .env("RDX_FLEET_CRASH_AT", "decided")
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{out:?}");
    let recovered = elsewhere.json(&["recover", "--node", &s, "--node", &t]);
    assert_eq!(recovered[0]["outcome"], "rolled_forward", "{recovered}");
    assert_eq!(src.request(0).0, 0, "the source runs nothing");
    assert_eq!(dst.request(0).0, 1, "the target runs v1");
    for node in [&s, &t] {
        let show = env.json(&["node", "show", node]);
        assert_eq!(show["hooks"][0]["held"], false, "{show}");
    }
}
