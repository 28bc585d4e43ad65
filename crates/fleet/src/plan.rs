//! The broadcast plan: which nodes, which hooks, which programs, in which release order.
//!
//! ```yaml
//! nodes:
//!   - {name: a, address: "shm:/dev/shm/rdx-a"}
//!   - {name: b, address: "shm:/dev/shm/rdx-b"}
//! hooks:
//!   - {name: on_request, depends_on: []}
//! updates:
//!   - {hook: on_request, object: stamp_v2.o, program: stamp_v2, class: default}
//!     # nodes: [a]     (default: every node)
//! ```
//!
//! Object paths are relative to the plan file. [`Plan::validate`] checks everything that
//! needs no node (names, references, cycles); the broadcast checks every node (hook present,
//! class accepts the program) before it writes anything.

use crate::error::{FleetError, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A node the plan updates.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// The name updates refer to it by.
    pub name: String,
    /// Its address (`shm:PATH`, `fabric://...`).
    pub address: String,
}

/// A hook and the hooks it depends on.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HookDeps {
    /// The hook's name.
    pub name: String,
    /// Hooks whose new version this hook's new version relies on: their holds are released
    /// before this hook's.
    #[serde(default)]
    pub depends_on: Vec<String>,
}

/// One program to publish in a hook on some nodes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UpdateSpec {
    /// The hook.
    pub hook: String,
    /// eBPF object file (relative to the plan file).
    pub object: PathBuf,
    /// Program in the object (by function or section name); default: its only program.
    #[serde(default)]
    pub program: Option<String>,
    /// Class of the hook's EIM spec; default: the only class bound to the hook.
    #[serde(default)]
    pub class: Option<String>,
    /// Nodes to update; default: every node of the plan.
    #[serde(default)]
    pub nodes: Option<Vec<String>>,
}

impl UpdateSpec {
    /// `hook:program` (or the object's path when no program is named), for messages.
    pub fn label(&self) -> String {
        format!(
            "{}:{}",
            self.hook,
            self.program
                .clone()
                .unwrap_or_else(|| self.object.display().to_string())
        )
    }
}

/// One hook on one node.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HookRef {
    /// The node's name in the plan.
    pub node: String,
    /// The hook's name.
    pub hook: String,
}

impl std::fmt::Display for HookRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.node, self.hook)
    }
}

/// A request path through several nodes: every request that runs `entry` later runs
/// `exit` (a chain A -> B -> C -> D has entry A's hook and exit D's). The broadcast holds
/// the entry first and waits until the exit's run counter has caught up with the entry's
/// (read remotely) before it holds anything else, so no request in flight meets the old
/// version at one hop and the new one at the next.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Flow {
    /// The hook every request of the flow runs first.
    pub entry: HookRef,
    /// The hook every request of the flow runs last.
    pub exit: HookRef,
}

/// A broadcast plan (see the module doc).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The nodes.
    pub nodes: Vec<NodeSpec>,
    /// Hooks with dependencies; hooks not listed depend on nothing.
    #[serde(default)]
    pub hooks: Vec<HookDeps>,
    /// The programs to publish.
    pub updates: Vec<UpdateSpec>,
    /// Request paths to drain inside the bubble (see [`Flow`]).
    #[serde(default)]
    pub flows: Vec<Flow>,
    /// Directory object paths are relative to (the plan file's).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

impl Plan {
    /// Parses and validates a plan; object paths are relative to `base_dir`.
    pub fn from_yaml(text: &str, base_dir: &Path) -> Result<Plan> {
        let mut plan: Plan = serde_yaml_ng::from_str(text).map_err(|e| FleetError::PlanParse {
            path: base_dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        plan.base_dir = base_dir.to_path_buf();
        Ok(plan)
    }

    /// Reads, parses and validates the plan file at `path`.
    pub fn load(path: &Path) -> Result<Plan> {
        let text = std::fs::read_to_string(path).map_err(|e| FleetError::PlanParse {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new(".")).to_path_buf();
        Plan::from_yaml(&text, &base).map_err(|e| match e {
            FleetError::PlanParse { reason, .. } => FleetError::PlanParse {
                path: path.to_path_buf(),
                reason,
            },
            e => e,
        })
    }

    /// Where `u`'s object file is: its path as given if absolute, else relative to the plan.
    pub fn object_path(&self, u: &UpdateSpec) -> PathBuf {
        if u.object.is_absolute() {
            u.object.clone()
        } else {
            self.base_dir.join(&u.object)
        }
    }

    /// Nodes an update applies to, in plan order.
    pub fn nodes_of<'a>(&'a self, u: &'a UpdateSpec) -> impl Iterator<Item = &'a NodeSpec> {
        self.nodes.iter().filter(move |n| match &u.nodes {
            None => true,
            Some(list) => list.contains(&n.name),
        })
    }

    /// Checks names and references and returns the hooks' release order: groups of hooks
    /// (levels) whose holds are released together, dependencies first.
    pub fn validate(&self) -> Result<Vec<Vec<String>>> {
        if self.nodes.is_empty() {
            return Err(FleetError::PlanInvalid("no nodes".into()));
        }
        if self.updates.is_empty() {
            return Err(FleetError::PlanInvalid("no updates".into()));
        }
        let mut names = BTreeSet::new();
        for n in &self.nodes {
            if n.name.is_empty() || n.address.is_empty() {
                return Err(FleetError::PlanInvalid(format!(
                    "node {:?}: name and address must not be empty",
                    n.name
                )));
            }
            if !names.insert(n.name.as_str()) {
                return Err(FleetError::PlanInvalid(format!(
                    "node {:?} appears twice",
                    n.name
                )));
            }
        }
        let mut deps: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for h in &self.hooks {
            if deps.insert(h.name.as_str(), vec![]).is_some() {
                return Err(FleetError::PlanInvalid(format!(
                    "hook {:?} appears twice in hooks",
                    h.name
                )));
            }
        }
        let mut targets = BTreeSet::new();
        for u in &self.updates {
            deps.entry(u.hook.as_str()).or_default();
            if let Some(list) = &u.nodes {
                if list.is_empty() {
                    return Err(FleetError::PlanInvalid(format!(
                        "update {} lists no nodes",
                        u.label()
                    )));
                }
                for n in list {
                    if !names.contains(n.as_str()) {
                        return Err(FleetError::UnknownNode {
                            update: u.label(),
                            node: n.clone(),
                        });
                    }
                }
            }
            for n in self.nodes_of(u) {
                if !targets.insert((n.name.as_str(), u.hook.as_str())) {
                    return Err(FleetError::PlanInvalid(format!(
                        "hook {} on node {} is updated twice",
                        u.hook, n.name
                    )));
                }
            }
        }
        for (i, f) in self.flows.iter().enumerate() {
            for (what, r) in [("entry", &f.entry), ("exit", &f.exit)] {
                if !names.contains(r.node.as_str()) {
                    return Err(FleetError::UnknownNode {
                        update: format!("flow {i} {what}"),
                        node: r.node.clone(),
                    });
                }
            }
            if !targets.contains(&(f.entry.node.as_str(), f.entry.hook.as_str())) {
                return Err(FleetError::PlanInvalid(format!(
                    "flow {i}: entry {} is not updated by the plan (only updated hooks are held)",
                    f.entry
                )));
            }
            if f.entry == f.exit {
                return Err(FleetError::PlanInvalid(format!(
                    "flow {i}: entry and exit are the same hook ({})",
                    f.entry
                )));
            }
        }
        for h in &self.hooks {
            for d in &h.depends_on {
                if !deps.contains_key(d.as_str()) {
                    return Err(FleetError::UnknownHook {
                        what: format!("dependency of hook {}", h.name),
                        hook: d.clone(),
                    });
                }
                deps.get_mut(h.name.as_str()).expect("inserted").push(d);
            }
        }
        release_levels(&deps)
    }
}

/// Kahn's algorithm by levels; on a cycle, names one.
fn release_levels(deps: &BTreeMap<&str, Vec<&str>>) -> Result<Vec<Vec<String>>> {
    let mut done: BTreeSet<&str> = BTreeSet::new();
    let mut levels = Vec::new();
    while done.len() < deps.len() {
        let level: Vec<&str> = deps
            .iter()
            .filter(|(h, ds)| !done.contains(*h) && ds.iter().all(|d| done.contains(d)))
            .map(|(h, _)| *h)
            .collect();
        if level.is_empty() {
            return Err(FleetError::Cycle(find_cycle(deps, &done)));
        }
        done.extend(level.iter().copied());
        levels.push(level.into_iter().map(String::from).collect());
    }
    Ok(levels)
}

fn find_cycle(deps: &BTreeMap<&str, Vec<&str>>, done: &BTreeSet<&str>) -> Vec<String> {
    // Every remaining hook has an unfinished dependency: walk them until one repeats.
    let start = deps.keys().find(|h| !done.contains(*h)).expect("remaining");
    let mut path = vec![*start];
    loop {
        let cur = *path.last().expect("nonempty");
        let next = deps[cur]
            .iter()
            .find(|d| !done.contains(*d))
            .expect("blocked hook has an unfinished dependency");
        if let Some(pos) = path.iter().position(|p| p == next) {
            let mut cycle: Vec<String> = path[pos..].iter().map(|s| s.to_string()).collect();
            cycle.push(next.to_string());
            return cycle;
        }
        path.push(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn plan(text: &str) -> Plan {
        Plan::from_yaml(text, Path::new(".")).unwrap()
    }

    const BASE: &str = "
nodes:
  - {name: a, address: 'shm:/dev/shm/a'}
  - {name: b, address: 'shm:/dev/shm/b'}
";

    #[test]
    fn release_order_follows_dependencies() {
        let p = plan(&format!(
            "{BASE}
hooks:
  - {{name: front, depends_on: [back]}}
  - {{name: back, depends_on: [db]}}
  - {{name: db}}
updates:
  - {{hook: front, object: x.o}}
  - {{hook: back, object: x.o}}
  - {{hook: db, object: x.o, nodes: [b]}}
"
        ));
        assert_eq!(
            p.validate().unwrap(),
            vec![
                vec!["db".to_string()],
                vec!["back".into()],
                vec!["front".into()]
            ]
        );
    }

    #[test]
    fn a_cycle_is_refused_and_named() {
        let p = plan(&format!(
            "{BASE}
hooks:
  - {{name: x, depends_on: [y]}}
  - {{name: y, depends_on: [x]}}
updates:
  - {{hook: x, object: x.o}}
"
        ));
        match p.validate() {
            Err(FleetError::Cycle(c)) => {
                assert_eq!(c.first(), c.last());
                assert!(c.contains(&"x".to_string()) && c.contains(&"y".to_string()));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unknown_node_or_hook_is_refused() {
        let p = plan(&format!(
            "{BASE}
updates:
  - {{hook: x, object: x.o, nodes: [a, zz]}}
"
        ));
        assert!(matches!(p.validate(), Err(FleetError::UnknownNode { node, .. }) if node == "zz"));
        let p = plan(&format!(
            "{BASE}
hooks:
  - {{name: x, depends_on: [nope]}}
updates:
  - {{hook: x, object: x.o}}
"
        ));
        assert!(
            matches!(p.validate(), Err(FleetError::UnknownHook { hook, .. }) if hook == "nope")
        );
    }

    #[test]
    fn a_flow_must_enter_at_an_updated_hook_on_a_known_node() {
        let ok = plan(&format!(
            "{BASE}
updates:
  - {{hook: x, object: x.o}}
flows:
  - {{entry: {{node: a, hook: x}}, exit: {{node: b, hook: x}}}}
"
        ));
        assert!(ok.validate().is_ok());
        let p = plan(&format!(
            "{BASE}
updates:
  - {{hook: x, object: x.o, nodes: [b]}}
flows:
  - {{entry: {{node: a, hook: x}}, exit: {{node: b, hook: x}}}}
"
        ));
        assert!(
            matches!(p.validate(), Err(FleetError::PlanInvalid(r)) if r.contains("a/x is not updated"))
        );
        let p = plan(&format!(
            "{BASE}
updates:
  - {{hook: x, object: x.o}}
flows:
  - {{entry: {{node: a, hook: x}}, exit: {{node: zz, hook: x}}}}
"
        ));
        assert!(matches!(p.validate(), Err(FleetError::UnknownNode { node, .. }) if node == "zz"));
    }

    #[test]
    fn bad_yaml_and_unknown_fields_are_refused() {
        assert!(Plan::from_yaml("nodes: [", Path::new(".")).is_err());
        assert!(Plan::from_yaml("nodes: []\nupdates: []\nsurprise: 1\n", Path::new(".")).is_err());
        let p = plan("nodes: []\nupdates: []\n");
        assert!(matches!(p.validate(), Err(FleetError::PlanInvalid(_))));
    }

    proptest! {
        /// Random dependency graphs: either an order in which every hook comes after its
        /// dependencies, or a cycle that really is one.
        #[test]
        fn levels_respect_every_edge(edges in proptest::collection::vec((0u8..6, 0u8..6), 0..12)) {
            let mut deps: BTreeMap<String, Vec<String>> = (0..6).map(|i| (format!("h{i}"), vec![])).collect();
            for (a, b) in &edges {
                deps.get_mut(&format!("h{a}")).unwrap().push(format!("h{b}"));
            }
            let borrowed: BTreeMap<&str, Vec<&str>> = deps.iter()
                .map(|(k, v)| (k.as_str(), v.iter().map(|s| s.as_str()).collect())).collect();
            match release_levels(&borrowed) {
                Ok(levels) => {
                    let pos: BTreeMap<&str, usize> = levels.iter().enumerate()
                        .flat_map(|(i, l)| l.iter().map(move |h| (h.as_str(), i))).collect();
                    prop_assert_eq!(pos.len(), 6);
                    for (a, b) in &edges {
                        let (before, after) = (format!("h{b}"), format!("h{a}"));
                        prop_assert!(pos[before.as_str()] < pos[after.as_str()]);
                    }
                }
                Err(FleetError::Cycle(c)) => {
                    prop_assert_eq!(c.first(), c.last());
                    for w in c.windows(2) {
                        prop_assert!(deps[&w[0]].contains(&w[1]));
                    }
                }
                Err(e) => prop_assert!(false, "{e}"),
            }
        }
    }
}
