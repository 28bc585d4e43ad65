//! Attacks on what surrounds the verifier (`docs/security.md`), each run against the real
//! `rdx` binary: a tampered registry, a loose or foreign state directory, a region another
//! user owns, and fabric tokens leaking through any output.

use rdx_fabric::{serve, ProgressThread, Provider, ServeConfig, Token};
use rdx_test_support::eim::{self, MAP_AND_RINGBUF_HELPERS};
use rdx_test_support::{LocalHost, Rdx, ScratchDir, Stranger};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

fn object(name: &str) -> String {
    rdx_testdata::object_path(&format!("control/{name}"))
        .display()
        .to_string()
}

fn registry_file(env: &Rdx) -> PathBuf {
    env.state_dir().join("registry.sqlite")
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn deploy(env: &Rdx, program: &str) -> serde_json::Value {
    env.json(&[
        "deploy",
        &object(program),
        "--node",
        "kv",
        "--hook",
        "on_request",
    ])
}

#[test]
fn a_tampered_artifact_in_the_registry_is_refused_and_never_deployed() {
    let host = LocalHost::start("sec-artifact", &eim::on_request(&MAP_AND_RINGBUF_HELPERS));
    let env = Rdx::with_state(env!("CARGO_BIN_EXE_rdx"), "sec-artifact-state");
    env.ok(&["node", "add", "kv", &host.address()]);
    let plus_one = deploy(&env, "plus_one")["artifact"]
        .as_str()
        .unwrap()
        .to_string();
    let times_two = deploy(&env, "times_two")["artifact"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(host.request(5), (2, 10));
    let db = rusqlite::Connection::open(registry_file(&env)).unwrap();

    // 1. Another program's native code under plus_one's hash.
    db.execute(
        "UPDATE artifacts SET bytes = (SELECT bytes FROM artifacts WHERE hash = ?2) WHERE hash = ?1",
        [&plus_one, &times_two],
    )
    .unwrap();
    let refused = env.fails(&[
        "deploy",
        &object("plus_one"),
        "--node",
        "kv",
        "--hook",
        "on_request",
    ]);
    assert!(
        refused.contains("content hash mismatch") && refused.contains(&plus_one),
        "{refused}"
    );
    assert_eq!(host.request(5), (2, 10), "the node still runs times_two");

    // 2. A consistent row (bytes match their hash) that was built from another program:
    //    plus_one's cache entry pointed at times_two's artifact.
    db.execute(
        "UPDATE compile_cache SET hash = ?2 WHERE hash = ?1",
        [&plus_one, &times_two],
    )
    .unwrap();
    let refused = env.fails(&[
        "deploy",
        &object("plus_one"),
        "--node",
        "kv",
        "--hook",
        "on_request",
    ]);
    assert!(
        refused.contains(&times_two) && refused.contains("another program's bytecode"),
        "{refused}"
    );
    assert_eq!(host.request(5), (2, 10), "the node still runs times_two");
    let show = env.json(&["node", "show", "kv"]);
    assert_eq!(show["hooks"][0]["version"], 2);

    // With the bad entry gone, the program is compiled afresh and deploys.
    db.execute("DELETE FROM compile_cache WHERE hash = ?1", [&times_two])
        .unwrap();
    db.execute("DELETE FROM artifacts WHERE hash = ?1", [&plus_one])
        .unwrap();
    drop(db);
    let again = deploy(&env, "plus_one");
    assert_eq!(again["cached"], false);
    assert_eq!(again["version"], 3);
    assert_eq!(host.request(5), (1, 6), "plus_one runs");
}

#[test]
fn the_state_directory_is_private_and_a_shared_or_foreign_one_is_refused() {
    let scratch = ScratchDir::new("sec-state");
    let state = scratch.join("nested/state");
    let state_arg = state.display().to_string();
    let rdx = Rdx::new(env!("CARGO_BIN_EXE_rdx"));
    rdx.ok(&["node", "ls", "--state-dir", &state_arg]);
    assert_eq!(std::fs::metadata(&state).unwrap().mode() & 0o777, 0o700);
    for file in [
        "registry.sqlite",
        "registry.sqlite-wal",
        "registry.sqlite-shm",
    ] {
        if let Ok(meta) = std::fs::metadata(state.join(file)) {
            assert_eq!(meta.mode() & 0o777, 0o600, "{file}");
        }
    }

    // A state directory others can write: whoever writes it picks the code deployed.
    chmod(&state, 0o777);
    let e = rdx.fails(&["node", "ls", "--state-dir", &state_arg]);
    assert!(
        e.contains("refusing state directory") && e.contains("0777"),
        "{e}"
    );
    chmod(&state, 0o700);
    // A database another process left readable by all is made private again.
    chmod(&state.join("registry.sqlite"), 0o644);
    rdx.ok(&["node", "ls", "--state-dir", &state_arg]);
    assert_eq!(
        std::fs::metadata(state.join("registry.sqlite"))
            .unwrap()
            .mode()
            & 0o777,
        0o600
    );

    let Some(stranger) = Stranger::new("foreign state directory") else {
        return;
    };
    let foreign = scratch.join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::os::unix::fs::chown(&foreign, Some(stranger.uid()), Some(stranger.uid())).unwrap();
    let e = rdx.fails(&["node", "ls", "--state-dir", &foreign.display().to_string()]);
    assert!(e.contains("owned by uid"), "{e}");
}

#[test]
fn rdx_refuses_a_region_another_user_owns_or_others_can_write() {
    let Some(stranger) = Stranger::new("control plane region owner check") else {
        return;
    };
    let host = LocalHost::start("sec-cli-owner", &eim::on_request(&MAP_AND_RINGBUF_HELPERS));
    let env = Rdx::with_state(env!("CARGO_BIN_EXE_rdx"), "sec-cli-owner-state");
    std::os::unix::fs::chown(host.path(), Some(stranger.uid()), None).unwrap();
    let e = env.fails(&["node", "add", "kv", &host.address()]);
    assert!(
        e.contains("refusing region file") && e.contains("owned by uid"),
        "{e}"
    );
    std::os::unix::fs::chown(host.path(), Some(0), None).unwrap();
    chmod(host.path(), 0o666);
    let e = env.fails(&["node", "add", "kv", &host.address()]);
    assert!(e.contains("0666"), "{e}");
    chmod(host.path(), 0o600);
    env.ok(&["node", "add", "kv", &host.address()]);
}

/// Runs `rdx args`, whatever its status, and checks `secret` is in neither output stream.
fn never_prints(env: &Rdx, args: &[&str], secret: &str) -> (bool, String) {
    let out = env.output(args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    for (stream, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(
            !text.to_ascii_lowercase().contains(secret),
            "rdx {} printed the token on {stream}:\n{text}",
            args.join(" ")
        );
    }
    (out.status.success(), format!("{stdout}{stderr}"))
}

#[test]
fn a_fabric_token_never_appears_in_any_output_and_is_wiped_on_removal() {
    let host = LocalHost::start("sec-token", &eim::on_request(&MAP_AND_RINGBUF_HELPERS));
    let env = Rdx::with_state(env!("CARGO_BIN_EXE_rdx"), "sec-token-state");
    let token = Token::generate().unwrap();
    let secret = token.to_hex();
    let server = serve(
        host.path(),
        ServeConfig {
            provider: Provider::from_flag(Some("sockets")),
            progress: ProgressThread::WhenNeeded,
            ..ServeConfig::new(IpAddr::V4(Ipv4Addr::LOCALHOST), token.clone())
        },
    )
    .expect("serving the region over the sockets provider");
    let live = format!("fabric://{}?token={secret}", server.bootstrap_addr());
    let dead = format!("fabric://127.0.0.1:1?timeout-ms=500&token={secret}");
    let deploy_to = |node: &str| {
        vec![
            "deploy".to_string(),
            object("plus_one"),
            "--node".into(),
            node.into(),
            "--hook".into(),
            "on_request".into(),
        ]
    };
    let runs: Vec<(Vec<String>, bool)> = vec![
        // node add: success (reachable), error (unreachable), success without a check.
        (
            vec!["node".into(), "add".into(), "fab".into(), live.clone()],
            true,
        ),
        (
            vec!["node".into(), "add".into(), "gone".into(), dead.clone()],
            false,
        ),
        (
            vec![
                "node".into(),
                "add".into(),
                "offline".into(),
                dead.clone(),
                "--no-check".into(),
            ],
            true,
        ),
        (vec!["node".into(), "ls".into()], true),
        (vec!["node".into(), "ls".into(), "--json".into()], true),
        (vec!["node".into(), "show".into(), "fab".into()], true),
        (
            vec!["node".into(), "show".into(), "fab".into(), "--json".into()],
            true,
        ),
        (vec!["node".into(), "show".into(), "offline".into()], false),
        // The "unknown node" hint echoes the name it was given.
        (
            vec![
                "node".into(),
                "show".into(),
                format!("fabric:127.0.0.1?token={secret}"),
            ],
            false,
        ),
        (deploy_to("fab"), true),
        ([deploy_to("fab"), vec!["--json".into()]].concat(), true),
        // An unregistered address used directly as --node, reachable and not.
        (deploy_to(&live), true),
        (deploy_to(&dead), false),
        (
            vec!["map".into(), "ls".into(), "--node".into(), "fab".into()],
            true,
        ),
        (vec!["history".into(), "--node".into(), "fab".into()], true),
        (vec!["node".into(), "rm".into(), "fab".into()], true),
        (vec!["node".into(), "rm".into(), "offline".into()], true),
    ];
    for (args, should_succeed) in &runs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, text) = never_prints(&env, &args, &secret);
        assert_eq!(ok, *should_succeed, "rdx {}:\n{text}", args.join(" "));
    }
    assert_eq!(host.request(5).1, 6, "the deploys over the fabric ran");
    drop(server);

    // Removed nodes leave no copy of the token in the registry's files.
    for suffix in ["", "-wal", "-shm"] {
        let mut path = registry_file(&env).into_os_string();
        path.push(suffix);
        if let Ok(bytes) = std::fs::read(&path) {
            assert!(
                !bytes
                    .windows(secret.len())
                    .any(|w| w.eq_ignore_ascii_case(secret.as_bytes())),
                "{} still holds the token",
                Path::new(&path).display()
            );
        }
    }
}

#[test]
fn token_files_others_can_read_or_that_another_user_owns_are_refused() {
    let dir = ScratchDir::new("sec-token-file");
    let token = Token::generate().unwrap();
    let file = dir.write("node.token", token.to_hex());
    let env = Rdx::with_state(env!("CARGO_BIN_EXE_rdx"), "sec-token-file-state");
    let address = format!(
        "fabric://127.0.0.1:1?timeout-ms=500&token-file={}",
        file.display()
    );
    for loose in [0o644, 0o640, 0o604] {
        chmod(&file, loose);
        let e = env.fails(&["node", "add", "n", &address]);
        assert!(
            e.contains("group or others") && !e.contains(&token.to_hex()),
            "{loose:o}: {e}"
        );
    }
    chmod(&file, 0o600);
    // Private: the token is accepted and only the connection fails (nothing listens).
    let e = env.fails(&["node", "add", "n", &address]);
    assert!(
        !e.contains("group or others") && !e.contains("owned by"),
        "{e}"
    );
    let Some(stranger) = Stranger::new("foreign token file") else {
        return;
    };
    std::os::unix::fs::chown(&file, Some(stranger.uid()), None).unwrap();
    let e = env.fails(&["node", "add", "n", &address]);
    assert!(e.contains("owned by uid"), "{e}");
}
