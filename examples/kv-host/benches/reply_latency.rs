//! Round-trip time of one `GET` to kv-host, against the same exchange where the server writes
//! each reply as two sends (the reply, then its newline: what a `writeln!` straight into the
//! socket does, and what kv-host did before it buffered its replies). Both are measured in
//! this one run, on loopback; `cargo bench -p rdx-kv-host --bench reply_latency` prints a
//! table for docs/results/kv-host.md.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Requests per measurement: each round trip of the two-send server takes ~40 ms.
const REQUESTS: usize = 50;

/// The two-send reply path, on the kv protocol's `GET` (every key holds `hello`).
fn two_send_server() -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let stream = stream.unwrap();
            std::thread::spawn(move || {
                let mut out = stream.try_clone().unwrap();
                for line in BufReader::new(stream).lines() {
                    let reply = match line.unwrap().split_whitespace().next() {
                        Some("GET") => "VALUE hello".to_string(),
                        _ => "OK".to_string(),
                    };
                    // Two writes: `reply`, then "\n".
                    if writeln!(out, "{reply}").is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

struct KvHost {
    child: Child,
    region: String,
}

impl Drop for KvHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.region);
    }
}

fn kv_host() -> (KvHost, u16) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kv-host"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut word = |prefix: &str| {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        line.trim().strip_prefix(prefix).unwrap().to_string()
    };
    let region = word("region ");
    let port = word("listening ").parse().unwrap();
    (KvHost { child, region }, port)
}

/// Sorted round-trip times of `REQUESTS` `GET a` on one connection (after one `SET`).
fn round_trips(port: u16) -> Vec<Duration> {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut out = stream.try_clone().unwrap();
    let mut inp = BufReader::new(stream);
    let mut line = String::new();
    let mut ask = |cmd: &str| {
        let start = Instant::now();
        out.write_all(cmd.as_bytes()).unwrap();
        line.clear();
        inp.read_line(&mut line).unwrap();
        start.elapsed()
    };
    ask("SET a hello\n");
    let mut times: Vec<Duration> = (0..REQUESTS).map(|_| ask("GET a\n")).collect();
    times.sort();
    times
}

fn row(what: &str, times: &[Duration]) {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    println!(
        "| {what} | {:.0} | {:.0} | {:.0} |",
        us(times[times.len() / 2]),
        us(mean),
        us(times[times.len() * 99 / 100])
    );
}

fn main() {
    // `cargo bench` passes `--bench`; under `cargo test --benches` a smoke run is enough.
    if !std::env::args().any(|a| a == "--bench") {
        let (_host, port) = kv_host();
        assert_eq!(round_trips(port).len(), REQUESTS);
        return;
    }
    let before = round_trips(two_send_server());
    let (_host, port) = kv_host();
    let after = round_trips(port);
    println!("{REQUESTS} sequential `GET` round trips on one loopback connection:\n");
    println!("| server | median µs | mean µs | p99 µs |");
    println!("| --- | --- | --- | --- |");
    row("each reply as two sends (before)", &before);
    row("kv-host: one send per reply, TCP_NODELAY", &after);
}
