//! A real storage sandbox in a child process (this test binary re-executed with
//! `XCALL_CHILD_PLAN` set), and the EIM specs of the storage and cache sandboxes.
#![allow(dead_code)]

use rdx_xcall::service::Service;
use rdx_xcall_plan::plan::{Plan, PlanSpec};
use rdx_xcall_plan::Target;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// Exports of the storage sandbox, in export-index order.
pub const EXPORTS: &[&str] = &["lookup", "empty", "spin", "slow", "serial"];
/// Of which serialised (one caller at a time).
pub const SERIALIZED: &[&str] = &["serial"];

pub fn storage_eim() -> String {
    let mut s = String::from("version: 1\nhooks:\n");
    for e in EXPORTS {
        s += &format!(
            "  - name: {e}\n    context:\n      size: 8\n      fields:\n        - {{ name: n, offset: 0, size: 8, access: read }}\n    return: {{ range: [0, 1000] }}\n"
        );
    }
    s += "  - name: put\n    context:\n      size: 16\n      fields:\n        - { name: key, offset: 0, size: 8, access: read }\n        - { name: value, offset: 8, size: 8, access: read }\n";
    s += "functions:\n";
    s += &rdx_xcall_plan::eim::reply_function(64);
    s += "classes:\n";
    for (e, helpers, limit) in [
        ("lookup", "[map_lookup_elem]", "\"< 10000\""),
        ("empty", "[]", "\"< 100\""),
        ("spin", "[]", "\"< 100000\""),
        ("slow", "[ktime_get_ns]", "\"< 1000000000\""),
        ("serial", "[ktime_get_ns]", "\"< 1000000000\""),
    ] {
        s += &format!(
            "  - name: {e}\n    hook: {e}\n    context: {{ read: [n] }}\n    functions: [xcall_reply]\n    helpers: {helpers}\n    instructions: {limit}\n    xstate_bytes: 1048576\n"
        );
    }
    s += "  - name: put\n    hook: put\n    context: { read: [key, value] }\n    helpers: [map_update_elem]\n    instructions: \"< 1000\"\n    xstate_bytes: 1048576\n";
    s
}

pub fn cache_eim(storage_slot: u16) -> String {
    let mut s = String::from(
        "version: 1\nhooks:\n  - name: on_get\n    context:\n      size: 24\n      fields:\n        - { name: key, offset: 0, size: 8, access: read }\n        - { name: value, offset: 8, size: 8, access: read_write }\n        - { name: source, offset: 16, size: 8, access: read_write }\nfunctions:\n",
    );
    s += &rdx_xcall_plan::eim::call_function(
        "call_storage_lookup",
        1100,
        Target::new(storage_slot, 0),
        8,
        8,
    );
    s += "classes:\n  - name: cache\n    hook: on_get\n    context: { read: [key, value, source], write: [value, source] }\n    functions: [call_storage_lookup]\n    helpers: [map_lookup_elem, map_update_elem]\n    instructions: \"< 10000\"\n    xstate_bytes: 1048576\n";
    s
}

pub fn plan_path(tag: &str) -> PathBuf {
    PathBuf::from(format!(
        "/dev/shm/rdx-xcall-test-{tag}-{}",
        std::process::id()
    ))
}

/// The body of the child process: a storage sandbox at `slot`, driven over stdin.
/// Commands: `put <k> <v>` (runs the storage host's own `put` hook), `quit`.
pub fn child_main() {
    let (Ok(plan), Ok(slot)) = (
        std::env::var("XCALL_CHILD_PLAN"),
        std::env::var("XCALL_CHILD_SLOT"),
    ) else {
        return;
    };
    let plan = Plan::open(&plan).expect("plan");
    let mut b = Service::builder(&plan, "storage").slot(slot.parse().unwrap());
    for e in EXPORTS {
        b = if SERIALIZED.contains(e) {
            b.export_serialized(e, 8)
        } else {
            b.export(e, 8)
        };
    }
    let svc = b
        .runtime(
            rdx_runtime::Runtime::builder()
                .eim_spec(storage_eim())
                .hook("put", rdx_runtime::HookSpec::new(16)),
        )
        .build()
        .expect("storage sandbox");
    let put = svc.runtime().hook("put").unwrap();
    println!("ready {}", svc.address());
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["put", k, v] => {
                let mut ctx = [k.parse::<u64>().unwrap(), v.parse::<u64>().unwrap()];
                let r = put.run(&mut ctx);
                println!("ok {r}");
            }
            ["quit"] => break,
            _ => println!("error {line:?}"),
        }
    }
    std::process::exit(0);
}

pub struct Storage {
    pub child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub address: String,
    pub plan: Plan,
    pub slot: u16,
}

impl Storage {
    pub fn start(tag: &str, slot: u16) -> Storage {
        let path = plan_path(tag);
        let _ = std::fs::remove_file(&path);
        let plan = Plan::create(&path, PlanSpec::default()).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env("XCALL_CHILD_PLAN", &path)
            .env("XCALL_CHILD_SLOT", slot.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let address = loop {
            let mut line = String::new();
            assert!(stdout.read_line(&mut line).unwrap() > 0, "child exited");
            // The harness prints "test child ... " before the child's own output.
            if let Some((_, a)) = line.trim().split_once("ready ") {
                break a.to_string();
            }
        };
        Storage {
            child,
            stdin,
            stdout,
            address,
            plan,
            slot,
        }
    }

    pub fn cmd(&mut self, c: &str) -> String {
        writeln!(self.stdin, "{c}").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.plan.path());
        let _ = std::fs::remove_file(self.address.trim_start_matches("shm:"));
    }
}

pub fn extension(object: &str, prog: &str) -> rdx_control::Extension {
    let obj = rdx_bpf::loader::load(&rdx_testdata::object(object)).unwrap();
    rdx_control::Extension::from_object(&obj, Some(prog)).unwrap()
}
