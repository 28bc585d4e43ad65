//! What a compilation is asked to build: the [`Build`] (generic, elite or scouting), and
//! everything else besides the bytecode that decides the generated code ([`CompileOptions`],
//! whose [`CompileOptions::hash`] an artifact carries). Depends on nothing else in the
//! compiler: planning, translation and the driver read these options, never the reverse.

use std::collections::BTreeMap;

use rdx_bpf::isa::{encode, raw_to_bytes, Insn, STACK_SIZE};

use crate::artifact::{
    sha256, Metadata, Symbol, FLAG_DEOPT, FLAG_ENTRY_LENGTH_ARG, FLAG_HELPER_TABLE,
    FLAG_NEEDS_BUDGET,
};
use rdx_region::layout::Arch;

/// How generated code reaches helpers and host functions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HelperCalls {
    /// Each helper id is its own relocated 64-bit address (`helper:<id>`). The fastest form:
    /// one constant load and an indirect call.
    #[default]
    Direct,
    /// Helpers are entries of a table of 64-bit addresses (`var:rdx_helper_table`, entry `id`
    /// at byte `8 * id`) holding `table_len` entries. Code that lives at the same address in
    /// several processes (cross-sandbox calls) uses this so that each process can have its
    /// own helper implementations behind one table address. Also what `callx` needs.
    Table {
        /// Entries in the table: helper ids must be below it.
        table_len: u32,
    },
}

/// The entry point's native signature.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EntryAbi {
    /// `r0 = entry(ctx, run_state)`: [`rdx_region::abi::EntryFn`]. `r2`..`r9` start at zero.
    #[default]
    Standard,
    /// `r0 = entry(ctx, run_state, len)` with `r2 = len`: the conformance-suite convention
    /// (r1 = memory, r2 = its length). Calling a standard entry with a third argument is
    /// harmless on both supported calling conventions, so test harnesses always pass it.
    WithLength,
}

/// The direction a profile says a conditional jump goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Expect {
    /// The jump is taken: falling through leaves the fast path.
    Taken,
    /// The jump falls through: taking it leaves the fast path.
    NotTaken,
}

/// Elite compilation: conditional jumps whose cold direction becomes a guard with a
/// deoptimisation exit. Code reachable only through cold directions is not compiled.
///
/// An artifact compiled with a speculation (even an empty one) is an *elite* artifact
/// (`FLAG_DEOPT`): it must be called with an [`rdx_region::abi::DeoptRunState`] as its run
/// pointer, keeps its eBPF stack frames there, and on a failed guard stores the exact eBPF
/// state there and returns with [`rdx_region::abi::RunStatus::Deopt`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Speculation {
    /// Slot of a conditional jump → its expected direction.
    pub guards: BTreeMap<usize, Expect>,
}

/// Scouting: count how often each conditional jump goes each way. Counters are `u64` pairs
/// at the symbol's address, one 16-byte pair per [`branch_sites`] entry in that order:
/// `[fell through, taken]`. The symbol is resolved at link time like any other, typically
/// to a global-data map value in the node's XState (`Symbol::MapValue`), so the control
/// plane reads the profile remotely.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BranchCounters {
    /// Where the counter pairs live, resolved at link time.
    pub symbol: Symbol,
}

/// The conditional jumps of a program, in slot order: the index of a slot in this list is
/// its counter pair in [`BranchCounters`] and its entry in a profile.
pub fn branch_sites(insns: &[Insn]) -> Vec<usize> {
    insns
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i, Insn::Jmp { .. }))
        .map(|(pc, _)| pc)
        .collect()
}

/// Geometry of an array map whose `bpf_map_lookup_elem` calls are inlined (see
/// [`CompileOptions::inline_arrays`]): what the object's map definition declares, so the
/// artifact stays target-independent. The values' base address is the relocation
/// `mapvalue:<index>`; value `i` lives at `base + i * round_up(value_size, 8)`, the layout of
/// rdx's arrays (XState and the in-process map set alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InlineArray {
    /// The array's number of elements: indexes at or above it find nothing.
    pub max_entries: u32,
    /// Bytes of one value as the definition declares them (before rounding to 8).
    pub value_size: u32,
}

impl InlineArray {
    /// Bytes between consecutive values.
    pub fn value_stride(&self) -> u64 {
        (self.value_size as u64).div_ceil(8) * 8
    }
}

/// How much work Cranelift spends on each function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Pipeline {
    /// `opt_level=speed` (e-graph rewriting, GVN, LICM) and the backtracking register
    /// allocator: the fastest code.
    #[default]
    Optimizing,
    /// `opt_level=none` and the single-pass register allocator: about half the compile time,
    /// code 2 to 7x slower (`benches/tiers.rs` measures both). For large, cold programs.
    Fast,
    /// [`Pipeline::Fast`] for eBPF functions longer than this many slots, optimizing for the
    /// others.
    FastAbove(u32),
    /// Not Cranelift: the baseline tier (`crate::baseline`), one linear pass emitting machine
    /// code with eBPF registers in fixed native registers. Compiles an order of magnitude
    /// faster than [`Pipeline::Fast`]; refuses what it does not support (elite artifacts,
    /// branch counters) with [`crate::CompileError::NotInBaseline`], and the caller falls back.
    Baseline,
}

/// The kind of code a compilation builds. Every compilation is exactly one of these; how
/// the code reaches helpers ([`HelperCalls`]) is chosen apart, since a program using `callx`
/// needs the helper table whatever its build.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Build {
    /// Plain code for every path of the program.
    #[default]
    Generic,
    /// An elite artifact with these guards (see [`Speculation`]).
    Elite(Speculation),
    /// Every conditional jump instrumented with a counter (see [`BranchCounters`]).
    Scouting(BranchCounters),
}

/// Everything besides the bytecode that decides the generated code. Part of the artifact's
/// options hash.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// The architecture code is generated for.
    pub arch: Arch,
    /// Meter executed instructions against [`rdx_region::abi::RunState::budget`]. Required
    /// whenever the verifier could not bound the run.
    pub needs_budget: bool,
    /// How the code calls helpers and host functions.
    pub helper_calls: HelperCalls,
    /// The entry point's native signature.
    pub entry_abi: EntryAbi,
    /// Identity of the EIM extension class the program was verified against; it only enters
    /// the options hash so that a cache keyed by that hash never mixes classes.
    pub eim_class: String,
    /// Run Cranelift's IR verifier on every function (slower; for tests and debugging).
    pub verify_ir: bool,
    /// What kind of code is built: generic, elite or scouting.
    pub build: Build,
    /// Array maps (by index in the object's map table) whose lookups are compiled inline: a
    /// bounds check and an address computation instead of a helper call, returning exactly
    /// what the helper returns. Only for plain arrays (one copy per element), linked against
    /// maps created from the same definitions. Empty by default.
    pub inline_arrays: BTreeMap<u32, InlineArray>,
    /// Cranelift's pipeline (optimizing by default).
    pub pipeline: Pipeline,
    /// Constant blinding (on by default): on x86-64, whose instructions can be decoded from
    /// any byte, a program-chosen constant beyond 16 bits never appears as it is in the code;
    /// it is emitted xored with a key chosen at random for each compilation and unmasked at
    /// run time (see `docs/jit.md`, "Constant blinding"). Off only to measure its cost.
    pub blind_constants: bool,
}

impl CompileOptions {
    /// The options for `build` on `arch`: direct helper calls, the standard entry, no
    /// metering, no class, constants blinded, the optimizing pipeline, and Cranelift's IR
    /// verifier in debug builds. Callers set what their verified program needs on top.
    pub fn new(arch: Arch, build: Build) -> Self {
        Self {
            arch,
            needs_budget: false,
            helper_calls: HelperCalls::Direct,
            entry_abi: EntryAbi::Standard,
            eim_class: String::new(),
            verify_ir: cfg!(debug_assertions),
            build,
            inline_arrays: BTreeMap::new(),
            pipeline: Pipeline::Optimizing,
            blind_constants: true,
        }
    }

    /// Inlines lookups in every plain array of `maps` (an object's map table): type
    /// `BPF_MAP_TYPE_ARRAY`, 4-byte keys. Per-CPU arrays keep the helper (their element
    /// depends on the running thread).
    pub fn inline_array_lookups(&mut self, maps: &[rdx_bpf::program::MapDef]) {
        for (i, m) in maps.iter().enumerate() {
            if m.map_type == rdx_region::layout::MapType::Array
                && m.key_size == 4
                && m.value_size > 0
                && m.max_entries > 0
            {
                self.inline_arrays.insert(
                    i as u32,
                    InlineArray {
                        max_entries: m.max_entries,
                        value_size: m.value_size,
                    },
                );
            }
        }
    }

    /// The guards of an elite build.
    pub fn speculation(&self) -> Option<&Speculation> {
        match &self.build {
            Build::Elite(s) => Some(s),
            _ => None,
        }
    }

    /// The counters of a scouting build.
    pub fn branch_counters(&self) -> Option<&BranchCounters> {
        match &self.build {
            Build::Scouting(c) => Some(c),
            _ => None,
        }
    }

    /// The artifact's `options_hash` for these options: a loader that takes an artifact from
    /// a cache checks it against the options it would compile with (hook, class, metering).
    pub fn hash(&self) -> [u8; 32] {
        // A stable textual rendering: the hash must not depend on Rust's Hash implementation.
        let mut text = format!(
            "arch={};budget={};helpers={:?};entry={:?};class={}",
            self.arch, self.needs_budget, self.helper_calls, self.entry_abi, self.eim_class
        );
        match &self.build {
            Build::Generic => {}
            Build::Elite(s) => {
                text.push_str(";guards=");
                for (pc, e) in &s.guards {
                    text.push_str(&format!("{pc}:{e:?},"));
                }
            }
            Build::Scouting(c) => text.push_str(&format!(";counters={}", c.symbol)),
        }
        if !self.inline_arrays.is_empty() {
            text.push_str(";arrays=");
            for (i, a) in &self.inline_arrays {
                text.push_str(&format!("{i}:{}x{},", a.max_entries, a.value_size));
            }
        }
        if self.pipeline != Pipeline::Optimizing {
            text.push_str(&format!(";pipeline={:?}", self.pipeline));
        }
        if !self.blind_constants {
            text.push_str(";blind=false");
        }
        sha256(&[text.as_bytes()])
    }
}

/// The artifact metadata both code generators write: flags from the options, the entry, the
/// stack of `depth` frames, and the hashes of the source bytecode and the options.
pub(crate) fn metadata(
    insns: &[Insn],
    opts: &CompileOptions,
    entry_offset: u32,
    depth: usize,
    functions: usize,
) -> Metadata {
    let mut flags = 0;
    if opts.needs_budget {
        flags |= FLAG_NEEDS_BUDGET;
    }
    if opts.entry_abi == EntryAbi::WithLength {
        flags |= FLAG_ENTRY_LENGTH_ARG;
    }
    if matches!(opts.helper_calls, HelperCalls::Table { .. }) {
        flags |= FLAG_HELPER_TABLE;
    }
    if opts.speculation().is_some() {
        flags |= FLAG_DEOPT;
    }
    let source = raw_to_bytes(&encode(insns));
    Metadata {
        arch: opts.arch,
        flags,
        entry_offset,
        stack_bytes: (depth * STACK_SIZE) as u32,
        functions: functions as u32,
        insn_count: insns.len() as u32,
        source_hash: sha256(&[&source]),
        options_hash: opts.hash(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(hash: [u8; 32]) -> String {
        hash.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Stored artifacts and compile caches carry these hashes: each build keeps the one it
    /// had when speculation and counters were separate optional fields.
    #[test]
    fn options_hash_is_stable_for_every_build() {
        let mut generic = CompileOptions::new(Arch::X86_64, Build::Generic);
        assert_eq!(
            hex(generic.hash()),
            "3a9ba67a9236ad971a9ab1b19c7cc3be9665179fa6ab5b3489def62c82e3e8e0"
        );
        generic.needs_budget = true;
        generic.eim_class = "xdp/acl".into();
        assert_eq!(
            hex(generic.hash()),
            "26e61c98e5d5a13462a20444e3f95367cd15d5a82c1874f6c76da9e568609730"
        );
        let guards = [(3, Expect::Taken), (7, Expect::NotTaken)].into();
        let elite = CompileOptions::new(Arch::Aarch64, Build::Elite(Speculation { guards }));
        assert_eq!(
            hex(elite.hash()),
            "32af7d2a155671aaa13524e890e3356c436269c36e1326e2dd5324302be4e488"
        );
        let counters = BranchCounters {
            symbol: Symbol::MapValue(2),
        };
        let scouting = CompileOptions::new(Arch::X86_64, Build::Scouting(counters));
        assert_eq!(
            hex(scouting.hash()),
            "e544e82ef039466435d5cce540398252e52f57c5cfb3d432b5f29add0d663b3b"
        );
        let mut table = CompileOptions::new(Arch::X86_64, Build::Generic);
        table.helper_calls = HelperCalls::Table { table_len: 16 };
        table.pipeline = Pipeline::Baseline;
        assert_eq!(
            hex(table.hash()),
            "dddb51d470c1a46b61bb47b5b44bca671cb0eec71aadfd966374dee2e525371b"
        );
    }
}
