//! Queued mode in the host runtime: the runtime in this process, the control plane
//! deploying elite builds of `bpf/deopt/request_classify.c` into its region with every
//! conditional jump guarded one way, then the other. Requests go through the hook's
//! `FallbackWorker`: a run that fails a guard is copied (state, context; pointers rebased)
//! to the fallback queue, the hook answers the deferred verdict at once, and the worker
//! thread finishes it in the fallback image. Each answer (the hook's, or the completed
//! deferred run's `r0` and context) and the program's map equal a run of the same requests
//! in the interpreter alone: exactly once on the queued path. A second round queues many
//! runs without waiting and publishes the plain build while they are in flight.

use std::sync::mpsc;
use std::time::Duration;

use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Vm};
use rdx_bpf::maps::MapSet;
use rdx_control::{create_codeflow, AttachOptions, CodeFlow, Extension};
use rdx_jit::{branch_sites, Expect, Speculation};
use rdx_runtime::queued::{
    Completed, ContextLayout, FallbackWorker, PacketField, PacketRole, QueuedFallback,
};
use rdx_runtime::{HookSpec, Runtime};
use rdx_test_support::{eim, LocalHost, ShmPath, ValueOut};

/// The hook's answer for a queued run: none of the program's results (0, 1, 2).
const DEFERRED: u64 = 0xdefe_44ed;

const VALUES: [u64; 9] = [5, 0, 999, 1000, 7, 123_456, 0, 1, 4242];

fn request_classify() -> Extension {
    let obj = rdx_bpf::loader::load(&rdx_testdata::object("deopt/request_classify")).unwrap();
    Extension::from_object(&obj, None).unwrap()
}

/// `(r0, out)` per value and the map's counts after them, in the interpreter alone.
fn reference(ext: &Extension, values: &[u64]) -> (Vec<(u64, u64)>, Vec<u64>) {
    let maps = MapSet::new(ext.maps()).unwrap();
    let vm = Vm::new(ext.insns(), &maps, &Helpers::standard(), Config::default()).unwrap();
    let answers = values
        .iter()
        .map(|&v| {
            let mut ctx = [0u8; 16];
            ctx[..8].copy_from_slice(&v.to_le_bytes());
            let r0 = vm.run_checked(Input::Bytes(&mut ctx)).unwrap();
            (r0, u64::from_le_bytes(ctx[8..].try_into().unwrap()))
        })
        .collect();
    let counts = (0u32..4)
        .map(|k| {
            let v = maps.get(0).unwrap().lookup(&k.to_le_bytes()).unwrap();
            u64::from_le_bytes(v[..8].try_into().unwrap())
        })
        .collect();
    (answers, counts)
}

fn classes(cf: &CodeFlow, map_id: u32) -> Vec<u64> {
    let info = cf.view().info.clone();
    let m = rdx_transport::xstate::open(cf.transport(), &info, map_id).unwrap();
    (0u32..4)
        .map(|k| {
            let mut v = [0u8; 8];
            rdx_transport::xstate::lookup(cf.transport(), &m.map, &k.to_le_bytes(), &mut v)
                .unwrap();
            u64::from_le_bytes(v)
        })
        .collect()
}

/// Sends `value` through the worker: the answer now, or the ticket of the queued run.
fn send(worker: &FallbackWorker<'_>, value: u64) -> Result<(u64, u64), u64> {
    let mut c = ValueOut { value, out: 0 };
    let r0 = worker.run(&mut c);
    if r0 == DEFERRED {
        Err(FallbackWorker::last_ticket())
    } else {
        Ok((r0, c.out))
    }
}

fn answer_of(c: &Completed) -> (u64, u64) {
    (
        c.result.expect("the deferred run finished"),
        u64::from_le_bytes(c.ctx[8..16].try_into().unwrap()),
    )
}

#[test]
fn queued_runs_finish_in_the_worker_exactly_once() {
    let ext = request_classify();
    let sites = branch_sites(ext.insns());
    assert!(sites.len() >= 2);
    for expect in [Expect::NotTaken, Expect::Taken] {
        let rt = LocalHost::start(
            &format!("deopt-queued-{expect:?}"),
            &eim::on_request(&["map_lookup_elem", "map_update_elem"]),
        );
        let mut cf = create_codeflow(&rt.address(), AttachOptions::default()).unwrap();
        let checked = cf.validate_code(&ext, "on_request", None).unwrap();
        let speculation = Speculation {
            guards: sites.iter().map(|&pc| (pc, expect)).collect(),
        };
        let (elite, _) = cf.jit_compile_elite(&ext, &checked, speculation).unwrap();
        let prepared = cf.prepare_prog("on_request", &ext, &elite).unwrap();
        let published = cf.tx(vec![prepared]).unwrap().remove(0);
        let map_id = published.map_ids[0];

        let (tx, rx) = mpsc::channel::<Completed>();
        let worker = rt
            .queued_fallback(
                "on_request",
                QueuedFallback::new(ContextLayout::plain(16), DEFERRED),
                move |c| {
                    let _ = tx.send(c);
                },
            )
            .unwrap();
        let hook = worker.hook();

        // One request at a time: each deferred run completes before the next request, so
        // the order of side effects is the reference's.
        let (want, want_counts) = reference(&ext, &VALUES);
        let mut deferred = 0;
        for (&v, want) in VALUES.iter().zip(&want) {
            let got = match send(&worker, v) {
                Ok(a) => a,
                Err(ticket) => {
                    deferred += 1;
                    let c = rx.recv_timeout(Duration::from_secs(10)).unwrap();
                    assert_eq!(c.ticket, ticket);
                    answer_of(&c)
                }
            };
            assert_eq!(got, *want, "{expect:?}: value {v}");
        }
        assert!(deferred > 0, "{expect:?}: no run was queued");
        assert_eq!(classes(&cf, map_id), want_counts, "{expect:?}: map");
        let stats = hook.stats();
        assert_eq!(stats.failures, 0, "{stats:?}");
        assert_eq!(stats.deopts, deferred, "{stats:?}");

        // A run through the plain hook handle deoptimises synchronously meanwhile.
        let mut c = ValueOut { value: 0, out: 0 };
        assert_eq!((hook.run(&mut c), c.out), want[1]);
        assert_eq!(rx.try_recv().ok(), None, "nothing was queued");
        let before = classes(&cf, map_id);

        // Many runs in flight, the plain build published in the middle of them: every
        // queued run still finishes in the image of the version it started in.
        let rounds: Vec<u64> = (0..40).flat_map(|_| VALUES).collect();
        let (want, _) = reference(&ext, &rounds);
        let mut tickets = Vec::new();
        let mut now = Vec::new();
        for (i, &v) in rounds.iter().enumerate() {
            if i == rounds.len() / 2 {
                let plain = cf.jit_compile_code(&ext, &checked, None).unwrap();
                let p = cf.prepare_prog("on_request", &ext, &plain).unwrap();
                cf.tx(vec![p]).unwrap();
            }
            match send(&worker, v) {
                Ok(a) => now.push((i, a)),
                Err(t) => tickets.push((i, t)),
            }
        }
        assert!(!tickets.is_empty());
        let mut done = std::collections::HashMap::new();
        while done.len() < tickets.len() {
            let c = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            done.insert(c.ticket, answer_of(&c));
        }
        for (i, a) in now {
            assert_eq!(a, want[i], "{expect:?}: request {i}");
        }
        for (i, t) in &tickets {
            assert_eq!(done[t], want[*i], "{expect:?}: queued request {i}");
        }
        // The map counted each request once: the reference's counts for these requests.
        let after = classes(&cf, map_id);
        let mut sent = [0u64; 4];
        for &v in &rounds {
            sent[match v {
                0 => 0,
                1..1000 => 1,
                _ => 2,
            }] += 1;
        }
        let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert_eq!(delta, sent.to_vec(), "{expect:?}: exactly once under load");
        assert_eq!(hook.stats().failures, 0);
        drop(worker);
    }
}

/// `struct packet_ctx` of `eim/packet.yaml`: 64-bit packet pointers.
#[repr(C)]
struct PacketCtx {
    data: u64,
    data_end: u64,
    ifindex: u32,
    len: u32,
}

/// `c_packet_eim_filter` (drops IPv6 frames on the `packet_in` hook of `eim/packet.yaml`)
/// with every jump guarded one way, then the other: a run that deoptimises at the bounds
/// check resumes in the worker on a packet copy (the context's 64-bit `data`/`data_end`
/// and the frame pointer in its registers rebased onto it) and still reads the ethertype
/// right; verdicts equal the program's, the packet copies equal the frames.
#[test]
fn queued_runs_read_their_packet_copy() {
    let obj = rdx_bpf::loader::load(&rdx_testdata::object("verifier/c_packet_eim_filter")).unwrap();
    let ext = Extension::from_object(&obj, None).unwrap();
    let sites = branch_sites(ext.insns());
    let layout = ContextLayout {
        size: 24,
        packet_fields: vec![
            PacketField {
                offset: 0,
                width: 8,
                role: PacketRole::Start,
            },
            PacketField {
                offset: 8,
                width: 8,
                role: PacketRole::End,
            },
        ],
    };
    let eth = |proto: u16, len: usize| {
        let mut f = vec![0u8; len];
        if len >= 14 {
            f[12..14].copy_from_slice(&proto.to_be_bytes());
        }
        f
    };
    let frames = [
        eth(0x86dd, 60),
        eth(0x0800, 60),
        eth(0x86dd, 14),
        eth(0x86dd, 13),
        eth(0x0806, 42),
        eth(0x86dd, 1500),
        vec![],
    ];
    let verdict = |f: &[u8]| u64::from(f.len() >= 14 && f[12..14] == [0x86, 0xdd]);
    for expect in [Expect::NotTaken, Expect::Taken] {
        let region = ShmPath::new(&format!("deopt-queued-pkt-{expect:?}"));
        let rt = Runtime::builder()
            .path(&region)
            .eim_spec(include_str!("../../../eim/packet.yaml"))
            .code_size(1 << 20)
            .scratch_size(1 << 20)
            .thread_slots(4)
            .hook("packet_in", HookSpec::for_context::<PacketCtx>())
            .build()
            .unwrap();
        rt.register().unwrap();
        let mut cf = create_codeflow(&region.address(), AttachOptions::default()).unwrap();
        let checked = cf.validate_code(&ext, "packet_in", Some("filter")).unwrap();
        let speculation = Speculation {
            guards: sites.iter().map(|&pc| (pc, expect)).collect(),
        };
        let (elite, _) = cf.jit_compile_elite(&ext, &checked, speculation).unwrap();
        let prepared = cf.prepare_prog("packet_in", &ext, &elite).unwrap();
        cf.tx(vec![prepared]).unwrap();

        let (tx, rx) = mpsc::channel::<Completed>();
        let mut cfg = QueuedFallback::new(layout.clone(), DEFERRED);
        cfg.packet_slot = 1500;
        let worker = rt
            .queued_fallback("packet_in", cfg, move |c| {
                let _ = tx.send(c);
            })
            .unwrap();
        let mut deferred = 0;
        for f in &frames {
            let mut packet = f.clone();
            let data = packet.as_mut_ptr() as u64;
            let mut c = PacketCtx {
                data,
                data_end: data + f.len() as u64,
                ifindex: 3,
                len: f.len() as u32,
            };
            let r0 = worker.run(&mut c);
            let (r0, after) = if r0 == DEFERRED {
                deferred += 1;
                let c = rx.recv_timeout(Duration::from_secs(10)).unwrap();
                (c.result.expect("finished"), c.packet)
            } else {
                (r0, packet.clone())
            };
            assert_eq!(r0, verdict(f), "{expect:?}: frame of {} bytes", f.len());
            assert_eq!(&after, f, "{expect:?}: the packet (copy) after the run");
        }
        assert!(deferred > 0, "{expect:?}: nothing was queued");
        assert_eq!(worker.hook().stats().failures, 0);
        drop(worker);
    }
}

/// Backpressure: with one packet slot, held by a queued run whose completion the test holds
/// up, the next deoptimised run is finished on the hook's thread (its real answer, not the
/// deferred verdict), exactly once.
#[test]
fn a_full_queue_finishes_runs_synchronously() {
    let ext = request_classify();
    let rt = LocalHost::start(
        "deopt-queued-full",
        &eim::on_request(&["map_lookup_elem", "map_update_elem"]),
    );
    let mut cf = create_codeflow(&rt.address(), AttachOptions::default()).unwrap();
    let checked = cf.validate_code(&ext, "on_request", None).unwrap();
    // Value 0 fails the first guard; every other jump is left unguarded.
    let first = branch_sites(ext.insns())[0];
    let mut guards = Speculation::default();
    let mut map_id = None;
    for expect in [Expect::NotTaken, Expect::Taken] {
        guards.guards.insert(first, expect);
        let (elite, _) = cf
            .jit_compile_elite(&ext, &checked, guards.clone())
            .unwrap();
        let p = cf.prepare_prog("on_request", &ext, &elite).unwrap();
        let published = cf.tx(vec![p]).unwrap().remove(0);
        let d = rt.hook("on_request").unwrap().stats().deopts;
        rt.hook("on_request")
            .unwrap()
            .run(&mut ValueOut { value: 0, out: 0 });
        if rt.hook("on_request").unwrap().stats().deopts > d {
            map_id = Some(published.map_ids[0]);
            break;
        }
    }
    let map_id = map_id.expect("value 0 fails one direction of the first guard");
    let before = classes(&cf, map_id);

    let (tx, rx) = mpsc::channel::<Completed>();
    let (hold_tx, hold_rx) = mpsc::channel::<()>();
    let mut cfg = QueuedFallback::new(ContextLayout::plain(16), DEFERRED);
    cfg.capacity = 1;
    let worker = rt
        .queued_fallback("on_request", cfg, move |c| {
            let _ = tx.send(c);
            // Hold the packet slot until the test lets go.
            let _ = hold_rx.recv();
        })
        .unwrap();
    let (want, _) = reference(&ext, &[0]);
    let first = send(&worker, 0).expect_err("the first run is queued");
    let c = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!((c.ticket, answer_of(&c)), (first, want[0]));
    // The worker holds the only slot (inside `done`): this run is finished here.
    assert_eq!(send(&worker, 0), Ok(want[0]));
    hold_tx.send(()).unwrap();
    let third = send(&worker, 0);
    if let Err(t) = third {
        let c = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!((c.ticket, answer_of(&c)), (t, want[0]));
    }
    drop(hold_tx);
    let hook = worker.hook();
    assert_eq!(hook.stats().failures, 0);
    drop(worker);
    let after = classes(&cf, map_id);
    assert_eq!(
        after[0] - before[0],
        3,
        "three requests of class 0, each counted once"
    );
}
