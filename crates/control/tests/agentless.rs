//! Invariant 1, shown on a live process: while a control plane deploys (and rolls back)
//! programs into a host that is serving requests, the host makes no system call at all, and
//! its binary contains no loader, verifier or compiler code. New code still runs: the
//! host's own requests start producing the new version's ring-buffer records.

mod common;

use common::{extension, Host};
use rdx_control::node::hook_status;
use rdx_control::{create_codeflow, AttachOptions};
use rdx_transport::xstate::{self, ringbuf};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn strace_available() -> bool {
    Command::new("strace")
        .arg("-V")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
fn host_makes_no_system_call_while_programs_are_deployed() {
    if !strace_available() {
        eprintln!("SKIP: strace is not installed (scripts/setup.sh installs it)");
        return;
    }
    let host = Host::start("agentless", &["--serve"]);
    let mut cf = create_codeflow(&host.address(), AttachOptions::default()).unwrap();
    // Compile both versions up front, as a control plane with a warm cache would.
    let a = extension("plus_one");
    let b = extension("times_two");
    let ca = cf
        .jit_compile_code(&a, &cf.validate_code(&a, "on_request", None).unwrap(), None)
        .unwrap();
    let cb = cf
        .jit_compile_code(&b, &cf.validate_code(&b, "on_request", None).unwrap(), None)
        .unwrap();
    // The first deploy creates the maps; take the lease before tracing starts.
    cf.deploy_prog("on_request", &b, &cb).unwrap();
    // A host thread claims its per-thread slot (one gettid) on its first run of attached
    // code; let the serving thread do that before tracing starts.
    let hook = cf.view().hook("on_request").unwrap().index;
    let deadline = Instant::now() + Duration::from_secs(5);
    let runs = |cf: &rdx_control::CodeFlow| hook_status(cf.transport(), &cf.view().info, hook);
    while runs(&cf).unwrap().runs == 0 {
        assert!(Instant::now() < deadline, "no run of the first deploy");
        std::thread::sleep(Duration::from_millis(1));
    }

    let tracer = Tracer::attach(host.pid);

    let info = cf.view().info.clone();
    let mut published = Vec::new();
    for _ in 0..10 {
        published.push(cf.deploy_prog("on_request", &a, &ca).unwrap().version);
        published.push(cf.deploy_prog("on_request", &b, &cb).unwrap().version);
    }
    cf.rollback("on_request", None).unwrap(); // back to plus_one
                                              // The host's serving thread runs the new code: plus_one writes to `events`.
    let events = xstate::find(cf.transport(), &info, "events").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut records = 0;
    while records == 0 && Instant::now() < deadline {
        records += ringbuf::consume(cf.transport(), &events.map, |_| {}).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(records > 0, "the host never ran the deployed plus_one");

    let (calls, summary) = tracer.finish();
    assert_eq!(
        calls,
        0,
        "the host made system calls during {} deploys:\n{summary}",
        published.len()
    );
    assert_eq!(published.len(), 20);

    // The same measurement does see system calls when the host makes them: one request
    // over its stdin (read + write).
    let mut host = host;
    let tracer = Tracer::attach(host.pid);
    assert!(host.served() > 0);
    // The reply reaches us at the write's syscall-exit stop, possibly before strace has
    // accounted for it; give strace a moment so the detach does not race the count.
    std::thread::sleep(Duration::from_millis(300));
    let (calls, summary) = tracer.finish();
    assert!(
        calls >= 1,
        "strace missed the host's read/write:\n{summary}"
    );
}

/// `strace -f -c -p PID`, attached until [`Tracer::finish`].
struct Tracer {
    child: std::process::Child,
    out: std::path::PathBuf,
}

impl Tracer {
    fn attach(pid: u32) -> Tracer {
        let out = std::env::temp_dir().join(format!("rdx-strace-{}-{pid}.txt", std::process::id()));
        let _ = std::fs::remove_file(&out);
        let mut child = Command::new("strace")
            .args(["-f", "-c", "-o"])
            .arg(&out)
            .args(["-p", &pid.to_string()])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until strace reports the process attached ("... attached with 2 threads").
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            assert!(err.read_line(&mut line).unwrap() > 0, "strace exited early");
            if line.contains("attached") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        Tracer { child, out }
    }

    /// Detaches (SIGINT makes strace write its summary) and returns the total call count.
    /// strace writes nothing at all when it saw no call.
    fn finish(mut self) -> (u64, String) {
        // SAFETY: signalling the strace child we spawned.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        self.child.wait().unwrap();
        let summary = std::fs::read_to_string(&self.out).unwrap_or_default();
        let _ = std::fs::remove_file(&self.out);
        let total = summary.lines().find(|l| l.trim_end().ends_with("total"));
        let calls = match total {
            Some(l) => l
                .split_whitespace()
                .nth(3)
                .and_then(|n| n.parse().ok())
                .expect("calls column"),
            None => {
                assert!(
                    summary.trim().is_empty(),
                    "unexpected strace output:\n{summary}"
                );
                0
            }
        };
        (calls, summary)
    }
}

#[test]
fn host_binary_contains_no_loader_verifier_or_compiler() {
    let bytes = std::fs::read(rdx_test_support::test_host()).unwrap();
    let contains = |needle: &str| bytes.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(contains("rdx_runtime"), "sanity: the runtime is linked");
    for crate_name in [
        "rdx_bpf",
        "rdx_verifier",
        "rdx_jit",
        "cranelift",
        "rdx_control",
    ] {
        assert!(!contains(crate_name), "host binary links {crate_name}");
    }
}
