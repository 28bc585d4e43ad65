//! Round-trip latency of a cross-sandbox call against two IPC baselines — iceoryx2's
//! request-response and a Unix-domain-socket round trip — with 0%, 50%, 90% and 100% of the
//! cores kept busy by `stress-ng`, all in one run.
//!
//! Two operations: `empty` (the callee does nothing) and `lookup` (an 8-byte key in a hash
//! table, the 8-byte value back). The xcall side calls a storage sandbox in a child process
//! through `rdx_xcall::call::call` (the same function the `call` helper is). Each baseline is
//! a separate server process that blocks until a request arrives, as a deployed service
//! would, and answers from a `HashMap`:
//! - iceoryx2: a request-response service (`[op, key]` → value) plus one event service per
//!   direction; the client sends the request and notifies, the server wakes on its listener,
//!   answers and notifies back, the client blocks on its listener until the response is there;
//! - Unix socket: a connected `SOCK_STREAM` socket, 16-byte request, 8-byte reply.
//!
//! Load: `stress-ng --cpu <cores> --cpu-load <percent>` (a separate process whose workers
//! compete with the servers for the CPU under the default scheduler; Debian package
//! `stress-ng`).
//!
//! Timing: each sample is read with the cheapest per-call counter available — `rdtsc` /
//! `rdtscp` (fenced) on x86_64 when the TSC is invariant, calibrated against the monotonic
//! clock at start; `cntvct_el0` on aarch64 (frequency from `cntfrq_el0`); `clock_gettime`
//! otherwise. The timer's own cost (an empty timed region) is measured at every load level
//! and printed; every row shows raw percentiles and the same minus that level's timer p50.
//! The counter's resolution is printed too (some virtual machines' TSC advances in 10 ns
//! steps): the `/16` rows time 16 calls per sample, a serialising instruction between two, and
//! subtract a 16-step empty region's p50, which resolves the per-call cost 16 times finer.
//! Every row also shows the measuring thread's involuntary context switches, CPU migrations
//! and page faults while it was taken.
//!
//! Run: `cargo bench -p rdx-xcall --bench roundtrip` (`XCALL_BENCH_SAMPLES` changes the
//! sample count, default 20000; `XCALL_BENCH_PROFILE=<seconds>` only runs xcall lookups in a
//! loop for that long, for `perf record`; `XCALL_BENCH_PROFILE_OP=empty` for the empty call;
//! `XCALL_BENCH_DIAG=1` runs the load-level diagnosis of [`diagnose`] instead).

use iceoryx2::prelude::*;
use rdx_control::{create_codeflow, AttachOptions};
use rdx_xcall::call::call;
use rdx_xcall::service::Service;
use rdx_xcall_plan::plan::{Plan, PlanSpec};
use rdx_xcall_plan::Target;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KEYS: u64 = 1024;
/// Calls per sample in the finer-grained rows.
const BATCH: u64 = 16;
const SLOT: u16 = 1;

/// Per-sample timestamps in ticks of the cheapest counter this machine offers.
mod clock {
    use std::time::{Duration, Instant};

    #[derive(Clone, Copy, PartialEq, Eq)]
    pub enum Source {
        #[cfg(target_arch = "x86_64")]
        Tsc,
        #[cfg(target_arch = "aarch64")]
        Cntvct,
        Monotonic,
    }

    pub struct Clock {
        pub source: Source,
        pub ns_per_tick: f64,
    }

    impl Clock {
        pub fn new() -> Clock {
            #[cfg(target_arch = "x86_64")]
            {
                let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
                let flags = cpuinfo
                    .lines()
                    .find(|l| l.starts_with("flags"))
                    .unwrap_or("");
                let has = |f: &str| flags.split_whitespace().any(|x| x == f);
                if has("constant_tsc") && has("nonstop_tsc") && has("rdtscp") {
                    let mut c = Clock {
                        source: Source::Tsc,
                        ns_per_tick: 1.0,
                    };
                    c.ns_per_tick = c.calibrate();
                    return c;
                }
            }
            #[cfg(target_arch = "aarch64")]
            {
                let freq: u64;
                // SAFETY: reading the generic timer's frequency register (EL0-accessible).
                unsafe { std::arch::asm!("mrs {}, cntfrq_el0", out(reg) freq) };
                if freq > 0 {
                    return Clock {
                        source: Source::Cntvct,
                        ns_per_tick: 1e9 / freq as f64,
                    };
                }
            }
            Clock {
                source: Source::Monotonic,
                ns_per_tick: 1.0,
            }
        }

        /// Ticks per nanosecond of the monotonic clock over 50 ms (median of three).
        #[allow(dead_code)]
        fn calibrate(&self) -> f64 {
            let mut r: Vec<f64> = (0..3)
                .map(|_| {
                    let (w0, t0) = (Instant::now(), self.start());
                    while w0.elapsed() < Duration::from_millis(50) {
                        std::hint::spin_loop();
                    }
                    let (t1, w1) = (self.stop(), Instant::now());
                    (w1 - w0).as_nanos() as f64 / (t1 - t0) as f64
                })
                .collect();
            r.sort_by(f64::total_cmp);
            r[1]
        }

        pub fn describe(&self) -> String {
            match self.source {
                #[cfg(target_arch = "x86_64")]
                Source::Tsc => format!(
                    "rdtsc/rdtscp, invariant TSC calibrated at {:.3} GHz",
                    1.0 / self.ns_per_tick
                ),
                #[cfg(target_arch = "aarch64")]
                Source::Cntvct => format!(
                    "cntvct_el0 at {:.1} MHz ({:.1} ns per tick)",
                    1e3 / self.ns_per_tick,
                    self.ns_per_tick
                ),
                Source::Monotonic => "clock_gettime(CLOCK_MONOTONIC)".into(),
            }
        }

        /// Timestamp before the timed region: later instructions do not start before it.
        #[inline(always)]
        pub fn start(&self) -> u64 {
            match self.source {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: lfence and rdtsc have no preconditions (rdtsc checked via cpuinfo).
                Source::Tsc => unsafe {
                    use std::arch::x86_64::{_mm_lfence, _rdtsc};
                    _mm_lfence();
                    let t = _rdtsc();
                    _mm_lfence();
                    t
                },
                #[cfg(target_arch = "aarch64")]
                Source::Cntvct => cntvct(),
                Source::Monotonic => monotonic_ns(),
            }
        }

        /// The counter without fences: for measuring how it advances.
        #[inline(always)]
        pub fn raw(&self) -> u64 {
            match self.source {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: rdtsc has no preconditions (checked via cpuinfo).
                Source::Tsc => unsafe { std::arch::x86_64::_rdtsc() },
                #[allow(unreachable_patterns)]
                _ => self.start(),
            }
        }

        /// [`Clock::stop`] and the CPU the sample ended on (`rdtscp`'s `TSC_AUX`, which
        /// Linux sets to the CPU number; `sched_getcpu` elsewhere, outside the timestamp).
        #[inline(always)]
        pub fn stop_cpu(&self) -> (u64, u32) {
            match self.source {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as in `stop`.
                Source::Tsc => unsafe {
                    use std::arch::x86_64::{__rdtscp, _mm_lfence};
                    let mut aux = 0u32;
                    let t = __rdtscp(&mut aux);
                    _mm_lfence();
                    (t, aux & 0xfff)
                },
                #[allow(unreachable_patterns)]
                _ => {
                    let t = self.stop();
                    // SAFETY: sched_getcpu has no preconditions.
                    (t, unsafe { libc::sched_getcpu() }.max(0) as u32)
                }
            }
        }

        /// Timestamp after the timed region: waits for earlier instructions to finish.
        #[inline(always)]
        pub fn stop(&self) -> u64 {
            match self.source {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: rdtscp (checked via cpuinfo) and lfence have no preconditions.
                Source::Tsc => unsafe {
                    use std::arch::x86_64::{__rdtscp, _mm_lfence};
                    let mut aux = 0u32;
                    let t = __rdtscp(&mut aux);
                    _mm_lfence();
                    t
                },
                #[cfg(target_arch = "aarch64")]
                Source::Cntvct => cntvct(),
                Source::Monotonic => monotonic_ns(),
            }
        }
    }

    #[cfg(target_arch = "aarch64")]
    #[inline(always)]
    fn cntvct() -> u64 {
        let t: u64;
        // SAFETY: isb orders the read against earlier instructions; cntvct_el0 is readable
        // at EL0 on Linux.
        unsafe { std::arch::asm!("isb", "mrs {}, cntvct_el0", out(reg) t, options(nostack)) };
        t
    }

    #[inline(always)]
    fn monotonic_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into our local timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

fn storage_eim() -> String {
    let mut s = String::from("version: 1\nhooks:\n");
    for e in ["lookup", "empty"] {
        s += &format!("  - name: {e}\n    context:\n      size: 8\n      fields:\n        - {{ name: n, offset: 0, size: 8, access: read }}\n");
    }
    s += "  - name: put\n    context:\n      size: 16\n      fields:\n        - { name: key, offset: 0, size: 8, access: read }\n        - { name: value, offset: 8, size: 8, access: read }\nfunctions:\n";
    s += &rdx_xcall_plan::eim::reply_function(64);
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

fn ice_name(s: &str) -> ServiceName {
    s.try_into().expect("iceoryx2 service name")
}

fn ice_node() -> Node<ipc::Service> {
    set_log_level(LogLevel::Error);
    NodeBuilder::new()
        .signal_handling_mode(SignalHandlingMode::Disabled)
        .create::<ipc::Service>()
        .expect("iceoryx2 node")
}

/// Child role: the iceoryx2 server. Request `[op, key]` (op 0 empty, 1 lookup, 2 quit),
/// response: the value. Blocks on its listener between requests.
fn iceoryx2_main(name: &str) {
    let node = ice_node();
    let rr = node
        .service_builder(&ice_name(&format!("{name}/rr")))
        .request_response::<[u64; 2], u64>()
        .open_or_create()
        .expect("request-response service");
    let to_server = node
        .service_builder(&ice_name(&format!("{name}/to-server")))
        .event()
        .open_or_create()
        .expect("event service");
    let to_client = node
        .service_builder(&ice_name(&format!("{name}/to-client")))
        .event()
        .open_or_create()
        .expect("event service");
    let server = rr.server_builder().create().expect("server");
    let listener = to_server.listener_builder().create().expect("listener");
    let notifier = to_client.notifier_builder().create().expect("notifier");
    let table: HashMap<u64, u64> = (0..KEYS).map(|k| (k, k * 10)).collect();
    println!("ready");
    loop {
        listener.blocking_wait(|_| {}).expect("wait");
        while let Some(request) = server.receive().expect("receive") {
            let [op, key] = *request.payload();
            let v = match op {
                0 => 0,
                1 => table.get(&key).copied().unwrap_or(0),
                _ => return,
            };
            request.send_copy(v).expect("respond");
            drop(request);
            notifier.notify().expect("notify");
        }
    }
}

/// The caller side of the iceoryx2 baseline.
struct IceClient {
    _node: Node<ipc::Service>,
    client: iceoryx2::port::client::Client<ipc::Service, [u64; 2], (), u64, ()>,
    notifier: iceoryx2::port::notifier::Notifier<ipc::Service>,
    listener: iceoryx2::port::listener::Listener<ipc::Service>,
}

impl IceClient {
    fn open(name: &str) -> IceClient {
        let node = ice_node();
        let rr = node
            .service_builder(&ice_name(&format!("{name}/rr")))
            .request_response::<[u64; 2], u64>()
            .open_or_create()
            .expect("request-response service");
        let to_server = node
            .service_builder(&ice_name(&format!("{name}/to-server")))
            .event()
            .open_or_create()
            .expect("event service");
        let to_client = node
            .service_builder(&ice_name(&format!("{name}/to-client")))
            .event()
            .open_or_create()
            .expect("event service");
        IceClient {
            client: rr.client_builder().create().expect("client"),
            notifier: to_server.notifier_builder().create().expect("notifier"),
            listener: to_client.listener_builder().create().expect("listener"),
            _node: node,
        }
    }

    fn request(&self, op: u64, key: u64) -> u64 {
        let pending = self.client.send_copy([op, key]).expect("send request");
        self.notifier.notify().expect("notify");
        if op > 1 {
            return 0;
        }
        for _ in 0..10 {
            if let Some(r) = pending.receive().expect("receive") {
                return *r;
            }
            self.listener
                .timed_wait(|_| {}, Duration::from_secs(1))
                .expect("wait");
        }
        panic!("iceoryx2 server did not answer within 10 s");
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

/// `stress-ng --cpu <cores> --cpu-load <percent>` for as long as it lives.
struct Stress(Option<Child>);

impl Stress {
    fn start(percent: u32, cores: usize) -> Stress {
        if percent == 0 {
            return Stress(None);
        }
        let mut child = Command::new("stress-ng")
            .args(["--cpu", &cores.to_string()])
            .args(["--cpu-load", &percent.to_string()])
            // A bound in case this process dies without stopping it.
            .args(["--timeout", "300s", "--quiet"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting stress-ng (Debian package stress-ng, scripts/setup.sh): {e}")
            });
        std::thread::sleep(Duration::from_millis(500));
        if let Ok(Some(status)) = child.try_wait() {
            panic!("stress-ng exited at once: {status}");
        }
        Stress(Some(child))
    }
}

impl Drop for Stress {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            // SAFETY: signalling our own child; stress-ng stops its workers on SIGTERM.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Orders the calls of a batch: the next one starts after the previous one has finished
/// (`lfence` on x86_64, `isb` on aarch64), so a batch is a sum of latencies, not a pipelined
/// throughput.
#[inline(always)]
fn serialize() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: lfence has no preconditions.
    unsafe {
        std::arch::x86_64::_mm_lfence()
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: isb only waits for earlier instructions.
    unsafe {
        std::arch::asm!("isb", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// One row: nanoseconds per call (sorted), and the measuring thread's involuntary context
/// switches and CPU migrations while the row was taken.
struct Samples {
    ns: Vec<f64>,
    csw: u64,
    mig: u64,
    flt: u64,
}

/// Takes `n` samples of `op` (or as many as fit in `limit`), each timing `batch` calls in a
/// row with a serialising instruction between two calls: nanoseconds per call. A batch of
/// one is a single call's round trip, at the counter's resolution; a batch of 16 resolves
/// sixteen times finer, its percentiles being those of 16-call means.
fn sample(
    clock: &clock::Clock,
    n: usize,
    batch: u64,
    limit: Duration,
    mut op: impl FnMut(u64),
) -> Samples {
    // Written before the first sample (not zero: fresh zero pages would fault later), so
    // that the row's fault count is the operation's.
    let mut v = vec![f64::MAX; n];
    let before = sched_counters();
    let begin = Instant::now();
    let mut k = 0u64;
    let mut taken = n;
    for (i, slot) in v.iter_mut().enumerate() {
        let t0 = clock.start();
        op(k % KEYS);
        for _ in 1..batch {
            k += 1;
            serialize();
            op(k % KEYS);
        }
        let t1 = clock.stop();
        k += 1;
        *slot = t1.saturating_sub(t0) as f64 * clock.ns_per_tick / batch as f64;
        if i % 64 == 63 && begin.elapsed() > limit && i >= 100 {
            taken = i + 1;
            break;
        }
    }
    let after = sched_counters();
    v.truncate(taken);
    v.sort_unstable_by(f64::total_cmp);
    Samples {
        ns: v,
        csw: after.0 - before.0,
        mig: after.1 - before.1,
        flt: after.2 - before.2,
    }
}

fn pct(v: &[f64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn ns(ns: f64) -> String {
    if ns >= 10_000.0 {
        format!("{:.1} us", ns / 1000.0)
    } else if ns < 100.0 {
        format!("{ns:.1} ns")
    } else {
        format!("{ns:.0} ns")
    }
}

/// Raw percentiles, then the same minus `timer` (the level's timer p50 for that batch size).
fn row(s: &Samples, timer: f64) -> String {
    let raw = |p| pct(&s.ns, p);
    let net = |p| (pct(&s.ns, p) - timer).max(0.0);
    format!(
        "{:>9} {:>9} {:>9}   {:>9} {:>9} {:>9}  {:>6} {:>5} {:>4} {:>4}",
        ns(raw(0.5)),
        ns(raw(0.9)),
        ns(raw(0.99)),
        ns(net(0.5)),
        ns(net(0.9)),
        ns(net(0.99)),
        s.ns.len(),
        s.csw,
        s.mig,
        s.flt
    )
}

/// The counter's resolution: the median step by which it advances, read in a loop until it
/// changes (some virtual machines' TSC advances in steps of tens of ticks).
fn resolution(clock: &clock::Clock) -> f64 {
    let mut steps: Vec<u64> = (0..1001)
        .map(|_| {
            let mut a = clock.raw();
            loop {
                let b = clock.raw();
                if b != a {
                    return b.saturating_sub(a);
                }
                a = b;
            }
        })
        .collect();
    steps.sort_unstable();
    steps[steps.len() / 2] as f64 * clock.ns_per_tick
}

/// This thread's scheduler and fault counters: (involuntary context switches, migrations
/// between CPUs, page faults), from `/proc/thread-self/sched` (zeros where it is missing) and
/// `getrusage(RUSAGE_THREAD)`.
fn sched_counters() -> (u64, u64, u64) {
    // SAFETY: getrusage writes into our zeroed struct.
    let faults = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        (ru.ru_minflt + ru.ru_majflt) as u64
    };
    let s = std::fs::read_to_string("/proc/thread-self/sched").unwrap_or_default();
    let get = |name: &str| {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(':').next())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (
        get("nr_involuntary_switches"),
        get("se.nr_migrations"),
        faults,
    )
}

/// A row's samples in the order taken: start tick, nanoseconds per call, the CPU the sample
/// ended on.
struct Trace {
    t0: Vec<u64>,
    end: Vec<u64>,
    per_call: Vec<f64>,
    cpu: Vec<u32>,
    /// [`sched_counters`] over the samples alone.
    counters: (u64, u64, u64),
}

fn trace(clock: &clock::Clock, n: usize, batch: u64, mut op: impl FnMut(u64)) -> Trace {
    // Written (not zero: fresh zero pages would fault later) before the loop, so that no page
    // fault falls between two samples.
    let mut tr = Trace {
        t0: vec![u64::MAX; n],
        end: vec![u64::MAX; n],
        per_call: vec![f64::MAX; n],
        cpu: vec![u32::MAX; n],
        counters: (0, 0, 0),
    };
    let before = sched_counters();
    let mut k = 0u64;
    for i in 0..n {
        let t0 = clock.start();
        op(k % KEYS);
        for _ in 1..batch {
            k += 1;
            serialize();
            op(k % KEYS);
        }
        let (t1, cpu) = clock.stop_cpu();
        k += 1;
        tr.t0[i] = t0;
        tr.end[i] = t1;
        tr.per_call[i] = t1.saturating_sub(t0) as f64 * clock.ns_per_tick / batch as f64;
        tr.cpu[i] = cpu;
    }
    let after = sched_counters();
    tr.counters = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
    tr
}

/// Splits a trace by how many samples ago the thread last resumed — after a pause (more
/// than `gap` ticks between two samples or inside one: it was descheduled) or on another
/// CPU than the sample before (migrated): `(pauses, migrations, warm, cold)`, where `cold`
/// holds the first `cold_len` samples after each resumption and `warm` the others (sorted).
fn phases(tr: &Trace, gap: u64, cold_len: usize) -> (usize, usize, Vec<f64>, Vec<f64>) {
    let (mut pauses, mut migrations) = (0, 0);
    let (mut warm, mut cold) = (Vec::new(), Vec::new());
    let mut since = 0usize;
    for i in 0..tr.t0.len() {
        if i > 0 {
            let idle = tr.t0[i].saturating_sub(tr.end[i - 1]);
            let inside = tr.end[i - 1].saturating_sub(tr.t0[i - 1]);
            if idle > gap || inside > gap {
                pauses += 1;
                since = 0;
            } else if tr.cpu[i] != tr.cpu[i - 1] {
                migrations += 1;
                since = 0;
            }
        }
        if since < cold_len {
            cold.push(tr.per_call[i]);
        } else {
            warm.push(tr.per_call[i]);
        }
        since += 1;
    }
    warm.sort_unstable_by(f64::total_cmp);
    cold.sort_unstable_by(f64::total_cmp);
    (pauses, migrations, warm, cold)
}

/// One diagnosis row's operation.
type Op<'a> = Box<dyn FnMut(u64) + 'a>;

/// A fixed chain of 64 dependent multiply-adds: its time tracks the core's speed
/// (frequency, or a hyperthread sibling on the host), not its caches.
#[inline(never)]
fn compute_chain(k: u64) -> u64 {
    let mut x = k;
    for _ in 0..64 {
        x = x
            .wrapping_mul(std::hint::black_box(0x9e37_79b9_7f4a_7c15))
            .wrapping_add(1);
    }
    x
}

/// `XCALL_BENCH_DIAG=1`: why a load level is slower. Per level, in batches of 16 calls: the
/// timer, a compute-only chain (core speed), a lookup of one key (hot caches), and the
/// 1024-key lookup split by samples since the thread last resumed (after a pause or a
/// migration its caches were someone else's) — the first 128 samples (two passes over the
/// keys) against the rest.
fn diagnose(clock: &clock::Clock, cores: usize, samples: usize, lookup: Target) {
    let gap = (2_000.0 / clock.ns_per_tick) as u64;
    let t = |v: &[f64], p| {
        if v.is_empty() {
            "-".to_string()
        } else {
            ns(pct(v, p))
        }
    };
    let call_lookup = |key: Option<u64>| {
        move |k: u64| {
            let mut out = [0u8; 8];
            let r = call(lookup, &key.unwrap_or(k).to_le_bytes(), &mut out);
            assert!(r.is_ok(), "call failed: {r:?}");
            std::hint::black_box(out);
        }
    };
    println!(
        "diagnosis: ns per call, batches of 16 (timer included); cold = the first 128 samples \
         after the thread resumed (pause > 2 us or migration), warm = the rest; csw/mig/flt = \
         involuntary context switches / migrations / page faults of this thread during the row"
    );
    println!(
        "{:<5} {:<16} {:>8} {:>8}  {:>6} {:>5} {:>6} {:>5} {:>5}  {:>9} {:>9} {:>6}",
        "load",
        "row",
        "p50",
        "p90",
        "pauses",
        "migr",
        "csw",
        "mig",
        "flt",
        "warm p50",
        "cold p50",
        "cold%"
    );
    for load in [0u32, 50, 90, 100] {
        let _stress = Stress::start(load, cores);
        let rows: [(&str, Op); 4] = [
            (
                "timer",
                Box::new(|k| {
                    std::hint::black_box(k);
                }),
            ),
            (
                "compute chain",
                Box::new(|k| {
                    std::hint::black_box(compute_chain(k));
                }),
            ),
            ("lookup 1 key", Box::new(call_lookup(Some(5)))),
            ("lookup 1024 keys", Box::new(call_lookup(None))),
        ];
        for (name, op) in rows {
            let tr = trace(clock, samples, 16, op);
            let (pauses, migrations, warm, cold) = phases(&tr, gap, 128);
            let mut all = tr.per_call.clone();
            all.sort_unstable_by(f64::total_cmp);
            println!(
                "{:<5} {:<16} {:>8} {:>8}  {:>6} {:>5} {:>6} {:>5} {:>5}  {:>9} {:>9} {:>5.1}%",
                format!("{load}%"),
                name,
                t(&all, 0.5),
                t(&all, 0.9),
                pauses,
                migrations,
                tr.counters.0,
                tr.counters.1,
                tr.counters.2,
                t(&warm, 0.5),
                t(&cold, 0.5),
                100.0 * cold.len() as f64 / all.len() as f64
            );
        }
    }
}

fn main() {
    if let Ok(role) = std::env::var("XCALL_BENCH_ROLE") {
        // SAFETY: prctl with PR_SET_PDEATHSIG: a server never outlives the benchmark.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        let arg = std::env::var("XCALL_BENCH_ARG").unwrap();
        return match role.as_str() {
            "storage" => storage_main(&arg),
            "uds" => uds_main(&arg),
            "iceoryx2" => iceoryx2_main(&arg),
            other => panic!("unknown role {other}"),
        };
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let samples: usize = std::env::var("XCALL_BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let profile_secs: Option<u64> = std::env::var("XCALL_BENCH_PROFILE")
        .ok()
        .and_then(|s| s.parse().ok());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pid = std::process::id();
    let plan_path = format!("/dev/shm/rdx-xcall-bench-{pid}");
    let sock_path = format!("/tmp/rdx-xcall-bench-{pid}.sock");
    let ice_service = format!("rdx-xcall-bench-{pid}");
    let _ = std::fs::remove_file(&plan_path);
    let plan = Plan::create(&plan_path, PlanSpec::default()).expect("plan");

    let (mut storage, mut storage_out, address) = spawn("storage", &plan_path);
    let mut cf = create_codeflow(&address, AttachOptions::default()).expect("attach storage");
    let ext = |prog: &str| {
        let obj = rdx_bpf::loader::load(&rdx_testdata::object("xcall/storage")).unwrap();
        rdx_control::Extension::from_object(&obj, Some(prog)).unwrap()
    };
    cf.deploy("put", &ext("put"), None, None)
        .expect("deploy put");
    for e in ["lookup", "empty"] {
        rdx_xcall_control::deploy_export(&mut cf, e, &ext(e), None).expect("deploy export");
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
    let cleanup = |storage: &mut Child| {
        let _ = storage.kill();
        let _ = storage.wait();
        let _ = std::fs::remove_file(&plan_path);
        let _ = std::fs::remove_file(address.trim_start_matches("shm:"));
    };

    if let Some(secs) = profile_secs {
        let op = std::env::var("XCALL_BENCH_PROFILE_OP").unwrap_or_else(|_| "lookup".into());
        let target = if op == "empty" { empty } else { lookup };
        let begin = Instant::now();
        let mut calls = 0u64;
        while begin.elapsed() < Duration::from_secs(secs) {
            for k in 0..KEYS {
                let r = call(target, &k.to_le_bytes(), &mut out);
                assert!(r.is_ok(), "call failed: {r:?}");
            }
            calls += KEYS;
        }
        let per = begin.elapsed().as_nanos() as f64 / calls as f64;
        println!("profile: {calls} xcall {op} calls, {per:.1} ns each (loop, untimed)");
        cleanup(&mut storage);
        return;
    }

    if std::env::var("XCALL_BENCH_DIAG").is_ok() {
        diagnose(&clock::Clock::new(), cores, samples, lookup);
        cleanup(&mut storage);
        return;
    }

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

    let (mut ice_child, _ice_out, _) = spawn("iceoryx2", &ice_service);
    let ice = IceClient::open(&ice_service);
    assert_eq!(ice.request(1, 5), 50, "iceoryx2 server answers lookups");

    let clock = clock::Clock::new();
    println!(
        "xcall round trip vs iceoryx2 request-response vs Unix-domain socket, {cores} cores, \
         load = stress-ng --cpu {cores} --cpu-load <load>, up to {samples} samples per row"
    );
    println!(
        "timer: {}, resolution {:.1} ns",
        clock.describe(),
        resolution(&clock)
    );
    println!(
        "/16 rows: each sample times 16 calls in a row (a serialising lfence/isb between two), \
         per call; they resolve 16 times finer than the counter, their percentiles are those \
         of 16-call means"
    );
    println!(
        "net = raw minus the timer's p50 at that load and batch size (the \"timer\" rows: an empty timed region); \
         csw/mig/flt = involuntary context switches / CPU migrations / page faults of the measuring thread during the row"
    );
    println!(
        "{:<5} {:<15} {:>9} {:>9} {:>9}   {:>9} {:>9} {:>9}  {:>6} {:>5} {:>4} {:>4}",
        "load",
        "operation",
        "p50",
        "p90",
        "p99",
        "net p50",
        "net p90",
        "net p99",
        "n",
        "csw",
        "mig",
        "flt"
    );
    let xcall = |t: Target| {
        move |k: u64| {
            let mut out = [0u8; 8];
            let r = call(t, &k.to_le_bytes(), &mut out);
            assert!(r.is_ok(), "call failed: {r:?}");
            std::hint::black_box(out);
        }
    };
    let bench_start = Instant::now();
    for load in [0u32, 50, 90, 100] {
        let _stress = Stress::start(load, cores);
        let limit = Duration::from_secs(2);
        let timer = |batch| {
            sample(&clock, samples, batch, limit, |k| {
                std::hint::black_box(k);
            })
        };
        let (timer1, timer16) = (timer(1), timer(BATCH));
        let (t1, t16) = (pct(&timer1.ns, 0.5), pct(&timer16.ns, 0.5));
        let rows = [
            ("timer (empty)", timer1, t1),
            (
                "xcall empty",
                sample(&clock, samples, 1, limit, xcall(empty)),
                t1,
            ),
            (
                "xcall lookup",
                sample(&clock, samples, 1, limit, xcall(lookup)),
                t1,
            ),
            ("timer/16", timer16, t16),
            (
                "xcall empty/16",
                sample(&clock, samples, BATCH, limit, xcall(empty)),
                t16,
            ),
            (
                "xcall lookup/16",
                sample(&clock, samples, BATCH, limit, xcall(lookup)),
                t16,
            ),
            (
                "iceoryx2 empty",
                sample(&clock, samples, 1, limit, |k| {
                    std::hint::black_box(ice.request(0, k));
                }),
                t1,
            ),
            (
                "iceoryx2 lookup",
                sample(&clock, samples, 1, limit, |k| {
                    assert_eq!(ice.request(1, k), k * 10);
                }),
                t1,
            ),
            (
                "uds empty",
                sample(&clock, samples, 1, limit, |k| {
                    std::hint::black_box(uds(0, k));
                }),
                t1,
            ),
            (
                "uds lookup",
                sample(&clock, samples, 1, limit, |k| {
                    assert_eq!(uds(1, k), k * 10);
                }),
                t1,
            ),
        ];
        for (name, v, timer) in rows {
            println!("{:<5} {:<15} {}", format!("{load}%"), name, row(&v, timer));
        }
    }
    println!("total {:.1} s", bench_start.elapsed().as_secs_f64());
    ice.request(2, 0);
    let _ = ice_child.wait();
    drop(sock);
    let _ = uds_child.wait();
    cleanup(&mut storage);
    let _ = std::fs::remove_file(&sock_path);
}
