//! Soundness oracle: random programs, biased toward packet, stack and map-value accesses and
//! branches, are verified as XDP programs; every program the verifier accepts must run in the
//! checked interpreter without an out-of-bounds access, an uninitialised register read or any
//! other run-time error, on random packets. And at every instruction of those runs, the
//! concrete registers and stack must be described by one of the abstract states the verifier
//! recorded there (state embedding, `rdx_verifier::embed`): a wrong bound is caught where it
//! is made, even when no bad access follows.
//!
//! CI runs a fixed seed and a bounded number of cases. Longer runs:
//! `PROPTEST_CASES=100000 cargo test --release -p rdx-verifier --test soundness`
//! (`PROPTEST_RNG_SEED=<n>` picks another seed).

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{self, Vm, XdpMd};
use rdx_bpf::isa::{AluOp, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width};
use rdx_bpf::maps::MapSet;
use rdx_bpf::{MapDef, MapOrigin};
use rdx_region::layout::MapType;
use rdx_verifier::{verify_insns, KernelProgType, Rule, VerifyOptions};

mod embedding;

use embedding::EmbeddedXdp;
use rdx_verifier::embed::{run_embedded, EmbeddedRun};
use std::cell::Cell;

fn table() -> MapDef {
    MapDef {
        name: "table".into(),
        map_type: MapType::Array.into(),
        key_size: 4,
        value_size: 32,
        max_entries: 4,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    }
}

/// One building block of a random program; each expands to a few instructions.
#[derive(Clone, Debug)]
enum Block {
    MovImm(u8, i32),
    Alu(u8, AluOp, u8),
    AluImm(u8, AluOp, i32),
    StackStore(i16, Size, u8),
    StackStoreImm(i16, Size, i32),
    StackLoad(u8, i16, Size),
    /// `rX = data + k; if rX > data_end goto skip; load/store data[off]`.
    PacketCheckedAccess {
        k: i32,
        off: i16,
        size: Size,
        write: bool,
        dst: u8,
    },
    /// A packet access with no check (must be rejected unless already covered).
    PacketAccess {
        off: i16,
        size: Size,
        dst: u8,
    },
    /// `data += (rY & mask)` then a check and an access.
    PacketVarAccess {
        src: u8,
        mask: i32,
        k: i32,
        off: i16,
        size: Size,
    },
    /// Map lookup with key `idx` from the stack, optional null check, access at `off` (+ rY & mask).
    MapAccess {
        idx: i32,
        check: bool,
        off: i16,
        size: Size,
        var: Option<(u8, i32)>,
        write: bool,
    },
    CtxLoad(u8, i16, Size),
    /// Forward conditional jump over the next `skip` blocks' worth of instructions.
    Branch(u8, JmpCond, Operand, u8),
}

fn reg() -> impl Strategy<Value = u8> {
    prop_oneof![3 => 6u8..10, 1 => 0u8..6]
}

fn size() -> impl Strategy<Value = Size> {
    prop_oneof![Just(Size::B), Just(Size::H), Just(Size::W), Just(Size::DW)]
}

fn alu_op() -> impl Strategy<Value = AluOp> {
    prop_oneof![
        Just(AluOp::Add),
        Just(AluOp::Sub),
        Just(AluOp::And),
        Just(AluOp::Or),
        Just(AluOp::Xor),
        Just(AluOp::Lsh),
        Just(AluOp::Rsh),
        Just(AluOp::Mul),
        Just(AluOp::Mov),
        Just(AluOp::Arsh),
        Just(AluOp::Div),
        Just(AluOp::Mod),
    ]
}

fn cond() -> impl Strategy<Value = JmpCond> {
    use JmpCond::*;
    prop_oneof![
        Just(Eq),
        Just(Ne),
        Just(Gt),
        Just(Ge),
        Just(Lt),
        Just(Le),
        Just(Sgt),
        Just(Slt),
        Just(Set)
    ]
}

fn block() -> impl Strategy<Value = Block> {
    prop_oneof![
        2 => (reg(), -8i32..80).prop_map(|(r, i)| Block::MovImm(r, i)),
        2 => (reg(), alu_op(), reg()).prop_map(|(d, o, s)| Block::Alu(d, o, s)),
        2 => (reg(), alu_op(), -4i32..70).prop_map(|(d, o, i)| Block::AluImm(d, o, i)),
        2 => (1i16..9, size(), reg()).prop_map(|(s, z, r)| Block::StackStore(-8 * s, z, r)),
        1 => (1i16..9, size(), -3i32..300).prop_map(|(s, z, i)| Block::StackStoreImm(-8 * s, z, i)),
        2 => (reg(), 1i16..9, size()).prop_map(|(r, s, z)| Block::StackLoad(r, -8 * s, z)),
        4 => (0i32..40, -2i16..40, size(), any::<bool>(), reg()).prop_map(|(k, off, size, write, dst)| Block::PacketCheckedAccess { k, off, size, write, dst }),
        1 => (-1i16..20, size(), reg()).prop_map(|(off, size, dst)| Block::PacketAccess { off, size, dst }),
        3 => (reg(), prop_oneof![Just(7), Just(15), Just(31), Just(255), Just(-1)], 0i32..24, -1i16..20, size())
            .prop_map(|(src, mask, k, off, size)| Block::PacketVarAccess { src, mask, k, off, size }),
        4 => (0i32..6, prop_oneof![5 => Just(true), 1 => Just(false)], -2i16..34, size(),
              proptest::option::of((reg(), prop_oneof![Just(7), Just(15), Just(31), Just(63)])), any::<bool>())
            .prop_map(|(idx, check, off, size, var, write)| Block::MapAccess { idx, check, off, size, var, write }),
        2 => (reg(), prop_oneof![4 => (0i16..6).prop_map(|i| i * 4), 1 => 0i16..26], prop_oneof![4 => Just(Size::W), 1 => size()])
            .prop_map(|(r, o, z)| Block::CtxLoad(r, o, z)),
        4 => (reg(), cond(), prop_oneof![(-2i32..70).prop_map(Operand::Imm), reg().prop_map(|r| Operand::Reg(Reg(r)))], 1u8..4)
            .prop_map(|(r, c, o, s)| Block::Branch(r, c, o, s)),
    ]
}

const R: fn(u8) -> Reg = Reg;

fn alu(op: AluOp, dst: u8, src: Operand) -> Insn {
    Insn::Alu {
        width: Width::W64,
        op,
        dst: R(dst),
        src,
    }
}

/// Lowers blocks to instructions. r1 stays the context; packet pointers are reloaded into
/// r2/r3 by the blocks that need them, so random ALU on them only makes more rejections.
fn lower(blocks: &[Block]) -> Vec<Insn> {
    let mut chunks: Vec<Vec<Insn>> = Vec::new();
    for b in blocks {
        let mut v = Vec::new();
        let load_pkt = |v: &mut Vec<Insn>| {
            v.push(Insn::Load {
                size: Size::W,
                sign_extend: false,
                dst: R(2),
                base: R(1),
                off: 0,
            });
            v.push(Insn::Load {
                size: Size::W,
                sign_extend: false,
                dst: R(3),
                base: R(1),
                off: 4,
            });
        };
        match *b {
            Block::MovImm(r, i) => v.push(alu(AluOp::Mov, r, Operand::Imm(i))),
            Block::Alu(d, op, s) => v.push(alu(op, d, Operand::Reg(R(s)))),
            Block::AluImm(d, op, i) => v.push(alu(op, d, Operand::Imm(i))),
            Block::StackStore(off, size, r) => v.push(Insn::Store {
                size,
                base: R(10),
                off,
                src: Operand::Reg(R(r)),
            }),
            Block::StackStoreImm(off, size, i) => v.push(Insn::Store {
                size,
                base: R(10),
                off,
                src: Operand::Imm(i),
            }),
            Block::StackLoad(r, off, size) => v.push(Insn::Load {
                size,
                sign_extend: false,
                dst: R(r),
                base: R(10),
                off,
            }),
            Block::PacketCheckedAccess {
                k,
                off,
                size,
                write,
                dst,
            } => {
                load_pkt(&mut v);
                v.push(alu(AluOp::Mov, 4, Operand::Reg(R(2))));
                v.push(alu(AluOp::Add, 4, Operand::Imm(k)));
                v.push(Insn::Jmp {
                    width: Width::W64,
                    cond: JmpCond::Gt,
                    dst: R(4),
                    src: Operand::Reg(R(3)),
                    off: 1,
                });
                v.push(if write {
                    Insn::Store {
                        size,
                        base: R(2),
                        off,
                        src: Operand::Imm(0x5a),
                    }
                } else {
                    Insn::Load {
                        size,
                        sign_extend: false,
                        dst: R(dst),
                        base: R(2),
                        off,
                    }
                });
            }
            Block::PacketAccess { off, size, dst } => {
                load_pkt(&mut v);
                v.push(Insn::Load {
                    size,
                    sign_extend: false,
                    dst: R(dst),
                    base: R(2),
                    off,
                });
            }
            Block::PacketVarAccess {
                src,
                mask,
                k,
                off,
                size,
            } => {
                load_pkt(&mut v);
                v.push(alu(AluOp::Mov, 5, Operand::Reg(R(src))));
                v.push(alu(AluOp::And, 5, Operand::Imm(mask)));
                v.push(alu(AluOp::Add, 2, Operand::Reg(R(5))));
                v.push(alu(AluOp::Mov, 4, Operand::Reg(R(2))));
                v.push(alu(AluOp::Add, 4, Operand::Imm(k)));
                v.push(Insn::Jmp {
                    width: Width::W64,
                    cond: JmpCond::Gt,
                    dst: R(4),
                    src: Operand::Reg(R(3)),
                    off: 1,
                });
                v.push(Insn::Load {
                    size,
                    sign_extend: false,
                    dst: R(0),
                    base: R(2),
                    off,
                });
            }
            Block::MapAccess {
                idx,
                check,
                off,
                size,
                var,
                write,
            } => {
                v.push(alu(AluOp::Mov, 6, Operand::Reg(R(1))));
                v.push(Insn::Store {
                    size: Size::W,
                    base: R(10),
                    off: -68,
                    src: Operand::Imm(idx),
                });
                v.push(alu(AluOp::Mov, 2, Operand::Reg(R(10))));
                v.push(alu(AluOp::Add, 2, Operand::Imm(-68)));
                v.push(Insn::LoadImm64 {
                    dst: R(1),
                    kind: ImmKind::MapIdx,
                    imm_lo: 0,
                    imm_hi: 0,
                });
                v.push(Insn::LoadImm64Hi);
                v.push(Insn::Call(rdx_bpf::isa::CallTarget::Helper(1)));
                let mut tail = Vec::new();
                if let Some((r, mask)) = var {
                    tail.push(alu(AluOp::Mov, 5, Operand::Reg(R(r))));
                    tail.push(alu(AluOp::And, 5, Operand::Imm(mask)));
                    tail.push(alu(AluOp::Add, 0, Operand::Reg(R(5))));
                }
                tail.push(if write {
                    Insn::Store {
                        size,
                        base: R(0),
                        off,
                        src: Operand::Imm(7),
                    }
                } else {
                    Insn::Load {
                        size,
                        sign_extend: false,
                        dst: R(7),
                        base: R(0),
                        off,
                    }
                });
                if check {
                    v.push(Insn::Jmp {
                        width: Width::W64,
                        cond: JmpCond::Eq,
                        dst: R(0),
                        src: Operand::Imm(0),
                        off: tail.len() as i16,
                    });
                }
                v.extend(tail);
                v.push(alu(AluOp::Mov, 1, Operand::Reg(R(6))));
            }
            Block::CtxLoad(r, off, size) => v.push(Insn::Load {
                size,
                sign_extend: false,
                dst: R(r),
                base: R(1),
                off,
            }),
            Block::Branch(r, c, o, _) => v.push(Insn::Jmp {
                width: Width::W64,
                cond: c,
                dst: R(r),
                src: o,
                off: 0,
            }),
        }
        chunks.push(v);
    }
    // Resolve branch offsets: skip the next `s` chunks.
    for i in 0..chunks.len() {
        if let Block::Branch(_, _, _, s) = blocks[i] {
            let skip: usize = chunks[i + 1..(i + 1 + s as usize).min(chunks.len())]
                .iter()
                .map(|c| c.len())
                .sum();
            if let Some(Insn::Jmp { off, .. }) = chunks[i].last_mut() {
                *off = skip as i16;
            }
        }
    }
    // Prologue: every register but r1 (the context) and the top 64 stack bytes hold numbers,
    // so that most programs get past initialisation and exercise the memory rules.
    let mut insns: Vec<Insn> = Vec::new();
    for r in [0u8, 2, 3, 4, 5, 6, 7, 8, 9] {
        insns.push(alu(AluOp::Mov, r, Operand::Imm(r as i32 * 3)));
    }
    for k in 1..=8i16 {
        insns.push(Insn::Store {
            size: Size::DW,
            base: R(10),
            off: -8 * k,
            src: Operand::Imm(k as i32),
        });
    }
    insns.extend(chunks.concat());
    insns.push(alu(AluOp::Mov, 0, Operand::Imm(2)));
    insns.push(Insn::Exit);
    insns
}

#[test]
fn accepted_programs_run_safely() {
    let cases: u32 = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    let seed: u64 = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_2026);
    let mut runner = TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    });
    let maps = [table()];
    let opts = VerifyOptions::kernel(KernelProgType::Xdp);
    let accepted = Cell::new(0u32);
    let strategy = (
        proptest::collection::vec(block(), 1..14),
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 4),
    );
    let full = VerifyOptions {
        liveness: false,
        record_states: true,
        ..opts.clone()
    };
    let result = runner.run(&strategy, |(blocks, packets)| {
        let insns = lower(&blocks);
        // Liveness only lets states that differ in dead values meet: the verdict (and the
        // rule of a rejection, and the exact worst case) must be the same as when every value
        // is compared.
        let verdict = verify_insns(&insns, &maps, &opts);
        let reference = verify_insns(&insns, &maps, &full);
        match (&verdict, &reference) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a.worst_case_insns, b.worst_case_insns),
            (Err(a), Err(b)) => prop_assert_eq!(a.rule, b.rule),
            (Ok(_), Err(e)) if e.rule == Rule::TooComplex => {}
            _ => prop_assert!(
                false,
                "with liveness {:?}, comparing everything {:?}\n{}",
                verdict
                    .as_ref()
                    .map(|v| v.processed_insns)
                    .map_err(|e| e.to_string()),
                reference
                    .as_ref()
                    .map(|v| v.processed_insns)
                    .map_err(|e| e.to_string()),
                rdx_bpf::disasm::disassemble(&insns)
            ),
        }
        let Ok(_) = verdict else {
            return Ok(());
        };
        let Ok(recorded) = reference else {
            return Ok(());
        };
        accepted.set(accepted.get() + 1);
        let set = MapSet::new(&maps).unwrap();
        let vm = Vm::new(
            &insns,
            &set,
            &Helpers::standard(),
            interp::Config::default(),
        )
        .unwrap();
        for p in packets {
            let mut ctx = XdpMd::new(p.clone());
            match run_embedded(&vm, &set, &mut ctx, &recorded.states) {
                EmbeddedRun::Agreed(out) => prop_assert!(
                    out.is_ok(),
                    "accepted program failed at run time on a {}-byte packet: {:?}\n{}",
                    p.len(),
                    out,
                    rdx_bpf::disasm::disassemble(&insns)
                ),
                EmbeddedRun::Diverged(d) => prop_assert!(
                    false,
                    "state embedding on a {}-byte packet: {d}\n{}",
                    p.len(),
                    rdx_bpf::disasm::disassemble(&insns)
                ),
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // The generator must produce enough accepted programs for the property to mean something.
    assert!(
        accepted.get() * 10 >= cases,
        "only {} of {cases} random programs were accepted",
        accepted.get()
    );
}

/// The embedding check is only worth something if it fails on a wrong state: tamper with the
/// states recorded for a small packet program (a scalar bound, a packet range, a known-zero
/// stack byte) and the same run must diverge.
#[test]
fn embedding_catches_a_wrong_state() {
    use rdx_bpf::asm::assemble;
    use rdx_verifier::state::{ByteState, Slot, Value};
    let insns = assemble(
        "ldxw %r2, [%r1+0]
         ldxw %r3, [%r1+4]
         stdw [%r10-8], 0
         mov %r0, 5
         mov %r4, %r2
         add %r4, 8
         jgt %r4, %r3, out
         ldxb %r0, [%r2+7]
         out:
         mov %r0, 2
         exit",
    )
    .unwrap();
    let maps = [table()];
    let program = EmbeddedXdp::new(&insns, &maps);
    let run = |states: &[Vec<rdx_verifier::state::State>]| program.divergence(states);
    assert_eq!(
        run(&program.states),
        None,
        "the untouched states describe the run"
    );

    // r0 = 5 before `mov %r4, %r2` (pc 4): claim it is 6.
    let mut wrong = program.states.clone();
    for st in &mut wrong[4] {
        st.set(0, Value::scalar(rdx_verifier::scalar::Scalar::constant(6)));
    }
    let d = run(&wrong).expect("a wrong scalar is caught");
    assert!(d.contains("r0"), "{d}");

    // Before the packet load (pc 7): claim 64 bytes were checked instead of 8.
    let mut wrong = program.states.clone();
    for st in &mut wrong[7] {
        if let Value::Ptr(mut p) = st.reg(2) {
            p.range = 64;
            st.set(2, Value::Ptr(p));
        }
    }
    let d = run(&wrong).expect("a range past the packet is caught");
    assert!(d.contains("range 64"), "{d}");

    // After `stdw [%r10-8], 0`: claim a byte of the slot is zero when the run wrote 0x11.
    let insns2 = assemble("stdw [%r10-8], 0x11\nmov %r0, 2\nexit").unwrap();
    let program2 = EmbeddedXdp::new(&insns2, &maps);
    let mut wrong = program2.states.clone();
    for st in &mut wrong[1] {
        st.frames[0].stack[0] = Slot::Bytes([ByteState::Zero; 8]);
    }
    let d = program2.divergence(&wrong);
    let d = d.expect("a wrong known-zero byte is caught");
    assert!(d.contains("known zero"), "{d}");
}

/// The embedding also checks what no bound can express: copies that share an id hold one
/// number, and no number is an address (an unknown scalar contains every value, so a leaked
/// pointer is otherwise invisible to it).
#[test]
fn embedding_catches_split_ids_and_leaked_addresses() {
    use rdx_bpf::asm::assemble;
    use rdx_verifier::scalar::Scalar;
    use rdx_verifier::state::{Slot, Value};
    let insns = assemble(
        "ldxw %r2, [%r1+0]
         ldxw %r3, [%r1+4]
         stdw [%r10-8], 0
         mov %r0, 5
         mov %r4, %r2
         mov %r0, 2
         exit",
    )
    .unwrap();
    let program = EmbeddedXdp::new(&insns, &[table()]);
    let run = |states: &[Vec<rdx_verifier::state::State>]| program.divergence(states);
    assert_eq!(
        run(&program.states),
        None,
        "the untouched states describe the run"
    );

    // Before `mov %r4, %r2` (pc 4): r0 (5) and the slot at fp-8 (0) claimed to be copies.
    let mut wrong = program.states.clone();
    for st in &mut wrong[4] {
        let copy = Value::Scalar {
            val: Scalar::UNKNOWN,
            id: 99,
        };
        st.set(0, copy);
        st.frames[0].stack[0] = Slot::Spill(copy);
    }
    let d = run(&wrong).expect("copies holding different numbers are caught");
    assert!(d.contains("shares id 99"), "{d}");

    // At pc 4: the packet pointer in r2 claimed to be a number (a leak).
    let mut wrong = program.states.clone();
    for st in &mut wrong[4] {
        st.set(2, Value::unknown());
    }
    let d = run(&wrong).expect("an address held as a number is caught");
    assert!(d.contains("a pointer became a number"), "{d}");
}

/// The verifier (like the kernel) accepts narrow stores into `__sk_buff.cb`; the reference
/// interpreter must run them (it refused every store but a whole 32-bit field, so accepted
/// socket filters faulted; found by the biased generator at 40,000 cases).
#[test]
fn narrow_cb_stores_run() {
    use rdx_bpf::asm::assemble;
    use rdx_bpf::interp::{ContextModel, SkBuff};
    let insns = assemble(
        "stb [%r1+54], 0x5a
         sth [%r1+50], 0x1234
         stdw [%r1+56], -1
         ldxw %r0, [%r1+52]
         exit",
    )
    .unwrap();
    verify_insns(
        &insns,
        &[],
        &VerifyOptions::kernel(KernelProgType::SocketFilter),
    )
    .unwrap();
    let set = MapSet::new(&[]).unwrap();
    let vm = Vm::new(
        &insns,
        &set,
        &Helpers::standard(),
        interp::Config::default(),
    )
    .unwrap();
    let mut ctx = SkBuff::new(vec![0; 16]);
    let r0 = vm
        .run_checked(interp::Input::Context(&mut ctx as &mut dyn ContextModel))
        .unwrap();
    assert_eq!(r0, 0x005a_0000);
    assert_eq!(ctx.cb, [0x1234_0000, 0x005a_0000, u32::MAX, u32::MAX, 0]);
}

/// Found by the campaign (4.2 million programs, one failure): a value pointer kept across a
/// `map_delete_elem` of its entry still points at the map's value slot, which is all the
/// verifier claims; the embedding must not take the freed slot for a wrong state.
#[test]
fn a_value_pointer_kept_across_its_delete_embeds() {
    use rdx_bpf::asm::assemble;
    let mut text = String::new();
    for line in [
        "stdw [%r10-8], 0",
        "stdw [%r10-16], 7",
        "mov %r2, %r10",
        "add %r2, -8",
        "mov %r3, %r10",
        "add %r3, -16",
        "lddw %r1, 0",
        "mov %r4, 0",
        "call 2",
        "mov %r2, %r10",
        "add %r2, -8",
        "lddw %r1, 0",
        "call 1",
        "jeq %r0, 0, out",
        "mov %r6, %r0",
        "mov %r2, %r10",
        "add %r2, -8",
        "lddw %r1, 0",
        "call 3",
        "mov %r7, %r6",
        "out:",
        "mov %r0, 2",
        "exit",
    ] {
        text.push_str(line);
        text.push('\n');
    }
    let mut insns = assemble(&text).unwrap();
    // `lddw %r1, 0` stands for the map: make each one a reference to map 0.
    for i in &mut insns {
        if let Insn::LoadImm64 { kind, .. } = i {
            *kind = ImmKind::MapIdx;
        }
    }
    let maps = [MapDef {
        name: "flows".into(),
        map_type: MapType::Hash.into(),
        key_size: 8,
        value_size: 8,
        max_entries: 4,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    }];
    let program = EmbeddedXdp::new(&insns, &maps);
    assert!(matches!(
        program.run(&program.states),
        EmbeddedRun::Agreed(Ok(2))
    ));
}
