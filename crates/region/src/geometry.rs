//! Where each section goes for given capacities, and the header check that both sides run
//! before trusting a region. Pure arithmetic over bytes: no I/O.

use crate::layout::*;
use std::mem::size_of;

/// Capacities a host chooses at `ctx_init`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionParams {
    /// Hook slots, the most hooks the host can declare (nonzero).
    pub max_hooks: u32,
    /// Thread slots, the most host threads that run hooks at once (nonzero).
    pub thread_slots: u32,
    /// Entries of the context table (helpers, host functions, variables and hooks exported).
    pub context_capacity: u32,
    /// Entries of the helper table: helper and host-function ids must be below it.
    pub helper_capacity: u32,
    /// Entries of the XState meta table: map ids are below it.
    pub xstate_capacity: u32,
    /// Bytes of the EIM section, for the host's Extension Interface Model spec.
    pub eim_capacity: u64,
    /// Bytes of the control plane's allocator state section.
    pub alloc_size: u64,
    /// Bytes of the XState scratchpad, where maps live (nonzero).
    pub scratch_size: u64,
    /// Bytes of the code arena (nonzero); rounded up to [`CODE_ALIGN`].
    pub code_size: u64,
}

impl Default for RegionParams {
    fn default() -> Self {
        Self {
            max_hooks: 64,
            thread_slots: 64,
            context_capacity: 512,
            helper_capacity: 4096,
            xstate_capacity: 256,
            eim_capacity: 64 * 1024,
            alloc_size: 64 * 1024,
            scratch_size: 16 * 1024 * 1024,
            code_size: 8 * 1024 * 1024,
        }
    }
}

/// Largest region the 32-bit entry offsets of [`HookSlot::active`] can address.
pub const MAX_REGION_SIZE: u64 = 1 << 32;

/// Computes the section table and total size for `params`.
pub fn plan(params: &RegionParams) -> Result<([Section; SECTION_COUNT], u64), LayoutError> {
    if params.max_hooks == 0 || params.thread_slots == 0 {
        return Err(LayoutError::BadParams(
            "max_hooks and thread_slots must be nonzero",
        ));
    }
    if params.code_size == 0 || params.scratch_size == 0 {
        return Err(LayoutError::BadParams(
            "code and scratchpad sizes must be nonzero",
        ));
    }
    let sizes: [u64; SECTION_COUNT] = [
        params.eim_capacity,
        size_of::<ContextTableHeader>() as u64
            + params.context_capacity as u64 * size_of::<ContextEntry>() as u64,
        params.helper_capacity as u64 * 8,
        params.max_hooks as u64 * size_of::<HookSlot>() as u64,
        params.thread_slots as u64 * size_of::<ThreadSlot>() as u64,
        params.thread_slots as u64
            * counter_row_cells(params.max_hooks)
            * size_of::<HookCounters>() as u64,
        params.alloc_size,
        params.xstate_capacity as u64 * size_of::<XStateMeta>() as u64,
        params.scratch_size,
        params.code_size,
    ];
    let mut sections = [Section::default(); SECTION_COUNT];
    let mut cursor = DATA_ALIGN; // page 0 is the header's
    for (i, size) in sizes.iter().enumerate() {
        let align = if i == SectionId::Code as usize {
            CODE_ALIGN
        } else {
            DATA_ALIGN
        };
        let offset = align_up(cursor, align);
        let size = align_up((*size).max(1), align);
        sections[i] = Section { offset, size };
        cursor = offset
            .checked_add(size)
            .ok_or(LayoutError::BadParams("sizes overflow"))?;
    }
    if cursor > MAX_REGION_SIZE {
        return Err(LayoutError::BadParams("region larger than 4 GiB"));
    }
    Ok((sections, cursor))
}

/// Why a region (or part of it) cannot be trusted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    /// The region is shorter than a structure it must hold.
    #[error("region is {len} bytes, too short for its {need}-byte {what}")]
    Truncated {
        /// The structure that does not fit (header, a section, ...).
        what: &'static str,
        /// The region's length in bytes.
        len: u64,
        /// The bytes the structure needs.
        need: u64,
    },
    /// The first eight bytes are not [`MAGIC`].
    #[error("bad magic {found:#018x} at offset 0 (expected {MAGIC:#018x}): not an rdx region or overwritten header")]
    BadMagic {
        /// The first eight bytes as read.
        found: u64,
    },
    /// The region was written by a build with a different [`LAYOUT_VERSION`].
    #[error("region layout version {found}, this build understands version {LAYOUT_VERSION}")]
    Version {
        /// The region's layout version.
        found: u32,
    },
    /// The region's code is for another architecture than this side's.
    #[error("region architecture tag {found} ({name}), this side runs {host}")]
    Arch {
        /// The region's architecture tag.
        found: u32,
        /// Its name, or `unknown`.
        name: &'static str,
        /// The architecture this side runs.
        host: &'static str,
    },
    /// The immutable header does not match its checksum.
    #[error("header checksum mismatch (stored {stored:#018x}, computed {computed:#018x}): header overwritten")]
    Checksum {
        /// The checksum the header holds.
        stored: u64,
        /// The checksum of the header's bytes as read.
        computed: u64,
    },
    /// The header's size field differs from this build's [`RegionHeader`].
    #[error("header size {found} differs from {expected}")]
    HeaderSize {
        /// The size the region's writer recorded.
        found: u32,
        /// `size_of::<RegionHeader>()` in this build.
        expected: u32,
    },
    /// A section lies outside the region or overlaps the one before it.
    #[error("section {section} at [{offset:#x}, +{size:#x}) is out of bounds or misordered (region size {region_size:#x})")]
    SectionBounds {
        /// The section's name ([`SectionId::name`]).
        section: &'static str,
        /// Its region offset.
        offset: u64,
        /// Its size in bytes.
        size: u64,
        /// The region's size in bytes.
        region_size: u64,
    },
    /// A section is too small for the entries the header says it holds.
    #[error("section {section} is {size} bytes, too small for {need}")]
    SectionTooSmall {
        /// The section's name ([`SectionId::name`]).
        section: &'static str,
        /// Its size in bytes.
        size: u64,
        /// The bytes its entries need.
        need: u64,
    },
    /// Capacities that cannot make a region; the text says which.
    #[error("bad region parameters: {0}")]
    BadParams(&'static str),
}

/// The header fields a reader needs, copied out after [`check_header`] accepted them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderInfo {
    /// Architecture of the host and of the code it runs.
    pub arch: Arch,
    /// Bytes in the region.
    pub region_size: u64,
    /// Where the host mapped the region: host addresses are `base_address + offset`.
    pub base_address: u64,
    /// Process id of the host, for diagnostics.
    pub host_pid: u32,
    /// Number of hook slots.
    pub max_hooks: u32,
    /// Number of thread slots.
    pub thread_slots: u32,
    /// Capacity of the context table, in entries.
    pub context_capacity: u32,
    /// Capacity of the XState meta table (the largest map id + 1).
    pub xstate_capacity: u32,
    /// Entries in the helper table.
    pub helper_capacity: u32,
    /// Longest time a hook caller waits on a held slot, in nanoseconds.
    pub hold_timeout_ns: u64,
    /// Bytes of EIM spec at the start of the EIM section.
    pub eim_len: u64,
    /// Bytes at the start of the scratchpad the host uses itself (the trace ring).
    pub scratch_reserved: u64,
    /// XState map id of the trace ring buffer.
    pub trace_map_id: u32,
    /// `HOST_FLAG_*` bits.
    pub host_flags: u32,
    /// The section table, indexed by [`SectionId`], checked to lie in order inside the region.
    pub sections: [Section; SECTION_COUNT],
}

impl HeaderInfo {
    /// Where section `id` lives.
    pub fn section(&self, id: SectionId) -> Section {
        self.sections[id as usize]
    }

    /// Region offset of hook slot `index`.
    pub fn hook_offset(&self, index: u32) -> u64 {
        self.section(SectionId::Hooks).offset + index as u64 * size_of::<HookSlot>() as u64
    }

    /// Region offset of thread slot `index`.
    pub fn thread_offset(&self, index: u32) -> u64 {
        self.section(SectionId::Threads).offset + index as u64 * size_of::<ThreadSlot>() as u64
    }

    /// Region offset of the counters of (`thread`, `hook`). Each thread's row is padded to
    /// whole cache lines ([`counter_row_cells`]), so two threads never write one line.
    pub fn counters_offset(&self, thread: u32, hook: u32) -> u64 {
        self.section(SectionId::Counters).offset
            + (thread as u64 * counter_row_cells(self.max_hooks) + hook as u64)
                * size_of::<HookCounters>() as u64
    }

    /// Region offset of XState meta entry `id`.
    pub fn xmeta_offset(&self, id: u32) -> u64 {
        self.section(SectionId::XMeta).offset + id as u64 * size_of::<XStateMeta>() as u64
    }

    /// Region offset of context entry `index`.
    pub fn context_entry_offset(&self, index: u32) -> u64 {
        self.section(SectionId::Context).offset
            + size_of::<ContextTableHeader>() as u64
            + index as u64 * size_of::<ContextEntry>() as u64
    }

    /// Region offset of helper table entry `id`.
    pub fn helper_entry_offset(&self, id: u32) -> u64 {
        self.section(SectionId::HelperTable).offset + id as u64 * 8
    }

    /// Whether `offset` is a well-formed code entry: inside the code arena and aligned.
    pub fn is_code_entry(&self, offset: u64) -> bool {
        self.section(SectionId::Code).contains(offset) && offset.is_multiple_of(CODE_ENTRY_ALIGN)
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// Checks a header given as bytes (read locally or through a transport) against this build
/// and the region's real length, in the order that gives the most useful error: length,
/// magic, version, architecture, checksum, then every section's bounds and minimum size.
///
/// `expect_arch` is the architecture the caller will run or generate code for.
pub fn check_header(
    bytes: &[u8],
    region_len: u64,
    expect_arch: Arch,
) -> Result<HeaderInfo, LayoutError> {
    let need = size_of::<RegionHeader>() as u64;
    if (bytes.len() as u64) < need || region_len < need {
        return Err(LayoutError::Truncated {
            what: "header",
            len: region_len.min(bytes.len() as u64),
            need,
        });
    }
    let magic = u64_at(bytes, 0);
    if magic != MAGIC {
        return Err(LayoutError::BadMagic { found: magic });
    }
    let version = u32_at(bytes, 8);
    if version != LAYOUT_VERSION {
        return Err(LayoutError::Version { found: version });
    }
    let arch_raw = u32_at(bytes, 12);
    let arch = match Arch::from_u32(arch_raw) {
        Some(a) if a == expect_arch => a,
        other => {
            return Err(LayoutError::Arch {
                found: arch_raw,
                name: other.map(Arch::name).unwrap_or("unknown"),
                host: expect_arch.name(),
            })
        }
    };
    let stored = u64_at(bytes, HEADER_IMMUTABLE_LEN);
    let computed = fnv1a64(&bytes[..HEADER_IMMUTABLE_LEN]);
    if stored != computed {
        return Err(LayoutError::Checksum { stored, computed });
    }
    let header_size = u32_at(bytes, 16);
    if header_size as u64 != need {
        return Err(LayoutError::HeaderSize {
            found: header_size,
            expected: need as u32,
        });
    }
    let region_size = u64_at(bytes, 24);
    if region_size > region_len {
        return Err(LayoutError::Truncated {
            what: "declared region",
            len: region_len,
            need: region_size,
        });
    }
    let mut sections = [Section::default(); SECTION_COUNT];
    for (i, s) in sections.iter_mut().enumerate() {
        s.offset = u64_at(bytes, 96 + i * 16);
        s.size = u64_at(bytes, 104 + i * 16);
    }
    let info = HeaderInfo {
        arch,
        region_size,
        base_address: u64_at(bytes, 32),
        host_pid: u32_at(bytes, 40),
        max_hooks: u32_at(bytes, 44),
        thread_slots: u32_at(bytes, 48),
        context_capacity: u32_at(bytes, 52),
        xstate_capacity: u32_at(bytes, 56),
        helper_capacity: u32_at(bytes, 60),
        hold_timeout_ns: u64_at(bytes, 64),
        eim_len: u64_at(bytes, 72),
        scratch_reserved: u64_at(bytes, 80),
        trace_map_id: u32_at(bytes, 88),
        host_flags: u32_at(bytes, 92),
        sections,
    };
    let mut prev_end = need;
    for id in SectionId::ALL {
        let s = info.section(id);
        let align = if id == SectionId::Code {
            CODE_ALIGN
        } else {
            DATA_ALIGN
        };
        if s.offset < prev_end
            || !s.offset.is_multiple_of(align)
            || s.offset.checked_add(s.size).is_none_or(|e| e > region_size)
        {
            return Err(LayoutError::SectionBounds {
                section: id.name(),
                offset: s.offset,
                size: s.size,
                region_size,
            });
        }
        prev_end = s.end();
    }
    let mins: [(SectionId, u64); 8] = [
        (SectionId::Eim, info.eim_len),
        (
            SectionId::Context,
            size_of::<ContextTableHeader>() as u64
                + info.context_capacity as u64 * size_of::<ContextEntry>() as u64,
        ),
        (SectionId::HelperTable, info.helper_capacity as u64 * 8),
        (
            SectionId::Hooks,
            info.max_hooks as u64 * size_of::<HookSlot>() as u64,
        ),
        (
            SectionId::Threads,
            info.thread_slots as u64 * size_of::<ThreadSlot>() as u64,
        ),
        (
            SectionId::Counters,
            info.thread_slots as u64
                * counter_row_cells(info.max_hooks)
                * size_of::<HookCounters>() as u64,
        ),
        (
            SectionId::XMeta,
            info.xstate_capacity as u64 * size_of::<XStateMeta>() as u64,
        ),
        (SectionId::Scratch, info.scratch_reserved),
    ];
    for (id, need) in mins {
        let size = info.section(id).size;
        if size < need {
            return Err(LayoutError::SectionTooSmall {
                section: id.name(),
                size,
                need,
            });
        }
    }
    Ok(info)
}

/// Serialises the immutable part of a header for `params` and returns it with its checksum
/// filled in (bytes `0..264`). The host writes these bytes at offset 0 during `ctx_init`.
#[allow(clippy::too_many_arguments)]
pub fn encode_header(
    params: &RegionParams,
    arch: Arch,
    base_address: u64,
    host_pid: u32,
    hold_timeout_ns: u64,
    eim_len: u64,
    scratch_reserved: u64,
    trace_map_id: u32,
    host_flags: u32,
) -> Result<([u8; 264], HeaderInfo), LayoutError> {
    let (sections, region_size) = plan(params)?;
    if eim_len > sections[SectionId::Eim as usize].size {
        return Err(LayoutError::BadParams("EIM spec larger than its section"));
    }
    let mut b = [0u8; 264];
    let put32 =
        |b: &mut [u8; 264], off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_le_bytes());
    let put64 =
        |b: &mut [u8; 264], off: usize, v: u64| b[off..off + 8].copy_from_slice(&v.to_le_bytes());
    put64(&mut b, 0, MAGIC);
    put32(&mut b, 8, LAYOUT_VERSION);
    put32(&mut b, 12, arch as u32);
    put32(&mut b, 16, size_of::<RegionHeader>() as u32);
    put32(&mut b, 20, 4096);
    put64(&mut b, 24, region_size);
    put64(&mut b, 32, base_address);
    put32(&mut b, 40, host_pid);
    put32(&mut b, 44, params.max_hooks);
    put32(&mut b, 48, params.thread_slots);
    put32(&mut b, 52, params.context_capacity);
    put32(&mut b, 56, params.xstate_capacity);
    put32(&mut b, 60, params.helper_capacity);
    put64(&mut b, 64, hold_timeout_ns);
    put64(&mut b, 72, eim_len);
    put64(&mut b, 80, scratch_reserved);
    put32(&mut b, 88, trace_map_id);
    put32(&mut b, 92, host_flags);
    for (i, s) in sections.iter().enumerate() {
        put64(&mut b, 96 + i * 16, s.offset);
        put64(&mut b, 104 + i * 16, s.size);
    }
    let sum = fnv1a64(&b[..HEADER_IMMUTABLE_LEN]);
    put64(&mut b, HEADER_IMMUTABLE_LEN, sum);
    let info = check_header(
        &{
            let mut full = [0u8; size_of::<RegionHeader>()];
            full[..264].copy_from_slice(&b);
            full
        },
        region_size,
        arch,
    )?;
    Ok((b, info))
}

/// Cells in one thread's row of the counters section: `max_hooks` rounded up to whole
/// 64-byte cache lines (two [`HookCounters`] per line).
pub const fn counter_row_cells(max_hooks: u32) -> u64 {
    let per_line = (64 / size_of::<HookCounters>()) as u64;
    (max_hooks as u64).div_ceil(per_line) * per_line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> (Vec<u8>, HeaderInfo) {
        let (b, info) = encode_header(
            &RegionParams::default(),
            Arch::X86_64,
            0x7000_0000_0000,
            1,
            1,
            0,
            0,
            0,
            HOST_FLAG_MEMBARRIER_EXPEDITED,
        )
        .unwrap();
        let mut full = vec![0u8; size_of::<RegionHeader>()];
        full[..264].copy_from_slice(&b);
        (full, info)
    }

    #[test]
    fn update_intent_record_lies_in_page_zero_before_every_section() {
        let (sections, _) = plan(&RegionParams::default()).unwrap();
        let end = UPDATE_INTENT_OFFSET + size_of::<UpdateIntent>() as u64;
        assert!(sections.iter().all(|s| s.offset >= end));
        let word = intent_word(0x00ab_cdef_0123_4567, INTENT_COMMITTED);
        assert_eq!(intent_tag(word), 0x00ab_cdef_0123_4567);
        assert_eq!(intent_state(word), INTENT_COMMITTED);
    }

    #[test]
    fn plan_places_code_arena_on_its_own_pages() {
        let (sections, size) = plan(&RegionParams::default()).unwrap();
        let code = sections[SectionId::Code as usize];
        assert_eq!(code.offset % CODE_ALIGN, 0);
        assert_eq!(code.size % CODE_ALIGN, 0);
        assert_eq!(code.end(), size);
        assert!(sections[SectionId::Scratch as usize].end() <= code.offset);
    }

    #[test]
    fn encoded_header_round_trips() {
        let (bytes, info) = header();
        assert_eq!(
            check_header(&bytes, info.region_size, Arch::X86_64).unwrap(),
            info
        );
    }

    #[test]
    fn each_corruption_has_its_error() {
        let (bytes, info) = header();
        let len = info.region_size;
        assert!(matches!(
            check_header(&bytes[..100], len, Arch::X86_64),
            Err(LayoutError::Truncated { .. })
        ));
        assert!(matches!(
            check_header(&bytes, 200, Arch::X86_64),
            Err(LayoutError::Truncated { .. })
        ));
        assert!(matches!(
            check_header(&bytes, len - 1, Arch::X86_64),
            Err(LayoutError::Truncated { .. })
        ));
        let mut b = bytes.clone();
        b[0] ^= 1;
        assert!(matches!(
            check_header(&b, len, Arch::X86_64),
            Err(LayoutError::BadMagic { .. })
        ));
        let mut b = bytes.clone();
        b[8] = 9;
        assert_eq!(
            check_header(&b, len, Arch::X86_64),
            Err(LayoutError::Version { found: 9 })
        );
        assert!(matches!(
            check_header(&bytes, len, Arch::Aarch64),
            Err(LayoutError::Arch { found: 1, .. })
        ));
        let mut b = bytes.clone();
        b[130] ^= 0x40;
        assert!(matches!(
            check_header(&b, len, Arch::X86_64),
            Err(LayoutError::Checksum { .. })
        ));
    }

    #[test]
    fn misplaced_sections_are_refused_even_with_a_valid_checksum() {
        let (mut b, info) = header();
        // Make the code arena overlap the scratchpad and re-sign the header.
        let code = 96 + SectionId::Code as usize * 16;
        let scratch = info.section(SectionId::Scratch).offset;
        b[code..code + 8].copy_from_slice(&scratch.to_le_bytes());
        let sum = fnv1a64(&b[..HEADER_IMMUTABLE_LEN]);
        b[HEADER_IMMUTABLE_LEN..HEADER_IMMUTABLE_LEN + 8].copy_from_slice(&sum.to_le_bytes());
        assert!(matches!(
            check_header(&b, info.region_size, Arch::X86_64),
            Err(LayoutError::SectionBounds {
                section: "code",
                ..
            })
        ));
    }

    #[test]
    fn counter_rows_never_share_a_cache_line() {
        for max_hooks in [1u32, 2, 3, 7, 64] {
            let params = RegionParams {
                max_hooks,
                thread_slots: 3,
                ..RegionParams::default()
            };
            let (_, info) =
                encode_header(&params, Arch::X86_64, 0, 0, 0, 0, 0, 0, 0).expect("header");
            let counters = info.section(SectionId::Counters);
            for t in 0..3 {
                let row = info.counters_offset(t, 0);
                assert_eq!(row % 64, 0, "row {t} of {max_hooks} hooks");
                let last = info.counters_offset(t, max_hooks - 1) + 32;
                assert!(last <= counters.end());
                if t > 0 {
                    assert!(info.counters_offset(t - 1, max_hooks - 1) + 32 <= row);
                }
            }
        }
    }

    #[test]
    fn active_word_round_trips() {
        let w = active_word(7, 0x12340);
        assert_eq!(active_version(w), 7);
        assert_eq!(active_entry_offset(w | ACTIVE_HOLD), 0x12340);
    }
}
