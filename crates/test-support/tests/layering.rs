//! The workspace's layering, read from `cargo metadata` (offline, no registry): which crates
//! a binary of each plane links. Only normal dependencies count, followed transitively with
//! the features each edge enables; dev- and build-dependencies never reach a shipped binary.
//!
//! - The control plane (the `rdx` binary and the crates it is made of) does not link the
//!   data-plane runtime.
//! - The data plane (the runtime, its C ABI, the fabric server, the host side of
//!   cross-sandbox calls, and the host binaries) links nothing that loads, verifies, compiles
//!   or deploys.
//! - No crate depends on a test fixture (`rdx-testdata`, `rdx-test-support`,
//!   `rdx-test-hosts`, `rdx-kernel`) outside `[dev-dependencies]`.
//!
//! The crossings that still exist are listed in [`KNOWN_CROSSINGS`] with their reason: a
//! path through one of them is allowed, any other path fails, and so does an entry that no
//! longer matches a dependency (the list only shrinks). `docs/README.md` ("Layering") says
//! the same in prose.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Control-plane roots and the features they are built with.
const CONTROL_PLANE: &[(&str, &[&str])] = &[
    ("rdx-cli", &[]),
    ("rdx-control", &[]),
    ("rdx-fleet", &[]),
    ("rdx-deopt", &[]),
    ("rdx-jit", &[]),
    ("rdx-verifier", &[]),
    ("rdx-xcall-control", &[]),
    ("rdx-xcall-plan", &[]),
];

/// The data-plane runtime, which no control-plane root may link.
const RUNTIME: &[&str] = &["rdx-runtime", "rdx-runtime-c"];

/// Data-plane roots (libraries a host links, and host binaries) and their features.
const DATA_PLANE: &[(&str, &[&str])] = &[
    ("rdx-runtime", &[]),
    ("rdx-runtime-c", &["fabric"]),
    ("rdx-fabric", &[]),
    ("rdx-xcall", &[]),
    ("rdx-xcall-plan", &[]),
    ("rdx-test-hosts", &[]),
    ("rdx-kv-host", &[]),
    ("rdx-acl-gateway", &[]),
];

/// What loads, verifies, compiles or deploys extensions: no data-plane root may link it
/// (architecture invariant 1).
const CONTROL_PLANE_CODE: &[&str] = &[
    "rdx-bpf",
    "rdx-verifier",
    "rdx-jit",
    "rdx-control",
    "rdx-fleet",
    "rdx-deopt",
    "rdx-xcall-control",
    "rdx-cli",
];

/// Test fixtures: only ever `[dev-dependencies]` entries.
const FIXTURES: &[&str] = &[
    "rdx-testdata",
    "rdx-test-support",
    "rdx-test-hosts",
    "rdx-kernel",
];

/// Dependencies (from, to) that still cross a line above, and why. A path through one of
/// them is allowed; remove the entry when the dependency is gone.
const KNOWN_CROSSINGS: &[(&str, &str, &str)] = &[(
    "rdx-cache-and-store",
    "rdx-testdata",
    "an example run from a checkout: it deploys programs rdx-testdata compiled",
)];

/// A workspace package as the resolver needs it.
struct Package {
    features: BTreeMap<String, Vec<String>>,
    deps: Vec<Dep>,
}

/// A normal dependency on another workspace package.
struct Dep {
    name: String,
    optional: bool,
    default_features: bool,
    features: Vec<String>,
}

fn workspace() -> BTreeMap<String, Package> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--offline",
            "--format-version",
            "1",
            "--no-deps",
        ])
        .arg("--manifest-path")
        .arg(&root)
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let names: BTreeSet<&str> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    packages
        .iter()
        .map(|p| {
            let features = p["features"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| {
                    let items = v.as_array().unwrap().iter();
                    (
                        k.clone(),
                        items.map(|i| i.as_str().unwrap().into()).collect(),
                    )
                })
                .collect();
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                // Normal dependencies on workspace packages (a dev-dependency of a crate on
                // itself, as xcall has, is not one).
                .filter(|d| d["kind"].is_null() && names.contains(d["name"].as_str().unwrap()))
                .map(|d| Dep {
                    name: d["name"].as_str().unwrap().into(),
                    optional: d["optional"].as_bool().unwrap(),
                    default_features: d["uses_default_features"].as_bool().unwrap(),
                    features: d["features"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|f| f.as_str().unwrap().into())
                        .collect(),
                })
                .collect();
            (
                p["name"].as_str().unwrap().to_string(),
                Package { features, deps },
            )
        })
        .collect()
}

/// `package` built with `features`: its dependency edges, each with the features it enables
/// on the dependency.
fn edges(
    ws: &BTreeMap<String, Package>,
    package: &str,
    features: &BTreeSet<String>,
) -> Vec<(String, BTreeSet<String>)> {
    let p = &ws[package];
    // Close the feature set: features enable features, optional dependencies (`dep:x`, or a
    // name that is no feature), and features of dependencies (`x/f`, `x?/f`).
    let mut enabled: BTreeSet<String> = features.clone();
    if p.features.contains_key("default") {
        enabled.insert("default".into());
    }
    let mut optional_on = BTreeSet::new();
    let mut dep_features: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut todo: Vec<String> = enabled.iter().cloned().collect();
    while let Some(f) = todo.pop() {
        for item in p.features.get(&f).into_iter().flatten() {
            if let Some(dep) = item.strip_prefix("dep:") {
                optional_on.insert(dep.to_string());
            } else if let Some((dep, feature)) = item.split_once('/') {
                let weak = dep.ends_with('?');
                let dep = dep.trim_end_matches('?');
                if !weak {
                    optional_on.insert(dep.to_string());
                }
                dep_features
                    .entry(dep.into())
                    .or_default()
                    .insert(feature.into());
            } else if p.features.contains_key(item) {
                if enabled.insert(item.clone()) {
                    todo.push(item.clone());
                }
            } else {
                optional_on.insert(item.clone());
            }
        }
    }
    p.deps
        .iter()
        .filter(|d| !d.optional || optional_on.contains(&d.name))
        .map(|d| {
            let mut f: BTreeSet<String> = d.features.iter().cloned().collect();
            f.extend(dep_features.get(&d.name).into_iter().flatten().cloned());
            if d.default_features && ws[&d.name].features.contains_key("default") {
                f.insert("default".into());
            }
            (d.name.clone(), f)
        })
        .collect()
}

/// Every workspace package `root` (with `features`) links, each with one path to it that
/// avoids the known crossings (`None` when every path goes through one).
fn reachable(
    ws: &BTreeMap<String, Package>,
    root: &str,
    features: &[&str],
) -> BTreeMap<String, Option<Vec<String>>> {
    let allowed = |from: &str, to: &str| {
        KNOWN_CROSSINGS
            .iter()
            .any(|(f, t, _)| *f == from && *t == to)
    };
    let mut found: BTreeMap<String, Option<Vec<String>>> = BTreeMap::new();
    // Two passes over the same graph: first without the known crossings (the paths that
    // must not exist), then with them (what the root links anyway).
    for through_crossings in [false, true] {
        let start: (String, BTreeSet<String>) = (
            root.to_string(),
            features.iter().map(|f| f.to_string()).collect(),
        );
        let mut seen = BTreeSet::new();
        let mut queue = VecDeque::from([(start, vec![root.to_string()])]);
        while let Some(((name, feats), path)) = queue.pop_front() {
            if !seen.insert((name.clone(), feats.clone())) {
                continue;
            }
            for (dep, dep_feats) in edges(ws, &name, &feats) {
                if !through_crossings && allowed(&name, &dep) {
                    continue;
                }
                let mut p = path.clone();
                p.push(dep.clone());
                let entry = found.entry(dep.clone()).or_insert(None);
                if !through_crossings && entry.is_none() {
                    *entry = Some(p.clone());
                }
                queue.push_back(((dep, dep_feats), p));
            }
        }
    }
    found
}

fn label(root: &str, features: &[&str]) -> String {
    if features.is_empty() {
        root.to_string()
    } else {
        format!("{root}[{}]", features.join(","))
    }
}

#[test]
fn the_control_plane_does_not_link_the_runtime() {
    let ws = workspace();
    for (root, features) in CONTROL_PLANE {
        for (dep, path) in reachable(&ws, root, features) {
            if let (true, Some(path)) = (RUNTIME.contains(&dep.as_str()), path) {
                panic!(
                    "{} links the data-plane runtime: {}",
                    label(root, features),
                    path.join(" -> ")
                );
            }
        }
    }
}

#[test]
fn the_data_plane_links_nothing_that_loads_verifies_compiles_or_deploys() {
    let ws = workspace();
    for (root, features) in DATA_PLANE {
        for (dep, path) in reachable(&ws, root, features) {
            if let (true, Some(path)) = (CONTROL_PLANE_CODE.contains(&dep.as_str()), path) {
                panic!(
                    "{} links control-plane code: {}",
                    label(root, features),
                    path.join(" -> ")
                );
            }
        }
    }
}

#[test]
fn no_crate_depends_on_a_test_fixture_outside_dev_dependencies() {
    let ws = workspace();
    assert!(ws.len() > 15, "read {} workspace packages", ws.len());
    for name in ws.keys() {
        let all = ws[name]
            .features
            .keys()
            .map(String::as_str)
            .collect::<Vec<_>>();
        for (dep, path) in reachable(&ws, name, &all) {
            if let (true, Some(path)) = (FIXTURES.contains(&dep.as_str()), path) {
                // A fixture may build on another (test-support runs test-hosts' binary).
                if !FIXTURES.contains(&name.as_str()) {
                    panic!(
                        "{name} depends on the test fixture {dep}: {} (make it a \
                         [dev-dependencies] entry)",
                        path.join(" -> ")
                    );
                }
            }
        }
    }
}

#[test]
fn every_known_crossing_still_exists() {
    let ws = workspace();
    for (from, to, why) in KNOWN_CROSSINGS {
        let package = ws
            .get(*from)
            .unwrap_or_else(|| panic!("known crossing from {from}, no such package ({why})"));
        assert!(
            package.deps.iter().any(|d| d.name == *to),
            "{from} no longer depends on {to}: remove the known crossing ({why})"
        );
    }
}

#[test]
fn every_named_crate_exists() {
    let ws = workspace();
    let named = CONTROL_PLANE
        .iter()
        .chain(DATA_PLANE)
        .map(|(n, _)| n)
        .chain(RUNTIME)
        .chain(CONTROL_PLANE_CODE)
        .chain(FIXTURES);
    for name in named {
        assert!(ws.contains_key(*name), "{name} is not a workspace package");
    }
}
