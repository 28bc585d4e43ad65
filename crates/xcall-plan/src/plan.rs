//! The address plan: one small shared file that every sandbox of a merged address space maps.
//!
//! It fixes where each sandbox's region lives (`base + slot * slot_size`, the same in every
//! process) and lists each sandbox's exports: the allow-list of entries other sandboxes may
//! call, each with its hook index, declared argument size, flags and a lock word for
//! serialised entries.
//!
//! Layout (little-endian, `#[repr(C)]`): a 64-byte [`PlanHeader`], then [`SlotEntry`] ×
//! `slots`. A sandbox claims a slot with a compare-and-swap on its `state` word, writes the
//! rest, and publishes it with a release store of [`SLOT_LIVE`]; readers load `state` with
//! acquire before trusting anything else in the entry.

use crate::{PlanError, MAX_EXPORTS, MAX_SLOTS};
use std::os::fd::IntoRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// `"RDXPLAN1"` little-endian.
pub const PLAN_MAGIC: u64 = u64::from_le_bytes(*b"RDXPLAN1");
/// Layout version of the plan file this crate reads and writes.
pub const PLAN_VERSION: u32 = 1;

/// No sandbox holds the slot.
pub const SLOT_FREE: u64 = 0;
/// A sandbox is writing the entry.
pub const SLOT_CLAIMING: u64 = 1;
/// The entry is complete and its sandbox is serving.
pub const SLOT_LIVE: u64 = 2;

/// Export flag: at most one caller runs the entry at a time (across every process).
pub const EXPORT_SERIALIZED: u32 = 1;

/// Bytes of a sandbox or export name (NUL-padded).
pub const NAME_LEN: usize = 32;
/// Bytes of a region file path (NUL-padded).
pub const PATH_LEN: usize = 128;

/// The plan file's header.
#[repr(C, align(64))]
pub struct PlanHeader {
    /// [`PLAN_MAGIC`], stored last when the plan is created.
    pub magic: AtomicU64,
    /// [`PLAN_VERSION`].
    pub version: u32,
    /// Number of [`SlotEntry`]s after the header.
    pub slots: u32,
    /// Address of slot 0's region.
    pub base: u64,
    /// Bytes of address space per slot.
    pub slot_size: u64,
    /// Zero.
    pub reserved: [u64; 4],
}

/// One exported entry.
#[repr(C, align(64))]
pub struct ExportEntry {
    /// The entry's name (NUL-padded).
    pub name: [u8; NAME_LEN],
    /// Hook slot index of the entry in the sandbox's region.
    pub hook_index: u32,
    /// Bytes of argument buffer the entry reads (its context size).
    pub max_args: u32,
    /// [`EXPORT_SERIALIZED`] or 0.
    pub flags: u32,
    /// Zero.
    pub reserved0: u32,
    /// Serialised entries: 0 when free, else the running caller's thread id + 1.
    pub lock: AtomicU64,
    /// Zero.
    pub reserved1: u64,
}

/// One sandbox.
#[repr(C, align(64))]
pub struct SlotEntry {
    /// [`SLOT_FREE`], [`SLOT_CLAIMING`] or [`SLOT_LIVE`].
    pub state: AtomicU64,
    /// Process id of the sandbox's host.
    pub pid: AtomicU64,
    /// Bytes of the sandbox's region.
    pub region_size: u64,
    /// Valid entries of `exports`.
    pub export_count: AtomicU32,
    /// Zero.
    pub reserved0: u32,
    /// The sandbox's name (NUL-padded).
    pub name: [u8; NAME_LEN],
    /// Path of the sandbox's region file (NUL-padded).
    pub path: [u8; PATH_LEN],
    /// Zero.
    pub reserved1: [u64; 6],
    /// The sandbox's exported entries (the allow-list).
    pub exports: [ExportEntry; MAX_EXPORTS],
}

const _: () = {
    use std::mem::size_of;
    assert!(size_of::<PlanHeader>() == 64);
    assert!(size_of::<ExportEntry>() == 64);
    assert!(size_of::<SlotEntry>() == 256 + 64 * MAX_EXPORTS);
};

/// Where slots go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanSpec {
    /// First slot's address; page aligned, in the lower half of the user address space and
    /// away from where the kernel places ordinary mappings.
    pub base: u64,
    /// Bytes of address space per slot (regions must fit).
    pub slot_size: u64,
    /// Number of slots.
    pub slots: u32,
}

impl Default for PlanSpec {
    fn default() -> Self {
        Self {
            base: 0x5000_0000_0000,
            slot_size: 1 << 30,
            slots: MAX_SLOTS as u32,
        }
    }
}

/// An export as the plan lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    /// Index in the sandbox's export list ([`crate::Target::export`]).
    pub index: u16,
    /// The entry's name.
    pub name: String,
    /// Hook slot index of the entry in the sandbox's region.
    pub hook_index: u32,
    /// Bytes of argument buffer the entry reads.
    pub max_args: u32,
    /// [`EXPORT_SERIALIZED`] or 0.
    pub flags: u32,
}

/// A live sandbox as the plan lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotInfo {
    /// The slot the sandbox holds.
    pub slot: u16,
    /// The sandbox's name.
    pub name: String,
    /// Process id of the sandbox's host.
    pub pid: u64,
    /// Path of the sandbox's region file.
    pub path: PathBuf,
    /// Bytes of the sandbox's region.
    pub region_size: u64,
    /// Address of the region in every process (the slot's address).
    pub address: u64,
    /// The sandbox's exports.
    pub exports: Vec<ExportInfo>,
}

/// This process's mapping of a plan file. Mappings are never unmapped (services attached
/// through a plan keep pointers into it), so a `Plan` is cheap to keep and share.
#[derive(Clone, Copy)]
pub struct Plan {
    base: *mut u8,
    spec: PlanSpec,
    path: &'static Path,
}

// SAFETY: the mapping is shared memory accessed through atomics (state words, locks) or
// written only by the slot's owner before its release store; it is never unmapped.
unsafe impl Send for Plan {}
// SAFETY: as above.
unsafe impl Sync for Plan {}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("path", &self.path)
            .field("spec", &self.spec)
            .finish()
    }
}

fn file_len(slots: u32) -> u64 {
    (std::mem::size_of::<PlanHeader>() + slots as usize * std::mem::size_of::<SlotEntry>()) as u64
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> PlanError + 'a {
    move |source| PlanError::Io {
        what,
        path: path.into(),
        source,
    }
}

fn bad(path: &Path, reason: impl Into<String>) -> PlanError {
    PlanError::BadPlan {
        path: path.into(),
        reason: reason.into(),
    }
}

pub(crate) fn encode_name<const N: usize>(s: &str) -> Option<[u8; N]> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > N || b.contains(&0) {
        return None;
    }
    let mut out = [0u8; N];
    out[..b.len()].copy_from_slice(b);
    Some(out)
}

pub(crate) fn decode_name(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn pid_alive(pid: u64) -> bool {
    // SAFETY: kill with signal 0 only checks for existence and permission.
    pid != 0
        && (unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

impl Plan {
    /// Creates the plan file, or opens it if it exists with the same spec (the first process
    /// to arrive writes the header, under an exclusive `flock`).
    pub fn create(path: impl AsRef<Path>, spec: PlanSpec) -> Result<Plan, PlanError> {
        let path = path.as_ref();
        if spec.slots == 0 || spec.slots as usize > MAX_SLOTS {
            return Err(bad(path, format!("{} slots (1..={MAX_SLOTS})", spec.slots)));
        }
        if !spec.base.is_multiple_of(65536)
            || !spec.slot_size.is_multiple_of(65536)
            || spec.slot_size == 0
        {
            return Err(bad(path, "base and slot size must be 64 KiB multiples"));
        }
        let end = (spec.slots as u64)
            .checked_mul(spec.slot_size)
            .and_then(|n| n.checked_add(spec.base));
        if end.is_none_or(|e| e > 0x7f00_0000_0000) {
            return Err(bad(path, "slots reach beyond the lower user address space"));
        }
        Self::map(path, Some(spec))
    }

    /// Opens an existing plan file.
    pub fn open(path: impl AsRef<Path>) -> Result<Plan, PlanError> {
        Self::map(path.as_ref(), None)
    }

    fn map(path: &Path, create: Option<PlanSpec>) -> Result<Plan, PlanError> {
        // Several sandboxes create-or-open one plan, so no O_EXCL; but never through a link,
        // and never a file another user made or can write.
        let flags = libc::O_RDWR | create.map_or(0, |_| libc::O_CREAT);
        let fd = crate::open_shared_file(path, flags)?.into_raw_fd();
        let result = Self::map_fd(fd, path, create);
        // SAFETY: unlocking and closing our fd. The explicit unlock matters: the mapping keeps
        // the open file description (and so a flock) alive after close.
        unsafe {
            libc::flock(fd, libc::LOCK_UN);
            libc::close(fd)
        };
        result
    }

    fn map_fd(fd: libc::c_int, path: &Path, create: Option<PlanSpec>) -> Result<Plan, PlanError> {
        // SAFETY: flock on our fd; released when the fd is closed.
        if unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
            return Err(io("locking", path)(std::io::Error::last_os_error()));
        }
        let mut head = [0u8; 64];
        // SAFETY: pread into a local buffer.
        let n = unsafe { libc::pread(fd, head.as_mut_ptr() as *mut libc::c_void, 64, 0) };
        let existing =
            if n == 64 && u64::from_le_bytes(head[..8].try_into().expect("8")) == PLAN_MAGIC {
                let version = u32::from_le_bytes(head[8..12].try_into().expect("4"));
                if version != PLAN_VERSION {
                    return Err(bad(
                        path,
                        format!("version {version}, expected {PLAN_VERSION}"),
                    ));
                }
                Some(PlanSpec {
                    slots: u32::from_le_bytes(head[12..16].try_into().expect("4")),
                    base: u64::from_le_bytes(head[16..24].try_into().expect("8")),
                    slot_size: u64::from_le_bytes(head[24..32].try_into().expect("8")),
                })
            } else {
                None
            };
        let (spec, fresh) = match (existing, create) {
            (Some(found), Some(want)) if found != want => {
                return Err(bad(
                    path,
                    format!("exists with {found:?}, asked for {want:?}"),
                ))
            }
            (Some(found), _) => (found, false),
            (None, Some(want)) => (want, true),
            (None, None) => return Err(bad(path, "not an address plan (bad magic)")),
        };
        if spec.slots == 0 || spec.slots as usize > MAX_SLOTS {
            return Err(bad(path, format!("{} slots", spec.slots)));
        }
        let len = file_len(spec.slots);
        if fresh {
            // SAFETY: sizing our own file; a fresh file reads as zeros (every slot free).
            if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
                return Err(io("sizing", path)(std::io::Error::last_os_error()));
            }
        }
        // SAFETY: `stat` is plain old data; all zeros is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat into a local struct.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(io("inspecting", path)(std::io::Error::last_os_error()));
        }
        if (st.st_size as u64) < len {
            return Err(bad(path, format!("{} bytes, needs {len}", st.st_size)));
        }
        // SAFETY: a shared mapping of `len` bytes of our file; result checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io("mapping", path)(std::io::Error::last_os_error()));
        }
        let plan = Plan {
            base: p as *mut u8,
            spec,
            path: Box::leak(path.to_path_buf().into_boxed_path()),
        };
        if fresh {
            let h = plan.header_mut();
            h.version = PLAN_VERSION;
            h.slots = spec.slots;
            h.base = spec.base;
            h.slot_size = spec.slot_size;
            h.magic.store(PLAN_MAGIC, Ordering::Release);
        }
        Ok(plan)
    }

    #[allow(clippy::mut_from_ref)]
    fn header_mut(&self) -> &mut PlanHeader {
        // SAFETY: the header is at offset 0 of the live mapping; only the creator writes its
        // plain fields, before publishing the magic and under the file lock.
        unsafe { &mut *(self.base as *mut PlanHeader) }
    }

    /// The raw entry of `slot`, shared with every process that maps the plan (read `state`
    /// with acquire before trusting the rest). Panics if `slot` is outside the plan.
    pub fn entry(&self, slot: u16) -> &SlotEntry {
        assert!(
            (slot as u32) < self.spec.slots,
            "slot {slot} outside the plan"
        );
        // SAFETY: in bounds (checked above), aligned, never unmapped.
        unsafe {
            &*(self
                .base
                .add(64 + slot as usize * std::mem::size_of::<SlotEntry>())
                as *const SlotEntry)
        }
    }

    #[allow(clippy::mut_from_ref)]
    fn entry_mut(&self, slot: u16) -> &mut SlotEntry {
        // SAFETY: as `entry`; only the process that claimed the slot (state CLAIMING) writes
        // its plain fields, before the release store that makes it live.
        unsafe {
            &mut *(self
                .base
                .add(64 + slot as usize * std::mem::size_of::<SlotEntry>())
                as *mut SlotEntry)
        }
    }

    /// Where the plan's slots are.
    pub fn spec(&self) -> PlanSpec {
        self.spec
    }

    /// The plan file.
    pub fn path(&self) -> &Path {
        self.path
    }

    /// Virtual address of `slot`'s region in every process of the plan.
    pub fn slot_address(&self, slot: u16) -> Result<u64, PlanError> {
        self.check_slot(slot)?;
        Ok(self.spec.base + slot as u64 * self.spec.slot_size)
    }

    fn check_slot(&self, slot: u16) -> Result<(), PlanError> {
        if slot as u32 >= self.spec.slots {
            return Err(PlanError::NoSuchSlot {
                slot: slot as u32,
                slots: self.spec.slots,
            });
        }
        Ok(())
    }

    /// Claims `slot` (or the first free one) for a sandbox named `name`. A slot held by a
    /// process that no longer exists is taken over.
    pub fn claim(&self, slot: Option<u16>) -> Result<u16, PlanError> {
        let me = std::process::id() as u64;
        let try_one = |s: u16| -> Result<bool, PlanError> {
            let e = self.entry(s);
            loop {
                let state = e.state.load(Ordering::Acquire);
                if state == SLOT_FREE {
                    if e.state
                        .compare_exchange(
                            SLOT_FREE,
                            SLOT_CLAIMING,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_ok()
                    {
                        e.pid.store(me, Ordering::Release);
                        return Ok(true);
                    }
                    continue;
                }
                let pid = e.pid.load(Ordering::Acquire);
                if pid != 0 && !pid_alive(pid) {
                    // The holder died: take the slot over with one CAS on its pid word.
                    if e.pid
                        .compare_exchange(pid, me, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        e.state.store(SLOT_CLAIMING, Ordering::Release);
                        return Ok(true);
                    }
                    continue;
                }
                if slot.is_some() {
                    return Err(PlanError::SlotTaken {
                        slot: s,
                        name: decode_name(&e.name),
                        pid,
                    });
                }
                return Ok(false);
            }
        };
        match slot {
            Some(s) => {
                self.check_slot(s)?;
                try_one(s)?;
                Ok(s)
            }
            None => {
                for s in 0..self.spec.slots as u16 {
                    if try_one(s)? {
                        return Ok(s);
                    }
                }
                Err(PlanError::PlanFull)
            }
        }
    }

    /// Fills a claimed slot and makes it live.
    pub fn publish(
        &self,
        slot: u16,
        name: &str,
        path: &Path,
        region_size: u64,
        exports: &[ExportInfo],
    ) -> Result<(), PlanError> {
        let e = self.entry_mut(slot);
        e.name = encode_name(name)
            .ok_or_else(|| bad(self.path, format!("bad sandbox name {name:?}")))?;
        e.path = encode_name(&path.display().to_string())
            .ok_or_else(|| bad(self.path, format!("region path {path:?} too long")))?;
        e.region_size = region_size;
        for (i, x) in exports.iter().enumerate() {
            let slot_export = &mut e.exports[i];
            slot_export.name = encode_name(&x.name).ok_or_else(|| PlanError::BadExport {
                name: x.name.clone(),
                reason: format!("name must be 1..={NAME_LEN} bytes without NUL"),
            })?;
            slot_export.hook_index = x.hook_index;
            slot_export.max_args = x.max_args;
            slot_export.flags = x.flags;
            slot_export.lock.store(0, Ordering::Relaxed);
        }
        e.export_count
            .store(exports.len() as u32, Ordering::Relaxed);
        e.state.store(SLOT_LIVE, Ordering::Release);
        Ok(())
    }

    /// Frees a slot this process holds.
    pub fn release(&self, slot: u16) {
        let e = self.entry(slot);
        if e.pid.load(Ordering::Acquire) == std::process::id() as u64 {
            e.export_count.store(0, Ordering::Relaxed);
            e.state.store(SLOT_FREE, Ordering::Release);
        }
    }

    /// The live sandbox in `slot`.
    pub fn slot(&self, slot: u16) -> Result<SlotInfo, PlanError> {
        self.check_slot(slot)?;
        let e = self.entry(slot);
        if e.state.load(Ordering::Acquire) != SLOT_LIVE {
            return Err(PlanError::EmptySlot(slot));
        }
        let count = (e.export_count.load(Ordering::Relaxed) as usize).min(MAX_EXPORTS);
        Ok(SlotInfo {
            slot,
            name: decode_name(&e.name),
            pid: e.pid.load(Ordering::Relaxed),
            path: PathBuf::from(decode_name(&e.path)),
            region_size: e.region_size,
            address: self.slot_address(slot)?,
            exports: e.exports[..count]
                .iter()
                .enumerate()
                .map(|(i, x)| ExportInfo {
                    index: i as u16,
                    name: decode_name(&x.name),
                    hook_index: x.hook_index,
                    max_args: x.max_args,
                    flags: x.flags,
                })
                .collect(),
        })
    }

    /// Every live sandbox.
    pub fn slots(&self) -> Vec<SlotInfo> {
        (0..self.spec.slots as u16)
            .filter_map(|s| self.slot(s).ok())
            .collect()
    }

    /// The live sandbox named `name`.
    pub fn find(&self, name: &str) -> Result<SlotInfo, PlanError> {
        self.slots()
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| PlanError::NoSuchService(name.into()))
    }

    /// The [`crate::Target`] of `service`'s export `entry`.
    pub fn target(&self, service: &str, entry: &str) -> Result<crate::Target, PlanError> {
        let s = self.find(service)?;
        let x = s
            .exports
            .iter()
            .find(|x| x.name == entry)
            .ok_or_else(|| PlanError::BadExport {
                name: entry.into(),
                reason: format!("{service:?} exports no such entry"),
            })?;
        Ok(crate::Target::new(s.slot, x.index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Target;
    use proptest::prelude::*;

    fn temp(tag: &str) -> PathBuf {
        let p = PathBuf::from(format!(
            "/dev/shm/rdx-xcall-plan-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn create_open_and_spec_mismatch() {
        let p = temp("spec");
        let plan = Plan::create(&p, PlanSpec::default()).unwrap();
        assert_eq!(Plan::open(&p).unwrap().spec(), plan.spec());
        let other = PlanSpec {
            slots: 8,
            ..PlanSpec::default()
        };
        assert!(matches!(
            Plan::create(&p, other),
            Err(PlanError::BadPlan { .. })
        ));
        assert_eq!(
            plan.slot_address(3).unwrap(),
            0x5000_0000_0000 + 3 * (1 << 30)
        );
        assert!(matches!(
            plan.slot_address(64),
            Err(PlanError::NoSuchSlot {
                slot: 64,
                slots: 64
            })
        ));
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn bad_specs_and_files_are_refused() {
        let p = temp("bad");
        for spec in [
            PlanSpec {
                slots: 0,
                ..PlanSpec::default()
            },
            PlanSpec {
                slots: 65,
                ..PlanSpec::default()
            },
            PlanSpec {
                base: 4096,
                ..PlanSpec::default()
            },
            PlanSpec {
                slot_size: 0,
                ..PlanSpec::default()
            },
            PlanSpec {
                base: 0x7eff_0000_0000,
                ..PlanSpec::default()
            },
        ] {
            assert!(
                matches!(Plan::create(&p, spec), Err(PlanError::BadPlan { .. })),
                "{spec:?}"
            );
        }
        std::fs::write(
            &p,
            b"not a plan at all, just some bytes that are long enough......",
        )
        .unwrap();
        assert!(matches!(Plan::open(&p), Err(PlanError::BadPlan { .. })));
        std::fs::write(&p, b"").unwrap();
        assert!(matches!(Plan::open(&p), Err(PlanError::BadPlan { .. })));
        // A valid header whose file was truncated.
        let _ = std::fs::remove_file(&p);
        Plan::create(&p, PlanSpec::default()).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(100).unwrap();
        assert!(matches!(Plan::open(&p), Err(PlanError::BadPlan { .. })));
        assert!(matches!(
            Plan::open("/dev/shm/rdx-xcall-no-such-plan"),
            Err(PlanError::Io { .. })
        ));
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn claim_publish_find_release_and_dead_holders() {
        let p = temp("claim");
        let plan = Plan::create(&p, PlanSpec::default()).unwrap();
        let s = plan.claim(Some(5)).unwrap();
        assert!(matches!(plan.slot(5), Err(PlanError::EmptySlot(5))));
        let exports = [ExportInfo {
            index: 0,
            name: "lookup".into(),
            hook_index: 2,
            max_args: 8,
            flags: EXPORT_SERIALIZED,
        }];
        plan.publish(s, "storage", Path::new("/dev/shm/x"), 4096, &exports)
            .unwrap();
        let info = plan.find("storage").unwrap();
        assert_eq!((info.slot, info.exports.clone()), (5, exports.to_vec()));
        assert_eq!(plan.target("storage", "lookup").unwrap(), Target::new(5, 0));
        assert!(plan.target("storage", "store").is_err());
        assert!(matches!(
            plan.find("cache"),
            Err(PlanError::NoSuchService(_))
        ));
        assert!(matches!(
            plan.claim(Some(5)),
            Err(PlanError::SlotTaken { slot: 5, .. })
        ));
        assert_eq!(plan.claim(None).unwrap(), 0, "first free slot");
        plan.release(5);
        assert!(plan.find("storage").is_err());
        // A slot whose holder died is taken over.
        let e = plan.entry(7);
        e.state.store(SLOT_LIVE, Ordering::Release);
        e.pid.store(u32::MAX as u64 - 1, Ordering::Release);
        assert_eq!(plan.claim(Some(7)).unwrap(), 7);
        assert_eq!(e.pid.load(Ordering::Acquire), std::process::id() as u64);
        std::fs::remove_file(&p).unwrap();
    }

    proptest! {
        #[test]
        fn targets_round_trip(slot: u16, export: u16) {
            let t = Target::new(slot, export);
            prop_assert!((t.encode() as i64) > 0, "EIM constraints take it as a positive i64");
            prop_assert_eq!(Target::decode(t.encode()), Some(t));
        }

        #[test]
        fn only_target_values_decode(raw: u64) {
            let d = Target::decode(raw);
            prop_assert_eq!(d.is_some(), raw >> 32 == 0x5843_0000);
            if let Some(t) = d {
                prop_assert_eq!(t.encode(), raw);
            }
        }

        #[test]
        fn names_encode_or_refuse(s in "\\PC{0,40}") {
            match encode_name::<NAME_LEN>(&s) {
                Some(b) => prop_assert_eq!(decode_name(&b), s),
                None => prop_assert!(s.is_empty() || s.len() > NAME_LEN || s.contains('\0')),
            }
        }
    }
}
