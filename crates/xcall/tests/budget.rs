//! The caller's instruction budget covers a cross-sandbox call, between real processes: the
//! storage sandbox (callee) in a child process, the caller sandbox in this one. The callee
//! `count` replies its progress on every iteration, so how far it got is visible even when a
//! budget stopped it; the caller reads its own remaining budget around the call through a host
//! function over [`rdx_runtime::current_run_state`].

mod common;

use common::{extension, Storage};
use rdx_control::{create_codeflow, AttachOptions};
use rdx_runtime::{HookSpec, Runtime};
use rdx_xcall::call::{call, xcall_call, CallError};
use rdx_xcall::service::Service;
use rdx_xcall::{attach, errno};
use rdx_xcall_control::deploy_export;
use rdx_xcall_plan::Target;

/// Slots of this test binary's plan (`bpf/xcall/budget.c` names the storage's).
const STORAGE_SLOT: u16 = 20;
const CALLER_SLOT: u16 = 21;
/// Export index of `spin` in [`common::EXPORTS`], where `count` is deployed.
const COUNT_EXPORT: u16 = 2;
/// The caller class's instruction limit (the callee's `spin` class allows 100000).
const CALLER_LIMIT: u64 = 20_000;

/// Not a test: the child process's body (does nothing unless started by `Storage::start`).
#[test]
fn child() {
    common::child_main();
}

/// `budget_left()`: the remaining budget of the run that calls it.
unsafe extern "C" fn budget_left(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    match rdx_runtime::current_run_state() {
        // SAFETY: the state of the run blocked in this host function.
        Some(state) => unsafe { (*state).budget },
        None => u64::MAX,
    }
}

fn caller_eim() -> String {
    let mut s = String::from(
        "version: 1\nhooks:\n  - name: on_call\n    context:\n      size: 48\n      fields:\n",
    );
    for (i, f) in ["n", "tail", "before", "after", "rc", "out"]
        .iter()
        .enumerate()
    {
        let access = if i < 2 { "read" } else { "read_write" };
        s += &format!(
            "        - {{ name: {f}, offset: {}, size: 8, access: {access} }}\n",
            i * 8
        );
    }
    s += "functions:\n";
    s += &rdx_xcall_plan::eim::call_function(
        "call_count",
        1100,
        Target::new(STORAGE_SLOT, COUNT_EXPORT),
        8,
        8,
    );
    s += "  - name: budget_left\n    id: 1101\n    description: The caller's remaining budget.\n";
    s += &format!(
        "classes:\n  - name: caller\n    hook: on_call\n    context: {{ read: [n, tail, before, after, rc, out], write: [before, after, rc, out] }}\n    functions: [call_count, budget_left]\n    helpers: []\n    instructions: \"< {CALLER_LIMIT}\"\n    xstate_bytes: 1048576\n"
    );
    s
}

#[repr(C)]
#[derive(Default, Debug)]
struct Charged {
    n: u64,
    tail: u64,
    before: u64,
    after: u64,
    rc: u64,
    out: u64,
}

#[test]
fn callers_budget_covers_the_call() {
    let storage = Storage::start("budget-cover", STORAGE_SLOT);
    let mut cf = create_codeflow(&storage.address, AttachOptions::default()).unwrap();
    deploy_export(&mut cf, "spin", &extension("xcall/budget", "count"), None).unwrap();

    let caller = Service::builder(&storage.plan, "caller")
        .slot(CALLER_SLOT)
        .runtime(
            Runtime::builder()
                .eim_spec(caller_eim())
                .hook("on_call", HookSpec::new(48)),
        )
        .build()
        .unwrap();
    let rt = caller.runtime();
    rt.register_function("call_count", 1100, xcall_call)
        .unwrap();
    rt.register_function("budget_left", 1101, budget_left)
        .unwrap();
    attach::attach(&storage.plan, STORAGE_SLOT).unwrap();
    let mut ccf = create_codeflow(&caller.address(), AttachOptions::default()).unwrap();
    ccf.deploy(
        "on_call",
        &extension("xcall/budget", "charged_call"),
        None,
        None,
    )
    .unwrap();
    let hook = rt.hook("on_call").unwrap();

    // From host code (no run): the callee gets its own class budget and gets this far.
    let target = Target::new(STORAGE_SLOT, COUNT_EXPORT);
    let mut out = [0u8; 8];
    assert_eq!(
        call(target, &u64::MAX.to_le_bytes(), &mut out),
        Err(CallError::Budget)
    );
    let alone = u64::from_le_bytes(out);
    assert!(alone > 1000, "the callee alone got to {alone}");

    // Enough budget: the call completes and the caller's budget goes down by exactly what the
    // callee spent, which grows linearly with the work it did.
    let mut spent = Vec::new();
    for n in [100u64, 200, 300] {
        let mut r = Charged {
            n,
            ..Default::default()
        };
        assert_eq!(hook.run(&mut r), 0);
        assert_eq!((r.rc, r.out), (1, n), "{r:?}");
        assert!(r.before < CALLER_LIMIT && r.after < r.before, "{r:?}");
        spent.push(r.before - r.after);
    }
    assert!(spent[0] >= 100, "{spent:?}");
    assert_eq!(spent[1] - spent[0], spent[2] - spent[1], "{spent:?}");
    assert_eq!(hook.stats().failures, 0);

    // A small budget: the same callee, asked to run for ever, stops within what the caller had
    // left (so it gets less far than alone), the caller's extension gets the error, its
    // budget is then 0 and its next loop back-edge stops it.
    let mut r = Charged {
        n: u64::MAX,
        tail: 5,
        ..Default::default()
    };
    hook.run(&mut r);
    assert_eq!(r.rc, errno::BUDGET, "{r:?}");
    assert_eq!(r.after, 0, "{r:?}");
    assert!(r.out > 0, "{r:?}");
    let per_iteration = (spent[1] - spent[0]) / 100;
    assert!(
        r.out * per_iteration <= r.before,
        "the callee ran {} iterations of {per_iteration} on a budget of {}",
        r.out,
        r.before
    );
    assert!(r.out < alone / 2, "{} vs {alone} alone", r.out);
    eprintln!(
        "callee spent {spent:?} for n = 100, 200, 300; on a caller budget of {} it got to \
         {} (alone, on its class budget: {alone})",
        r.before, r.out
    );
    assert_eq!(
        hook.stats().failures,
        1,
        "the caller stopped at its back-edge"
    );

    // Both keep serving: the next run has its full budget again.
    let mut r = Charged {
        n: 10,
        ..Default::default()
    };
    assert_eq!(hook.run(&mut r), 0);
    assert_eq!((r.rc, r.out), (1, 10), "{r:?}");
    assert_eq!(
        call(target, &3u64.to_le_bytes(), &mut out),
        Ok(1),
        "the callee serves host calls"
    );
    assert_eq!(u64::from_le_bytes(out), 3);
    let _ = caller.runtime().unlink();
}
