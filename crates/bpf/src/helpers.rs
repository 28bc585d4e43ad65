//! Helper functions: the registry the interpreter calls through, the standard helpers, and
//! their native (`extern "C"`) twins for JIT-compiled code.
//!
//! A helper is a Rust function from a [`HelperCtx`] and the five argument registers to `r0`.
//! The context gives it checked access to program memory (in the interpreter's checked mode
//! every pointer argument is bounds-checked like a load or store), the maps of the program
//! (validated: a map argument must be the address of one of them) and the run's context.
//!
//! Both sets bind entries of the ABI's helper table ([`rdx_region::helpers`]): the
//! interpreter every entry bound by [`Binders::INTERPRETER`] (and, for the conformance
//! vectors, [`Binders::CONFORMANCE`]), the native twins every entry bound by
//! [`Binders::NATIVE`]; a test checks both against the table.
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
use rdx_region::helpers::{Binders, Helper, HelperId};

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

/// Helpers by id: implementations bound to entries of the helper table.
#[derive(Clone, Default)]
pub struct Helpers {
    by_id: BTreeMap<HelperId, (&'static Helper, HelperImpl)>,
}

impl std::fmt::Debug for Helpers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.by_id.iter().map(|(id, (h, _))| (id, h.name)))
            .finish()
    }
}

impl Helpers {
    /// No helpers at all.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Every helper of the table the interpreter binds ([`Binders::INTERPRETER`]): map
    /// lookup/update/delete, `ktime_get_ns`, `trace_printk` (lines collected for
    /// [`HelperEnv::take_trace`]), `get_prandom_u32`, `get_smp_processor_id`,
    /// `skb_load_bytes` and the ring buffer helpers.
    pub fn standard() -> Self {
        Self::binding(Binders::INTERPRETER, interpreter_helper)
    }

    /// The helpers the bpf_conformance vectors expect ([`Binders::CONFORMANCE`]): only
    /// `unwind`, which returns its first argument and ends the program when that is zero.
    pub fn conformance() -> Self {
        Self::binding(Binders::CONFORMANCE, |id| {
            (id == HelperId::CONFORMANCE_UNWIND).then_some(conformance_unwind as HelperImpl)
        })
    }

    fn binding(binder: Binders, implementation: impl Fn(HelperId) -> Option<HelperImpl>) -> Self {
        let mut h = Self::empty();
        for helper in rdx_region::helpers::bound_by(binder) {
            let f = implementation(helper.id)
                .unwrap_or_else(|| panic!("no implementation of helper {}", helper.name));
            h.register(helper, f);
        }
        h
    }

    /// Binds `f` to `helper`, replacing what was bound to its id.
    pub fn register(&mut self, helper: &'static Helper, f: HelperImpl) {
        self.by_id.insert(helper.id, (helper, f));
    }

    /// The implementation bound to `id`.
    pub fn get(&self, id: HelperId) -> Option<HelperImpl> {
        self.by_id.get(&id).map(|(_, f)| *f)
    }
}

/// The interpreter's implementation of table entry `id`.
fn interpreter_helper(id: HelperId) -> Option<HelperImpl> {
    Some(match id {
        HelperId::MAP_LOOKUP_ELEM => map_lookup_elem,
        HelperId::MAP_UPDATE_ELEM => map_update_elem,
        HelperId::MAP_DELETE_ELEM => map_delete_elem,
        HelperId::KTIME_GET_NS => ktime_get_ns,
        HelperId::TRACE_PRINTK => trace_printk,
        HelperId::GET_PRANDOM_U32 => get_prandom_u32,
        HelperId::GET_SMP_PROCESSOR_ID => get_smp_processor_id,
        HelperId::SKB_LOAD_BYTES => skb_load_bytes,
        HelperId::RINGBUF_OUTPUT => ringbuf_output,
        HelperId::RINGBUF_RESERVE => ringbuf_reserve,
        HelperId::RINGBUF_SUBMIT => ringbuf_submit,
        HelperId::RINGBUF_DISCARD => ringbuf_discard,
        HelperId::RINGBUF_QUERY => ringbuf_query,
        _ => return None,
    })
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

/// The native (C ABI) version of helper `id`, for JIT-compiled code: every entry of the
/// table bound by [`Binders::NATIVE`] — map helpers (`r1` = [`Map::address`]),
/// `ktime_get_ns`, `trace_printk` (printed to stderr), `get_prandom_u32`,
/// `get_smp_processor_id`, and the ring buffer helpers (submit and discard find their ring
/// from the record's header). Helpers that need the interpreter's context model
/// (`skb_load_bytes`) have no native twin.
pub fn native_helper(id: HelperId) -> Option<HelperFn> {
    Some(match id {
        HelperId::MAP_LOOKUP_ELEM => native_map_lookup_elem,
        HelperId::MAP_UPDATE_ELEM => native_map_update_elem,
        HelperId::MAP_DELETE_ELEM => native_map_delete_elem,
        HelperId::KTIME_GET_NS => native_ktime_get_ns,
        HelperId::TRACE_PRINTK => native_trace_printk,
        HelperId::GET_PRANDOM_U32 => native_get_prandom_u32,
        HelperId::GET_SMP_PROCESSOR_ID => native_get_smp_processor_id,
        HelperId::RINGBUF_OUTPUT => native_ringbuf_output,
        HelperId::RINGBUF_RESERVE => native_ringbuf_reserve,
        HelperId::RINGBUF_SUBMIT => native_ringbuf_submit,
        HelperId::RINGBUF_DISCARD => native_ringbuf_discard,
        HelperId::RINGBUF_QUERY => native_ringbuf_query,
        _ => return None,
    })
}

/// Every native twin with its id, for a symbol table that links JIT-compiled code.
pub fn native_helpers() -> impl Iterator<Item = (HelperId, HelperFn)> {
    rdx_region::helpers::bound_by(Binders::NATIVE)
        .filter_map(|h| native_helper(h.id).map(|f| (h.id, f)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::{MapDef, MapOrigin};
    use rdx_region::layout::MapType;

    /// The ids `implementation` answers for, up to beyond the largest table id.
    fn implemented(implementation: impl Fn(HelperId) -> bool) -> Vec<HelperId> {
        (0..4096)
            .map(HelperId::new)
            .filter(|id| implementation(*id))
            .collect()
    }

    fn table_ids(binder: Binders) -> Vec<HelperId> {
        let mut ids: Vec<_> = rdx_region::helpers::bound_by(binder)
            .map(|h| h.id)
            .collect();
        ids.sort();
        ids
    }

    #[test]
    fn interpreter_and_native_sets_bind_exactly_their_table_entries() {
        assert_eq!(
            implemented(|id| interpreter_helper(id).is_some()),
            table_ids(Binders::INTERPRETER)
        );
        let standard = Helpers::standard();
        assert_eq!(
            implemented(|id| standard.get(id).is_some()),
            table_ids(Binders::INTERPRETER)
        );
        assert_eq!(
            implemented(|id| native_helper(id).is_some()),
            table_ids(Binders::NATIVE)
        );
        assert_eq!(
            native_helpers().map(|(id, _)| id).collect::<Vec<_>>(),
            table_ids(Binders::NATIVE)
        );
        let conformance = Helpers::conformance();
        assert_eq!(
            implemented(|id| conformance.get(id).is_some()),
            table_ids(Binders::CONFORMANCE)
        );
    }

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
            map_type: MapType::Hash.into(),
            key_size: 4,
            value_size: 8,
            max_entries: 4,
            flags: 0,
            origin: MapOrigin::Btf,
            initial_value: None,
            read_only: false,
        })
        .unwrap();
        let update = native_helper(HelperId::MAP_UPDATE_ELEM).unwrap();
        let lookup = native_helper(HelperId::MAP_LOOKUP_ELEM).unwrap();
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
        assert!(native_helper(HelperId::new(12345)).is_none());
    }

    #[test]
    fn native_ringbuf_round_trip() {
        let map = Map::new(&MapDef {
            name: "rb".into(),
            map_type: MapType::RingBuf.into(),
            key_size: 0,
            value_size: 0,
            max_entries: 4096,
            flags: 0,
            origin: MapOrigin::Btf,
            initial_value: None,
            read_only: false,
        })
        .unwrap();
        let reserve = native_helper(HelperId::RINGBUF_RESERVE).unwrap();
        let submit = native_helper(HelperId::RINGBUF_SUBMIT).unwrap();
        let discard = native_helper(HelperId::RINGBUF_DISCARD).unwrap();
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
