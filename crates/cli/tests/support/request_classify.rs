//! What the deoptimisation tests of the CLI (`profile.rs`, `watch_reprofile.rs`) share: the
//! host they serve `bpf/deopt/request_classify.c` from, and its per-class counters read
//! remotely.

use rdx_test_support::{eim, LocalHost, Rdx};

/// The test process as the host: `on_request` with a class allowing map lookups and updates.
pub fn host(tag: &str) -> LocalHost {
    LocalHost::start(
        tag,
        &eim::on_request(&["map_lookup_elem", "map_update_elem"]),
    )
}

/// The object's path, as `rdx` takes it.
pub fn object() -> String {
    rdx_testdata::object_path("deopt/request_classify")
        .display()
        .to_string()
}

/// The node `n1`'s `classes` counts (classes 0..3), read remotely.
pub fn classes(rdx: &Rdx) -> Vec<u64> {
    let dump = rdx.json(&["map", "dump", "--node", "n1", "classes"]);
    (0..3)
        .map(|k| {
            dump.as_array()
                .unwrap()
                .iter()
                .find(|e| e["key"].as_str() == Some(k.to_string().as_str()))
                .map_or(0, |e| e["value"].as_str().unwrap().parse().unwrap())
        })
        .collect()
}
