//! The `rdx` command line over the fabric across network namespaces: the control plane (every
//! `rdx` process) runs in one namespace, three data planes in three others, joined by veth
//! pairs with addresses in 10.232.0.0/16 that exist only inside them.
//!
//! Each data plane is this test binary re-run in its namespace as [`fabric_node_process`]: a
//! host linking only `rdx-runtime` and `rdx-fabric`, which registers its region and opts into
//! the fabric through the environment (`RDX_FABRIC_LISTEN`, `rdx_fabric::serve_from_env`).
//! The control plane registers the nodes as `fabric://IP:PORT?token-file=...`, deploys,
//! reads and writes maps, shows nodes and runs a broadcast (`rdx-fleet`) across them; a wrong
//! token is refused; a killed node gives a clear error naming it while the others keep
//! working, and a broadcast that includes it changes nothing anywhere.
//!
//! Needs root and `ip netns`; otherwise prints why and skips.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

const NODES: usize = 3;
/// `tcp;ofi_rxm` with the node's progress-only thread: milliseconds faster per operation
/// than `sockets` here (docs/fabric.md), which keeps the test short.
const PROVIDER: &str = "tcp;ofi_rxm";
/// Set in a node's environment: the region file it creates.
const NODE_REGION_ENV: &str = "RDX_TEST_FABRIC_NODE_REGION";

const EIM: &str = "\
version: 1
hooks:
  - name: on_request
    context:
      size: 16
      fields:
        - {name: value, offset: 0, size: 8, access: read}
        - {name: out, offset: 8, size: 8, access: read_write}
classes:
  - name: default
    hook: on_request
    context: {read: [value, out], write: [out]}
    helpers: [map_lookup_elem, map_update_elem, map_delete_elem, ringbuf_output]
    instructions: 100000
    xstate_bytes: 1048576
";

#[repr(C)]
struct Ctx {
    value: u64,
    out: u64,
}

/// The data plane, when the multi-host test starts this binary in a node's namespace.
/// stdout: `ready BOOTSTRAP PROVIDER`; stdin: `run VALUE` -> `ret R0 out OUT`, `quit`.
#[test]
#[ignore = "a data-plane process of control_plane_cli_drives_three_nodes_over_the_fabric"]
fn fabric_node_process() {
    let region = std::env::var(NODE_REGION_ENV).expect("started by the multi-host test");
    let rt = rdx_runtime::Runtime::builder()
        .path(&region)
        .eim_spec(EIM)
        .code_size(1 << 20)
        .scratch_size(1 << 20)
        .thread_slots(4)
        .hook(
            "on_request",
            rdx_runtime::HookSpec::for_context::<Ctx>().default_return(0),
        )
        .build()
        .expect("region");
    rt.register().expect("register");
    let server = rdx_fabric::serve_from_env(rt.path())
        .expect("serve")
        .expect("RDX_FABRIC_LISTEN is set");
    let hook = rt.hook("on_request").expect("hook");
    let mut out = std::io::stdout().lock();
    // A line of its own: libtest has printed "test fabric_node_process ... " without one.
    writeln!(
        out,
        "\nready {} {}",
        server.bootstrap_addr(),
        server.provider()
    )
    .unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["run", value] => {
                let mut ctx = Ctx {
                    value: value.parse().unwrap(),
                    out: 0,
                };
                let r0 = hook.run(&mut ctx);
                writeln!(out, "ret {r0} out {}", ctx.out).unwrap();
            }
            ["quit"] => break,
            _ => writeln!(out, "error {line:?}").unwrap(),
        }
        out.flush().unwrap();
    }
    drop(server);
    rt.teardown(Duration::from_millis(100)).unwrap();
    rt.unlink().unwrap();
}

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

/// One namespace for the control plane and one per node, deleted on drop.
struct Namespaces {
    names: Vec<String>,
}

impl Namespaces {
    fn cp(&self) -> &str {
        &self.names[0]
    }
    fn node(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Node i (1-based) is 10.232.i.2; its veth peer in the control plane's namespace is
    /// 10.232.i.1.
    fn create() -> Result<Self, String> {
        let tag = std::process::id() % 100_000;
        let mut ns = Namespaces { names: Vec::new() };
        for suffix in std::iter::once("cp".to_string()).chain((1..=NODES).map(|i| format!("n{i}")))
        {
            let name = format!("rdxc{tag}-{suffix}");
            ip(&["netns", "add", &name])?;
            ns.names.push(name.clone());
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
        }
        for i in 1..=NODES {
            let (c, n) = (format!("rcc{tag}{i}"), format!("rcn{tag}{i}"));
            let (cp, node) = (ns.cp().to_string(), ns.node(i).to_string());
            ip(&[
                "link", "add", &c, "netns", &cp, "type", "veth", "peer", "name", &n, "netns", &node,
            ])?;
            let (cp_addr, node_addr) = (format!("10.232.{i}.1/24"), format!("10.232.{i}.2/24"));
            ip(&["-n", &cp, "addr", "add", &cp_addr, "dev", &c])?;
            ip(&["-n", &node, "addr", "add", &node_addr, "dev", &n])?;
            ip(&["-n", &cp, "link", "set", &c, "up"])?;
            ip(&["-n", &node, "link", "set", &n, "up"])?;
            let gateway = format!("10.232.{i}.1");
            ip(&[
                "-n",
                &node,
                "route",
                "add",
                "10.232.0.0/16",
                "via",
                &gateway,
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

/// A data-plane process in its namespace.
struct Node {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    name: String,
}

impl Node {
    fn start(ns: &str, name: &str, region: &str, listen: &str, token_file: &Path) -> Node {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(std::env::current_exe().expect("test binary"))
            .args([
                "fabric_node_process",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(NODE_REGION_ENV, region)
            .env(rdx_fabric::ENV_LISTEN, listen)
            .env(rdx_fabric::ENV_TOKEN_FILE, token_file)
            .env(rdx_fabric::ENV_PROVIDER, PROVIDER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a node in its namespace");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            // libtest's own lines ("running 1 test", ...) are not ours.
            for l in stdout.lines().map_while(Result::ok) {
                if (l.starts_with("ready ") || l.starts_with("ret ") || l.starts_with("error "))
                    && tx.send(l).is_err()
                {
                    break;
                }
            }
        });
        Node {
            child,
            stdin,
            lines,
            name: name.to_string(),
        }
    }

    fn line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{}: no reply ({e})", self.name))
    }

    fn run(&mut self, value: u64) -> (u64, u64) {
        writeln!(self.stdin, "run {value}").unwrap();
        self.stdin.flush().unwrap();
        let l = self.line();
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["ret", r0, "out", out] => (r0.parse().unwrap(), out.parse().unwrap()),
            _ => panic!("{}: {l:?}", self.name),
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        for _ in 0..200 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
    }
}

/// `rdx` in the control plane's namespace.
struct Rdx {
    ns: String,
    state: PathBuf,
}

impl Rdx {
    fn rdx(&self, args: &[&str]) -> Output {
        let started = Instant::now();
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns, env!("CARGO_BIN_EXE_rdx")])
            .args(args)
            .arg("--state-dir")
            .arg(&self.state)
            .output()
            .expect("rdx runs");
        eprintln!(
            "rdx {} -> {} in {:?}",
            args.join(" "),
            out.status,
            started.elapsed()
        );
        out
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.rdx(args);
        assert!(
            out.status.success(),
            "rdx {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn fails(&self, args: &[&str]) -> String {
        let out = self.rdx(args);
        assert!(!out.status.success(), "rdx {args:?} should fail");
        String::from_utf8(out.stderr).unwrap()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.push("--json");
        serde_json::from_str(&self.ok(&a)).expect("valid JSON")
    }
}

fn object(name: &str) -> String {
    rdx_testdata::object_path(&format!("control/{name}"))
        .display()
        .to_string()
}

fn plan(nodes: &[(String, String)], program: &str) -> String {
    let mut p = String::from("nodes:\n");
    for (name, address) in nodes {
        p += &format!("  - {{name: {name}, address: \"{address}\"}}\n");
    }
    p += "hooks:\n  - {name: on_request, depends_on: []}\nupdates:\n";
    p += &format!(
        "  - {{hook: on_request, object: \"{}\", program: {program}}}\n",
        object(program)
    );
    p
}

#[test]
fn control_plane_cli_drives_three_nodes_over_the_fabric() {
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
    let tag = std::process::id();
    let dir = std::env::temp_dir().join(format!("rdx-cli-fabric-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let rdx = Rdx {
        ns: ns.cp().to_string(),
        state: dir.join("state"),
    };

    // Each node creates its own token file (mode 0600) on first start.
    let mut nodes = Vec::new();
    let mut addresses = Vec::new();
    for i in 1..=NODES {
        let token_file = dir.join(format!("n{i}.token"));
        let region = format!("/dev/shm/rdx-cli-fabric-{tag}-{i}");
        let node = Node::start(
            ns.node(i),
            &format!("n{i}"),
            &region,
            &format!("10.232.{i}.2"),
            &token_file,
        );
        let ready = node.line();
        let w: Vec<&str> = ready.split_whitespace().collect();
        assert_eq!(w.get(2), Some(&PROVIDER), "n{i}: {ready}");
        let bootstrap = w[1].to_string();
        assert!(bootstrap.starts_with(&format!("10.232.{i}.2:")), "{ready}");
        addresses.push((bootstrap, token_file));
        nodes.push(node);
    }
    let address = |i: usize, token_of: usize| {
        format!(
            "fabric://{}?token-file={}",
            addresses[i - 1].0,
            addresses[token_of - 1].1.display()
        )
    };

    // A wrong token (node 1's, presented to node 2) is refused and nothing is registered.
    let refused = rdx.fails(&["node", "add", "n2", &address(2, 1)]);
    assert!(
        refused.contains("refused the token") && refused.contains(&addresses[1].0),
        "{refused}"
    );
    assert!(!refused.contains(&std::fs::read_to_string(&addresses[0].1).unwrap()[..16]));
    let fleet: Vec<(String, String)> = (1..=NODES)
        .map(|i| (format!("n{i}"), address(i, i)))
        .collect();
    for (name, addr) in &fleet {
        let added = rdx.ok(&["node", "add", name, addr]);
        assert!(added.contains("hooks: on_request"), "{added}");
    }
    assert_eq!(rdx.json(&["node", "ls"]).as_array().unwrap().len(), NODES);

    // Deploy to every node; each host runs it.
    for (name, _) in &fleet {
        let d = rdx.json(&[
            "deploy",
            &object("plus_one"),
            "--node",
            name,
            "--hook",
            "on_request",
        ]);
        assert_eq!(d["version"], 1, "{name}: {d}");
    }
    for (i, node) in nodes.iter_mut().enumerate() {
        for r in 0..=i as u64 {
            assert_eq!(node.run(10 + r), (1, 11 + r));
        }
    }

    // Counters and maps, read and written remotely, per node.
    for (i, (name, _)) in fleet.iter().enumerate() {
        let show = rdx.json(&["node", "show", name]);
        assert_eq!(show["hooks"][0]["version"], 1);
        assert_eq!(show["hooks"][0]["runs"], i as u64 + 1, "{show}");
        assert_eq!(
            rdx.ok(&["map", "get", "--node", name, "hits", "0"]).trim(),
            (i + 1).to_string()
        );
        let seen = rdx.json(&["map", "dump", "--node", name, "seen"]);
        assert_eq!(seen.as_array().unwrap().len(), i + 1, "{seen}");
    }
    rdx.ok(&["map", "set", "--node", "n1", "hits", "0", "100"]);
    assert_eq!(nodes[0].run(1), (1, 2));
    assert_eq!(
        rdx.ok(&["map", "get", "--node", "n1", "hits", "0"]).trim(),
        "101"
    );

    // One broadcast across the three nodes (rdx-fleet): all flip together.
    let plan_v2 = dir.join("times_two.yaml");
    std::fs::write(&plan_v2, plan(&fleet, "times_two")).unwrap();
    let report = rdx.json(&["broadcast", plan_v2.to_str().unwrap()]);
    let updates = report["updates"].as_array().unwrap();
    assert_eq!(updates.len(), NODES, "{report}");
    assert!(updates.iter().all(|u| u["version"] == 2), "{report}");
    for node in nodes.iter_mut() {
        assert_eq!(node.run(7), (2, 14));
    }

    // Kill node 2: commands on it fail quickly with an error naming it; the others are
    // unaffected.
    let n1_hits = rdx.ok(&["map", "get", "--node", "n1", "hits", "0"]);
    nodes[1].kill();
    let t = Instant::now();
    let dead = rdx.fails(&["node", "show", "n2"]);
    eprintln!("dead node: {dead}");
    assert!(
        dead.contains(&format!("fabric://{}", addresses[1].0)),
        "{dead}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(15),
        "took {:?}",
        t.elapsed()
    );
    assert!(!rdx
        .fails(&[
            "deploy",
            &object("plus_one"),
            "--node",
            "n2",
            "--hook",
            "on_request"
        ])
        .is_empty());
    assert_eq!(
        rdx.ok(&["map", "get", "--node", "n1", "hits", "0"]),
        n1_hits
    );
    // A broadcast that includes the dead node makes nothing visible anywhere.
    let plan_v3 = dir.join("plus_one.yaml");
    std::fs::write(&plan_v3, plan(&fleet, "plus_one")).unwrap();
    let refused = rdx.fails(&["broadcast", plan_v3.to_str().unwrap()]);
    eprintln!("broadcast with a dead node: {refused}");
    assert!(refused.contains("n2"), "{refused}");
    assert_eq!(nodes[0].run(5), (2, 10));
    assert_eq!(nodes[2].run(5), (2, 10));
    // Node 3 still takes single deploys.
    let d = rdx.json(&[
        "deploy",
        &object("plus_one"),
        "--node",
        "n3",
        "--hook",
        "on_request",
    ]);
    assert_eq!(d["version"], 3, "{d}");
    assert_eq!(nodes[2].run(5), (1, 6), "plus_one returns 1");
    assert_eq!(nodes[0].run(5), (2, 10));
    let show = rdx.json(&["node", "show", "n3"]);
    assert_eq!(show["hooks"][0]["version"], 3, "{show}");

    drop(nodes);
    for i in 1..=NODES {
        let _ = std::fs::remove_file(format!("/dev/shm/rdx-cli-fabric-{tag}-{i}"));
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("multi-host CLI run took {:?}", started.elapsed());
}
