//! Cross-sandbox calls between real processes: a storage sandbox in a child process, the
//! caller in this one. Each test uses its own plan file and its own slots (attached services
//! are per process and never unmapped).

mod common;

use common::{cache_eim, extension, Storage};
use rdx_control::{create_codeflow, AttachOptions};
use rdx_runtime::{HookSpec, Runtime};
use rdx_xcall::call::{call, xcall_call, CallError};
use rdx_xcall::service::Service;
use rdx_xcall::{attach, errno, XcallError};
use rdx_xcall_control::{deploy_export, DeployError};
use rdx_xcall_plan::{PlanError, Target};
use std::time::{Duration, Instant};

/// Not a test: the child process's body (does nothing unless started by `Storage::start`).
#[test]
fn child() {
    common::child_main();
}

fn deploy_storage(storage: &Storage, exports: &[(&str, &str)]) {
    let mut cf = create_codeflow(&storage.address, AttachOptions::default()).unwrap();
    cf.deploy("put", &extension("xcall/storage", "put"), None, None)
        .unwrap();
    for (entry, prog) in exports {
        let obj = if *entry == "lookup" || *entry == "empty" {
            "xcall/storage"
        } else {
            "xcall/misbehave"
        };
        deploy_export(&mut cf, entry, &extension(obj, prog), None).unwrap();
    }
}

#[repr(C)]
#[derive(Default, Debug)]
struct Request {
    key: u64,
    value: u64,
    source: u64,
}

#[test]
fn miss_path_calls_storage_directly_even_when_it_is_stopped() {
    let mut storage = Storage::start("sigstop", 1);
    deploy_storage(&storage, &[("lookup", "lookup")]);
    assert_eq!(storage.cmd("put 7 700"), "ok 1");
    assert_eq!(storage.cmd("put 8 800"), "ok 1");

    // The caller: its own sandbox in slot 2, the storage mapped at slot 1's address.
    let cache = Service::builder(&storage.plan, "cache")
        .slot(2)
        .runtime(
            Runtime::builder()
                .eim_spec(cache_eim(1))
                .hook("on_get", HookSpec::new(24)),
        )
        .build()
        .unwrap();
    cache
        .runtime()
        .register_function("call_storage_lookup", 1100, xcall_call)
        .unwrap();
    let svc = attach::attach(&storage.plan, 1).unwrap();
    assert_eq!(svc.name, "storage");
    let mut cf = create_codeflow(&cache.address(), AttachOptions::default()).unwrap();
    cf.deploy("on_get", &extension("xcall/cache", "on_get"), None, None)
        .unwrap();
    let hook = cache.runtime().hook("on_get").unwrap();

    // Host code calling the entry directly.
    let mut out = [0u8; 8];
    let lookup = storage.plan.target("storage", "lookup").unwrap();
    assert_eq!(lookup, Target::new(1, 0));
    assert_eq!(call(lookup, &7u64.to_le_bytes(), &mut out), Ok(1));
    assert_eq!(u64::from_le_bytes(out), 700);
    assert_eq!(call(lookup, &9u64.to_le_bytes(), &mut out), Ok(0));
    assert_eq!(out, [0; 8], "a callee that does not reply leaves zeros");

    // The cache's extension: miss -> storage, then hit.
    let mut r = Request {
        key: 7,
        ..Default::default()
    };
    hook.run(&mut r);
    assert_eq!((r.value, r.source), (700, 2), "{r:?}");
    hook.run(&mut r);
    assert_eq!(
        (r.value, r.source),
        (700, 1),
        "second lookup hits the cache"
    );

    // Stop the storage process: calls still complete, on this thread.
    storage.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(20));
    let start = Instant::now();
    let mut r = Request {
        key: 8,
        ..Default::default()
    };
    hook.run(&mut r);
    assert_eq!((r.value, r.source), (800, 2), "{r:?}");
    let mut r = Request {
        key: 10,
        ..Default::default()
    };
    hook.run(&mut r);
    assert_eq!(r.source, 3, "absent in storage");
    for _ in 0..1000 {
        assert_eq!(call(lookup, &7u64.to_le_bytes(), &mut out), Ok(1));
    }
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "1002 calls took {:?} with the callee stopped",
        start.elapsed()
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", storage.child.id())).unwrap();
    assert!(
        status.contains("State:\tT"),
        "storage is still stopped: {status}"
    );
    storage.signal(libc::SIGCONT);
    assert_eq!(storage.cmd("put 11 1100"), "ok 1");
    assert_eq!(call(lookup, &11u64.to_le_bytes(), &mut out), Ok(1));
    assert_eq!(u64::from_le_bytes(out), 1100);
    let _ = cache.runtime().unlink();
}

#[test]
fn bad_input_gets_typed_errors() {
    let mut storage = Storage::start("bad", 3);
    deploy_storage(&storage, &[("lookup", "lookup")]);
    let mut out = [0u8; 8];
    let key = 1u64.to_le_bytes();
    // Not attached in this process yet.
    assert_eq!(
        call(Target::new(3, 0), &key, &mut out),
        Err(CallError::NotMapped)
    );
    attach::attach(&storage.plan, 3).unwrap();
    assert_eq!(call(Target::new(3, 0), &key, &mut out), Ok(0));
    // Not on the allow-list.
    assert_eq!(
        call(Target::new(3, 9), &key, &mut out),
        Err(CallError::NotExported)
    );
    // Exported, nothing deployed.
    assert_eq!(
        call(Target::new(3, 1), &key, &mut out),
        Err(CallError::NotDeployed)
    );
    // Larger than declared.
    assert_eq!(
        call(Target::new(3, 0), &[0u8; 16], &mut out),
        Err(CallError::ArgsTooLarge)
    );
    // Shorter than declared: zero-padded, not read past the caller's buffer.
    assert_eq!(call(Target::new(3, 0), &[], &mut out), Ok(0));
    // Not a target at all.
    // SAFETY: valid buffers.
    let r = unsafe { xcall_call(12345, key.as_ptr() as u64, 8, out.as_mut_ptr() as u64, 8) };
    assert_eq!(r, errno::BAD_TARGET);
    // A reply larger than the caller's buffer: the callee's reply fails, the call does not.
    assert_eq!(storage.cmd_put(1, 5), "ok 1");
    let mut small = [0u8; 4];
    assert_eq!(call(Target::new(3, 0), &key, &mut small), Ok(1));
    assert_eq!(small, [0; 4]);

    // Attaching: an empty slot, a slot outside the plan, an address already in use.
    assert!(matches!(
        attach::attach(&storage.plan, 5),
        Err(XcallError::Plan(PlanError::EmptySlot(5)))
    ));
    assert!(matches!(
        attach::attach(&storage.plan, 200),
        Err(XcallError::Plan(PlanError::NoSuchSlot { slot: 200, .. }))
    ));
    let squatter = Service::builder(&storage.plan, "squatter")
        .slot(4)
        .build()
        .unwrap();
    // The squatter's own region occupies slot 4's address in this process.
    assert!(matches!(
        attach::attach(&storage.plan, 4),
        Err(XcallError::AddressClash { slot: 4, .. })
    ));
    // A live slot cannot be claimed twice.
    assert!(matches!(
        Service::builder(&storage.plan, "again").slot(4).build(),
        Err(XcallError::Plan(PlanError::SlotTaken { slot: 4, .. }))
    ));
    let _ = squatter.runtime().unlink();
    drop(squatter);

    // Deploy-time refusals: a helper with no cross-sandbox meaning, and a caller passing
    // more than its capability allows.
    let mut cf = create_codeflow(&storage.address, AttachOptions::default()).unwrap();
    let printk = extension("xcall/misbehave", "uses_printk");
    assert!(matches!(
        rdx_xcall_control::check_callee_helpers(printk.insns()),
        Err(DeployError::UnsupportedHelper { id: 6, .. })
    ));
    assert!(deploy_export(&mut cf, "slow", &printk, None).is_err());
    // An export whose EIM context is larger than the arguments the sandbox declares: the
    // callee would read past the caller's buffer, so it is refused before verification.
    let wide = Service::builder(&storage.plan, "wide")
        .slot(12)
        .export("lookup", 4)
        .runtime(Runtime::builder().eim_spec(common::storage_eim()))
        .build()
        .unwrap();
    let mut wcf = create_codeflow(&wide.address(), AttachOptions::default()).unwrap();
    assert!(matches!(
        deploy_export(
            &mut wcf,
            "lookup",
            &extension("xcall/storage", "lookup"),
            None
        ),
        Err(DeployError::ContextTooLarge {
            eim: 8,
            declared: 4,
            ..
        })
    ));
    let _ = wide.runtime().unlink();
    drop(wide);
    // A caller whose capability names another service cannot call this one...
    let other = Service::builder(&storage.plan, "cache-other")
        .slot(9)
        .runtime(
            Runtime::builder()
                .eim_spec(cache_eim(3))
                .hook("on_get", HookSpec::new(24)),
        )
        .build()
        .unwrap();
    let mut ocf = create_codeflow(&other.address(), AttachOptions::default()).unwrap();
    let err = ocf
        .deploy("on_get", &extension("xcall/cache", "on_get"), None, None)
        .unwrap_err();
    assert!(err.to_string().contains("call_storage_lookup"), "{err}");
    // ...and one whose capability names it cannot pass more than the entry declares.
    let cache = Service::builder(&storage.plan, "cache-bad")
        .slot(6)
        .runtime(
            Runtime::builder()
                .eim_spec(cache_eim(1))
                .hook("on_get", HookSpec::new(24)),
        )
        .build()
        .unwrap();
    cache
        .runtime()
        .register_function("call_storage_lookup", 1100, xcall_call)
        .unwrap();
    let mut ccf = create_codeflow(&cache.address(), AttachOptions::default()).unwrap();
    ccf.deploy("on_get", &extension("xcall/cache", "on_get"), None, None)
        .unwrap();
    let err = ccf
        .deploy("on_get", &extension("xcall/cache", "oversized"), None, None)
        .unwrap_err();
    assert!(
        err.to_string().contains("size 16 must be within [1, 8]"),
        "{err}"
    );
    for s in [&other, &cache] {
        let _ = s.runtime().unlink();
    }
}

impl Storage {
    fn cmd_put(&mut self, k: u64, v: u64) -> String {
        self.cmd(&format!("put {k} {v}"))
    }
}

#[test]
fn callee_out_of_budget_returns_an_error_and_both_keep_serving() {
    let mut storage = Storage::start("budget", 7);
    deploy_storage(&storage, &[("lookup", "lookup"), ("spin", "spin")]);
    attach::attach(&storage.plan, 7).unwrap();
    let mut out = [0u8; 8];
    let spin = storage.plan.target("storage", "spin").unwrap();
    for _ in 0..3 {
        assert_eq!(
            call(spin, &3u64.to_le_bytes(), &mut out),
            Err(CallError::Budget)
        );
    }
    assert_eq!(storage.cmd_put(5, 55), "ok 1");
    assert_eq!(
        call(Target::new(7, 0), &5u64.to_le_bytes(), &mut out),
        Ok(1)
    );
    assert_eq!(u64::from_le_bytes(out), 55);
    // Alternating targets: each call runs its own entry (the thread remembers the last one).
    for _ in 0..3 {
        assert_eq!(
            call(spin, &3u64.to_le_bytes(), &mut out),
            Err(CallError::Budget)
        );
        assert_eq!(
            call(Target::new(7, 0), &5u64.to_le_bytes(), &mut out),
            Ok(1)
        );
        assert_eq!(u64::from_le_bytes(out), 55);
    }
}

#[test]
fn callee_replaced_mid_call_finishes_on_its_version() {
    let storage = Storage::start("replace", 8);
    deploy_storage(&storage, &[("slow", "slow_v1")]);
    attach::attach(&storage.plan, 8).unwrap();
    let slow = storage.plan.target("storage", "slow").unwrap();
    let mut out = [0u8; 8];
    assert_eq!(call(slow, &0u64.to_le_bytes(), &mut out), Ok(1));

    let in_flight = std::thread::spawn(move || {
        let mut out = [0u8; 8];
        let r = call(slow, &1_000_000_000u64.to_le_bytes(), &mut out);
        (r, u64::from_le_bytes(out), Instant::now())
    });
    std::thread::sleep(Duration::from_millis(100));
    let mut cf = create_codeflow(&storage.address, AttachOptions::default()).unwrap();
    let v2 = deploy_export(
        &mut cf,
        "slow",
        &extension("xcall/misbehave", "slow_v2"),
        None,
    )
    .unwrap();
    assert_eq!(v2.previous_version, 1);
    // New calls run the new version at once...
    assert_eq!(call(slow, &0u64.to_le_bytes(), &mut out), Ok(2));
    // ...while reclaiming the old one waits for the caller still inside it.
    let reclaimed = cf.reclaim(0).unwrap();
    let reclaimed_at = Instant::now();
    assert_eq!(reclaimed.code_versions, 1);
    let (r, replied, finished_at) = in_flight.join().unwrap();
    assert_eq!(
        (r, replied),
        (Ok(1), 1),
        "the in-flight call finished on version 1"
    );
    assert!(
        finished_at <= reclaimed_at,
        "reclaim returned before the caller left v1"
    );
}

#[test]
fn serialized_entry_admits_one_caller_at_a_time() {
    let storage = Storage::start("serial", 10);
    deploy_storage(&storage, &[("serial", "slow_v1"), ("slow", "slow_v1")]);
    attach::attach(&storage.plan, 10).unwrap();
    let serial = storage.plan.target("storage", "serial").unwrap();
    let slow = storage.plan.target("storage", "slow").unwrap();
    let holder = std::thread::spawn(move || {
        let mut out = [0u8; 8];
        call(serial, &1_000_000_000u64.to_le_bytes(), &mut out)
    });
    // Until the holder is inside, our calls may still get the entry; once it is, they are
    // refused after the wait limit. An ordinary entry is never refused.
    let mut out = [0u8; 8];
    let deadline = Instant::now() + Duration::from_millis(900);
    let mut refused = false;
    while !refused && Instant::now() < deadline {
        match call(serial, &0u64.to_le_bytes(), &mut out) {
            Err(CallError::Busy) => refused = true,
            r => assert_eq!(r, Ok(1)),
        }
        assert_eq!(call(slow, &0u64.to_le_bytes(), &mut out), Ok(1));
    }
    assert!(
        refused,
        "a second caller got the serialised entry while it was held"
    );
    assert_eq!(holder.join().unwrap(), Ok(1));
    assert_eq!(call(serial, &0u64.to_le_bytes(), &mut out), Ok(1));
}

#[test]
fn held_entry_waits_for_the_release_then_runs() {
    use rdx_region::layout::{offsets, ACTIVE_HOLD};
    use rdx_transport::Transport;
    let storage = Storage::start("hold", 11);
    deploy_storage(&storage, &[("lookup", "lookup")]);
    let svc = attach::attach(&storage.plan, 11).unwrap();
    let lookup = Target::new(11, 0);
    let mut out = [0u8; 8];
    assert_eq!(call(lookup, &1u64.to_le_bytes(), &mut out), Ok(0));
    // Play a control plane's bubble: set the hold bit, release it later.
    let t =
        rdx_transport::shm::ShmTransport::open(storage.address.trim_start_matches("shm:")).unwrap();
    let at = svc.info.hook_offset(svc.exports_info[0].hook_index) + offsets::HOOK_ACTIVE;
    let timeouts_at = at - offsets::HOOK_ACTIVE + offsets::HOOK_HOLD_TIMEOUTS;
    let word = t.read_u64(at).unwrap();
    let hold_timeout = Duration::from_nanos(svc.info.hold_timeout_ns);
    assert_eq!(
        hold_timeout,
        Duration::from_millis(10),
        "the runtime's default"
    );
    let t = std::sync::Arc::new(t);
    let mut held = |release_after: Duration| {
        t.write_u64(at, word | ACTIVE_HOLD).unwrap();
        let t2 = t.clone();
        // Timed from before the releaser exists: the call cannot return before the release
        // or the hold timeout, however this thread is scheduled.
        let start = Instant::now();
        let release = std::thread::spawn(move || {
            std::thread::sleep(release_after);
            t2.write_u64(at, word).unwrap();
        });
        assert_eq!(call(lookup, &1u64.to_le_bytes(), &mut out), Ok(0));
        let waited = start.elapsed();
        release.join().unwrap();
        waited
    };
    // Released within the hold timeout: the caller waits for it.
    let waited = held(Duration::from_millis(3));
    assert!(waited >= Duration::from_millis(3), "waited only {waited:?}");
    // Never released in time: the caller gives up after the hold timeout, runs the published
    // version and counts it.
    let before = t.read_u64(timeouts_at).unwrap();
    let waited = held(Duration::from_secs(2));
    assert!(
        waited >= hold_timeout && waited < Duration::from_secs(2),
        "waited {waited:?}"
    );
    assert_eq!(t.read_u64(timeouts_at).unwrap(), before + 1);
}

/// A caller thread takes a thread slot in the callee's region on its first call and gives it
/// back when it ends: more short-lived caller threads than the region has slots all get one
/// (the storage's own thread holds another), and none of them still owns a slot, or left its
/// epoch odd, once they are gone.
#[test]
fn caller_threads_give_their_thread_slots_back() {
    use std::sync::atomic::Ordering;
    let mut storage = Storage::start("threads", 14);
    deploy_storage(&storage, &[("lookup", "lookup")]);
    assert_eq!(storage.cmd_put(3, 33), "ok 1");
    let svc = attach::attach(&storage.plan, 14).unwrap();
    let slots = svc.info.thread_slots;
    let lookup = Target::new(14, 0);
    let mut owners = std::collections::HashSet::new();
    for _ in 0..slots + 4 {
        let tid = std::thread::spawn(move || {
            let mut out = [0u8; 8];
            assert_eq!(call(lookup, &3u64.to_le_bytes(), &mut out), Ok(1));
            assert_eq!(u64::from_le_bytes(out), 33);
            // SAFETY: gettid has no preconditions.
            (unsafe { libc::gettid() }) as u64
        })
        .join()
        .unwrap();
        owners.insert(tid + 1);
    }
    for i in 0..slots {
        let ts = svc.base + svc.info.thread_offset(i);
        // SAFETY: thread slot `i` of the attached region, which stays mapped.
        let ts = unsafe { &*(ts as *const rdx_region::layout::ThreadSlot) };
        let owner = ts.owner.load(Ordering::Acquire);
        assert!(!owners.contains(&owner), "slot {i} still owned by {owner}");
        if owner == 0 {
            assert_eq!(ts.epoch.load(Ordering::Acquire) % 2, 0, "slot {i}");
        }
    }
}

/// Another local user who can write the plan, or a region it lists, would choose code this
/// process maps executable: both are refused (`docs/security.md`).
#[test]
fn plans_and_regions_of_another_user_are_refused() {
    use rdx_transport::region_file::UntrustedRegion;
    use rdx_xcall_plan::plan::{Plan, PlanSpec};
    let Some(stranger) = rdx_test_support::Stranger::new("xcall plan and region owner checks")
    else {
        return;
    };
    let planted = common::plan_path("planted");
    let _ = std::fs::remove_file(&planted);
    stranger.must(&format!(
        "printf x > {} && chmod 0600 {0}",
        planted.display()
    ));
    let e = Plan::create(&planted, PlanSpec::default()).unwrap_err();
    assert!(
        matches!(
            &e,
            PlanError::Untrusted {
                source: UntrustedRegion::Owner { owner, .. },
                ..
            } if *owner == stranger.uid()
        ),
        "{e}"
    );
    assert_eq!(
        std::fs::read(&planted).unwrap(),
        b"x",
        "the planted file is untouched"
    );
    std::fs::remove_file(&planted).unwrap();

    let storage = Storage::start("foreign-region", 12);
    let region = storage.plan.slot(12).unwrap().path;
    std::os::unix::fs::chown(&region, Some(stranger.uid()), None).unwrap();
    let Err(e) = attach::attach(&storage.plan, 12) else {
        panic!("a region of another user was attached");
    };
    assert!(
        matches!(
            &e,
            XcallError::Plan(PlanError::Untrusted {
                source: UntrustedRegion::Owner { .. },
                ..
            })
        ),
        "{e}"
    );
    std::os::unix::fs::chown(&region, Some(0), None).unwrap();
}
