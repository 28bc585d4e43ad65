//! What the fleet tests and the broadcast benchmark share beyond `rdx-test-support`: the
//! request chain, and plans and extensions built from `bpf/fleet/stamp_*.c`.

#![allow(dead_code)]

pub mod chain;

use rdx_control::Extension;

/// `bpf/fleet/NAME.c` as an extension (its one program).
pub fn extension(name: &str) -> Extension {
    let o = rdx_bpf::loader::load(&rdx_testdata::object(&format!("fleet/{name}"))).unwrap();
    Extension::from_object(&o, None).unwrap()
}

/// A plan (YAML) that updates `on_request` to `stamp_v{version}` in `class` on the nodes
/// `{prefix}0`, `{prefix}1`, ... at `addresses`; with `flow`, it declares the request flow
/// from the first node to the last.
pub fn stamp_plan(
    prefix: &str,
    addresses: &[String],
    version: u32,
    class: &str,
    flow: bool,
) -> String {
    let mut text = String::from("nodes:\n");
    for (i, a) in addresses.iter().enumerate() {
        text += &format!("  - {{name: {prefix}{i}, address: '{a}'}}\n");
    }
    text += &format!(
        "updates:\n  - {{hook: on_request, object: '{}', class: {class}}}\n",
        rdx_testdata::object_path(&format!("fleet/stamp_v{version}")).display()
    );
    if flow {
        text += &format!(
            "flows:\n  - {{entry: {{node: {prefix}0, hook: on_request}}, \
             exit: {{node: {prefix}{}, hook: on_request}}}}\n",
            addresses.len() - 1
        );
    }
    text
}
