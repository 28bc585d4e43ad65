//! The runtime's API within one process: declarations and their errors, multi-threaded runs
//! and counters, thread-slot exhaustion, epochs, teardown. Code is placed in the arena
//! through a second (control-plane) mapping of the region, as a control plane would.

#![cfg(target_arch = "x86_64")]

use rdx_region::layout::{active_word, offsets, RegionState, SectionId};
use rdx_runtime::{HookSpec, Runtime, RuntimeError};
use rdx_transport::shm::ShmTransport;
use rdx_transport::Transport;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

#[repr(C)]
struct Ctx {
    value: u64,
    out: u64,
}

/// `mov eax, 42; ret` (hand-assembled stand-in for JIT output).
const RET_42: &[u8] = &[0xb8, 42, 0, 0, 0, 0xc3];

fn runtime(slots: u32) -> Runtime {
    Runtime::builder()
        .thread_slots(slots)
        .code_size(1 << 16)
        .scratch_size(1 << 18)
        .hook("h", HookSpec::for_context::<Ctx>().default_return(5))
        .build()
        .unwrap()
}

/// Places `code` at the start of the arena and publishes it on hook `h` (version 1).
fn deploy(rt: &Runtime, code: &[u8]) -> ShmTransport {
    let t = ShmTransport::open(rt.path()).unwrap();
    let at = t.info().section(SectionId::Code).offset;
    t.write(at, code).unwrap();
    let slot = t.info().hook_offset(rt.hook("h").unwrap().index());
    t.compare_and_swap(slot + offsets::HOOK_ACTIVE, 0, active_word(1, at as u32))
        .unwrap();
    t
}

fn cleanup(rt: &Runtime) {
    rt.teardown(Duration::from_millis(100)).unwrap();
    rt.unlink().unwrap();
}

#[test]
fn declarations_are_checked() {
    let rt = Runtime::builder()
        .max_hooks(2)
        .code_size(1 << 16)
        .scratch_size(1 << 18)
        .build()
        .unwrap();
    rt.declare_hook("a", HookSpec::new(8)).unwrap();
    assert!(matches!(
        rt.declare_hook("a", HookSpec::new(8)),
        Err(RuntimeError::HookExists(_))
    ));
    assert!(matches!(
        rt.declare_hook("", HookSpec::new(8)),
        Err(RuntimeError::BadName(_))
    ));
    assert!(matches!(
        rt.declare_hook(&"x".repeat(41), HookSpec::new(8)),
        Err(RuntimeError::BadName(_))
    ));
    rt.declare_hook("b", HookSpec::new(8)).unwrap();
    assert!(matches!(
        rt.declare_hook("c", HookSpec::new(8)),
        Err(RuntimeError::TooManyHooks(2))
    ));
    assert!(matches!(rt.hook("zzz"), Err(RuntimeError::NoSuchHook(_))));
    unsafe extern "C" fn f(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
        0
    }
    rt.register_function("f", 1000, f).unwrap();
    assert!(matches!(
        rt.register_function("g", 1000, f),
        Err(RuntimeError::BadId { id: 1000, .. })
    ));
    assert!(
        matches!(
            rt.register_function("g", 1, f),
            Err(RuntimeError::BadId { id: 1, .. })
        ),
        "built-in helper id"
    );
    assert!(matches!(
        rt.register_function("f", 1001, f),
        Err(RuntimeError::Duplicate { .. })
    ));
    assert!(matches!(
        rt.register_function("g", 1 << 20, f),
        Err(RuntimeError::BadId { .. })
    ));
    assert_eq!(rt.hooks(), vec!["a", "b"]);
    cleanup(&rt);
}

#[test]
fn fixed_base_address_clash_is_an_error() {
    let rt = runtime(2);
    let taken = rt.base_address();
    let r = Runtime::builder()
        .code_size(1 << 16)
        .scratch_size(1 << 18)
        .base_address(taken)
        .path(format!("{}-clash", rt.path().display()))
        .build();
    assert!(matches!(r, Err(RuntimeError::AddressClash { .. })), "{r:?}");
    let _ = std::fs::remove_file(format!("{}-clash", rt.path().display()));
    cleanup(&rt);
}

#[test]
fn threads_run_a_hook_concurrently_and_counters_add_up() {
    let rt = runtime(8);
    let h = rt.hook("h").unwrap();
    let mut c = Ctx { value: 0, out: 0 };
    assert_eq!(h.run(&mut c), 5, "empty hook returns its default");
    let _cp = deploy(&rt, RET_42);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let h = rt.hook("h").unwrap();
                for _ in 0..10_000 {
                    assert_eq!(h.run(&mut Ctx { value: 0, out: 0 }), 42);
                }
            });
        }
    });
    let st = h.stats();
    assert_eq!(st.runs, 40_000);
    assert!(st.timed_runs >= 4 * (10_000 / 64), "{st:?}");
    assert_eq!((st.failures, st.errors), (0, 0));
    cleanup(&rt);
}

#[test]
fn exhausted_thread_slots_make_the_hook_empty_and_count() {
    let rt = runtime(1);
    let _cp = deploy(&rt, RET_42);
    // A thread that ran and exited gives its slot back. Join it explicitly: the scope's
    // implicit wait ends when the closure returns, before the thread-local destructor that
    // returns the slot has run; a join waits for the thread itself.
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(rt.hook("h").unwrap().run(&mut Ctx { value: 0, out: 0 }), 42))
            .join()
            .unwrap();
    });
    let h = rt.hook("h").unwrap();
    assert_eq!(
        h.run(&mut Ctx { value: 0, out: 0 }),
        42,
        "this thread takes the only slot"
    );
    std::thread::scope(|s| {
        s.spawn(|| assert_eq!(rt.hook("h").unwrap().run(&mut Ctx { value: 0, out: 0 }), 5));
    });
    assert_eq!(h.stats().errors, 1);
    cleanup(&rt);
}

static OBSERVED_EPOCH: AtomicU64 = AtomicU64::new(0);
static CP: OnceLock<(ShmTransport, u64)> = OnceLock::new();

/// A host function that reads its own thread's epoch word through the control plane's
/// mapping while extension code is running.
unsafe extern "C" fn read_epoch(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let (t, off) = CP.get().unwrap();
    OBSERVED_EPOCH.store(t.read_u64(*off).unwrap(), Ordering::SeqCst);
    7
}

#[test]
fn epoch_is_odd_exactly_while_extension_code_runs() {
    let rt = runtime(1);
    rt.register_function("read_epoch", 1000, read_epoch)
        .unwrap();
    // `movabs rax, read_epoch; jmp rax`: the program tail-jumps into the host function.
    let mut code = vec![0x48, 0xb8];
    code.extend((read_epoch as *const () as u64).to_le_bytes());
    code.extend([0xff, 0xe0]);
    let cp = deploy(&rt, &code);
    let epoch_off = cp.info().thread_offset(0) + offsets::THREAD_EPOCH;
    CP.set((cp, epoch_off)).ok().unwrap();
    let h = rt.hook("h").unwrap();
    for i in 0..3u64 {
        assert_eq!(h.run(&mut Ctx { value: 0, out: 0 }), 7);
        let inside = OBSERVED_EPOCH.load(Ordering::SeqCst);
        assert_eq!(inside % 2, 1, "odd inside");
        let (t, off) = CP.get().unwrap();
        assert_eq!(t.read_u64(*off).unwrap(), inside + 1, "even after, run {i}");
    }
    cleanup(&rt);
}

#[test]
fn teardown_stops_extensions_and_marks_the_region() {
    let rt = runtime(2);
    let cp = deploy(&rt, RET_42);
    let h = rt.hook("h").unwrap();
    assert_eq!(h.run(&mut Ctx { value: 0, out: 0 }), 42);
    rt.register().unwrap();
    assert_eq!(
        cp.read_u64(offsets::HEADER_STATE).unwrap(),
        RegionState::Registered as u64
    );
    assert!(
        rt.teardown(Duration::from_millis(100)).unwrap(),
        "no thread inside"
    );
    assert_eq!(
        cp.read_u64(offsets::HEADER_STATE).unwrap(),
        RegionState::TornDown as u64
    );
    assert_eq!(h.run(&mut Ctx { value: 0, out: 0 }), 5);
    assert!(matches!(
        rt.declare_hook("late", HookSpec::new(8)),
        Err(RuntimeError::TornDown)
    ));
    rt.unlink().unwrap();
}

#[test]
fn reinit_of_the_same_file_bumps_the_incarnation() {
    let first = runtime(2);
    let path = first.path().to_path_buf();
    let inc = |rt: &Runtime| rt.region().read_u64(offsets::HEADER_INCARNATION).unwrap();
    assert_eq!(inc(&first), 1);
    drop(first);
    let second = Runtime::builder()
        .path(&path)
        .code_size(1 << 16)
        .scratch_size(1 << 18)
        .build()
        .unwrap();
    assert_eq!(inc(&second), 2);
    cleanup(&second);
}

static NESTED: OnceLock<(Runtime, ShmTransport, u64)> = OnceLock::new();
static NESTED_EPOCH: AtomicU64 = AtomicU64::new(0);

/// A host function that runs another hook of the same runtime, then records this thread's
/// epoch word as the outer run sees it after the nested run.
unsafe extern "C" fn run_inner_hook(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let (rt, t, off) = NESTED.get().unwrap();
    let r = rt.hook("inner").unwrap().run(&mut Ctx { value: 0, out: 0 });
    NESTED_EPOCH.store(t.read_u64(*off).unwrap(), Ordering::SeqCst);
    r + 1
}

#[test]
fn a_hook_run_from_inside_a_run_nests() {
    let rt = Runtime::builder()
        .thread_slots(1)
        .code_size(1 << 16)
        .scratch_size(1 << 18)
        .hook("h", HookSpec::for_context::<Ctx>().default_return(5))
        .hook("inner", HookSpec::for_context::<Ctx>().default_return(6))
        .build()
        .unwrap();
    rt.register_function("run_inner_hook", 1001, run_inner_hook)
        .unwrap();
    let cp = ShmTransport::open(rt.path()).unwrap();
    let code = cp.info().section(SectionId::Code).offset;
    // Outer: `movabs rax, run_inner_hook; jmp rax`. Inner (16 bytes on): `mov eax, 42; ret`.
    let mut outer = vec![0x48, 0xb8];
    outer.extend((run_inner_hook as *const () as u64).to_le_bytes());
    outer.extend([0xff, 0xe0]);
    cp.write(code, &outer).unwrap();
    cp.write(code + 16, RET_42).unwrap();
    for (hook, at) in [("h", code), ("inner", code + 16)] {
        let slot = cp.info().hook_offset(rt.hook(hook).unwrap().index());
        cp.compare_and_swap(slot + offsets::HOOK_ACTIVE, 0, active_word(1, at as u32))
            .unwrap();
    }
    let epoch_off = cp.info().thread_offset(0) + offsets::THREAD_EPOCH;
    assert!(NESTED.set((rt.clone(), cp, epoch_off)).is_ok(), "set once");
    let (_, cp, _) = NESTED.get().unwrap();
    let h = rt.hook("h").unwrap();
    for _ in 0..3 {
        assert_eq!(h.run(&mut Ctx { value: 0, out: 0 }), 43);
        assert_eq!(
            NESTED_EPOCH.load(Ordering::SeqCst) % 2,
            1,
            "still inside after the nested run"
        );
        assert_eq!(cp.read_u64(epoch_off).unwrap() % 2, 0, "outside after");
    }
    let (outer, inner) = (h.stats(), rt.hook("inner").unwrap().stats());
    assert_eq!((outer.runs, inner.runs), (3, 3));
    assert_eq!((outer.failures, inner.failures, outer.errors), (0, 0, 0));
    rt.teardown(Duration::from_millis(100)).unwrap();
    rt.unlink().unwrap();
}
