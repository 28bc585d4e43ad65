//! The region: one contiguous memory area per data-plane instance, the only interface between
//! the control plane and the data plane.
//!
//! Every structure here is `#[repr(C)]` with its offsets asserted at compile time, so a party
//! that has only the header (read remotely through a transport) can compute where everything
//! else lives. Offsets are always relative to the region's first byte; the host's mapping
//! address ([`RegionHeader::base_address`]) is only needed to turn an offset into a pointer
//! that *host* code can use (helper addresses, map objects, code entries).
//!
//! Field-by-field documentation with the protocols that use each word: `docs/region.md`.

use std::sync::atomic::{AtomicU32, AtomicU64};

/// `"RDXREGN1"` little-endian: the first eight bytes of every region.
pub const MAGIC: u64 = u64::from_le_bytes(*b"RDXREGN1");

/// Bumped on every incompatible change to anything in this module.
pub const LAYOUT_VERSION: u32 = 2;

/// [`RegionHeader::host_flags`] bit: the host process registered for
/// `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`, so a control plane on the same machine can
/// make every running thread of the host pass a full barrier with an IPI (microseconds)
/// instead of the RCU-based `MEMBARRIER_CMD_GLOBAL` (milliseconds). Hosts that do not set it
/// (older runtimes, kernels without the command) get the global barrier.
pub const HOST_FLAG_MEMBARRIER_EXPEDITED: u32 = 1;

/// Granularity of data sections.
pub const DATA_ALIGN: u64 = 4096;

/// Granularity of the code arena's start and size: the largest base page size among the
/// supported architectures (aarch64 kernels may use 64 KiB pages), so that the code arena
/// never shares a page with writable data on any target.
pub const CODE_ALIGN: u64 = 65536;

/// Alignment of every code entry point inside the code arena. Entry offsets therefore have
/// their low bit free, which [`HookSlot::active`] uses as the hold bit.
pub const CODE_ENTRY_ALIGN: u64 = 16;

/// Alignment of XState map objects inside the scratchpad.
pub const MAP_ALIGN: u64 = 64;

/// Target architecture of the native code a region runs.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// 64-bit x86.
    X86_64 = 1,
    /// 64-bit Arm (AArch64).
    Aarch64 = 2,
}

impl Arch {
    /// The architecture this crate was compiled for, if it is one rdx supports.
    pub const HOST: Option<Arch> = if cfg!(target_arch = "x86_64") {
        Some(Arch::X86_64)
    } else if cfg!(target_arch = "aarch64") {
        Some(Arch::Aarch64)
    } else {
        None
    };

    /// The architecture of a header's `arch` tag; `None` for a tag this build does not know.
    pub fn from_u32(raw: u32) -> Option<Arch> {
        match raw {
            1 => Some(Arch::X86_64),
            2 => Some(Arch::Aarch64),
            _ => None,
        }
    }

    /// The name used in messages and artifact headers (`x86_64`, `aarch64`).
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }
}

/// Where one section lives: `[offset, offset + size)` from the region's first byte.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Section {
    /// Bytes from the region's first byte to the section's.
    pub offset: u64,
    /// Bytes in the section (a multiple of its alignment).
    pub size: u64,
}

impl Section {
    /// One past the section's last byte (saturating, so a corrupt table cannot wrap).
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.size)
    }

    /// Whether the region offset `offset` lies inside the section.
    pub fn contains(&self, offset: u64) -> bool {
        offset >= self.offset && offset < self.end()
    }
}

/// Index of each section in [`RegionHeader::sections`], in address order.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SectionId {
    /// The host's Extension Interface Model spec, an opaque blob of `eim_len` bytes.
    Eim = 0,
    /// [`ContextTableHeader`] followed by [`ContextEntry`] × `context_capacity`.
    Context = 1,
    /// `u64` function addresses indexed by helper / host-function id (`helper_capacity`).
    HelperTable = 2,
    /// [`HookSlot`] × `max_hooks`.
    Hooks = 3,
    /// [`ThreadSlot`] × `thread_slots`.
    Threads = 4,
    /// [`HookCounters`] × `thread_slots` × `max_hooks` rounded up to even (thread-major; see
    /// `geometry::counter_row_cells`).
    Counters = 5,
    /// Opaque bytes owned by the control plane's allocators (code arena and scratchpad), so
    /// that another control plane can recover them.
    Alloc = 6,
    /// [`XStateMeta`] × `xstate_capacity`: map id → type, offset, size.
    XMeta = 7,
    /// The XState scratchpad: map objects ([`MapHeader`] + data), 64-byte aligned.
    Scratch = 8,
    /// Native code. Mapped read+execute in the host, never writable there.
    Code = 9,
}

/// Number of sections: the length of [`RegionHeader::sections`].
pub const SECTION_COUNT: usize = 10;

impl SectionId {
    /// Every section, in address order.
    pub const ALL: [SectionId; SECTION_COUNT] = [
        SectionId::Eim,
        SectionId::Context,
        SectionId::HelperTable,
        SectionId::Hooks,
        SectionId::Threads,
        SectionId::Counters,
        SectionId::Alloc,
        SectionId::XMeta,
        SectionId::Scratch,
        SectionId::Code,
    ];

    /// The section's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            SectionId::Eim => "eim",
            SectionId::Context => "context",
            SectionId::HelperTable => "helper table",
            SectionId::Hooks => "hooks",
            SectionId::Threads => "threads",
            SectionId::Counters => "counters",
            SectionId::Alloc => "alloc",
            SectionId::XMeta => "xstate meta",
            SectionId::Scratch => "scratchpad",
            SectionId::Code => "code",
        }
    }
}

/// Host lifecycle, in [`RegionHeader::state`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionState {
    /// `ctx_init` is writing the region; nothing in it may be trusted yet.
    Initializing = 0,
    /// Written and validated by the host, not yet exposed.
    Ready = 1,
    /// `ctx_register` exposed it: control planes may attach.
    Registered = 2,
    /// `ctx_teardown` ran: hooks no longer execute extension code.
    TornDown = 3,
}

impl RegionState {
    /// The state of a header's `state` word; `None` for a value this build does not know.
    pub fn from_u32(raw: u32) -> Option<RegionState> {
        match raw {
            0 => Some(RegionState::Initializing),
            1 => Some(RegionState::Ready),
            2 => Some(RegionState::Registered),
            3 => Some(RegionState::TornDown),
            _ => None,
        }
    }
}

/// Byte length of the immutable, checksummed part of the header.
pub const HEADER_IMMUTABLE_LEN: usize = 256;

/// The region header, at offset 0. Bytes `0..256` are written once by `ctx_init` and covered
/// by `checksum`; the words after it change at run time and each is documented with the
/// protocol that writes it.
#[repr(C, align(64))]
pub struct RegionHeader {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`LAYOUT_VERSION`] of the writer.
    pub layout_version: u32,
    /// [`Arch`] of the host process (and of the code it runs).
    pub arch: u32,
    /// `size_of::<RegionHeader>()` of the writer.
    pub header_size: u32,
    /// Page size of the host, for information (sections are aligned to constants, not to it).
    pub page_size: u32,
    /// Bytes in the region; the backing file is at least this long.
    pub region_size: u64,
    /// Virtual address at which the host mapped the region. Host-side addresses (helpers,
    /// map objects, code entries) are `base_address + offset`.
    pub base_address: u64,
    /// Process id of the host, for diagnostics.
    pub host_pid: u32,
    /// Number of [`HookSlot`]s.
    pub max_hooks: u32,
    /// Number of [`ThreadSlot`]s (and of per-thread value copies in per-thread maps).
    pub thread_slots: u32,
    /// Capacity of the context table, in entries.
    pub context_capacity: u32,
    /// Capacity of the XState meta table, in entries (= the largest map id + 1).
    pub xstate_capacity: u32,
    /// Entries in the helper table (helper and host-function ids are below this).
    pub helper_capacity: u32,
    /// Longest time a hook caller waits on a held slot before it runs the published version
    /// anyway (counted in [`HookSlot::hold_timeouts`]). Control planes must release holds
    /// well within it.
    pub hold_timeout_ns: u64,
    /// Bytes of EIM spec at the start of the EIM section.
    pub eim_len: u64,
    /// Bytes at the start of the scratchpad that the host itself uses (the trace ring).
    /// Control-plane allocations start at `sections[Scratch].offset + scratch_reserved`.
    pub scratch_reserved: u64,
    /// XState map id of the trace ring buffer that `trace_printk` writes to.
    pub trace_map_id: u32,
    /// `HOST_FLAG_*` bits: facts about the host process that control planes rely on.
    pub host_flags: u32,
    /// Section table, indexed by [`SectionId`].
    pub sections: [Section; SECTION_COUNT],
    /// FNV-1a 64 of bytes `0..HEADER_IMMUTABLE_LEN`.
    pub checksum: u64,
    /// [`RegionState`]; written by the host.
    pub state: AtomicU32,
    /// Zero; keeps `lease` 8-byte aligned.
    pub reserved2: u32,
    /// Control-plane lease word: 0 when free, otherwise the holder's nonzero token. Taken and
    /// released with compare-and-swap.
    pub lease: AtomicU64,
    /// Wall-clock (`CLOCK_REALTIME`) nanoseconds after which the lease may be broken.
    pub lease_expires_ns: AtomicU64,
    /// Incremented (fetch-and-add) by the control plane once per published transaction.
    pub generation: AtomicU64,
    /// Incremented by the host on every `ctx_init` of the same file, so a control plane can
    /// tell a restarted host from the one it attached to.
    pub host_incarnation: AtomicU64,
    /// Advanced (fetch-and-add) by whoever creates an XState map, before the map becomes
    /// visible in the meta table. The host keeps decoded map headers while it is unchanged.
    pub xstate_generation: AtomicU64,
    /// Zero; pads the header to whole cache lines.
    pub reserved3: u64,
}

/// Region offset of the [`UpdateIntent`] record: in page 0, after the [`RegionHeader`] and
/// before the first section (which starts at [`DATA_ALIGN`]). The host never reads or writes
/// it; a host restarted on the same file keeps whatever a control plane left there, which is
/// why the record carries the incarnation it was written for.
pub const UPDATE_INTENT_OFFSET: u64 = 1024;

/// Hook slots of one node that one [`UpdateIntent`] can name.
pub const UPDATE_INTENT_SLOTS: usize = 64;

/// Bytes of a collective update's id in [`UpdateIntent::id`] (NUL-padded).
pub const UPDATE_INTENT_ID_LEN: usize = 48;

/// Bytes of a node name in [`UpdateIntent::node_name`] (NUL-padded).
pub const UPDATE_INTENT_NAME_LEN: usize = 32;

/// Bytes of the decision node's address in [`UpdateIntent::decider_address`] (NUL-padded).
pub const UPDATE_INTENT_ADDRESS_LEN: usize = 256;

/// [`UpdateIntent::state`]'s low byte: no collective update recorded.
pub const INTENT_NONE: u64 = 0;
/// The update is prepared on this node and may hold its slots; undecided here.
pub const INTENT_PREPARED: u64 = 1;
/// The update is decided committed: every slot ends on its new word.
pub const INTENT_COMMITTED: u64 = 2;
/// The update is decided aborted: every slot ends on the word it replaced.
pub const INTENT_ABORTED: u64 = 3;

/// Encodes [`UpdateIntent::state`]: the update's tag (a hash of its id) above the low byte,
/// the state in the low byte, so that one compare-and-swap decides exactly one update.
pub const fn intent_word(tag: u64, state: u64) -> u64 {
    (tag << 8) | (state & 0xff)
}

/// The state part of an [`UpdateIntent::state`] word.
pub const fn intent_state(word: u64) -> u64 {
    word & 0xff
}

/// The tag part of an [`UpdateIntent::state`] word.
pub const fn intent_tag(word: u64) -> u64 {
    word >> 8
}

/// One hook slot's share of a collective update: what it is held on, what publishes it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntentSlot {
    /// Region offset of the [`HookSlot`].
    pub slot_offset: u64,
    /// The active word the update replaces (held as `expected | ACTIVE_HOLD`).
    pub expected: u64,
    /// The active word that publishes the update (0: the hook is detached).
    pub new_word: u64,
    /// The class budget written with the new word.
    pub budget: u64,
}

/// A collective update's intent and decision as one node holds it (a broadcast or a
/// migration, written by its control plane before it holds any slot), so that any control
/// plane that reaches the nodes can finish or undo the update without the one that started
/// it. Written only under the node's lease: body first, then `state` with a
/// compare-and-swap. One node of the update, the decision node, holds the commit point:
/// its `state` going from prepared to committed (or, by a recovery, to aborted). See
/// docs/broadcast.md for the protocol and why no outcome is mixed.
#[repr(C, align(64))]
pub struct UpdateIntent {
    /// [`intent_word`] of the update's tag and [`INTENT_NONE`], [`INTENT_PREPARED`],
    /// [`INTENT_COMMITTED`] or [`INTENT_ABORTED`].
    pub state: AtomicU64,
    /// 0 while this node's slots may still be held or its record still needed; 1 once
    /// settled (and, on the decision node, once every participant is settled).
    pub settled: AtomicU64,
    /// [`RegionHeader::host_incarnation`] when written: a record of an earlier incarnation
    /// describes a region that is gone.
    pub incarnation: u64,
    /// The writing control plane's holder record (machine tag and pid), to tell whether it
    /// is still alive.
    pub coordinator: u64,
    /// The lease holder id the update's control plane uses on every node.
    pub holder: u32,
    /// Entries of `slots` in use.
    pub slot_count: u32,
    /// Nodes taking part in the update.
    pub participants: u32,
    /// 1 when this node is the update's decision node.
    pub is_decider: u32,
    /// The update's id (NUL-padded).
    pub id: [u8; UPDATE_INTENT_ID_LEN],
    /// This node's name in the update (NUL-padded).
    pub node_name: [u8; UPDATE_INTENT_NAME_LEN],
    /// The decision node's address as the update's control plane reached it (NUL-padded).
    pub decider_address: [u8; UPDATE_INTENT_ADDRESS_LEN],
    /// This node's slots in the update.
    pub slots: [IntentSlot; UPDATE_INTENT_SLOTS],
}

/// Header of the context table section.
#[repr(C, align(64))]
pub struct ContextTableHeader {
    /// Entries published so far. The host writes an entry, then increments `count` with
    /// release ordering; readers load `count` with acquire and read that many entries.
    pub count: AtomicU64,
    /// Entries the table can hold ([`RegionHeader::context_capacity`]).
    pub capacity: u64,
    /// Zero; pads the header to a cache line.
    pub reserved: [u64; 6],
}

/// What a [`ContextEntry`] describes.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextKind {
    /// A runtime helper (kernel-compatible id). Linked as `helper:<id>`.
    Helper = 1,
    /// A host function registered by the application. Linked as `helper:<id>` too.
    HostFunction = 2,
    /// A host variable: `addr` is its address, `size` its byte size. Linked as `var:<name>`.
    HostVariable = 3,
    /// A declared hook: `id` is its slot index, `addr` the slot's region offset and `size`
    /// the size of its context structure.
    Hook = 4,
}

impl ContextKind {
    /// The kind of an entry's `kind` word; `None` for a value this build does not know.
    pub fn from_u32(raw: u32) -> Option<ContextKind> {
        match raw {
            1 => Some(ContextKind::Helper),
            2 => Some(ContextKind::HostFunction),
            3 => Some(ContextKind::HostVariable),
            4 => Some(ContextKind::Hook),
            _ => None,
        }
    }
}

/// Longest name a context entry can hold (NUL-padded, not necessarily NUL-terminated).
pub const CONTEXT_NAME_LEN: usize = 40;

/// One exported symbol of the host: the "GOT" the control plane links against.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ContextEntry {
    /// [`ContextKind`].
    pub kind: u32,
    /// Helper / host-function id, or hook slot index.
    pub id: u32,
    /// Host virtual address (helpers, functions, variables) or region offset (hooks).
    pub addr: u64,
    /// Variable or hook-context size in bytes; 0 for functions.
    pub size: u64,
    /// The symbol's name, NUL-padded ([`ContextEntry::name_bytes`] reads it).
    pub name: [u8; CONTEXT_NAME_LEN],
}

impl ContextEntry {
    /// The name up to its first NUL.
    pub fn name_bytes(&self) -> &[u8] {
        let end = self
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(CONTEXT_NAME_LEN);
        &self.name[..end]
    }

    /// Encodes `name` NUL-padded; `None` if it does not fit.
    pub fn encode_name(name: &str) -> Option<[u8; CONTEXT_NAME_LEN]> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() > CONTEXT_NAME_LEN || bytes.contains(&0) {
            return None;
        }
        let mut out = [0u8; CONTEXT_NAME_LEN];
        out[..bytes.len()].copy_from_slice(bytes);
        Some(out)
    }
}

/// The hold bit of [`HookSlot::active`].
pub const ACTIVE_HOLD: u64 = 1;

/// Encodes a published program for [`HookSlot::active`]: `version` in the high 32 bits
/// (nonzero), the entry's region offset in the low 32 bits (16-byte aligned, so bit 0 stays
/// free for [`ACTIVE_HOLD`]).
pub const fn active_word(version: u32, entry_offset: u32) -> u64 {
    ((version as u64) << 32) | entry_offset as u64
}

/// Version part of an active word (0 = nothing attached).
pub const fn active_version(word: u64) -> u32 {
    (word >> 32) as u32
}

/// Entry region offset of an active word.
pub const fn active_entry_offset(word: u64) -> u32 {
    (word as u32) & !(ACTIVE_HOLD as u32)
}

/// One hook: exactly one cache line, so that threads running different hooks never share
/// a line that a control plane writes.
#[repr(C, align(64))]
pub struct HookSlot {
    /// The published program: 0 when empty, otherwise [`active_word`] (version, entry
    /// offset), possibly with [`ACTIVE_HOLD`]. Hosts load it with acquire ordering; control
    /// planes change it only with 8-byte compare-and-swap, after everything the new version
    /// needs has been written.
    pub active: AtomicU64,
    /// Instruction budget per run of the bound class (metered code stops when it runs out).
    pub budget: AtomicU64,
    /// Value the hook returns when nothing runs: empty slot, invalid slot, failed run.
    pub default_ret: AtomicU64,
    /// Runs that stopped abnormally (budget exhausted).
    pub failures: AtomicU64,
    /// Times the host found an invalid active word (entry outside the code arena).
    pub errors: AtomicU64,
    /// Callers that gave up waiting on a held slot.
    pub hold_timeouts: AtomicU64,
    /// The last invalid active word the host refused, for diagnostics.
    pub rejected_word: AtomicU64,
    /// 1 once the host declared this hook (its name is in the context table), else 0.
    pub declared: AtomicU64,
}

/// One host thread that runs hooks: one cache line, written only by its owner.
#[repr(C, align(64))]
pub struct ThreadSlot {
    /// 0 when free; otherwise the owner's kernel thread id + 1.
    pub owner: AtomicU64,
    /// Incremented when the thread enters extension code and again when it leaves: odd
    /// means "inside". A control plane that wants to free code or XState retired at time T
    /// waits, after a remote barrier, until every slot whose epoch was odd has changed.
    pub epoch: AtomicU64,
    /// Zero; pads the slot to a cache line.
    pub reserved: [u64; 6],
}

/// Per-(thread, hook) counters, written only by the owning thread; a reader sums them over
/// all thread slots.
#[repr(C, align(32))]
pub struct HookCounters {
    /// Runs of extension code (any outcome).
    pub runs: AtomicU64,
    /// Runs whose duration was sampled (one in [`TIME_SAMPLE_PERIOD`]).
    pub timed_runs: AtomicU64,
    /// Total nanoseconds of the sampled runs.
    pub timed_ns: AtomicU64,
    /// Runs of an elite (speculative) artifact that left their fast path at a failed guard
    /// (`RunStatus::Deopt`). Zero in regions written before this counter existed, where
    /// the cell was reserved and never written.
    pub deopts: AtomicU64,
}

/// One run in this many (per thread and hook) is timed; the average run time is
/// `timed_ns / timed_runs`.
pub const TIME_SAMPLE_PERIOD: u64 = 64;

/// [`XStateMeta::state`]: the row is free (no map has this id).
pub const XMETA_FREE: u32 = 0;
/// Being written by a control plane; readers skip it.
pub const XMETA_PENDING: u32 = 1;
/// Created and readable: set last, with release, once the map object is written.
pub const XMETA_LIVE: u32 = 2;

/// Longest map name a meta row holds (NUL-padded).
pub const XSTATE_NAME_LEN: usize = 24;

/// One XState map: the meta table row with the map's id as its index.
#[repr(C)]
pub struct XStateMeta {
    /// [`XMETA_FREE`], [`XMETA_PENDING`] or [`XMETA_LIVE`] (set last, with release).
    pub state: AtomicU32,
    /// [`MapType`] value.
    pub map_type: u32,
    /// Region offset of the map's [`MapHeader`].
    pub offset: u64,
    /// Bytes allocated for header plus data.
    pub size: u64,
    /// Key size in bytes, as declared by the program.
    pub key_size: u32,
    /// Value size in bytes, as declared by the program.
    pub value_size: u32,
    /// Capacity in entries, as declared by the program.
    pub max_entries: u32,
    /// The map's `BPF_F_*` flags, as declared by the program.
    pub flags: u32,
    /// The map's name, NUL-padded, for listings and linking by name.
    pub name: [u8; XSTATE_NAME_LEN],
}

/// Map types, numbered as the kernel's `enum bpf_map_type`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapType {
    /// `BPF_MAP_TYPE_HASH`: open addressing with per-element seqlocks.
    Hash = 1,
    /// `BPF_MAP_TYPE_ARRAY`: fixed elements indexed by a `u32` key.
    Array = 2,
    /// `BPF_MAP_TYPE_PROG_ARRAY`: tail-call targets, written only by control planes.
    ProgArray = 3,
    /// `BPF_MAP_TYPE_PERCPU_HASH`, with one value copy per thread slot instead of per CPU.
    PerThreadHash = 5,
    /// `BPF_MAP_TYPE_PERCPU_ARRAY`, with one value copy per thread slot instead of per CPU.
    PerThreadArray = 6,
    /// `BPF_MAP_TYPE_LPM_TRIE`: longest-prefix match.
    LpmTrie = 11,
    /// `BPF_MAP_TYPE_RINGBUF`: records reserved by extension code, read by a control plane.
    RingBuf = 27,
}

impl MapType {
    /// The type of a kernel map type number; `None` for types rdx does not implement.
    pub fn from_u32(raw: u32) -> Option<MapType> {
        Some(match raw {
            1 => MapType::Hash,
            2 => MapType::Array,
            3 => MapType::ProgArray,
            5 => MapType::PerThreadHash,
            6 => MapType::PerThreadArray,
            11 => MapType::LpmTrie,
            27 => MapType::RingBuf,
            _ => return None,
        })
    }
}

/// `"MAP1"`: first word of every map object.
pub const MAP_MAGIC: u32 = u32::from_le_bytes(*b"MAP1");

/// The object at the start of every XState map, 64-byte aligned. The address that map
/// helpers receive in `r1` (`map:<index>` relocations) is this header's host address. Data
/// offsets are relative to the header itself, so the header is all a helper needs.
#[repr(C, align(64))]
pub struct MapHeader {
    /// [`MAP_MAGIC`]; checked before a header is used.
    pub magic: u32,
    /// [`MapType`].
    pub map_type: u32,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value size in bytes.
    pub value_size: u32,
    /// Capacity in entries (ring buffers: the ring's data bytes, as in the kernel).
    pub max_entries: u32,
    /// The map's `BPF_F_*` flags.
    pub flags: u32,
    /// `key_size` rounded up to 8.
    pub key_stride: u32,
    /// `value_size` rounded up to 8.
    pub value_stride: u32,
    /// Bytes per stored element (layout depends on the type; see `docs/region.md`).
    pub entry_stride: u32,
    /// Hash tables: number of buckets (a power of two). Ring buffers: data bytes (a power of
    /// two). LPM tries: node capacity (2 × `max_entries`: leaves plus intermediate nodes).
    pub buckets: u32,
    /// Per-thread maps: copies of each value (= the region's `thread_slots`), else 1.
    pub copies: u32,
    /// The map's id (its meta table index).
    pub id: u32,
    /// Offset of the first data byte from this header.
    pub data_offset: u64,
    /// Bytes of data.
    pub data_size: u64,
    /// Writer lock (hash, LPM, ring-buffer producers): 0 free, else the holder's token.
    /// Host threads and remote control planes both take it with compare-and-swap.
    pub lock: AtomicU64,
    /// Live elements (hash, LPM).
    pub count: AtomicU64,
    /// Ring buffers: producer position (bytes ever reserved).
    pub producer_pos: AtomicU64,
    /// Ring buffers: consumer position (bytes ever consumed).
    pub consumer_pos: AtomicU64,
    /// Ring buffers: records dropped for lack of space.
    pub dropped: AtomicU64,
    /// LPM tries: the writers' sequence word, odd while a writer (holding `lock`) changes
    /// the trie. Readers traverse between two equal, even loads of it.
    pub write_seq: AtomicU64,
    /// Zero; pads the header to 128 bytes.
    pub reserved: [u64; 2],
}

/// Layout facts a remote party needs without the Rust types.
pub mod offsets {
    use super::*;
    use std::mem::offset_of;

    /// [`RegionHeader::state`].
    pub const HEADER_STATE: u64 = offset_of!(RegionHeader, state) as u64;
    /// [`RegionHeader::lease`].
    pub const HEADER_LEASE: u64 = offset_of!(RegionHeader, lease) as u64;
    /// [`RegionHeader::lease_expires_ns`].
    pub const HEADER_LEASE_EXPIRES: u64 = offset_of!(RegionHeader, lease_expires_ns) as u64;
    /// [`RegionHeader::generation`].
    pub const HEADER_GENERATION: u64 = offset_of!(RegionHeader, generation) as u64;
    /// [`RegionHeader::host_incarnation`].
    pub const HEADER_INCARNATION: u64 = offset_of!(RegionHeader, host_incarnation) as u64;
    /// [`RegionHeader::xstate_generation`].
    pub const HEADER_XSTATE_GENERATION: u64 = offset_of!(RegionHeader, xstate_generation) as u64;
    /// [`HookSlot::active`].
    pub const HOOK_ACTIVE: u64 = offset_of!(HookSlot, active) as u64;
    /// [`HookSlot::budget`].
    pub const HOOK_BUDGET: u64 = offset_of!(HookSlot, budget) as u64;
    /// [`HookSlot::default_ret`].
    pub const HOOK_DEFAULT_RET: u64 = offset_of!(HookSlot, default_ret) as u64;
    /// [`HookSlot::failures`].
    pub const HOOK_FAILURES: u64 = offset_of!(HookSlot, failures) as u64;
    /// [`HookSlot::errors`].
    pub const HOOK_ERRORS: u64 = offset_of!(HookSlot, errors) as u64;
    /// [`HookSlot::hold_timeouts`].
    pub const HOOK_HOLD_TIMEOUTS: u64 = offset_of!(HookSlot, hold_timeouts) as u64;
    /// [`HookSlot::rejected_word`].
    pub const HOOK_REJECTED: u64 = offset_of!(HookSlot, rejected_word) as u64;
    /// [`HookSlot::declared`].
    pub const HOOK_DECLARED: u64 = offset_of!(HookSlot, declared) as u64;
    /// [`HookCounters::runs`].
    pub const COUNTER_RUNS: u64 = offset_of!(HookCounters, runs) as u64;
    /// [`HookCounters::timed_runs`].
    pub const COUNTER_TIMED_RUNS: u64 = offset_of!(HookCounters, timed_runs) as u64;
    /// [`HookCounters::timed_ns`].
    pub const COUNTER_TIMED_NS: u64 = offset_of!(HookCounters, timed_ns) as u64;
    /// [`HookCounters::deopts`].
    pub const COUNTER_DEOPTS: u64 = offset_of!(HookCounters, deopts) as u64;
    /// [`ThreadSlot::owner`].
    pub const THREAD_OWNER: u64 = offset_of!(ThreadSlot, owner) as u64;
    /// [`ThreadSlot::epoch`].
    pub const THREAD_EPOCH: u64 = offset_of!(ThreadSlot, epoch) as u64;
    /// [`MapHeader::lock`].
    pub const MAP_LOCK: u64 = offset_of!(MapHeader, lock) as u64;
    /// [`MapHeader::count`].
    pub const MAP_COUNT: u64 = offset_of!(MapHeader, count) as u64;
    /// [`MapHeader::producer_pos`].
    pub const MAP_PRODUCER: u64 = offset_of!(MapHeader, producer_pos) as u64;
    /// [`MapHeader::consumer_pos`].
    pub const MAP_CONSUMER: u64 = offset_of!(MapHeader, consumer_pos) as u64;
    /// [`MapHeader::dropped`].
    pub const MAP_DROPPED: u64 = offset_of!(MapHeader, dropped) as u64;
    /// [`MapHeader::write_seq`].
    pub const MAP_WRITE_SEQ: u64 = offset_of!(MapHeader, write_seq) as u64;
    /// [`XStateMeta::state`].
    pub const XMETA_STATE: u64 = offset_of!(XStateMeta, state) as u64;
    /// Region offset of [`UpdateIntent::state`].
    pub const INTENT_STATE: u64 = UPDATE_INTENT_OFFSET + offset_of!(UpdateIntent, state) as u64;
    /// Region offset of [`UpdateIntent::settled`].
    pub const INTENT_SETTLED: u64 = UPDATE_INTENT_OFFSET + offset_of!(UpdateIntent, settled) as u64;
}

/// Hash table elements start with this control word, a per-element seqlock:
/// bits 0..2 the [`ELEM_EMPTY`]/[`ELEM_BUSY`]/[`ELEM_LIVE`]/[`ELEM_DELETED`] state,
/// bits 2..64 a sequence number incremented on every change. A reader copies the element
/// between two equal, non-busy loads of it.
pub const ELEM_STATE_MASK: u64 = 3;
/// Never written: a probe chain ends here.
pub const ELEM_EMPTY: u64 = 0;
/// A writer holding the map's lock is changing the element; readers retry.
pub const ELEM_BUSY: u64 = 1;
/// The element holds a key and its value.
pub const ELEM_LIVE: u64 = 2;
/// A tombstone: probe chains continue past it and inserts reuse it.
pub const ELEM_DELETED: u64 = 3;
/// Increment of the sequence part of an element control word.
pub const ELEM_SEQ_ONE: u64 = 4;

/// Ring buffer record header (8 bytes before each record's data): length in the low 32
/// bits plus these flags; records are padded to 8 bytes.
pub const RINGBUF_BUSY: u32 = 1 << 31;
/// Flag: the producer discarded the record (or it pads to the ring's end); the consumer
/// skips it.
pub const RINGBUF_DISCARD: u32 = 1 << 30;
/// Bytes of a record header.
pub const RINGBUF_HDR_LEN: u64 = 8;

/// Rounds `v` up to a multiple of `align` (a power of two).
pub const fn align_up(v: u64, align: u64) -> u64 {
    (v + align - 1) & !(align - 1)
}

/// FNV-1a 64, the header checksum.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<Section>() == 16);
    assert!(offset_of!(RegionHeader, magic) == 0);
    assert!(offset_of!(RegionHeader, layout_version) == 8);
    assert!(offset_of!(RegionHeader, arch) == 12);
    assert!(offset_of!(RegionHeader, region_size) == 24);
    assert!(offset_of!(RegionHeader, base_address) == 32);
    assert!(offset_of!(RegionHeader, hold_timeout_ns) == 64);
    assert!(offset_of!(RegionHeader, sections) == 96);
    assert!(offset_of!(RegionHeader, checksum) == HEADER_IMMUTABLE_LEN);
    assert!(offset_of!(RegionHeader, state) == 264);
    assert!(offset_of!(RegionHeader, lease) == 272);
    assert!(offset_of!(RegionHeader, generation) == 288);
    assert!(offset_of!(RegionHeader, xstate_generation) == 304);
    assert!(size_of::<RegionHeader>() == 320);
    assert!(size_of::<IntentSlot>() == 32);
    assert!(offset_of!(UpdateIntent, id) == 48);
    assert!(offset_of!(UpdateIntent, slots) == 384);
    assert!(size_of::<UpdateIntent>() == 2432);
    assert!(UPDATE_INTENT_OFFSET >= size_of::<RegionHeader>() as u64);
    assert!(UPDATE_INTENT_OFFSET + size_of::<UpdateIntent>() as u64 <= DATA_ALIGN);
    assert!(align_of::<RegionHeader>() == 64);
    assert!(size_of::<ContextTableHeader>() == 64);
    assert!(size_of::<ContextEntry>() == 64);
    assert!(size_of::<HookSlot>() == 64);
    assert!(align_of::<HookSlot>() == 64);
    assert!(size_of::<ThreadSlot>() == 64);
    assert!(size_of::<HookCounters>() == 32);
    assert!(size_of::<XStateMeta>() == 64);
    assert!(size_of::<MapHeader>() == 128);
    assert!(offset_of!(MapHeader, data_offset) == 48);
    assert!(offset_of!(MapHeader, lock) == 64);
};
