//! A request chain of `rdx-test-host fleet --forward` processes (A -> B -> C -> D, each host's stdout
//! piped into the next one's stdin) and a traffic generator that keeps requests flowing
//! through it. Shared by the chain consistency test and the broadcast benchmark.

#![allow(dead_code)]

use rdx_test_support::ShmPath;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Id of the marker request that ends a traffic run.
const END: u64 = u64::MAX;

pub struct Chain {
    hosts: Vec<Child>,
    // After `hosts`: a region file is removed once its host is gone.
    paths: Vec<ShmPath>,
    entry: Option<ChildStdin>,
    exit: Option<BufReader<ChildStdout>>,
    /// What each hop wrote to stderr after `ready` (a failing host says why there), read
    /// to the end on a thread of its own so the host never writes into a closed pipe.
    stderr: Vec<Arc<Mutex<String>>>,
}

impl Chain {
    /// Starts `hops` hosts, each declaring `on_request`, with the given hold timeout.
    pub fn start(tag: &str, hops: usize, hold_timeout_ms: u64) -> Chain {
        let mut hosts: Vec<Child> = Vec::new();
        let mut paths = Vec::new();
        let mut upstream: Option<ChildStdout> = None;
        let mut stderr = Vec::new();
        for i in 0..hops {
            let path = ShmPath::new(&format!("fleet-chain-{tag}-{i}"));
            let stdin = match upstream.take() {
                Some(out) => Stdio::from(out),
                None => Stdio::piped(),
            };
            let mut child = Command::new(rdx_test_support::test_host())
                .args([
                    "fleet",
                    "--forward",
                    "--path",
                    path.as_str(),
                    "--hold-timeout-ms",
                ])
                .arg(hold_timeout_ms.to_string())
                .arg("on_request")
                .stdin(stdin)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start rdx-test-host");
            let mut err = BufReader::new(child.stderr.take().unwrap());
            let mut l = String::new();
            err.read_line(&mut l).unwrap();
            assert!(l.starts_with("ready "), "hop {i} said {l:?}");
            let said = Arc::new(Mutex::new(String::new()));
            let to = said.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = err.read(&mut buf) {
                    to.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
            stderr.push(said);
            upstream = child.stdout.take();
            hosts.push(child);
            paths.push(path);
        }
        let entry = hosts[0].stdin.take();
        Chain {
            hosts,
            paths,
            entry,
            exit: upstream.map(BufReader::new),
            stderr,
        }
    }

    /// What the hops said on stderr, for a failure message.
    fn stderr(&self) -> String {
        let said: Vec<String> = self
            .stderr
            .iter()
            .enumerate()
            .map(|(i, s)| format!("hop {i}: {:?}", s.lock().unwrap()))
            .collect();
        said.join("; ")
    }

    pub fn address(&self, hop: usize) -> String {
        self.paths[hop].address()
    }

    /// Starts sending requests (at most `window` in flight) until [`Traffic::stop`].
    pub fn traffic(&mut self, window: u64) -> Traffic<'_> {
        let shared = Arc::new(Shared {
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            results: Mutex::new(Vec::new()),
        });
        let mut entry = self.entry.take().expect("one traffic run at a time");
        let mut exit = self.exit.take().expect("one traffic run at a time");
        let s = shared.clone();
        // A chain that closed its input or output (a hop exited) is reported by `wait_for`
        // and `stop` on the test's thread, with what the hops said; these threads just end.
        let writer = std::thread::spawn(move || {
            let mut out = std::io::BufWriter::new(&mut entry);
            let sent_all = (|| {
                while !s.stop.load(Ordering::Relaxed) && !s.closed.load(Ordering::Relaxed) {
                    let sent = s.sent.load(Ordering::Relaxed);
                    if sent - s.received.load(Ordering::Acquire) >= window {
                        out.flush()?;
                        std::thread::yield_now();
                        continue;
                    }
                    writeln!(out, "req {sent} 0 0")?;
                    s.sent.store(sent + 1, Ordering::Release);
                }
                // A marker after the last request: the reader stops when it comes out.
                writeln!(out, "req {END} 0 0")?;
                out.flush()
            })();
            if sent_all.is_err() {
                s.closed.store(true, Ordering::Release);
            }
            drop(out);
            entry
        });
        let s = shared.clone();
        let reader = std::thread::spawn(move || {
            let mut line = String::new();
            loop {
                line.clear();
                if exit.read_line(&mut line).unwrap() == 0 {
                    s.closed.store(true, Ordering::Release);
                    break;
                }
                let w: Vec<&str> = line.split_whitespace().collect();
                assert_eq!(w.len(), 4, "chain said {line:?}");
                if w[1] == END.to_string() {
                    break;
                }
                let r = Response {
                    id: w[1].parse().unwrap(),
                    stamps: w[2].parse().unwrap(),
                    waited: w[3].parse().unwrap(),
                    at: Instant::now(),
                };
                s.results.lock().unwrap().push(r);
                s.received.fetch_add(1, Ordering::Release);
            }
            exit
        });
        Traffic {
            shared,
            writer: Some(writer),
            reader: Some(reader),
            chain: self,
        }
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        // End of input travels down the chain: every hop exits in turn.
        drop(self.entry.take());
        drop(self.exit.take());
        for h in &mut self.hosts {
            let _ = h.kill();
            let _ = h.wait();
        }
    }
}

struct Shared {
    sent: AtomicU64,
    received: AtomicU64,
    stop: AtomicBool,
    /// The chain closed its input or output before the end marker came out.
    closed: AtomicBool,
    results: Mutex<Vec<Response>>,
}

#[derive(Clone, Copy, Debug)]
pub struct Response {
    pub id: u64,
    /// One digit per hop: the version each hop's extension stamped.
    pub stamps: u64,
    /// Hops whose slot was held when the request arrived.
    pub waited: u64,
    pub at: Instant,
}

impl Response {
    pub fn digits(&self) -> Vec<u64> {
        let mut d = Vec::new();
        let mut v = self.stamps;
        while v > 0 {
            d.push(v % 10);
            v /= 10;
        }
        d.reverse();
        d
    }

    /// Whether the request met more than one version along the chain.
    pub fn mixed(&self) -> bool {
        let d = self.digits();
        d.windows(2).any(|w| w[0] != w[1])
    }
}

pub struct Traffic<'a> {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<ChildStdin>>,
    reader: Option<JoinHandle<BufReader<ChildStdout>>>,
    chain: &'a mut Chain,
}

impl Traffic<'_> {
    pub fn received(&self) -> u64 {
        self.shared.received.load(Ordering::Acquire)
    }

    /// Panics if a hop exited (the chain closed its input or output), with what the hops
    /// said.
    fn check_open(&self) {
        if self.shared.closed.load(Ordering::Acquire) {
            // The hops' last words reach their stderr threads right after they exit.
            std::thread::sleep(Duration::from_millis(100));
            panic!(
                "the chain closed after {} responses; {}",
                self.received(),
                self.chain.stderr()
            );
        }
    }

    /// Waits until `n` more responses arrived (panics after 20 s: the chain is stuck).
    pub fn wait_for(&self, n: u64) {
        let target = self.received() + n;
        let start = Instant::now();
        while self.received() < target {
            self.check_open();
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "chain stuck at {} responses; {}",
                self.received(),
                self.chain.stderr()
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Stops sending, waits for every request in flight, returns every response in
    /// arrival order.
    pub fn stop(mut self) -> Vec<Response> {
        self.shared.stop.store(true, Ordering::Release);
        let entry = self.writer.take().unwrap().join().unwrap();
        let exit = self.reader.take().unwrap().join().unwrap();
        self.check_open();
        self.chain.entry = Some(entry);
        self.chain.exit = Some(exit);
        let mut r = std::mem::take(&mut *self.shared.results.lock().unwrap());
        r.sort_by_key(|x| x.at);
        r
    }
}

impl Drop for Traffic<'_> {
    /// A test that panicked with traffic running: stop sending (the chain is torn down
    /// next, which ends the reader).
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
    }
}

/// Counts of one traffic run.
#[derive(Debug, Default)]
pub struct Tally {
    pub requests: usize,
    pub mixed: usize,
    /// Requests that arrived at a held slot on at least one hop.
    pub waited: usize,
    /// Requests per full-chain stamp value, e.g. `1111` and `2222`.
    pub by_stamps: std::collections::BTreeMap<u64, usize>,
}

pub fn tally(responses: &[Response], hops: usize) -> Tally {
    let mut t = Tally {
        requests: responses.len(),
        ..Tally::default()
    };
    for r in responses {
        assert_eq!(
            r.digits().len(),
            hops,
            "request {} stamped {}",
            r.id,
            r.stamps
        );
        t.mixed += r.mixed() as usize;
        t.waited += (r.waited > 0) as usize;
        *t.by_stamps.entry(r.stamps).or_default() += 1;
    }
    t
}
