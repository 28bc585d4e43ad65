//! Exactly once: a guard at every branch of programs that update maps and emit ring-buffer
//! events before their branches, each guard expecting a random direction, so that runs leave
//! the fast path at arbitrary branches after arbitrary side effects. For every input
//! sequence, the final maps, the ring-buffer events, every result and every packet equal
//! those of the same sequence in the interpreter alone — synchronously (the interpreter
//! finishes on the same thread, on the same stack) and queued (state and copies of context
//! and packet go through the fallback queue, pointers rebased).

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Vm, XdpMd};
use rdx_bpf::isa::Insn;
use rdx_bpf::maps::MapSet;
use rdx_bpf::program::Object;
use rdx_deopt::host::{native_symbols, LowPacket};
use rdx_deopt::{ContextLayout, EliteTier, FallbackQueue, Outcome};
use rdx_jit::{branch_sites, Build, CompileOptions, Compiler, ExecutableCode, Expect, Speculation};
use rdx_region::abi::DeoptRunState;
use rdx_region::layout::Arch;

/// Programs with side effects before their branches: the two deoptimisation workloads and
/// three of the differential corpus (array and hash maps, a loop, a load balancer).
const PROGRAMS: &[(&str, &str)] = &[
    ("deopt/flow_events", "flow_events"),
    ("deopt/scan_loop", "scan_loop"),
    ("tests/hash_map", "hash_map"),
    ("tests/xdp_lb", ""),
    ("tests/array_map", ""),
];

fn load(idx: usize) -> (Object, Vec<Insn>) {
    let (path, name) = PROGRAMS[idx];
    let object = rdx_bpf::loader::load(&rdx_testdata::object(path)).unwrap();
    let prog = object
        .programs
        .iter()
        .find(|p| name.is_empty() || p.name == name)
        .unwrap_or_else(|| panic!("{path}: no program {name}"));
    let insns = prog.insns.clone();
    (object, insns)
}

type Dump = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

/// Every map's entries and, for ring buffers, the records emitted (consumed).
fn dump(maps: &MapSet) -> (Dump, Vec<Vec<u8>>) {
    let mut events = Vec::new();
    let d = maps
        .iter()
        .map(|m| {
            if let Some(rb) = m.ringbuf() {
                events.extend(rb.consume());
            }
            let entries = m
                .keys()
                .into_iter()
                .filter_map(|k| m.lookup(&k).map(|v| (k, v)))
                .collect();
            (m.name().to_string(), entries)
        })
        .collect();
    (d, events)
}

fn udp(src: u8, dport: u16, ttl: u8, tail: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    let total = (20 + 8 + tail.len()) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, ttl, 17, 0, 0, 10, 0, 0, src, 10, 0, 0, 1]);
    f.extend_from_slice(&1234u16.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&((8 + tail.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(tail);
    f
}

/// Mostly well-formed UDP/IPv4 with a few flows, some TCP, some other ethertypes, some
/// truncated and some random bytes.
fn packet() -> impl Strategy<Value = Vec<u8>> {
    let tail = proptest::collection::vec(any::<u8>(), 0..40);
    prop_oneof![
        6 => (0u8..4, prop_oneof![Just(53u16), Just(80), any::<u16>()], any::<u8>(), tail.clone())
            .prop_map(|(s, d, t, tail)| udp(s, d, t, &tail)),
        1 => (0u8..4, tail.clone()).prop_map(|(s, tail)| {
            let mut f = udp(s, 53, 64, &tail);
            f[23] = 6;
            f
        }),
        1 => (0usize..40, 0u8..4).prop_map(|(cut, s)| {
            let mut f = udp(s, 53, 64, &[]);
            f.truncate(cut);
            f
        }),
        1 => proptest::collection::vec(any::<u8>(), 0..80),
    ]
}

#[derive(Debug)]
struct Case {
    prog: usize,
    /// One expected direction per branch site (cycled if shorter).
    directions: Vec<bool>,
    packets: Vec<Vec<u8>>,
    /// Compile with the instruction budget: the budget left is handed over too.
    metered: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        0..PROGRAMS.len(),
        proptest::collection::vec(any::<bool>(), 1..64),
        proptest::collection::vec(packet(), 1..12),
        any::<bool>(),
    )
        .prop_map(|(prog, directions, packets, metered)| Case {
            prog,
            directions,
            packets,
            metered,
        })
}

/// Per run: (r0, packet after the run).
type Runs = Vec<(u64, Vec<u8>)>;

fn reference(object: &Object, insns: &[Insn], packets: &[Vec<u8>]) -> (Runs, Dump, Vec<Vec<u8>>) {
    let maps = MapSet::new(&object.maps).unwrap();
    let vm = Vm::new(insns, &maps, &Helpers::standard(), Config::default()).unwrap();
    let mut runs = Vec::new();
    for p in packets {
        let mut xdp = XdpMd::new(p.clone());
        let r0 = vm.run_checked(Input::Context(&mut xdp)).unwrap();
        runs.push((r0, xdp.packet_data().to_vec()));
    }
    let (d, e) = dump(&maps);
    (runs, d, e)
}

enum Mode {
    Sync,
    Queued,
}

fn elite(
    object: &Object,
    insns: &[Insn],
    directions: &[bool],
    packets: &[Vec<u8>],
    mode: Mode,
    metered: bool,
) -> (Runs, Dump, Vec<Vec<u8>>, u64) {
    let host = Arch::HOST.expect("supported host");
    let guards = branch_sites(insns)
        .into_iter()
        .enumerate()
        .map(|(i, pc)| {
            let e = if directions[i % directions.len()] {
                Expect::Taken
            } else {
                Expect::NotTaken
            };
            (pc, e)
        })
        .collect();
    let mut opts = CompileOptions::new(host, Build::Elite(Speculation { guards }));
    opts.needs_budget = metered;
    let budget = if metered { 1 << 30 } else { 0 };
    let (artifact, stats) = Compiler::new(host).unwrap().compile(insns, &opts).unwrap();
    assert_eq!(stats.guards, branch_sites(insns).len());
    let maps = MapSet::new(&object.maps).unwrap();
    let code = ExecutableCode::load_bytes(&artifact.to_bytes(), &native_symbols(&maps)).unwrap();
    let vm = Arc::new(Vm::new(insns, &maps, &Helpers::standard(), Config::default()).unwrap());
    // SAFETY: the elite artifact of `insns`, linked against `maps`, alive for the test.
    let tier = unsafe { EliteTier::new(code.entry(), vm.clone(), metered) };
    let queue = FallbackQueue::new(2048, 4).unwrap();
    let mut state = DeoptRunState::boxed(0);
    let mut low = LowPacket::new(1 << 16).unwrap();
    let mut runs = Vec::new();
    for p in packets {
        low.set(p);
        let mut ctx = low.xdp_md();
        let outcome = match mode {
            // SAFETY: ctx is a real xdp_md for `low`'s packet.
            Mode::Sync => unsafe {
                tier.run_sync(&mut state, &mut ctx, Some(low.region()), budget)
            },
            // SAFETY: as above.
            Mode::Queued => unsafe {
                tier.run_queued(
                    &mut state,
                    &mut ctx,
                    &ContextLayout::xdp_md(),
                    &queue,
                    budget,
                )
            },
        }
        .unwrap();
        let run = match outcome {
            Outcome::Fast(r0) | Outcome::Resumed(r0) => (r0, low.bytes().to_vec()),
            Outcome::Deferred(ticket) => {
                // The worker finishes the run before the next request, so the order of side
                // effects is the reference order.
                let (t, deferred) = queue.pop().unwrap();
                assert_eq!(t, ticket);
                let done = deferred.resume(&vm, t);
                (done.result.unwrap(), done.packet)
            }
        };
        runs.push(run);
    }
    let (d, e) = dump(&maps);
    (runs, d, e, tier.counts().1)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn synchronous_deopt_runs_every_side_effect_exactly_once(c in case()) {
        let (object, insns) = load(c.prog);
        let want = reference(&object, &insns, &c.packets);
        let (runs, maps, events, _) = elite(&object, &insns, &c.directions, &c.packets, Mode::Sync, c.metered);
        prop_assert_eq!(&runs, &want.0, "results and packets");
        prop_assert_eq!(&maps, &want.1, "maps");
        prop_assert_eq!(&events, &want.2, "ring-buffer events");
    }

    #[test]
    fn queued_deopt_runs_every_side_effect_exactly_once(c in case()) {
        let (object, insns) = load(c.prog);
        let want = reference(&object, &insns, &c.packets);
        let (runs, maps, events, _) = elite(&object, &insns, &c.directions, &c.packets, Mode::Queued, c.metered);
        prop_assert_eq!(&runs, &want.0, "results and packets");
        prop_assert_eq!(&maps, &want.1, "maps");
        prop_assert_eq!(&events, &want.2, "ring-buffer events");
    }
}

/// Scouting, then speculation: an instrumented build counts each branch's directions on
/// the traffic, the profile's speculation then runs the same traffic without a single
/// deoptimisation, and flipping any one guard against the traffic deoptimises (after side
/// effects, in the subprogram's frame too) with results still equal to the interpreter's.
#[test]
fn profiled_guards_hold_and_each_flipped_guard_deopts_exactly_once() {
    let host = Arch::HOST.expect("supported host");
    let (object, insns) = load(0);
    let sites = branch_sites(&insns);
    let packets: Vec<Vec<u8>> = (0..24u8)
        .map(|i| udp(i % 3, if i % 5 == 0 { 80 } else { 53 }, 64, &[i; 8]))
        .collect();
    let want = reference(&object, &insns, &packets);

    // Scouting build: same results, counters in a buffer standing in for XState.
    let mut counters = vec![0u64; 2 * sites.len()];
    let maps = MapSet::new(&object.maps).unwrap();
    let mut syms = native_symbols(&maps);
    syms.insert(
        rdx_jit::Symbol::Var("rdx_profile".into()),
        counters.as_mut_ptr() as u64,
    );
    let opts = CompileOptions::new(
        host,
        Build::Scouting(rdx_jit::BranchCounters {
            symbol: rdx_jit::Symbol::Var("rdx_profile".into()),
        }),
    );
    let (artifact, _) = Compiler::new(host).unwrap().compile(&insns, &opts).unwrap();
    let code = ExecutableCode::load_bytes(&artifact.to_bytes(), &syms).unwrap();
    let mut low = LowPacket::new(1 << 16).unwrap();
    for (p, (want_r0, _)) in packets.iter().zip(&want.0) {
        low.set(p);
        let mut ctx = low.xdp_md();
        let mut run = rdx_region::abi::RunState::new(0);
        // SAFETY: a real xdp_md for the packet; the counters outlive the code.
        let r0 = unsafe { code.call(ctx.as_mut_ptr(), &mut run) };
        assert_eq!(r0, *want_r0);
    }
    drop(code);
    let bytes: Vec<u8> = counters.iter().flat_map(|c| c.to_le_bytes()).collect();
    let profile = rdx_deopt::BranchProfile::from_counters(&insns, &bytes).unwrap();
    // The first branch (the Ethernet bounds check) runs once per packet.
    let first = profile.branches[0];
    assert_eq!(first.taken + first.fell_through, packets.len() as u64);
    let policy = rdx_deopt::Policy {
        min_runs: 1,
        cold_share: 0.0,
    };
    let spec = profile.speculation(&policy);
    assert!(!spec.guards.is_empty());

    // Unknown branches stay unguarded here (`elite` above guards every site).
    let mut run_spec = |spec: &Speculation| -> (Runs, Dump, Vec<Vec<u8>>, u64) {
        let opts = CompileOptions::new(host, Build::Elite(spec.clone()));
        let (artifact, stats) = Compiler::new(host).unwrap().compile(&insns, &opts).unwrap();
        assert_eq!(stats.guards, spec.guards.len());
        let maps = MapSet::new(&object.maps).unwrap();
        let code =
            ExecutableCode::load_bytes(&artifact.to_bytes(), &native_symbols(&maps)).unwrap();
        let vm = Arc::new(Vm::new(&insns, &maps, &Helpers::standard(), Config::default()).unwrap());
        // SAFETY: the elite artifact of `insns`, linked against `maps`.
        let tier = unsafe { EliteTier::new(code.entry(), vm, false) };
        let mut state = DeoptRunState::boxed(0);
        let mut runs = Vec::new();
        for p in &packets {
            low.set(p);
            let mut ctx = low.xdp_md();
            // SAFETY: a real xdp_md for the packet.
            let out = unsafe { tier.run_sync(&mut state, &mut ctx, Some(low.region()), 0) };
            runs.push((out.unwrap().result().unwrap(), low.bytes().to_vec()));
        }
        let (d, e) = dump(&maps);
        (runs, d, e, tier.counts().1)
    };
    let followed = run_spec(&spec);
    assert_eq!(followed.3, 0, "the traffic follows its own profile");
    assert_eq!((followed.0, followed.1, followed.2), want.clone());

    let mut deopts = 0;
    for (&pc, &e) in &spec.guards {
        let mut flipped = spec.clone();
        flipped.guards.insert(
            pc,
            if e == Expect::Taken {
                Expect::NotTaken
            } else {
                Expect::Taken
            },
        );
        let got = run_spec(&flipped);
        assert!(got.3 > 0, "flipping the guard at {pc} deoptimises");
        deopts += got.3;
        assert_eq!((got.0, got.1, got.2), want.clone(), "guard at {pc} flipped");
    }
    assert!(deopts >= spec.guards.len() as u64);
}
