//! `rdx watch` re-profiling against a live host: this test process is the host and serves
//! requests on a thread of its own, counting every answer, while separate `rdx` processes
//! profile the traffic, publish an elite build from it, and watch the hook. The traffic then
//! shifts so that the elite build's guards fail; the watcher sees the deoptimisation rate
//! cross its threshold, re-profiles (an instrumented build, read remotely), merges the fresh
//! window into the old profile and publishes a new elite build. Afterwards the hook
//! deoptimises rarely again. The old elite build published once more deoptimises again, and
//! the hook having had its one allowed re-optimisation, the watcher reverts to the plain
//! build. Every request got the right answer and was counted once in the program's map.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdx_test_support::{Rdx, ValueOut};

#[path = "support/request_classify.rs"]
mod request_classify;

/// The request class `request_classify` answers for `value`, and its `(r0, out)`.
fn expected(value: u64) -> (usize, (u64, u64)) {
    match value {
        0 => (0, (0, 0)),
        1..1000 => (1, (1, value * 2)),
        _ => (2, (2, 1000)),
    }
}

/// Waits until the traffic ran `n` more requests through the hook and returns the runs and
/// deoptimisations meanwhile; `stats` reads the hook's `(runs, deopts)`. The checks count
/// runs, not time: on a loaded machine the traffic thread runs a few thousand requests a
/// second, not the tens of thousands it runs on an idle one.
fn over_runs(n: u64, stats: impl Fn() -> (u64, u64)) -> (u64, u64) {
    let (runs, deopts) = stats();
    let start = Instant::now();
    loop {
        let (r, d) = stats();
        if r - runs >= n {
            return (r - runs, d - deopts);
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} runs in 60 s",
            r - runs
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Ends what the test started when it leaves the scope, also by a panic: the traffic
/// thread stops (else the scope would wait for it forever) and the watcher is killed (else
/// its reader thread would wait for its `--duration`).
struct EndOnDrop<'a> {
    stop: &'a AtomicBool,
    watcher: Option<Child>,
}

impl Drop for EndOnDrop<'_> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = &mut self.watcher {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

#[test]
fn watch_reprofiles_an_elite_version_whose_guards_start_failing() {
    let started = Instant::now();
    let host = request_classify::host("cli-watch-reprofile");
    let rt = &*host;
    let rdx = Rdx::with_state(env!("CARGO_BIN_EXE_rdx"), "cli-watch-reprofile");
    let object = request_classify::object();
    let profile_file = rdx.state_dir().join("profile.json");
    rdx.ok(&["node", "add", "n1", &host.address()]);
    rdx.ok(&["deploy", &object, "--node", "n1", "--hook", "on_request"]);
    let hook = rt.hook("on_request").unwrap();
    let failures_before = hook.stats().failures;

    // Phase 0: values 1..1000 only (zero and large values never seen: both are guards of
    // the elite build). Phase 1: every third request is zero, every fifth is large.
    let phase = AtomicU8::new(0);
    let stop = AtomicBool::new(false);
    let wrong = AtomicU64::new(0);
    let sent: [AtomicU64; 3] = Default::default();
    let watch_events = std::thread::scope(|s| {
        s.spawn(|| {
            rt.register().unwrap();
            let hook = rt.hook("on_request").unwrap();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let value = match phase.load(Ordering::Relaxed) {
                    0 => 1 + i % 999,
                    _ if i.is_multiple_of(3) => 0,
                    _ if i.is_multiple_of(5) => 5000,
                    _ => 1 + i % 999,
                };
                let mut c = ValueOut { value, out: 0 };
                let r0 = hook.run(&mut c);
                let (class, want) = expected(value);
                if (r0, c.out) != want {
                    wrong.fetch_add(1, Ordering::Relaxed);
                }
                sent[class].fetch_add(1, Ordering::Relaxed);
                if i.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            }
        });
        let mut end = EndOnDrop {
            stop: &stop,
            watcher: None,
        };

        rdx.ok(&[
            "profile",
            &object,
            "--node",
            "n1",
            "--hook",
            "on_request",
            "--seconds",
            "0.5",
            "--min-runs",
            "10",
            "--out",
            profile_file.to_str().unwrap(),
            "--json",
        ]);
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
        let elite = report["version"].as_u64().unwrap();
        assert!(report["guards"].as_u64().unwrap() >= 2, "{report}");
        let stats = || {
            let s = hook.stats();
            (s.runs, s.deopts)
        };
        assert_eq!(
            over_runs(5000, stats).1,
            0,
            "the profiled traffic follows the fast path"
        );

        let watcher = end.watcher.insert(
            rdx.command(&[
                "watch",
                "n1/on_request",
                "--json",
                "--interval-ms",
                "2",
                "--max-deopt-ratio",
                "0.05",
                "--deopt-min-runs",
                "2000",
                "--reprofile-seconds",
                "0.5",
                "--max-reoptimizations",
                "1",
                // Only a bound for a watcher nothing ends: `EndOnDrop` kills it when the
                // test ends, passed or failed.
                "--duration",
                "120",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
        );
        let (tx, rx) = mpsc::channel::<serde_json::Value>();
        let stdout = watcher.stdout.take().unwrap();
        s.spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(serde_json::from_str(&line).expect("a JSON event per line"));
            }
        });
        let mut events = Vec::new();
        // An event takes a window of 2,000 runs, a scouting window and a compile: well under
        // a second on an idle machine, several on a loaded one (2 cores, load ~8).
        let next = |what: &str, events: &mut Vec<serde_json::Value>| loop {
            let e = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("no {what} event; saw {events:?}"));
            events.push(e.clone());
            if e["event"] == what {
                break e;
            }
        };
        // The elite version runs a healthy window before the traffic shifts.
        let good = next("good", &mut events);
        assert_eq!(good["version"].as_u64(), Some(elite), "{good}");
        phase.store(1, Ordering::Relaxed);
        let shifted = Instant::now();
        let r = next("reoptimized", &mut events);
        let reacted = shifted.elapsed();
        assert_eq!(r["outcome"], "elite", "{r}");
        assert_eq!(r["from_version"].as_u64(), Some(elite), "{r}");
        let (runs, deopts) = (
            r["window_runs"].as_u64().unwrap(),
            r["window_deopts"].as_u64().unwrap(),
        );
        assert!(runs >= 2000 && deopts * 20 > runs, "{r}");
        let new_elite = r["to_version"].as_u64().unwrap();
        assert!(new_elite > elite, "{r}");
        assert_eq!(
            active_version(&rdx),
            new_elite,
            "the new elite build serves"
        );

        // The shifted traffic now follows the new elite build's fast path.
        let (runs, deopts) = over_runs(2000, stats);
        assert!(
            deopts * 100 <= runs,
            "{deopts} deoptimisations in {runs} runs after re-profiling"
        );

        // The old profile published again: its zero guard fails on the shifted traffic,
        // and this hook has had its one re-optimisation, so the watcher reverts to the
        // plain build.
        let again = rdx.json(&[
            "optimize",
            &object,
            "--node",
            "n1",
            "--hook",
            "on_request",
            "--profile",
            profile_file.to_str().unwrap(),
        ]);
        let r = next("reoptimized", &mut events);
        assert_eq!(r["outcome"], "generic", "{r}");
        assert_eq!(r["from_version"], again["version"], "{r}");
        assert!(r["detail"].as_str().unwrap().contains("limit"), "{r}");
        let plain = r["to_version"].as_u64().unwrap();
        assert_eq!(active_version(&rdx), plain);
        assert_eq!(over_runs(5000, stats).1, 0, "the plain build has no guards");

        // The traffic stops and the watcher, started by this test, ends here.
        drop(end);
        eprintln!("traffic shift to re-optimised elite build: {reacted:?}");
        events
    });
    assert_eq!(
        wrong.load(Ordering::Relaxed),
        0,
        "a request got a wrong answer"
    );
    assert_eq!(hook.stats().failures, failures_before, "no run failed");
    // Every request was counted exactly once, across seven versions (plain, scouting,
    // elite, scouting, elite, elite, plain) and the deoptimised runs of the elite builds.
    let sent: Vec<u64> = sent.iter().map(|n| n.load(Ordering::Relaxed)).collect();
    assert_eq!(
        request_classify::classes(&rdx),
        sent,
        "events: {watch_events:?}"
    );

    let history = rdx.ok(&["history", "--node", "n1"]);
    assert_eq!(history.matches("optimize").count(), 3, "{history}");
    assert_eq!(history.matches("profile").count(), 2, "{history}");
    eprintln!("test took {:?}", started.elapsed());
}

/// The hook's active version, read remotely.
fn active_version(rdx: &Rdx) -> u64 {
    let status = rdx.json(&["node", "show", "n1"]);
    status["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "on_request")
        .map(|h| h["version"].as_u64().unwrap())
        .unwrap()
}
