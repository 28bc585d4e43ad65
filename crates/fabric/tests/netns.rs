//! Multi-host: a control plane in one network namespace drives three data planes in three
//! others over the fabric (veth pairs, addresses in 10.231.0.0/16 that exist only inside
//! the namespaces). Deploys, map operations and counters across them; a wrong token; a
//! killed node that must not disturb the others.
//!
//! Needs root and `ip netns`; otherwise prints why and skips.

use rdx_test_support::netns::exec_in;
use rdx_test_support::{
    example_bin, test_host, HostProcess, LineProcess, NetnsStar, ScratchDir, ShmPath,
};
use std::time::{Duration, Instant};

const NODES: usize = 3;
/// `sockets` needs no rdx thread on the nodes but costs milliseconds per operation here (see
/// docs/fabric.md); `tcp;ofi_rxm` with its progress thread keeps the test short.
const PROVIDER: &str = "tcp;ofi_rxm";

#[test]
fn control_plane_drives_three_nodes_across_namespaces() {
    let Some(ns) = NetnsStar::create_or_skip("rdxf", 231, NODES) else {
        return;
    };
    let started = Instant::now();
    let dir = ScratchDir::new("fabric-netns");
    let mut nodes = Vec::new();
    let mut tokens = Vec::new();
    for i in 1..=NODES {
        let token = rdx_fabric::Token::generate().unwrap();
        let token_file = dir.write(&format!("token-{i}"), token.to_hex());
        // Nodes refuse token files others can read.
        std::fs::set_permissions(
            &token_file,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let region = ShmPath::new(&format!("fabric-netns-{i}"));
        // The test host serves its region over the fabric because the environment says so.
        let mut cmd = exec_in(ns.spoke(i), test_host());
        cmd.args(["control", "--path"])
            .arg(region.path())
            .env(rdx_fabric::ENV_LISTEN, ns.spoke_ip(i))
            .env(rdx_fabric::ENV_TOKEN_FILE, &token_file)
            .env(rdx_fabric::ENV_PROVIDER, PROVIDER);
        let node = HostProcess::spawn(&mut cmd, region, &format!("node{i}"), |_| true);
        let ready = node.ready_words();
        assert_eq!(ready[1], PROVIDER, "node{i} said {ready:?}");
        tokens.push((ready[0].to_string(), token));
        nodes.push(node);
    }
    let mut cp = LineProcess::spawn(
        &mut exec_in(ns.hub(), example_bin("fabric_control")),
        "control",
    );
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
    eprintln!("multi-host run took {:?}", started.elapsed());
}
