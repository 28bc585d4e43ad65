//! Hostile bytecode: deep branching, long loops, huge programs, stack overflow through call
//! chains and random bytes all end in an answer with a reason; nothing panics or runs away.

use proptest::prelude::*;
use rdx_bpf::isa::{AluOp, CallTarget, Insn, JmpCond, Operand, Reg, Size, Width};
use rdx_verifier::{verify_insns, KernelProgType, Rule, VerifyOptions};

fn xdp() -> VerifyOptions {
    VerifyOptions::kernel(KernelProgType::Xdp)
}

/// The same rules with a tenth of the exploration budget, to keep debug-build tests quick;
/// the corpus checks the full 1M limit (`unbounded_loop.s`).
fn xdp_small() -> VerifyOptions {
    let mut o = xdp();
    o.limits.max_processed = 100_000;
    o
}

fn mov(r: u8, i: i32) -> Insn {
    Insn::Alu {
        width: Width::W64,
        op: AluOp::Mov,
        dst: Reg(r),
        src: Operand::Imm(i),
    }
}

fn add(r: u8, i: i32) -> Insn {
    Insn::Alu {
        width: Width::W64,
        op: AluOp::Add,
        dst: Reg(r),
        src: Operand::Imm(i),
    }
}

#[test]
fn deep_branching_is_refused_as_too_complex() {
    // 40 independent unknown bits, each doubling the distinct states: 2^40 paths.
    let mut p = vec![
        Insn::Call(CallTarget::Helper(7)),
        Insn::Alu {
            width: Width::W64,
            op: AluOp::Mov,
            dst: Reg(6),
            src: Operand::Reg(Reg(0)),
        },
        mov(7, 0),
    ];
    for i in 0..40 {
        p.push(Insn::Jmp {
            width: Width::W64,
            cond: JmpCond::Set,
            dst: Reg(6),
            src: Operand::Imm(1 << (i % 31)),
            off: 1,
        });
        p.push(add(7, 1 << (i % 20)));
        p.push(Insn::Alu {
            width: Width::W64,
            op: AluOp::Lsh,
            dst: Reg(7),
            src: Operand::Imm(1),
        });
    }
    p.push(mov(0, 0));
    p.push(Insn::Exit);
    let e = verify_insns(&p, &[], &xdp_small()).unwrap_err();
    assert_eq!(e.rule, Rule::TooComplex, "{e}");
}

#[test]
fn long_loop_hits_the_processed_limit() {
    let p = vec![
        mov(0, 0),
        add(0, 1),
        Insn::Jmp {
            width: Width::W64,
            cond: JmpCond::Lt,
            dst: Reg(0),
            src: Operand::Imm(10_000_000),
            off: -2,
        },
        Insn::Exit,
    ];
    let e = verify_insns(&p, &[], &xdp_small()).unwrap_err();
    assert_eq!(e.rule, Rule::TooComplex, "{e}");
    assert_eq!(e.pc.map(|pc| pc < 4), Some(true));
}

#[test]
fn huge_programs_are_refused_or_verified_linearly() {
    let mut big = vec![mov(0, 0); 1_000_001];
    big.push(Insn::Exit);
    let e = verify_insns(&big, &[], &xdp()).unwrap_err();
    assert_eq!(e.rule, Rule::TooComplex);
    // Long straight-line code fits in the budget and is counted exactly.
    let mut ok = vec![add(0, 1); 100_000];
    ok[0] = mov(0, 0);
    ok.push(Insn::Exit);
    let v = verify_insns(&ok, &[], &xdp()).unwrap();
    assert_eq!(v.worst_case_insns, Some(100_001));
}

/// A chain of `depth` functions, each using `stack` bytes and calling the next.
fn call_chain(depth: usize, stack: i16) -> Vec<Insn> {
    let mut p = Vec::new();
    for f in 0..depth {
        p.push(Insn::Store {
            size: Size::DW,
            base: Reg(10),
            off: -stack,
            src: Operand::Imm(1),
        });
        if f + 1 < depth {
            p.push(Insn::Call(CallTarget::Local(2)));
        }
        p.push(mov(0, 0));
        p.push(Insn::Exit);
    }
    p
}

#[test]
fn stack_overflow_through_call_chains_is_refused() {
    assert!(verify_insns(&call_chain(4, 128), &[], &xdp()).is_ok());
    let e = verify_insns(&call_chain(5, 128), &[], &xdp()).unwrap_err();
    assert_eq!(e.rule, Rule::StackLimit, "{e}");
    let e = verify_insns(&call_chain(9, 8), &[], &xdp()).unwrap_err();
    assert_eq!(e.rule, Rule::CallDepth, "{e}");
}

#[test]
fn errors_name_the_instruction_and_state() {
    let p = vec![
        Insn::Load {
            size: Size::DW,
            sign_extend: false,
            dst: Reg(0),
            base: Reg(2),
            off: 0,
        },
        Insn::Exit,
    ];
    let e = verify_insns(&p, &[], &xdp()).unwrap_err();
    assert_eq!((e.rule, e.pc), (Rule::UninitRegister, Some(0)));
    let text = e.to_string();
    assert!(
        text.contains("instruction 0")
            && text.contains("r0 = *(u64 *)(r2 + 0)")
            && text.contains("r1=ctx"),
        "{text}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(insns) = rdx_bpf::isa::decode_bytes(&bytes) {
            let mut o = xdp();
            o.limits.max_processed = 20_000;
            let _ = verify_insns(&insns, &[], &o);
        }
    }
}
