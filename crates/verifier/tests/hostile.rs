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

/// Arbitrary decoded instructions, including ones the decoder would refuse (jumps out of
/// range, stray `lddw` halves, odd widths): the API takes `&[Insn]`, so it must cope.
fn any_insn() -> impl Strategy<Value = Insn> {
    use rdx_bpf::isa::{AtomicOp, ByteOrder, ImmKind};
    let r = || (0u8..11).prop_map(Reg);
    let operand = prop_oneof![
        any::<i32>().prop_map(Operand::Imm),
        (0u8..11).prop_map(|x| Operand::Reg(Reg(x)))
    ];
    let size = prop_oneof![Just(Size::B), Just(Size::H), Just(Size::W), Just(Size::DW)];
    let op = prop_oneof![
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
        Just(AluOp::Arsh),
        any::<u8>().prop_map(AluOp::MovSx),
    ];
    let cond = prop_oneof![
        Just(JmpCond::Eq),
        Just(JmpCond::Gt),
        Just(JmpCond::Set),
        Just(JmpCond::Sle),
        Just(JmpCond::Ne)
    ];
    let width = prop_oneof![Just(Width::W32), Just(Width::W64)];
    prop_oneof![
        4 => (width.clone(), op, r(), operand.clone()).prop_map(|(width, op, dst, src)| Insn::Alu { width, op, dst, src }),
        1 => (any::<u8>(), r()).prop_map(|(bits, dst)| Insn::Endian { order: ByteOrder::ToBe, bits, dst }),
        1 => (-20i32..20).prop_map(|off| Insn::Ja { off }),
        3 => (width, cond, r(), operand.clone(), -20i16..20).prop_map(|(width, cond, dst, src, off)| Insn::Jmp { width, cond, dst, src, off }),
        1 => prop_oneof![(-3i32..140).prop_map(CallTarget::Helper), (-10i32..10).prop_map(CallTarget::Local)].prop_map(Insn::Call),
        2 => Just(Insn::Exit),
        3 => (size.clone(), any::<bool>(), r(), r(), -600i16..600).prop_map(|(size, sign_extend, dst, base, off)| Insn::Load { size, sign_extend, dst, base, off }),
        3 => (size.clone(), r(), -600i16..600, operand).prop_map(|(size, base, off, src)| Insn::Store { size, base, off, src }),
        1 => (size, r(), -600i16..600, r(), any::<bool>()).prop_map(|(size, base, off, src, fetch)| Insn::Atomic { size, op: AtomicOp::Add, fetch, base, off, src }),
        1 => (r(), prop_oneof![Just(ImmKind::Imm), Just(ImmKind::MapIdx), Just(ImmKind::MapIdxValue)], -2i32..3, -2i32..40)
            .prop_map(|(dst, kind, imm_lo, imm_hi)| Insn::LoadImm64 { dst, kind, imm_lo, imm_hi }),
        1 => Just(Insn::LoadImm64Hi),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn arbitrary_instructions_never_panic(insns in proptest::collection::vec(any_insn(), 1..40)) {
        let maps = [rdx_bpf::MapDef {
            name: "m".into(),
            map_type: rdx_region::layout::MapType::Array.into(),
            key_size: 4,
            value_size: 16,
            max_entries: 1,
            flags: 0,
            origin: rdx_bpf::MapOrigin::Btf,
            initial_value: None,
            read_only: false,
        }];
        let mut o = xdp();
        o.limits.max_processed = 20_000;
        let _ = verify_insns(&insns, &maps, &o);
        let mut s = VerifyOptions::kernel(KernelProgType::SocketFilter);
        s.limits.max_processed = 20_000;
        let _ = verify_insns(&insns, &maps, &s);
    }
}
