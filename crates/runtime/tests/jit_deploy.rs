//! End to end with real extensions: eBPF C compiled by clang (bpf/runtime/*.c), loaded and
//! JIT-compiled *in this test process* (which plays the control plane), linked against the
//! host's context table, written into its code arena through the shared-memory transport and
//! published with one compare-and-swap. The host process only runs its hook.

#![cfg(target_arch = "x86_64")]

mod common;

use common::{Host, Node};
use rdx_jit::link::{link, LinkTarget};
use rdx_jit::{CompileOptions, Compiler, Symbol};
use rdx_region::layout::{active_word, offsets, MapType, SectionId, MAP_ALIGN};
use rdx_transport::xstate::{self, ringbuf, Copies, MapRef, MapSpec, UPDATE_ANY};
use rdx_transport::Transport;

/// What the control plane keeps per node in this test: the next free map id and scratchpad
/// byte (a bump allocator, standing in for the control plane's).
struct Deployer {
    next_id: u32,
    next_scratch: u64,
}

impl Deployer {
    fn new(node: &Node) -> Self {
        let info = node.t.info();
        Self {
            next_id: 1,
            next_scratch: info.section(SectionId::Scratch).offset + info.scratch_reserved,
        }
    }

    /// Creates the object's maps, compiles its first program, links and writes it; returns
    /// the active word to publish and the maps.
    fn prepare(
        &mut self,
        node: &mut Node,
        object: &str,
        version: u32,
        needs_budget: bool,
    ) -> (u64, Vec<MapRef>) {
        let obj = rdx_bpf::loader::load(&rdx_testdata::object(object)).expect("load object");
        let info = node.t.info().clone();
        let mut maps = Vec::new();
        for def in &obj.maps {
            let map_type = MapType::from_u32(def.map_type.to_kernel()).expect("supported map type");
            let spec = MapSpec {
                map_type,
                key_size: def.key_size,
                value_size: def.value_size,
                max_entries: def.max_entries,
                flags: 0,
                name: def.name.chars().take(24).collect(),
            };
            let size = xstate::layout(&spec, info.thread_slots)
                .unwrap()
                .footprint();
            let m = xstate::create(&node.t, &info, self.next_id, self.next_scratch, &spec).unwrap();
            if let Some(init) = &def.initial_value {
                xstate::update(
                    &node.t,
                    &m,
                    &0u32.to_le_bytes(),
                    init,
                    UPDATE_ANY,
                    Copies::All,
                    1,
                )
                .unwrap();
            }
            self.next_id += 1;
            self.next_scratch += size.next_multiple_of(MAP_ALIGN);
            maps.push(m);
        }
        let prog = &obj.programs[0];
        let mut opts = CompileOptions::new(rdx_jit::Arch::X86_64);
        opts.needs_budget = needs_budget;
        let (artifact, _) = Compiler::new(rdx_jit::Arch::X86_64)
            .unwrap()
            .compile(&prog.insns, &opts)
            .expect("compile");
        let ctx = rdx_transport::context::read_context(&node.t, &info).unwrap();
        let base = info.base_address;
        let resolve = |s: &Symbol| -> Option<u64> {
            match s {
                Symbol::Map(i) => maps.get(*i as usize).map(|m| base + m.offset),
                Symbol::MapValue(i) => maps.get(*i as usize).map(|m| base + m.data),
                other => ctx
                    .iter()
                    .find(|c| c.symbol() == other.to_string())
                    .map(|c| c.addr),
            }
        };
        let load_offset = node.next_code;
        let linked = link(
            &artifact,
            LinkTarget::new(rdx_jit::Arch::X86_64),
            &resolve,
            base + load_offset,
        )
        .expect("link");
        let placed = node.place(&linked.code) as u64;
        assert_eq!(placed, load_offset);
        (
            active_word(version, (load_offset + linked.entry_offset as u64) as u32),
            maps,
        )
    }
}

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
