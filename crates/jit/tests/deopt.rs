//! Elite artifacts: guards, dropped cold code, and the exact state a failed guard hands over
//! (registers, the slot, caller frames, the stack where the interpreter expects it), which
//! the interpreter then continues from.

use std::collections::{BTreeMap, HashMap};

use rdx_bpf::asm::assemble;
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Resume, ResumeFrame, Vm};
use rdx_bpf::maps::MapSet;
use rdx_jit::{
    Arch, Build, CompileError, CompileOptions, Compiler, ExecutableCode, Expect, Speculation,
};
use rdx_region::abi::{DeoptRunState, RunStatus};

/// The entry passes a pointer into its own frame to a subprogram, which branches on what
/// it reads there and reads it again behind the branch; the caller adds its callee-saved r6
/// to the result. Interpreter: 42 + 42 + 7 = 91.
const PROGRAM: &str = "
    mov %r6, 7
    stdw [%r10-8], 42
    mov %r1, %r10
    add %r1, -8
    call local, +2
    add %r0, %r6
    exit
    ldxdw %r0, [%r1]
    mov %r6, 100
    jgt %r0, 40, +1
    exit
    ldxdw %r3, [%r1]
    add %r0, %r3
    exit
";
const RESULT: u64 = 91;
const GUARD: usize = 9;

fn elite(
    insns: &[rdx_bpf::isa::Insn],
    guards: &[(usize, Expect)],
    budget: bool,
) -> (ExecutableCode, rdx_jit::CompileStats) {
    let host = Arch::host().expect("supported host");
    let mut opts = CompileOptions::new(host, Build::Generic);
    opts.needs_budget = budget;
    opts.build = Build::Elite(Speculation {
        guards: guards.iter().copied().collect::<BTreeMap<_, _>>(),
    });
    let (artifact, stats) = Compiler::new(host).unwrap().compile(insns, &opts).unwrap();
    assert!(artifact.meta.deoptimises());
    let code = ExecutableCode::load_bytes(
        &artifact.to_bytes(),
        &HashMap::<rdx_jit::Symbol, u64>::new(),
    )
    .unwrap();
    (code, stats)
}

fn call(code: &ExecutableCode, state: &mut DeoptRunState) -> u64 {
    // SAFETY: the program touches only its own stack, which lives in `state`.
    unsafe { (code.entry())(std::ptr::null_mut(), (state as *mut DeoptRunState).cast()) }
}

#[test]
fn a_failed_guard_hands_over_the_exact_state_and_the_interpreter_finishes() {
    let insns = assemble(PROGRAM).unwrap();
    let vm = Vm::new(
        &insns,
        &MapSet::default(),
        &Helpers::standard(),
        Config::default(),
    )
    .unwrap();
    assert_eq!(vm.run_checked(Input::Empty).unwrap(), RESULT);

    for budget in [false, true] {
        let (code, stats) = elite(&insns, &[(GUARD, Expect::NotTaken)], budget);
        assert_eq!(stats.guards, 1);
        assert_eq!(
            stats.dropped_insns, 3,
            "the jump target's three slots are cold"
        );
        let mut state = DeoptRunState::boxed(1000);
        call(&code, &mut state);
        assert_eq!(state.run.status, RunStatus::Deopt as u32);
        assert_eq!(state.pc as usize, GUARD);
        assert_eq!(state.depth, 1);
        let top = state.stack_top();
        assert_eq!(state.regs[0], 42);
        assert_eq!(
            state.regs[1],
            top - 8,
            "pointer into the caller's frame, unmoved"
        );
        assert_eq!(state.regs[10], top - 512);
        assert_eq!(state.frames[0].ret_pc, 5);
        assert_eq!(state.frames[0].saved[0], 7, "caller's r6 at the call");
        let n = state.stack.len();
        assert_eq!(&state.stack[n - 8..], &42u64.to_le_bytes());
        if budget {
            assert!(state.run.budget < 1000, "the budget left is handed over");
        }

        let frames = [ResumeFrame {
            ret: state.frames[0].ret_pc as usize,
            saved: state.frames[0].saved,
        }];
        let resume = Resume {
            pc: state.pc as usize,
            regs: state.regs,
            frames: &frames,
            stack: &mut state.stack[..],
            packet: None,
            max_steps: None,
        };
        assert_eq!(vm.resume_checked(Input::Empty, resume).unwrap(), RESULT);
    }

    // Expecting the direction the run takes: no exit, the fast path finishes.
    let (code, stats) = elite(&insns, &[(GUARD, Expect::Taken)], false);
    assert_eq!(stats.dropped_insns, 1, "the fall-through exit is cold");
    let mut state = DeoptRunState::boxed(0);
    assert_eq!(call(&code, &mut state), RESULT);
    assert_eq!(state.run.status, RunStatus::Ok as u32);
}

#[test]
fn guards_must_be_conditional_jumps() {
    let insns = assemble(PROGRAM).unwrap();
    let host = Arch::host().unwrap();
    for pc in [0, 4, 99] {
        let opts = CompileOptions::new(
            host,
            Build::Elite(Speculation {
                guards: [(pc, Expect::Taken)].into_iter().collect(),
            }),
        );
        let err = Compiler::new(host)
            .unwrap()
            .compile(&insns, &opts)
            .unwrap_err();
        assert!(
            matches!(err, CompileError::BadGuard { pc: p, .. } if p == pc),
            "{err}"
        );
    }
}

#[test]
fn resume_refuses_inconsistent_states() {
    let insns = assemble(PROGRAM).unwrap();
    let vm = Vm::new(
        &insns,
        &MapSet::default(),
        &Helpers::standard(),
        Config::default(),
    )
    .unwrap();
    let mut state = DeoptRunState::boxed(0);
    let top = state.stack_top();
    let mut try_resume = |pc: usize, r10: u64, frames: &[ResumeFrame]| {
        let mut regs = [0u64; 11];
        regs[10] = r10;
        vm.resume_checked(
            Input::Empty,
            Resume {
                pc,
                regs,
                frames,
                stack: &mut state.stack[..],
                packet: None,
                max_steps: None,
            },
        )
    };
    assert!(try_resume(99, top, &[]).is_err(), "pc outside the program");
    assert!(
        try_resume(0, top - 8, &[]).is_err(),
        "r10 not at a frame top"
    );
    let bad_ret = [ResumeFrame {
        ret: 1000,
        saved: [0; 4],
    }];
    assert!(
        try_resume(7, top - 512, &bad_ret).is_err(),
        "return slot outside"
    );
}

proptest::proptest! {
    /// Whatever state a broken fast path hands over, the checked resume refuses it or fails
    /// with a run error: it never panics and never reaches outside the run's memory.
    #[test]
    fn arbitrary_states_never_panic_a_checked_resume(
        pc in 0usize..20,
        depth in 0usize..9,
        rets in proptest::collection::vec(0usize..20, 8),
        raw in proptest::collection::vec(proptest::num::u64::ANY, 11),
        in_stack in proptest::collection::vec(0u64..4096, 11),
        pick in proptest::collection::vec(proptest::bool::ANY, 11),
        consistent_fp in proptest::bool::ANY,
    ) {
        let insns = assemble(PROGRAM).unwrap();
        let vm = Vm::new(
            &insns,
            &MapSet::default(),
            &Helpers::standard(),
            Config { max_steps: 10_000, ..Config::default() },
        )
        .unwrap();
        let mut state = DeoptRunState::boxed(0);
        let top = state.stack_top();
        let frames: Vec<ResumeFrame> = (0..depth)
            .map(|k| ResumeFrame { ret: rets[k], saved: [raw[k], 0, 0, 0] })
            .collect();
        let mut regs = [0u64; 11];
        for i in 0..11 {
            regs[i] = if pick[i] { top - in_stack[i] } else { raw[i] };
        }
        if consistent_fp {
            regs[10] = top - depth as u64 * 512;
        }
        let _ = vm.resume_checked(
            Input::Empty,
            Resume {
                pc,
                regs,
                frames: &frames,
                stack: &mut state.stack[..],
                packet: None,
                max_steps: Some(10_000),
            },
        );
    }
}
