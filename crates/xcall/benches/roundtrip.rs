//! Round-trip latency of a cross-sandbox call against a Unix-domain-socket round trip, with
//! 0%, 50%, 90% and 100% of the cores busy, all in one run.
//!
//! Two operations: `empty` (the callee does nothing) and `lookup` (an 8-byte key in a hash
//! table, the 8-byte value back). The xcall side calls a storage sandbox in a child process
//! through `rdx_xcall::call::call` (the same function the `call` helper is); the baseline
//! sends the request over a connected `SOCK_STREAM` Unix socket to a server process that
//! answers from a `HashMap`. Busy cores are threads of this process that spin for the given
//! share of every 10 ms period.
//!
//! Every sample is one round trip timed with two `Instant::now()` reads; the clock's own
//! cost is printed as the first line. iceoryx2's request-response is not measured here (see
//! docs/xcall.md).
//!
//! Run: `cargo bench -p rdx-xcall --bench roundtrip` (`XCALL_BENCH_SAMPLES` to change the
//! sample count, default 20000).

use rdx_control::{create_codeflow, ExtSpec};
use rdx_xcall::call::call;
use rdx_xcall::plan::{Plan, PlanSpec};
use rdx_xcall::service::Service;
use rdx_xcall::Target;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYS: u64 = 1024;
const SLOT: u16 = 1;

fn storage_eim() -> String {
    let mut s = String::from("version: 1\nhooks:\n");
    for e in ["lookup", "empty"] {
        s += &format!("  - name: {e}\n    context:\n      size: 8\n      fields:\n        - {{ name: n, offset: 0, size: 8, access: read }}\n");
    }
    s += "  - name: put\n    context:\n      size: 16\n      fields:\n        - { name: key, offset: 0, size: 8, access: read }\n        - { name: value, offset: 8, size: 8, access: read }\nfunctions:\n";
    s += &rdx_xcall::eim::reply_function(64);
    s += "classes:\n";
    for (e, helpers) in [("lookup", "[map_lookup_elem]"), ("empty", "[]")] {
        s += &format!("  - name: {e}\n    hook: {e}\n    context: {{ read: [n] }}\n    functions: [xcall_reply]\n    helpers: {helpers}\n    instructions: \"< 10000\"\n    xstate_bytes: 1048576\n");
    }
    s += "  - name: put\n    hook: put\n    context: { read: [key, value] }\n    helpers: [map_update_elem]\n    instructions: \"< 1000\"\n    xstate_bytes: 1048576\n";
    s
}

/// Child role: the storage sandbox. Prints its address, fills its table through its own
/// `put` hook when told `fill`, exits on `quit`.
fn storage_main(plan: &str) {
    let plan = Plan::open(plan).expect("plan");
    let svc = Service::builder(&plan, "storage")
        .slot(SLOT)
        .export("lookup", 8)
        .export("empty", 8)
        .runtime(
            rdx_runtime::Runtime::builder()
                .eim_spec(storage_eim())
                .hook("put", rdx_runtime::HookSpec::new(16)),
        )
        .build()
        .expect("storage sandbox");
    println!("ready {}", svc.address());
    let put = svc.runtime().hook("put").unwrap();
    for line in std::io::stdin().lock().lines() {
        match line.unwrap().trim() {
            "fill" => {
                for k in 0..KEYS {
                    let mut ctx = [k, k * 10];
                    put.run(&mut ctx);
                }
                println!("filled");
            }
            _ => break,
        }
    }
}

/// Child role: the socket server. Request: op (0 empty, 1 lookup) and key, 8 bytes each;
/// reply: 8 bytes.
fn uds_main(path: &str) {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).expect("bind");
    println!("ready");
    let table: HashMap<u64, u64> = (0..KEYS).map(|k| (k, k * 10)).collect();
    let (mut s, _) = listener.accept().expect("accept");
    let mut req = [0u8; 16];
    while s.read_exact(&mut req).is_ok() {
        let op = u64::from_le_bytes(req[..8].try_into().unwrap());
        let key = u64::from_le_bytes(req[8..].try_into().unwrap());
        let v = if op == 0 {
            0
        } else {
            table.get(&key).copied().unwrap_or(0)
        };
        if s.write_all(&v.to_le_bytes()).is_err() {
            break;
        }
    }
}

fn spawn(role: &str, arg: &str) -> (Child, BufReader<std::process::ChildStdout>, String) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env("XCALL_BENCH_ROLE", role)
        .env("XCALL_BENCH_ARG", arg)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("ready"), "{role} said {line:?}");
    let rest = line.trim().trim_start_matches("ready").trim().to_string();
    (child, out, rest)
}

/// Threads that keep `share` of every core busy.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(percent: u32, cores: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = if percent == 0 {
            vec![]
        } else if percent == 50 {
            // Half the cores fully busy.
            (0..cores.div_ceil(2).max(1))
                .map(|_| spinner(&stop, 100))
                .collect()
        } else {
            (0..cores).map(|_| spinner(&stop, percent)).collect()
        };
        Load { stop, threads }
    }
}

fn spinner(stop: &Arc<AtomicBool>, percent: u32) -> std::thread::JoinHandle<()> {
    let stop = stop.clone();
    std::thread::spawn(move || {
        let period = Duration::from_millis(10);
        let busy = period * percent / 100;
        while !stop.load(Ordering::Relaxed) {
            let start = Instant::now();
            while start.elapsed() < busy {
                std::hint::spin_loop();
            }
            if busy < period {
                std::thread::sleep(period - busy);
            }
        }
    })
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Samples `op` `n` times (or for at most `limit`), returns sorted nanoseconds.
fn sample(n: usize, limit: Duration, mut op: impl FnMut(u64)) -> Vec<u64> {
    let mut v = Vec::with_capacity(n);
    let begin = Instant::now();
    for i in 0..n as u64 {
        let t0 = Instant::now();
        op(i % KEYS);
        v.push(t0.elapsed().as_nanos() as u64);
        if begin.elapsed() > limit && v.len() >= 100 {
            break;
        }
    }
    v.sort_unstable();
    v
}

fn pct(v: &[u64], p: f64) -> u64 {
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn show(v: &[u64]) -> String {
    let f = |ns: u64| {
        if ns >= 10_000 {
            format!("{:.1} us", ns as f64 / 1000.0)
        } else {
            format!("{ns} ns")
        }
    };
    format!(
        "{:>10} {:>10} {:>10}  (n={})",
        f(pct(v, 0.5)),
        f(pct(v, 0.9)),
        f(pct(v, 0.99)),
        v.len()
    )
}

fn main() {
    match std::env::var("XCALL_BENCH_ROLE").as_deref() {
        Ok("storage") => return storage_main(&std::env::var("XCALL_BENCH_ARG").unwrap()),
        Ok("uds") => return uds_main(&std::env::var("XCALL_BENCH_ARG").unwrap()),
        _ => {}
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let samples: usize = std::env::var("XCALL_BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pid = std::process::id();
    let plan_path = format!("/dev/shm/rdx-xcall-bench-{pid}");
    let sock_path = format!("/tmp/rdx-xcall-bench-{pid}.sock");
    let _ = std::fs::remove_file(&plan_path);
    let plan = Plan::create(&plan_path, PlanSpec::default()).expect("plan");

    let (mut storage, mut storage_out, address) = spawn("storage", &plan_path);
    let mut cf = create_codeflow(&address, ExtSpec::default()).expect("attach storage");
    let ext = |prog: &str| {
        let obj = rdx_bpf::loader::load(&rdx_testdata::object("xcall/storage")).unwrap();
        rdx_control::Extension::from_object(&obj, Some(prog)).unwrap()
    };
    cf.deploy("put", &ext("put"), None, None)
        .expect("deploy put");
    for e in ["lookup", "empty"] {
        rdx_xcall::deploy::deploy_export(&mut cf, e, &ext(e), None).expect("deploy export");
    }
    {
        let stdin = storage.stdin.as_mut().unwrap();
        writeln!(stdin, "fill").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        storage_out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "filled");
    }
    rdx_xcall::attach::attach(&plan, SLOT).expect("attach");
    let lookup = plan.target("storage", "lookup").unwrap();
    let empty = plan.target("storage", "empty").unwrap();
    let mut out = [0u8; 8];
    assert_eq!(call(lookup, &5u64.to_le_bytes(), &mut out), Ok(1));
    assert_eq!(u64::from_le_bytes(out), 50, "storage answers lookups");

    let (mut uds_child, _uds_out, _) = spawn("uds", &sock_path);
    let mut sock = UnixStream::connect(&sock_path).expect("connect");
    let mut uds = |op: u64, key: u64| -> u64 {
        let mut req = [0u8; 16];
        req[..8].copy_from_slice(&op.to_le_bytes());
        req[8..].copy_from_slice(&key.to_le_bytes());
        sock.write_all(&req).unwrap();
        let mut rep = [0u8; 8];
        sock.read_exact(&mut rep).unwrap();
        u64::from_le_bytes(rep)
    };
    assert_eq!(uds(1, 5), 50, "socket server answers lookups");

    let clock = sample(samples, Duration::from_secs(1), |_| {});
    println!("xcall round trip vs Unix-domain socket, {cores} cores, {samples} samples per row");
    println!(
        "clock overhead (empty timed region): p50 {} ns, p99 {} ns",
        pct(&clock, 0.5),
        pct(&clock, 0.99)
    );
    println!(
        "{:<6} {:<16} {:>10} {:>10} {:>10}",
        "load", "operation", "p50", "p90", "p99"
    );
    let xcall = |t: Target| {
        move |k: u64| {
            let mut out = [0u8; 8];
            let r = call(t, &k.to_le_bytes(), &mut out);
            assert!(r.is_ok(), "call failed: {r:?}");
            std::hint::black_box(out);
        }
    };
    for load in [0u32, 50, 90, 100] {
        let _busy = Load::start(load, cores);
        std::thread::sleep(Duration::from_millis(50));
        let limit = Duration::from_secs(2);
        let rows = [
            ("xcall empty", sample(samples, limit, xcall(empty))),
            ("xcall lookup", sample(samples, limit, xcall(lookup))),
            (
                "uds empty",
                sample(samples, limit, |k| {
                    std::hint::black_box(uds(0, k));
                }),
            ),
            (
                "uds lookup",
                sample(samples, limit, |k| {
                    std::hint::black_box(uds(1, k));
                }),
            ),
        ];
        for (name, v) in rows {
            println!("{:<6} {:<16} {}", format!("{load}%"), name, show(&v));
        }
    }
    drop(sock);
    let _ = uds_child.wait();
    let _ = storage.kill();
    let _ = storage.wait();
    let _ = std::fs::remove_file(&plan_path);
    let _ = std::fs::remove_file(address.trim_start_matches("shm:"));
    let _ = std::fs::remove_file(&sock_path);
}
