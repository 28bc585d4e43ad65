//! The control-plane side of the gateway's tests and benchmark: what `rdx acl apply` does,
//! through the CodeFlow API, from the test process.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use rdx_acl::compile::RuleSet;
use rdx_acl::enforce::{self, Stats};
use rdx_bpf::program::Object;
use rdx_control::codeflow::{Compiled, Published};
use rdx_control::{create_codeflow, CodeFlow, ExtSpec, Extension};
use rdx_transport::xstate;

/// A control plane attached to one gateway, with the enforcement program verified and
/// compiled once (the code does not depend on the policy; only its rule section does).
pub struct Applier {
    pub cf: CodeFlow,
    object: Object,
    compiled: Compiled,
    section_size: usize,
}

/// The enforcement program as clang compiled it.
pub fn enforcement_object() -> Object {
    rdx_bpf::loader::load(&rdx_testdata::object("acl/enforce")).expect("enforce.o loads")
}

impl Applier {
    pub fn attach(region: &std::path::Path) -> Applier {
        let cf = create_codeflow(&format!("shm:{}", region.display()), ExtSpec::default())
            .expect("attach");
        Applier::new(cf)
    }

    pub fn new(cf: CodeFlow) -> Applier {
        let object = enforcement_object();
        let ext = Extension::from_object(&object, None).unwrap();
        let checked = cf
            .validate_code(&ext, enforce::HOOK, None)
            .expect("the verifier accepts bpf/acl/enforce.c");
        let compiled = cf.jit_compile_code(&ext, &checked, None).unwrap();
        let section_size = object
            .maps
            .iter()
            .find(|m| m.name == enforce::RULES_SECTION)
            .expect("rule section")
            .value_size as usize;
        Applier {
            cf,
            object,
            compiled,
            section_size,
        }
    }

    /// The compiled program (the same for every policy).
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// The program with `rules` in its rule section.
    pub fn extension(&self, rules: &RuleSet, generation: u64) -> Extension {
        let mut object = self.object.clone();
        let image = enforce::section_image(rules, generation, self.section_size).unwrap();
        let m = object
            .maps
            .iter_mut()
            .find(|m| m.name == enforce::RULES_SECTION)
            .unwrap();
        m.initial_value = Some(image);
        Extension::from_object(&object, None).unwrap()
    }

    /// Deploys `rules` as a new version of the hook: writes code and rule section, then one
    /// compare-and-swap. Returns the publication and the time of the write and the swap (the
    /// image is built before the clock starts).
    pub fn apply(&mut self, rules: &RuleSet, generation: u64) -> (Published, Duration) {
        let ext = self.extension(rules, generation);
        let t = Instant::now();
        let prepared = self
            .cf
            .prepare_prog(enforce::HOOK, &ext, &self.compiled)
            .unwrap();
        let published = self.cf.tx(vec![prepared]).unwrap().remove(0);
        (published, t.elapsed())
    }

    /// The program's counters, summed over the host's threads.
    pub fn stats(&self) -> Stats {
        let t = self.cf.transport();
        let m = xstate::find(t, &self.cf.view().info, enforce::STATS_MAP).unwrap();
        let mut buf = vec![0u8; m.map.lookup_len()];
        assert!(xstate::lookup(t, &m.map, &0u32.to_le_bytes(), &mut buf).unwrap());
        let mut total = Stats::default();
        for copy in buf.chunks(m.map.value_size as usize) {
            total.add(&Stats::from_bytes(copy).unwrap());
        }
        total
    }
}
