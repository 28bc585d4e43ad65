//! The control-plane side of the gateway's tests and benchmark: what `rdx acl apply` does,
//! through the CodeFlow API, from the test process, plus a shadow copy of the classifier so
//! that an update writes only what changed.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use rdx_acl::classify::image::{Dirty, TreeImage};
use rdx_acl::classify::CutTree;
use rdx_acl::compile::RuleSet;
use rdx_acl::enforce::{self, Stats};
use rdx_bpf::program::Object;
use rdx_control::codeflow::{Compiled, Published};
use rdx_control::{create_codeflow, AttachOptions, CodeFlow, Extension};
use rdx_transport::xstate;

/// The native tree and its image as the newest published version uses them.
struct Shadow {
    rules: RuleSet,
    tree: CutTree,
    image: TreeImage,
    /// The bank the newest published version reads.
    bank: u32,
    /// What the other bank lacks of `image`.
    pending: Dirty,
}

/// What one apply cost.
#[derive(Clone, Copy, Debug, Default)]
pub struct ApplyTimes {
    /// Native tree and image brought up to date (in place, or built).
    pub shadow: Duration,
    /// Of `shadow`, for an in-place update: the native tree's part (`CutTree::replace_rules`;
    /// the rest is the image's, `TreeImage::apply`).
    pub tree: Duration,
    /// Records written into the inactive bank.
    pub write: Duration,
    /// Code and control block written, then the publishing compare-and-swap.
    pub publish: Duration,
    /// Waiting on the node's epochs until no thread can run the replaced version, so its
    /// bank may be written next time.
    pub release: Duration,
    /// Bytes written into the bank.
    pub bytes: usize,
    /// After the release: the released bank brought up to date (off the update's path).
    pub catch_up: Duration,
    /// The update was applied in place (not a full build).
    pub in_place: bool,
}

impl ApplyTimes {
    /// From the decision to the new rule set being visible.
    pub fn visible(&self) -> Duration {
        self.shadow + self.write + self.publish
    }
}

/// A control plane attached to one gateway, with the enforcement program verified and
/// compiled once (the code does not depend on the policy; only its control block does).
pub struct Applier {
    pub cf: CodeFlow,
    object: Object,
    compiled: Compiled,
    section_size: usize,
    shadow: Option<Shadow>,
    /// Hot-flow tag of the next version.
    tag: u64,
}

/// The enforcement program as clang compiled it, or the object file named by
/// `ACL_ENFORCE_OBJECT` (the benchmark measures another build of the program against this
/// one that way; its maps must have this build's layout).
pub fn enforcement_object() -> Object {
    let bytes = match std::env::var_os("ACL_ENFORCE_OBJECT") {
        Some(path) => std::fs::read(&path).expect("ACL_ENFORCE_OBJECT is readable"),
        None => rdx_testdata::object("acl/enforce"),
    };
    rdx_bpf::loader::load(&bytes).expect("enforce.o loads")
}

impl Applier {
    pub fn attach(region: &std::path::Path) -> Applier {
        let cf = create_codeflow(
            &format!("shm:{}", region.display()),
            AttachOptions::default(),
        )
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
            .expect("control section")
            .value_size as usize;
        let tag = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        Applier {
            cf,
            object,
            compiled,
            section_size,
            shadow: None,
            tag,
        }
    }

    /// The compiled program (the same for every policy).
    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    /// The program with `control` as its control block.
    fn extension(&self, control: Vec<u8>) -> Extension {
        let mut object = self.object.clone();
        let m = object
            .maps
            .iter_mut()
            .find(|m| m.name == enforce::RULES_SECTION)
            .unwrap();
        m.initial_value = Some(control);
        Extension::from_object(&object, None).unwrap()
    }

    /// Deploys `rules` as a new version of the hook. See [`Applier::apply_timed`].
    pub fn apply(&mut self, rules: &RuleSet, generation: u64) -> (Published, Duration) {
        let (p, t) = self.apply_timed(rules, generation);
        (p, t.visible())
    }

    /// Deploys `rules`: in place (see [`Applier::update_timed`]) when the set has the length
    /// and default of the previous one and few rules changed, else built anew and written
    /// whole into the inactive bank; then code and control block naming that bank, one
    /// publishing compare-and-swap, and the release of the replaced version.
    pub fn apply_timed(&mut self, rules: &RuleSet, generation: u64) -> (Published, ApplyTimes) {
        let t = Instant::now();
        if let Some(s) = &self.shadow {
            if let Some(updates) = enforce::rule_updates(&s.rules, rules) {
                if updates.len() <= rules.rules.len() / 4 + 16 {
                    let diff = t.elapsed();
                    if let Some((p, mut times)) = self.update_timed(&updates, generation) {
                        times.shadow += diff;
                        return (p, times);
                    }
                }
            }
        }
        let (tree, image) = enforce::image(rules).expect("the rule set fits the program");
        let bank = self.shadow.as_ref().map_or(0, |s| 1 - s.bank);
        self.shadow = Some(Shadow {
            rules: rules.clone(),
            tree,
            image,
            bank,
            pending: Dirty::everything(),
        });
        let shadow = t.elapsed();
        let mut times = ApplyTimes {
            shadow,
            ..ApplyTimes::default()
        };
        let p = self.publish(&Dirty::everything(), generation, &mut times);
        (p, times)
    }

    /// Replaces rules in place (`rule.priority` names the slot) in the shadow tree and image
    /// and publishes them: only the records the change touched are written into the inactive
    /// bank (which the previous apply already caught up). `None` (nothing published) when
    /// there is no shadow copy yet or the image outgrew its room (apply the whole set then).
    pub fn update_timed(
        &mut self,
        updates: &[rdx_acl::rule::Rule],
        generation: u64,
    ) -> Option<(Published, ApplyTimes)> {
        let t = Instant::now();
        let s = self.shadow.as_mut()?;
        s.tree.replace_rules(updates);
        let tree = t.elapsed();
        let dirty = match s.image.apply(&s.tree, updates) {
            Ok(d) => d,
            Err(_) => {
                // The tree is updated but the image is not: start over with a full build.
                self.shadow = None;
                return None;
            }
        };
        for u in updates {
            if let Some(r) = s.rules.rules.get_mut(u.priority as usize) {
                *r = *u;
            }
        }
        s.bank = 1 - s.bank;
        let mut write = s.pending.clone();
        write.merge(&dirty);
        s.pending = dirty;
        let mut times = ApplyTimes {
            shadow: t.elapsed(),
            tree,
            in_place: true,
            ..ApplyTimes::default()
        };
        let p = self.publish(&write, generation, &mut times);
        Some((p, times))
    }

    /// Writes `dirty` into the shadow's bank, publishes a version naming it, releases the
    /// replaced version and then catches the released bank up with the shadow's pending
    /// records, so the next update writes only its own.
    fn publish(&mut self, dirty: &Dirty, generation: u64, times: &mut ApplyTimes) -> Published {
        let s = self.shadow.as_ref().unwrap();
        let bank = s.bank;
        self.tag += 1;
        let control =
            enforce::control_section(&s.image, bank, generation, self.tag, self.section_size)
                .unwrap();
        let ext = self.extension(control);
        // The maps exist once the version is prepared (created on the first deploy), and
        // nothing reads the inactive bank until the version is published.
        let t = Instant::now();
        let prepared = self
            .cf
            .prepare_prog(enforce::HOOK, &ext, &self.compiled)
            .unwrap();
        let prepare = t.elapsed();
        let t = Instant::now();
        let writes = enforce::bank_writes(&s.image, dirty, bank);
        times.bytes = write_banks(&self.cf, &prepared.map_ids, &writes);
        times.write = t.elapsed();
        let map_ids = prepared.map_ids.clone();
        let t = Instant::now();
        let published = self.cf.tx(vec![prepared]).unwrap().remove(0);
        times.publish = prepare + t.elapsed();
        let t = Instant::now();
        self.cf.reclaim(0).expect("old versions released");
        times.release = t.elapsed();
        let t = Instant::now();
        let s = self.shadow.as_mut().unwrap();
        let writes = enforce::bank_writes(&s.image, &s.pending, 1 - bank);
        write_banks(&self.cf, &map_ids, &writes);
        s.pending = Dirty::default();
        times.catch_up = t.elapsed();
        published
    }

    /// Publishes `rules` into bank `bank` as the tests of inconsistent images need it: only
    /// the bank writes `keep` accepts are made, and `patch` edits the control block first.
    /// No shadow copy is kept (the next `apply` builds anew).
    pub fn deploy_raw(
        &mut self,
        rules: &RuleSet,
        bank: u32,
        generation: u64,
        keep: impl Fn(&enforce::BankWrite<'_>) -> bool,
        patch: impl FnOnce(&mut Vec<u8>),
    ) -> Published {
        self.shadow = None;
        // Built without `enforce::image`'s budget check: these tests deploy what a control
        // plane would refuse.
        let tree = CutTree::new(rules.rules.clone());
        let image = TreeImage::build(&tree, rules, enforce::BANK).expect("the image fits a bank");
        self.tag += 1;
        let mut control =
            enforce::control_section(&image, bank, generation, self.tag, self.section_size)
                .unwrap();
        patch(&mut control);
        let ext = self.extension(control);
        let prepared = self
            .cf
            .prepare_prog(enforce::HOOK, &ext, &self.compiled)
            .unwrap();
        let writes: Vec<_> = enforce::bank_writes(&image, &Dirty::everything(), bank)
            .into_iter()
            .filter(|w| keep(w))
            .collect();
        write_banks(&self.cf, &prepared.map_ids, &writes);
        let published = self.cf.tx(vec![prepared]).unwrap().remove(0);
        self.cf.reclaim(0).expect("old versions released");
        published
    }

    /// Runs of the hook that spent their budget (as `rdx acl stats` reports them).
    pub fn budget_exhausted(&self) -> u64 {
        let hook = self.cf.view().hook(enforce::HOOK).unwrap();
        let s =
            rdx_control::node::hook_status(self.cf.transport(), &self.cf.view().info, hook.index)
                .unwrap();
        s.failures - s.deopts
    }

    /// The program's counters, summed over the host's threads: the first
    /// [`enforce::STATS_SIZE`] bytes of each thread's scratch value.
    pub fn stats(&self) -> Stats {
        let t = self.cf.transport();
        let m = xstate::find(t, &self.cf.view().info, enforce::STATS_MAP).unwrap();
        let mut total = Stats::default();
        let mut buf = [0u8; enforce::STATS_SIZE];
        for copy in 0..m.map.copies {
            let at = xstate::lookup_ref(t, &m.map, &0u32.to_le_bytes(), copy)
                .unwrap()
                .expect("the scratch value");
            t.read(at, &mut buf).unwrap();
            total.add(&Stats::from_bytes(&buf).unwrap());
        }
        total
    }
}

/// Copies `writes` into the version's maps (straight into their data: the bank is not read
/// by any published version). Returns the bytes written.
pub fn write_banks(cf: &CodeFlow, map_ids: &[u32], writes: &[enforce::BankWrite<'_>]) -> usize {
    let t = cf.transport();
    let info = &cf.view().info;
    let maps: Vec<xstate::MapInfo> = map_ids
        .iter()
        .filter_map(|&id| xstate::open(t, info, id).ok())
        .collect();
    let mut bytes = 0;
    for w in writes {
        let m = &maps
            .iter()
            .find(|m| m.name == w.map)
            .unwrap_or_else(|| panic!("map {} of the version", w.map))
            .map;
        assert_eq!(w.bytes.len() % m.value_stride as usize, 0);
        let at = m.data + w.first as u64 * m.value_stride as u64;
        assert!(at + w.bytes.len() as u64 <= m.data + m.max_entries as u64 * m.value_stride as u64);
        t.write(at, w.bytes).unwrap();
        bytes += w.bytes.len();
    }
    bytes
}
