//! The control-plane subcommands end to end: this test process is the host (it links the
//! runtime, declares `on_request` and serves requests in-process); every deploy, rollback,
//! detach and map operation is a separate `rdx` process writing into its region.

use rdx_test_support::eim::{self, MAP_AND_RINGBUF_HELPERS};
use rdx_test_support::{LocalHost, Rdx};

fn object(name: &str) -> String {
    rdx_testdata::object_path(&format!("control/{name}"))
        .display()
        .to_string()
}

#[test]
fn every_control_plane_command_against_a_live_host() {
    let host = LocalHost::start("cli-control", &eim::on_request(&MAP_AND_RINGBUF_HELPERS));
    let request = |value: u64| host.request(value);
    let env = Rdx::with_state(env!("CARGO_BIN_EXE_rdx"), "cli-control-state");

    // node add / ls
    let added = env.ok(&["node", "add", "kv", &host.address()]);
    assert!(added.contains("hooks: on_request"), "{added}");
    let nodes = env.json(&["node", "ls"]);
    assert_eq!(nodes[0]["name"], "kv");
    assert!(env
        .fails(&["node", "add", "gone", "shm:/dev/shm/rdx-no-such-region"])
        .contains("cannot reach"));

    // deploy, behaviour change
    assert_eq!(request(5), (0, 0));
    let d1 = env.json(&[
        "deploy",
        &object("plus_one"),
        "--node",
        "kv",
        "--hook",
        "on_request",
    ]);
    assert_eq!(d1["version"], 1);
    assert_eq!(request(5), (1, 6));
    let text = env.ok(&[
        "deploy",
        &object("times_two"),
        "--node",
        "kv",
        "--hook",
        "on_request",
    ]);
    assert!(text.contains("version 2 (was 1)"), "{text}");
    assert_eq!(request(5), (2, 10));

    // node show: versions and counters read remotely
    let show = env.json(&["node", "show", "kv"]);
    let h = &show["hooks"][0];
    assert_eq!(h["name"], "on_request");
    assert_eq!(h["version"], 2);
    assert_eq!(h["runs"], 2);
    assert_eq!(h["held_versions"].as_array().unwrap().len(), 2);
    let text = env.ok(&["node", "show", "kv"]);
    assert!(text.contains("2* 1"), "{text}");

    // maps: ls, dump, get, set, del
    let maps = env.json(&["map", "ls", "--node", "kv"]);
    let names: Vec<&str> = maps
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    for want in ["hits", "seen", "events"] {
        assert!(names.contains(&want), "{names:?}");
    }
    assert_eq!(
        env.ok(&["map", "get", "--node", "kv", "hits", "0"]).trim(),
        "2"
    );
    env.ok(&["map", "set", "--node", "kv", "hits", "0", "40"]);
    assert_eq!(request(1), (2, 2));
    assert_eq!(
        env.ok(&["map", "get", "--node", "kv", "hits", "0"]).trim(),
        "41"
    );
    let dump = env.json(&["map", "dump", "--node", "kv", "seen"]);
    assert_eq!(
        dump.as_array().unwrap().len(),
        1,
        "plus_one saw one value: {dump}"
    );
    assert_eq!(dump[0]["key"], "5");
    env.ok(&["map", "del", "--node", "kv", "seen", "5"]);
    assert!(env
        .fails(&["map", "get", "--node", "kv", "seen", "5"])
        .contains("no key 5"));
    assert!(env
        .fails(&["map", "get", "--node", "kv", "nosuch", "1"])
        .contains("no map \"nosuch\""));
    assert!(env
        .fails(&["map", "set", "--node", "kv", "hits", "0", "x"])
        .contains("neither an integer"));

    // rollback (previous, then --to), events, history
    let text = env.ok(&["rollback", "--node", "kv", "--hook", "on_request"]);
    assert!(
        text.contains("version 1 active (was 2), program plus_one"),
        "{text}"
    );
    assert_eq!(request(9), (1, 10));
    let events = env.ok(&["events", "--node", "kv", "events", "--json"]);
    let values: Vec<u64> = events
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["u64s"][0]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(
        values,
        vec![5, 9],
        "ring buffer records of the plus_one runs"
    );
    assert_eq!(
        env.json(&[
            "rollback",
            "--node",
            "kv",
            "--hook",
            "on_request",
            "--to",
            "2"
        ])["version"],
        2
    );
    assert_eq!(request(3), (2, 6));
    assert!(env
        .fails(&[
            "rollback",
            "--node",
            "kv",
            "--hook",
            "on_request",
            "--to",
            "7"
        ])
        .contains("no version 7 held"));

    // detach
    assert!(env
        .ok(&["detach", "--node", "kv", "--hook", "on_request"])
        .contains("detached version 2"));
    assert_eq!(request(3), (0, 0));

    let history = env.json(&["history", "--node", "kv"]);
    let actions: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["deploy", "deploy", "rollback", "rollback", "detach"]
    );
    assert!(env
        .ok(&["history", "--node", "kv", "--hook", "on_request"])
        .contains("times_two"));

    // a rejected program never reaches the node
    let err = env.fails(&[
        "deploy",
        &object("out_of_bounds"),
        "--node",
        "kv",
        "--hook",
        "on_request",
    ]);
    assert!(
        err.contains("verification failed") && err.contains("offset 16"),
        "{err}"
    );
    assert_eq!(request(3), (0, 0));

    // two control planes: while this process holds the lease, the CLI is refused
    let mut holder =
        rdx_control::create_codeflow(&host.address(), rdx_control::AttachOptions::default())
            .unwrap();
    holder.mutual_excl().unwrap();
    let err = env.fails(&["rollback", "--node", "kv", "--hook", "on_request"]);
    assert!(err.contains("leased by another control plane"), "{err}");
    assert_eq!(request(3), (0, 0));
    holder.release().unwrap();
    env.ok(&["rollback", "--node", "kv", "--hook", "on_request"]);
    assert_eq!(request(3), (2, 6));

    // a deploy to a busy node says how to wait; with --wait it waits for the lease
    holder.mutual_excl().unwrap();
    let plus_one = object("plus_one");
    let deploy = ["deploy", &plus_one, "--node", "kv", "--hook", "on_request"];
    let err = env.fails(&deploy);
    assert!(err.contains("--wait SECS"), "{err}");
    let waiting = env
        .command(&[&deploy[..], &["--wait", "30"]].concat())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(
        request(3),
        (2, 6),
        "nothing is published while the lease is held"
    );
    holder.release().unwrap();
    let out = waiting.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("waiting up to 30 s"), "{stderr}");
    assert_eq!(
        request(3).1,
        4,
        "plus_one runs once the waiting deploy went through"
    );

    host.teardown(std::time::Duration::from_millis(100))
        .unwrap();
}
