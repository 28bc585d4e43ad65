//! The C shim's functions (csrc/shim.c) and a safe owner for one libfabric endpoint.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

#[repr(C)]
pub(crate) struct RawNode {
    _opaque: [u8; 0],
}

#[repr(C)]
pub(crate) struct RawMr {
    _opaque: [u8; 0],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Props {
    pub provider: [c_char; 64],
    pub mr_mode: u64,
    pub max_msg_size: u64,
    pub tx_depth: u64,
    pub manual_progress: u32,
    pub context_size: u32,
    pub virt_addr: u32,
    pub prov_key: u32,
}

/// `-FI_EAGAIN`.
pub(crate) const EAGAIN: isize = -11;

extern "C" {
    fn rdxf_strerror(err: c_int) -> *const c_char;
    fn rdxf_open(
        prov: *const c_char,
        node: *const c_char,
        service: *const c_char,
        listen: c_int,
        out: *mut *mut RawNode,
        props: *mut Props,
    ) -> c_int;
    fn rdxf_close(n: *mut RawNode);
    fn rdxf_getname(n: *mut RawNode, buf: *mut c_void, len: *mut usize) -> c_int;
    fn rdxf_av_insert(n: *mut RawNode, addr: *const c_void, fi_addr: *mut u64) -> c_int;
    fn rdxf_mr_reg(
        n: *mut RawNode,
        buf: *mut c_void,
        len: usize,
        remote: c_int,
        requested_key: u64,
        mr: *mut *mut RawMr,
        key: *mut u64,
        desc: *mut *mut c_void,
    ) -> c_int;
    fn rdxf_mr_close(mr: *mut RawMr);
    pub(crate) fn rdxf_read(
        n: *mut RawNode,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> isize;
    pub(crate) fn rdxf_write(
        n: *mut RawNode,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest: u64,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> isize;
    pub(crate) fn rdxf_cswap(
        n: *mut RawNode,
        desired: *const u64,
        compare: *const u64,
        result: *mut u64,
        desc: *mut c_void,
        dest: u64,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> isize;
    pub(crate) fn rdxf_fetch_add(
        n: *mut RawNode,
        delta: *const u64,
        result: *mut u64,
        desc: *mut c_void,
        dest: u64,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> isize;
    fn rdxf_cq_read(
        n: *mut RawNode,
        ctxs: *mut *mut c_void,
        max: usize,
        err_ctx: *mut *mut c_void,
        msg: *mut c_char,
        msg_len: usize,
    ) -> isize;
}

/// libfabric's description of a (negative or positive) error number.
pub(crate) fn strerror(err: isize) -> String {
    // SAFETY: fi_strerror returns a pointer to a static NUL-terminated string.
    unsafe { CStr::from_ptr(rdxf_strerror(err as c_int)) }
        .to_string_lossy()
        .into_owned()
}

/// One RDM endpoint with its fabric, domain, address vector and completion queue.
/// Closed on drop; not shareable across threads without a lock (FI_THREAD_DOMAIN).
pub(crate) struct Endpoint {
    raw: *mut RawNode,
    pub props: Props,
}

// SAFETY: libfabric objects opened with FI_THREAD_DOMAIN may move between threads as long
// as calls are serialised; every owner keeps the endpoint behind `&mut` or a mutex.
unsafe impl Send for Endpoint {}

/// A completion: the context of the finished operation or the operation's error.
pub(crate) enum Completion {
    Done(usize),
    Failed { err: isize, message: String },
}

impl Endpoint {
    /// `listen`: bind to `node`:`service` (the data plane) rather than pick a source.
    pub fn open(
        provider: Option<&str>,
        node: Option<&str>,
        service: Option<&str>,
        listen: bool,
    ) -> Result<Self, String> {
        let cstr = |s: Option<&str>| {
            s.map(|s| CString::new(s).map_err(|_| format!("{s:?} contains NUL")))
                .transpose()
        };
        let (prov, node, service) = (cstr(provider)?, cstr(node)?, cstr(service)?);
        let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        let mut raw = std::ptr::null_mut();
        // SAFETY: Props is plain data the shim fills completely on success.
        let mut props: Props = unsafe { std::mem::zeroed() };
        // SAFETY: the strings outlive the call; `raw` and `props` are valid out-pointers.
        let rc = unsafe {
            rdxf_open(
                ptr(&prov),
                ptr(&node),
                ptr(&service),
                listen as c_int,
                &mut raw,
                &mut props,
            )
        };
        if rc != 0 {
            return Err(strerror(rc as isize));
        }
        Ok(Self { raw, props })
    }

    pub fn raw(&self) -> *mut RawNode {
        self.raw
    }

    pub fn provider(&self) -> String {
        // SAFETY: the shim NUL-terminates the name inside the 64-byte array (snprintf).
        unsafe { CStr::from_ptr(self.props.provider.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// The endpoint's address in the provider's format.
    pub fn name(&self) -> Result<Vec<u8>, String> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: buf has `len` writable bytes; the shim writes at most that.
        let rc = unsafe { rdxf_getname(self.raw, buf.as_mut_ptr().cast(), &mut len) };
        if rc != 0 {
            return Err(strerror(rc as isize));
        }
        buf.truncate(len);
        Ok(buf)
    }

    pub fn insert_peer(&self, address: &[u8]) -> Result<u64, String> {
        let mut fi_addr = 0;
        // SAFETY: the provider reads one address of its own format from `address`; the
        // bootstrap gave us bytes the peer's fi_getname produced for the same provider.
        let rc = unsafe { rdxf_av_insert(self.raw, address.as_ptr().cast(), &mut fi_addr) };
        if rc != 0 {
            return Err(strerror(rc as isize));
        }
        Ok(fi_addr)
    }

    /// Registers memory.
    ///
    /// # Safety
    /// `[buf, buf+len)` must stay mapped until the returned registration is dropped.
    pub unsafe fn register(
        &self,
        buf: *mut u8,
        len: usize,
        remote: bool,
        requested_key: u64,
    ) -> Result<Registration, String> {
        let (mut mr, mut key, mut desc) = (std::ptr::null_mut(), 0, std::ptr::null_mut());
        // SAFETY: the caller guarantees the memory; out-pointers are valid.
        let rc = unsafe {
            rdxf_mr_reg(
                self.raw,
                buf.cast(),
                len,
                remote as c_int,
                requested_key,
                &mut mr,
                &mut key,
                &mut desc,
            )
        };
        if rc != 0 {
            return Err(strerror(rc as isize));
        }
        Ok(Registration { mr, key, desc })
    }

    /// Drains up to 16 completions (this also drives the provider's progress).
    pub fn poll(&self, ctx_base: *const u8, ctx_size: usize, out: &mut Vec<Completion>) {
        let mut ctxs = [std::ptr::null_mut::<c_void>(); 16];
        let mut err_ctx = std::ptr::null_mut();
        let mut msg = [0 as c_char; 256];
        // SAFETY: arrays sized as passed; the shim NUL-terminates `msg`.
        let rc = unsafe {
            rdxf_cq_read(
                self.raw,
                ctxs.as_mut_ptr(),
                ctxs.len(),
                &mut err_ctx,
                msg.as_mut_ptr(),
                msg.len(),
            )
        };
        if rc < 0 {
            // SAFETY: NUL-terminated by snprintf, or zeroed.
            let message = unsafe { CStr::from_ptr(msg.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            out.push(Completion::Failed { err: rc, message });
            return;
        }
        for &c in &ctxs[..rc as usize] {
            let index = (c as usize).wrapping_sub(ctx_base as usize) / ctx_size.max(1);
            out.push(Completion::Done(index));
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: closing what rdxf_open returned, once; the shim closes in dependency order.
        unsafe { rdxf_close(self.raw) };
    }
}

/// A memory registration. Must be dropped before its endpoint.
pub(crate) struct Registration {
    mr: *mut RawMr,
    pub key: u64,
    pub desc: *mut c_void,
}

// SAFETY: an MR handle is an identifier; closing it is serialised by its owner.
unsafe impl Send for Registration {}

impl Drop for Registration {
    fn drop(&mut self) {
        // SAFETY: closing the MR rdxf_mr_reg returned, once.
        unsafe { rdxf_mr_close(self.mr) };
    }
}
