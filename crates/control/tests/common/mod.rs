//! Real host processes for the end-to-end tests: `rdx-test-host control`, driven over
//! its stdin/stdout.
#![allow(dead_code)]

use std::path::PathBuf;

use rdx_test_support::{HostProcess, ShmPath};

/// `rdx-test-host control` with its region, removed (process and region file) on drop.
pub struct Host {
    process: HostProcess,
    pub path: PathBuf,
    pub pid: u32,
}

impl Host {
    /// Starts the host with `extra` arguments (`--serve`, `--code-size N`).
    pub fn start(tag: &str, extra: &[&str]) -> Host {
        let process =
            HostProcess::start("control", ShmPath::new(&format!("ctl-test-{tag}")), extra);
        // "ready PATH PID"
        let pid = process.ready_words()[1].parse().expect("the host's pid");
        Host {
            path: process.path().to_path_buf(),
            pid,
            process,
        }
    }

    pub fn address(&self) -> String {
        self.process.address()
    }

    pub fn cmd(&mut self, c: &str) -> String {
        self.process.cmd(c)
    }

    /// `(r0, out)` of one request with `value`.
    pub fn request(&mut self, value: u64) -> (u64, u64) {
        self.process.run(&value.to_string())
    }

    /// Requests the `--serve` worker completed so far.
    pub fn served(&mut self) -> u64 {
        let l = self.cmd("served");
        l.strip_prefix("served ").unwrap().parse().unwrap()
    }

    /// SIGKILL: the region file stays until the host is dropped.
    pub fn kill(&mut self) {
        self.process.kill();
    }
}

pub fn extension(name: &str) -> rdx_control::Extension {
    let obj = rdx_bpf::loader::load(&rdx_testdata::object(&format!("control/{name}")))
        .expect("load object");
    rdx_control::Extension::from_object(&obj, None).expect("one program")
}

pub fn state_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdx-ctl-state-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}
