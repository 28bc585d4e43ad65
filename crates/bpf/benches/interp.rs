//! rdx's interpreter (checked and unchecked) against rbpf 0.4's interpreter, on the same
//! programs and inputs, in one run.
//!
//! `cargo bench -p rdx-bpf --bench interp` prints criterion's statistics for every program and
//! tier, then a summary table with each tier's time per run and the ratio rbpf / rdx (above 1
//! means rdx is faster). Every program's result is compared across the three tiers first.

use std::time::{Duration, Instant};

use criterion::{black_box, Criterion};
use rdx_bpf::asm::assemble;
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Vm};
use rdx_bpf::isa::{encode, raw_to_bytes};
use rdx_bpf::maps::MapSet;

/// Internet-style checksum: sum of 16-bit words over 1500 bytes, folded.
const CHECKSUM: &str = "
    mov %r0, 0
    mov %r3, %r1
    add %r3, 1500
loop:
    ldxh %r4, [%r1]
    add %r0, %r4
    add %r1, 2
    jlt %r1, %r3, loop
    mov %r4, %r0
    rsh %r4, 16
    and %r0, 0xffff
    add %r0, %r4
    mov %r4, %r0
    rsh %r4, 16
    and %r0, 0xffff
    add %r0, %r4
    xor %r0, 0xffff
    exit";

/// FNV-1a over 1024 bytes.
const FNV1A: &str = "
    lddw %r0, 0xcbf29ce484222325
    lddw %r5, 0x100000001b3
    mov %r3, %r1
    add %r3, 1024
loop:
    ldxb %r4, [%r1]
    xor %r0, %r4
    mul %r0, %r5
    add %r1, 1
    jlt %r1, %r3, loop
    exit";

/// Copies 32 u32 values to the stack and bubble-sorts them; returns first | last << 32.
const BUBBLE_SORT: &str = "
    mov %r2, %r10
    add %r2, -128
    mov %r3, 0
copy:
    mov %r4, %r1
    add %r4, %r3
    ldxw %r5, [%r4]
    mov %r4, %r2
    add %r4, %r3
    stxw [%r4], %r5
    add %r3, 4
    jlt %r3, 128, copy
    mov %r6, 31
outer:
    mov %r3, 0
    mov %r7, %r6
    lsh %r7, 2
inner:
    mov %r4, %r2
    add %r4, %r3
    ldxw %r5, [%r4]
    ldxw %r8, [%r4+4]
    jle %r5, %r8, noswap
    stxw [%r4], %r8
    stxw [%r4+4], %r5
noswap:
    add %r3, 4
    jlt %r3, %r7, inner
    sub %r6, 1
    jne %r6, 0, outer
    ldxw %r0, [%r2]
    ldxw %r5, [%r2+124]
    lsh %r5, 32
    or %r0, %r5
    exit";

/// Sieve of Eratosthenes over a 512-byte stack array: the number of primes below 512.
const SIEVE: &str = "
    mov %r2, %r10
    add %r2, -512
    mov %r3, 0
zero:
    mov %r4, %r2
    add %r4, %r3
    stdw [%r4], 0
    add %r3, 8
    jlt %r3, 512, zero
    mov %r0, 0
    mov %r3, 2
outer:
    mov %r4, %r2
    add %r4, %r3
    ldxb %r5, [%r4]
    jne %r5, 0, next
    add %r0, 1
    mov %r6, %r3
    mul %r6, %r3
    jge %r6, 512, next
mark:
    mov %r4, %r2
    add %r4, %r6
    stb [%r4], 1
    add %r6, %r3
    jlt %r6, 512, mark
next:
    add %r3, 1
    jlt %r3, 512, outer
    exit";

/// Trial-division primality over 2..400 (division and modulo heavy): the number of primes.
const TRIAL_DIVISION: &str = "
    mov %r0, 0
    mov %r1, 2
candidate:
    mov %r2, 2
divisor:
    mov %r3, %r2
    mul %r3, %r2
    jgt %r3, %r1, prime
    mov %r4, %r1
    mod %r4, %r2
    jeq %r4, 0, composite
    add %r2, 1
    ja divisor
prime:
    add %r0, 1
composite:
    add %r1, 1
    jlt %r1, 400, candidate
    exit";

struct Case {
    name: &'static str,
    src: &'static str,
    mem: Vec<u8>,
}

fn cases() -> Vec<Case> {
    let pseudo = |n: usize, seed: u32| -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    };
    vec![
        Case {
            name: "checksum_1500B",
            src: CHECKSUM,
            mem: pseudo(1500, 1),
        },
        Case {
            name: "fnv1a_1KiB",
            src: FNV1A,
            mem: pseudo(1024, 2),
        },
        Case {
            name: "bubble_sort_32",
            src: BUBBLE_SORT,
            mem: pseudo(128, 3),
        },
        Case {
            name: "sieve_512",
            src: SIEVE,
            mem: vec![0; 8],
        },
        Case {
            name: "trial_division_400",
            src: TRIAL_DIVISION,
            mem: vec![0; 8],
        },
    ]
}

struct Prepared {
    name: &'static str,
    vm: Vm,
    rbpf: rbpf::EbpfVmMbuff<'static>,
    mem: Vec<u8>,
}

fn prepare() -> Vec<Prepared> {
    cases()
        .into_iter()
        .map(|c| {
            let insns = assemble(c.src).expect("benchmark program assembles");
            let bytes: &'static [u8] = Box::leak(raw_to_bytes(&encode(&insns)).into_boxed_slice());
            let vm = Vm::new(
                &insns,
                &MapSet::default(),
                &Helpers::standard(),
                Config::default(),
            )
            .expect("benchmark program prepares");
            let rbpf = rbpf::EbpfVmMbuff::new(Some(bytes)).expect("rbpf accepts the program");
            let mut mem = c.mem.clone();
            let checked = vm.run_checked(Input::Bytes(&mut mem)).expect("checked run");
            let mut mem = c.mem.clone();
            // SAFETY: the program just completed in checked mode on the same input.
            let unchecked = unsafe { vm.run_unchecked(Input::Bytes(&mut mem)) }.unwrap();
            let theirs = rbpf.execute_program(&c.mem, &[]).expect("rbpf run");
            assert_eq!(checked, unchecked, "{}: checked vs unchecked", c.name);
            assert_eq!(checked, theirs, "{}: rdx vs rbpf", c.name);
            Prepared {
                name: c.name,
                vm,
                rbpf,
                mem: c.mem,
            }
        })
        .collect()
}

fn run_checked(p: &Prepared, mem: &mut [u8]) -> u64 {
    p.vm.run_checked(Input::Bytes(mem)).unwrap()
}

fn run_unchecked(p: &Prepared, mem: &mut [u8]) -> u64 {
    // SAFETY: `prepare` ran every program to completion in checked mode on this input; runs
    // are deterministic, so this run makes the same (checked) accesses.
    unsafe { p.vm.run_unchecked(Input::Bytes(mem)) }.unwrap()
}

fn run_rbpf(p: &Prepared, mem: &mut [u8]) -> u64 {
    p.rbpf.execute_program(mem, &[]).unwrap()
}

type Runner = fn(&Prepared, &mut [u8]) -> u64;
const TIERS: [(&str, Runner); 3] = [
    ("rdx_checked", run_checked),
    ("rdx_unchecked", run_unchecked),
    ("rbpf", run_rbpf),
];

/// Median nanoseconds per run over several timed batches.
fn ns_per_run(p: &Prepared, f: Runner) -> f64 {
    let mut mem = p.mem.clone();
    let start = Instant::now();
    let mut calib = 0u64;
    while start.elapsed() < Duration::from_millis(50) {
        black_box(f(p, &mut mem));
        calib += 1;
    }
    let batch = calib.max(1);
    let mut samples: Vec<f64> = (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..batch {
                black_box(f(p, &mut mem));
            }
            t.elapsed().as_nanos() as f64 / batch as f64
        })
        .collect();
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    samples[samples.len() / 2]
}

fn main() {
    let programs = prepare();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20)
        .configure_from_args();
    for p in &programs {
        let mut group = c.benchmark_group(p.name);
        for (tier, f) in TIERS {
            let mut mem = p.mem.clone();
            group.bench_function(tier, |b| b.iter(|| black_box(f(p, &mut mem))));
        }
        group.finish();
    }
    c.final_summary();

    println!();
    println!(
        "{:<20} {:>14} {:>14} {:>12} {:>16} {:>18}",
        "program", "rdx checked", "rdx unchecked", "rbpf", "rbpf/checked", "rbpf/unchecked"
    );
    for p in &programs {
        let [checked, unchecked, theirs] = TIERS.map(|(_, f)| ns_per_run(p, f));
        println!(
            "{:<20} {:>11.0} ns {:>11.0} ns {:>9.0} ns {:>15.2}x {:>17.2}x",
            p.name,
            checked,
            unchecked,
            theirs,
            theirs / checked,
            theirs / unchecked
        );
    }
}
