//! Kernel baseline for every corpus program (`bpf/tests/*.c`), measured in one run:
//!
//! - kernel run: mean time of one run under `BPF_PROG_TEST_RUN` (JIT-compiled by the kernel),
//!   as the kernel reports it for `repeat` runs;
//! - rdx run: mean time of one run of rdx's interpreter in checked mode, same program (as
//!   rdx's loader linked it), same frame, context built once as for the kernel;
//! - kernel load: median wall time of `BPF_PROG_LOAD` (verifier and JIT) of rdx's linked
//!   program, the number rdx's verifier and JIT are compared against.
//!
//! Run: `cargo bench -p rdx-kernel --bench kernel_vs_interp` (root needed for bpf()).

use std::time::{Duration, Instant};

use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, SkBuff, Vm, XdpMd};
use rdx_bpf::maps::MapSet;
use rdx_kernel::{create_maps, load_linked, KernelObject, ProgType, TestRunInput};

const KERNEL_REPEAT: u32 = 100_000;
const INTERP_RUNS: u32 = 20_000;
const LOADS: usize = 5;

fn frame() -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00];
    f.extend_from_slice(&[
        0x45, 0, 0, 60, 0x1c, 0x46, 0x40, 0, 64, 17, 0, 0, 192, 168, 1, 10, 10, 0, 0, 77,
    ]);
    f.extend_from_slice(&[0x9c, 0x51, 0x00, 0x35, 0, 40, 0, 0]);
    f.extend((0..32u8).map(|i| i.wrapping_mul(37) ^ 0x5a));
    f
}

fn main() {
    if let Err(e) = rdx_kernel::probe() {
        eprintln!("SKIPPED: the kernel baseline needs the bpf() system call: {e}");
        return;
    }
    let frame = frame();
    println!(
        "{:<20} {:>14} {:>14} {:>12} {:>14}",
        "program", "kernel ns/run", "rdx ns/run", "rdx/kernel", "kernel load us"
    );
    let mut ratios = Vec::new();
    for name in rdx_testdata::objects_in("tests") {
        let path = rdx_testdata::object_path(&name);
        let bytes = std::fs::read(&path).expect("object readable");
        let object = rdx_bpf::loader::load(&bytes).expect("rdx loads the corpus");
        let kernel = KernelObject::open(&path).expect("kernel loads the corpus");
        for program in &object.programs {
            let prog_type = ProgType::from_section(&program.section).expect("socket or xdp");
            let ctx = (prog_type == ProgType::SocketFilter).then(|| vec![0u8; 192]);
            let out = kernel
                .program(&program.name)
                .unwrap()
                .test_run(&TestRunInput {
                    data_in: &frame,
                    ctx_in: ctx.as_deref(),
                    repeat: KERNEL_REPEAT,
                })
                .expect("test run");
            let kernel_ns = out.duration.as_nanos() as f64;

            let maps = MapSet::new(&object.maps).unwrap();
            let vm = Vm::new(
                &program.insns,
                &maps,
                &Helpers::standard(),
                Config::default(),
            )
            .expect("interpreter prepares the corpus");
            let elapsed = match prog_type {
                ProgType::SocketFilter => {
                    let mut skb = SkBuff::socket_filter_test_run(&frame).unwrap();
                    time(|| {
                        vm.run_checked(Input::Context(&mut skb)).unwrap();
                    })
                }
                _ => {
                    let mut xdp = XdpMd::new(frame.clone());
                    time(|| {
                        vm.run_checked(Input::Context(&mut xdp)).unwrap();
                    })
                }
            };
            let rdx_ns = elapsed.as_nanos() as f64 / f64::from(INTERP_RUNS);

            let kernel_maps = create_maps(&object.maps).unwrap();
            let mut loads: Vec<Duration> = (0..LOADS)
                .map(|_| {
                    load_linked(program, prog_type, &kernel_maps, "GPL", 0)
                        .expect("kernel verifies rdx's linked program")
                        .load_time
                })
                .collect();
            loads.sort_unstable();
            let ratio = rdx_ns / kernel_ns.max(1.0);
            ratios.push(ratio);
            println!(
                "{:<20} {:>14.0} {:>14.0} {:>11.1}x {:>14.0}",
                program.name,
                kernel_ns,
                rdx_ns,
                ratio,
                loads[LOADS / 2].as_secs_f64() * 1e6
            );
        }
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "median rdx interpreter / kernel JIT time per run: {:.1}x over {} programs",
        ratios[ratios.len() / 2],
        ratios.len()
    );
}

fn time(mut run: impl FnMut()) -> Duration {
    for _ in 0..INTERP_RUNS / 10 {
        run();
    }
    let start = Instant::now();
    for _ in 0..INTERP_RUNS {
        run();
    }
    start.elapsed()
}
