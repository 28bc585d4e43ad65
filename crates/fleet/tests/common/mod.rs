//! What the fleet tests and the broadcast benchmark share beyond `rdx-test-support`: the
//! request chain, plans and extensions built from `bpf/fleet/stamp_*.c`, and control planes
//! crashed on purpose.

#![allow(dead_code)]

pub mod chain;

use rdx_control::{CodeFlow, Extension};
use rdx_fleet::watch::{watch, Event, Target, Thresholds, WatchOptions};
use std::ffi::OsStr;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// `bpf/fleet/NAME.c` as an extension (its one program).
pub fn extension(name: &str) -> Extension {
    let o = rdx_bpf::loader::load(&rdx_testdata::object(&format!("fleet/{name}"))).unwrap();
    Extension::from_object(&o, None).unwrap()
}

/// A plan (YAML) that updates `on_request` to `stamp_v{version}` in `class` on the nodes
/// `{prefix}0`, `{prefix}1`, ... at `addresses`; with `flow`, it declares the request flow
/// from the first node to the last.
pub fn stamp_plan(
    prefix: &str,
    addresses: &[String],
    version: u32,
    class: &str,
    flow: bool,
) -> String {
    let mut text = String::from("nodes:\n");
    for (i, a) in addresses.iter().enumerate() {
        text += &format!("  - {{name: {prefix}{i}, address: '{a}'}}\n");
    }
    text += &format!(
        "updates:\n  - {{hook: on_request, object: '{}', class: {class}}}\n",
        rdx_testdata::object_path(&format!("fleet/stamp_v{version}")).display()
    );
    if flow {
        text += &format!(
            "flows:\n  - {{entry: {{node: {prefix}0, hook: on_request}}, \
             exit: {{node: {prefix}{}, hook: on_request}}}}\n",
            addresses.len() - 1
        );
    }
    text
}

/// The phases a control plane can be killed at, each with whether recovery rolls the
/// operation forward (it committed) or back.
pub const CRASH_PHASES: [(&str, bool); 6] = [
    ("prepared", false),
    ("held", false),
    ("decided", true),
    ("committed", true),
    ("first-flip", true),
    ("first-release", true),
];

/// Runs `child`, an ignored test of this test binary that runs a control-plane operation
/// with `FLEET_CRASH=phase` (it SIGKILLs itself at that phase), with `env` added; panics
/// unless it died of SIGKILL.
pub fn crash_at(child: &str, phase: &str, env: &[(&str, &OsStr)]) {
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child, "--include-ignored", "--nocapture"])
        .env("FLEET_CRASH", phase)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{phase}: {status:?}");
}

/// Watches `on_request` at `address` (as node `n0`) on a thread of its own: it samples every
/// `interval`, rolls back once when more than 5% of at least 20 runs failed, and stops after
/// 30 s. Its events arrive on the receiver.
pub fn spawn_watcher(address: &str, interval: Duration) -> (JoinHandle<()>, Receiver<Event>) {
    let (tx, rx) = mpsc::channel();
    let target = Target {
        node: "n0".into(),
        address: address.into(),
        hook: "on_request".into(),
    };
    let watcher = std::thread::spawn(move || {
        let opts = WatchOptions {
            interval,
            thresholds: Thresholds {
                max_failure_ratio: 0.05,
                max_avg_ns: None,
                min_runs: 20,
            },
            duration: Some(Duration::from_secs(30)),
            max_rollbacks: Some(1),
            history: None,
        };
        watch(&[target], &opts, |e| {
            let _ = tx.send(e.clone());
        })
        .unwrap();
    });
    (watcher, rx)
}

/// The word of `on_request`'s slot that holds the active version (and the hold bit), read
/// through a fresh control plane.
pub fn active_word(address: &str) -> u64 {
    let cf = rdx_control::create_codeflow(address, Default::default()).unwrap();
    let hook = cf.view().hook("on_request").unwrap();
    rdx_transport::slot::read_active(cf.transport(), hook.slot_offset).unwrap()
}

/// Recovers what a control plane killed at `phase` left in `state_dir`: exactly one
/// operation, rolled forward if `forward`, else back.
pub fn recover_one(state_dir: &Path, nodes: &[(&str, &str)], phase: &str, forward: bool) {
    let want = if forward {
        "rolled_forward"
    } else {
        "rolled_back"
    };
    // From what the nodes hold, on a control plane with none of the dead one's state.
    let elsewhere = rdx_test_support::ScratchDir::new(&format!("fleet-recover-{phase}"));
    let opts = rdx_fleet::RecoverOptions {
        nodes: nodes
            .iter()
            .map(|(name, address)| rdx_fleet::plan::NodeSpec {
                name: name.to_string(),
                address: address.to_string(),
            })
            .collect(),
        ..rdx_fleet::RecoverOptions::new(elsewhere.path())
    };
    let rec = rdx_fleet::recover(&opts).unwrap();
    assert_eq!(rec.len(), 1, "{phase}: {rec:?}");
    assert_eq!(rec[0].outcome, want, "{phase}: {:?}", rec[0].actions);
    assert!(rec[0].intent_log.is_none(), "{phase}");
    // The dead control plane's own log then only needs closing, with the same outcome.
    let rec = rdx_fleet::recover(&rdx_fleet::RecoverOptions::new(state_dir)).unwrap();
    assert_eq!(rec.len(), 1, "{phase}: {rec:?}");
    assert_eq!(rec[0].outcome, want, "{phase}: {:?}", rec[0].actions);
    assert!(rdx_fleet::recover(&opts).unwrap().is_empty(), "{phase}");
}

/// A rolling update of `on_request` to `ext`, node after node, every node's code validated
/// and compiled first (as a broadcast's check does). Returns the inconsistency window: first
/// publish to last.
pub fn rolling_update(cfs: &mut [CodeFlow], ext: &Extension) -> Duration {
    let compiled: Vec<_> = cfs
        .iter()
        .map(|cf| {
            let c = cf
                .validate_code(ext, "on_request", Some("default"))
                .unwrap();
            cf.jit_compile_code(ext, &c, None).unwrap()
        })
        .collect();
    let mut first = None;
    for (cf, c) in cfs.iter_mut().zip(&compiled) {
        cf.deploy_prog("on_request", ext, c).unwrap();
        first.get_or_insert_with(Instant::now);
    }
    first.unwrap().elapsed()
}
