//! Bulk copies through a local (shared-memory) region against a plain `memcpy` of the same
//! bytes, in one run: what an image or bank write costs per byte over `ShmTransport`.
//!
//! `cargo bench -p rdx-transport --bench bulk` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::time::Instant;

use rdx_transport::local::LocalRegion;
use rdx_transport::Transport;

const SIZES: [usize; 3] = [4 << 10, 730 << 10, 8 << 20];

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// Median GB/s of `op` over `samples` samples of `reps` calls each moving `bytes`.
fn rate(bytes: usize, samples: usize, mut op: impl FnMut()) -> f64 {
    let reps = (64 << 20) / bytes.max(1);
    let reps = reps.clamp(4, 20_000);
    op();
    let mut rates = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        for _ in 0..reps {
            op();
        }
        let secs = t.elapsed().as_secs_f64();
        rates.push((bytes * reps) as f64 / secs / 1e9);
    }
    median(rates)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let samples = if quick { 5 } else { 21 };
    let len = 16 << 20;
    let mut region_mem = vec![0u64; len / 8];
    // SAFETY: `region_mem` outlives `region`, is 8-byte aligned and is only touched through it.
    let region = unsafe { LocalRegion::from_raw(region_mem.as_mut_ptr() as *mut u8, len as u64) };
    let mut plain = vec![0u8; len];
    println!(
        "{:>9} {:>7} {:>12} {:>12} {:>8}",
        "bytes", "op", "region GB/s", "memcpy GB/s", "ratio"
    );
    for &size in &SIZES {
        let src: Vec<u8> = (0..size).map(|i| (i * 31 + 7) as u8).collect();
        let mut dst = vec![0u8; size];
        for (op, offset) in [("write", 4096u64), ("write+3", 4099)] {
            let ours = rate(size, samples, || {
                region.write(black_box(offset), black_box(&src)).unwrap()
            });
            let base = rate(size, samples, || {
                let at = offset as usize;
                plain[at..at + size].copy_from_slice(black_box(&src));
                black_box(&plain);
            });
            println!(
                "{size:>9} {op:>7} {ours:>12.2} {base:>12.2} {:>7.2}x",
                base / ours
            );
        }
        let ours = rate(size, samples, || {
            region.read(black_box(4096), black_box(&mut dst)).unwrap()
        });
        let base = rate(size, samples, || {
            dst.copy_from_slice(black_box(&plain[4096..4096 + size]));
            black_box(&dst);
        });
        println!(
            "{size:>9} {:>7} {ours:>12.2} {base:>12.2} {:>7.2}x",
            "read",
            base / ours
        );
    }
    drop(region_mem);
}
