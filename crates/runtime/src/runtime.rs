//! `ctx_init`, `ctx_register`, `ctx_teardown` and the exports of the context table.

use crate::helpers;
use crate::hook::queued::{Completed, FallbackWorker, QueuedFallback};
use crate::hook::{Hook, HookSpec, HookStats};
use crate::inner::{Exports, Inner};
use crate::mapping::{Mapping, RegionPath};
use crate::RuntimeError;
use rdx_region::abi::HelperFn;
use rdx_region::geometry::{encode_header, plan, HeaderInfo, RegionParams};
use rdx_region::layout::*;
use rdx_transport::local::LocalRegion;
use rdx_transport::xstate::{self, MapSpec};
use rdx_transport::Transport;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Name under which the helper table is exported as a host variable, for code compiled to
/// call helpers through it (`var:rdx_helper_table`).
pub const HELPER_TABLE_SYMBOL: &str = "rdx_helper_table";

/// Name of the trace ring buffer map (XState id 0) that `trace_printk` writes to.
pub const TRACE_MAP_NAME: &str = "rdx_trace";

static NEXT_RUNTIME_ID: AtomicU64 = AtomicU64::new(1);

/// Configures and creates a runtime (`ctx_init`).
#[derive(Clone, Debug)]
pub struct RuntimeBuilder {
    path: Option<PathBuf>,
    params: RegionParams,
    eim: Vec<u8>,
    hold_timeout: Duration,
    base_address: Option<u64>,
    trace_size: u32,
    hooks: Vec<(String, HookSpec)>,
}

impl Default for RuntimeBuilder {
    fn default() -> Self {
        Self {
            path: None,
            params: RegionParams::default(),
            eim: Vec::new(),
            hold_timeout: Duration::from_millis(10),
            base_address: None,
            trace_size: 64 * 1024,
            hooks: Vec::new(),
        }
    }
}

impl RuntimeBuilder {
    /// Region file; default a fresh `/dev/shm/rdx-<pid>-<16 random hex digits>` (read it back
    /// with [`Runtime::path`]). The file is created exclusively with mode 0600 and never
    /// through a symbolic link; a file already at a chosen path is reused only if it is a
    /// regular file of this process's user that no one else can write (`docs/security.md`).
    pub fn path(mut self, path: impl AsRef<Path>) -> Self {
        self.path = Some(path.as_ref().to_path_buf());
        self
    }

    /// The host's EIM spec, stored verbatim in the region for control planes to read.
    pub fn eim_spec(mut self, spec: impl Into<Vec<u8>>) -> Self {
        self.eim = spec.into();
        self
    }

    /// Capacities of the region (hooks, thread slots, arena sizes...).
    pub fn params(mut self, params: RegionParams) -> Self {
        self.params = params;
        self
    }

    /// Hook slots the region holds.
    pub fn max_hooks(mut self, n: u32) -> Self {
        self.params.max_hooks = n;
        self
    }

    /// Threads that can run hooks at the same time (each claims a slot on first use).
    pub fn thread_slots(mut self, n: u32) -> Self {
        self.params.thread_slots = n;
        self
    }

    /// Bytes of the code arena.
    pub fn code_size(mut self, bytes: u64) -> Self {
        self.params.code_size = bytes;
        self
    }

    /// Bytes of the XState scratchpad.
    pub fn scratch_size(mut self, bytes: u64) -> Self {
        self.params.scratch_size = bytes;
        self
    }

    /// Longest a caller waits on a held hook before running the published version anyway.
    pub fn hold_timeout(mut self, timeout: Duration) -> Self {
        self.hold_timeout = timeout;
        self
    }

    /// Map the region at this exact address, or fail (cross-sandbox address plans).
    pub fn base_address(mut self, addr: u64) -> Self {
        self.base_address = Some(addr);
        self
    }

    /// Bytes of the trace ring buffer (a power of two, at least 4096).
    pub fn trace_size(mut self, bytes: u32) -> Self {
        self.trace_size = bytes;
        self
    }

    /// Declares a hook as part of initialisation.
    pub fn hook(mut self, name: &str, spec: HookSpec) -> Self {
        self.hooks.push((name.to_string(), spec));
        self
    }

    /// `ctx_init`: creates the region file, maps it (code arena read+execute), writes the
    /// header, EIM spec, helper table, context table and empty hook slots.
    pub fn build(self) -> Result<Runtime, RuntimeError> {
        let path = match &self.path {
            Some(p) => RegionPath::Chosen(p.clone()),
            None => RegionPath::Fresh,
        };
        let mut params = self.params.clone();
        params.eim_capacity = params.eim_capacity.max(self.eim.len() as u64);
        let trace_spec = MapSpec {
            map_type: MapType::RingBuf,
            key_size: 0,
            value_size: 0,
            max_entries: self.trace_size,
            flags: 0,
            name: TRACE_MAP_NAME.into(),
        };
        let trace_layout = xstate::layout(&trace_spec, params.thread_slots)?;
        if trace_layout.footprint() > params.scratch_size / 2 {
            return Err(RuntimeError::Config(
                "trace ring larger than half the scratchpad".into(),
            ));
        }
        if (helpers::published()
            .map(|(h, _)| h.id.get())
            .max()
            .unwrap_or(0))
            >= params.helper_capacity
        {
            return Err(RuntimeError::Config(
                "helper table smaller than the built-in helper ids".into(),
            ));
        }
        let (sections, region_size) = plan(&params)?;
        let code = sections[SectionId::Code as usize];
        let (map, previous) = Mapping::create(
            &path,
            region_size,
            (code.offset, code.size),
            self.base_address,
        )?;
        let (head, info) = encode_header(
            &params,
            Arch::HOST.ok_or_else(|| RuntimeError::Config("unsupported architecture".into()))?,
            map.base as u64,
            std::process::id(),
            self.hold_timeout.as_nanos().min(u64::MAX as u128) as u64,
            self.eim.len() as u64,
            trace_layout.footprint(),
            0,
            register_membarrier_expedited(),
        )?;
        // SAFETY: the data part of the mapping is read+write and lives as long as `map`,
        // which the Inner owning this LocalRegion keeps.
        let data = unsafe { LocalRegion::from_raw(map.base, Mapping::data_len(&info)) };
        data.write(0, &head)?;
        data.write_u64(offsets::HEADER_INCARNATION, previous + 1)?;
        data.write(info.section(SectionId::Eim).offset, &self.eim)?;
        data.write_u64(
            info.section(SectionId::Context).offset + 8,
            info.context_capacity as u64,
        )?;
        let trace = xstate::create(
            &data,
            &info,
            0,
            info.section(SectionId::Scratch).offset,
            &trace_spec,
        )?;
        let inner = Arc::new(Inner {
            id: NEXT_RUNTIME_ID.fetch_add(1, Ordering::Relaxed),
            torn_down: AtomicBool::new(false),
            base: map.base as u64,
            map,
            info,
            data,
            trace,
            exports: Mutex::new(Exports::default()),
        });
        let rt = Runtime { inner };
        let table = rt.inner.info.section(SectionId::HelperTable);
        rt.inner.export(
            ContextKind::HostVariable,
            0,
            rt.inner.base + table.offset,
            table.size,
            HELPER_TABLE_SYMBOL,
        )?;
        for (h, f) in helpers::published() {
            rt.inner.set_helper(h.id.get(), f)?;
            rt.inner.export(
                ContextKind::Helper,
                h.id.get(),
                f as usize as u64,
                0,
                h.name,
            )?;
        }
        for (name, spec) in &self.hooks {
            rt.declare_hook(name, *spec)?;
        }
        rt.inner
            .data
            .write_u64(offsets::HEADER_STATE, RegionState::Ready as u64)?;
        Ok(rt)
    }
}

/// A host's runtime: its region and everything exported in it. Cheap to clone; thread-safe.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("path", &self.inner.map.path)
            .field("base", &format_args!("{:#x}", self.inner.base))
            .finish()
    }
}

impl Runtime {
    /// A builder with the default capacities and a fresh region path.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// The region file a control plane attaches to.
    pub fn path(&self) -> &Path {
        &self.inner.map.path
    }

    /// The region's header, as written.
    pub fn info(&self) -> &HeaderInfo {
        &self.inner.info
    }

    /// Where the region is mapped in this process.
    pub fn base_address(&self) -> u64 {
        self.inner.base
    }

    /// The data part of the region, for host-side inspection (maps, counters).
    pub fn region(&self) -> LocalRegion {
        self.inner.data
    }

    /// `ctx_register`: exposes the region to control planes. On the shared-memory transport
    /// that means file permissions: read+write for the owner and, with `group`, its group.
    pub fn register_with_mode(&self, mode: u32) -> Result<(), RuntimeError> {
        self.check_live()?;
        // SAFETY: fchmod on the fd the mapping owns.
        if unsafe { libc::fchmod(self.inner.map.fd, mode as libc::mode_t) } != 0 {
            return Err(RuntimeError::Io {
                what: "changing permissions of",
                path: self.path().into(),
                source: std::io::Error::last_os_error(),
            });
        }
        self.inner
            .data
            .write_u64(offsets::HEADER_STATE, RegionState::Registered as u64)?;
        Ok(())
    }

    /// `ctx_register` with owner-only access (mode 0600).
    pub fn register(&self) -> Result<(), RuntimeError> {
        self.register_with_mode(0o600)
    }

    fn check_live(&self) -> Result<(), RuntimeError> {
        if self.inner.torn_down.load(Ordering::Acquire) {
            return Err(RuntimeError::TornDown);
        }
        Ok(())
    }

    /// Declares a hook; it starts empty (calls return `spec.default_return`).
    pub fn declare_hook(&self, name: &str, spec: HookSpec) -> Result<Hook<'_>, RuntimeError> {
        self.check_live()?;
        let mut ex = self.inner.exports.lock().unwrap_or_else(|e| e.into_inner());
        if ex.hooks.iter().any(|(n, _)| n == name) {
            return Err(RuntimeError::HookExists(name.into()));
        }
        let index = ex.hooks.len() as u32;
        if index >= self.inner.info.max_hooks {
            return Err(RuntimeError::TooManyHooks(self.inner.info.max_hooks));
        }
        let slot = self.inner.slot(index);
        slot.budget.store(spec.budget, Ordering::Relaxed);
        slot.default_ret
            .store(spec.default_return, Ordering::Relaxed);
        slot.declared.store(1, Ordering::Release);
        let offset = self.inner.info.hook_offset(index);
        self.inner.export_locked(
            &mut ex,
            ContextKind::Hook,
            index,
            offset,
            spec.context_size,
            name,
        )?;
        ex.hooks.push((name.to_string(), spec.default_return));
        Ok(Hook::new(&self.inner, index, spec.default_return))
    }

    /// A declared hook by name. Keep the handle: running it does no lookup.
    pub fn hook(&self, name: &str) -> Result<Hook<'_>, RuntimeError> {
        let ex = self.inner.exports.lock().unwrap_or_else(|e| e.into_inner());
        let (index, (_, empty_return)) = ex
            .hooks
            .iter()
            .enumerate()
            .find(|(_, (n, _))| n == name)
            .ok_or_else(|| RuntimeError::NoSuchHook(name.into()))?;
        Ok(Hook::new(&self.inner, index as u32, *empty_return))
    }

    /// The hook in slot `index` ([`Hook::index`]) without the name lookup of
    /// [`Runtime::hook`] or its lock: for handles that keep a runtime and an index rather
    /// than a borrowed [`Hook`] and make one per run (the C ABI, crate `rdx-runtime-c`).
    /// `empty_return` is what it returns while nothing is attached (the declared spec's
    /// `default_return`). `None` when `index` is not below the region's `max_hooks`.
    pub fn hook_at(&self, index: u32, empty_return: u64) -> Option<Hook<'_>> {
        (index < self.inner.info.max_hooks).then(|| Hook::new(&self.inner, index, empty_return))
    }

    /// Names of the declared hooks, in slot order.
    pub fn hooks(&self) -> Vec<String> {
        let ex = self.inner.exports.lock().unwrap_or_else(|e| e.into_inner());
        ex.hooks.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Exports a host function under `id` (linked as `helper:<id>`) and `name`.
    pub fn register_function(
        &self,
        name: &str,
        id: u32,
        func: HelperFn,
    ) -> Result<(), RuntimeError> {
        self.check_live()?;
        if id == 0 || id >= self.inner.info.helper_capacity {
            return Err(RuntimeError::BadId {
                id,
                capacity: self.inner.info.helper_capacity,
            });
        }
        let mut ex = self.inner.exports.lock().unwrap_or_else(|e| e.into_inner());
        if ex.ids.contains(&id) {
            return Err(RuntimeError::BadId {
                id,
                capacity: self.inner.info.helper_capacity,
            });
        }
        self.inner.export_locked(
            &mut ex,
            ContextKind::HostFunction,
            id,
            func as usize as u64,
            0,
            name,
        )?;
        self.inner.set_helper(id, func)
    }

    /// Exports a host variable (linked as `var:<name>`).
    ///
    /// # Safety
    /// `addr` must stay valid for `size` bytes, for reads and writes by extension code, for
    /// as long as any extension that uses it can run (in practice: the life of the process).
    pub unsafe fn register_variable(
        &self,
        name: &str,
        addr: *mut u8,
        size: u64,
    ) -> Result<(), RuntimeError> {
        self.check_live()?;
        self.inner
            .export(ContextKind::HostVariable, 0, addr as u64, size, name)
    }

    /// Counters of a hook summed over every thread slot (what a control plane reads remotely).
    pub fn hook_stats(&self, name: &str) -> Result<HookStats, RuntimeError> {
        Ok(self.hook(name)?.stats())
    }

    /// `ctx_teardown`: hooks stop running extension code (they return their defaults), the
    /// region is marked torn down for control planes, and this waits (at most `wait`) until
    /// no thread of this process is inside extension code. The mapping itself stays until
    /// the last handle and thread that used it are gone.
    pub fn teardown(&self, wait: Duration) -> Result<bool, RuntimeError> {
        self.inner.torn_down.store(true, Ordering::SeqCst);
        self.inner
            .data
            .write_u64(offsets::HEADER_STATE, RegionState::TornDown as u64)?;
        let deadline = std::time::Instant::now() + wait;
        loop {
            let busy = (0..self.inner.info.thread_slots).any(|t| {
                let s = self.inner.thread_slot(t);
                s.owner.load(Ordering::Acquire) != 0 && s.epoch.load(Ordering::Acquire) % 2 == 1
            });
            if !busy {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Puts `hook` in queued mode: a run of it through the returned worker's
    /// [`FallbackWorker::run`] that stops at a failed guard of an elite version is copied
    /// (state, context, packet; pointers rebased) to a fallback queue and the hook answers
    /// `cfg.deferred_return` at once; a worker thread (claiming a thread slot of this
    /// runtime) finishes each queued run in its version's fallback image and hands it to
    /// `done`. Runs through [`Hook::run`] keep deoptimising synchronously.
    pub fn queued_fallback(
        &self,
        hook: &str,
        cfg: QueuedFallback,
        done: impl FnMut(Completed) + Send + 'static,
    ) -> Result<FallbackWorker<'_>, RuntimeError> {
        FallbackWorker::start(self.hook(hook)?, hook, cfg, done)
    }

    /// Removes the region file (control planes that still map it keep their mapping).
    pub fn unlink(&self) -> Result<(), RuntimeError> {
        std::fs::remove_file(self.path()).map_err(|source| RuntimeError::Io {
            what: "removing",
            path: self.path().into(),
            source,
        })
    }
}

/// Registers this process for `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)` so that a control
/// plane's reclamation barrier interrupts only the CPUs running registered processes instead
/// of waiting for an RCU grace period. Returns the header flag to publish, or 0 when the
/// kernel refuses (the control plane then uses the slower global barrier, still correct).
fn register_membarrier_expedited() -> u32 {
    const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 4;
    // SAFETY: a plain system call with no pointers; it only changes this process's
    // membarrier registration.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
            0,
            0,
        )
    };
    if rc == 0 {
        rdx_region::layout::HOST_FLAG_MEMBARRIER_EXPEDITED
    } else {
        0
    }
}
