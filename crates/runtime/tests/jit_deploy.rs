//! End to end with real extensions: eBPF C compiled by clang (bpf/runtime/*.c), loaded and
//! JIT-compiled *in this test process* (which plays the control plane), linked against the
//! host's context table, written into its code arena through the shared-memory transport and
//! published with one compare-and-swap. The host process only runs its hook.

#![cfg(target_arch = "x86_64")]

mod common;

use common::{Deployer, Host, Node};
use rdx_region::layout::offsets;
use rdx_transport::xstate::{self, ringbuf, Copies, UPDATE_ANY};
use rdx_transport::Transport;

#[test]
fn clang_compiled_program_with_maps_and_trace_runs_in_the_host() {
    let mut host = Host::start(&[]);
    let mut node = Node::attach(&host);
    let mut cp = Deployer::new(&node);
    let (v1, maps) = cp.prepare(&mut node, "runtime/counter", 1, false);
    node.flip(0, v1);
    assert_eq!(host.run(3), (101, 1));
    assert_eq!(host.run(11), (102, 2));
    assert_eq!(host.run(3), (103, 3));
    assert_eq!(host.run(4), (101, 1));
    // The control plane reads and writes the same map remotely.
    let counts = &maps[0];
    let mut out = [0u8; 8];
    assert!(xstate::lookup(&node.t, counts, &3u32.to_le_bytes(), &mut out).unwrap());
    assert_eq!(u64::from_le_bytes(out), 3);
    xstate::update(
        &node.t,
        counts,
        &3u32.to_le_bytes(),
        &50u64.to_le_bytes(),
        UPDATE_ANY,
        Copies::All,
        1,
    )
    .unwrap();
    assert_eq!(host.run(3), (151, 51));
    let mut keys: Vec<u32> = xstate::keys(&node.t, counts)
        .unwrap()
        .iter()
        .map(|k| u32::from_le_bytes(k[..4].try_into().unwrap()))
        .collect();
    keys.sort();
    assert_eq!(keys, vec![3, 4]);
    // trace_printk went to the trace ring, which the control plane tails remotely.
    let trace = xstate::find(&node.t, node.t.info(), "rdx_trace").unwrap();
    let mut lines = Vec::new();
    ringbuf::consume(&node.t, &trace.map, |rec| {
        lines.push(String::from_utf8_lossy(rec).into_owned())
    })
    .unwrap();
    assert_eq!(lines, vec!["first call for key 3", "first call for key 4"]);
    assert_eq!(host.stats()[0], 5);
}

fn spin_reference(n: u64) -> u64 {
    let mut acc: u64 = 17;
    for i in 0..n {
        acc = acc.wrapping_mul(31).wrapping_add(i ^ (acc >> 7));
    }
    acc
}

#[test]
fn metered_program_that_spends_its_budget_is_stopped_and_the_host_keeps_serving() {
    let mut host = Host::start(&[]);
    let mut node = Node::attach(&host);
    let mut cp = Deployer::new(&node);
    let (v1, _) = cp.prepare(&mut node, "runtime/spin", 1, true);
    node.t
        .write_u64(node.hook + offsets::HOOK_BUDGET, 100_000)
        .unwrap();
    node.t
        .write_u64(node.hook + offsets::HOOK_DEFAULT_RET, 7)
        .unwrap();
    node.flip(0, v1);
    let want = spin_reference(100);
    assert_eq!(host.run(100), (want & 0xffff, want));
    // Ten million iterations cannot fit in 100k instructions: stopped, default, counted.
    assert_eq!(host.run(10_000_000), (7, 0));
    let s = host.stats();
    assert_eq!(s[1], 1, "failure counted: {s:?}");
    assert_eq!(host.run(100), (want & 0xffff, want));
}
