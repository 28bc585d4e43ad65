//! Soundness oracle for budgeted classes, where loops that cannot be bounded are verified with
//! widening: random programs with loops (bounded by constants or by unknown values) over a
//! 64-byte context, the stack and map values. Every accepted program must run in the checked
//! interpreter without any error other than running out of its step budget.
//!
//! CI runs a fixed seed and a bounded number of cases; longer runs:
//! `PROPTEST_CASES=50000 cargo test --release -p rdx-verifier --test soundness_budget`.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{self, Input, RunErrorKind, Vm};
use rdx_bpf::isa::{AluOp, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width};
use rdx_bpf::maps::MapSet;
use rdx_bpf::{MapDef, MapOrigin};
use rdx_region::layout::MapType;
use rdx_verifier::{verify_insns, EimSpec, VerifyOptions};
use std::cell::Cell;

const SPEC: &str = r#"
version: 1
hooks:
  - name: buf
    context:
      size: 64
      fields:
        - { name: data, offset: 0, size: 64, access: read_write }
classes:
  - name: metered
    hook: buf
    context: { read: [data], write: [data] }
    helpers: [map_lookup_elem, get_prandom_u32]
    instructions: "< 100000"
    xstate_bytes: 4096
"#;

fn alu(op: AluOp, dst: u8, src: Operand) -> Insn {
    Insn::Alu {
        width: Width::W64,
        op,
        dst: Reg(dst),
        src,
    }
}

#[derive(Clone, Debug)]
enum Inner {
    Alu(u8, AluOp, u8),
    AluImm(u8, AluOp, i32),
    Stack(i16, Size, u8, bool),
    Ctx(i16, Size, u8, bool),
    Map {
        idx_reg: u8,
        mask: i32,
        off: i16,
        size: Size,
        write: bool,
    },
    Skip(u8, JmpCond, i32),
}

#[derive(Clone, Debug)]
struct Loop {
    body: Vec<Inner>,
    bound: Operand,
    counter: u8,
}

fn reg() -> impl Strategy<Value = u8> {
    prop_oneof![6u8..10, Just(0u8), Just(3u8)]
}

fn size() -> impl Strategy<Value = Size> {
    prop_oneof![Just(Size::B), Just(Size::H), Just(Size::W), Just(Size::DW)]
}

fn inner() -> impl Strategy<Value = Inner> {
    let op = prop_oneof![
        Just(AluOp::Add),
        Just(AluOp::Sub),
        Just(AluOp::And),
        Just(AluOp::Mul),
        Just(AluOp::Rsh),
        Just(AluOp::Lsh),
        Just(AluOp::Xor),
        Just(AluOp::Mov)
    ];
    prop_oneof![
        (reg(), op.clone(), reg()).prop_map(|(d, o, s)| Inner::Alu(d, o, s)),
        (reg(), op, -3i32..40).prop_map(|(d, o, i)| Inner::AluImm(d, o, i)),
        (1i16..5, size(), reg(), any::<bool>()).prop_map(|(s, z, r, w)| Inner::Stack(
            -8 * s,
            z,
            r,
            w
        )),
        (-2i16..66, size(), reg(), any::<bool>()).prop_map(|(o, z, r, w)| Inner::Ctx(o, z, r, w)),
        (
            reg(),
            prop_oneof![Just(3), Just(7), Just(15), Just(31), Just(-1)],
            -1i16..33,
            size(),
            any::<bool>()
        )
            .prop_map(|(idx_reg, mask, off, size, write)| Inner::Map {
                idx_reg,
                mask,
                off,
                size,
                write
            }),
        (
            reg(),
            prop_oneof![Just(JmpCond::Gt), Just(JmpCond::Eq), Just(JmpCond::Set)],
            0i32..20
        )
            .prop_map(|(r, c, i)| Inner::Skip(r, c, i)),
    ]
}

fn lp() -> impl Strategy<Value = Loop> {
    (
        proptest::collection::vec(inner(), 1..4),
        prop_oneof![
            (1i32..40).prop_map(Operand::Imm),
            reg().prop_map(|r| Operand::Reg(Reg(r)))
        ],
        prop_oneof![Just(8u8), Just(9u8)],
    )
        .prop_map(|(body, bound, counter)| Loop {
            body,
            bound,
            counter,
        })
}

fn lower_inner(b: &Inner) -> Vec<Insn> {
    match *b {
        Inner::Alu(d, o, s) => vec![alu(o, d, Operand::Reg(Reg(s)))],
        Inner::AluImm(d, o, i) => vec![alu(o, d, Operand::Imm(i))],
        Inner::Stack(off, size, r, w) => vec![if w {
            Insn::Store {
                size,
                base: Reg(10),
                off,
                src: Operand::Reg(Reg(r)),
            }
        } else {
            Insn::Load {
                size,
                sign_extend: false,
                dst: Reg(r),
                base: Reg(10),
                off,
            }
        }],
        Inner::Ctx(off, size, r, w) => vec![if w {
            Insn::Store {
                size,
                base: Reg(1),
                off,
                src: Operand::Reg(Reg(r)),
            }
        } else {
            Insn::Load {
                size,
                sign_extend: false,
                dst: Reg(r),
                base: Reg(1),
                off,
            }
        }],
        Inner::Map {
            idx_reg,
            mask,
            off,
            size,
            write,
        } => {
            let access = if write {
                Insn::Store {
                    size,
                    base: Reg(0),
                    off,
                    src: Operand::Imm(9),
                }
            } else {
                Insn::Load {
                    size,
                    sign_extend: false,
                    dst: Reg(7),
                    base: Reg(0),
                    off,
                }
            };
            vec![
                alu(AluOp::Mov, 6, Operand::Reg(Reg(1))),
                alu(AluOp::Mov, 7, Operand::Reg(Reg(idx_reg))),
                Insn::Store {
                    size: Size::W,
                    base: Reg(10),
                    off: -40,
                    src: Operand::Imm(0),
                },
                alu(AluOp::Mov, 2, Operand::Reg(Reg(10))),
                alu(AluOp::Add, 2, Operand::Imm(-40)),
                Insn::LoadImm64 {
                    dst: Reg(1),
                    kind: ImmKind::MapIdx,
                    imm_lo: 0,
                    imm_hi: 0,
                },
                Insn::LoadImm64Hi,
                Insn::Call(CallTarget::Helper(1)),
                Insn::Jmp {
                    width: Width::W64,
                    cond: JmpCond::Eq,
                    dst: Reg(0),
                    src: Operand::Imm(0),
                    off: 4,
                },
                alu(AluOp::And, 7, Operand::Imm(mask)),
                alu(AluOp::Add, 0, Operand::Reg(Reg(7))),
                access,
                alu(AluOp::Mov, 0, Operand::Imm(0)),
                alu(AluOp::Mov, 1, Operand::Reg(Reg(6))),
            ]
        }
        Inner::Skip(r, c, i) => vec![
            Insn::Jmp {
                width: Width::W64,
                cond: c,
                dst: Reg(r),
                src: Operand::Imm(i),
                off: 1,
            },
            alu(AluOp::Add, r, Operand::Imm(1)),
        ],
    }
}

fn lower(loops: &[Loop]) -> Vec<Insn> {
    let mut p = Vec::new();
    for r in [0u8, 2, 3, 4, 5, 6, 7, 8, 9] {
        p.push(alu(AluOp::Mov, r, Operand::Imm(r as i32)));
    }
    for k in 1..=5i16 {
        p.push(Insn::Store {
            size: Size::DW,
            base: Reg(10),
            off: -8 * k,
            src: Operand::Imm(0),
        });
    }
    for l in loops {
        p.push(alu(AluOp::Mov, l.counter, Operand::Imm(0)));
        let start = p.len();
        for b in &l.body {
            p.extend(lower_inner(b));
        }
        p.push(alu(AluOp::Add, l.counter, Operand::Imm(1)));
        let here = p.len();
        p.push(Insn::Jmp {
            width: Width::W64,
            cond: JmpCond::Lt,
            dst: Reg(l.counter),
            src: l.bound,
            off: (start as i64 - here as i64 - 1) as i16,
        });
    }
    p.push(alu(AluOp::Mov, 0, Operand::Imm(0)));
    p.push(Insn::Exit);
    p
}

#[test]
fn accepted_budgeted_programs_run_safely() {
    let cases: u32 = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let seed: u64 = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0xb0d9e7);
    let mut runner = TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    });
    let spec = EimSpec::from_yaml(SPEC).unwrap();
    let opts = VerifyOptions::eim(&spec, "buf", "metered").unwrap();
    let maps = [MapDef {
        name: "t".into(),
        map_type: MapType::Array.into(),
        key_size: 4,
        value_size: 32,
        max_entries: 1,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    }];
    let (accepted, metered) = (Cell::new(0u32), Cell::new(0u32));
    let result = runner.run(
        &(proptest::collection::vec(lp(), 1..3), any::<[u8; 64]>()),
        |(loops, bytes)| {
            let insns = lower(&loops);
            let Ok(v) = verify_insns(&insns, &maps, &opts) else {
                return Ok(());
            };
            accepted.set(accepted.get() + 1);
            if v.needs_budget {
                metered.set(metered.get() + 1);
            }
            let set = MapSet::new(&maps).unwrap();
            let vm = Vm::new(
                &insns,
                &set,
                &Helpers::standard(),
                interp::Config {
                    max_steps: 200_000,
                    ..interp::Config::default()
                },
            )
            .unwrap();
            let mut ctx = bytes;
            match vm.run_checked(Input::Bytes(&mut ctx)) {
                Ok(_) => {}
                Err(e) if matches!(e.kind, RunErrorKind::StepLimit(_)) => {
                    prop_assert!(
                        v.needs_budget,
                        "a program with worst case {:?} ran out of steps",
                        v.worst_case_insns
                    )
                }
                Err(e) => prop_assert!(
                    false,
                    "accepted program failed at run time: {e}\n{}",
                    rdx_bpf::disasm::disassemble(&insns)
                ),
            }
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        accepted.get() * 10 >= cases,
        "only {} of {cases} accepted",
        accepted.get()
    );
    assert!(
        metered.get() > 0,
        "no accepted program needed a budget: widening was not exercised"
    );
}
