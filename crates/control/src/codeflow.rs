//! The CodeFlow API: one operation per step of getting an extension into a running node.
//!
//! | operation | what it does | touches the node |
//! |---|---|---|
//! | [`create_codeflow`] | attach: header, EIM spec, context table | reads |
//! | [`CodeFlow::validate_code`] | the verifier against the hook's extension class | no |
//! | [`CodeFlow::jit_compile_code`] | the CodeFlow's [`Tier`] (Cranelift by default, or the baseline tier), cached by bytecode hash, arch, class and tier | no |
//! | [`CodeFlow::deploy_xstate`] | allocates a map in the scratchpad, header, meta entry | writes |
//! | [`CodeFlow::link_code`] | resolves symbols against the node's context and maps | no |
//! | [`CodeFlow::prepare_prog`] | allocates in the code arena and writes the linked code | writes |
//! | [`CodeFlow::cc_event`] | makes the written code visible before publication | fence |
//! | [`CodeFlow::tx`] | one 8-byte CAS per hook makes a prepared version visible | CAS |
//! | [`CodeFlow::deploy_prog`] | all of the above for one hook | |
//! | [`CodeFlow::mutual_excl`] | takes or renews the lease on the node | CAS |
//! | [`CodeFlow::detach`], [`CodeFlow::rollback`] | publish "nothing" or an earlier version | CAS |
//! | [`CodeFlow::reclaim`] | frees versions and maps no host thread can be running | reads epochs |
//!
//! A CodeFlow is one control plane's handle on one node: it holds no lock but the node's
//! lease, and nothing in it is shared between nodes, so a fleet-wide operation runs one
//! CodeFlow per node, in parallel and batched as it likes.
//!
//! The JIT tier ([`ExtSpec::tier`], [`CodeFlow::set_tier`]) decides which code generator
//! builds what [`CodeFlow::jit_compile_code`] (and so [`CodeFlow::deploy`]) deploys; each
//! version's code record in the node's region remembers it ([`HeldVersion::tier`]).
//!
//! ```no_run
//! use rdx_control::{create_codeflow, Extension, ExtSpec};
//! let bytes = std::fs::read("count.o")?;
//! let object = rdx_bpf::loader::load(&bytes)?;
//! let ext = Extension::from_object(&object, None)?;
//! let mut cf = create_codeflow("shm:/dev/shm/rdx-kv-1234", ExtSpec::default())?;
//! let deployed = cf.deploy("on_get", &ext, None, None)?;
//! println!("hook on_get now runs version {}", deployed.version);
//! cf.rollback("on_get", None)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::alloc::{AllocTable, Arena, Record, RecordState, RECORD_MAPS};
use crate::error::{ControlError, Result, Unverified};
use crate::lease::{self, Lease};
use crate::node::{self, HookInfo, NodeView};
use crate::registry::{HistoryAction, HistoryEntry, Registry};
use crate::tier::Tier;
use rdx_bpf::isa::{encode, raw_to_bytes, Insn};
use rdx_bpf::program::{MapDef, MapOrigin, Object};
use rdx_jit::artifact::Artifact;
use rdx_jit::{Build, CompileOptions, Compiler, HelperCalls, LinkTarget, Symbol};
use rdx_region::abi::{FallbackLocator, FALLBACK_MAGIC};
use rdx_region::layout::*;
use rdx_transport::local::LocalRegion;
use rdx_transport::slot::{self, QuiesceError, SlotError};
use rdx_transport::xstate::{self, MapSpec};
use rdx_transport::Transport;
use rdx_verifier::{EimSpec, Verified, VerifyOptions};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How a control plane attaches.
#[derive(Clone, Debug)]
pub struct ExtSpec {
    /// Architecture the node's code must be compiled for (default: this machine's; a fabric
    /// node may differ).
    pub arch: Option<Arch>,
    /// Lease duration.
    pub lease_ttl: Duration,
    /// Lease holder id (default: a fresh random one).
    pub holder: Option<u32>,
    /// Longest wait for host threads to leave retired code during reclamation.
    pub reclaim_timeout: Duration,
    /// The JIT tier that builds generic code (default: optimizing).
    pub tier: Tier,
}

impl Default for ExtSpec {
    fn default() -> Self {
        Self {
            arch: None,
            lease_ttl: lease::DEFAULT_TTL,
            holder: None,
            reclaim_timeout: Duration::from_secs(2),
            tier: Tier::Optimizing,
        }
    }
}

/// An extension program as the control plane handles it: decoded instructions and the maps
/// they reference, from one program of an object file.
///
/// Immutable once built: its hashes are computed from its instructions and maps, and a
/// [`Validated`] or [`Compiled`] is bound to them, so instructions cannot change between the
/// verifier's verdict and the code that runs.
#[derive(Clone, Debug)]
pub struct Extension {
    name: String,
    section: String,
    insns: Vec<Insn>,
    maps: Vec<MapDef>,
    /// SHA-256 of the bytecode and map declarations with every initial value: the compile
    /// cache key's first part.
    hash: [u8; 32],
    /// SHA-256 of what the verifier and the compiler read (see [`Extension::code_hash`]).
    code_hash: [u8; 32],
    /// Where the program came from (an object file's path), for the history; not hashed.
    origin: String,
}

impl Extension {
    /// Picks program `name` (or the only program) of a loaded object.
    pub fn from_object(object: &Object, name: Option<&str>) -> Result<Extension> {
        let names = || {
            object
                .programs
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let prog = match name {
            Some(n) => object
                .programs
                .iter()
                .find(|p| p.name == n)
                .ok_or_else(|| {
                    ControlError::Invalid(format!(
                        "no program {n:?} in the object (programs: {})",
                        names()
                    ))
                })?,
            None => match object.programs.as_slice() {
                [one] => one,
                [] => return Err(ControlError::Invalid("the object has no program".into())),
                _ => {
                    return Err(ControlError::Invalid(format!(
                        "the object has several programs; choose one with --prog ({})",
                        names()
                    )))
                }
            },
        };
        Ok(Extension::new(
            &prog.name,
            &prog.section,
            prog.insns.clone(),
            object.maps.clone(),
        ))
    }

    /// An extension of program `name` (in ELF section `section`) with its instructions and
    /// the maps they reference by index.
    pub fn new(name: &str, section: &str, insns: Vec<Insn>, maps: Vec<MapDef>) -> Extension {
        let mut all = Sha256::new();
        let mut code = Sha256::new();
        let bytecode = raw_to_bytes(&encode(&insns));
        all.update(&bytecode);
        code.update(&bytecode);
        for m in &maps {
            let declaration = format!(
                "{}|{:?}|{}|{}|{}|{}|{:?}|{}",
                m.name,
                m.map_type,
                m.key_size,
                m.value_size,
                m.max_entries,
                m.flags,
                m.origin,
                m.read_only
            );
            all.update(&declaration);
            code.update(&declaration);
            if let Some(v) = &m.initial_value {
                all.update(v);
                if m.read_only {
                    code.update(v);
                }
            }
        }
        Extension {
            name: name.into(),
            section: section.into(),
            insns,
            maps,
            hash: all.finalize().into(),
            code_hash: code.finalize().into(),
            origin: String::new(),
        }
    }

    /// The same extension, recorded in the history as coming from `origin` (an object
    /// file's path).
    pub fn with_origin(mut self, origin: impl Into<String>) -> Extension {
        self.origin = origin.into();
        self
    }

    /// The program's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ELF section the program came from.
    pub fn section(&self) -> &str {
        &self.section
    }

    /// The decoded instructions (slot-indexed).
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// The maps the instructions reference by index, with their initial contents.
    pub fn maps(&self) -> &[MapDef] {
        &self.maps
    }

    /// Where the program came from (an object file's path; empty if not given).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// SHA-256 of the bytecode and the map declarations with all their initial contents
    /// (the compile cache key's first part, and what a saved profile belongs to).
    pub fn hash(&self) -> &[u8; 32] {
        &self.hash
    }

    /// [`Extension::hash`] in hex.
    pub fn hash_hex(&self) -> String {
        hex(&self.hash)
    }

    /// SHA-256 of what the verifier judges and the compiler translates: the bytecode, the
    /// map declarations and the initial contents of read-only maps. Writable maps' initial
    /// contents are left out: they are data the program may overwrite at any time, so the
    /// verdict cannot depend on them, and one verified and compiled program may be deployed
    /// with other initial data (an ACL policy's rules). A [`Validated`] and a [`Compiled`]
    /// are bound to this hash.
    pub fn code_hash(&self) -> &[u8; 32] {
        &self.code_hash
    }
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What a verdict was given for: a hook and class of one node's EIM spec, and a program's
/// code ([`Extension::code_hash`]). A [`Validated`] and every [`Compiled`] built from it
/// carry it, and nothing is compiled or written for anything else.
#[derive(Clone, Debug, PartialEq, Eq)]
struct VerifiedFor {
    hook: String,
    class: String,
    code: [u8; 32],
    /// SHA-256 of the EIM spec text the class was read from.
    spec: [u8; 32],
}

/// A program the verifier accepted for one hook and class of a node's EIM spec. Only
/// [`CodeFlow::validate_code`] makes one.
#[derive(Clone, Debug)]
pub struct Validated {
    verified: VerifiedFor,
    facts: Verified,
}

impl Validated {
    /// The hook it was verified for.
    pub fn hook(&self) -> &str {
        &self.verified.hook
    }

    /// The extension class it was verified against.
    pub fn class(&self) -> &str {
        &self.verified.class
    }

    /// What the verifier proved about the program (budget, stack depth, helpers used).
    pub fn facts(&self) -> &Verified {
        &self.facts
    }
}

/// A compiled program, ready to link. Only the compile operations of [`CodeFlow`] make one,
/// from a [`Validated`]; it remembers the hook, class, program and EIM spec it was verified
/// for, and [`CodeFlow::prepare_prog`] refuses it for anything else
/// ([`ControlError::NotVerifiedFor`]).
#[derive(Clone, Debug)]
pub struct Compiled {
    artifact: Artifact,
    artifact_hash: [u8; 32],
    cached: bool,
    budget: u64,
    tier: Tier,
    build: Build,
    /// Whether its code calls helpers through the region's helper table.
    helper_table: bool,
    verified: VerifiedFor,
}

impl Compiled {
    /// The relocatable code and its metadata.
    pub fn artifact(&self) -> &Artifact {
        &self.artifact
    }

    /// SHA-256 of the serialised artifact (its registry key).
    pub fn artifact_hash(&self) -> &[u8; 32] {
        &self.artifact_hash
    }

    /// Whether it came from the registry's cache.
    pub fn cached(&self) -> bool {
        self.cached
    }

    /// The class's budget to put in the hook slot.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// The hook it was verified for.
    pub fn hook(&self) -> &str {
        &self.verified.hook
    }

    /// The extension class it was verified against.
    pub fn class(&self) -> &str {
        &self.verified.class
    }

    /// The JIT tier that built it (recorded with the version on the node).
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// Which build it is (generic, elite or scouting).
    pub fn build(&self) -> &Build {
        &self.build
    }

    /// Whether its code calls helpers through the region's helper table
    /// ([`CodeFlow::jit_compile_helper_table`]) rather than by address.
    pub fn calls_helpers_by_table(&self) -> bool {
        self.helper_table
    }
}

/// A version written into the node but not yet visible.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub hook: HookInfo,
    pub version: u32,
    pub expected: u64,
    pub new_word: u64,
    pub budget: u64,
    pub tier: Tier,
    /// Alloc records created for it (code first, then new maps).
    records: Vec<usize>,
    /// Meta ids of maps created for it (freed on abort).
    new_maps: Vec<u32>,
    pub code_offset: u64,
    pub code_len: u64,
    pub map_ids: Vec<u32>,
    /// What the history records when it is published.
    record: PublishRecord,
}

impl Prepared {
    /// Records its publication in the history as `action` instead of the one its build
    /// implies (an ACL policy published with the generic enforcement build).
    pub fn record_as(&mut self, action: HistoryAction) {
        self.record.action = action;
    }
}

/// What the history says about a prepared version once [`CodeFlow::tx`] publishes it.
#[derive(Clone, Debug)]
struct PublishRecord {
    action: HistoryAction,
    program: String,
    origin: String,
    class: String,
    artifact_hash: [u8; 32],
}

/// A version made visible.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Published {
    pub hook: String,
    pub version: u32,
    pub previous_version: u32,
    pub word: u64,
    pub generation: u64,
    pub code_offset: u64,
    pub code_len: u64,
    pub map_ids: Vec<u32>,
    /// The JIT tier that built the version now published.
    pub tier: Tier,
}

/// The stages of [`CodeFlow::deploy`], in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeployStage {
    /// [`CodeFlow::validate_code`].
    Verify,
    /// [`CodeFlow::jit_compile_code`] (or the registry's cache).
    Compile,
    /// [`CodeFlow::prepare_prog`]: allocate, link and write, not yet visible.
    Prepare,
    /// [`CodeFlow::tx`]: the compare-and-swap that makes it visible.
    Publish,
}

/// What a deploy stage produced, as [`DeployObserver::finished`] hears it.
#[derive(Clone, Copy, Debug)]
pub enum StageDone<'a> {
    /// The verifier's verdict.
    Verified(&'a Validated),
    /// The compiled (or cached) program.
    Compiled(&'a Compiled),
    /// The version written into the node.
    Prepared(&'a Prepared),
    /// The version made visible.
    Published(&'a Published),
}

impl StageDone<'_> {
    /// The stage that produced it.
    pub fn stage(&self) -> DeployStage {
        match self {
            StageDone::Verified(_) => DeployStage::Verify,
            StageDone::Compiled(_) => DeployStage::Compile,
            StageDone::Prepared(_) => DeployStage::Prepare,
            StageDone::Published(_) => DeployStage::Publish,
        }
    }
}

/// Hears the progress of [`CodeFlow::deploy_observed`]: each stage as it starts, then
/// either what it produced and how long it took, or the error that ends the deploy. Every
/// method does nothing by default; `()` is the observer that hears nothing.
pub trait DeployObserver {
    /// `stage` is about to run.
    fn started(&mut self, stage: DeployStage) {
        let _ = stage;
    }

    /// A stage finished after `took`, producing `done`.
    fn finished(&mut self, done: StageDone<'_>, took: Duration) {
        let _ = (done, took);
    }

    /// `stage` failed with `error`; no later stage runs.
    fn failed(&mut self, stage: DeployStage, error: &ControlError) {
        let _ = (stage, error);
    }
}

impl DeployObserver for () {}

/// Timings of one deploy's stages, in microseconds: the observer benchmarks and reports use.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DeployTimings {
    /// [`DeployStage::Verify`].
    pub validate_us: f64,
    /// [`DeployStage::Compile`].
    pub compile_us: f64,
    /// [`DeployStage::Prepare`].
    pub prepare_us: f64,
    /// [`DeployStage::Publish`].
    pub publish_us: f64,
}

impl DeployObserver for DeployTimings {
    fn finished(&mut self, done: StageDone<'_>, took: Duration) {
        let us = took.as_secs_f64() * 1e6;
        match done.stage() {
            DeployStage::Verify => self.validate_us = us,
            DeployStage::Compile => self.compile_us = us,
            DeployStage::Prepare => self.prepare_us = us,
            DeployStage::Publish => self.publish_us = us,
        }
    }
}

/// A held version of a hook, from the node's allocator table.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HeldVersion {
    pub version: u32,
    pub active: bool,
    pub code_offset: u64,
    pub code_len: u64,
    pub insns: u32,
    pub created_ms: u64,
    pub hash_prefix: String,
    pub map_ids: Vec<u16>,
    /// The JIT tier that built this version.
    pub tier: Tier,
}

/// What [`CodeFlow::reclaim`] freed.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reclaimed {
    pub code_versions: u32,
    pub code_bytes: u64,
    pub maps: u32,
    pub map_bytes: u64,
}

/// What [`CodeFlow::compile_with`] builds: one of the JIT's builds, calling helpers by
/// address or (for code that runs in other processes than the node's) through the region's
/// helper table.
struct BuildRequest {
    build: Build,
    helper_table: bool,
}

impl BuildRequest {
    fn generic() -> BuildRequest {
        BuildRequest {
            build: Build::Generic,
            helper_table: false,
        }
    }
}

/// Where an elite record keeps its fallback image (`docs/region.md`, "Elite code records").
struct ImageLayout {
    /// Bytes from the entry point to the image.
    from_entry: u64,
    len: u64,
}

/// The shape of a code record: the linked code alone, or (elite artifacts) a fallback
/// locator, the code, and the fallback image.
struct FallbackLayout {
    image: Option<ImageLayout>,
}

impl FallbackLayout {
    fn of(compiled: &Compiled, ext: &Extension) -> Result<FallbackLayout> {
        let meta = &compiled.artifact.meta;
        if !meta.deoptimises() {
            return Ok(FallbackLayout { image: None });
        }
        if meta.entry_offset != 0 {
            return Err(ControlError::Link(format!(
                "elite artifact's entry is at {:#x}: its fallback locator needs it first",
                meta.entry_offset
            )));
        }
        let code = compiled.artifact.code.len() as u64;
        Ok(FallbackLayout {
            image: Some(ImageLayout {
                from_entry: code.next_multiple_of(16),
                len: rdx_exec::image::image_len(ext.insns.len()) as u64,
            }),
        })
    }

    /// Where the code starts in the record.
    fn code_at(&self) -> u64 {
        if self.image.is_some() {
            FallbackLocator::BYTES
        } else {
            0
        }
    }

    /// Bytes of the record holding `code` bytes of code.
    fn record_len(&self, code: u64) -> u64 {
        match &self.image {
            Some(i) => FallbackLocator::BYTES + i.from_entry + i.len,
            None => code,
        }
    }
}

/// Attaches to the node at `address` (`shm:/dev/shm/rdx-...`): reads and checks its header,
/// EIM spec and context table. Takes no lease yet.
pub fn create_codeflow(address: &str, spec: ExtSpec) -> Result<CodeFlow> {
    let (t, mapped) = node::connect_mapped(address, node::Access::ReadWrite)?;
    let mut cf = CodeFlow::attach(t, address, spec)?;
    cf.mapped = mapped;
    Ok(cf)
}

/// [`create_codeflow`] for commands that only read the node (`rdx node add`, `rdx node
/// show`): a shared-memory region is mapped read-only, so every operation that would write
/// (lease, deploy, rollback) fails with a read-only error instead of touching the node.
pub fn create_codeflow_read_only(address: &str, spec: ExtSpec) -> Result<CodeFlow> {
    let (t, _) = node::connect_mapped(address, node::Access::ReadOnly)?;
    CodeFlow::attach(t, address, spec)
}

/// One control plane's handle on one node.
pub struct CodeFlow {
    t: Box<dyn Transport>,
    address: String,
    view: NodeView,
    eim: Option<EimSpec>,
    /// SHA-256 of the node's EIM spec text: what a verdict on this node is bound to.
    spec_hash: [u8; 32],
    arch: Arch,
    lease: Lease,
    alloc: Option<AllocTable>,
    /// Live maps by name (reusable across versions), valid while we hold the lease.
    map_names: Option<BTreeMap<String, (u32, MapSpec)>>,
    reclaim_timeout: Duration,
    /// The region's mapping in this process when the transport is shared memory (owned by
    /// `t`, which outlives every use): code is linked straight into the arena, one copy.
    mapped: Option<LocalRegion>,
    /// Reused link buffer for transports without a mapping (no allocation per deploy).
    link_buf: Vec<u8>,
    /// The JIT tier of generic builds.
    tier: Tier,
    /// Where what this CodeFlow publishes is recorded: a registry and the node's name in it
    /// ([`CodeFlow::record_history`]).
    history: Option<(Registry, String)>,
}

impl std::fmt::Debug for CodeFlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeFlow")
            .field("address", &node::redact_address(&self.address))
            .field("holder", &self.lease.holder())
            .finish()
    }
}

fn jit_arch(a: Arch) -> rdx_jit::Arch {
    match a {
        Arch::X86_64 => rdx_jit::Arch::X86_64,
        Arch::Aarch64 => rdx_jit::Arch::Aarch64,
    }
}

fn region_map_type(m: &MapDef) -> Result<MapType> {
    use rdx_bpf::program::MapType as B;
    Ok(match m.map_type {
        B::Hash => MapType::Hash,
        B::Array => MapType::Array,
        B::ProgArray => MapType::ProgArray,
        B::PerCpuHash => MapType::PerThreadHash,
        B::PerCpuArray => MapType::PerThreadArray,
        B::LpmTrie => MapType::LpmTrie,
        B::RingBuf => MapType::RingBuf,
        B::Other(n) => {
            return Err(ControlError::BadMap {
                name: m.name.clone(),
                reason: format!("map type {n} is not supported by rdx"),
            })
        }
    })
}

impl CodeFlow {
    /// Attaches through an already open transport.
    pub fn attach(t: Box<dyn Transport>, address: &str, spec: ExtSpec) -> Result<CodeFlow> {
        let arch = spec.arch.or(Arch::HOST).ok_or_else(|| {
            ControlError::Invalid("unsupported control-plane architecture".into())
        })?;
        let view = NodeView::read(t.as_ref(), arch)?;
        let eim = match &view.eim_text {
            None => None,
            Some(text) => Some(EimSpec::from_yaml(text).map_err(ControlError::BadEimSpec)?),
        };
        let spec_hash = Sha256::digest(view.eim_text.as_deref().unwrap_or_default()).into();
        Ok(CodeFlow {
            t,
            address: address.into(),
            view,
            eim,
            spec_hash,
            arch,
            lease: Lease::new(
                spec.holder.unwrap_or_else(lease::new_holder_id),
                spec.lease_ttl,
            ),
            alloc: None,
            map_names: None,
            reclaim_timeout: spec.reclaim_timeout,
            mapped: None,
            link_buf: Vec::new(),
            tier: spec.tier,
            history: None,
        })
    }

    /// Records every version this CodeFlow publishes, rolls back to or detaches from now
    /// on in `registry`'s history under node name `node`. A deploy through any path —
    /// [`CodeFlow::deploy`], [`CodeFlow::tx`], a fleet broadcast, an embedding program —
    /// leaves its entry; when the registry cannot record it, the operation (which took
    /// effect on the node) ends with [`ControlError::NotRecorded`].
    pub fn record_history(&mut self, registry: Registry, node: impl Into<String>) {
        self.history = Some((registry, node.into()));
    }

    /// Writes `entries` (each with the tier of the version it names) to the history, if
    /// one is attached. `done` says what took effect, for the error when it cannot.
    fn record(
        &self,
        entries: impl IntoIterator<Item = (HistoryEntry, Option<Tier>)>,
        done: impl FnOnce() -> String,
    ) -> Result<()> {
        let Some((registry, _)) = &self.history else {
            return Ok(());
        };
        let recorded = entries
            .into_iter()
            .try_for_each(|(e, tier)| registry.record_with_tier(&e, tier).map(drop));
        recorded.map_err(|source| ControlError::NotRecorded {
            done: done(),
            source: Box::new(source),
        })
    }

    /// A history entry of this node for `hook` (empty program fields, now).
    fn history_entry(&self, hook: &str, action: HistoryAction) -> HistoryEntry {
        HistoryEntry {
            id: 0,
            node: self
                .history
                .as_ref()
                .map(|(_, node)| node.clone())
                .unwrap_or_default(),
            hook: hook.into(),
            action,
            version: 0,
            previous_version: 0,
            program: String::new(),
            object: String::new(),
            class: String::new(),
            artifact: String::new(),
            at_ms: lease::now_ms(),
            generation: 0,
        }
    }

    /// The JIT tier [`CodeFlow::jit_compile_code`] compiles with.
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// Compiles later generic builds with `tier` (elite builds need [`Tier::Optimizing`]).
    pub fn set_tier(&mut self, tier: Tier) {
        self.tier = tier;
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    pub fn view(&self) -> &NodeView {
        &self.view
    }

    pub fn transport(&self) -> &dyn Transport {
        self.t.as_ref()
    }

    pub fn eim(&self) -> Option<&EimSpec> {
        self.eim.as_ref()
    }

    pub fn arch(&self) -> Arch {
        self.arch
    }

    pub fn holder(&self) -> u32 {
        self.lease.holder()
    }

    /// `mutual_excl`: takes (or renews) the node's lease and, when newly taken, loads the
    /// allocator table from the region, recovering what a previous holder left behind.
    pub fn mutual_excl(&mut self) -> Result<()> {
        let t = self.t.as_ref();
        let info = &self.view.info;
        let was_held = self.lease.is_held();
        self.lease
            .ensure(t, || AllocTable::holder_record(t, info))
            .inspect_err(|_| {
                self.alloc = None;
                self.map_names = None;
            })?;
        if !was_held || self.alloc.is_none() {
            AllocTable::set_holder_pid(t, info, std::process::id())?;
            let table = AllocTable::load(t, info, self.view.incarnation)?;
            self.alloc = Some(table);
            self.map_names = None;
            self.recover()?;
        }
        Ok(())
    }

    /// Whether this handle holds the node's lease (in its own books) with the allocator
    /// table loaded: unless the lease is about to expire, its next write needs no lease
    /// round trip and no table read.
    pub fn is_warm(&self) -> bool {
        self.lease.is_held() && self.alloc.is_some()
    }

    /// Gives the lease back.
    pub fn release(&mut self) -> Result<()> {
        self.alloc = None;
        self.map_names = None;
        self.lease.release(self.t.as_ref())
    }

    /// Checks the host is alive and the same incarnation we attached to.
    fn check_host(&self) -> Result<()> {
        node::check_alive(self.t.as_ref(), &self.view.info)?;
        let now = self.t.read_u64(offsets::HEADER_INCARNATION)?;
        if now != self.view.incarnation {
            return Err(ControlError::HostRestarted {
                attached: self.view.incarnation,
                now,
            });
        }
        Ok(())
    }

    fn begin(&mut self) -> Result<()> {
        self.check_host()?;
        self.mutual_excl()
    }

    fn alloc(&mut self) -> &mut AllocTable {
        self.alloc
            .as_mut()
            .expect("allocator loaded under the lease")
    }

    fn allocate(&mut self, arena: Arena, size: u64, rec: Record) -> Result<(usize, u64)> {
        let t = self.t.as_ref();
        self.alloc
            .as_mut()
            .expect("allocator loaded under the lease")
            .allocate(t, arena, size, rec)
    }

    fn active_word(&self, hook: &HookInfo) -> Result<u64> {
        Ok(slot::read_active(self.t.as_ref(), hook.slot_offset)?)
    }

    /// Recovery after taking the lease: pending records of a dead control plane are freed
    /// unless a hook publishes them (then the publish happened and they are held).
    fn recover(&mut self) -> Result<()> {
        let pending: Vec<(usize, Record)> = self
            .alloc()
            .records()
            .filter(|(_, r)| r.state == RecordState::Pending)
            .map(|(i, r)| (i, r.clone()))
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        let mut live_words = BTreeMap::new();
        for h in self.view.hooks() {
            live_words.insert(h.index, self.active_word(&h)?);
        }
        let referenced: Vec<u16> = pending
            .iter()
            .filter(|(_, r)| {
                r.arena == Arena::Code
                    && live_words
                        .get(&r.hook)
                        .map(|w| active_entry_offset(*w) as u64)
                        == Some(r.entry)
            })
            .flat_map(|(_, r)| r.maps.clone())
            .collect();
        let t = self.t.as_ref();
        let info = self.view.info.clone();
        let table = self.alloc.as_mut().expect("loaded");
        for (i, r) in pending {
            let published = match r.arena {
                Arena::Code => {
                    live_words
                        .get(&r.hook)
                        .map(|w| active_entry_offset(*w) as u64)
                        == Some(r.entry)
                }
                Arena::Scratch => referenced.contains(&(r.entry as u16)),
            };
            if published {
                table.set_state(t, i, RecordState::Held)?;
            } else {
                if r.arena == Arena::Scratch {
                    t.write_u64(info.xmeta_offset(r.entry as u32), 0)?;
                }
                table.set_state(t, i, RecordState::Free)?;
            }
        }
        Ok(())
    }

    /// The class a hook binds by default: the one named, or the only one the spec declares
    /// for the hook.
    pub fn resolve_class(&self, hook: &str, class: Option<&str>) -> Result<String> {
        let eim = self.eim.as_ref().ok_or(ControlError::NoEimSpec)?;
        let classes: Vec<&str> = eim
            .classes
            .iter()
            .filter(|c| c.hook == hook)
            .map(|c| c.name.as_str())
            .collect();
        match class {
            Some(c) if classes.contains(&c) => Ok(c.into()),
            Some(c) => Err(ControlError::NoClass {
                hook: hook.into(),
                reason: format!(
                    "no class {c:?} (classes for this hook: {})",
                    list_or_none(&classes)
                ),
            }),
            None => match classes.as_slice() {
                [one] => Ok((*one).into()),
                [] => Err(ControlError::NoClass {
                    hook: hook.into(),
                    reason: "the node's EIM spec binds no class to it".into(),
                }),
                _ => Err(ControlError::NoClass {
                    hook: hook.into(),
                    reason: format!(
                        "several classes; choose one with --class ({})",
                        classes.join(", ")
                    ),
                }),
            },
        }
    }

    /// `validate_code`: the verifier, against the hook's context and the class's
    /// capabilities and limits. A program that fails never reaches the node.
    pub fn validate_code(
        &self,
        ext: &Extension,
        hook: &str,
        class: Option<&str>,
    ) -> Result<Validated> {
        self.view.hook(hook)?;
        let class = self.resolve_class(hook, class)?;
        let eim = self.eim.as_ref().ok_or(ControlError::NoEimSpec)?;
        let opts =
            VerifyOptions::eim(eim, hook, &class).map_err(|source| ControlError::ClassOptions {
                hook: hook.into(),
                source,
            })?;
        let facts = rdx_verifier::verify_insns(&ext.insns, &ext.maps, &opts).map_err(|source| {
            ControlError::Verify {
                hook: hook.into(),
                class: class.clone(),
                source: Box::new(source),
            }
        })?;
        Ok(Validated {
            verified: VerifiedFor {
                hook: hook.into(),
                class,
                code: ext.code_hash,
                spec: self.spec_hash,
            },
            facts,
        })
    }

    /// Refuses to use a verdict given for `verified` on anything else: `ext` must be the
    /// program judged (its [`Extension::code_hash`]), this node's EIM spec the one the
    /// class was read from, and `hook` (when preparing) the hook it was verified for.
    fn check_verified_for(
        &self,
        verified: &VerifiedFor,
        ext: &Extension,
        hook: Option<&str>,
    ) -> Result<()> {
        let mismatch = if hook.is_some_and(|h| h != verified.hook) {
            Unverified::Hook(hook.unwrap_or_default().into())
        } else if ext.code_hash != verified.code {
            Unverified::Program
        } else if self.spec_hash != verified.spec {
            Unverified::Spec
        } else {
            return Ok(());
        };
        Err(ControlError::NotVerifiedFor {
            hook: verified.hook.clone(),
            class: verified.class.clone(),
            mismatch,
        })
    }

    /// The compile cache key: bytecode hash, target architecture, class, metering and (for
    /// the baseline tier) the tier, so that a cache never hands one tier's code to the other.
    pub fn cache_key(&self, ext: &Extension, checked: &Validated) -> String {
        let mut key = format!(
            "{}:{}:{}/{}:{}",
            ext.hash_hex(),
            self.arch.name(),
            checked.verified.hook,
            checked.verified.class,
            if checked.facts.needs_budget {
                "metered"
            } else {
                "bounded"
            }
        );
        if self.tier != Tier::Optimizing {
            key.push(':');
            key.push_str(self.tier.name());
        }
        key
    }

    /// `jit_compile_code`: the CodeFlow's tier (Cranelift by default, [`Tier::Baseline`] if
    /// set) for the node's architecture, or the registry's cached artifact for the same
    /// bytecode, architecture, class and tier. `checked` must be `ext`'s verdict on this
    /// node ([`ControlError::NotVerifiedFor`] otherwise).
    pub fn jit_compile_code(
        &self,
        ext: &Extension,
        checked: &Validated,
        registry: Option<&Registry>,
    ) -> Result<Compiled> {
        self.check_verified_for(&checked.verified, ext, None)?;
        let key = self.cache_key(ext, checked);
        if let Some(reg) = registry {
            // `cached_artifact` has checked the bytes against their content hash.
            if let Some((hash, bytes)) = reg.cached_artifact(&key)? {
                if let Ok(artifact) = Artifact::from_bytes(&bytes) {
                    self.check_binding(&artifact, &hash, ext, checked)?;
                    return Ok(Compiled {
                        artifact,
                        artifact_hash: hash,
                        cached: true,
                        budget: checked.facts.budget.unwrap_or(u64::MAX),
                        tier: self.tier,
                        build: Build::Generic,
                        helper_table: false,
                        verified: checked.verified.clone(),
                    });
                }
            }
        }
        let (compiled, bytes, _) = self.compile_with(ext, checked, BuildRequest::generic())?;
        if let Some(reg) = registry {
            reg.put_artifact(&key, &compiled.artifact_hash, &bytes)?;
        }
        Ok(compiled)
    }

    /// Checks that a cached artifact was built from `ext`'s bytecode for this node's
    /// architecture, the verified hook and class and the metering the verifier asked for
    /// (its metadata's source and options hashes), and is not an elite build: an artifact
    /// whose bytes are intact but that was compiled from another program, or for another
    /// class, is refused instead of deployed under this program's verdict.
    fn check_binding(
        &self,
        artifact: &Artifact,
        hash: &[u8; 32],
        ext: &Extension,
        checked: &Validated,
    ) -> Result<()> {
        let refuse = |what: &'static str| ControlError::ArtifactBinding {
            hash: hex(hash),
            what,
        };
        let source: [u8; 32] = Sha256::digest(raw_to_bytes(&encode(&ext.insns))).into();
        if artifact.meta.source_hash != source {
            return Err(refuse("another program's bytecode"));
        }
        if artifact.meta.arch != jit_arch(self.arch) {
            return Err(refuse("another architecture"));
        }
        if artifact.meta.deoptimises() {
            return Err(refuse("an elite (speculative) build"));
        }
        if artifact.meta.needs_budget() != checked.facts.needs_budget {
            return Err(refuse("other metering than the verifier asked for"));
        }
        if artifact.meta.options_hash
            != self
                .compile_options(ext, checked, &BuildRequest::generic())
                .hash()
        {
            return Err(refuse("another hook, class or set of compile options"));
        }
        Ok(())
    }

    /// The options `ext` is compiled with for `checked`'s hook and class in `request`.
    fn compile_options(
        &self,
        ext: &Extension,
        checked: &Validated,
        request: &BuildRequest,
    ) -> CompileOptions {
        let mut opts = CompileOptions::new(jit_arch(self.arch), request.build.clone());
        opts.needs_budget = checked.facts.needs_budget;
        opts.eim_class = format!("{}/{}", checked.verified.hook, checked.verified.class);
        opts.verify_ir = false;
        if request.helper_table {
            opts.helper_calls = HelperCalls::Table {
                table_len: self.view.info.helper_capacity,
            };
        } else if !matches!(request.build, Build::Scouting(_)) {
            // Array lookups are inlined against the definitions' geometry: `maps_for` links
            // only maps of exactly that shape (a live map of another shape is an error).
            opts.inline_array_lookups(&ext.maps);
            opts.pipeline = self.tier.pipeline();
        }
        opts
    }

    /// Compiles the elite (speculative) build of `ext`: the generic build's options plus
    /// `speculation`'s guards. Deploying it ([`CodeFlow::prepare_prog`]) also writes the
    /// fallback image its deoptimised runs continue in. Not cached: a profile decides it.
    /// Only the optimizing tier builds elite code: on a CodeFlow whose tier is
    /// [`Tier::Baseline`] this is [`ControlError::NotInBaseline`].
    pub fn jit_compile_elite(
        &self,
        ext: &Extension,
        checked: &Validated,
        speculation: rdx_jit::Speculation,
    ) -> Result<(Compiled, rdx_jit::CompileStats)> {
        self.check_verified_for(&checked.verified, ext, None)?;
        let (compiled, _, stats) = self.compile_with(
            ext,
            checked,
            BuildRequest {
                build: Build::Elite(speculation),
                helper_table: false,
            },
        )?;
        Ok((compiled, stats))
    }

    /// Compiles the scouting build of `ext` (by the optimizing tier, whatever this
    /// CodeFlow's tier): every conditional jump counts its two directions in the value of
    /// the map `counters` names, which `ext` must declare. Not cached.
    pub fn jit_compile_scouting(
        &self,
        ext: &Extension,
        checked: &Validated,
        counters: rdx_jit::BranchCounters,
    ) -> Result<Compiled> {
        self.check_verified_for(&checked.verified, ext, None)?;
        Ok(self
            .compile_with(
                ext,
                checked,
                BuildRequest {
                    build: Build::Scouting(counters),
                    helper_table: false,
                },
            )?
            .0)
    }

    /// Compiles `ext` to call helpers through the region's helper table instead of by
    /// address (by the optimizing tier), for code that runs in other processes than the
    /// node's (a cross-sandbox callee). Not cached.
    pub fn jit_compile_helper_table(
        &self,
        ext: &Extension,
        checked: &Validated,
    ) -> Result<Compiled> {
        self.check_verified_for(&checked.verified, ext, None)?;
        Ok(self
            .compile_with(
                ext,
                checked,
                BuildRequest {
                    build: Build::Generic,
                    helper_table: true,
                },
            )?
            .0)
    }

    fn compile_with(
        &self,
        ext: &Extension,
        checked: &Validated,
        request: BuildRequest,
    ) -> Result<(Compiled, Vec<u8>, rdx_jit::CompileStats)> {
        // Only generic and elite builds calling helpers by address follow the CodeFlow's
        // tier.
        let tier = match request.build {
            Build::Generic | Build::Elite(_) if !request.helper_table => self.tier,
            _ => Tier::Optimizing,
        };
        let opts = self.compile_options(ext, checked, &request);
        let compile_err = |e: rdx_jit::CompileError| match e {
            rdx_jit::CompileError::NotInBaseline { what } => ControlError::NotInBaseline { what },
            e => ControlError::Compile(e),
        };
        let (artifact, stats) = match tier {
            // No Cranelift code generator is built for the baseline tier.
            Tier::Baseline => {
                let t = Instant::now();
                let artifact = rdx_jit::compile(&ext.insns, &opts).map_err(compile_err)?;
                let stats = rdx_jit::CompileStats {
                    insns: ext.insns.len(),
                    code_bytes: artifact.code.len(),
                    elapsed: t.elapsed(),
                    ..Default::default()
                };
                (artifact, stats)
            }
            Tier::Optimizing => Compiler::new(opts.arch)
                .map_err(compile_err)?
                .compile(&ext.insns, &opts)
                .map_err(compile_err)?,
        };
        let bytes = artifact.to_bytes();
        let hash: [u8; 32] = Sha256::digest(&bytes).into();
        Ok((
            Compiled {
                artifact,
                artifact_hash: hash,
                cached: false,
                budget: checked.facts.budget.unwrap_or(u64::MAX),
                tier,
                build: request.build,
                helper_table: request.helper_table,
                verified: checked.verified.clone(),
            },
            bytes,
            stats,
        ))
    }

    fn live_maps(&mut self) -> Result<&mut BTreeMap<String, (u32, MapSpec)>> {
        if self.map_names.is_none() {
            let mut names = BTreeMap::new();
            // One read of the meta table, then only the live entries opened (rather than
            // a read per possible map id).
            let info = &self.view.info;
            let entry = std::mem::size_of::<XStateMeta>();
            let mut meta = vec![0u8; info.xstate_capacity as usize * entry];
            self.t.read(info.xmeta_offset(0), &mut meta)?;
            let live = (0..info.xstate_capacity).filter(|&id| {
                let o = id as usize * entry;
                u32::from_le_bytes(meta[o..o + 4].try_into().expect("4")) == XMETA_LIVE
            });
            for id in live {
                let m = match xstate::open(self.t.as_ref(), info, id) {
                    Ok(m) => m,
                    // Freed between the two reads: not live.
                    Err(xstate::MapError::NotFound) => continue,
                    Err(e) => return Err(e.into()),
                };
                names.insert(
                    m.name.clone(),
                    (
                        m.id,
                        MapSpec {
                            map_type: m.map.map_type,
                            key_size: m.map.key_size,
                            value_size: m.map.value_size,
                            max_entries: m.map.max_entries,
                            flags: 0,
                            name: m.name,
                        },
                    ),
                );
            }
            self.map_names = Some(names);
        }
        Ok(self.map_names.as_mut().expect("just filled"))
    }

    /// `deploy_xstate`: allocates a map in the scratchpad, writes its header and zeroed data,
    /// publishes its meta entry. Returns the map id and its alloc record (pending until the
    /// version using it is published).
    pub fn deploy_xstate(
        &mut self,
        spec: &MapSpec,
        initial: Option<&[u8]>,
    ) -> Result<(u32, usize)> {
        self.begin()?;
        let info = self.view.info.clone();
        let layout = xstate::layout(spec, info.thread_slots)?;
        // A free meta id that no pending record claims.
        let mut meta = vec![0u8; info.xstate_capacity as usize * std::mem::size_of::<XStateMeta>()];
        self.t.read(info.xmeta_offset(0), &mut meta)?;
        let claimed: Vec<u64> = self
            .alloc()
            .records()
            .filter(|(_, r)| r.arena == Arena::Scratch)
            .map(|(_, r)| r.entry)
            .collect();
        let id = (0..info.xstate_capacity)
            .find(|&id| {
                let o = id as usize * std::mem::size_of::<XStateMeta>();
                u32::from_le_bytes(meta[o..o + 4].try_into().expect("4")) == XMETA_FREE
                    && id != info.trace_map_id
                    && !claimed.contains(&(id as u64))
            })
            .ok_or_else(|| ControlError::BadMap {
                name: spec.name.clone(),
                reason: format!(
                    "all {} XState meta entries are in use",
                    info.xstate_capacity
                ),
            })?;
        let rec = Record {
            state: RecordState::Pending,
            arena: Arena::Scratch,
            offset: 0,
            size: 0,
            hook: u32::MAX,
            version: 0,
            entry: id as u64,
            created_ms: lease::now_ms(),
            generation: 0,
            insn_count: 0,
            maps: vec![],
            hash: [0; 16],
            budget: 0,
            tier: Tier::Optimizing,
        };
        let (slot, offset) = match self.allocate(Arena::Scratch, layout.footprint(), rec.clone()) {
            Ok(x) => x,
            Err(ControlError::ArenaFull { .. }) => {
                self.reclaim_for(Arena::Scratch)?;
                self.allocate(Arena::Scratch, layout.footprint(), rec)?
            }
            Err(e) => return Err(e),
        };
        let created = xstate::create(self.t.as_ref(), &info, id, offset, spec).and_then(|m| {
            if let Some(v) = initial {
                if v.len() > m.value_size as usize {
                    return Err(xstate::MapError::Invalid(format!(
                        "initial value of {} bytes for a {}-byte value",
                        v.len(),
                        m.value_size
                    )));
                }
                self.t.write(m.data, v)?;
            }
            Ok(m)
        });
        if let Err(e) = created {
            let t = self.t.as_ref();
            self.alloc
                .as_mut()
                .expect("loaded")
                .set_state(t, slot, RecordState::Free)?;
            return Err(e.into());
        }
        if !spec.name.starts_with('.') && !spec.name.contains('.') {
            let s = spec.clone();
            self.live_maps()?.insert(s.name.clone(), (id, s));
        }
        Ok((id, slot))
    }

    /// Map ids for an extension's maps: live maps of the same name and shape are reused (their
    /// contents survive a new version and a rollback); others, and every global-data map, are
    /// created. Returns (ids, records of created maps, created ids).
    fn maps_for(&mut self, ext: &Extension) -> Result<(Vec<u32>, Vec<usize>, Vec<u32>)> {
        let mut ids = Vec::new();
        let mut recs = Vec::new();
        let mut created = Vec::new();
        let result = (|| -> Result<()> {
            for m in &ext.maps {
                let map_type = region_map_type(m)?;
                let global = m.origin == MapOrigin::GlobalData;
                let name = if global {
                    let short: String = ext
                        .name
                        .chars()
                        .take(XSTATE_NAME_LEN - m.name.len().min(12))
                        .collect();
                    let mut n = format!("{short}{}", m.name);
                    n.truncate(XSTATE_NAME_LEN);
                    n
                } else {
                    let mut n = m.name.clone();
                    if n.len() > XSTATE_NAME_LEN {
                        return Err(ControlError::BadMap {
                            name: n,
                            reason: format!("name longer than {XSTATE_NAME_LEN} bytes"),
                        });
                    }
                    n.truncate(XSTATE_NAME_LEN);
                    n
                };
                let spec = MapSpec {
                    map_type,
                    key_size: m.key_size,
                    value_size: m.value_size,
                    max_entries: m.max_entries,
                    flags: 0,
                    name: name.clone(),
                };
                if !global {
                    if let Some((id, live)) = self.live_maps()?.get(&name) {
                        if live.map_type == spec.map_type
                            && live.key_size == spec.key_size
                            && live.value_size == spec.value_size
                            && live.max_entries == spec.max_entries
                        {
                            ids.push(*id);
                            continue;
                        }
                        return Err(ControlError::BadMap {
                            name,
                            reason: format!(
                                "a live map of that name has another shape ({:?} {}/{}/{}, the program wants {:?} {}/{}/{})",
                                live.map_type, live.key_size, live.value_size, live.max_entries,
                                spec.map_type, spec.key_size, spec.value_size, spec.max_entries
                            ),
                        });
                    }
                }
                let (id, rec) = self.deploy_xstate(&spec, m.initial_value.as_deref())?;
                ids.push(id);
                recs.push(rec);
                created.push(id);
            }
            Ok(())
        })();
        if let Err(e) = result {
            self.abort_records(&recs, &created)?;
            return Err(e);
        }
        Ok((ids, recs, created))
    }

    fn abort_records(&mut self, recs: &[usize], maps: &[u32]) -> Result<()> {
        let info = self.view.info.clone();
        for &id in maps {
            self.t.write_u64(info.xmeta_offset(id), 0)?;
        }
        if let Some(names) = self.map_names.as_mut() {
            names.retain(|_, (id, _)| !maps.contains(id));
        }
        let t = self.t.as_ref();
        let table = self.alloc.as_mut().expect("loaded");
        for &r in recs {
            table.set_state(t, r, RecordState::Free)?;
        }
        Ok(())
    }

    /// The symbol table a program links against on this node: helpers and host functions
    /// by id, host variables by name, the helper table, and the program's maps by index.
    pub fn resolver(&self, map_ids: &[u32]) -> Result<impl Fn(&Symbol) -> Option<u64> + '_> {
        let info = &self.view.info;
        let mut maps = Vec::with_capacity(map_ids.len());
        for &id in map_ids {
            let m = xstate::open(self.t.as_ref(), info, id)?;
            maps.push((
                info.base_address + m.map.offset,
                info.base_address + m.map.data,
            ));
        }
        let base = info.base_address;
        let helper_table = base + info.section(SectionId::HelperTable).offset;
        let symbols = &self.view.symbols;
        Ok(move |s: &Symbol| -> Option<u64> {
            match s {
                Symbol::Helper(id) => symbols
                    .iter()
                    .find(|c| {
                        matches!(c.kind, ContextKind::Helper | ContextKind::HostFunction)
                            && c.id == *id
                    })
                    .map(|c| c.addr),
                Symbol::Map(i) => maps.get(*i as usize).map(|m| m.0),
                Symbol::MapValue(i) => maps.get(*i as usize).map(|m| m.1),
                Symbol::Var(n) if n == rdx_jit::artifact::HELPER_TABLE_SYMBOL => Some(helper_table),
                Symbol::Var(n) => symbols
                    .iter()
                    .find(|c| c.kind == ContextKind::HostVariable && c.name == *n)
                    .map(|c| c.addr),
                Symbol::Fn(n) => symbols
                    .iter()
                    .find(|c| c.kind == ContextKind::HostFunction && c.name == *n)
                    .map(|c| c.addr),
            }
        })
    }

    /// `link_code`: final code bytes for region offset `code_offset` on this node.
    pub fn link_code(
        &self,
        compiled: &Compiled,
        map_ids: &[u32],
        code_offset: u64,
    ) -> Result<Vec<u8>> {
        let resolver = self.resolver(map_ids)?;
        let linked = rdx_jit::link::link(
            &compiled.artifact,
            LinkTarget::new(jit_arch(self.arch)),
            &resolver,
            self.view.info.base_address + code_offset,
        )?;
        Ok(linked.code)
    }

    /// Links `compiled` for `code_offset` and writes it there: on a mapped region straight
    /// into the (allocated, unpublished) extent — one copy of the code plus its relocations —
    /// otherwise into a reused buffer written with one transport write.
    fn write_code(&mut self, compiled: &Compiled, map_ids: &[u32], code_offset: u64) -> Result<()> {
        let len = compiled.artifact.code.len();
        let target = LinkTarget::new(jit_arch(self.arch));
        let load_address = self.view.info.base_address + code_offset;
        if let Some(region) = self.mapped {
            let end = code_offset.checked_add(len as u64);
            if end.is_none_or(|e| e > self.t.region_len()) {
                return Err(ControlError::Link(format!(
                    "code extent [{code_offset:#x}, +{len:#x}) is outside the region"
                )));
            }
            let resolver = self.resolver(map_ids)?;
            // SAFETY: the extent is inside the mapping (checked above; `self.t` keeps it
            // mapped) and was just allocated to this deploy under the lease: no host thread
            // runs or reads it (nothing publishes it yet, and reclamation freed it only after
            // every thread left), and no other control plane writes it (the lease). So this
            // is the only access to those bytes until the publishing CAS, which orders these
            // stores before the new word.
            let out = unsafe {
                std::slice::from_raw_parts_mut(region.base().add(code_offset as usize), len)
            };
            return rdx_jit::link::link_into(
                &compiled.artifact,
                target,
                &resolver,
                load_address,
                out,
            )
            .map_err(ControlError::from);
        }
        let mut buf = std::mem::take(&mut self.link_buf);
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let linked = self.resolver(map_ids).and_then(|resolver| {
            rdx_jit::link::link_into(
                &compiled.artifact,
                target,
                &resolver,
                load_address,
                &mut buf[..len],
            )
            .map_err(ControlError::from)
        });
        let written = linked.and_then(|()| Ok(self.t.write(code_offset, &buf[..len])?));
        self.link_buf = buf;
        written
    }

    /// Writes an elite record's fallback locator (before the entry) and image (after the
    /// code): `ext` lowered with its maps linked at the addresses the native code got.
    fn write_fallback(
        &mut self,
        ext: &Extension,
        map_ids: &[u32],
        record: u64,
        layout: &ImageLayout,
    ) -> Result<()> {
        let resolver = self.resolver(map_ids)?;
        let ops = rdx_bpf::interp::lower_linked(&ext.insns, |kind, index, offset| {
            let index = u32::try_from(index).ok()?;
            match kind {
                rdx_bpf::isa::ImmKind::MapIdx => resolver(&Symbol::Map(index)),
                rdx_bpf::isa::ImmKind::MapIdxValue => {
                    resolver(&Symbol::MapValue(index))?.checked_add(u64::try_from(offset).ok()?)
                }
                _ => None,
            }
        })
        .map_err(ControlError::FallbackImage)?;
        let image = rdx_exec::image::encode(&ops);
        if image.len() as u64 != layout.len {
            return Err(ControlError::Link(format!(
                "fallback image is {} bytes, {} were allocated",
                image.len(),
                layout.len
            )));
        }
        let locator = FallbackLocator {
            magic: FALLBACK_MAGIC,
            image_offset: layout.from_entry as u32,
            image_len: image.len() as u32,
        };
        self.t.write(record, &locator.to_bytes())?;
        self.t
            .write(record + FallbackLocator::BYTES + layout.from_entry, &image)?;
        Ok(())
    }

    /// Above every version this hook holds or runs, and above every version freed on this
    /// node, so that no active word is ever reused for other code.
    fn next_version(&self, hook: &HookInfo, active: u64) -> u32 {
        let held = self
            .alloc
            .as_ref()
            .map(|a| {
                a.records()
                    .filter(|(_, r)| r.arena == Arena::Code && r.hook == hook.index)
                    .map(|(_, r)| r.version)
                    .max()
                    .unwrap_or(0)
                    .max(a.freed_version())
            })
            .unwrap_or(0);
        held.max(active_version(active)).wrapping_add(1).max(1)
    }

    /// Writes a version of `ext` for `hook` into the node — maps, code, record — without
    /// making it visible. [`CodeFlow::tx`] publishes it; [`CodeFlow::abort`] undoes it.
    /// `compiled` must have been verified for `hook` on a node with this node's EIM spec,
    /// from `ext`'s code, and compiled for this node's architecture
    /// ([`ControlError::NotVerifiedFor`] otherwise, before anything is written).
    pub fn prepare_prog(
        &mut self,
        hook: &str,
        ext: &Extension,
        compiled: &Compiled,
    ) -> Result<Prepared> {
        self.check_verified_for(&compiled.verified, ext, Some(hook))?;
        if compiled.artifact.meta.arch != jit_arch(self.arch) {
            return Err(ControlError::NotVerifiedFor {
                hook: compiled.verified.hook.clone(),
                class: compiled.verified.class.clone(),
                mismatch: Unverified::Arch,
            });
        }
        self.begin()?;
        let hook = self.view.hook(hook)?;
        let expected = self.active_word(&hook)?;
        if expected & ACTIVE_HOLD != 0 {
            return Err(ControlError::Held {
                hook: hook.name,
                word: expected,
            });
        }
        let version = self.next_version(&hook, expected);
        let fallback = FallbackLayout::of(compiled, ext)?;
        let code_len = fallback.record_len(compiled.artifact.code.len() as u64);
        let entry_rel = compiled.artifact.meta.entry_offset as u64 + fallback.code_at();
        if !entry_rel.is_multiple_of(CODE_ENTRY_ALIGN) {
            return Err(ControlError::Link(format!(
                "entry offset {entry_rel:#x} is not {CODE_ENTRY_ALIGN}-byte aligned"
            )));
        }
        let rec = Record {
            state: RecordState::Pending,
            arena: Arena::Code,
            offset: 0,
            size: 0,
            hook: hook.index,
            version,
            entry: 0,
            created_ms: lease::now_ms(),
            generation: 0,
            insn_count: ext.insns.len() as u32,
            maps: vec![],
            hash: compiled.artifact_hash[..16].try_into().expect("16"),
            budget: compiled.budget,
            tier: compiled.tier,
        };
        let (code_rec, code_offset) = match self.allocate(Arena::Code, code_len, rec.clone()) {
            Ok(x) => x,
            Err(ControlError::ArenaFull { .. }) => {
                self.reclaim_for(Arena::Code)?;
                self.allocate(Arena::Code, code_len, rec)?
            }
            Err(e) => return Err(e),
        };
        let (map_ids, map_recs, new_maps) = match self.maps_for(ext) {
            Ok(x) => x,
            Err(e) => {
                self.abort_records(&[code_rec], &[])?;
                return Err(e);
            }
        };
        let mut records = vec![code_rec];
        records.extend(map_recs);
        let written = (|| -> Result<()> {
            if map_ids.len() > RECORD_MAPS {
                return Err(ControlError::Invalid(format!(
                    "a program may use at most {RECORD_MAPS} maps, it has {}",
                    map_ids.len()
                )));
            }
            self.write_code(compiled, &map_ids, code_offset + fallback.code_at())?;
            if let Some(layout) = &fallback.image {
                self.write_fallback(ext, &map_ids, code_offset, layout)?;
            }
            let mut r = self
                .alloc
                .as_ref()
                .expect("loaded")
                .get(code_rec)
                .expect("allocated")
                .clone();
            r.entry = code_offset + entry_rel;
            r.maps = map_ids.iter().map(|&m| m as u16).collect();
            let t = self.t.as_ref();
            self.alloc.as_mut().expect("loaded").put(t, code_rec, r)?;
            Ok(())
        })();
        if let Err(e) = written {
            self.abort_records(&records, &new_maps)?;
            return Err(e);
        }
        let entry = code_offset + entry_rel;
        Ok(Prepared {
            new_word: active_word(version, entry as u32),
            hook,
            version,
            expected,
            budget: compiled.budget,
            tier: compiled.tier,
            records,
            new_maps,
            code_offset,
            code_len,
            map_ids,
            record: PublishRecord {
                action: match compiled.build {
                    Build::Generic => HistoryAction::Deploy,
                    Build::Elite(_) => HistoryAction::Optimize,
                    Build::Scouting(_) => HistoryAction::Profile,
                },
                program: ext.name.clone(),
                origin: ext.origin.clone(),
                class: compiled.verified.class.clone(),
                artifact_hash: compiled.artifact_hash,
            },
        })
    }

    /// Undoes a prepared version that will not be published: frees its code and new maps.
    pub fn abort(&mut self, p: Prepared) -> Result<()> {
        self.abort_records(&p.records, &p.new_maps)
    }

    /// `cc_event`: coherence for new code. On the writer's side every byte written must be
    /// visible before the publishing CAS: a fence on the transport (a store fence on shared
    /// memory, a completion wait on the fabric). The host's side of coherence (a serialising
    /// instruction on x86, instruction-cache maintenance on aarch64) runs in its hook path
    /// when it sees a new version number in the slot.
    pub fn cc_event(&self) -> Result<()> {
        Ok(self.t.fence()?)
    }

    /// `tx`: publishes prepared versions, one [`slot::publish`] per hook (the
    /// [`CodeFlow::cc_event`] fence, then one 8-byte compare-and-swap). A hook whose word
    /// changed since it was prepared is refused with [`ControlError::Conflict`] (and its
    /// version aborted); earlier ones stay published. Every version published is recorded in the history ([`CodeFlow::record_history`]).
    pub fn tx(&mut self, prepared: Vec<Prepared>) -> Result<Vec<Published>> {
        let mut published = Vec::with_capacity(prepared.len());
        let outcome = self.publish_each(prepared, &mut published);
        let entries = published.iter().map(|(p, r)| {
            let entry = HistoryEntry {
                version: p.version,
                previous_version: p.previous_version,
                program: r.program.clone(),
                object: r.origin.clone(),
                class: r.class.clone(),
                artifact: hex(&r.artifact_hash),
                generation: p.generation,
                ..self.history_entry(&p.hook, r.action)
            };
            (entry, Some(p.tier))
        });
        let recorded = self.record(entries, || {
            let versions: Vec<String> = published
                .iter()
                .map(|(p, _)| format!("version {} of hook {:?}", p.version, p.hook))
                .collect();
            format!("{} published", versions.join(", "))
        });
        // A refused publish is the error to report; what did publish is recorded either way.
        outcome?;
        recorded?;
        Ok(published.into_iter().map(|(p, _)| p).collect())
    }

    /// Publishes each prepared version in turn (see [`CodeFlow::tx`]), appending what it
    /// published to `out`.
    fn publish_each(
        &mut self,
        prepared: Vec<Prepared>,
        out: &mut Vec<(Published, PublishRecord)>,
    ) -> Result<()> {
        let mut iter = prepared.into_iter();
        while let Some(p) = iter.next() {
            let checked = self
                .check_host()
                .and_then(|_| self.lease.verify(self.t.as_ref()));
            if let Err(e) = checked {
                self.abort(p)?;
                for rest in iter {
                    self.abort(rest)?;
                }
                return Err(e);
            }
            // Mark held first: if we die after the CAS, recovery must not free live code.
            let t = self.t.as_ref();
            let table = self.alloc.as_mut().expect("loaded");
            for &r in &p.records {
                table.set_state(t, r, RecordState::Held)?;
            }
            let published = slot::publish(
                t,
                p.hook.slot_offset,
                p.expected,
                p.new_word,
                Some(p.budget),
            );
            let generation = match published {
                Ok(generation) => generation,
                Err(SlotError::Changed { expected, found }) => {
                    let hook = p.hook.name.clone();
                    self.abort(p)?;
                    for rest in iter {
                        self.abort(rest)?;
                    }
                    return Err(ControlError::Conflict {
                        hook,
                        expected,
                        found,
                    });
                }
                Err(SlotError::Transport(e)) => return Err(e.into()),
            };
            out.push((
                Published {
                    hook: p.hook.name.clone(),
                    version: p.version,
                    previous_version: active_version(p.expected),
                    word: p.new_word,
                    generation,
                    code_offset: p.code_offset,
                    code_len: p.code_len,
                    map_ids: p.map_ids.clone(),
                    tier: p.tier,
                },
                p.record,
            ));
        }
        Ok(())
    }

    /// `deploy_prog`: prepare (allocate, link, write) then `tx`. On any error nothing is
    /// visible and the hook keeps its previous version.
    pub fn deploy_prog(
        &mut self,
        hook: &str,
        ext: &Extension,
        compiled: &Compiled,
    ) -> Result<Published> {
        let p = self.prepare_prog(hook, ext, compiled)?;
        Ok(self.tx(vec![p])?.remove(0))
    }

    /// Validate, compile (or take from the registry's compile cache), deploy: the whole
    /// path for one hook.
    pub fn deploy(
        &mut self,
        hook: &str,
        ext: &Extension,
        class: Option<&str>,
        registry: Option<&Registry>,
    ) -> Result<Published> {
        self.deploy_observed(hook, ext, class, registry, &mut ())
    }

    /// [`CodeFlow::deploy`], telling `observer` as each stage starts and ends (with what it
    /// produced and how long it took) or fails.
    pub fn deploy_observed(
        &mut self,
        hook: &str,
        ext: &Extension,
        class: Option<&str>,
        registry: Option<&Registry>,
        observer: &mut dyn DeployObserver,
    ) -> Result<Published> {
        let checked = observe(
            observer,
            DeployStage::Verify,
            |x| StageDone::Verified(x),
            || self.validate_code(ext, hook, class),
        )?;
        let compiled = observe(
            observer,
            DeployStage::Compile,
            |x| StageDone::Compiled(x),
            || self.jit_compile_code(ext, &checked, registry),
        )?;
        let prepared = observe(
            observer,
            DeployStage::Prepare,
            |x| StageDone::Prepared(x),
            || self.prepare_prog(hook, ext, &compiled),
        )?;
        observe(
            observer,
            DeployStage::Publish,
            |x| StageDone::Published(x),
            || Ok(self.tx(vec![prepared])?.remove(0)),
        )
    }

    /// Publishes `new_word` on a hook with one CAS (for detach and rollback).
    fn swap(
        &mut self,
        hook: &HookInfo,
        expected: u64,
        new_word: u64,
        budget: Option<u64>,
    ) -> Result<u64> {
        if expected & ACTIVE_HOLD != 0 {
            return Err(ControlError::Held {
                hook: hook.name.clone(),
                word: expected,
            });
        }
        self.lease.verify(self.t.as_ref())?;
        slot::publish(
            self.t.as_ref(),
            hook.slot_offset,
            expected,
            new_word,
            budget,
        )
        .map_err(|e| match e {
            SlotError::Changed { expected, found } => ControlError::Conflict {
                hook: hook.name.clone(),
                expected,
                found,
            },
            SlotError::Transport(e) => e.into(),
        })
    }

    /// `detach`: the hook runs nothing (its default). The detached version stays held, so
    /// a rollback can re-attach it. Returns the version that was active (0 if none).
    pub fn detach(&mut self, hook: &str) -> Result<u32> {
        self.begin()?;
        let hook = self.view.hook(hook)?;
        let current = self.active_word(&hook)?;
        let was = active_version(current);
        if was == 0 {
            return Ok(0);
        }
        let generation = self.swap(&hook, current, 0, None)?;
        let entry = HistoryEntry {
            previous_version: was,
            generation,
            ..self.history_entry(&hook.name, HistoryAction::Detach)
        };
        self.record([(entry, None)], || {
            format!("hook {:?} detached from version {was}", hook.name)
        })?;
        Ok(was)
    }

    /// Versions of a hook still held in the code arena, newest first (takes the lease).
    pub fn versions(&mut self, hook: &str) -> Result<Vec<HeldVersion>> {
        self.begin()?;
        let hook = self.view.hook(hook)?;
        held_versions(self.t.as_ref(), self.alloc.as_ref().expect("loaded"), &hook)
    }

    /// Versions of a hook still held, read without the lease (for `node show`, `history`).
    pub fn versions_readonly(&self, hook: &str) -> Result<Vec<HeldVersion>> {
        let hook = self.view.hook(hook)?;
        match AllocTable::peek(self.t.as_ref(), &self.view.info, self.view.incarnation)? {
            Some(table) => held_versions(self.t.as_ref(), &table, &hook),
            None => Ok(Vec::new()),
        }
    }

    /// `rollback`: republishes an earlier version still held in the code arena — `to`, or
    /// the newest one older than the active version (the newest held one if detached).
    pub fn rollback(&mut self, hook: &str, to: Option<u32>) -> Result<Published> {
        self.begin()?;
        let info = self.view.hook(hook)?;
        let current = self.active_word(&info)?;
        let cur_v = active_version(current);
        let held: Vec<Record> = self
            .alloc
            .as_ref()
            .expect("loaded")
            .records()
            .filter(|(_, r)| {
                r.arena == Arena::Code && r.hook == info.index && r.state == RecordState::Held
            })
            .map(|(_, r)| r.clone())
            .collect();
        let target =
            match to {
                Some(v) => held.iter().find(|r| r.version == v).ok_or_else(|| {
                    ControlError::NoSuchVersion {
                        hook: hook.into(),
                        version: v,
                        held: {
                            let mut vs: Vec<u32> = held.iter().map(|r| r.version).collect();
                            vs.sort_unstable();
                            if vs.is_empty() {
                                "none".into()
                            } else {
                                vs.iter()
                                    .map(|v| v.to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            }
                        },
                    }
                })?,
                None => held
                    .iter()
                    .filter(|r| if cur_v == 0 { true } else { r.version < cur_v })
                    .max_by_key(|r| r.version)
                    .ok_or_else(|| ControlError::NothingToRollBack { hook: hook.into() })?,
            };
        let word = active_word(target.version, target.entry as u32);
        let generation = if word == current {
            slot::generation(self.t.as_ref())?
        } else {
            self.swap(&info, current, word, Some(target.budget))?
        };
        self.record_rollback(hook, target.version, cur_v, generation)?;
        Ok(Published {
            hook: hook.into(),
            version: target.version,
            previous_version: cur_v,
            word,
            generation,
            code_offset: target.offset,
            code_len: target.size,
            map_ids: target.maps.iter().map(|&m| m as u32).collect(),
            tier: target.tier,
        })
    }

    /// Records a rollback to `version` with the program, object, class and artifact of the
    /// deploy that first published it, as the history holds them.
    fn record_rollback(
        &self,
        hook: &str,
        version: u32,
        previous_version: u32,
        generation: u64,
    ) -> Result<()> {
        let Some((registry, node)) = &self.history else {
            return Ok(());
        };
        let done = || format!("hook {hook:?} rolled back to version {version}");
        let deployed = registry
            .history(node, Some(hook))
            .map_err(|source| ControlError::NotRecorded {
                done: done(),
                source: Box::new(source),
            })?
            .into_iter()
            .rev()
            .find(|e| e.action == HistoryAction::Deploy && e.version == version);
        let entry = HistoryEntry {
            version,
            previous_version,
            generation,
            ..match deployed {
                Some(d) => HistoryEntry {
                    at_ms: lease::now_ms(),
                    action: HistoryAction::Rollback,
                    ..d
                },
                None => self.history_entry(hook, HistoryAction::Rollback),
            }
        };
        self.record([(entry, None)], done)
    }

    fn reclaim_for(&mut self, arena: Arena) -> Result<Reclaimed> {
        // First keep one previous version per hook (a rollback target); then everything.
        let r = self.reclaim(1)?;
        if self.alloc().largest_gap(arena) > 0 && (r.code_versions > 0 || r.maps > 0) {
            return Ok(r);
        }
        self.reclaim(0)
    }

    /// Frees code versions that no hook publishes (keeping the newest `keep_previous` per
    /// hook for rollback) and maps that no remaining version uses, once the node's epoch words
    /// show that no host thread can still be running them: the records are marked retired,
    /// then [`slot::wait_quiescent`] (remote barrier, epoch snapshot, every thread that was
    /// inside extension code moves on) before they are freed.
    pub fn reclaim(&mut self, keep_previous: usize) -> Result<Reclaimed> {
        self.begin()?;
        let info = self.view.info.clone();
        let mut active = BTreeMap::new();
        for h in self.view.hooks() {
            active.insert(h.index, self.active_word(&h)?);
        }
        let table = self.alloc.as_ref().expect("loaded");
        let mut per_hook: BTreeMap<u32, Vec<(u32, usize)>> = BTreeMap::new();
        let mut retire = Vec::new();
        for (i, r) in table.records() {
            if r.arena != Arena::Code {
                continue;
            }
            if r.state == RecordState::Retired {
                retire.push(i);
                continue;
            }
            if r.state != RecordState::Held {
                continue;
            }
            let is_active = active.get(&r.hook).is_some_and(|w| {
                active_entry_offset(*w) as u64 == r.entry && active_version(*w) == r.version
            });
            if !is_active {
                per_hook.entry(r.hook).or_default().push((r.version, i));
            }
        }
        for (_, mut vs) in per_hook {
            vs.sort_by_key(|b| std::cmp::Reverse(b.0));
            retire.extend(vs.into_iter().skip(keep_previous).map(|(_, i)| i));
        }
        // Maps no longer used by any code record that stays.
        let used: Vec<u16> = table
            .records()
            .filter(|(i, r)| r.arena == Arena::Code && !retire.contains(i))
            .flat_map(|(_, r)| r.maps.clone())
            .collect();
        let maps: Vec<usize> = if keep_previous == 0 {
            table
                .records()
                .filter(|(_, r)| {
                    r.arena == Arena::Scratch
                        && r.state != RecordState::Pending
                        && !used.contains(&(r.entry as u16))
                })
                .map(|(i, _)| i)
                .collect()
        } else {
            table
                .records()
                .filter(|(_, r)| r.arena == Arena::Scratch && r.state == RecordState::Retired)
                .map(|(i, _)| i)
                .collect()
        };
        if retire.is_empty() && maps.is_empty() {
            return Ok(Reclaimed::default());
        }
        let t = self.t.as_ref();
        let table = self.alloc.as_mut().expect("loaded");
        for &i in retire.iter().chain(&maps) {
            table.set_state(t, i, RecordState::Retired)?;
        }
        // Maps leave the meta table first so no new lookup finds them.
        for &i in &maps {
            let id = table.get(i).expect("retired").entry as u32;
            t.write_u64(info.xmeta_offset(id), 0)?;
        }
        let deadline = Instant::now() + self.reclaim_timeout;
        let pause = slot::Poll::Sleep(Duration::from_micros(50));
        match slot::wait_quiescent(t, &info, deadline, pause) {
            Ok(()) => {}
            // Leave them retired: a later reclamation finishes the job.
            Err(QuiesceError::StillInside { .. }) => {
                return Err(ControlError::ArenaFull {
                    arena: "code",
                    need: 0,
                    free: 0,
                })
            }
            Err(QuiesceError::Transport(e)) => return Err(e.into()),
        }
        let mut out = Reclaimed::default();
        for &i in retire.iter().chain(&maps) {
            let r = table.get(i).expect("retired").clone();
            match r.arena {
                Arena::Code => {
                    out.code_versions += 1;
                    out.code_bytes += r.size;
                }
                Arena::Scratch => {
                    out.maps += 1;
                    out.map_bytes += r.size;
                }
            }
            table.set_state(t, i, RecordState::Free)?;
        }
        if !maps.is_empty() {
            self.map_names = None;
        }
        Ok(out)
    }

    /// Free and total bytes of the code arena and the scratchpad (needs the lease).
    pub fn arena_usage(&mut self) -> Result<[(u64, u64); 2]> {
        self.begin()?;
        let a = self.alloc.as_ref().expect("loaded");
        Ok([
            (a.free_bytes(Arena::Code), a.arena_bytes(Arena::Code)),
            (a.free_bytes(Arena::Scratch), a.arena_bytes(Arena::Scratch)),
        ])
    }
}

impl Drop for CodeFlow {
    fn drop(&mut self) {
        let _ = self.lease.release(self.t.as_ref());
    }
}

fn held_versions(
    t: &dyn Transport,
    table: &AllocTable,
    hook: &HookInfo,
) -> Result<Vec<HeldVersion>> {
    let active = slot::read_active(t, hook.slot_offset)?;
    let mut v: Vec<HeldVersion> = table
        .records()
        .filter(|(_, r)| {
            r.arena == Arena::Code && r.hook == hook.index && r.state == RecordState::Held
        })
        .map(|(_, r)| HeldVersion {
            version: r.version,
            active: active_version(active) == r.version
                && active_entry_offset(active) as u64 == r.entry,
            code_offset: r.offset,
            code_len: r.size,
            insns: r.insn_count,
            created_ms: r.created_ms,
            hash_prefix: hex(&r.hash[..8]),
            map_ids: r.maps.clone(),
            tier: r.tier,
        })
        .collect();
    v.sort_by_key(|b| std::cmp::Reverse(b.version));
    Ok(v)
}

fn list_or_none(v: &[&str]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// Runs one deploy stage under `observer`: started, then finished with its product (made
/// by `done`) and duration, or failed.
fn observe<T>(
    observer: &mut dyn DeployObserver,
    stage: DeployStage,
    done: impl FnOnce(&T) -> StageDone<'_>,
    run: impl FnOnce() -> Result<T>,
) -> Result<T> {
    observer.started(stage);
    let t = Instant::now();
    match run() {
        Ok(product) => {
            observer.finished(done(&product), t.elapsed());
            Ok(product)
        }
        Err(e) => {
            observer.failed(stage, &e);
            Err(e)
        }
    }
}
