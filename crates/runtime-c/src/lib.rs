//! `rdx-runtime-c`: the C ABI (`include/rdx.h`) of the rdx data-plane runtime, built as
//! `librdx_runtime_c.a` and `librdx_runtime_c.so`. Every function is thread-safe; errors are
//! negative errno values, with a message for the calling thread in [`rdx_last_error`].
//!
//! It wraps `rdx-runtime`'s Rust API and nothing else: like that crate, it contains no code
//! that loads, parses, verifies or compiles extensions.
//!
//! With the `fabric` feature, [`rdx_register`] also serves the region across hosts when the
//! environment asks for it (`RDX_FABRIC_LISTEN`, see `rdx_fabric::serve_from_env`); the
//! server lives in the handle until [`rdx_teardown`].

use rdx_region::abi::HelperFn;
use rdx_runtime::{HookSpec, Runtime, RuntimeError};
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::sync::Mutex;
use std::time::Duration;

/// The variable by which a host opts in to being served over the fabric.
const ENV_FABRIC_LISTEN: &str = "RDX_FABRIC_LISTEN";

/// Opaque runtime handle.
pub struct RdxRuntime {
    rt: Runtime,
    path: CString,
    fabric: Mutex<Option<Served>>,
}

/// The region's fabric server and its bootstrap address as C text. Never replaced once set,
/// so the address string stays valid until teardown.
struct Served {
    #[cfg(feature = "fabric")]
    _server: rdx_fabric::FabricServer,
    address: CString,
}

/// Opaque hook handle: owns a reference to its runtime.
pub struct RdxHook {
    rt: Runtime,
    index: u32,
    default_return: u64,
}

/// `rdx_init` options; zero fields take defaults.
#[repr(C)]
pub struct RdxOptions {
    /// Region file path (NUL-terminated) or null for a fresh `/dev/shm/rdx-<pid>-<16 random hex digits>`.
    pub path: *const c_char,
    /// EIM spec bytes (may be null when `eim_len` is 0).
    pub eim: *const u8,
    /// Bytes at `eim`.
    pub eim_len: usize,
    /// Hook slots (0: the default).
    pub max_hooks: u32,
    /// Thread slots (0: the default).
    pub thread_slots: u32,
    /// Bytes of the code arena (0: the default).
    pub code_size: u64,
    /// Bytes of the XState scratchpad (0: the default).
    pub scratch_size: u64,
    /// Longest wait on a held hook slot, in ns (0: the default).
    pub hold_timeout_ns: u64,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn fail(e: RuntimeError) -> i32 {
    let code = match &e {
        RuntimeError::Io { source, .. } | RuntimeError::AddressClash { source, .. } => {
            source.raw_os_error().unwrap_or(libc::EIO)
        }
        RuntimeError::HookExists(_) | RuntimeError::Duplicate { .. } => libc::EEXIST,
        RuntimeError::NoSuchHook(_) => libc::ENOENT,
        RuntimeError::TooManyHooks(_) | RuntimeError::ContextFull(_) => libc::ENOSPC,
        RuntimeError::TornDown => libc::ESHUTDOWN,
        // A region file another user made or can write, or a link (docs/security.md).
        RuntimeError::UntrustedRegion { .. } => libc::EPERM,
        _ => libc::EINVAL,
    };
    set_error(&e.to_string());
    -code
}

fn set_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// # Safety
/// `s` is null or a NUL-terminated string.
unsafe fn str_arg<'a>(s: *const c_char, what: &str) -> Result<&'a str, i32> {
    if s.is_null() {
        set_error(&format!("{what} is null"));
        return Err(-libc::EINVAL);
    }
    // SAFETY: by the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_str().map_err(|_| {
        set_error(&format!("{what} is not UTF-8"));
        -libc::EINVAL
    })
}

/// The calling thread's last error message (valid until its next failing call).
#[no_mangle]
pub extern "C" fn rdx_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// `ctx_init`. Writes the new handle to `*out`.
///
/// # Safety
/// `opts` is null or valid; `out` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rdx_init(opts: *const RdxOptions, out: *mut *mut RdxRuntime) -> i32 {
    if out.is_null() {
        set_error("out is null");
        return -libc::EINVAL;
    }
    let mut b = Runtime::builder();
    // SAFETY: by the caller's contract.
    if let Some(o) = unsafe { opts.as_ref() } {
        if !o.path.is_null() {
            // SAFETY: by the caller's contract.
            match unsafe { str_arg(o.path, "path") } {
                Ok(p) => b = b.path(p),
                Err(e) => return e,
            }
        }
        if !o.eim.is_null() && o.eim_len > 0 {
            // SAFETY: by the caller's contract.
            b = b.eim_spec(unsafe { std::slice::from_raw_parts(o.eim, o.eim_len) }.to_vec());
        }
        if o.max_hooks > 0 {
            b = b.max_hooks(o.max_hooks);
        }
        if o.thread_slots > 0 {
            b = b.thread_slots(o.thread_slots);
        }
        if o.code_size > 0 {
            b = b.code_size(o.code_size);
        }
        if o.scratch_size > 0 {
            b = b.scratch_size(o.scratch_size);
        }
        if o.hold_timeout_ns > 0 {
            b = b.hold_timeout(Duration::from_nanos(o.hold_timeout_ns));
        }
    }
    match b.build() {
        Ok(rt) => {
            let path = CString::new(rt.path().as_os_str().as_encoded_bytes()).unwrap_or_default();
            // SAFETY: `out` is valid for a write.
            unsafe {
                *out = Box::into_raw(Box::new(RdxRuntime {
                    rt,
                    path,
                    fabric: Mutex::new(None),
                }))
            };
            0
        }
        Err(e) => fail(e),
    }
}

/// The region file path (owned by the runtime handle).
///
/// # Safety
/// `rt` is a live handle from [`rdx_init`].
#[no_mangle]
pub unsafe extern "C" fn rdx_region_path(rt: *const RdxRuntime) -> *const c_char {
    // SAFETY: by the caller's contract.
    unsafe { &*rt }.path.as_ptr()
}

/// `ctx_register` with file mode `mode` (0 = 0600); then, if `RDX_FABRIC_LISTEN` is set,
/// serves the region over the fabric until teardown (a second call keeps the first server).
///
/// # Safety
/// `rt` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rdx_register(rt: *const RdxRuntime, mode: u32) -> i32 {
    // SAFETY: by the caller's contract.
    let rt = unsafe { &*rt };
    if let Err(e) = rt
        .rt
        .register_with_mode(if mode == 0 { 0o600 } else { mode })
    {
        return fail(e);
    }
    let mut fabric = rt.fabric.lock().unwrap_or_else(|e| e.into_inner());
    if fabric.is_some() {
        return 0;
    }
    match serve_fabric(&rt.rt) {
        Ok(served) => {
            *fabric = served;
            0
        }
        Err((code, message)) => {
            set_error(&message);
            -code
        }
    }
}

#[cfg(feature = "fabric")]
fn serve_fabric(rt: &Runtime) -> Result<Option<Served>, (i32, String)> {
    match rdx_fabric::serve_from_env(rt.path()) {
        Ok(None) => Ok(None),
        Ok(Some(server)) => Ok(Some(Served {
            address: CString::new(server.bootstrap_addr().to_string()).unwrap_or_default(),
            _server: server,
        })),
        Err(e) => {
            let code = match &e {
                rdx_fabric::FabricError::BadEnvironment { .. }
                | rdx_fabric::FabricError::BadToken(_) => libc::EINVAL,
                rdx_fabric::FabricError::Io { source, .. } => {
                    source.raw_os_error().unwrap_or(libc::EIO)
                }
                _ => libc::EIO,
            };
            Err((
                code,
                format!(
                    "serving region {} over the fabric ({ENV_FABRIC_LISTEN} is set): {e}",
                    rt.path().display()
                ),
            ))
        }
    }
}

/// Without the feature, a host asked to serve over the fabric fails loudly rather than
/// running unreachable.
#[cfg(not(feature = "fabric"))]
fn serve_fabric(_rt: &Runtime) -> Result<Option<Served>, (i32, String)> {
    match std::env::var_os(ENV_FABRIC_LISTEN) {
        None => Ok(None),
        Some(_) => Err((
            libc::ENOTSUP,
            format!(
                "{ENV_FABRIC_LISTEN} is set but this rdx runtime library was built without \
                 the `fabric` feature (cargo build -p rdx-runtime-c --features fabric)"
            ),
        )),
    }
}

/// The fabric bootstrap address (`IP:PORT`) the region is served on, or null when it is not
/// served over the fabric. Owned by the runtime handle.
///
/// # Safety
/// `rt` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn rdx_fabric_address(rt: *const RdxRuntime) -> *const c_char {
    // SAFETY: by the caller's contract.
    let rt = unsafe { &*rt };
    let fabric = rt.fabric.lock().unwrap_or_else(|e| e.into_inner());
    // The string's buffer stays put until teardown: the server is never replaced.
    fabric
        .as_ref()
        .map_or(std::ptr::null(), |served| served.address.as_ptr())
}

/// Declares a hook and writes its handle to `*out`.
///
/// # Safety
/// `rt` is a live handle, `name` a NUL-terminated string, `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rdx_declare_hook(
    rt: *const RdxRuntime,
    name: *const c_char,
    context_size: u64,
    default_return: u64,
    out: *mut *mut RdxHook,
) -> i32 {
    // SAFETY: by the caller's contract.
    let (rt, name) = match (unsafe { &*rt }, unsafe { str_arg(name, "hook name") }) {
        (rt, Ok(n)) => (rt, n),
        (_, Err(e)) => return e,
    };
    let spec = HookSpec::new(context_size).default_return(default_return);
    match rt.rt.declare_hook(name, spec) {
        Ok(h) => {
            let index = h.index();
            // SAFETY: `out` is valid for a write.
            unsafe {
                *out = Box::into_raw(Box::new(RdxHook {
                    rt: rt.rt.clone(),
                    index,
                    default_return,
                }))
            };
            0
        }
        Err(e) => fail(e),
    }
}

/// Runs a hook on `ctx`: the program's `r0`, or the hook's default.
///
/// # Safety
/// `hook` is a live handle; `ctx` points to the context structure the hook was declared
/// with.
#[no_mangle]
pub unsafe extern "C" fn rdx_run_hook(hook: *const RdxHook, ctx: *mut u8) -> u64 {
    // SAFETY: by the caller's contract.
    let h = unsafe { &*hook };
    h.rt.hook_at(h.index, h.default_return)
        .map_or(h.default_return, |hook| hook.run_raw(ctx))
}

/// Exports a host function as helper id `id`.
///
/// # Safety
/// `rt` is a live handle, `name` NUL-terminated, `func` a function with the helper ABI.
#[no_mangle]
pub unsafe extern "C" fn rdx_register_function(
    rt: *const RdxRuntime,
    name: *const c_char,
    id: u32,
    func: HelperFn,
) -> i32 {
    // SAFETY: by the caller's contract.
    let (rt, name) = match (unsafe { &*rt }, unsafe { str_arg(name, "function name") }) {
        (rt, Ok(n)) => (rt, n),
        (_, Err(e)) => return e,
    };
    match rt.rt.register_function(name, id, func) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// Exports a host variable.
///
/// # Safety
/// `rt` is a live handle, `name` NUL-terminated, `addr` valid for `size` bytes for the life
/// of the process.
#[no_mangle]
pub unsafe extern "C" fn rdx_register_variable(
    rt: *const RdxRuntime,
    name: *const c_char,
    addr: *mut u8,
    size: u64,
) -> i32 {
    // SAFETY: by the caller's contract.
    let (rt, name) = match (unsafe { &*rt }, unsafe { str_arg(name, "variable name") }) {
        (rt, Ok(n)) => (rt, n),
        (_, Err(e)) => return e,
    };
    // SAFETY: forwarded contract.
    match unsafe { rt.rt.register_variable(name, addr, size) } {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// Counters of a hook.
#[repr(C)]
#[derive(Default)]
pub struct RdxHookStats {
    /// Runs of extension code.
    pub runs: u64,
    /// Runs that stopped abnormally (budget exhausted, deoptimisation not finished).
    pub failures: u64,
    /// Times the host refused an invalid active word.
    pub errors: u64,
    /// Callers that gave up waiting on a held slot.
    pub hold_timeouts: u64,
    /// The slot's active word (version in the high 32 bits; 0: nothing attached).
    pub active: u64,
    /// Runs of elite code that stopped at a failed guard (also counted in `failures`).
    pub deopts: u64,
}

/// # Safety
/// `hook` is a live handle, `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn rdx_hook_get_stats(hook: *const RdxHook, out: *mut RdxHookStats) -> i32 {
    // SAFETY: by the caller's contract.
    let h = unsafe { &*hook };
    let s =
        h.rt.hook_at(h.index, h.default_return)
            .map(|hook| hook.stats())
            .unwrap_or_default();
    // SAFETY: by the caller's contract.
    unsafe {
        *out = RdxHookStats {
            runs: s.runs,
            failures: s.failures,
            errors: s.errors,
            hold_timeouts: s.hold_timeouts,
            active: s.active,
            deopts: s.deopts,
        }
    };
    0
}

/// Frees a hook handle.
///
/// # Safety
/// `hook` came from [`rdx_declare_hook`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rdx_hook_free(hook: *mut RdxHook) {
    if !hook.is_null() {
        // SAFETY: by the caller's contract.
        drop(unsafe { Box::from_raw(hook) });
    }
}

/// `ctx_teardown`: stops running extensions, waits up to `wait_ms` for threads inside them,
/// removes the region file if `unlink` is nonzero and frees the handle. Returns 0, or 1 if
/// some thread was still inside extension code when the wait ended.
///
/// # Safety
/// `rt` came from [`rdx_init`] and is not used afterwards (hook handles stay valid and
/// return their defaults).
#[no_mangle]
pub unsafe extern "C" fn rdx_teardown(rt: *mut RdxRuntime, wait_ms: u32, unlink: i32) -> i32 {
    // SAFETY: by the caller's contract.
    let rt = unsafe { Box::from_raw(rt) };
    // Stop serving first: no control plane reaches the region while it is being torn down.
    drop(rt.fabric.lock().unwrap_or_else(|e| e.into_inner()).take());
    let r = match rt.rt.teardown(Duration::from_millis(wait_ms as u64)) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => return fail(e),
    };
    if unlink != 0 {
        if let Err(e) = rt.rt.unlink() {
            return fail(e);
        }
    }
    r
}
