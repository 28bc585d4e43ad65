//! Real host processes for the end-to-end tests: `rdx-test-host control`, driven over
//! its stdin/stdout.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

pub struct Host {
    pub child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub path: PathBuf,
    pub pid: u32,
}

impl Host {
    pub fn start(tag: &str, extra: &[&str]) -> Host {
        let path = PathBuf::from(format!(
            "/dev/shm/rdx-ctl-test-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let mut child = Command::new(rdx_test_support::test_host())
            .arg("control")
            .arg("--path")
            .arg(&path)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start rdx-test-host control");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(line.starts_with("ready "), "host said {line:?}");
        let pid = child.id();
        Host {
            child,
            stdin,
            stdout,
            path,
            pid,
        }
    }

    pub fn address(&self) -> String {
        format!("shm:{}", self.path.display())
    }

    pub fn cmd(&mut self, c: &str) -> String {
        writeln!(self.stdin, "{c}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    /// `(r0, out)` of one request with `value`.
    pub fn request(&mut self, value: u64) -> (u64, u64) {
        let l = self.cmd(&format!("run {value}"));
        let w: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(w.first(), Some(&"ret"), "host said {l:?}");
        (w[1].parse().unwrap(), w[3].parse().unwrap())
    }

    pub fn served(&mut self) -> u64 {
        let l = self.cmd("served");
        l.strip_prefix("served ").unwrap().parse().unwrap()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
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
