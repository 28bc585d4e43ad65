//! Hand-built programs through compile → serialise → link → W^X map → call, on this host.

use std::collections::HashMap;

use rdx_bpf::isa::{
    AluOp, AtomicOp, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width,
};
use rdx_jit::{Arch, Build, CompileOptions, Compiler, EntryAbi, ExecutableCode, Symbol};
use rdx_region::abi::{RunState, RunStatus};

fn alu(width: Width, op: AluOp, dst: u8, src: Operand) -> Insn {
    Insn::Alu {
        width,
        op,
        dst: Reg(dst),
        src,
    }
}

fn mov64(dst: u8, imm: i32) -> Insn {
    alu(Width::W64, AluOp::Mov, dst, Operand::Imm(imm))
}

fn host() -> Arch {
    Arch::host().expect("supported host")
}

fn run_with(
    insns: &[Insn],
    opts: CompileOptions,
    syms: HashMap<Symbol, u64>,
    mem: &mut [u8],
    budget: u64,
) -> (u64, RunState) {
    let compiler = Compiler::new(opts.arch).unwrap();
    let (artifact, _) = compiler.compile(insns, &opts).unwrap();
    let bytes = artifact.to_bytes();
    let code = ExecutableCode::load_bytes(&bytes, &syms).unwrap();
    let mut run = RunState::new(budget);
    // SAFETY: hand-checked programs touching only `mem` and their stack.
    let r0 = unsafe { code.call_with_len(mem.as_mut_ptr(), &mut run, mem.len() as u64) };
    (r0, run)
}

fn run(insns: &[Insn]) -> u64 {
    let mut opts = CompileOptions::new(host(), Build::Generic);
    opts.entry_abi = EntryAbi::WithLength;
    run_with(insns, opts, HashMap::new(), &mut [0u8; 16], 0).0
}

#[test]
fn arithmetic_and_division_edge_cases() {
    // 32-bit ops zero-extend.
    assert_eq!(
        run(&[
            mov64(0, -1),
            alu(Width::W32, AluOp::Add, 0, Operand::Imm(1)),
            Insn::Exit
        ]),
        0
    );
    // Division by zero gives 0, modulo by zero leaves the dividend.
    assert_eq!(
        run(&[
            mov64(0, 7),
            mov64(1, 0),
            alu(Width::W64, AluOp::Div, 0, Operand::Reg(Reg(1))),
            Insn::Exit
        ]),
        0
    );
    assert_eq!(
        run(&[
            mov64(0, 7),
            mov64(1, 0),
            alu(Width::W64, AluOp::Mod, 0, Operand::Reg(Reg(1))),
            Insn::Exit
        ]),
        7
    );
    // INT64_MIN / -1 does not trap.
    let min = Insn::LoadImm64 {
        dst: Reg(0),
        kind: ImmKind::Imm,
        imm_lo: 0,
        imm_hi: i32::MIN,
    };
    assert_eq!(
        run(&[
            min,
            Insn::LoadImm64Hi,
            mov64(1, -1),
            alu(Width::W64, AluOp::SDiv, 0, Operand::Reg(Reg(1))),
            Insn::Exit
        ]),
        i64::MIN as u64
    );
    assert_eq!(
        run(&[
            min,
            Insn::LoadImm64Hi,
            mov64(1, -1),
            alu(Width::W64, AluOp::SMod, 0, Operand::Reg(Reg(1))),
            Insn::Exit
        ]),
        0
    );
}

fn counting_loop(n: i32) -> Vec<Insn> {
    vec![
        mov64(0, 0),
        mov64(1, n),
        alu(Width::W64, AluOp::Add, 0, Operand::Imm(2)),
        alu(Width::W64, AluOp::Sub, 1, Operand::Imm(1)),
        Insn::Jmp {
            width: Width::W64,
            cond: JmpCond::Ne,
            dst: Reg(1),
            src: Operand::Imm(0),
            off: -3,
        },
        Insn::Exit,
    ]
}

#[test]
fn loops_and_stack() {
    assert_eq!(run(&counting_loop(10)), 20);
    let prog = [
        mov64(1, 0x1234),
        Insn::Store {
            size: Size::DW,
            base: Reg(10),
            off: -8,
            src: Operand::Reg(Reg(1)),
        },
        Insn::Atomic {
            size: Size::DW,
            op: AtomicOp::Add,
            fetch: true,
            base: Reg(10),
            off: -8,
            src: Reg(1),
        },
        Insn::Load {
            size: Size::DW,
            sign_extend: false,
            dst: Reg(0),
            base: Reg(10),
            off: -8,
        },
        alu(Width::W64, AluOp::Add, 0, Operand::Reg(Reg(1))),
        Insn::Exit,
    ];
    assert_eq!(run(&prog), 0x1234 * 3);
}

#[test]
fn budget_stops_a_long_loop() {
    let mut opts = CompileOptions::new(host(), Build::Generic);
    opts.needs_budget = true;
    let prog = counting_loop(1000);
    let (_, run) = run_with(&prog, opts.clone(), HashMap::new(), &mut [0; 8], 100);
    assert_eq!(run.status, RunStatus::BudgetExhausted as u32);
    let (r0, run) = run_with(&prog, opts, HashMap::new(), &mut [0; 8], 100_000);
    assert_eq!(run.status, RunStatus::Ok as u32);
    assert_eq!(r0, 2000);
    assert!(run.budget < 100_000 - 3000);
}

unsafe extern "C" fn add_helper(a: u64, b: u64, _: u64, _: u64, _: u64) -> u64 {
    a.wrapping_mul(10).wrapping_add(b)
}

#[test]
fn helpers_maps_and_local_calls() {
    let prog = [
        mov64(1, 4),
        mov64(2, 2),
        Insn::Call(CallTarget::Helper(7)),
        mov64(6, 0),
        alu(Width::W64, AluOp::Add, 6, Operand::Reg(Reg(0))),
        Insn::LoadImm64 {
            dst: Reg(1),
            kind: ImmKind::MapIdxValue,
            imm_lo: 0,
            imm_hi: 4,
        },
        Insn::LoadImm64Hi,
        Insn::Call(CallTarget::Local(3)),
        alu(Width::W64, AluOp::Add, 0, Operand::Reg(Reg(6))),
        Insn::Exit,
        Insn::Exit, // unreachable filler
        // subprogram: r0 = *(u32 *)r1
        Insn::Load {
            size: Size::W,
            sign_extend: false,
            dst: Reg(0),
            base: Reg(1),
            off: 0,
        },
        Insn::Exit,
    ];
    let value: [u32; 2] = [5, 1000];
    let mut syms = HashMap::new();
    syms.insert(Symbol::Helper(7), add_helper as *const () as u64);
    syms.insert(Symbol::MapValue(0), value.as_ptr() as u64);
    for budget in [false, true] {
        let mut opts = CompileOptions::new(host(), Build::Generic);
        opts.needs_budget = budget;
        let (r0, run) = run_with(&prog, opts, syms.clone(), &mut [0; 8], 1000);
        assert_eq!(r0, 1042, "budget={budget}");
        assert_eq!(run.status, 0);
    }
}

thread_local! {
    /// The run state of the run in progress, for [`charge_helper`].
    static RUN: std::cell::Cell<*mut RunState> = const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// A helper that spends the caller's budget, as a cross-sandbox call does: returns the
/// budget it finds in the run state and charges `cost` to it (to zero if it does not cover it).
unsafe extern "C" fn charge_helper(cost: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let run = RUN.with(|r| r.get());
    // SAFETY: set by `run_charging` to a run state that outlives the call.
    let run = unsafe { &mut *run };
    let seen = run.budget;
    run.budget = seen.saturating_sub(cost);
    seen
}

/// `r6 = charge(cost)`, then a loop of 9 back-edges (2 slots each), `r0 = r6`.
fn charging_program(cost: i32, call: Insn) -> Vec<Insn> {
    vec![
        mov64(1, cost),
        call,
        mov64(6, 0),
        alu(Width::W64, AluOp::Add, 6, Operand::Reg(Reg(0))),
        mov64(1, 10),
        alu(Width::W64, AluOp::Sub, 1, Operand::Imm(1)),
        Insn::Jmp {
            width: Width::W64,
            cond: JmpCond::Ne,
            dst: Reg(1),
            src: Operand::Imm(0),
            off: -2,
        },
        mov64(0, 0),
        alu(Width::W64, AluOp::Add, 0, Operand::Reg(Reg(6))),
        Insn::Exit,
    ]
}

fn run_charging(prog: &[Insn], opts: &CompileOptions, budget: u64) -> (u64, RunState) {
    let table = [charge_helper as *const () as u64; 16];
    let mut syms = HashMap::new();
    syms.insert(Symbol::Helper(8), charge_helper as *const () as u64);
    syms.insert(
        Symbol::Var(rdx_jit::artifact::HELPER_TABLE_SYMBOL.into()),
        table.as_ptr() as u64,
    );
    let (artifact, _) = Compiler::new(opts.arch)
        .unwrap()
        .compile(prog, opts)
        .unwrap();
    let code = ExecutableCode::load_bytes(&artifact.to_bytes(), &syms).unwrap();
    let mut run = RunState::new(budget);
    RUN.with(|r| r.set(&mut run));
    // SAFETY: the program touches only its stack; the helper only the run state.
    let r0 = unsafe { code.call(std::ptr::null_mut(), &mut run) };
    RUN.with(|r| r.set(std::ptr::null_mut()));
    (r0, run)
}

#[test]
fn helpers_see_and_charge_the_live_budget() {
    let len = 10u64;
    let calls = [
        (
            rdx_jit::HelperCalls::Direct,
            Insn::Call(CallTarget::Helper(8)),
        ),
        (
            rdx_jit::HelperCalls::Table { table_len: 16 },
            Insn::Call(CallTarget::Helper(8)),
        ),
    ];
    for (helper_calls, call) in calls {
        let mut opts = CompileOptions::new(host(), Build::Generic);
        opts.helper_calls = helper_calls;
        opts.needs_budget = true;
        // Metered: the helper sees the budget left after the entry's charge, and what it
        // charges is gone when the code continues.
        let (r0, run) = run_charging(&charging_program(100, call), &opts, 1000);
        assert_eq!(run.status, RunStatus::Ok as u32, "{helper_calls:?}");
        assert_eq!(r0, 1000 - len, "{helper_calls:?}");
        assert_eq!(run.budget, 1000 - len - 100 - 9 * 2, "{helper_calls:?}");
        // A helper that spends everything stops the run at the next back-edge.
        let (_, run) = run_charging(&charging_program(5000, call), &opts, 1000);
        assert_eq!(
            run.status,
            RunStatus::BudgetExhausted as u32,
            "{helper_calls:?}"
        );
        assert_eq!(run.budget, 0);
        // Unmetered code never reads or writes the budget: the helper sees the initial
        // value and spending it does not stop the run.
        opts.needs_budget = false;
        let (r0, run) = run_charging(&charging_program(5000, call), &opts, 1000);
        assert_eq!(run.status, RunStatus::Ok as u32, "{helper_calls:?}");
        assert_eq!((r0, run.budget), (1000, 0), "{helper_calls:?}");
    }
}
