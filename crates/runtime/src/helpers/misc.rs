//! Time, randomness, thread slot.

use crate::thread;

/// `bpf_ktime_get_ns`: `CLOCK_MONOTONIC` nanoseconds (through the vDSO, no system call).
pub(crate) unsafe extern "C" fn ktime_get_ns(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into our local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `bpf_get_prandom_u32`: a per-thread xorshift64* stream (not cryptographic, as in the kernel).
pub(crate) unsafe extern "C" fn get_prandom_u32(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let Some(ts) = thread::current() else {
        return 0;
    };
    let mut x = ts.rng | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    ts.rng = x;
    (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) & 0xffff_ffff
}

/// `bpf_get_smp_processor_id`: the calling thread's slot, which is what per-thread maps
/// index by (so the value is stable for the thread, unlike a CPU number).
pub(crate) unsafe extern "C" fn get_smp_processor_id(
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
) -> u64 {
    thread::current()
        .map(|ts| ts.slot_index as u64)
        .unwrap_or(0)
}
