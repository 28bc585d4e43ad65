//! The baseline tier (`Pipeline::Baseline`) on its own terms: metering against the optimizing
//! tier, local calls and both helper modes, `callx` outside the table, the typed refusals, what
//! its artifacts share with Cranelift's, hostile programs, and the straight-line patterns it
//! fuses (`support/fused_programs.rs`) against the interpreter.
//!
//! The checks both tiers are held to run each test for both pipelines in the tier-neutral
//! files: `conformance.rs`, `corpus.rs`, `differential.rs` and `aarch64_qemu.rs`.

mod behaviour {
    use std::collections::HashMap;

    use rdx_bpf::asm::assemble;
    use rdx_jit::{
        Build, CompileError, CompileOptions, ExecutableCode, HelperCalls, Pipeline, Speculation,
        Symbol,
    };
    use rdx_region::abi::{RunState, RunStatus};
    use rdx_region::layout::Arch;

    fn opts(pipeline: Pipeline) -> CompileOptions {
        let mut o = CompileOptions::new(Arch::HOST.unwrap(), Build::Generic);
        o.pipeline = pipeline;
        o
    }

    /// Runs `src` in `pipeline` with `budget`; returns r0, the status and the budget left.
    fn run(src: &str, o: &CompileOptions, budget: u64, table: &[u64]) -> (u64, u32, u64) {
        let prog = assemble(src).unwrap();
        let artifact = rdx_jit::compile(&prog, o).unwrap();
        let mut syms = HashMap::new();
        syms.insert(
            Symbol::Var("rdx_helper_table".into()),
            table.as_ptr() as u64,
        );
        syms.insert(Symbol::Helper(9), add5 as *const () as u64);
        let code = ExecutableCode::load(&artifact, &syms).unwrap();
        let mut run = RunState::new(budget);
        // SAFETY: the test programs touch only their own stack.
        let r0 = unsafe { code.call(std::ptr::null_mut(), &mut run) };
        (r0, run.status, run.budget)
    }

    unsafe extern "C" fn add5(a: u64, b: u64, c: u64, d: u64, e: u64) -> u64 {
        a * 10000 + b * 1000 + c * 100 + d * 10 + e
    }

    const LOOP: &str = "mov %r0, 0\nmov %r1, 1000\nadd %r0, 2\nsub %r1, 1\njne %r1, 0, -3\nexit";
    /// A loop in a subprogram, called twice, with callee-saved registers live across.
    const CALLS: &str = "mov %r6, 3\nmov %r1, 1\nmov %r2, 2\nmov %r3, 3\nmov %r4, 4\nmov %r5, 5\n\
        call 9\nmov %r7, %r0\nmov %r1, 40\ncall local sub\nadd %r7, %r0\nmov %r1, 2\n\
        call local sub\nadd %r0, %r7\nadd %r0, %r6\nexit\n\
        sub:\nmov %r6, 0\nstdw [%r10-8], 5\nldxdw %r0, [%r10-8]\nadd %r0, 1\nsub %r1, 1\n\
        jne %r1, 0, -3\nexit";

    #[test]
    fn metering_matches_the_optimizing_tier() {
        for src in [LOOP, CALLS] {
            for budget in [0, 1, 5, 6, 7, 100, 2999, 3000, 3006, 1 << 20] {
                let mut base = opts(Pipeline::Baseline);
                base.needs_budget = true;
                let mut opt = opts(Pipeline::Optimizing);
                opt.needs_budget = true;
                let b = run(src, &base, budget, &[]);
                let o = run(src, &opt, budget, &[]);
                // r0 is meaningless once the run stopped.
                assert_eq!(b.1, o.1, "status, budget {budget}: {src}");
                assert_eq!(b.2, o.2, "budget left, budget {budget}: {src}");
                if b.1 == RunStatus::Ok as u32 {
                    assert_eq!(b.0, o.0, "r0, budget {budget}: {src}");
                }
            }
        }
        let mut base = opts(Pipeline::Baseline);
        base.needs_budget = true;
        assert_eq!(
            run(LOOP, &base, 100, &[]).1,
            RunStatus::BudgetExhausted as u32
        );
        assert_eq!(run(LOOP, &base, 1 << 20, &[]), (2000, 0, (1 << 20) - 3003));
    }

    #[test]
    fn helpers_and_local_calls_in_both_helper_modes() {
        let mut table = vec![0u64; 16];
        table[9] = add5 as *const () as u64;
        // helper 12345, sub(40) = 45, sub(2) = 7, r6 = 3 (kept across both calls).
        let want = 12345 + 45 + 7 + 3;
        for mode in [HelperCalls::Direct, HelperCalls::Table { table_len: 16 }] {
            let mut o = opts(Pipeline::Baseline);
            o.helper_calls = mode;
            assert_eq!(run(CALLS, &o, 0, &table), (want, 0, 0), "{mode:?}");
        }
    }

    #[test]
    fn callx_outside_the_table_stops_the_run_from_a_subprogram() {
        let table = vec![0u64; 4];
        let src =
            "mov %r6, 11\ncall local sub\nadd %r0, %r6\nexit\nsub:\nmov %r1, 4\ncallx %r1\nexit";
        for pipeline in [Pipeline::Baseline, Pipeline::Optimizing] {
            let mut o = opts(pipeline);
            o.helper_calls = HelperCalls::Table { table_len: 4 };
            // A `callx` may be a tail call, so the program is metered whatever the options
            // say: it runs on a budget.
            let (_, status, _) = run(src, &o, 1000, &table);
            assert_eq!(status, RunStatus::BadHelper as u32, "{pipeline:?}");
        }
    }

    #[test]
    fn elite_and_scouting_builds_are_refused_with_a_typed_error() {
        let prog = assemble("mov %r0, 1\njeq %r0, 1, +1\nmov %r0, 2\nexit").unwrap();
        let mut o = opts(Pipeline::Baseline);
        o.build = Build::Elite(Speculation::default());
        assert!(matches!(
            rdx_jit::compile(&prog, &o),
            Err(CompileError::NotInBaseline { .. })
        ));
        let mut o = opts(Pipeline::Baseline);
        o.build = Build::Scouting(rdx_jit::BranchCounters {
            symbol: Symbol::MapValue(0),
        });
        assert!(matches!(
            rdx_jit::compile(&prog, &o),
            Err(CompileError::NotInBaseline { .. })
        ));
    }

    #[test]
    fn bad_programs_are_refused_like_the_optimizing_tier() {
        for src in [
            "mov %r0, 1",                                 // falls off the end
            "mov %r0, 1\njeq %r0, 1, -3\nexit",           // jumps out of the function
            "call local f\nexit\nf:\ncall local f\nexit", // recursion
        ] {
            let prog = assemble(src).unwrap();
            let b = rdx_jit::compile(&prog, &opts(Pipeline::Baseline));
            let o = rdx_jit::compile(&prog, &opts(Pipeline::Optimizing));
            assert!(b.is_err() && o.is_err(), "{src}: {b:?} / {o:?}");
            assert_eq!(
                std::mem::discriminant(&b.unwrap_err()),
                std::mem::discriminant(&o.unwrap_err()),
                "{src}"
            );
        }
        assert!(matches!(
            rdx_jit::compile(&[], &opts(Pipeline::Baseline)),
            Err(CompileError::Empty)
        ));
    }

    #[test]
    fn may_goto_is_refused_by_both_tiers() {
        // The interpreter keeps the per-frame counter; neither code generator does yet.
        let prog =
            assemble("mov %r0, 0\nloop:\nmay_goto out\nadd %r0, 1\nja loop\nout:\nexit").unwrap();
        for pipeline in [Pipeline::Baseline, Pipeline::Optimizing] {
            match rdx_jit::compile(&prog, &opts(pipeline)) {
                Err(CompileError::Unsupported { pc: 1, what }) => {
                    assert!(what.contains("may_goto"), "{pipeline:?}: {what}")
                }
                other => panic!("{pipeline:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn artifacts_differ_from_cranelift_ones_only_in_code_and_options() {
        let prog = assemble(CALLS).unwrap();
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let mut b = CompileOptions::new(arch, Build::Generic);
            b.pipeline = Pipeline::Baseline;
            let base = rdx_jit::compile(&prog, &b).unwrap();
            let opt = rdx_jit::compile(&prog, &CompileOptions::new(arch, Build::Generic)).unwrap();
            assert_eq!(base.meta.arch, arch);
            assert_eq!(base.meta.flags, opt.meta.flags);
            assert_eq!(base.meta.stack_bytes, opt.meta.stack_bytes);
            assert_eq!(base.meta.functions, opt.meta.functions);
            assert_eq!(base.meta.source_hash, opt.meta.source_hash);
            assert_ne!(base.meta.options_hash, opt.meta.options_hash);
            assert_eq!(base.symbols, opt.symbols);
            let back = rdx_jit::Artifact::from_bytes(&base.to_bytes()).unwrap();
            assert_eq!(back, base);
        }
    }
}

mod hostile {
    use proptest::prelude::*;
    use rdx_bpf::isa::{
        AluOp, AtomicOp, ByteOrder, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width,
    };
    use rdx_jit::{Artifact, Build, CompileOptions, EntryAbi, HelperCalls, Pipeline};
    use rdx_region::layout::Arch;

    /// Any instruction with any register, immediate and offset (jumps and local calls kept
    /// inside the program by [`fix`], so that most programs reach code generation).
    fn insn() -> impl Strategy<Value = Insn> {
        let reg = (0u8..11).prop_map(Reg);
        let width = prop_oneof![Just(Width::W32), Just(Width::W64)];
        let operand = prop_oneof![
            reg.clone().prop_map(Operand::Reg),
            any::<i32>().prop_map(Operand::Imm)
        ];
        let size = prop_oneof![Just(Size::B), Just(Size::H), Just(Size::W), Just(Size::DW)];
        let alu_op = prop_oneof![
            Just(AluOp::Add),
            Just(AluOp::Sub),
            Just(AluOp::Mul),
            Just(AluOp::Div),
            Just(AluOp::SDiv),
            Just(AluOp::Or),
            Just(AluOp::And),
            Just(AluOp::Lsh),
            Just(AluOp::Rsh),
            Just(AluOp::Neg),
            Just(AluOp::Mod),
            Just(AluOp::SMod),
            Just(AluOp::Xor),
            Just(AluOp::Mov),
            Just(AluOp::MovSx(8)),
            Just(AluOp::MovSx(16)),
            Just(AluOp::MovSx(32)),
            Just(AluOp::Arsh),
        ];
        let cond = prop_oneof![
            Just(JmpCond::Eq),
            Just(JmpCond::Gt),
            Just(JmpCond::Ge),
            Just(JmpCond::Set),
            Just(JmpCond::Ne),
            Just(JmpCond::Sgt),
            Just(JmpCond::Sge),
            Just(JmpCond::Lt),
            Just(JmpCond::Le),
            Just(JmpCond::Slt),
            Just(JmpCond::Sle),
        ];
        let atomic = prop_oneof![
            Just(AtomicOp::Add),
            Just(AtomicOp::Or),
            Just(AtomicOp::And),
            Just(AtomicOp::Xor),
            Just(AtomicOp::Xchg),
            Just(AtomicOp::CmpXchg),
        ];
        prop_oneof![
            (width.clone(), alu_op, reg.clone(), operand.clone()).prop_map(
                |(width, op, dst, src)| Insn::Alu {
                    width,
                    op,
                    dst,
                    src
                }
            ),
            (
                0u8..3,
                prop_oneof![Just(16u8), Just(32), Just(64)],
                reg.clone()
            )
                .prop_map(|(o, bits, dst)| Insn::Endian {
                    order: [ByteOrder::ToLe, ByteOrder::ToBe, ByteOrder::Swap][o as usize],
                    bits,
                    dst
                }),
            any::<i32>().prop_map(|off| Insn::Ja { off }),
            (width, cond, reg.clone(), operand.clone(), any::<i16>()).prop_map(
                |(width, cond, dst, src, off)| Insn::Jmp {
                    width,
                    cond,
                    dst,
                    src,
                    off
                }
            ),
            (
                size.clone(),
                any::<bool>(),
                reg.clone(),
                reg.clone(),
                any::<i16>()
            )
                .prop_map(|(size, sign_extend, dst, base, off)| Insn::Load {
                    size,
                    sign_extend,
                    dst,
                    base,
                    off
                }),
            (size, reg.clone(), any::<i16>(), operand).prop_map(|(size, base, off, src)| {
                Insn::Store {
                    size,
                    base,
                    off,
                    src,
                }
            }),
            (
                any::<bool>(),
                atomic,
                any::<bool>(),
                reg.clone(),
                any::<i16>(),
                reg.clone()
            )
                .prop_map(|(dw, op, fetch, base, off, src)| Insn::Atomic {
                    size: if dw { Size::DW } else { Size::W },
                    op,
                    fetch,
                    base,
                    off,
                    src
                }),
            (reg.clone(), 0u8..3, any::<i32>(), any::<i32>()).prop_map(
                |(dst, k, imm_lo, imm_hi)| {
                    Insn::LoadImm64 {
                        dst,
                        kind: [ImmKind::Imm, ImmKind::MapIdx, ImmKind::MapIdxValue][k as usize],
                        imm_lo,
                        imm_hi,
                    }
                }
            ),
            (any::<i32>(), 0u8..3, reg).prop_map(|(id, k, r)| Insn::Call(match k {
                0 => CallTarget::Helper(id),
                1 => CallTarget::Local(id),
                _ => CallTarget::Reg(r),
            })),
            Just(Insn::Exit),
        ]
    }

    /// Keeps jumps and local calls inside the program, gives every `lddw` its second slot and
    /// ends the program with `exit`.
    fn fix(raw: Vec<Insn>) -> Vec<Insn> {
        let mut p = Vec::new();
        for i in raw {
            p.push(i);
            if matches!(i, Insn::LoadImm64 { .. }) {
                p.push(Insn::LoadImm64Hi);
            }
        }
        p.push(Insn::Exit);
        let n = p.len() as i64;
        for (pc, insn) in p.iter_mut().enumerate() {
            let left = n - pc as i64 - 1;
            let wrap = |off: i64| if left == 0 { 0 } else { off.rem_euclid(left) };
            match insn {
                Insn::Ja { off } => *off = wrap(*off as i64) as i32,
                Insn::Jmp { off, .. } => *off = wrap(*off as i64) as i16,
                Insn::Call(CallTarget::Local(off)) => *off = wrap(*off as i64) as i32,
                _ => {}
            }
        }
        p
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Unverified programs with arbitrary operands: compiled or refused with a typed
        /// error for both architectures, never a panic (the aarch64 assembler panics on an
        /// unencodable immediate); what compiles has its relocations inside the code and
        /// reads back.
        #[test]
        fn any_instructions_compile_or_are_refused(raw in proptest::collection::vec(insn(), 1..40), budget in any::<bool>(), table in any::<bool>()) {
            let insns = fix(raw);
            for arch in [Arch::X86_64, Arch::Aarch64] {
                let mut o = CompileOptions::new(arch, Build::Generic);
                o.pipeline = Pipeline::Baseline;
                o.needs_budget = budget;
                o.entry_abi = EntryAbi::WithLength;
                if table {
                    // Every id fits: table offsets beyond 2 GiB too.
                    o.helper_calls = HelperCalls::Table { table_len: u32::MAX };
                }
                if let Ok(a) = rdx_jit::compile(&insns, &o) {
                    for r in &a.relocations {
                        prop_assert!(r.offset as usize + 8 <= a.code.len());
                    }
                    prop_assert_eq!(Artifact::from_bytes(&a.to_bytes()).unwrap(), a);
                }
            }
        }
    }
}

#[path = "support/random_programs.rs"]
#[allow(dead_code)]
mod random_programs;

#[path = "support/fused_programs.rs"]
mod fused_programs;

mod fused {
    use std::collections::HashMap;

    use proptest::prelude::*;
    use rdx_bpf::asm::assemble;
    use rdx_jit::{Build, CompileOptions, EntryAbi, ExecutableCode, Pipeline};
    use rdx_region::abi::RunState;
    use rdx_region::layout::Arch;

    use super::fused_programs::{build, Pattern};
    use super::random_programs::{interpret, MEM};

    fn run(insns: &[rdx_bpf::isa::Insn], mem: &mut [u8], budget: bool) -> u64 {
        let mut o = CompileOptions::new(Arch::HOST.unwrap(), Build::Generic);
        o.pipeline = Pipeline::Baseline;
        o.entry_abi = EntryAbi::WithLength;
        o.needs_budget = budget;
        let artifact = rdx_jit::compile(insns, &o).expect("compile");
        let code =
            ExecutableCode::load(&artifact, &HashMap::<rdx_jit::Symbol, u64>::new()).expect("load");
        let mut run = RunState::new(1 << 20);
        // SAFETY: the programs touch only `mem` (through r1) and their own stack, in bounds.
        let r0 = unsafe { code.call_with_len(mem.as_mut_ptr(), &mut run, mem.len() as u64) };
        assert_eq!(run.status, 0);
        r0
    }

    /// The fused forms are shorter code than the same program with every slot a jump target
    /// (which fuses nothing): the patterns are recognised at all.
    #[test]
    fn the_patterns_fuse() {
        let o = {
            let mut o = CompileOptions::new(Arch::HOST.unwrap(), Build::Generic);
            o.pipeline = Pipeline::Baseline;
            o
        };
        let fused = "mov %r2, %r1\nadd %r2, 8\nadd %r2, %r3\nldxb %r2, [%r2+4]\n\
                     mov %r4, %r5\nlsh %r4, 32\nrsh %r4, 32\nmov %r0, %r4\nexit";
        // The same with a jump to every slot after the first of each pattern.
        let split = "ja +0\nmov %r2, %r1\nja +0\nadd %r2, 8\nja +0\nadd %r2, %r3\nja +0\n\
                     ldxb %r2, [%r2+4]\nja +0\nmov %r4, %r5\nja +0\nlsh %r4, 32\nja +0\n\
                     rsh %r4, 32\nmov %r0, %r4\nexit";
        let len = |src: &str| {
            rdx_jit::compile(&assemble(src).unwrap(), &o)
                .unwrap()
                .code
                .len()
        };
        assert!(len(fused) < len(split), "{} vs {}", len(fused), len(split));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Programs of fusable patterns (and near misses) give the interpreter's r0 (which
        /// folds in every register and stack slot) and memory.
        #[test]
        fn fused_patterns_match_the_interpreter(
            patterns in proptest::collection::vec(any::<Pattern>(), 1..24),
            seed in any::<u64>(),
            budget in any::<bool>(),
        ) {
            let insns = build(&patterns);
            let init: Vec<u8> = (0..MEM as u64).map(|i| (seed.rotate_left(i as u32 * 5) ^ i) as u8).collect();
            let mut want_mem = init.clone();
            let want = interpret(&insns, &mut want_mem);
            let mut mem = init;
            prop_assert_eq!(run(&insns, &mut mem, budget), want, "r0 differs for {:?}", insns);
            prop_assert_eq!(mem, want_mem, "memory differs for {:?}", insns);
        }
    }
}
