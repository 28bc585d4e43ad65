//! Instructions processed and verification time on the control-plane bench's programs
//! (`crates/control/benches/injection.rs`; the generators are `rdx_test_support::programs`,
//! so the verifier is measured without a host) and on the ACL enforcement program
//! (`bpf/acl/enforce.c`), against the kernel's processed count and load time for the same
//! instructions in the same run.
//!
//! Run: `cargo bench -p rdx-verifier --bench control_shapes` (as root for the kernel column;
//! without `bpf()` it prints `n/a`). `-- --reps N` sets the repetitions (median; default 3);
//! `-- --no-kernel` leaves the kernel out.
//! The ACL program runs at an rdx hook whose context the kernel does not have, so it has no
//! kernel column.

use rdx_bpf::isa::Insn;
use rdx_bpf::{MapDef, MapOrigin, Program};
use rdx_region::layout::MapType;
use rdx_test_support::programs::{generate, path_sensitive, Shape};
use rdx_verifier::{verify_insns, EimSpec, VerifyOptions};
use std::time::{Duration, Instant};

fn array(name: &str, value_size: u32, max_entries: u32) -> MapDef {
    MapDef {
        name: name.into(),
        map_type: MapType::Array.into(),
        key_size: 4,
        value_size,
        max_entries,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    }
}

struct Case {
    label: &'static str,
    insns: Vec<Insn>,
    maps: Vec<MapDef>,
    opts: VerifyOptions,
    /// Loadable into the kernel as a socket filter (the generated programs).
    kernel: bool,
}

fn cases() -> Vec<Case> {
    let spec = EimSpec::from_yaml(&rdx_test_support::eim::bench_on_request()).expect("bench EIM");
    let control = VerifyOptions::eim(&spec, "on_request", "default").expect("bench class");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let acl_spec = EimSpec::from_yaml(
        &std::fs::read_to_string(root.join("bpf/acl/acl.yaml")).expect("bpf/acl/acl.yaml"),
    )
    .expect("acl spec");
    let acl = rdx_bpf::loader::load(&rdx_testdata::object("acl/enforce")).expect("enforce.o");
    let prog = acl.program("acl_enforce").expect("acl_enforce").clone();
    vec![
        Case {
            label: "1.3K map accesses",
            insns: generate(1, 1300, 30, Shape::MapAccesses),
            maps: vec![array("bench_vals", 8, 4)],
            opts: control.clone(),
            kernel: true,
        },
        Case {
            label: "10K path-sensitive",
            insns: path_sensitive(10_000, 5, 7),
            maps: vec![array("bench_wide", 1024, 1)],
            opts: control.clone(),
            kernel: true,
        },
        Case {
            label: "10K deep branching",
            insns: generate(2, 5000, 2, Shape::DeepBranching),
            maps: vec![array("bench_vals", 8, 4)],
            opts: control.clone(),
            kernel: true,
        },
        Case {
            label: "95K unrolled",
            insns: generate(10, 9500, 4, Shape::Unrolled),
            maps: vec![array("bench_vals", 8, 4)],
            opts: control,
            kernel: true,
        },
        Case {
            label: "ACL enforce.c",
            insns: prog.insns,
            maps: acl.maps,
            opts: VerifyOptions::eim(&acl_spec, "acl_packet", "acl").expect("acl class"),
            kernel: false,
        },
    ]
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Median load time and the kernel's processed count (from its statistics line).
fn kernel_load(case: &Case, reps: usize) -> Result<(Duration, u64), String> {
    rdx_kernel::probe().map_err(|e| e.to_string())?;
    let maps = rdx_kernel::create_maps(&case.maps).map_err(|e| e.to_string())?;
    let prog = Program {
        name: "rdx_bench".into(),
        section: "socket".into(),
        insns: case.insns.clone(),
    };
    const LOG_STATS: u32 = 4;
    let mut times = Vec::new();
    let mut processed = 0;
    for _ in 0..reps {
        let loaded = rdx_kernel::load_linked(
            &prog,
            rdx_kernel::ProgType::SocketFilter,
            &maps,
            "GPL",
            LOG_STATS,
        )
        .map_err(|e| e.to_string())?;
        times.push(loaded.load_time);
        processed = loaded
            .log
            .split_whitespace()
            .skip_while(|w| *w != "processed")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
    }
    Ok((median(times), processed))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reps = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(3usize)
        .max(1);
    let with_kernel = !args.iter().any(|a| a == "--no-kernel");
    println!(
        "{:<20} {:>6} {:>10} {:>11} {:>10} {:>11} {:>9}",
        "program", "insns", "rdx.proc", "rdx verify", "k.proc", "kernel load", "proc k/rdx"
    );
    for case in cases() {
        let mut times = Vec::new();
        let mut processed = 0;
        let mut verdict = String::from("accepted");
        for _ in 0..reps {
            let t = Instant::now();
            let r = verify_insns(&case.insns, &case.maps, &case.opts);
            times.push(t.elapsed());
            match r {
                Ok(v) => processed = v.processed_insns,
                Err(e) => verdict = format!("rejected: {e}"),
            }
        }
        let ours = median(times);
        let kernel = if case.kernel && with_kernel {
            kernel_load(&case, reps).map(Some)
        } else {
            Ok(None)
        };
        let (kp, kt, ratio) = match &kernel {
            Ok(Some((t, p))) => (
                p.to_string(),
                format!("{:.1} ms", t.as_secs_f64() * 1e3),
                format!("{:.2}", *p as f64 / processed.max(1) as f64),
            ),
            Ok(None) => ("-".into(), "-".into(), "-".into()),
            Err(e) => {
                eprintln!("kernel baseline unavailable: {e}");
                ("n/a".into(), "n/a".into(), "n/a".into())
            }
        };
        println!(
            "{:<20} {:>6} {:>10} {:>11} {:>10} {:>11} {:>9}",
            case.label,
            case.insns.len(),
            processed,
            format!("{:.1} ms", ours.as_secs_f64() * 1e3),
            kp,
            kt,
            ratio
        );
        if verdict != "accepted" {
            println!("  {verdict}");
        }
    }
}
