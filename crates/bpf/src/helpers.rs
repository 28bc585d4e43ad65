//! Helper functions: the registry the interpreter calls through, the standard helpers, and
//! their native (`extern "C"`) twins for JIT-compiled code.
//!
//! A helper is a Rust function from a [`HelperCtx`] and the five argument registers to `r0`.
//! The context gives it checked access to program memory (in the interpreter's checked mode
//! every pointer argument is bounds-checked like a load or store), the maps of the program
//! (validated: a map argument must be the address of one of them) and the run's context.
//!
//! Native code calls [`native_helper`]`(id)`: the same helpers with the C ABI of
//! [`rdx_region::abi::HelperFn`], trusting their arguments as the kernel trusts a verified
//! program. Maps are the same objects in both tiers: `r1` of the map helpers is
//! [`Map::address`], which is what `lddw` of a map reference loads in both.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::interp::context::ContextModel;
use crate::interp::memory::{Access, Regions};
use crate::maps::{Map, MapSet, RingBuf, RINGBUF_HEADER};
use rdx_region::abi::HelperFn;

/// Standard helper ids, as in the kernel's `enum bpf_func_id`.
pub mod id {
    /// `bpf_map_lookup_elem(map, key)`: a pointer to the value, or null.
    pub const MAP_LOOKUP_ELEM: i32 = 1;
    /// `bpf_map_update_elem(map, key, value, flags)`: 0 or a negative errno.
    pub const MAP_UPDATE_ELEM: i32 = 2;
    /// `bpf_map_delete_elem(map, key)`: 0 or a negative errno.
    pub const MAP_DELETE_ELEM: i32 = 3;
    /// `bpf_ktime_get_ns()`: monotonic time in nanoseconds.
    pub const KTIME_GET_NS: i32 = 5;
    /// `bpf_trace_printk(fmt, fmt_size, ...)`: appends a formatted line to the trace log.
    pub const TRACE_PRINTK: i32 = 6;
    /// `bpf_get_prandom_u32()`: a pseudo-random 32-bit number.
    pub const GET_PRANDOM_U32: i32 = 7;
    /// `bpf_get_smp_processor_id()`: the running CPU (always 0 in the interpreter).
    pub const GET_SMP_PROCESSOR_ID: i32 = 8;
    /// `bpf_skb_load_bytes(skb, offset, to, len)`: copies packet bytes to the stack.
    pub const SKB_LOAD_BYTES: i32 = 26;
    /// `bpf_ringbuf_output(ringbuf, data, size, flags)`: copies a record into a ring buffer.
    pub const RINGBUF_OUTPUT: i32 = 130;
    /// `bpf_ringbuf_reserve(ringbuf, size, flags)`: a record to fill, or null.
    pub const RINGBUF_RESERVE: i32 = 131;
    /// `bpf_ringbuf_submit(record, flags)`: publishes a reserved record.
    pub const RINGBUF_SUBMIT: i32 = 132;
    /// `bpf_ringbuf_discard(record, flags)`: drops a reserved record.
    pub const RINGBUF_DISCARD: i32 = 133;
    /// `bpf_ringbuf_query(ringbuf, flags)`: one of a ring buffer's counters, chosen by `flags`.
    pub const RINGBUF_QUERY: i32 = 134;
    /// The conformance suite's "unwind" helper (shares the number of `ktime_get_ns`; it only
    /// exists in [`super::Helpers::conformance`]).
    pub const CONFORMANCE_UNWIND: i32 = 5;
}

/// Why a helper failed. A failing helper stops the program with an error naming the call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HelperError {
    /// A pointer argument reaches outside the memory the program may use.
    #[error("{len}-byte {what} at {addr:#x} is outside the program's memory")]
    OutOfBounds {
        /// What the pointer was for (`key`, `value`, ...).
        what: &'static str,
        /// The address.
        addr: u64,
        /// The bytes the helper would access.
        len: u64,
    },
    /// A helper would write read-only memory (the context or a `.rodata` value).
    #[error("{len}-byte write at {addr:#x} targets read-only memory")]
    ReadOnly {
        /// The address.
        addr: u64,
        /// The bytes the helper would write.
        len: u64,
    },
    /// A map argument that is not the address of one of the program's maps.
    #[error("{0:#x} is not the address of one of the program's maps")]
    NotAMap(u64),
    /// A packet helper called on a run without a packet context.
    #[error("this helper needs a packet context")]
    NoContext,
    /// Any other argument the helper refuses; the text says which and why.
    #[error("{0}")]
    Invalid(String),
}

/// A helper as the interpreter calls it.
pub type HelperImpl = fn(&mut HelperCtx<'_, '_>, [u64; 5]) -> Result<u64, HelperError>;

/// Per-VM state the standard helpers use: the `bpf_trace_printk` log and the random
/// generator.
#[derive(Debug)]
pub struct HelperEnv {
    trace: Mutex<Vec<String>>,
    rng: AtomicU64,
}

impl HelperEnv {
    /// A fresh environment: an empty trace log, the generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            trace: Mutex::new(Vec::new()),
            rng: AtomicU64::new(seed | 1),
        }
    }

    /// Takes every line `bpf_trace_printk` produced so far.
    pub fn take_trace(&self) -> Vec<String> {
        std::mem::take(&mut *self.trace.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn next_random(&self) -> u32 {
        // xorshift64*: fast, deterministic from the seed, good enough for sampling decisions.
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.store(x, Ordering::Relaxed);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }
}

/// What a helper sees of the running program.
pub struct HelperCtx<'r, 'c> {
    pub(crate) regions: &'r Regions<'r>,
    pub(crate) checked: bool,
    pub(crate) context: Option<&'c mut dyn ContextModel>,
    pub(crate) env: &'r HelperEnv,
    pub(crate) stop: bool,
}

impl HelperCtx<'_, '_> {
    fn check(&self, addr: u64, len: u64, write: bool) -> Result<(), HelperError> {
        if !self.checked {
            return Ok(());
        }
        match self.regions.access(addr, len, write) {
            Access::Plain => Ok(()),
            Access::ReadOnly => Err(HelperError::ReadOnly { addr, len }),
            Access::Context | Access::Denied => Err(HelperError::OutOfBounds {
                what: if write { "write" } else { "read" },
                addr,
                len,
            }),
        }
    }

    /// Copies `len` bytes of program memory at `addr`.
    pub fn read(&self, addr: u64, len: u64) -> Result<Vec<u8>, HelperError> {
        if len == 0 {
            return Ok(Vec::new());
        }
        self.check(addr, len, false)?;
        let mut out = vec![0u8; len as usize];
        // SAFETY: in checked mode the range was just checked against the run's regions; in
        // unchecked mode the caller of `run_unchecked` guaranteed a verified program, whose
        // helper arguments the verifier proved valid.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
        Ok(out)
    }

    /// Copies `bytes` into program memory at `addr`.
    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), HelperError> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.check(addr, bytes.len() as u64, true)?;
        // SAFETY: as in `read`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
        Ok(())
    }

    /// The map whose address a program passed.
    pub fn map(&self, addr: u64) -> Result<&Map, HelperError> {
        self.regions
            .maps
            .by_address(addr)
            .map(|m| &**m)
            .ok_or(HelperError::NotAMap(addr))
    }

    /// The program's maps.
    pub fn maps(&self) -> &MapSet {
        self.regions.maps
    }

    /// Ends the program after this helper returns; its result becomes `r0`.
    pub fn stop_program(&mut self) {
        self.stop = true;
    }

    /// The run's context model, if the program was started with one.
    pub fn context(&mut self) -> Option<&mut (dyn ContextModel + '_)> {
        match &mut self.context {
            Some(c) => Some(&mut **c),
            None => None,
        }
    }

    /// The helpers' shared environment (trace log, random generator).
    pub fn env(&self) -> &HelperEnv {
        self.env
    }
}

/// Helpers by id.
#[derive(Clone, Default)]
pub struct Helpers {
    by_id: BTreeMap<i32, (&'static str, HelperImpl)>,
}

impl std::fmt::Debug for Helpers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.by_id.iter().map(|(id, (name, _))| (id, name)))
            .finish()
    }
}

impl Helpers {
    /// No helpers at all.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The standard kernel-numbered helpers rdx implements: map lookup/update/delete (1-3),
    /// `ktime_get_ns` (5), `trace_printk` (6), `get_prandom_u32` (7),
    /// `get_smp_processor_id` (8), `skb_load_bytes` (26), and the ring buffer helpers
    /// `ringbuf_output` (130), `ringbuf_reserve` (131), `ringbuf_submit` (132),
    /// `ringbuf_discard` (133), `ringbuf_query` (134).
    pub fn standard() -> Self {
        let mut h = Self::empty();
        h.register(id::MAP_LOOKUP_ELEM, "bpf_map_lookup_elem", map_lookup_elem);
        h.register(id::MAP_UPDATE_ELEM, "bpf_map_update_elem", map_update_elem);
        h.register(id::MAP_DELETE_ELEM, "bpf_map_delete_elem", map_delete_elem);
        h.register(id::KTIME_GET_NS, "bpf_ktime_get_ns", ktime_get_ns);
        h.register(id::TRACE_PRINTK, "bpf_trace_printk", trace_printk);
        h.register(id::GET_PRANDOM_U32, "bpf_get_prandom_u32", get_prandom_u32);
        h.register(
            id::GET_SMP_PROCESSOR_ID,
            "bpf_get_smp_processor_id",
            get_smp_processor_id,
        );
        h.register(id::SKB_LOAD_BYTES, "bpf_skb_load_bytes", skb_load_bytes);
        h.register(id::RINGBUF_OUTPUT, "bpf_ringbuf_output", ringbuf_output);
        h.register(id::RINGBUF_RESERVE, "bpf_ringbuf_reserve", ringbuf_reserve);
        h.register(id::RINGBUF_SUBMIT, "bpf_ringbuf_submit", ringbuf_submit);
        h.register(id::RINGBUF_DISCARD, "bpf_ringbuf_discard", ringbuf_discard);
        h.register(id::RINGBUF_QUERY, "bpf_ringbuf_query", ringbuf_query);
        h
    }

    /// The helpers the bpf_conformance vectors expect: only helper 5, "unwind", which returns
    /// its first argument and ends the program when that is zero.
    pub fn conformance() -> Self {
        let mut h = Self::empty();
        h.register(id::CONFORMANCE_UNWIND, "unwind", conformance_unwind);
        h
    }

    /// Adds or replaces helper `id`.
    pub fn register(&mut self, id: i32, name: &'static str, f: HelperImpl) {
        self.by_id.insert(id, (name, f));
    }

    /// The interpreter's implementation of helper `id`, if registered.
    pub fn get(&self, id: i32) -> Option<HelperImpl> {
        self.by_id.get(&id).map(|(_, f)| *f)
    }

    /// The name helper `id` was registered under.
    pub fn name(&self, id: i32) -> Option<&'static str> {
        self.by_id.get(&id).map(|(n, _)| *n)
    }

    /// Every registered id, ascending.
    pub fn ids(&self) -> impl Iterator<Item = i32> + '_ {
        self.by_id.keys().copied()
    }
}

/// Errno values helpers return (negated), as the kernel's do.
const EFAULT: i64 = 14;
const EINVAL: i64 = 22;

fn map_lookup_elem(cx: &mut HelperCtx<'_, '_>, a: [u64; 5]) -> Result<u64, HelperError> {
    let map = cx.map(a[0])?;
    let key = cx.read(a[1], map.def().key_size as u64)?;
    Ok(map.lookup_ptr(&key).map_or(0, |p| p as u64))
}

fn map_update_elem(cx: &mut HelperCtx<'_, '_>, a: [u64; 5]) -> Result<u64, HelperError> {
    let map = cx.map(a[0])?;
    let key = cx.read(a[1], map.def().key_size as u64)?;
    let value = cx.read(a[2], map.def().value_size as u64)?;
    Ok(match map.update(&key, &value, a[3]) {
        Ok(()) => 0,
        Err(e) => e.errno() as u64,
    })
}

fn map_delete_elem(cx: &mut HelperCtx<'_, '_>, a: [u64; 5]) -> Result<u64, HelperError> {
    let map = cx.map(a[0])?;
    let key = cx.read(a[1], map.def().key_size as u64)?;
    Ok(match map.delete(&key) {
        Ok(()) => 0,
        Err(e) => e.errno() as u64,
    })
}

/// Monotonic nanoseconds, shared by the interpreter and native code so both tiers read the
/// same clock.
pub fn monotonic_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    // Offset by one second so that a program never sees time 0, as on a booted machine.
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1_000_000_000
}

fn ktime_get_ns(_: &mut HelperCtx<'_, '_>, _: [u64; 5]) -> Result<u64, HelperError> {
    Ok(monotonic_ns())
}

fn get_prandom_u32(cx: &mut HelperCtx<'_, '_>, _: [u64; 5]) -> Result<u64, HelperError> {
    Ok(cx.env.next_random() as u64)
}

fn get_smp_processor_id(_: &mut HelperCtx<'_, '_>, _: [u64; 5]) -> Result<u64, HelperError> {
    Ok(0)
}

/// Longest `%s` argument `bpf_trace_printk` follows, as the kernel limits it.
const MAX_TRACE_STR: usize = 64;

/// Formats a `bpf_trace_printk` format string: `%d %i %u %x %X %c %p %s %%` with optional
/// `l`/`ll`/`h`/`hh` length modifiers, at most three arguments. `read_str` fetches a
/// NUL-terminated string for `%s`.
pub fn format_trace(
    fmt: &[u8],
    args: [u64; 3],
    mut read_str: impl FnMut(u64) -> Result<Vec<u8>, HelperError>,
) -> Result<String, HelperError> {
    let fmt = match fmt.iter().position(|&b| b == 0) {
        Some(n) => &fmt[..n],
        None => fmt,
    };
    let mut out = String::new();
    let mut next = 0;
    let mut i = 0;
    let bad = |why: &str| HelperError::Invalid(format!("bpf_trace_printk: {why}"));
    while i < fmt.len() {
        let c = fmt[i];
        i += 1;
        if c != b'%' {
            out.push(c as char);
            continue;
        }
        if fmt.get(i) == Some(&b'%') {
            out.push('%');
            i += 1;
            continue;
        }
        let mut bits = 32;
        while let Some(&m) = fmt.get(i) {
            match m {
                b'l' => bits = 64,
                b'h' => bits = bits.min(16),
                _ => break,
            }
            i += 1;
        }
        let conv = *fmt
            .get(i)
            .ok_or_else(|| bad("format ends inside a conversion"))?;
        i += 1;
        let arg = *args
            .get(next)
            .ok_or_else(|| bad("more than three conversions"))?;
        next += 1;
        let v = if bits == 64 { arg } else { arg & 0xffff_ffff };
        let signed = |v: u64| -> i64 {
            if bits == 64 {
                v as i64
            } else {
                v as u32 as i32 as i64
            }
        };
        match conv {
            b'd' | b'i' => out.push_str(&signed(v).to_string()),
            b'u' => out.push_str(&v.to_string()),
            b'x' => out.push_str(&format!("{v:x}")),
            b'X' => out.push_str(&format!("{v:X}")),
            b'c' => out.push(v as u8 as char),
            b'p' => out.push_str(&format!("0x{arg:x}")),
            b's' => {
                let s = read_str(arg)?;
                out.push_str(&String::from_utf8_lossy(&s));
            }
            other => return Err(bad(&format!("unsupported conversion %{}", other as char))),
        }
    }
    Ok(out)
}

fn trace_printk(cx: &mut HelperCtx<'_, '_>, a: [u64; 5]) -> Result<u64, HelperError> {
    let fmt = cx.read(a[0], a[1])?;
    let line = format_trace(&fmt, [a[2], a[3], a[4]], |addr| {
        // Read byte by byte so that a string ending right at a region's end is fine.
        let mut s = Vec::new();
        for k in 0..MAX_TRACE_STR as u64 {
            let b = cx.read(addr + k, 1)?[0];
            if b == 0 {
                break;
            }
            s.push(b);
        }
        Ok(s)
    })?;
    let n = line.len() as u64;
    cx.env
        .trace
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(line.trim_end_matches('\n').to_string());
    Ok(n)
}

fn skb_load_bytes(cx: &mut HelperCtx<'_, '_>, a: [u64; 5]) -> Result<u64, HelperError> {
    let (offset, to, len) = (a[1] as u32 as usize, a[2], a[3] as u32 as usize);
    // Validate the destination before allocating anything of the program-chosen length.
    cx.check(to, len as u64, true)?;
    let ctx = cx.context().ok_or(HelperError::NoContext)?;
    let chunk = ctx
        .packet_bytes()
        .get(offset..offset.saturating_add(len))
        .map(|s| s.to_vec());
    match chunk {
        Some(bytes) => {
            cx.write(to, &bytes)?;
            Ok(0)
        }
        None => {
            // The kernel zeroes the destination on failure.
            cx.write(to, &vec![0; len])?;
            Ok((-EFAULT) as u64)
        }
    }
}

const EAGAIN: i64 = 11;

fn ringbuf_of<'m>(cx: &'m HelperCtx<'_, '_>, addr: u64) -> Result<&'m RingBuf, HelperError> {
    cx.map(addr)?
        .ringbuf()
        .ok_or_else(|| HelperError::Invalid(format!("map at {addr:#x} is not a ring buffer")))
}

fn ringbuf_output(cx: &mut HelperCtx<'_, '_>, a: [u64; 5]) -> Result<u64, HelperError> {
    let rb = ringbuf_of(cx, a[0])?;
    let data = cx.read(a[1], a[2])?;
    Ok(if rb.output(&data) {
        0
    } else {
        (-EAGAIN) as u64
    })
}

fn ringbuf_reserve(cx: &mut HelperCtx<'_, '_>, a: [u64; 5]) -> Result<u64, HelperError> {
    let rb = ringbuf_of(cx, a[0])?;
    Ok(rb.reserve(a[1]).unwrap_or(0))
}

/// The ring of the program's maps holding the reservation at `data`.
fn reservation_owner<'m>(cx: &'m HelperCtx<'_, '_>, data: u64) -> Result<&'m RingBuf, HelperError> {
    cx.maps()
        .iter()
        .filter_map(|m| m.ringbuf())
        .find(|rb| rb.owns_reservation(data))
        .ok_or_else(|| {
            HelperError::Invalid(format!("{data:#x} is not a reserved ring buffer record"))
        })
}

fn ringbuf_submit(cx: &mut HelperCtx<'_, '_>, a: [u64; 5]) -> Result<u64, HelperError> {
    reservation_owner(cx, a[0])?.submit(a[0]);
    Ok(0)
}

fn ringbuf_discard(cx: &mut HelperCtx<'_, '_>, a: [u64; 5]) -> Result<u64, HelperError> {
    reservation_owner(cx, a[0])?.discard(a[0]);
    Ok(0)
}

fn ringbuf_query(cx: &mut HelperCtx<'_, '_>, a: [u64; 5]) -> Result<u64, HelperError> {
    Ok(ringbuf_of(cx, a[0])?.query(a[1]))
}

fn conformance_unwind(cx: &mut HelperCtx<'_, '_>, a: [u64; 5]) -> Result<u64, HelperError> {
    if a[0] == 0 {
        cx.stop_program();
    }
    Ok(a[0])
}

// ---- native twins ---------------------------------------------------------------------------

/// # Safety
/// `map` must be a live [`Map::address`]; `key` must point to `key_size` readable bytes.
unsafe extern "C" fn native_map_lookup_elem(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: the verifier proved `map` is a map reference and `key` is key_size readable
    // bytes; the map outlives every program that references it.
    let map = unsafe { Map::from_address(map) };
    // SAFETY: `key` points to `key_size` readable bytes (the caller's contract), and the
    // slice does not outlive this call.
    let key = unsafe { std::slice::from_raw_parts(key as *const u8, map.def().key_size as usize) };
    map.lookup_ptr(key).map_or(0, |p| p as u64)
}

/// # Safety
/// As for lookup, and `value` must point to `value_size` readable bytes.
unsafe extern "C" fn native_map_update_elem(
    map: u64,
    key: u64,
    value: u64,
    flags: u64,
    _: u64,
) -> u64 {
    // SAFETY: as in `native_map_lookup_elem`.
    let map = unsafe { Map::from_address(map) };
    // SAFETY: `key` points to `key_size` readable bytes (the caller's contract), and the
    // slice does not outlive this call.
    let key = unsafe { std::slice::from_raw_parts(key as *const u8, map.def().key_size as usize) };
    // SAFETY: likewise `value`, `value_size` readable bytes.
    let value =
        unsafe { std::slice::from_raw_parts(value as *const u8, map.def().value_size as usize) };
    match map.update(key, value, flags) {
        Ok(()) => 0,
        Err(e) => e.errno() as u64,
    }
}

/// # Safety
/// As for lookup.
unsafe extern "C" fn native_map_delete_elem(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: as in `native_map_lookup_elem`.
    let map = unsafe { Map::from_address(map) };
    // SAFETY: `key` points to `key_size` readable bytes (the caller's contract), and the
    // slice does not outlive this call.
    let key = unsafe { std::slice::from_raw_parts(key as *const u8, map.def().key_size as usize) };
    match map.delete(key) {
        Ok(()) => 0,
        Err(e) => e.errno() as u64,
    }
}

unsafe extern "C" fn native_ktime_get_ns(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    monotonic_ns()
}

unsafe extern "C" fn native_get_prandom_u32(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    static NATIVE_RNG: OnceLock<HelperEnv> = OnceLock::new();
    NATIVE_RNG
        .get_or_init(|| HelperEnv::new(0x9e37_79b9_7f4a_7c15))
        .next_random() as u64
}

unsafe extern "C" fn native_get_smp_processor_id(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    0
}

/// # Safety
/// `fmt` must point to `fmt_size` readable bytes and `%s` arguments to NUL-terminated strings.
unsafe extern "C" fn native_trace_printk(fmt: u64, fmt_size: u64, a: u64, b: u64, c: u64) -> u64 {
    // SAFETY: the verifier proved the format buffer readable.
    let fmt = unsafe { std::slice::from_raw_parts(fmt as *const u8, fmt_size as usize) };
    let line = format_trace(fmt, [a, b, c], |addr| {
        let mut s = Vec::new();
        for k in 0..MAX_TRACE_STR {
            // SAFETY: the verifier proved `%s` arguments readable up to their NUL.
            let byte = unsafe { *((addr as usize + k) as *const u8) };
            if byte == 0 {
                break;
            }
            s.push(byte);
        }
        Ok(s)
    });
    match line {
        Ok(line) => {
            eprintln!("bpf_trace_printk: {}", line.trim_end_matches('\n'));
            line.len() as u64
        }
        Err(_) => (-EINVAL) as u64,
    }
}

/// # Safety
/// `map` must be a live ring buffer map's address; `data` must point to `size` readable bytes.
unsafe extern "C" fn native_ringbuf_output(map: u64, data: u64, size: u64, _: u64, _: u64) -> u64 {
    // SAFETY: the verifier proved `map` a ring buffer reference and `data` readable.
    let map = unsafe { Map::from_address(map) };
    // SAFETY: `data` points to `size` readable bytes (the caller's contract), and the slice
    // does not outlive this call.
    let bytes = unsafe { std::slice::from_raw_parts(data as *const u8, size as usize) };
    match map.ringbuf() {
        Some(rb) if rb.output(bytes) => 0,
        _ => (-EAGAIN) as u64,
    }
}

/// # Safety
/// `map` must be a live ring buffer map's address.
unsafe extern "C" fn native_ringbuf_reserve(map: u64, size: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: the verifier proved `map` a ring buffer reference.
    let map = unsafe { Map::from_address(map) };
    map.ringbuf().and_then(|rb| rb.reserve(size)).unwrap_or(0)
}

/// The ring a reservation belongs to, from the header before its data.
///
/// # Safety
/// `data` must be a pointer `bpf_ringbuf_reserve` returned and not yet submitted or discarded.
unsafe fn native_owner<'a>(data: u64) -> &'a RingBuf {
    // SAFETY: the verifier tracks reservations, so `data` follows a header written by
    // `RingBuf::reserve`, which holds the address of the (live) ring.
    unsafe { &*(((data - RINGBUF_HEADER) as *const u64).read() as *const RingBuf) }
}

/// # Safety
/// As for [`native_owner`].
unsafe extern "C" fn native_ringbuf_submit(data: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: guaranteed by the caller.
    unsafe { native_owner(data) }.submit(data);
    0
}

/// # Safety
/// As for [`native_owner`].
unsafe extern "C" fn native_ringbuf_discard(data: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: guaranteed by the caller.
    unsafe { native_owner(data) }.discard(data);
    0
}

/// # Safety
/// `map` must be a live ring buffer map's address.
unsafe extern "C" fn native_ringbuf_query(map: u64, flags: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: the verifier proved `map` a ring buffer reference.
    let map = unsafe { Map::from_address(map) };
    map.ringbuf().map_or(0, |rb| rb.query(flags))
}

/// The native (C ABI) version of standard helper `id`, for JIT-compiled code: map helpers
/// (1-3, `r1` = [`Map::address`]), `ktime_get_ns` (5), `trace_printk` (6, printed to stderr),
/// `get_prandom_u32` (7), `get_smp_processor_id` (8), and the ring buffer helpers (130-134;
/// submit and discard find their ring from the record's header). Helpers that need the
/// interpreter's context model (`skb_load_bytes`) have no native twin.
pub fn native_helper(id: i32) -> Option<HelperFn> {
    Some(match id {
        id::MAP_LOOKUP_ELEM => native_map_lookup_elem,
        id::MAP_UPDATE_ELEM => native_map_update_elem,
        id::MAP_DELETE_ELEM => native_map_delete_elem,
        id::KTIME_GET_NS => native_ktime_get_ns,
        id::TRACE_PRINTK => native_trace_printk,
        id::GET_PRANDOM_U32 => native_get_prandom_u32,
        id::GET_SMP_PROCESSOR_ID => native_get_smp_processor_id,
        id::RINGBUF_OUTPUT => native_ringbuf_output,
        id::RINGBUF_RESERVE => native_ringbuf_reserve,
        id::RINGBUF_SUBMIT => native_ringbuf_submit,
        id::RINGBUF_DISCARD => native_ringbuf_discard,
        id::RINGBUF_QUERY => native_ringbuf_query,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{MapDef, MapOrigin, MapType};

    #[test]
    fn trace_format() {
        let s = format_trace(b"x=%d y=%lx %s %%\n\0junk", [u64::MAX, 255, 7], |a| {
            assert_eq!(a, 7);
            Ok(b"str".to_vec())
        })
        .unwrap();
        assert_eq!(s, "x=-1 y=ff str %\n");
        assert!(format_trace(b"%d %d %d %d", [0; 3], |_| Ok(vec![])).is_err());
        assert!(format_trace(b"%q", [0; 3], |_| Ok(vec![])).is_err());
    }

    #[test]
    fn native_map_helpers_share_the_map() {
        let map = Map::new(&MapDef {
            name: "h".into(),
            map_type: MapType::Hash,
            key_size: 4,
            value_size: 8,
            max_entries: 4,
            flags: 0,
            origin: MapOrigin::Btf,
            initial_value: None,
            read_only: false,
        })
        .unwrap();
        let update = native_helper(id::MAP_UPDATE_ELEM).unwrap();
        let lookup = native_helper(id::MAP_LOOKUP_ELEM).unwrap();
        let key = 9u32.to_le_bytes();
        let value = 77u64.to_le_bytes();
        // SAFETY: live map, valid key and value buffers.
        let rc = unsafe {
            update(
                map.address(),
                key.as_ptr() as u64,
                value.as_ptr() as u64,
                0,
                0,
            )
        };
        assert_eq!(rc, 0);
        assert_eq!(map.lookup(&key).unwrap(), value);
        // SAFETY: as above.
        let p = unsafe { lookup(map.address(), key.as_ptr() as u64, 0, 0, 0) };
        assert_eq!(p, map.lookup_ptr(&key).unwrap() as u64);
        assert!(native_helper(12345).is_none());
    }

    #[test]
    fn native_ringbuf_round_trip() {
        let map = Map::new(&MapDef {
            name: "rb".into(),
            map_type: MapType::RingBuf,
            key_size: 0,
            value_size: 0,
            max_entries: 4096,
            flags: 0,
            origin: MapOrigin::Btf,
            initial_value: None,
            read_only: false,
        })
        .unwrap();
        let reserve = native_helper(id::RINGBUF_RESERVE).unwrap();
        let submit = native_helper(id::RINGBUF_SUBMIT).unwrap();
        let discard = native_helper(id::RINGBUF_DISCARD).unwrap();
        // SAFETY: live ring buffer map; the records are used as reserved.
        unsafe {
            let a = reserve(map.address(), 4, 0, 0, 0);
            assert_ne!(a, 0);
            (a as *mut u32).write_unaligned(0xdead_beef);
            let b = reserve(map.address(), 4, 0, 0, 0);
            discard(b, 0, 0, 0, 0);
            submit(a, 0, 0, 0, 0);
        }
        let records = map.ringbuf().unwrap().consume();
        assert_eq!(records, vec![0xdead_beefu32.to_le_bytes().to_vec()]);
    }
}
