//! Test harness shared by the cross-process tests: a spawned `rdx-stdio-host` and the
//! control plane's handle on its region.
#![allow(dead_code)]

use rdx_region::layout::{offsets, ContextKind, SectionId};
use rdx_transport::context::read_context;
use rdx_transport::shm::ShmTransport;
use rdx_transport::Transport;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

pub struct Host {
    pub child: Child,
    pub stdin: ChildStdin,
    pub stdout: BufReader<ChildStdout>,
    pub path: String,
}

impl Host {
    pub fn start(extra: &[&str]) -> Host {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = format!(
            "/dev/shm/rdx-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_rdx-stdio-host"))
            .args(["--path", &path])
            .args(extra)
            .args(["h", "other"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn host");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), format!("region {path}"));
        Host {
            child,
            stdin,
            stdout,
            path,
        }
    }

    pub fn ask(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    pub fn run(&mut self, value: u64) -> (u64, u64) {
        let r = self.ask(&format!("run h {value}"));
        let w: Vec<&str> = r.split_whitespace().collect();
        assert_eq!(w[0], "ret", "{r}");
        (w[1].parse().unwrap(), w[3].parse().unwrap())
    }

    pub fn stats(&mut self) -> Vec<u64> {
        let r = self.ask("stats h");
        r.split_whitespace()
            .skip(2)
            .step_by(2)
            .map(|v| v.parse().unwrap())
            .collect()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The control plane's view of a node: the transport plus what it read from the header.
pub struct Node {
    pub t: ShmTransport,
    pub hook: u64,
    pub next_code: u64,
}

impl Node {
    pub fn attach(host: &Host) -> Node {
        let t = ShmTransport::open(&host.path).expect("open region");
        let ctx = read_context(&t, t.info()).unwrap();
        let h = ctx
            .iter()
            .find(|s| s.kind == ContextKind::Hook && s.name == "h")
            .expect("hook h exported");
        assert_eq!(h.size, 16);
        let next_code = t.info().section(SectionId::Code).offset;
        Node {
            hook: h.addr,
            t,
            next_code,
        }
    }

    pub fn symbol(&self, name: &str) -> u64 {
        read_context(&self.t, self.t.info())
            .unwrap()
            .iter()
            .find(|s| s.symbol() == name)
            .unwrap_or_else(|| panic!("{name} not exported"))
            .addr
    }

    /// Writes code into a fresh part of the arena; returns its entry offset.
    pub fn place(&mut self, code: &[u8]) -> u32 {
        let at = self.next_code;
        self.t.write(at, code).unwrap();
        self.next_code += (code.len() as u64 + 15) & !15;
        at as u32
    }

    /// Publishes with one CAS; returns the previous word.
    pub fn flip(&self, expected: u64, new: u64) -> u64 {
        self.t.fence().unwrap();
        let prev = self
            .t
            .compare_and_swap(self.hook + offsets::HOOK_ACTIVE, expected, new)
            .unwrap();
        assert_eq!(prev, expected, "slot changed under us");
        prev
    }
}
