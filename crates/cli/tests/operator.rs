//! What an operator runs into around deploying, each through the real `rdx` binary: a host
//! that publishes no EIM spec, an object with no program entry, re-pointing a registered
//! node, and region files left behind by hosts that died.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rdx_runtime::{HookSpec, Runtime};
use rdx_test_support::{Rdx, ScratchDir};

fn rdx() -> Rdx {
    Rdx::new(env!("CARGO_BIN_EXE_rdx"))
}

/// A runtime with one 16-byte hook `on_request` whose region is `path`, registered.
fn small_runtime(path: &Path, eim: Option<&str>) -> Runtime {
    let mut builder = Runtime::builder()
        .path(path)
        .code_size(1 << 20)
        .scratch_size(1 << 20)
        .hook("on_request", HookSpec::new(16));
    if let Some(eim) = eim {
        builder = builder.eim_spec(eim);
    }
    let rt = builder.build().expect("region created");
    rt.register().expect("region registered");
    rt
}

#[test]
fn deploying_to_a_host_without_an_eim_spec_says_how_the_host_publishes_one() {
    let dir = ScratchDir::new("cli-no-eim");
    let region = dir.join("region");
    let _rt = small_runtime(&region, None);
    let object = rdx_testdata::object_path("control/plus_one");
    let env = Rdx::with_state(env!("CARGO_BIN_EXE_rdx"), "cli-no-eim-state");
    let address = format!("shm:{}", region.display());
    let added = env.output(&["node", "add", "bare", &address]);
    assert!(added.status.success());
    let warning = String::from_utf8_lossy(&added.stderr);
    assert!(warning.contains("publishes no EIM spec"), "{warning}");
    let err = env.fails(&[
        "deploy",
        object.to_str().unwrap(),
        "--node",
        "bare",
        "--hook",
        "on_request",
    ]);
    assert!(err.contains("publishes no EIM spec"), "{err}");
    assert!(err.contains("eim_spec"), "{err}");
    assert!(err.contains("rdx_options"), "{err}");
}

#[test]
fn verify_refuses_an_object_with_only_text_functions() {
    let dir = ScratchDir::new("cli-text-only");
    let source = dir.write(
        "text_only.c",
        "static __attribute__((noinline)) int helper(int x) { return x + 1; }\n\
         int entry(int x) { return helper(x) * 2; }\n",
    );
    let object = dir.join("text_only.o");
    let status = Command::new(std::env::var("CLANG").unwrap_or_else(|_| "clang".into()))
        .args(["-O2", "-g", "-target", "bpf", "-c"])
        .arg(&source)
        .arg("-o")
        .arg(&object)
        .status()
        .expect("run clang");
    assert!(status.success(), "clang failed");
    let out = rdx().output(&["verify", object.to_str().unwrap()]);
    assert!(
        !out.status.success(),
        "verify accepted an object with no program"
    );
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no program entry"), "{err}");
    assert!(err.contains(".text"), "{err}");
}

#[test]
fn node_add_re_points_a_registered_name_only_with_force() {
    let env = Rdx::with_state(env!("CARGO_BIN_EXE_rdx"), "cli-node-force");
    env.ok(&["node", "add", "kv", "shm:/dev/shm/rdx-a", "--no-check"]);
    // The same address again is no change.
    env.ok(&["node", "add", "kv", "shm:/dev/shm/rdx-a", "--no-check"]);
    let err = env.fails(&["node", "add", "kv", "shm:/dev/shm/rdx-b", "--no-check"]);
    assert!(
        err.contains("already registered at shm:/dev/shm/rdx-a"),
        "{err}"
    );
    assert!(err.contains("--force"), "{err}");
    assert_eq!(
        env.json(&["node", "ls"])[0]["address"],
        "shm:/dev/shm/rdx-a"
    );
    env.ok(&[
        "node",
        "add",
        "kv",
        "shm:/dev/shm/rdx-b",
        "--no-check",
        "--force",
    ]);
    assert_eq!(
        env.json(&["node", "ls"])[0]["address"],
        "shm:/dev/shm/rdx-b"
    );
    // A new inline token for the same node is no re-pointing.
    let fab = |token: &str| format!("fabric://127.0.0.1:9?token={token}");
    env.ok(&["node", "add", "fab", &fab("aaaa"), "--no-check"]);
    env.ok(&["node", "add", "fab", &fab("bbbb"), "--no-check"]);
    let err = env.fails(&[
        "node",
        "add",
        "fab",
        "fabric://127.0.0.2:9?token=bbbb",
        "--no-check",
    ]);
    assert!(err.contains("--force") && !err.contains("bbbb"), "{err}");
}

/// The host [`region_gc_removes_only_regions_whose_host_is_gone`] kills: this test binary
/// run again, creating the region `RDX_TEST_GC_REGION` and waiting to be killed.
#[test]
#[ignore = "a host process for region_gc_removes_only_regions_whose_host_is_gone"]
fn region_gc_dead_host() {
    let Ok(path) = std::env::var("RDX_TEST_GC_REGION") else {
        return;
    };
    let _rt = small_runtime(Path::new(&path), None);
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A [`region_gc_dead_host`] process, killed and reaped on drop.
struct GcHost(Child);

impl GcHost {
    /// Starts one for `region` and waits until its region is registered.
    fn start(region: &Path) -> GcHost {
        let host = GcHost(
            Command::new(std::env::current_exe().unwrap())
                .args(["--ignored", "--exact", "region_gc_dead_host", "--nocapture"])
                .env("RDX_TEST_GC_REGION", region)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        let dir = region.parent().unwrap().to_str().unwrap().to_string();
        loop {
            let listed = rdx().json(&["region", "ls", "--dir", &dir]);
            let live = listed.as_array().unwrap().iter().any(|r| {
                r["path"] == region.to_str().unwrap()
                    && r["host_pid"] == host.0.id()
                    && r["status"] == "live"
            });
            if live {
                return host;
            }
            assert!(
                Instant::now() < deadline,
                "the host did not create {}",
                region.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL (no chance to clean up), and reap it so that its pid is gone.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for GcHost {
    fn drop(&mut self) {
        self.kill();
    }
}

fn status_of(listed: &serde_json::Value, path: &Path) -> serde_json::Value {
    listed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == path.to_str().unwrap())
        .map(|r| r["status"].clone())
        .unwrap_or(serde_json::Value::Null)
}

#[test]
fn region_gc_removes_only_regions_whose_host_is_gone() {
    let dir = ScratchDir::new("cli-region-gc");
    let dir_arg = dir.path().to_str().unwrap().to_string();
    // Live: this process is its host.
    let live = dir.join("live");
    let _rt = small_runtime(&live, None);
    // Not a region at all.
    let other = dir.write("other", vec![0u8; 4096]);
    // Dead: its host was killed (SIGKILL: no chance to clean up).
    let dead = dir.join("dead");
    GcHost::start(&dead).kill();
    // Dead but still mapped by another process (here, this one).
    let mapped = dir.join("mapped");
    GcHost::start(&mapped).kill();
    let mapping = rdx_transport::shm::ShmTransport::open_read_only(&mapped).unwrap();

    let listed = rdx().json(&["region", "ls", "--dir", &dir_arg]);
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");
    assert_eq!(status_of(&listed, &live), "live");
    assert_eq!(status_of(&listed, &dead), "stale");
    assert_eq!(status_of(&listed, &mapped), "mapped");

    let dry = rdx().ok(&["region", "gc", "--dir", &dir_arg, "--dry-run"]);
    assert!(
        dry.contains(&format!("would remove {}", dead.display())),
        "{dry}"
    );
    assert!(dead.exists(), "--dry-run removed a file");

    let gc = rdx().json(&["region", "gc", "--dir", &dir_arg]);
    let removed: Vec<&str> = gc
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["removed"] == true)
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(removed, [dead.to_str().unwrap()], "{gc}");
    assert!(!dead.exists());
    for kept in [&live, &mapped, &other] {
        assert!(kept.exists(), "{} removed", kept.display());
    }

    // Once nothing maps it, the dead host's region goes too.
    drop(mapping);
    let text = rdx().ok(&["region", "gc", "--dir", &dir_arg]);
    assert!(
        text.contains(&format!("removed {}", mapped.display())),
        "{text}"
    );
    assert!(!mapped.exists() && live.exists() && other.exists());
}
