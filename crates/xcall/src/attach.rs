//! Mapping another sandbox's region into this process at the address the plan gives it.
//!
//! The region file is mapped exactly as its own host maps it — data read+write, code arena
//! read+execute, at the same virtual address — except for one section: the helper table.
//! That section is replaced by private, process-local memory filled with *this* process's
//! callee helpers. Code compiled to call helpers through the table (`var:rdx_helper_table`,
//! a region address) therefore runs unchanged here and in its own host, each process
//! supplying its own implementations behind the same address.
//!
//! Attached services stay mapped for the life of the process: a call in flight on any thread
//! may be running their code, and nothing here could prove otherwise cheaply.

use crate::{callee, XcallError};
use rdx_region::geometry::{check_header, HeaderInfo};
use rdx_region::helpers::HelperId;
use rdx_region::layout::{Arch, HookSlot, SectionId, ThreadSlot};
use rdx_transport::local::LocalRegion;
use rdx_xcall_plan::plan::{ExportInfo, Plan, SlotEntry, EXPORT_SERIALIZED};
use rdx_xcall_plan::{PlanError, MAX_ARGS, MAX_EXPORTS, MAX_SLOTS};
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

/// An attached sandbox: everything the `call` helper needs, in this process's memory.
pub struct ServiceMap {
    /// The sandbox's slot in the plan.
    pub slot: u16,
    /// The sandbox's name.
    pub name: String,
    /// Where its region is mapped (the same address in every process).
    pub base: u64,
    /// Its region header, checked at attach.
    pub info: HeaderInfo,
    /// The region's data part (everything before the code arena), for the map helpers.
    pub(crate) data: LocalRegion,
    pub(crate) exports: [ExportSlot; MAX_EXPORTS],
    pub(crate) export_count: usize,
    /// Its exports, as the plan lists them.
    pub exports_info: Vec<ExportInfo>,
}

/// One export, resolved to region addresses at attach time.
pub(crate) struct ExportSlot {
    pub hook: *const HookSlot,
    pub max_args: u32,
    pub serialized: bool,
    /// The plan's lock word for serialised entries.
    pub lock: *const AtomicU64,
}

impl Default for ExportSlot {
    fn default() -> Self {
        Self {
            hook: std::ptr::null(),
            max_args: 0,
            serialized: false,
            lock: std::ptr::null(),
        }
    }
}

impl ServiceMap {
    pub(crate) fn thread_slot(&self, index: u32) -> &ThreadSlot {
        // SAFETY: index < thread_slots (callers check), in the mapped threads section.
        unsafe { &*((self.base + self.info.thread_offset(index)) as *const ThreadSlot) }
    }
}

static SERVICES: [AtomicPtr<ServiceMap>; MAX_SLOTS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_SLOTS];
static ATTACH_LOCK: Mutex<()> = Mutex::new(());

/// The service attached at `slot` in this process, if any.
#[inline]
pub fn attached(slot: u16) -> Option<&'static ServiceMap> {
    let p = SERVICES.get(slot as usize)?.load(Ordering::Acquire);
    // SAFETY: non-null entries are leaked boxes that are never freed.
    unsafe { p.as_ref() }
}

fn os_err(what: &'static str, path: &std::path::Path) -> XcallError {
    XcallError::Io {
        what,
        path: path.into(),
        source: std::io::Error::last_os_error(),
    }
}

/// Maps the sandbox in `slot` at its planned address (once per process; later calls return
/// the same mapping).
pub fn attach(plan: &Plan, slot: u16) -> Result<&'static ServiceMap, XcallError> {
    let _guard = ATTACH_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = attached(slot) {
        return Ok(s);
    }
    let info = plan.slot(slot)?;
    let addr = info.address;
    let path = info.path.clone();
    // The plan names the file; a plan is shared, so the file is checked like any region
    // before it is mapped executable here.
    let fd = rdx_xcall_plan::open_shared_file(&path, libc::O_RDWR)?.into_raw_fd();
    let r = map_region(plan, slot, fd, addr, &path);
    // SAFETY: closing our fd; mappings stay valid.
    unsafe { libc::close(fd) };
    let (header, len) = r?;
    let mut exports: [ExportSlot; MAX_EXPORTS] = Default::default();
    let entry: &SlotEntry = plan.entry(slot);
    for x in &info.exports {
        let i = x.index as usize;
        let bad = if x.hook_index >= header.max_hooks || i >= MAX_EXPORTS {
            Some(format!(
                "hook index {} beyond the region's {} hooks",
                x.hook_index, header.max_hooks
            ))
        } else if x.max_args == 0 || x.max_args > MAX_ARGS {
            // The call path's padding buffer holds MAX_ARGS bytes: never trust a larger size.
            Some(format!("argument size {} (1..={MAX_ARGS})", x.max_args))
        } else {
            None
        };
        if let Some(reason) = bad {
            // SAFETY: unmapping the reservation we just made.
            unsafe { libc::munmap(addr as *mut libc::c_void, len as usize) };
            return Err(XcallError::BadExport {
                name: x.name.clone(),
                reason,
            });
        }
        exports[i] = ExportSlot {
            hook: (addr + header.hook_offset(x.hook_index)) as *const HookSlot,
            max_args: x.max_args,
            serialized: x.flags & EXPORT_SERIALIZED != 0,
            lock: &entry.exports[i].lock as *const AtomicU64,
        };
    }
    // SAFETY: the data part of the mapping is read+write and never unmapped.
    let data =
        unsafe { LocalRegion::from_raw(addr as *mut u8, header.section(SectionId::Code).offset) };
    let map = Box::leak(Box::new(ServiceMap {
        slot,
        name: info.name.clone(),
        base: addr,
        info: header,
        data,
        exports,
        export_count: info.exports.len(),
        exports_info: info.exports,
    }));
    SERVICES[slot as usize].store(map, Ordering::Release);
    Ok(map)
}

/// Maps the file at `addr`; returns its header and the mapped length.
fn map_region(
    plan: &Plan,
    slot: u16,
    fd: libc::c_int,
    addr: u64,
    path: &std::path::Path,
) -> Result<(HeaderInfo, u64), XcallError> {
    // SAFETY: all-zero bytes are a valid `stat`, filled in by fstat below.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a local struct.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(os_err("inspecting", path));
    }
    let file_len = st.st_size as u64;
    let mut head = vec![0u8; 4096.min(file_len as usize)];
    // SAFETY: pread into a local buffer of that length.
    let n = unsafe { libc::pread(fd, head.as_mut_ptr() as *mut libc::c_void, head.len(), 0) };
    if n < 0 {
        return Err(os_err("reading", path));
    }
    head.truncate(n as usize);
    let arch = Arch::HOST.ok_or_else(|| PlanError::BadPlan {
        path: plan.path().into(),
        reason: "unsupported architecture".into(),
    })?;
    let info = check_header(&head, file_len, arch)
        .map_err(|source| XcallError::Layout { slot, source })?;
    if info.base_address != addr {
        return Err(XcallError::WrongBase {
            slot,
            found: info.base_address,
            expected: addr,
        });
    }
    let slot_size = plan.spec().slot_size;
    if info.region_size > slot_size {
        return Err(XcallError::RegionTooLarge {
            slot,
            size: info.region_size,
            slot_size,
        });
    }
    let len = info.region_size;
    // SAFETY: reserving address space at the planned address without replacing anything.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len as usize,
            libc::PROT_NONE,
            libc::MAP_PRIVATE
                | libc::MAP_ANONYMOUS
                | libc::MAP_NORESERVE
                | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED || p as u64 != addr {
        let source = if p == libc::MAP_FAILED {
            std::io::Error::last_os_error()
        } else {
            // Kernels before 4.17 treat MAP_FIXED_NOREPLACE as a hint.
            // SAFETY: unmapping what the kernel gave us elsewhere.
            unsafe { libc::munmap(p, len as usize) };
            std::io::Error::from_raw_os_error(libc::EEXIST)
        };
        return Err(XcallError::AddressClash {
            slot,
            addr,
            len,
            source,
        });
    }
    let fail = |e: XcallError| {
        // SAFETY: unmapping our own reservation on an error path.
        unsafe { libc::munmap(addr as *mut libc::c_void, len as usize) };
        e
    };
    let part = |off: u64, size: u64, prot: libc::c_int, shared: bool| -> Result<(), XcallError> {
        if size == 0 {
            return Ok(());
        }
        let (flags, fd, file_off) = if shared {
            (libc::MAP_SHARED | libc::MAP_FIXED, fd, off as libc::off_t)
        } else {
            (
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        // SAFETY: replacing part of our own reservation.
        let q = unsafe {
            libc::mmap(
                (addr + off) as *mut libc::c_void,
                size as usize,
                prot,
                flags,
                fd,
                file_off,
            )
        };
        if q == libc::MAP_FAILED {
            return Err(os_err("mapping", path));
        }
        Ok(())
    };
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let table = info.section(SectionId::HelperTable);
    let code = info.section(SectionId::Code);
    part(0, table.offset, rw, true)
        .and_then(|_| part(table.offset, table.size, rw, false))
        .and_then(|_| part(table.end(), code.offset - table.end(), rw, true))
        .and_then(|_| {
            part(
                code.offset,
                code.size,
                libc::PROT_READ | libc::PROT_EXEC,
                true,
            )
        })
        .map_err(fail)?;
    // This process's helper table for the callee's code.
    let entries = (info.helper_capacity as usize).min(table.size as usize / 8);
    let words = (addr + table.offset) as *mut u64;
    for id in 0..entries {
        // SAFETY: `id < entries` words of the private table mapping we just made.
        unsafe {
            words
                .add(id)
                .write(callee::helper_for(HelperId::new(id as u32)) as usize as u64)
        };
    }
    Ok((info, len))
}
