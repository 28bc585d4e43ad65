//! RDMA-aware access control for rdx.
//!
//! This crate owns everything about the ACL that does not need a running data plane:
//!
//! - [`policy`]: the policy language (parse, normalise, check with warnings);
//! - [`packet`]: zero-copy parsing of RoCEv2 and native InfiniBand packets, including CM MADs;
//! - [`cm`]: the per-connection state that gives RTU/REJ/DREQ/DREP their queue pairs;
//! - [`rule`]: the fixed-size `#[repr(C)]` rule layout that lives in XState;
//! - [`compile`]: policies to rules;
//! - [`classify`]: the linear-scan oracle, the cut-tree and tuple-space classifiers, the hot-rule tier and
//!   the hot-flow table in front of it;
//! - [`engine`]: the per-packet pipeline (parse, CM state, classify, count);
//! - [`enforce`]: the contract with the eBPF enforcement program `bpf/acl/enforce.c` (its
//!   context, its rule section's image, its counters);
//! - [`pcap`] and [`api`]: what `rdx acl check|compile|test` call;
//! - [`craft`] and [`synth`]: well-formed packets and synthetic rule sets and traffic for
//!   tests, benchmarks and fuzz seeds.
//!
//! The language, field semantics, CM state, rule layout and measured numbers are described in
//! `docs/acl.md`.
//!
//! It must not load programs, touch a region or talk to the kernel: deployment belongs to the
//! control plane, which consumes the rule image produced here.
//!
//! ```
//! let set = rdx_acl::policy::parse(
//!     "policy p { predicate = match(opcode in {CAS, FAA}) action = deny } apply(p)",
//! ).unwrap();
//! let rules = rdx_acl::compile::compile(&set).unwrap();
//! assert_eq!(rules.rules.len(), 1);
//! ```

pub mod api;
pub mod classify;
pub mod cm;
pub mod compile;
pub mod craft;
pub mod enforce;
pub mod engine;
pub mod field;
pub mod packet;
pub mod pcap;
pub mod policy;
pub mod rule;
pub mod set;
pub mod synth;
