//! `bpf_tail_call` through native code, in both JIT tiers, against the interpreter: a
//! successful tail call never returns to its caller (nothing after it runs, from the entry
//! function or from a subprogram), every instruction of the chain is charged to the run's
//! one budget, and only entries a control plane published as tail-call targets are entered.
//! Map helpers never touch a program array. This test process plays the control plane: it
//! compiles with rdx-jit and writes code, tags and program array elements through a second
//! mapping of the region.

#![cfg(target_arch = "x86_64")]

use rdx_bpf::helpers::{HelperCtx, HelperError, Helpers};
use rdx_bpf::interp::{Config, Input, Vm};
use rdx_bpf::isa::{ImmKind, Insn};
use rdx_bpf::maps::MapSet;
use rdx_bpf::program::{MapDef, MapOrigin};
use rdx_jit::link::{link, LinkTarget};
use rdx_jit::{
    branch_sites, Build, CompileOptions, Compiler, Expect, Pipeline, Speculation, Symbol,
};
use rdx_region::abi::{FallbackLocator, FALLBACK_MAGIC};
use rdx_region::helpers::HelperId;
use rdx_region::layout::Arch;
use rdx_region::layout::{active_word, offsets, MapType, SectionId, MAP_ALIGN};
use rdx_runtime::{HookSpec, Runtime};
use rdx_transport::context::read_context;
use rdx_transport::shm::ShmTransport;
use rdx_transport::xstate::{self, prog_array, Copies, MapRef, MapSpec, UPDATE_ANY};
use rdx_transport::Transport;
use std::cell::{Cell, RefCell};
use std::time::Duration;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Ctx {
    /// The index the caller tail-calls.
    value: u64,
    /// Incremented by the caller before its tail call.
    before: u64,
    /// Incremented by the caller after its tail call (runs only when the call failed).
    after: u64,
    /// Incremented by each target run.
    target: u64,
}

impl Ctx {
    fn bytes(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        for (i, v) in [self.value, self.before, self.after, self.target]
            .iter()
            .enumerate()
        {
            b[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    fn from_bytes(b: &[u8]) -> Ctx {
        let w = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap());
        Ctx {
            value: w(0),
            before: w(1),
            after: w(2),
            target: w(3),
        }
    }
}

const DEFAULT: u64 = 5;

/// Assembles `src`; every `lddw %rN, 0` becomes a reference to map 0 (the program array).
fn program(src: &str) -> Vec<Insn> {
    let mut insns = rdx_bpf::asm::assemble(src).unwrap();
    for insn in &mut insns {
        if let Insn::LoadImm64 {
            dst,
            kind: ImmKind::Imm,
            imm_lo: 0,
            imm_hi: 0,
        } = *insn
        {
            *insn = Insn::LoadImm64 {
                dst,
                kind: ImmKind::MapIdx,
                imm_lo: 0,
                imm_hi: 0,
            };
        }
    }
    insns
}

/// Increments the context word at `off` (clobbers r3; the context is in `ctx`).
fn bump(ctx: &str, off: u32) -> String {
    format!("ldxdw %r3, [{ctx}+{off}]\nadd %r3, 1\nstxdw [{ctx}+{off}], %r3\n")
}

/// Tail-calls index `value` three times in a loop; counts before and after.
fn caller_loop() -> String {
    format!(
        "ldxdw %r6, [%r1]
         mov %r7, %r1
         {before}
         mov %r8, 0
     again:
         mov %r1, %r7
         lddw %r2, 0
         mov %r3, %r6
         call 12
         {after}
         add %r8, 1
         jlt %r8, 3, again
         mov %r0, 1000
         add %r0, %r6
         exit",
        before = bump("%r7", 8),
        after = bump("%r7", 16),
    )
}

/// The tail call made from a subprogram; the entry function goes on after the local call.
fn caller_in_subprogram() -> String {
    format!(
        "mov %r7, %r1
         {before}
         call local sub
         {after}
         add %r0, 2000
         exit
     sub:
         mov %r6, %r1
         ldxdw %r3, [%r1]
         lddw %r2, 0
         call 12
         {after_sub}
         mov %r0, 3
         exit",
        before = bump("%r7", 8),
        after = bump("%r7", 16),
        after_sub = bump("%r6", 16),
    )
}

/// Target 0: counts its run, returns `value + 42`.
fn target_result() -> String {
    format!(
        "{}
         ldxdw %r0, [%r1]
         add %r0, 42
         exit",
        bump("%r1", 24)
    )
}

/// Target 1: counts its run, then tail-calls index 0 (a chain), returns 7 if that fails.
fn target_chaining() -> String {
    format!(
        "{}
         lddw %r2, 0
         mov %r3, 0
         call 12
         mov %r0, 7
         exit",
        bump("%r1", 24)
    )
}

/// Spins `n` iterations of arithmetic, then tail-calls `index` (or returns the sum when the
/// call fails).
fn spin_then_tail_call(n: u32, index: u32) -> String {
    format!(
        "mov %r6, %r1
         mov %r0, 0
         mov %r8, 0
     spin:
         add %r0, %r8
         xor %r0, 0x55
         add %r8, 1
         jlt %r8, {n}, spin
         mov %r1, %r6
         lddw %r2, 0
         mov %r3, {index}
         call 12
         exit"
    )
}

/// Spins `n` iterations, returns the sum.
fn spin(n: u32) -> String {
    format!(
        "mov %r0, 0
         mov %r8, 0
     spin:
         add %r0, %r8
         xor %r0, 0x55
         add %r8, 1
         jlt %r8, {n}, spin
         exit"
    )
}

// ---- the interpreter's side ------------------------------------------------------------------

thread_local! {
    /// Program array indices that hold a program (the interpreter's view of the array).
    static PUBLISHED: RefCell<Vec<bool>> = const { RefCell::new(Vec::new()) };
    /// The index of the tail call that stopped the program just run.
    static REQUESTED: Cell<Option<u64>> = const { Cell::new(None) };
}

/// `bpf_tail_call` in the interpreter: a published index stops the program (nothing after a
/// successful tail call runs) and names the next one; anything else fails with `-ENOENT`
/// and the program goes on.
fn interp_tail_call(cx: &mut HelperCtx<'_, '_>, a: [u64; 5]) -> Result<u64, HelperError> {
    let published = PUBLISHED.with(|p| p.borrow().get(a[2] as usize).copied() == Some(true));
    if !published {
        return Ok((-(libc::ENOENT as i64)) as u64);
    }
    REQUESTED.with(|r| r.set(Some(a[2])));
    cx.stop_program();
    Ok(0)
}

/// Runs `entry`, then the chain of tail calls it makes, in the interpreter (the in-memory
/// maps have no program arrays: map 0 is an array the tail-call helper never reads).
/// Returns the run's result and the context after it.
fn interpret(entry: &[Insn], targets: &[Option<Vec<Insn>>], ctx: Ctx) -> (u64, Ctx) {
    let mut helpers = Helpers::standard();
    helpers.register(
        rdx_region::helpers::by_id(HelperId::TAIL_CALL).unwrap(),
        interp_tail_call,
    );
    let maps = MapSet::new(&[MapDef {
        name: "progs".into(),
        map_type: MapType::Array.into(),
        key_size: 4,
        value_size: 4,
        max_entries: 4,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    }])
    .unwrap();
    PUBLISHED.with(|p| *p.borrow_mut() = targets.iter().map(Option::is_some).collect());
    let mut bytes = ctx.bytes();
    let mut prog = entry.to_vec();
    let mut tail_calls = 0;
    loop {
        REQUESTED.with(|r| r.set(None));
        let vm = Vm::new(&prog, &maps, &helpers, Config::default()).unwrap();
        let r0 = vm.run_checked(Input::Bytes(&mut bytes)).unwrap();
        match REQUESTED.with(Cell::take) {
            Some(i) if tail_calls < 33 => {
                tail_calls += 1;
                prog = targets[i as usize].clone().unwrap();
            }
            _ => return (r0, Ctx::from_bytes(&bytes)),
        }
    }
}

// ---- the control plane's side ----------------------------------------------------------------

struct Node {
    rt: Runtime,
    t: ShmTransport,
    progs: MapRef,
    code: u64,
    next_code: u64,
}

impl Node {
    fn new(budget: u64) -> Node {
        let rt = Runtime::builder()
            .code_size(1 << 20)
            .scratch_size(1 << 18)
            .hook(
                "h",
                HookSpec::for_context::<Ctx>()
                    .default_return(DEFAULT)
                    .budget(budget),
            )
            .build()
            .unwrap();
        let t = ShmTransport::open(rt.path()).unwrap();
        let info = t.info().clone();
        let spec = MapSpec {
            map_type: MapType::ProgArray,
            key_size: 4,
            value_size: 8,
            max_entries: 4,
            flags: 0,
            name: "progs".into(),
        };
        let at = (info.section(SectionId::Scratch).offset + info.scratch_reserved)
            .next_multiple_of(MAP_ALIGN);
        let progs = xstate::create(&t, &info, 1, at, &spec).unwrap();
        let code = info.section(SectionId::Code).offset;
        Node {
            rt,
            t,
            progs,
            code,
            next_code: code,
        }
    }

    /// Link-time symbols: map 0 is the program array, everything else the host's context
    /// table.
    fn resolver(&self) -> impl Fn(&Symbol) -> Option<u64> {
        let info = self.t.info();
        let ctx = read_context(&self.t, info).unwrap();
        let progs = info.base_address + self.progs.offset;
        move |s: &Symbol| match s {
            Symbol::Map(0) => Some(progs),
            other => ctx
                .iter()
                .find(|c| c.symbol() == other.to_string())
                .map(|c| c.addr),
        }
    }

    /// Compiles, links and writes `insns` 16 bytes into a fresh 4 KiB of the arena (room for
    /// a tag before its entry); returns the entry's region offset and whether it is metered.
    fn place(&mut self, insns: &[Insn], tier: Tier, needs_budget: bool) -> (u64, bool) {
        let mut opts = CompileOptions::new(Arch::X86_64, Build::Generic);
        match tier {
            Tier::Optimizing => {}
            Tier::Baseline => opts.pipeline = Pipeline::Baseline,
            Tier::Elite => opts.build = Build::Elite(Speculation::default()),
        }
        opts.needs_budget = needs_budget;
        let (artifact, _) = Compiler::new(Arch::X86_64)
            .unwrap()
            .compile(insns, &opts)
            .unwrap();
        let info = self.t.info().clone();
        let resolve = self.resolver();
        let load = self.next_code + 16;
        let linked = link(
            &artifact,
            LinkTarget::new(Arch::X86_64),
            &resolve,
            info.base_address + load,
        )
        .unwrap();
        assert!(linked.code.len() < 4096 - 16);
        self.t.write(load, &linked.code).unwrap();
        self.next_code += 4096;
        (
            load + linked.entry_offset as u64,
            artifact.meta.flags & rdx_jit::artifact::FLAG_NEEDS_BUDGET != 0,
        )
    }

    /// Compiles `insns` as an elite artifact whose every conditional jump is speculated not
    /// taken, and writes it as a control plane writes an elite record: fallback locator,
    /// code (entry first), fallback image. Returns the entry's region offset.
    fn place_elite_with_image(&mut self, insns: &[Insn]) -> u64 {
        let opts = CompileOptions::new(
            Arch::X86_64,
            Build::Elite(Speculation {
                guards: branch_sites(insns)
                    .into_iter()
                    .map(|pc| (pc, Expect::NotTaken))
                    .collect(),
            }),
        );
        let (artifact, _) = Compiler::new(Arch::X86_64)
            .unwrap()
            .compile(insns, &opts)
            .unwrap();
        let info = self.t.info().clone();
        let resolve = self.resolver();
        let entry = self.next_code + FallbackLocator::BYTES;
        let linked = link(
            &artifact,
            LinkTarget::new(Arch::X86_64),
            &resolve,
            info.base_address + entry,
        )
        .unwrap();
        assert_eq!(linked.entry_offset, 0);
        let ops = rdx_bpf::interp::lower_linked(insns, |kind, index, _| {
            (kind == ImmKind::MapIdx && index == 0).then(|| resolve(&Symbol::Map(0)).unwrap())
        })
        .unwrap();
        let image = rdx_exec::image::encode(&ops);
        let image_offset = (linked.code.len() as u64).next_multiple_of(16);
        assert!(FallbackLocator::BYTES + image_offset + (image.len() as u64) < 4096);
        let locator = FallbackLocator {
            magic: FALLBACK_MAGIC,
            image_offset: image_offset as u32,
            image_len: image.len() as u32,
        };
        self.t.write(self.next_code, &locator.to_bytes()).unwrap();
        self.t.write(entry, &linked.code).unwrap();
        self.t.write(entry + image_offset, &image).unwrap();
        self.next_code += 4096;
        entry
    }

    /// Publishes the code at `entry` as a tail-call target (its tag, then the element), as
    /// a control plane does.
    fn publish_target(&self, index: u32, version: u32, entry: u64, metered: bool) {
        let info = self.t.info().clone();
        prog_array::publish_target(&self.t, &info, &self.progs, index, version, entry, metered)
            .unwrap();
    }

    /// Writes a program array element as it is, published or not.
    fn set_element(&self, index: u32, word: u64) {
        xstate::update(
            &self.t,
            &self.progs,
            &index.to_le_bytes(),
            &word.to_le_bytes(),
            UPDATE_ANY,
            Copies::All,
            1,
        )
        .unwrap();
    }

    fn element(&self, index: u32) -> u64 {
        self.t.read_u64(self.progs.data + 8 * index as u64).unwrap()
    }

    fn attach(&self, version: u32, entry: u64) {
        let slot = self
            .t
            .info()
            .hook_offset(self.rt.hook("h").unwrap().index());
        let old = self.t.read_u64(slot + offsets::HOOK_ACTIVE).unwrap();
        self.t
            .compare_and_swap(
                slot + offsets::HOOK_ACTIVE,
                old,
                active_word(version, entry as u32),
            )
            .unwrap();
    }

    fn run(&self, ctx: &mut Ctx) -> u64 {
        self.rt.hook("h").unwrap().run(ctx)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.rt.teardown(Duration::from_millis(100));
        let _ = self.rt.unlink();
    }
}

/// How the callers of a test are compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    Optimizing,
    Baseline,
    /// An elite artifact (no guards): its eBPF frames live in the run state, where a
    /// target's would too if an elite target could be entered (none can: its record's
    /// fallback locator is where the tag would be).
    Elite,
}

impl Tier {
    /// How this tier's tail-call targets are compiled.
    fn target(self) -> Tier {
        match self {
            Tier::Elite => Tier::Optimizing,
            other => other,
        }
    }
}

const TIERS: [Tier; 3] = [Tier::Optimizing, Tier::Baseline, Tier::Elite];

/// Every caller and index, in both tiers, against the interpreter: the same result and the
/// same side effects, so a successful tail call never returns to its caller.
#[test]
fn tail_calls_in_native_code_end_the_run_as_in_the_interpreter() {
    let targets = [
        Some(program(&target_result())),
        Some(program(&target_chaining())),
        None,
        None,
    ];
    for tier in TIERS {
        for caller in [caller_loop(), caller_in_subprogram()] {
            let caller = program(&caller);
            let mut node = Node::new(1_000_000);
            for (i, t) in targets.iter().enumerate() {
                if let Some(t) = t {
                    let (entry, metered) = node.place(t, tier.target(), true);
                    node.publish_target(i as u32, 1, entry, metered);
                }
            }
            let (entry, metered) = node.place(&caller, tier, false);
            node.attach(1, entry);
            for index in 0..4u64 {
                let ctx = Ctx {
                    value: index,
                    ..Ctx::default()
                };
                let want = interpret(&caller, &targets, ctx);
                let mut native = ctx;
                let got = node.run(&mut native);
                assert_eq!(
                    (got, native),
                    want,
                    "{tier:?}, index {index}: native against the interpreter"
                );
            }
            assert_eq!(node.rt.hook("h").unwrap().stats().failures, 0);
            assert!(metered, "a program that tail-calls is always metered");
        }
    }
}

/// A caller that tail-calls in a loop runs its target once: the first successful call ends
/// the run (before, the caller went on and ran the target once per iteration, far past its
/// class's budget).
#[test]
fn a_tail_call_in_a_loop_runs_its_target_once() {
    let caller = program(
        "mov %r6, %r1
         mov %r8, 0
     again:
         mov %r1, %r6
         lddw %r2, 0
         mov %r3, 0
         call 12
         add %r8, 1
         jlt %r8, 100000, again
         mov %r0, 1
         exit",
    );
    for tier in TIERS {
        let mut node = Node::new(50_000);
        let (target, metered) = node.place(&program(&target_result()), tier.target(), true);
        node.publish_target(0, 1, target, metered);
        let (entry, _) = node.place(&caller, tier, false);
        node.attach(1, entry);
        let mut ctx = Ctx {
            value: 9,
            ..Ctx::default()
        };
        assert_eq!(node.run(&mut ctx), 51, "{tier:?}");
        assert_eq!(ctx.target, 1, "{tier:?}: the target ran once");
        assert_eq!(node.rt.hook("h").unwrap().stats().failures, 0);
    }
}

/// A chain whose links each fit the class budget but together do not is stopped: every
/// instruction of the run, across the tail call, is charged to one budget, although the
/// caller was compiled as the verifier would have it (bounded, so not metered).
#[test]
fn a_tail_call_chain_runs_on_one_budget() {
    const BUDGET: u64 = 20_000;
    for tier in TIERS {
        let mut node = Node::new(BUDGET);
        // Each loop iteration is 4 instructions: 3000 iterations are 12 000 of the 20 000.
        let (target, metered) = node.place(&program(&spin(3000)), tier.target(), true);
        node.publish_target(0, 1, target, metered);
        let (light, _) = node.place(&program(&spin_then_tail_call(100, 0)), tier, false);
        let (heavy, _) = node.place(&program(&spin_then_tail_call(3000, 0)), tier, false);
        let want = {
            let mut acc = 0u64;
            for i in 0..3000u64 {
                acc = acc.wrapping_add(i) ^ 0x55;
            }
            acc
        };
        node.attach(1, light);
        assert_eq!(node.run(&mut Ctx::default()), want, "{tier:?}: fits");
        node.attach(2, heavy);
        assert_eq!(
            node.run(&mut Ctx::default()),
            DEFAULT,
            "{tier:?}: 24 000 instructions on a 20 000 budget"
        );
        assert_eq!(node.rt.hook("h").unwrap().stats().failures, 1, "{tier:?}");
    }
}

/// A tail call enters only what a control plane published as a metered tail-call target:
/// an element that designates a well-formed, aligned code entry without a tag (here the
/// caller's own entry), one whose version is not its tag's, or an unmetered target, fails
/// like an empty element, and the caller goes on.
#[test]
fn forged_or_unmetered_program_array_elements_are_refused() {
    let caller = program(&caller_loop());
    for tier in TIERS {
        let mut node = Node::new(1_000_000);
        let (entry, _) = node.place(&caller, tier, false);
        node.attach(1, entry);
        let (target, metered) = node.place(&program(&target_result()), tier.target(), true);
        node.publish_target(0, 3, target, metered);
        let (unmetered, metered) = node.place(&program(&target_result()), tier.target(), false);
        assert!(!metered);
        node.publish_target(1, 1, unmetered, false);
        // Aligned entries in the code arena that were never published as targets.
        node.set_element(2, active_word(1, entry as u32));
        node.set_element(3, active_word(4, target as u32));
        for index in 1..4 {
            let mut ctx = Ctx {
                value: index,
                ..Ctx::default()
            };
            assert_eq!(node.run(&mut ctx), 1000 + index, "{tier:?}, index {index}");
            assert_eq!(
                ctx,
                Ctx {
                    value: index,
                    before: 1,
                    after: 3,
                    target: 0
                },
                "{tier:?}, index {index}: refused, the caller went on"
            );
        }
        // The published element works.
        let mut ctx = Ctx::default();
        assert_eq!(node.run(&mut ctx), 42, "{tier:?}");
        assert_eq!((ctx.after, ctx.target), (0, 1));
    }
}

/// A run that leaves elite code at a failed guard and continues in its fallback image (the
/// interpreter) follows the same rules there: a successful tail call ends the run with the
/// target's result, a failed one lets it go on, and a target that spends the budget fails
/// the run.
#[test]
fn tail_calls_from_a_deoptimised_run_end_it_as_in_native_code() {
    // Speculated: value <= 100 (no tail call). Above, the guard fails and the interpreter
    // continues: it tail-calls index `value - 101`.
    let caller = program(&format!(
        "mov %r6, %r1
         ldxdw %r3, [%r1]
         jgt %r3, 100, far
         mov %r0, 7
         exit
     far:
         {before}
         ldxdw %r3, [%r6]
         sub %r3, 101
         mov %r1, %r6
         lddw %r2, 0
         call 12
         {after}
         mov %r0, 1000
         exit",
        before = bump("%r6", 8),
        after = bump("%r6", 16),
    ));
    let mut node = Node::new(50_000);
    let (target, metered) = node.place(&program(&target_result()), Tier::Optimizing, true);
    node.publish_target(0, 1, target, metered);
    let (hog, metered) = node.place(&program(&spin(100_000)), Tier::Optimizing, true);
    node.publish_target(1, 1, hog, metered);
    let entry = node.place_elite_with_image(&caller);
    node.attach(1, entry);
    let run = |value: u64| {
        let mut ctx = Ctx {
            value,
            ..Ctx::default()
        };
        (node.run(&mut ctx), ctx)
    };
    assert_eq!(run(5).0, 7, "the fast path");
    let (r0, ctx) = run(101);
    assert_eq!(r0, 101 + 42, "index 0: the target's result");
    assert_eq!((ctx.before, ctx.after, ctx.target), (1, 0, 1));
    let (r0, ctx) = run(103);
    assert_eq!(r0, 1000, "index 2 is empty: the run goes on");
    assert_eq!((ctx.before, ctx.after, ctx.target), (1, 1, 0));
    let before = node.rt.hook("h").unwrap().stats();
    assert_eq!(
        run(102).0,
        DEFAULT,
        "index 1 spends the budget: the run fails"
    );
    let after = node.rt.hook("h").unwrap().stats();
    assert_eq!(after.failures, before.failures + 1);
    assert_eq!(after.deopts, before.deopts + 1);
}

/// A target whose tag the control plane cleared (retired after the epoch wait) is refused
/// even while an element still names it; `publish_target` refuses an entry with no room for
/// its tag or outside the code arena.
#[test]
fn retired_targets_are_refused_and_bad_entries_are_not_published() {
    let caller = program(&caller_loop());
    let mut node = Node::new(1_000_000);
    let (entry, _) = node.place(&caller, Tier::Baseline, false);
    node.attach(1, entry);
    let (target, metered) = node.place(&program(&target_result()), Tier::Baseline, true);
    node.publish_target(0, 1, target, metered);
    let mut ctx = Ctx::default();
    assert_eq!(node.run(&mut ctx), 42);
    prog_array::forget_target(&node.t, target).unwrap();
    let mut ctx = Ctx::default();
    assert_eq!(node.run(&mut ctx), 1000);
    assert_eq!((ctx.after, ctx.target), (3, 0));
    prog_array::retract_target(&node.t, &node.progs, 0).unwrap();
    assert_eq!(node.element(0), 0);
    let info = node.t.info().clone();
    let code = info.section(SectionId::Code);
    for bad in [code.offset, target + 8, code.end(), 16] {
        assert!(
            prog_array::publish_target(&node.t, &info, &node.progs, 1, 1, bad, true).is_err(),
            "{bad:#x}"
        );
    }
    assert!(prog_array::publish_target(&node.t, &info, &node.progs, 4, 1, target, true).is_err());
    // Elite code: its record's fallback locator is where the tag would go.
    let locator = FallbackLocator {
        magic: FALLBACK_MAGIC,
        image_offset: 4096,
        image_len: 64,
    };
    node.t
        .write(target - FallbackLocator::BYTES, &locator.to_bytes())
        .unwrap();
    assert!(prog_array::publish_target(&node.t, &info, &node.progs, 1, 2, target, true).is_err());
    assert!(prog_array::publish_target(&node.t, &info, &node.progs, 1, 0, target, true).is_err());
}

/// The data-map helpers refuse a program array: a program cannot write (or clear) the jump
/// word of a tail call, whatever the verifier let through.
#[test]
fn map_helpers_never_touch_a_program_array() {
    // update(progs, &0, &forged, ANY), then delete(progs, &1); returns both results in one
    // word (update's in the high half).
    let src = "mov %r6, %r1
         stw [%r10-4], 0
         ldxdw %r7, [%r1]
         stxdw [%r10-16], %r7
         lddw %r1, 0
         mov %r2, %r10
         add %r2, -4
         mov %r3, %r10
         add %r3, -16
         mov %r4, 0
         call 2
         mov %r8, %r0
         stw [%r10-4], 1
         lddw %r1, 0
         mov %r2, %r10
         add %r2, -4
         call 3
         lsh %r8, 32
         lsh %r0, 32
         rsh %r0, 32
         or %r0, %r8
         exit";
    let prog = program(src);
    for tier in TIERS {
        let mut node = Node::new(1_000_000);
        let (target, metered) = node.place(&program(&target_result()), tier.target(), true);
        node.publish_target(0, 1, target, metered);
        node.publish_target(1, 1, target, metered);
        let before = (node.element(0), node.element(1));
        let (entry, _) = node.place(&prog, tier, false);
        node.attach(1, entry);
        // A forged word: an aligned offset into the code arena.
        let forged = active_word(1, (node.code + 4096 + 64) as u32);
        let r = node.run(&mut Ctx {
            value: forged,
            ..Ctx::default()
        });
        let einval = (-(libc::EINVAL as i64)) as u64;
        assert_eq!(r >> 32, einval & 0xffff_ffff, "{tier:?}: update refused");
        assert_eq!(
            r & 0xffff_ffff,
            einval & 0xffff_ffff,
            "{tier:?}: delete refused"
        );
        assert_eq!((node.element(0), node.element(1)), before, "{tier:?}");
    }
}
