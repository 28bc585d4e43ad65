//! Elite builds in a real host: the control plane publishes an elite artifact together with
//! its fallback image (one record, one transaction); the `rdx-test-host control` process, which links
//! only the runtime, continues every run that fails a guard in that image. Every response
//! and the map's final contents equal those of the same requests in the reference
//! interpreter alone; `deopts` counts the failed guards and `failures` stays 0.

mod common;

use common::Host;
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Vm};
use rdx_bpf::maps::MapSet;
use rdx_control::node::hook_status;
use rdx_control::{create_codeflow, AttachOptions, Extension};
use rdx_jit::{branch_sites, Expect, Speculation};

fn request_classify() -> Extension {
    let obj = rdx_bpf::loader::load(&rdx_testdata::object("deopt/request_classify"))
        .expect("load object");
    Extension::from_object(&obj, None).expect("one program")
}

/// Every request of the mix: zero (rejected), small (doubled), large (clamped).
const VALUES: [u64; 9] = [5, 0, 999, 1000, 7, 123_456, 0, 1, 4242];

fn classes(cf: &rdx_control::CodeFlow, map_id: u32) -> Vec<u64> {
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

#[test]
fn failed_guards_continue_in_the_fallback_image_inside_the_host() {
    let ext = request_classify();
    // The reference: the interpreter alone, on its own maps.
    let maps = MapSet::new(ext.maps()).unwrap();
    let vm = Vm::new(ext.insns(), &maps, &Helpers::standard(), Config::default()).unwrap();
    let mut reference = Vec::new();
    for &v in &VALUES {
        let mut ctx = [0u8; 16];
        ctx[..8].copy_from_slice(&v.to_le_bytes());
        let r0 = vm.run_checked(Input::Bytes(&mut ctx)).unwrap();
        reference.push((r0, u64::from_le_bytes(ctx[8..].try_into().unwrap())));
    }
    let ref_map: Vec<u64> = (0u32..4)
        .map(|k| {
            let v = maps.get(0).unwrap().lookup(&k.to_le_bytes()).unwrap();
            u64::from_le_bytes(v[..8].try_into().unwrap())
        })
        .collect();

    let sites = branch_sites(ext.insns());
    assert!(sites.len() >= 2);
    // Two elite builds: every conditional jump guarded one way, then the other, so that
    // every request of the mix fails some guard in at least one of them.
    for expect in [Expect::NotTaken, Expect::Taken] {
        let mut host = Host::start(&format!("deopt-{expect:?}"), &[]);
        let mut cf = create_codeflow(&host.address(), AttachOptions::default()).unwrap();
        let checked = cf.validate_code(&ext, "on_request", None).unwrap();
        let speculation = Speculation {
            guards: sites.iter().map(|&pc| (pc, expect)).collect(),
        };
        let (elite, stats) = cf.jit_compile_elite(&ext, &checked, speculation).unwrap();
        assert!(elite.artifact().meta.deoptimises());
        assert_eq!(stats.guards, sites.len());
        let prepared = cf.prepare_prog("on_request", &ext, &elite).unwrap();
        let published = cf.tx(vec![prepared]).unwrap().remove(0);
        let hook = cf.view().hook("on_request").unwrap();

        let answers: Vec<(u64, u64)> = VALUES.iter().map(|&v| host.request(v)).collect();
        assert_eq!(answers, reference, "{expect:?}: responses");
        assert_eq!(
            classes(&cf, published.map_ids[0]),
            ref_map,
            "{expect:?}: every side effect exactly once"
        );
        let status = hook_status(cf.transport(), &cf.view().info, hook.index).unwrap();
        assert_eq!(status.failures, 0, "{expect:?}: {status:?}");
        assert!(status.deopts > 0, "{expect:?}: {status:?}");
        assert!(
            status.deopts <= VALUES.len() as u64,
            "{expect:?}: {status:?}"
        );
        host.kill();
    }
}
