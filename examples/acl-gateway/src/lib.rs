//! acl-gateway: a packet gateway whose per-frame decision is an rdx extension.
//!
//! The gateway creates an rdx region declaring one hook, `acl_packet`, with the context and
//! extension class of `bpf/acl/acl.yaml` ([`rdx_acl::enforce::EIM_SPEC`]), and runs that hook
//! on every frame it receives (from a pcap file or a UDP socket). It never loads, verifies
//! or compiles anything: a control plane deploys `bpf/acl/enforce.c` with a compiled policy
//! in its rule section (`rdx acl apply`), and replaces it, policy and code together, with one
//! compare-and-swap. Until something is deployed, and whenever a run fails (instruction
//! budget spent), the hook returns 1: the gateway fails closed.
//!
//! The library is the host side, for the binary, the tests and the benchmark: [`Gateway`]
//! owns the region and decides frames; [`Tally`] counts decisions; [`capture::Capture`]
//! receives the frames arriving on a network interface (AF_PACKET, `TPACKET_V3` ring).

pub mod capture;

use std::fmt;
use std::path::Path;

use anyhow::{Context as _, Result};
use rdx_acl::enforce::{self, AclContext, Outcome, OutcomeCause};
use rdx_acl::packet::{LinkType, MalformedReason};
use rdx_acl::policy::Action;
use rdx_runtime::{Hook, HookSpec, Runtime};

/// Code arena size: a few dozen versions of the enforcement program.
pub const CODE_SIZE: u64 = 8 << 20;
/// Scratchpad size: the enforcement program's maps hold two banks of its classifier image
/// (about 263 MiB for up to 320K rules, `bpf/acl/acl.yaml`); pages never written stay
/// unbacked.
pub const SCRATCH_SIZE: u64 = 512 << 20;

/// The data plane.
pub struct Gateway {
    rt: Runtime,
}

impl Gateway {
    /// Creates the region (at `path`, or a fresh file under `/dev/shm`) and exposes it.
    pub fn new(path: Option<&Path>) -> Result<Gateway> {
        let mut builder = Runtime::builder()
            .eim_spec(enforce::EIM_SPEC.as_bytes().to_vec())
            .code_size(CODE_SIZE)
            .scratch_size(SCRATCH_SIZE)
            .hook(
                enforce::HOOK,
                HookSpec::for_context::<AclContext>().default_return(1),
            );
        if let Some(p) = path {
            builder = builder.path(p);
        }
        let rt = builder.build().context("creating the region")?;
        rt.register().context("exposing the region")?;
        Ok(Gateway { rt })
    }

    /// The region file a control plane attaches to.
    pub fn region_path(&self) -> &Path {
        self.rt.path()
    }

    /// The runtime (for counters and teardown).
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// The hook handle; keep it per thread (running it does no lookup).
    pub fn hook(&self) -> Result<Hook<'_>> {
        Ok(self.rt.hook(enforce::HOOK)?)
    }

    /// Runs the hook on one frame.
    pub fn decide(hook: &Hook<'_>, link: LinkType, frame: &[u8]) -> Decision {
        let mut ctx = AclContext::for_frame(link, frame);
        let ret = hook.run(&mut ctx);
        Decision {
            outcome: ctx.outcome(ret),
            generation: ctx.generation,
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.rt.teardown(std::time::Duration::from_millis(200));
        let _ = self.rt.unlink();
    }
}

/// What the hook decided for one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The verdict and its cause.
    pub outcome: Outcome,
    /// The generation of the rule image that decided (0 when nothing ran).
    pub generation: u64,
}

/// Decision counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Frames decided.
    pub packets: u64,
    /// Allowed.
    pub allowed: u64,
    /// Denied.
    pub denied: u64,
    /// Decided by a rule.
    pub by_rule: u64,
    /// Decided by the default action.
    pub by_default: u64,
    /// Not RDMA (allowed).
    pub not_rdma: u64,
    /// Malformed (denied), by reason.
    pub malformed: [u64; MalformedReason::COUNT],
    /// Denied without a decision of the program: nothing deployed, or the run failed.
    pub failed_closed: u64,
}

impl Tally {
    /// Counts one decision.
    pub fn count(&mut self, d: &Decision) {
        self.packets += 1;
        match d.outcome.action {
            Action::Allow => self.allowed += 1,
            Action::Deny => self.denied += 1,
        }
        match d.outcome.cause {
            OutcomeCause::Policy { .. } => self.by_rule += 1,
            OutcomeCause::Default => self.by_default += 1,
            OutcomeCause::NotRdma => self.not_rdma += 1,
            OutcomeCause::Malformed(r) => self.malformed[r as usize] += 1,
            OutcomeCause::Unknown(_) => self.failed_closed += 1,
        }
    }

    /// Adds another tally.
    pub fn merge(&mut self, t: &Tally) {
        self.packets += t.packets;
        self.allowed += t.allowed;
        self.denied += t.denied;
        self.by_rule += t.by_rule;
        self.by_default += t.by_default;
        self.not_rdma += t.not_rdma;
        for (a, b) in self.malformed.iter_mut().zip(t.malformed) {
            *a += b;
        }
        self.failed_closed += t.failed_closed;
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "packets {} allowed {} denied {} rule {} default {} not_rdma {} malformed {} failed_closed {}",
            self.packets,
            self.allowed,
            self.denied,
            self.by_rule,
            self.by_default,
            self.not_rdma,
            self.malformed.iter().sum::<u64>(),
            self.failed_closed
        )
    }
}

/// One line per decision, as `rdx acl test` prints them.
pub fn describe(d: &Decision) -> String {
    let action = match d.outcome.action {
        Action::Allow => "allow",
        Action::Deny => "deny",
    };
    let cause = match d.outcome.cause {
        OutcomeCause::Policy { policy, rule } => format!("policy #{policy} (rule {rule})"),
        OutcomeCause::Default => "default".into(),
        OutcomeCause::NotRdma => "not RDMA".into(),
        OutcomeCause::Malformed(r) => format!("malformed: {r}"),
        OutcomeCause::Unknown(_) => "no decision (nothing deployed or the run failed)".into(),
    };
    format!("{action} {cause} gen {:#x}", d.generation)
}
