//! Elite (speculative) artifacts in the runtime: the per-thread run state is a
//! `DeoptRunState`, so elite code keeps its eBPF stack frames there without overrunning
//! anything; nested runs get their own; a failed guard is counted per hook. This test
//! process plays the control plane: it compiles with rdx-jit and writes the code into the
//! arena through a second mapping of the region.

#![cfg(target_arch = "x86_64")]

use rdx_jit::{
    branch_sites, Arch, Build, CompileOptions, Compiler, Expect, LinkTarget, Speculation,
};
use rdx_region::layout::{active_word, offsets, SectionId};
use rdx_runtime::{HookSpec, Runtime};
use rdx_transport::shm::ShmTransport;
use rdx_transport::Transport;
use std::sync::OnceLock;
use std::time::Duration;

#[repr(C)]
struct Ctx {
    value: u64,
    out: u64,
}

const DEFAULT: u64 = 5;

/// Two frames on the eBPF stack; the callee's branch on the value is the guard of the
/// elite build (speculated not taken). Generic result: `2v + 1` for `v <= 100`, `v + 7`
/// above.
const TWO_FRAMES: &str = "
    ldxdw %r2, [%r1]
    stxdw [%r10-8], %r2
    mov %r1, %r2
    call local sub
    ldxdw %r3, [%r10-8]
    add %r0, %r3
    exit
sub:
    stxdw [%r10-16], %r1
    jgt %r1, 100, big
    ldxdw %r0, [%r10-16]
    add %r0, 1
    exit
big:
    mov %r0, 7
    exit
";

fn generic_result(v: u64) -> u64 {
    if v <= 100 {
        2 * v + 1
    } else {
        v + 7
    }
}

/// Compiles `src` (elite: every conditional jump speculated not taken), links it at `at`
/// with `helper` as helper 1000, writes it there.
fn place(t: &ShmTransport, src: &str, elite: bool, at: u64, helper: Option<u64>) {
    let insns = rdx_bpf::asm::assemble(src).unwrap();
    let build = if elite {
        Build::Elite(Speculation {
            guards: branch_sites(&insns)
                .into_iter()
                .map(|pc| (pc, Expect::NotTaken))
                .collect(),
        })
    } else {
        Build::Generic
    };
    let opts = CompileOptions::new(Arch::X86_64, build);
    let (artifact, _) = Compiler::new(Arch::X86_64)
        .unwrap()
        .compile(&insns, &opts)
        .unwrap();
    assert_eq!(artifact.meta.deoptimises(), elite);
    let info = t.info().clone();
    let linked = rdx_jit::link::link(
        &artifact,
        LinkTarget::new(Arch::X86_64),
        &|s: &rdx_jit::Symbol| match s {
            rdx_jit::Symbol::Helper(1000) => helper,
            _ => None,
        },
        info.base_address + at,
    )
    .unwrap();
    t.write(at, &linked.code).unwrap();
}

fn publish(t: &ShmTransport, rt: &Runtime, hook: &str, version: u32, at: u64) {
    let slot = t.info().hook_offset(rt.hook(hook).unwrap().index());
    let old = t.read_u64(slot + offsets::HOOK_ACTIVE).unwrap();
    t.compare_and_swap(
        slot + offsets::HOOK_ACTIVE,
        old,
        active_word(version, at as u32),
    )
    .unwrap();
}

fn runtime(hooks: &[&str]) -> (Runtime, ShmTransport) {
    let mut b = Runtime::builder().code_size(1 << 16).scratch_size(1 << 18);
    for h in hooks {
        b = b.hook(h, HookSpec::for_context::<Ctx>().default_return(DEFAULT));
    }
    let rt = b.build().unwrap();
    let t = ShmTransport::open(rt.path()).unwrap();
    (rt, t)
}

fn cleanup(rt: &Runtime) {
    rt.teardown(Duration::from_millis(100)).unwrap();
    rt.unlink().unwrap();
}

#[test]
fn elite_code_runs_on_the_thread_run_state_and_failed_guards_are_counted() {
    let (rt, t) = runtime(&["h"]);
    let code = t.info().section(SectionId::Code).offset;
    let hook = rt.hook("h").unwrap();

    place(&t, TWO_FRAMES, false, code, None);
    publish(&t, &rt, "h", 1, code);
    for v in [0, 3, 100, 101, 5000] {
        assert_eq!(hook.run(&mut Ctx { value: v, out: 0 }), generic_result(v));
    }

    place(&t, TWO_FRAMES, true, code + 4096, None);
    publish(&t, &rt, "h", 2, code + 4096);
    let before = hook.stats();
    // The fast path gives the generic result, many times over on the same run state.
    for v in 0..=100 {
        assert_eq!(hook.run(&mut Ctx { value: v, out: 0 }), generic_result(v));
    }
    let s = hook.stats();
    assert_eq!((s.deopts, s.failures), (before.deopts, before.failures));
    // A failed guard: the run stops, counted as a deoptimisation. This hand-placed code has
    // no fallback image before its entry (a control plane writes one with every elite
    // build), so the run cannot continue: a failure with the default result.
    assert_eq!(hook.run(&mut Ctx { value: 101, out: 0 }), DEFAULT);
    assert_eq!(
        hook.run(&mut Ctx {
            value: 7000,
            out: 0
        }),
        DEFAULT
    );
    let s = hook.stats();
    assert_eq!(s.deopts, before.deopts + 2);
    assert_eq!(s.failures, before.failures + 2);
    // The thread state is intact: the fast path still answers right after the exits.
    assert_eq!(hook.run(&mut Ctx { value: 42, out: 0 }), 85);
    // The counter is in the region, where a control plane reads it remotely.
    let mut remote = 0;
    for thread in 0..t.info().thread_slots {
        remote += t
            .read_u64(t.info().counters_offset(thread, hook.index()) + offsets::COUNTER_DEOPTS)
            .unwrap();
    }
    assert_eq!(remote, s.deopts);
    cleanup(&rt);
}

static NESTED: OnceLock<Runtime> = OnceLock::new();

/// Helper 1000: runs hook `inner` on a fresh context holding `v / 2` from inside the outer
/// run (a value different from the one the outer run keeps on its stack).
unsafe extern "C" fn run_inner(v: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let rt = NESTED.get().expect("set before the run");
    rt.hook("inner").unwrap().run(&mut Ctx {
        value: v / 2,
        out: 0,
    })
}

/// Keeps a value on its eBPF stack across a helper that runs another elite program.
const OUTER: &str = "
    ldxdw %r2, [%r1]
    stxdw [%r10-8], %r2
    stxdw [%r10-512], %r2
    mov %r1, %r2
    call 1000
    ldxdw %r3, [%r10-8]
    ldxdw %r4, [%r10-512]
    add %r3, %r4
    mul %r3, 1000
    add %r0, %r3
    exit
";

#[test]
fn a_nested_elite_run_does_not_touch_the_outer_runs_stack() {
    let (rt, t) = runtime(&["outer", "inner"]);
    let rt = NESTED.get_or_init(|| rt);
    let code = t.info().section(SectionId::Code).offset;
    // The inner program writes its own stack frames (at the same offsets of its run state
    // as the outer program's, were the state shared).
    place(&t, TWO_FRAMES, true, code, None);
    publish(&t, rt, "inner", 1, code);
    place(
        &t,
        OUTER,
        true,
        code + 4096,
        Some(run_inner as *const () as u64),
    );
    publish(&t, rt, "outer", 1, code + 4096);
    let outer = rt.hook("outer").unwrap();
    for v in [1u64, 9, 60, 201] {
        assert_eq!(
            outer.run(&mut Ctx { value: v, out: 0 }),
            2 * v * 1000 + generic_result(v / 2)
        );
    }
    // A failed guard in the nested run is that run's deoptimisation alone.
    assert_eq!(
        outer.run(&mut Ctx { value: 300, out: 0 }),
        600_000 + DEFAULT
    );
    assert_eq!(rt.hook("inner").unwrap().stats().deopts, 1);
    assert_eq!(outer.stats().deopts, 0);
    cleanup(rt);
}
