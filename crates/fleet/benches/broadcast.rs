//! Broadcast to 16 host processes against a rolling update (one node at a time), in one
//! run: total time, prepare, the hold bubble, the flip, the intent log's fsyncs; and the
//! rolling update's inconsistency window (first node on the new version to last).
//!
//! `cargo bench -p rdx-fleet --bench broadcast`

use rdx_control::{create_codeflow, ExtSpec, Extension};
use rdx_fleet::{broadcast, Options, Plan};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

const NODES: usize = 16;
const ROUNDS: usize = 10;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let pid = std::process::id();
    let mut hosts: Vec<(Child, String)> = (0..NODES)
        .map(|i| {
            let path = format!("/dev/shm/rdx-fleet-bench-{pid}-{i}");
            let mut c = Command::new(env!("CARGO_BIN_EXE_fleet-host"))
                .args(["--path", &path, "on_request"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start fleet-host");
            let mut l = String::new();
            BufReader::new(c.stdout.as_mut().unwrap())
                .read_line(&mut l)
                .unwrap();
            assert!(l.starts_with("ready"), "{l}");
            (c, format!("shm:{path}"))
        })
        .collect();
    let state = std::env::temp_dir().join(format!("rdx-fleet-bench-{pid}"));
    let plan = |v: u32| {
        let mut t = String::from("nodes:\n");
        for (i, (_, a)) in hosts.iter().enumerate() {
            t += &format!("  - {{name: n{i}, address: '{a}'}}\n");
        }
        t += &format!(
            "updates:\n  - {{hook: on_request, object: '{}', class: default}}\n",
            rdx_testdata::object_path(&format!("fleet/stamp_v{v}")).display()
        );
        Plan::from_yaml(&t, Path::new(".")).unwrap()
    };
    let opts = Options::new(&state);
    broadcast(&plan(1), &opts).expect("warm-up broadcast");
    let (mut total, mut prep, mut hold, mut flip, mut log) =
        (vec![], vec![], vec![], vec![], vec![]);
    for r in 0..ROUNDS {
        let rep = broadcast(&plan(2 - (r as u32 % 2)), &opts).expect("broadcast");
        total.push(rep.timings.commit_us);
        prep.push(rep.timings.prepare_us);
        hold.push(rep.timings.hold_us);
        flip.push(rep.timings.flip_us);
        log.push(rep.timings.log_us);
    }

    // Rolling update: attach, validate and compile first (as broadcast's check does), then
    // deploy node after node; the window is first publish to last publish.
    let exts: Vec<Extension> = [1, 2]
        .iter()
        .map(|v| {
            let o =
                rdx_bpf::loader::load(&rdx_testdata::object(&format!("fleet/stamp_v{v}"))).unwrap();
            Extension::from_object(&o, None).unwrap()
        })
        .collect();
    let mut cfs: Vec<_> = hosts
        .iter()
        .map(|(_, a)| create_codeflow(a, ExtSpec::default()).unwrap())
        .collect();
    let mut window = vec![];
    for r in 0..ROUNDS {
        let ext = &exts[r % 2];
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
        window.push(first.unwrap().elapsed().as_secs_f64() * 1e6);
    }
    for cf in &mut cfs {
        cf.release().unwrap();
    }

    println!("broadcast to {NODES} host processes (shm), median of {ROUNDS}:");
    println!("  total (prepare..release)  {:9.1} us", median(total));
    println!("  prepare                   {:9.1} us", median(prep));
    println!(
        "  hold bubble               {:9.1} us",
        median(hold.clone())
    );
    println!(
        "  flip (inside the bubble)  {:9.1} us",
        median(flip.clone())
    );
    println!("  intent log fsyncs         {:9.1} us", median(log));
    println!(
        "  inconsistency window      {:9.1} us (none: every node flips inside one bubble)",
        0.0
    );
    println!("rolling update, node after node, median of {ROUNDS}:");
    println!(
        "  inconsistency window      {:9.1} us (first node new .. last node new)",
        median(window.clone())
    );
    println!(
        "ratio: rolling window / broadcast flip = {:.1}x",
        median(window) / median(flip).max(1e-3)
    );
    for (c, _) in &mut hosts {
        let _ = writeln!(c.stdin.as_mut().unwrap(), "quit");
        let _ = c.wait();
    }
    let _ = std::fs::remove_dir_all(&state);
}
