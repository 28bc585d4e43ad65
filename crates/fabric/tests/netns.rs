//! Multi-host: a control plane in one network namespace drives three data planes in three
//! others over the fabric (veth pairs, addresses in 10.231.0.0/16 that exist only inside
//! the namespaces). Deploys, map operations and counters across them; a wrong token; a
//! killed node that must not disturb the others.
//!
//! Needs root and `ip netns`; otherwise prints why and skips.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const NODES: usize = 3;
/// `sockets` needs no rdx thread on the nodes but costs milliseconds per operation here (see
/// docs/fabric.md); `tcp;ofi_rxm` with its progress thread keeps the test short.
const PROVIDER: &str = "tcp;ofi_rxm";

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The namespaces of one test run, deleted on drop.
struct Namespaces {
    names: Vec<String>,
}

impl Namespaces {
    fn cp(&self) -> &str {
        &self.names[0]
    }
    fn node(&self, i: usize) -> &str {
        &self.names[i + 1]
    }

    /// `cp` with a veth to each node; node i is 10.231.i.2, its peer in `cp` 10.231.i.1.
    fn create() -> Result<Self, String> {
        let tag = std::process::id() % 100_000;
        let mut ns = Namespaces { names: Vec::new() };
        for suffix in std::iter::once("cp".to_string()).chain((1..=NODES).map(|i| format!("n{i}")))
        {
            let name = format!("rdxf{tag}-{suffix}");
            ip(&["netns", "add", &name])?;
            ns.names.push(name.clone());
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
        }
        for i in 1..=NODES {
            let (c, n) = (format!("rxc{i}"), format!("rxn{i}"));
            let (cp, node) = (ns.cp().to_string(), ns.node(i - 1).to_string());
            ip(&[
                "link", "add", &c, "netns", &cp, "type", "veth", "peer", "name", &n, "netns", &node,
            ])?;
            ip(&[
                "-n",
                &cp,
                "addr",
                "add",
                &format!("10.231.{i}.1/24"),
                "dev",
                &c,
            ])?;
            ip(&[
                "-n",
                &node,
                "addr",
                "add",
                &format!("10.231.{i}.2/24"),
                "dev",
                &n,
            ])?;
            ip(&["-n", &cp, "link", "set", &c, "up"])?;
            ip(&["-n", &node, "link", "set", &n, "up"])?;
            // Replies to whichever source address the control plane's endpoint picked.
            ip(&[
                "-n",
                &node,
                "route",
                "add",
                "10.231.0.0/16",
                "via",
                &format!("10.231.{i}.1"),
            ])?;
        }
        Ok(ns)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

fn example_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let p = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        p.exists(),
        "{} not built (cargo test builds examples)",
        p.display()
    );
    p
}

/// A process driven by lines on stdin/stdout, with a timeout on every reply.
struct Proc {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    what: String,
}

impl Proc {
    fn start(ns: &str, bin: &str, args: &[String], what: &str) -> Proc {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(example_bin(bin))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start process in namespace");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in stdout.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Proc {
            child,
            stdin,
            lines,
            what: what.to_string(),
        }
    }

    fn line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{}: no reply ({e})", self.what))
    }

    fn cmd(&mut self, c: &str) -> String {
        writeln!(self.stdin, "{c}").unwrap();
        self.stdin.flush().unwrap();
        let l = self.line();
        eprintln!("{}: {c} -> {l}", self.what);
        l
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
    }
}

#[test]
fn control_plane_drives_three_nodes_across_namespaces() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: network namespaces need root");
        return;
    }
    let ns = match Namespaces::create() {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("SKIPPED: cannot set up network namespaces: {e}");
            return;
        }
    };
    let started = Instant::now();
    let dir = std::env::temp_dir().join(format!("rdx-fabric-netns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut nodes = Vec::new();
    let mut tokens = Vec::new();
    for i in 1..=NODES {
        let token = rdx_fabric::Token::generate().unwrap();
        let token_file = dir.join(format!("token-{i}"));
        std::fs::write(&token_file, token.to_hex()).unwrap();
        let region = format!("/dev/shm/rdx-fabric-netns-{}-{i}", std::process::id());
        let args = [
            "--path".to_string(),
            region,
            "--bind".into(),
            format!("10.231.{i}.2"),
            "--token-file".into(),
            token_file.display().to_string(),
            "--provider".into(),
            PROVIDER.into(),
        ];
        let node = Proc::start(ns.node(i - 1), "fabric_node", &args, &format!("node{i}"));
        let ready = node.line();
        let words: Vec<&str> = ready.split_whitespace().collect();
        assert_eq!(words.first(), Some(&"ready"), "node{i} said {ready:?}");
        assert_eq!(words[2], PROVIDER);
        tokens.push((words[1].to_string(), token));
        nodes.push(node);
    }
    let mut cp = Proc::start(ns.cp(), "fabric_control", &[], "control");
    assert_eq!(cp.line(), "ready");

    // A wrong token gets nothing, then the right ones connect.
    let wrong = cp.cmd(&format!(
        "connect n2 {} {}",
        tokens[1].0,
        tokens[0].1.to_hex()
    ));
    assert!(
        wrong.starts_with("err") && wrong.contains("refused the token"),
        "{wrong}"
    );
    for (i, (addr, token)) in tokens.iter().enumerate() {
        assert_eq!(
            cp.cmd(&format!("connect n{} {addr} {}", i + 1, token.to_hex())),
            format!("ok {PROVIDER}")
        );
    }

    // Broadcast a deploy; every host runs it.
    for i in 1..=NODES {
        assert_eq!(cp.cmd(&format!("deploy n{i} plus_one")), "ok 1");
    }
    for (i, node) in nodes.iter_mut().enumerate() {
        for r in 0..=i {
            assert_eq!(
                node.cmd(&format!("run {}", 10 + r)),
                format!("ret 1 out {}", 11 + r)
            );
        }
    }
    // Counters and maps read remotely, per node.
    for i in 1..=NODES {
        assert_eq!(cp.cmd(&format!("runs n{i}")), format!("ok {i}"));
        assert_eq!(cp.cmd(&format!("hits n{i}")), format!("ok {i}"));
        assert_eq!(cp.cmd(&format!("seen n{i} 10")), "ok 1");
        let last = 10 + i;
        assert_eq!(cp.cmd(&format!("seen n{i} {last}")), "ok none");
    }
    assert_eq!(cp.cmd("set-hits n1 100"), "ok");
    nodes[0].cmd("run 1");
    assert_eq!(cp.cmd("hits n1"), "ok 101");

    // Kill node 2: a clear error for it, nothing changes for the others.
    nodes[1].kill();
    let t = Instant::now();
    let dead = cp.cmd("hits n2");
    assert!(
        dead.starts_with("err") && dead.contains(&format!("fabric://{}", tokens[1].0)),
        "{dead}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "error took {:?}",
        t.elapsed()
    );
    assert!(cp.cmd("deploy n2 times_two").starts_with("err"));
    assert_eq!(cp.cmd("hits n1"), "ok 101");
    assert_eq!(cp.cmd("deploy n3 times_two"), "ok 2");
    assert_eq!(nodes[2].cmd("run 5"), "ret 2 out 10");
    assert_eq!(nodes[0].cmd("run 5"), "ret 1 out 6");
    assert_eq!(cp.cmd("runs n3"), "ok 4");

    drop(cp);
    drop(nodes);
    for i in 1..=NODES {
        let _ = std::fs::remove_file(format!(
            "/dev/shm/rdx-fabric-netns-{}-{i}",
            std::process::id()
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("multi-host run took {:?}", started.elapsed());
}
