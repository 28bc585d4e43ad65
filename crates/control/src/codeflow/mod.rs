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
//! The code follows the stages: besides `extension.rs` (the program), `verify.rs`, `compile.rs`,
//! `prepare.rs` (with `maps.rs` and `link.rs`, which it uses) and `publish.rs` are the four
//! stages of a deploy, `deploy.rs` runs them as one operation under a [`DeployObserver`],
//! `history.rs` records what was published, and `reclaim.rs` frees what no thread runs. This
//! file holds the handle itself: attaching, the lease and recovery after taking it.
//!
//! A CodeFlow is one control plane's handle on one node: it holds no lock but the node's
//! lease, and nothing in it is shared between nodes, so a fleet-wide operation runs one
//! CodeFlow per node, in parallel and batched as it likes.
//!
//! The JIT tier ([`AttachOptions::tier`], [`CodeFlow::set_tier`]) decides which code generator
//! builds what [`CodeFlow::jit_compile_code`] (and so [`CodeFlow::deploy`]) deploys; each
//! version's code record in the node's region remembers it ([`HeldVersion::tier`]).
//!
//! ```no_run
//! use rdx_control::{create_codeflow, Extension, AttachOptions};
//! let bytes = std::fs::read("count.o")?;
//! let object = rdx_bpf::loader::load(&bytes)?;
//! let ext = Extension::from_object(&object, None)?;
//! let mut cf = create_codeflow("shm:/dev/shm/rdx-kv-1234", AttachOptions::default())?;
//! let deployed = cf.deploy("on_get", &ext, None, None)?;
//! println!("hook on_get now runs version {}", deployed.version);
//! cf.rollback("on_get", None)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod compile;
mod deploy;
mod extension;
mod history;
mod link;
mod maps;
mod prepare;
mod publish;
mod reclaim;
mod verify;

pub use compile::Compiled;
pub use deploy::{DeployObserver, DeployStage, DeployTimings, StageDone};
pub use extension::{hex, Extension};
pub use prepare::Prepared;
pub use publish::Published;
pub use reclaim::{HeldVersion, Reclaimed};
pub use verify::Validated;

use crate::alloc::{AllocTable, Arena, Record, RecordState};
use crate::error::{ControlError, Result};
use crate::lease::{self, Lease};
use crate::node::{self, HookInfo, NodeView};
use crate::registry::Registry;
use crate::tier::Tier;
use rdx_region::layout::*;
use rdx_transport::local::LocalRegion;
use rdx_transport::slot;
use rdx_transport::xstate::MapSpec;
use rdx_transport::Transport;
use rdx_verifier::EimSpec;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::Duration;

/// How a control plane attaches to a node ([`create_codeflow`]): the architecture it compiles
/// for, its lease, how long reclamation waits, and the JIT tier of its generic builds.
#[derive(Clone, Debug)]
pub struct AttachOptions {
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

impl Default for AttachOptions {
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

/// Attaches to the node at `address` (`shm:/dev/shm/rdx-...`): reads and checks its header,
/// EIM spec and context table. Takes no lease yet.
pub fn create_codeflow(address: &str, spec: AttachOptions) -> Result<CodeFlow> {
    let (t, mapped) = node::connect_mapped(address, node::Access::ReadWrite)?;
    let mut cf = CodeFlow::attach(t, address, spec)?;
    cf.mapped = mapped;
    Ok(cf)
}

/// [`create_codeflow`] for commands that only read the node (`rdx node add`, `rdx node
/// show`): a shared-memory region is mapped read-only, so every operation that would write
/// (lease, deploy, rollback) fails with a read-only error instead of touching the node.
pub fn create_codeflow_read_only(address: &str, spec: AttachOptions) -> Result<CodeFlow> {
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

impl CodeFlow {
    /// Attaches through an already open transport.
    pub fn attach(t: Box<dyn Transport>, address: &str, spec: AttachOptions) -> Result<CodeFlow> {
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

    /// The JIT tier [`CodeFlow::jit_compile_code`] compiles with.
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// Compiles later generic builds with `tier` (elite builds need [`Tier::Optimizing`]).
    pub fn set_tier(&mut self, tier: Tier) {
        self.tier = tier;
    }

    /// The node's address as given.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// What attaching established (header, exports, EIM spec).
    pub fn view(&self) -> &NodeView {
        &self.view
    }

    /// The transport to the node's region.
    pub fn transport(&self) -> &dyn Transport {
        self.t.as_ref()
    }

    /// The node's EIM spec, if it publishes one.
    pub fn eim(&self) -> Option<&EimSpec> {
        self.eim.as_ref()
    }

    /// The architecture of the node's code.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// This control plane's lease holder id.
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
    /// unless a hook publishes them (then the publish happened and they are held). A held
    /// hook is inside a collective update whose recovery may still publish its prepared
    /// version: that version (and its maps) stays pending until the hold is settled.
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
        let in_update = |r: &Record| {
            r.arena == Arena::Code && live_words.get(&r.hook).is_some_and(|w| slot::is_held(*w))
        };
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
        let kept: Vec<u16> = pending
            .iter()
            .filter(|(_, r)| in_update(r))
            .flat_map(|(_, r)| r.maps.clone())
            .collect();
        let t = self.t.as_ref();
        let info = self.view.info.clone();
        let table = self.alloc.as_mut().expect("loaded");
        for (i, r) in pending {
            let kept =
                in_update(&r) || (r.arena == Arena::Scratch && kept.contains(&(r.entry as u16)));
            if kept {
                continue;
            }
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
}

impl Drop for CodeFlow {
    fn drop(&mut self) {
        let _ = self.lease.release(self.t.as_ref());
    }
}
