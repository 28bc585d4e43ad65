//! Soundness oracle with generators aimed at where verifier bugs live: large and
//! unrepresentable constants (`i64::MIN`, `MAX`, values around 2^29, 2^31, 2^32), chains of
//! pointer arithmetic on every pointer kind, comparisons through pointers with unknown
//! offsets, every data-map and ring-buffer helper with every map type (program arrays and
//! ring buffers included), tail calls, partial spills and helpers writing into spilled slots,
//! reads at variable stack offsets (bounded and unbounded, negative, shifted by extreme
//! constants, over spilled pointers, uninitialised bytes and both ends of the frame),
//! sign-extending loads and moves on pointers, 32-bit ALU and jumps.
//!
//! Every accepted program runs in the checked interpreter under state embedding
//! (`rdx_verifier::embed`): at every instruction the machine state must be described by one
//! of the abstract states the verifier recorded there, and no access may fault. Programs run
//! as XDP (packet pointers) and as socket filters (`skb_load_bytes` into the stack).
//!
//! CI runs a fixed seed and a bounded number of cases (`accepted_biased_programs_embed`). The
//! campaign (see docs/verifier.md) is the ignored test `campaign`:
//! `RDX_CAMPAIGN_CASES=10000000 cargo test --release -p rdx-verifier --test soundness_biased -- --ignored --nocapture campaign`
//! (`RDX_CAMPAIGN_SEED=<n>` picks another seed; `RDX_KERNEL_ORACLE=1` also loads every
//! accepted program into the running kernel and lists what the kernel refuses).

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngSeed, TestRunner};
use rdx_bpf::helpers::{HelperCtx, HelperError, Helpers};
use rdx_bpf::interp::{self, SkBuff, Vm, XdpMd};
use rdx_bpf::isa::{AluOp, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width};
use rdx_bpf::maps::MapSet;
use rdx_bpf::{MapDef, MapOrigin};
use rdx_region::helpers::HelperId;
use rdx_region::layout::MapType;
use rdx_verifier::embed::{run_embedded, EmbeddedRun};
use rdx_verifier::{verify_insns, KernelProgType, Rule, VerifyOptions};
use std::cell::RefCell;
use std::collections::BTreeMap;

fn map(name: &str, map_type: MapType, key_size: u32, value_size: u32, max: u32) -> MapDef {
    MapDef {
        name: name.into(),
        map_type: map_type.into(),
        key_size,
        value_size,
        max_entries: max,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    }
}

/// Map 0 is the array the prologue looks up; the others give every helper every map type.
fn maps() -> Vec<MapDef> {
    vec![
        map("table", MapType::Array, 4, 32, 4),
        map("flows", MapType::Hash, 8, 8, 16),
        map("jmp", MapType::ProgArray, 4, 4, 4),
        map("events", MapType::RingBuf, 0, 0, 4096),
        map("percpu", MapType::PerThreadArray, 4, 16, 2),
    ]
}

/// `bpf_tail_call` into an empty program array: it fails and the caller goes on, as the
/// kernel's does when the slot is empty.
fn empty_tail_call(_: &mut HelperCtx<'_, '_>, _: [u64; 5]) -> Result<u64, HelperError> {
    Ok((-2i64) as u64)
}

fn helpers() -> Helpers {
    let mut h = Helpers::standard();
    h.register(
        rdx_region::helpers::by_id(HelperId::TAIL_CALL).unwrap(),
        empty_tail_call,
    );
    h
}

/// 64-bit constants where arithmetic breaks.
fn extreme64() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0i64),
        Just(1),
        Just(-1),
        Just(i64::MIN),
        Just(i64::MAX),
        Just(i64::MIN + 1),
        Just((1 << 29) - 1),
        Just(1 << 29),
        Just(-(1 << 29)),
        Just(-(1 << 29) + 1),
        Just(0x1fff_fff0),
        Just(1 << 31),
        Just((1 << 31) - 1),
        Just(1 << 32),
        Just((1 << 32) - 1),
        Just(1 << 40),
        Just(-(1 << 40)),
        Just((1 << 40) - 0x1fff_fff0),
        Just(0xffff),
        Just(0x10000),
        (-70i64..70),
        any::<i64>(),
    ]
}

/// 32-bit immediates where arithmetic breaks.
fn extreme32() -> impl Strategy<Value = i32> {
    prop_oneof![
        Just(0i32),
        Just(1),
        Just(-1),
        Just(i32::MIN),
        Just(i32::MAX),
        Just((1 << 29) - 1),
        Just(1 << 29),
        Just(-(1 << 29)),
        Just(0x1fff_fff0),
        Just(0xffff),
        Just(0x10000),
        Just(31),
        Just(32),
        Just(63),
        Just(64),
        (-70i32..70),
        (-70i32..70),
        any::<i32>(),
    ]
}

fn alu_op() -> impl Strategy<Value = AluOp> {
    prop_oneof![
        Just(AluOp::Add),
        Just(AluOp::Sub),
        Just(AluOp::Mul),
        Just(AluOp::Div),
        Just(AluOp::Mod),
        Just(AluOp::And),
        Just(AluOp::Or),
        Just(AluOp::Xor),
        Just(AluOp::Lsh),
        Just(AluOp::Rsh),
        Just(AluOp::Arsh),
        Just(AluOp::Mov),
        Just(AluOp::Neg),
        Just(AluOp::SDiv),
        Just(AluOp::SMod),
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
        Just(Sge),
        Just(Slt),
        Just(Sle),
        Just(Set)
    ]
}

fn width() -> impl Strategy<Value = Width> {
    prop_oneof![3 => Just(Width::W64), 1 => Just(Width::W32)]
}

fn size() -> impl Strategy<Value = Size> {
    prop_oneof![Just(Size::B), Just(Size::H), Just(Size::W), Just(Size::DW)]
}

/// Registers the blocks compute in: r2 and r3 hold packet pointers (XDP) or a stack pointer
/// and a number (socket filter), r6 the context, r8 a map value; the others numbers.
fn reg() -> impl Strategy<Value = u8> {
    prop_oneof![3 => Just(0u8), 3 => Just(4), 3 => Just(5), 3 => Just(7), 3 => Just(9), 2 => Just(2), 1 => Just(3), 1 => Just(8), 1 => Just(6)]
}

/// Registers a block writes a number into (a pointer now and then).
fn dst_reg() -> impl Strategy<Value = u8> {
    prop_oneof![8 => prop_oneof![Just(0u8), Just(4), Just(5), Just(7), Just(9)], 1 => reg()]
}

/// A small constant most of the time, an extreme one often enough.
fn mostly_small64() -> impl Strategy<Value = i64> {
    prop_oneof![2 => -70i64..70, 1 => extreme64()]
}

/// A map index, mostly of maps whose values a program may use.
fn map_index() -> impl Strategy<Value = i32> {
    prop_oneof![4 => prop_oneof![Just(0), Just(1), Just(4)], 1 => 0i32..5]
}

/// Any register a value may come from, the frame pointer included.
fn src_reg() -> impl Strategy<Value = u8> {
    prop_oneof![6 => reg(), 1 => Just(10)]
}

/// One building block of a program.
#[derive(Clone, Debug)]
enum Block {
    LdImm64(u8, i64),
    AluImm(Width, AluOp, u8, i32),
    AluReg(Width, AluOp, u8, u8),
    /// `r4 = base; r4 += c...; [if r4 > r3 skip]; access through r4 or the base`.
    PtrChain {
        base: u8,
        adds: Vec<(bool, i64)>,
        compare: bool,
        through_base: bool,
        off: i16,
        size: Size,
        write: bool,
    },
    /// `r5 = src [& mask]; r4 = r2 + r5 + k; if r4 > r3 skip; access through r4 or r2`.
    PacketVarCompare {
        src: u8,
        mask: Option<i32>,
        k: i32,
        /// How the bound is tested before the access: `r4 > r3`, `r4 >= r3`, `r3 < r4`,
        /// `r3 <= r4` (each jumping over the access).
        test: u8,
        through_r4: bool,
        off: i16,
        size: Size,
    },
    MovSx(Width, u8, u8, u8),
    CtxLoad {
        dst: u8,
        off: i16,
        size: Size,
        sext: bool,
    },
    Spill(u8, i16),
    /// `r5 = src & mask; r5 <<= shift; [r5 += bias]; r4 = r10 + at; r4 += r5 (or -= r5);
    /// r0 = *(size *)(r4 + off)`: a read at a variable stack offset, over the numbers the
    /// prologue stored, spilled pointers, uninitialised bytes and past either end of the
    /// frame.
    StackVarLoad {
        src: u8,
        mask: i32,
        shift: u8,
        bias: Option<i64>,
        at: i16,
        sub: bool,
        off: i16,
        size: Size,
        sext: bool,
    },
    StackStoreImm(i16, Size, i32),
    StackLoad {
        dst: u8,
        off: i16,
        size: Size,
        sext: bool,
    },
    /// A helper with a map argument: `id` with map `map`, key at `fp-72`, value at `fp-48`.
    MapHelper {
        id: i32,
        map: i32,
        write_result: bool,
    },
    /// `bpf_tail_call(ctx, map, index)`.
    TailCall {
        map: i32,
        index: i32,
    },
    /// `ringbuf_reserve(map, size)`, a write, then submit or discard.
    Ringbuf {
        map: i32,
        size: i32,
        off: i16,
        discard: bool,
    },
    /// `skb_load_bytes(ctx, off, fp + at, len)` (socket filters), over spilled slots too;
    /// a negative `len` is a variable length `(skb->len & -len) + 1`.
    SkbLoad {
        at: i16,
        len: i32,
    },
    Branch(Width, u8, JmpCond, Operand, u8),
}

fn block() -> impl Strategy<Value = Block> {
    let ptr_base = prop_oneof![Just(2u8), Just(6), Just(8), Just(10)];
    let adds = proptest::collection::vec((any::<bool>(), mostly_small64()), 1..4);
    prop_oneof![
        2 => (reg(), extreme64()).prop_map(|(r, c)| Block::LdImm64(r, c)),
        3 => (width(), alu_op(), dst_reg(), extreme32()).prop_map(|(w, o, r, i)| Block::AluImm(w, o, r, i)),
        3 => (width(), alu_op(), dst_reg(), src_reg()).prop_map(|(w, o, d, s)| Block::AluReg(w, o, d, s)),
        4 => (ptr_base, adds, any::<bool>(), any::<bool>(), -8i16..40, size(), any::<bool>())
            .prop_map(|(base, adds, compare, through_base, off, size, write)| Block::PtrChain { base, adds, compare, through_base, off, size, write }),
        3 => (reg(), proptest::option::of(prop_oneof![Just(7), Just(255), Just(0xffff), Just(-1)]), extreme32(), 0u8..4, any::<bool>(), -2i16..20, size())
            .prop_map(|(src, mask, k, test, through_r4, off, size)| Block::PacketVarCompare { src, mask, k, test, through_r4, off, size }),
        2 => (width(), reg(), src_reg(), prop_oneof![Just(8u8), Just(16), Just(32)]).prop_map(|(w, d, s, b)| Block::MovSx(w, d, s, b)),
        2 => (reg(), prop_oneof![4 => (0i16..6).prop_map(|i| i * 4), 1 => 0i16..26], size(), any::<bool>())
            .prop_map(|(dst, off, size, sext)| Block::CtxLoad { dst, off, size, sext }),
        2 => (src_reg(), 1i16..10).prop_map(|(r, k)| Block::Spill(r, -8 * k)),
        3 => (
            (reg(), prop_oneof![Just(7), Just(15), Just(0x38), Just(63), Just(0xffff), Just(-1)], 0u8..4, proptest::option::weighted(0.2, extreme64())),
            (prop_oneof![4 => -80i16..0, 1 => -520i16..-500, 1 => Just(-512)], prop_oneof![4 => Just(false), 1 => Just(true)], -16i16..16, size(), any::<bool>()),
        )
            .prop_map(|((src, mask, shift, bias), (at, sub, off, size, sext))| Block::StackVarLoad { src, mask, shift, bias, at, sub, off, size, sext }),
        2 => (-80i16..0, size(), extreme32()).prop_map(|(o, z, i)| Block::StackStoreImm(o, z, i)),
        2 => (reg(), -80i16..0, size(), any::<bool>()).prop_map(|(dst, off, size, sext)| Block::StackLoad { dst, off, size, sext }),
        3 => (prop_oneof![Just(1), Just(2), Just(3)], map_index(), any::<bool>())
            .prop_map(|(id, map, write_result)| Block::MapHelper { id, map, write_result }),
        1 => (prop_oneof![3 => Just(2), 1 => 0i32..5], prop_oneof![Just(0), Just(3), Just(-1), Just(i32::MAX)]).prop_map(|(map, index)| Block::TailCall { map, index }),
        1 => (prop_oneof![3 => Just(3), 1 => 0i32..5], prop_oneof![3 => Just(8), 3 => Just(16), 1 => Just(0), 1 => Just(-8), 1 => Just(4096)], -2i16..20, any::<bool>())
            .prop_map(|(map, size, off, discard)| Block::Ringbuf { map, size, off, discard }),
        2 => (prop_oneof![-80i16..0, (1i16..10).prop_map(|k| -8 * k)], prop_oneof![Just(1), Just(4), Just(8), Just(16), Just(-7), Just(-15)]).prop_map(|(at, len)| Block::SkbLoad { at, len }),
        4 => (width(), dst_reg(), cond(), prop_oneof![extreme32().prop_map(Operand::Imm), src_reg().prop_map(|r| Operand::Reg(Reg(r)))], 1u8..4)
            .prop_map(|(w, r, c, o, s)| Block::Branch(w, r, c, o, s)),
    ]
}

const R: fn(u8) -> Reg = Reg;

fn alu(width: Width, op: AluOp, dst: u8, src: Operand) -> Insn {
    Insn::Alu {
        width,
        op,
        dst: R(dst),
        src,
    }
}

fn mov(dst: u8, src: u8) -> Insn {
    alu(Width::W64, AluOp::Mov, dst, Operand::Reg(R(src)))
}

fn movi(dst: u8, imm: i32) -> Insn {
    alu(Width::W64, AluOp::Mov, dst, Operand::Imm(imm))
}

fn lddw(dst: u8, c: i64) -> [Insn; 2] {
    [
        Insn::LoadImm64 {
            dst: R(dst),
            kind: ImmKind::Imm,
            imm_lo: c as i32,
            imm_hi: (c >> 32) as i32,
        },
        Insn::LoadImm64Hi,
    ]
}

fn map_ref(dst: u8, map: i32) -> [Insn; 2] {
    [
        Insn::LoadImm64 {
            dst: R(dst),
            kind: ImmKind::MapIdx,
            imm_lo: map,
            imm_hi: 0,
        },
        Insn::LoadImm64Hi,
    ]
}

fn load(size: Size, sext: bool, dst: u8, base: u8, off: i16) -> Insn {
    Insn::Load {
        size,
        sign_extend: sext && size != Size::DW,
        dst: R(dst),
        base: R(base),
        off,
    }
}

fn store_imm(size: Size, base: u8, off: i16, imm: i32) -> Insn {
    Insn::Store {
        size,
        base: R(base),
        off,
        src: Operand::Imm(imm),
    }
}

fn call(id: i32) -> Insn {
    Insn::Call(CallTarget::Helper(id))
}

/// Stack offsets are aligned to the access size, except odd ones (a misaligned access is a
/// rejection the plain generator already covers): partial writes still land inside slots.
fn aligned(off: i16, size: Size) -> i16 {
    if off % 7 == 0 {
        return off;
    }
    off - off.rem_euclid(size.bytes() as i16)
}

/// Which context the program runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Xdp,
    Socket,
}

/// Sets r1-r5 again after a call clobbered them.
fn reload(kind: Kind, v: &mut Vec<Insn>) {
    v.push(mov(1, 6));
    match kind {
        Kind::Xdp => {
            v.push(load(Size::W, false, 2, 6, 0));
            v.push(load(Size::W, false, 3, 6, 4));
        }
        Kind::Socket => {
            v.push(mov(2, 10));
            v.push(alu(Width::W64, AluOp::Add, 2, Operand::Imm(-16)));
            v.push(movi(3, 7));
        }
    }
    v.push(movi(4, 4));
    v.push(movi(5, 5));
}

fn lower(kind: Kind, blocks: &[Block]) -> Vec<Insn> {
    let mut chunks: Vec<Vec<Insn>> = Vec::new();
    for b in blocks {
        let mut v = Vec::new();
        match b {
            Block::LdImm64(r, c) => v.extend(lddw(*r, *c)),
            // Negation takes no operand (the encoding's is `Imm(0)`).
            Block::AluImm(w, AluOp::Neg, r, _) | Block::AluReg(w, AluOp::Neg, r, _) => {
                v.push(alu(*w, AluOp::Neg, *r, Operand::Imm(0)))
            }
            Block::AluImm(w, op, r, i) => v.push(alu(*w, *op, *r, Operand::Imm(*i))),
            Block::AluReg(w, op, d, s) => v.push(alu(*w, *op, *d, Operand::Reg(R(*s)))),
            Block::PtrChain {
                base,
                adds,
                compare,
                through_base,
                off,
                size,
                write,
            } => {
                v.push(mov(4, *base));
                for (via_reg, c) in adds {
                    if *via_reg || i32::try_from(*c).is_err() {
                        v.extend(lddw(5, *c));
                        v.push(alu(Width::W64, AluOp::Add, 4, Operand::Reg(R(5))));
                    } else {
                        v.push(alu(Width::W64, AluOp::Add, 4, Operand::Imm(*c as i32)));
                    }
                }
                if *compare {
                    v.push(Insn::Jmp {
                        width: Width::W64,
                        cond: JmpCond::Gt,
                        dst: R(4),
                        src: Operand::Reg(R(3)),
                        off: 1,
                    });
                }
                let through = if *through_base { *base } else { 4 };
                v.push(if *write {
                    store_imm(*size, through, *off, 0x5a)
                } else {
                    load(*size, false, 0, through, *off)
                });
            }
            Block::PacketVarCompare {
                src,
                mask,
                k,
                test,
                through_r4,
                off,
                size,
            } => {
                v.push(mov(5, *src));
                if let Some(m) = mask {
                    v.push(alu(Width::W64, AluOp::And, 5, Operand::Imm(*m)));
                }
                v.push(mov(4, 2));
                v.push(alu(Width::W64, AluOp::Add, 4, Operand::Reg(R(5))));
                v.push(alu(Width::W64, AluOp::Add, 4, Operand::Imm(*k)));
                let (cond, dst, src) = match test {
                    0 => (JmpCond::Gt, 4, 3),
                    1 => (JmpCond::Ge, 4, 3),
                    2 => (JmpCond::Lt, 3, 4),
                    _ => (JmpCond::Le, 3, 4),
                };
                v.push(Insn::Jmp {
                    width: Width::W64,
                    cond,
                    dst: R(dst),
                    src: Operand::Reg(R(src)),
                    off: 1,
                });
                v.push(load(*size, false, 0, if *through_r4 { 4 } else { 2 }, *off));
            }
            Block::MovSx(w, d, s, bits) => {
                // `movsx32` exists in the 64-bit form only.
                let w = if *bits == 32 { Width::W64 } else { *w };
                v.push(alu(w, AluOp::MovSx(*bits), *d, Operand::Reg(R(*s))))
            }
            Block::CtxLoad {
                dst,
                off,
                size,
                sext,
            } => v.push(load(*size, *sext, *dst, 6, *off)),
            Block::Spill(r, off) => v.push(Insn::Store {
                size: Size::DW,
                base: R(10),
                off: *off,
                src: Operand::Reg(R(*r)),
            }),
            Block::StackVarLoad {
                src,
                mask,
                shift,
                bias,
                at,
                sub,
                off,
                size,
                sext,
            } => {
                v.push(mov(5, *src));
                v.push(alu(Width::W64, AluOp::And, 5, Operand::Imm(*mask)));
                if *shift > 0 {
                    v.push(alu(Width::W64, AluOp::Lsh, 5, Operand::Imm(*shift as i32)));
                }
                if let Some(b) = bias {
                    v.extend(lddw(4, *b));
                    v.push(alu(Width::W64, AluOp::Add, 5, Operand::Reg(R(4))));
                }
                v.push(mov(4, 10));
                v.push(alu(Width::W64, AluOp::Add, 4, Operand::Imm(*at as i32)));
                let op = if *sub { AluOp::Sub } else { AluOp::Add };
                v.push(alu(Width::W64, op, 4, Operand::Reg(R(5))));
                v.push(load(*size, *sext, 0, 4, *off));
            }
            Block::StackStoreImm(off, size, imm) => {
                v.push(store_imm(*size, 10, aligned(*off, *size), *imm))
            }
            Block::StackLoad {
                dst,
                off,
                size,
                sext,
            } => v.push(load(*size, *sext, *dst, 10, aligned(*off, *size))),
            Block::MapHelper {
                id,
                map,
                write_result,
            } => {
                v.extend(map_ref(1, *map));
                v.push(mov(2, 10));
                v.push(alu(Width::W64, AluOp::Add, 2, Operand::Imm(-72)));
                v.push(mov(3, 10));
                v.push(alu(Width::W64, AluOp::Add, 3, Operand::Imm(-48)));
                v.push(movi(4, 0));
                v.push(call(*id));
                if *id == 1 && *write_result {
                    v.push(Insn::Jmp {
                        width: Width::W64,
                        cond: JmpCond::Eq,
                        dst: R(0),
                        src: Operand::Imm(0),
                        off: 1,
                    });
                    v.push(store_imm(Size::W, 0, 0, 0x40));
                }
                reload(kind, &mut v);
            }
            Block::TailCall { map, index } => {
                v.push(mov(1, 6));
                v.extend(map_ref(2, *map));
                v.push(movi(3, *index));
                v.push(call(12));
                reload(kind, &mut v);
            }
            Block::Ringbuf {
                map,
                size,
                off,
                discard,
            } => {
                v.extend(map_ref(1, *map));
                v.push(movi(2, *size));
                v.push(movi(3, 0));
                v.push(call(131));
                let tail = [
                    store_imm(Size::B, 0, *off, 1),
                    mov(1, 0),
                    movi(2, 0),
                    call(if *discard { 133 } else { 132 }),
                ];
                v.push(Insn::Jmp {
                    width: Width::W64,
                    cond: JmpCond::Eq,
                    dst: R(0),
                    src: Operand::Imm(0),
                    off: tail.len() as i16,
                });
                v.extend(tail);
                reload(kind, &mut v);
            }
            Block::SkbLoad { .. } if kind == Kind::Xdp => {}
            Block::SkbLoad { at, len } => {
                v.push(mov(1, 6));
                v.push(movi(2, 0));
                v.push(mov(3, 10));
                v.push(alu(Width::W64, AluOp::Add, 3, Operand::Imm(*at as i32)));
                if *len < 0 {
                    // A variable length: `(skb->len & -len) + 1`, in [1, 1 - len].
                    v.push(load(Size::W, false, 4, 6, 0));
                    v.push(alu(Width::W64, AluOp::And, 4, Operand::Imm(-*len)));
                    v.push(alu(Width::W64, AluOp::Add, 4, Operand::Imm(1)));
                } else {
                    v.push(movi(4, *len));
                }
                v.push(call(26));
                reload(kind, &mut v);
            }
            Block::Branch(w, r, c, o, _) => v.push(Insn::Jmp {
                width: *w,
                cond: *c,
                dst: R(*r),
                src: *o,
                off: 0,
            }),
        }
        chunks.push(v);
    }
    for i in 0..chunks.len() {
        if let Block::Branch(.., s) = blocks[i] {
            let skip: usize = chunks[i + 1..(i + 1 + s as usize).min(chunks.len())]
                .iter()
                .map(|c| c.len())
                .sum();
            if let Some(Insn::Jmp { off, .. }) = chunks[i].last_mut() {
                *off = skip as i16;
            }
        }
    }
    // Prologue: r6 = ctx; the key (fp-72) and value (fp-48..-17) buffers and the top 64
    // stack bytes hold numbers; r8 = the value of key 0 of `table` (null-checked); r0, r4,
    // r5, r7, r9 numbers; r1-r3 as `reload` sets them.
    let mut insns = vec![mov(6, 1)];
    for k in 1..=9i16 {
        insns.push(store_imm(Size::DW, 10, -8 * k, k as i32));
    }
    insns.push(store_imm(Size::DW, 10, -72, 0));
    insns.extend(map_ref(1, 0));
    insns.push(mov(2, 10));
    insns.push(alu(Width::W64, AluOp::Add, 2, Operand::Imm(-72)));
    insns.push(call(1));
    insns.push(Insn::Jmp {
        width: Width::W64,
        cond: JmpCond::Ne,
        dst: R(0),
        src: Operand::Imm(0),
        off: 2,
    });
    insns.push(movi(0, 2));
    insns.push(Insn::Exit);
    insns.push(mov(8, 0));
    reload(kind, &mut insns);
    for r in [0u8, 7, 9] {
        insns.push(movi(r, r as i32 * 3));
    }
    insns.extend(chunks.concat());
    insns.push(movi(0, 2));
    insns.push(Insn::Exit);
    insns
}

/// What happened to one generated program.
#[derive(Debug)]
enum Outcome {
    Rejected(Rule),
    Accepted,
}

/// Verifies one program with recorded states and runs it on each packet under state
/// embedding; `Err` is a soundness failure (a fault or a divergence).
fn check_program(
    kind: Kind,
    insns: &[Insn],
    packets: &[Vec<u8>],
    maps: &[MapDef],
) -> Result<Outcome, String> {
    let ty = match kind {
        Kind::Xdp => KernelProgType::Xdp,
        Kind::Socket => KernelProgType::SocketFilter,
    };
    // The verdict first, as the control plane gets it; the states (liveness off, every state
    // kept) only for accepted programs, which are the ones that run.
    if let Err(e) = verify_insns(insns, maps, &VerifyOptions::kernel(ty)) {
        return Ok(Outcome::Rejected(e.rule));
    }
    let opts = VerifyOptions {
        liveness: false,
        record_states: true,
        ..VerifyOptions::kernel(ty)
    };
    let v = match verify_insns(insns, maps, &opts) {
        Ok(v) => v,
        // Comparing every value may explore past the limit where liveness did not: nothing
        // to embed then (the plain soundness test checks the verdicts agree otherwise).
        Err(e) if e.rule == Rule::TooComplex => return Ok(Outcome::Rejected(e.rule)),
        Err(e) => {
            return Err(format!(
                "accepted with liveness, refused with every value compared: {e}"
            ))
        }
    };
    // The interpreter has no program arrays: an array of the same shape stands in (no
    // accepted program may touch its elements, and the tail-call helper here ignores it).
    let run_maps: Vec<MapDef> = maps
        .iter()
        .map(|m| match m.map_type.supported() {
            Some(MapType::ProgArray) => MapDef {
                map_type: MapType::Array.into(),
                ..m.clone()
            },
            _ => m.clone(),
        })
        .collect();
    let set = MapSet::new(&run_maps).map_err(|e| e.to_string())?;
    let vm = Vm::new(insns, &set, &helpers(), interp::Config::default())
        .map_err(|e| format!("accepted program cannot be prepared: {e}"))?;
    for p in packets {
        let outcome = match kind {
            Kind::Xdp => run_embedded(&vm, &set, &mut XdpMd::new(p.clone()), &v.states),
            Kind::Socket => run_embedded(&vm, &set, &mut SkBuff::new(p.clone()), &v.states),
        };
        match outcome {
            EmbeddedRun::Agreed(Ok(_)) => {}
            EmbeddedRun::Agreed(Err(e)) => {
                return Err(format!(
                    "accepted {kind:?} program failed at run time on a {}-byte packet: {e}",
                    p.len()
                ))
            }
            EmbeddedRun::Diverged(d) => {
                return Err(format!(
                    "state embedding, {kind:?}, {}-byte packet: {d}",
                    p.len()
                ))
            }
        }
    }
    Ok(Outcome::Accepted)
}

fn strategy() -> impl Strategy<Value = (bool, Vec<Block>, Vec<Vec<u8>>)> {
    (
        any::<bool>(),
        proptest::collection::vec(block(), 1..12),
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 3),
    )
}

#[test]
fn accepted_biased_programs_embed() {
    let cases: u32 = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500);
    let mut runner = TestRunner::new(Config {
        cases,
        rng_seed: RngSeed::Fixed(0x5eed_b1a5),
        failure_persistence: None,
        ..Config::default()
    });
    let maps = maps();
    let accepted = std::cell::Cell::new(0u32);
    let rejected: RefCell<BTreeMap<&'static str, u32>> = RefCell::default();
    let result = runner.run(&strategy(), |(xdp, blocks, packets)| {
        let kind = if xdp { Kind::Xdp } else { Kind::Socket };
        let insns = lower(kind, &blocks);
        match check_program(kind, &insns, &packets, &maps) {
            Ok(Outcome::Accepted) => accepted.set(accepted.get() + 1),
            Ok(Outcome::Rejected(rule)) => {
                *rejected.borrow_mut().entry(rule.id()).or_default() += 1
            }
            Err(e) => prop_assert!(false, "{e}\n{}", rdx_bpf::disasm::disassemble(&insns)),
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    eprintln!(
        "{} of {cases} accepted; rejected by rule: {:?}",
        accepted.get(),
        rejected.borrow()
    );
    assert!(
        accepted.get() * 10 >= cases,
        "only {} of {cases} biased programs were accepted",
        accepted.get()
    );
}

/// The kernel verifier's reason in its log: the last line that is not its statistics, with
/// numbers folded so that one kind of refusal is one bucket.
fn kernel_reason(log: &str) -> String {
    let reason = log
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| {
            !l.is_empty() && !l.starts_with("processed ") && !l.starts_with("verification time")
        })
        .unwrap_or_default();
    // A log of statistics only: the kernel's verifier accepted, the load failed after it.
    let after_verification;
    let line = if reason.starts_with("--- verifier log") {
        after_verification = format!(
            "verifier accepted, load failed: {}",
            log.lines().next().unwrap_or_default()
        );
        after_verification.as_str()
    } else {
        reason
    };
    let mut out = String::new();
    let mut in_number = false;
    for c in line.chars() {
        if c.is_ascii_digit() {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}

/// The long campaign: `RDX_CAMPAIGN_CASES` programs (default ten million), progress every
/// 100,000, a summary of verdicts by rule at the end, and the first failures in full.
#[test]
#[ignore = "the long campaign; see the module docs"]
fn campaign() {
    let cases: u64 = std::env::var("RDX_CAMPAIGN_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let seed: u64 = std::env::var("RDX_CAMPAIGN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_ca4b);
    let kernel_oracle =
        std::env::var("RDX_KERNEL_ORACLE").is_ok_and(|v| v == "1") && rdx_kernel::probe().is_ok();
    let mut runner = TestRunner::new(Config {
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    });
    let maps = maps();
    let kernel_maps = kernel_oracle.then(|| rdx_kernel::create_maps(&maps).expect("kernel maps"));
    let strategy = strategy();
    let mut verdicts: BTreeMap<String, u64> = BTreeMap::new();
    let mut kernel_refusals: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut failures = Vec::new();
    let start = std::time::Instant::now();
    for i in 0..cases {
        let (xdp, blocks, packets) = strategy.new_tree(&mut runner).expect("a program").current();
        let kind = if xdp { Kind::Xdp } else { Kind::Socket };
        let insns = lower(kind, &blocks);
        // A panic (an overflow check in the verifier, say) is a finding, not the end of the
        // campaign.
        let outcome = std::panic::catch_unwind(|| check_program(kind, &insns, &packets, &maps))
            .unwrap_or_else(|p| {
                Err(format!(
                    "panic: {}",
                    p.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                ))
            });
        match outcome {
            Ok(Outcome::Accepted) => {
                *verdicts.entry("accepted".into()).or_default() += 1;
                if blocks
                    .iter()
                    .any(|b| matches!(b, Block::StackVarLoad { .. }))
                {
                    *verdicts
                        .entry("accepted with a variable-offset stack load".into())
                        .or_default() += 1;
                }
                if let Some(km) = &kernel_maps {
                    let prog = rdx_bpf::Program {
                        name: "campaign".into(),
                        section: String::new(),
                        insns: insns.clone(),
                    };
                    let pt = match kind {
                        Kind::Xdp => rdx_kernel::ProgType::Xdp,
                        Kind::Socket => rdx_kernel::ProgType::SocketFilter,
                    };
                    if let Err(e) = rdx_kernel::load_linked(&prog, pt, km, "GPL", 0) {
                        let reason = kernel_reason(&e.to_string());
                        let entry = kernel_refusals
                            .entry(reason)
                            .or_insert_with(|| (0, rdx_bpf::disasm::disassemble(&insns)));
                        entry.0 += 1;
                    }
                }
            }
            Ok(Outcome::Rejected(rule)) => {
                *verdicts
                    .entry(format!("rejected {}", rule.id()))
                    .or_default() += 1;
            }
            Err(e) => {
                *verdicts.entry("FAILED".into()).or_default() += 1;
                if failures.len() < 5 {
                    let report = format!("{e}\n{}", rdx_bpf::disasm::disassemble(&insns));
                    eprintln!("campaign: failure {}:\n{report}", failures.len() + 1);
                    failures.push(report);
                }
            }
        }
        if (i + 1) % 100_000 == 0 {
            eprintln!(
                "campaign: {} programs in {:.0} s, {} failures, {} accepted; {:?}",
                i + 1,
                start.elapsed().as_secs_f64(),
                verdicts.get("FAILED").copied().unwrap_or(0),
                verdicts.get("accepted").copied().unwrap_or(0),
                verdicts
            );
        }
    }
    println!(
        "campaign: {cases} programs, seed {seed:#x}, {:.0} s",
        start.elapsed().as_secs_f64()
    );
    for (k, n) in &verdicts {
        println!("  {k}: {n}");
    }
    if kernel_oracle {
        println!(
            "kernel refuses, rdx accepts: {} reasons",
            kernel_refusals.len()
        );
        for (reason, (n, example)) in &kernel_refusals {
            println!("  {n} x {reason}\n{example}");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
