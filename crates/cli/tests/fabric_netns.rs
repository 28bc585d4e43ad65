//! The `rdx` command line over the fabric across network namespaces: the control plane (every
//! `rdx` process) runs in one namespace, three data planes in three others, joined by veth
//! pairs with addresses in 10.232.0.0/16 that exist only inside them.
//!
//! Each data plane is `rdx-test-host control` in its namespace: a host linking only the
//! runtime and the fabric's server side, which registers its region and opts into the
//! fabric through the environment (`RDX_FABRIC_LISTEN`, `rdx_fabric::serve_from_env`).
//! The control plane registers the nodes as `fabric://IP:PORT?token-file=...`, deploys,
//! reads and writes maps, shows nodes and runs a broadcast (`rdx-fleet`) across them; a wrong
//! token is refused; a killed node gives a clear error naming it while the others keep
//! working, and a broadcast that includes it changes nothing anywhere.
//!
//! Needs root and `ip netns`; otherwise prints why and skips.

use std::path::Path;
use std::time::{Duration, Instant};

use rdx_test_support::netns::exec_in;
use rdx_test_support::{test_host, HostProcess, NetnsStar, Rdx, ScratchDir, ShmPath};

const NODES: usize = 3;
/// `tcp;ofi_rxm` with the node's progress-only thread: milliseconds faster per operation
/// than `sockets` here (docs/fabric.md), which keeps the test short.
const PROVIDER: &str = "tcp;ofi_rxm";

/// A data-plane process in its namespace: `rdx-test-host control`, serving its region over
/// the fabric because its environment says so.
fn start_node(
    ns: &str,
    name: &str,
    region: ShmPath,
    listen: &str,
    token_file: &Path,
) -> HostProcess {
    let mut cmd = exec_in(ns, test_host());
    cmd.args(["control", "--path"])
        .arg(region.path())
        .env(rdx_fabric::ENV_LISTEN, listen)
        .env(rdx_fabric::ENV_TOKEN_FILE, token_file)
        .env(rdx_fabric::ENV_PROVIDER, PROVIDER);
    HostProcess::spawn(&mut cmd, region, name, |_| true)
}

/// `(r0, out)` of one request to a node.
fn run(node: &mut HostProcess, value: u64) -> (u64, u64) {
    node.run(&value.to_string())
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
    let Some(ns) = NetnsStar::create_or_skip("rdxc", 232, NODES) else {
        return;
    };
    let started = Instant::now();
    let dir = ScratchDir::new("cli-fabric");
    let rdx = Rdx::with_state(env!("CARGO_BIN_EXE_rdx"), "cli-fabric-state").in_netns(ns.hub());

    // Each node creates its own token file (mode 0600) on first start.
    let mut nodes = Vec::new();
    let mut addresses = Vec::new();
    for i in 1..=NODES {
        let token_file = dir.join(format!("n{i}.token"));
        let region = ShmPath::new(&format!("cli-fabric-{i}"));
        let listen = ns.spoke_ip(i);
        let node = start_node(ns.spoke(i), &format!("n{i}"), region, &listen, &token_file);
        let ready = node.ready_words();
        assert_eq!(ready.get(1), Some(&PROVIDER), "n{i}: {ready:?}");
        let bootstrap = ready[0].to_string();
        assert!(bootstrap.starts_with(&format!("{listen}:")), "{ready:?}");
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
            assert_eq!(run(node, 10 + r), (1, 11 + r));
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
    assert_eq!(run(&mut nodes[0], 1), (1, 2));
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
        assert_eq!(run(node, 7), (2, 14));
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
    assert_eq!(run(&mut nodes[0], 5), (2, 10));
    assert_eq!(run(&mut nodes[2], 5), (2, 10));
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
    assert_eq!(run(&mut nodes[2], 5), (1, 6), "plus_one returns 1");
    assert_eq!(run(&mut nodes[0], 5), (2, 10));
    let show = rdx.json(&["node", "show", "n3"]);
    assert_eq!(show["hooks"][0]["version"], 3, "{show}");

    drop(nodes);
    eprintln!("multi-host CLI run took {:?}", started.elapsed());
}
