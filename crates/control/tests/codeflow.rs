//! CodeFlow against real host processes: deploy, upgrade, rollback, detach, map state,
//! leases, and the bad-input paths that must leave the host on its previous version.

mod common;

use common::{extension, state_dir, Host};
use rdx_control::registry::Registry;
use rdx_control::{create_codeflow, AttachOptions, ControlError, Unverified};
use std::time::Duration;

#[test]
fn deploy_upgrade_rollback_detach_across_processes() {
    let mut host = Host::start("cycle", &[]);
    assert_eq!(
        host.request(5),
        (0, 0),
        "nothing attached: the hook's default"
    );
    let reg = Registry::open(&state_dir("cycle")).unwrap();
    let mut cf = create_codeflow(&host.address(), AttachOptions::default()).unwrap();

    let a = extension("plus_one");
    let v1 = cf.deploy("on_request", &a, None, Some(&reg)).unwrap();
    assert_eq!(v1.version, 1);
    assert_eq!(host.request(5), (1, 6));

    let b = extension("times_two");
    let v2 = cf.deploy("on_request", &b, None, Some(&reg)).unwrap();
    assert_eq!((v2.version, v2.previous_version), (2, 1));
    assert_eq!(host.request(5), (2, 10));
    // Both versions share the `hits` map: three requests so far.
    assert_eq!(v1.map_ids[0], v2.map_ids[0]);
    let info = cf.view().info.clone();
    let hits = rdx_transport::xstate::open(cf.transport(), &info, v2.map_ids[0]).unwrap();
    let mut val = [0u8; 8];
    rdx_transport::xstate::lookup(cf.transport(), &hits.map, &0u32.to_le_bytes(), &mut val)
        .unwrap();
    assert_eq!(u64::from_le_bytes(val), 2);

    let back = cf.rollback("on_request", None).unwrap();
    assert_eq!((back.version, back.previous_version), (1, 2));
    assert_eq!(host.request(7), (1, 8));

    let fwd = cf.rollback("on_request", Some(2)).unwrap();
    assert_eq!(fwd.version, 2);
    assert_eq!(host.request(7), (2, 14));

    assert_eq!(cf.detach("on_request").unwrap(), 2);
    assert_eq!(host.request(7), (0, 0));
    assert_eq!(
        cf.detach("on_request").unwrap(),
        0,
        "detaching twice is a no-op"
    );

    // Re-attach by rollback after a detach: newest held version.
    assert_eq!(cf.rollback("on_request", None).unwrap().version, 2);
    assert_eq!(host.request(1), (2, 2));

    let versions = cf.versions("on_request").unwrap();
    assert_eq!(
        versions.iter().map(|v| v.version).collect::<Vec<_>>(),
        vec![2, 1]
    );
    assert!(versions[0].active && !versions[1].active);
    assert!(matches!(
        cf.rollback("on_request", Some(9)),
        Err(ControlError::NoSuchVersion { version: 9, .. })
    ));

    // The second deploy of the same bytecode comes from the registry's compile cache.
    let checked = cf.validate_code(&a, "on_request", None).unwrap();
    assert!(cf
        .jit_compile_code(&a, &checked, Some(&reg))
        .unwrap()
        .cached());
}

#[test]
fn a_rejected_program_never_reaches_the_node() {
    let mut host = Host::start("reject", &[]);
    let mut cf = create_codeflow(&host.address(), AttachOptions::default()).unwrap();
    cf.deploy("on_request", &extension("plus_one"), None, None)
        .unwrap();
    let before = cf.arena_usage().unwrap();
    let err = cf
        .deploy("on_request", &extension("out_of_bounds"), None, None)
        .unwrap_err();
    // The verifier's typed rule reaches the caller as the error's source.
    let ControlError::Verify { source, .. } = &err else {
        panic!("not a verifier rejection: {err}");
    };
    assert_eq!(source.rule, rdx_verifier::Rule::CtxAccess, "{err}");
    let chained = std::error::Error::source(&err).expect("the verifier's error is the source");
    assert_eq!(chained.to_string(), source.to_string());
    assert!(err.to_string().contains("on_request"), "{err}");
    assert_eq!(cf.arena_usage().unwrap(), before, "nothing allocated");
    assert_eq!(host.request(3), (1, 4), "still the previous version");
    // Unknown hook and class are named.
    let e = cf
        .deploy("nope", &extension("plus_one"), None, None)
        .unwrap_err();
    assert!(e.to_string().contains("no hook named \"nope\""), "{e}");
    let e = cf
        .deploy("on_request", &extension("plus_one"), Some("gold"), None)
        .unwrap_err();
    assert!(e.to_string().contains("no class \"gold\""), "{e}");
}

#[test]
fn a_verdict_is_refused_for_another_hook_or_program() {
    let mut host = Host::start("unverified", &[]);
    let mut cf = create_codeflow(&host.address(), AttachOptions::default()).unwrap();
    let plus_one = extension("plus_one");
    let times_two = extension("times_two");
    let checked = cf.validate_code(&plus_one, "on_request", None).unwrap();
    let refused = |e: ControlError, want: Unverified| match e {
        ControlError::NotVerifiedFor { mismatch, hook, .. } => {
            assert_eq!(mismatch, want);
            assert_eq!(hook, "on_request");
        }
        e => panic!("expected NotVerifiedFor {want:?}, got {e}"),
    };
    // One program's verdict does not compile another.
    refused(
        cf.jit_compile_code(&times_two, &checked, None).unwrap_err(),
        Unverified::Program,
    );
    let compiled = cf.jit_compile_code(&plus_one, &checked, None).unwrap();
    assert_eq!(
        (compiled.hook(), compiled.class()),
        ("on_request", checked.class())
    );
    let before = cf.arena_usage().unwrap();
    // Nor is its code written for another program or another hook.
    refused(
        cf.prepare_prog("on_request", &times_two, &compiled)
            .unwrap_err(),
        Unverified::Program,
    );
    refused(
        cf.prepare_prog("on_response", &plus_one, &compiled)
            .unwrap_err(),
        Unverified::Hook("on_response".into()),
    );
    assert_eq!(cf.arena_usage().unwrap(), before, "nothing allocated");
    assert_eq!(host.request(3), (0, 0), "nothing published");
    cf.deploy_prog("on_request", &plus_one, &compiled).unwrap();
    assert_eq!(host.request(3), (1, 4));
}

#[test]
fn the_library_records_every_publication_in_the_history() {
    use rdx_control::registry::HistoryAction;
    use rdx_control::{DeployObserver, DeployStage, DeployTimings, StageDone};
    let host = Host::start("history", &[]);
    let reg = Registry::open(&state_dir("history")).unwrap();
    let mut cf = create_codeflow(&host.address(), AttachOptions::default()).unwrap();
    cf.record_history(reg.clone(), "kv");
    let a = extension("plus_one").with_origin("plus_one.o");
    /// Stages as an observer hears them, with the timings observer inside.
    #[derive(Default)]
    struct Heard(Vec<(DeployStage, bool)>, DeployTimings);
    impl DeployObserver for Heard {
        fn started(&mut self, stage: DeployStage) {
            self.0.push((stage, false));
        }
        fn finished(&mut self, done: StageDone<'_>, took: std::time::Duration) {
            self.0.push((done.stage(), true));
            self.1.finished(done, took);
        }
    }
    let mut heard = Heard::default();
    let v1 = cf
        .deploy_observed("on_request", &a, None, None, &mut heard)
        .unwrap();
    let stages = [
        DeployStage::Verify,
        DeployStage::Compile,
        DeployStage::Prepare,
        DeployStage::Publish,
    ];
    let want: Vec<(DeployStage, bool)> = stages
        .iter()
        .flat_map(|&s| [(s, false), (s, true)])
        .collect();
    assert_eq!(heard.0, want);
    assert!(heard.1.validate_us > 0.0 && heard.1.publish_us > 0.0);
    // A version published with `tx` directly, as fleet and embedding programs do.
    let b = extension("times_two");
    let checked = cf.validate_code(&b, "on_request", None).unwrap();
    let compiled = cf.jit_compile_code(&b, &checked, None).unwrap();
    let p = cf.prepare_prog("on_request", &b, &compiled).unwrap();
    let v2 = cf.tx(vec![p]).unwrap().remove(0);
    cf.rollback("on_request", None).unwrap();
    cf.detach("on_request").unwrap();
    let history = reg.history_with_tiers("kv", Some("on_request")).unwrap();
    let actions: Vec<_> = history.iter().map(|(e, _)| e.action).collect();
    assert_eq!(
        actions,
        [
            HistoryAction::Deploy,
            HistoryAction::Deploy,
            HistoryAction::Rollback,
            HistoryAction::Detach
        ]
    );
    let (first, tier) = &history[0];
    assert_eq!(
        (first.version, first.program.as_str(), first.object.as_str()),
        (v1.version, "plus_one", "plus_one.o")
    );
    assert_eq!(*tier, Some(v1.tier));
    assert_eq!(history[1].0.generation, v2.generation);
    // The rollback names the program of the version it went back to.
    assert_eq!(
        (history[2].0.version, history[2].0.program.as_str()),
        (1, "plus_one")
    );
    assert_eq!(
        (history[3].0.version, history[3].0.previous_version),
        (0, 1)
    );
}

#[test]
fn a_verdict_covers_writable_initial_data_but_not_read_only_data() {
    use rdx_bpf::program::{MapDef, MapOrigin};
    use rdx_region::layout::MapType;
    let map = |read_only: bool, initial: u8| MapDef {
        name: ".data".into(),
        map_type: MapType::Array.into(),
        key_size: 4,
        value_size: 8,
        max_entries: 1,
        flags: 0,
        origin: MapOrigin::GlobalData,
        initial_value: Some(vec![initial; 8]),
        read_only,
    };
    let insns = extension("plus_one").insns().to_vec();
    let ext = |read_only, initial| {
        rdx_control::Extension::new("p", "s", insns.clone(), vec![map(read_only, initial)])
    };
    assert_eq!(ext(false, 1).code_hash(), ext(false, 2).code_hash());
    assert_ne!(ext(false, 1).hash(), ext(false, 2).hash());
    assert_ne!(ext(true, 1).code_hash(), ext(true, 2).code_hash());
}

#[test]
fn a_full_code_arena_is_refused_and_the_old_version_stays() {
    // 64 KiB of code arena: the smallest the layout allows.
    let mut host = Host::start("full", &["--code-size", "65536"]);
    let mut cf = create_codeflow(&host.address(), AttachOptions::default()).unwrap();
    cf.deploy("on_request", &extension("plus_one"), None, None)
        .unwrap();
    // A program larger than the arena.
    let big = rdx_control::Extension::new(
        "big",
        "rdx/on_request",
        {
            use rdx_bpf::isa::{AluOp, Insn, Operand, Reg, Size, Width};
            // Depends on the context at every step, so nothing folds away.
            let mut v = vec![
                Insn::Load {
                    size: Size::DW,
                    sign_extend: false,
                    dst: Reg(2),
                    base: Reg(1),
                    off: 0,
                },
                Insn::Alu {
                    width: Width::W64,
                    op: AluOp::Mov,
                    dst: Reg(0),
                    src: Operand::Reg(Reg(2)),
                },
            ];
            for i in 0..20_000 {
                let op = if i % 2 == 0 { AluOp::Mul } else { AluOp::Xor };
                v.push(Insn::Alu {
                    width: Width::W64,
                    op,
                    dst: Reg(0),
                    src: Operand::Reg(Reg(2)),
                });
            }
            v.push(Insn::Exit);
            v
        },
        vec![],
    );
    let err = cf.deploy("on_request", &big, None, None).unwrap_err();
    assert!(
        matches!(err, ControlError::ArenaFull { arena: "code", .. }),
        "{err}"
    );
    assert_eq!(host.request(3), (1, 4));
    // Small versions keep fitting: old ones are reclaimed as needed.
    let reg = Registry::open(&state_dir("full")).unwrap();
    for i in 0..40 {
        let ext = if i % 2 == 0 {
            extension("times_two")
        } else {
            extension("plus_one")
        };
        cf.deploy("on_request", &ext, None, Some(&reg)).unwrap();
    }
    assert_eq!(host.request(3), (1, 4));
}

#[test]
fn a_thread_stuck_in_extension_code_is_named_when_reclaiming() {
    use rdx_region::layout::offsets;
    let mut host = Host::start("stuck", &[]);
    let spec = AttachOptions {
        reclaim_timeout: Duration::from_millis(200),
        ..AttachOptions::default()
    };
    let mut cf = create_codeflow(&host.address(), spec).unwrap();
    cf.deploy("on_request", &extension("plus_one"), None, None)
        .unwrap();
    cf.deploy("on_request", &extension("times_two"), None, None)
        .unwrap();
    // A thread slot that is owned and inside extension code (odd epoch), and stays there.
    let info = cf.view().info.clone();
    let stuck = info.thread_slots - 1;
    let slot = info.thread_offset(stuck);
    cf.transport()
        .write_u64(slot + offsets::THREAD_OWNER, 1)
        .unwrap();
    cf.transport()
        .write_u64(slot + offsets::THREAD_EPOCH, 1)
        .unwrap();
    let err = cf.reclaim(0).unwrap_err();
    assert!(
        matches!(err, ControlError::ReclaimBlocked { thread_slot, waited_ms: 200 } if thread_slot == stuck),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("thread slot {stuck} stayed inside extension code")),
        "{err}"
    );
    // Once it leaves, the same reclamation frees the version no hook publishes.
    cf.transport()
        .write_u64(slot + offsets::THREAD_EPOCH, 2)
        .unwrap();
    assert_eq!(cf.reclaim(0).unwrap().code_versions, 1);
    cf.transport()
        .write_u64(slot + offsets::THREAD_OWNER, 0)
        .unwrap();
    assert_eq!(host.request(3), (2, 6));
}

#[test]
fn two_control_planes_contend_for_the_lease() {
    let mut host = Host::start("lease", &[]);
    let spec = AttachOptions {
        lease_ttl: Duration::from_millis(2500),
        ..AttachOptions::default()
    };
    let mut first = create_codeflow(&host.address(), spec.clone()).unwrap();
    let mut second = create_codeflow(&host.address(), spec).unwrap();
    first
        .deploy("on_request", &extension("plus_one"), None, None)
        .unwrap();
    let err = second
        .deploy("on_request", &extension("times_two"), None, None)
        .unwrap_err();
    match &err {
        ControlError::LeaseHeld {
            pid, remaining_ms, ..
        } => {
            assert_eq!(*pid, std::process::id());
            assert!(*remaining_ms > 0);
        }
        other => panic!("expected LeaseHeld, got {other}"),
    }
    assert_eq!(host.request(1), (1, 2));
    // A released lease is free at once.
    first.release().unwrap();
    let v = second
        .deploy("on_request", &extension("times_two"), None, None)
        .unwrap();
    assert_eq!(
        v.version, 2,
        "the second control plane recovered the first one's allocator"
    );
    assert_eq!(host.request(1), (2, 2));
    // A holder that stops renewing (as if it died) loses the lease once it expires.
    std::mem::forget(second);
    let mut third = create_codeflow(&host.address(), AttachOptions::default()).unwrap();
    assert!(matches!(
        third.detach("on_request"),
        Err(ControlError::LeaseHeld { .. })
    ));
    std::thread::sleep(Duration::from_millis(2600));
    assert_eq!(third.rollback("on_request", None).unwrap().version, 1);
    assert_eq!(host.request(1), (1, 2));
}

#[test]
fn a_dead_or_restarted_host_is_named() {
    let mut host = Host::start("dead", &[]);
    let mut cf = create_codeflow(&host.address(), AttachOptions::default()).unwrap();
    cf.deploy("on_request", &extension("plus_one"), None, None)
        .unwrap();
    // Keep the region file: the host dies without tearing down.
    let keep = host.path.with_extension("keep");
    std::fs::copy(&host.path, &keep).unwrap();
    host.kill();
    let err = cf
        .deploy("on_request", &extension("times_two"), None, None)
        .unwrap_err();
    assert!(
        matches!(
            err,
            ControlError::HostDead { .. } | ControlError::NotReady { .. }
        ),
        "{err}"
    );
    let err =
        create_codeflow(&format!("shm:{}", keep.display()), AttachOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            ControlError::HostDead { .. } | ControlError::NotReady { .. }
        ),
        "{err}"
    );
    let _ = std::fs::remove_file(&keep);
    assert!(create_codeflow("shm:/dev/shm/rdx-no-such-region", AttachOptions::default()).is_err());
    assert!(create_codeflow("rdma:somewhere", AttachOptions::default())
        .unwrap_err()
        .to_string()
        .contains("unknown transport scheme"));
}

#[test]
fn a_region_of_another_layout_version_is_refused() {
    let host = Host::start("version", &[]);
    let copy = host.path.with_extension("v9");
    let mut bytes = std::fs::read(&host.path).unwrap();
    bytes[8] = 9; // layout_version
    std::fs::write(&copy, &bytes).unwrap();
    let err =
        create_codeflow(&format!("shm:{}", copy.display()), AttachOptions::default()).unwrap_err();
    let _ = std::fs::remove_file(&copy);
    assert!(err.to_string().contains("layout version 9"), "{err}");
}

/// Code linked straight into the mapped arena (a `shm:` address) and code linked into a
/// buffer and written through a transport without a mapping (how the fabric attaches) are
/// the same bytes `link_code` produces for that offset, and both run in the host.
#[test]
fn mapped_and_unmapped_deploys_write_the_linked_code() {
    let mut host = Host::start("mapped", &[]);
    let address = host.address();
    let path = address
        .strip_prefix("shm:")
        .expect("shm address")
        .to_string();
    let a = extension("plus_one");
    let b = extension("times_two");

    let mut mapped = create_codeflow(&address, AttachOptions::default()).unwrap();
    let checked = mapped.validate_code(&a, "on_request", None).unwrap();
    let compiled = mapped.jit_compile_code(&a, &checked, None).unwrap();
    let v1 = mapped.deploy_prog("on_request", &a, &compiled).unwrap();
    assert_eq!(host.request(5), (1, 6));
    let expected = mapped
        .link_code(&compiled, &v1.map_ids, v1.code_offset)
        .unwrap();
    let mut written = vec![0u8; expected.len()];
    mapped
        .transport()
        .read(v1.code_offset, &mut written)
        .unwrap();
    assert_eq!(written, expected, "mapped deploy wrote other bytes");
    mapped.release().unwrap();

    let shm = rdx_transport::shm::ShmTransport::open(&path).unwrap();
    let mut unmapped =
        rdx_control::CodeFlow::attach(Box::new(shm), &address, AttachOptions::default()).unwrap();
    let checked = unmapped.validate_code(&b, "on_request", None).unwrap();
    let compiled = unmapped.jit_compile_code(&b, &checked, None).unwrap();
    let v2 = unmapped.deploy_prog("on_request", &b, &compiled).unwrap();
    assert_eq!(v2.version, 2);
    assert_eq!(host.request(5), (2, 10));
    let expected = unmapped
        .link_code(&compiled, &v2.map_ids, v2.code_offset)
        .unwrap();
    let mut written = vec![0u8; expected.len()];
    unmapped
        .transport()
        .read(v2.code_offset, &mut written)
        .unwrap();
    assert_eq!(written, expected, "unmapped deploy wrote other bytes");
    // A second unmapped deploy reuses the link buffer (a shorter program after a longer
    // one must not carry stale bytes).
    let v3 = unmapped
        .deploy_prog("on_request", &a, &{
            let c = unmapped.validate_code(&a, "on_request", None).unwrap();
            unmapped.jit_compile_code(&a, &c, None).unwrap()
        })
        .unwrap();
    assert_eq!(v3.version, 3);
    assert_eq!(host.request(5), (1, 6), "plus_one runs again");
}
