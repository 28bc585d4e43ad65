//! Lowering: slot-indexed instructions to the flat op form of `rdx_exec::op` that the
//! dispatch loop runs, for the interpreter (maps of a [`MapSet`], helpers of a [`Helpers`])
//! and for fallback images (maps at their linked addresses, helpers by id).

use super::{PrepareError, PrepareErrorKind};
use crate::helpers::{HelperImpl, Helpers};
use crate::isa::{
    AluOp, AtomicOp, ByteOrder, CallTarget, ImmKind, Insn, JmpCond, Operand, Size, Width,
};
use crate::maps::MapSet;
use rdx_exec::op::{atomic, Code, Op, RegMasks};
use rdx_region::helpers::HelperId;

const fn bit(r: u8) -> u16 {
    1 << r
}

pub(crate) struct Compiled {
    pub ops: Box<[Op]>,
    pub masks: Box<[RegMasks]>,
    pub helpers: Box<[HelperImpl]>,
}

fn alu_code(width: Width, op: AluOp, reg: bool) -> Code {
    use Code::*;
    let table: [[Code; 14]; 4] = [
        [
            Add64I, Sub64I, Mul64I, Div64I, SDiv64I, Or64I, And64I, Lsh64I, Rsh64I, Mod64I,
            SMod64I, Xor64I, Mov64I, Arsh64I,
        ],
        [
            Add64R, Sub64R, Mul64R, Div64R, SDiv64R, Or64R, And64R, Lsh64R, Rsh64R, Mod64R,
            SMod64R, Xor64R, Mov64R, Arsh64R,
        ],
        [
            Add32I, Sub32I, Mul32I, Div32I, SDiv32I, Or32I, And32I, Lsh32I, Rsh32I, Mod32I,
            SMod32I, Xor32I, Mov32I, Arsh32I,
        ],
        [
            Add32R, Sub32R, Mul32R, Div32R, SDiv32R, Or32R, And32R, Lsh32R, Rsh32R, Mod32R,
            SMod32R, Xor32R, Mov32R, Arsh32R,
        ],
    ];
    let row = match (width, reg) {
        (Width::W64, false) => 0,
        (Width::W64, true) => 1,
        (Width::W32, false) => 2,
        (Width::W32, true) => 3,
    };
    let col = match op {
        AluOp::Add => 0,
        AluOp::Sub => 1,
        AluOp::Mul => 2,
        AluOp::Div => 3,
        AluOp::SDiv => 4,
        AluOp::Or => 5,
        AluOp::And => 6,
        AluOp::Lsh => 7,
        AluOp::Rsh => 8,
        AluOp::Mod => 9,
        AluOp::SMod => 10,
        AluOp::Xor => 11,
        AluOp::Mov => 12,
        AluOp::Arsh => 13,
        AluOp::Neg | AluOp::MovSx(_) => unreachable!("handled by the caller"),
    };
    table[row][col]
}

fn jmp_code(width: Width, cond: JmpCond, reg: bool) -> Code {
    use Code::*;
    let table: [[Code; 11]; 4] = [
        [
            Jeq64I, Jgt64I, Jge64I, Jset64I, Jne64I, Jsgt64I, Jsge64I, Jlt64I, Jle64I, Jslt64I,
            Jsle64I,
        ],
        [
            Jeq64R, Jgt64R, Jge64R, Jset64R, Jne64R, Jsgt64R, Jsge64R, Jlt64R, Jle64R, Jslt64R,
            Jsle64R,
        ],
        [
            Jeq32I, Jgt32I, Jge32I, Jset32I, Jne32I, Jsgt32I, Jsge32I, Jlt32I, Jle32I, Jslt32I,
            Jsle32I,
        ],
        [
            Jeq32R, Jgt32R, Jge32R, Jset32R, Jne32R, Jsgt32R, Jsge32R, Jlt32R, Jle32R, Jslt32R,
            Jsle32R,
        ],
    ];
    let row = match (width, reg) {
        (Width::W64, false) => 0,
        (Width::W64, true) => 1,
        (Width::W32, false) => 2,
        (Width::W32, true) => 3,
    };
    let col = match cond {
        JmpCond::Eq => 0,
        JmpCond::Gt => 1,
        JmpCond::Ge => 2,
        JmpCond::Set => 3,
        JmpCond::Ne => 4,
        JmpCond::Sgt => 5,
        JmpCond::Sge => 6,
        JmpCond::Lt => 7,
        JmpCond::Le => 8,
        JmpCond::Slt => 9,
        JmpCond::Sle => 10,
    };
    table[row][col]
}

fn ext_imm(width: Width, imm: i32) -> u64 {
    match width {
        Width::W64 => imm as i64 as u64,
        Width::W32 => imm as u32 as u64,
    }
}

/// Lowers a slot-indexed program, validating what the interpreter relies on: every jump and
/// call lands on an instruction inside the program (not on an `lddw` second slot), every
/// `lddw` is followed by its second slot, every helper exists and every map reference
/// resolves.
pub(crate) fn compile(
    insns: &[Insn],
    maps: &MapSet,
    helpers: &Helpers,
) -> Result<Compiled, PrepareError> {
    let mut helper_table: Vec<HelperImpl> = Vec::new();
    let (mut ops, mut masks) = lower(
        insns,
        |kind, lo, hi| {
            maps.resolve_lddw(kind, lo, hi)
                .map_err(PrepareErrorKind::Map)
        },
        |id| {
            let f = HelperId::from_imm(id)
                .and_then(|id| helpers.get(id))
                .ok_or(PrepareErrorKind::UnknownHelper(id as i64))?;
            helper_table.push(f);
            Ok(helper_table.len() as u32 - 1)
        },
    )?;
    ops.push(Op::new(Code::FellOff));
    masks.push(RegMasks::default());
    Ok(Compiled {
        ops: ops.into_boxed_slice(),
        masks: masks.into_boxed_slice(),
        helpers: helper_table.into_boxed_slice(),
    })
}

/// Lowers and validates `insns` as [`compile`] does, resolving `lddw` values (of kinds
/// [`ImmKind::Imm`], [`ImmKind::MapIdx`], [`ImmKind::MapIdxValue`]) with `resolve_lddw`
/// and numbering helper calls with `helper` (its result goes to [`Op::aux`]; the id is in
/// [`Op::imm`]). Returns one op and one register mask per slot.
pub(crate) fn lower(
    insns: &[Insn],
    mut resolve_lddw: impl FnMut(ImmKind, i32, i32) -> Result<u64, PrepareErrorKind>,
    mut helper: impl FnMut(i32) -> Result<u32, PrepareErrorKind>,
) -> Result<(Vec<Op>, Vec<RegMasks>), PrepareError> {
    let len = insns.len();
    let err = |pc: usize, kind| PrepareError { pc, kind };
    if len == 0 {
        return Err(err(0, PrepareErrorKind::Empty));
    }
    if len > u32::MAX as usize / 2 {
        return Err(err(0, PrepareErrorKind::TooLong(len)));
    }
    let target = |pc: usize, rel: i64| -> Result<u32, PrepareError> {
        let t = pc as i64 + 1 + rel;
        if t < 0 || t >= len as i64 || insns[t as usize] == Insn::LoadImm64Hi {
            return Err(err(pc, PrepareErrorKind::BadTarget(t)));
        }
        Ok(t as u32)
    };
    let mut ops = Vec::with_capacity(len + 1);
    let mut masks = Vec::with_capacity(len + 1);
    for (pc, insn) in insns.iter().enumerate() {
        let mut op = Op::new(Code::FellOff);
        let mut m = RegMasks::default();
        match *insn {
            Insn::Alu {
                width,
                op: alu,
                dst,
                src,
            } => {
                op.dst = dst.0;
                m.writes = bit(dst.0);
                let reads_dst = !matches!(alu, AluOp::Mov | AluOp::MovSx(_));
                if reads_dst {
                    m.reads |= bit(dst.0);
                }
                match alu {
                    AluOp::Neg => {
                        op.code = if width == Width::W64 {
                            Code::Neg64
                        } else {
                            Code::Neg32
                        };
                    }
                    AluOp::MovSx(bits) => {
                        let Operand::Reg(s) = src else {
                            return Err(err(
                                pc,
                                PrepareErrorKind::Malformed("movsx with an immediate"),
                            ));
                        };
                        op.src = s.0;
                        m.reads |= bit(s.0);
                        op.code = match (width, bits) {
                            (Width::W64, 8) => Code::MovSx8To64,
                            (Width::W64, 16) => Code::MovSx16To64,
                            (Width::W64, 32) => Code::MovSx32To64,
                            (Width::W32, 8) => Code::MovSx8To32,
                            (Width::W32, 16) => Code::MovSx16To32,
                            (Width::W32, 32) => Code::Mov32R,
                            _ => return Err(err(pc, PrepareErrorKind::Malformed("movsx width"))),
                        };
                    }
                    _ => match src {
                        Operand::Imm(imm) => {
                            op.code = alu_code(width, alu, false);
                            op.imm = ext_imm(width, imm);
                        }
                        Operand::Reg(s) => {
                            op.code = alu_code(width, alu, true);
                            op.src = s.0;
                            m.reads |= bit(s.0);
                        }
                    },
                }
            }
            Insn::Endian { order, bits, dst } => {
                op.dst = dst.0;
                m.reads = bit(dst.0);
                m.writes = bit(dst.0);
                op.code = match (order, bits) {
                    (ByteOrder::ToLe, 16) => Code::Le16,
                    (ByteOrder::ToLe, 32) => Code::Le32,
                    (ByteOrder::ToLe, 64) => Code::Le64,
                    (ByteOrder::ToBe, 16) => Code::Be16,
                    (ByteOrder::ToBe, 32) => Code::Be32,
                    (ByteOrder::ToBe, 64) => Code::Be64,
                    (ByteOrder::Swap, 16) => Code::Swap16,
                    (ByteOrder::Swap, 32) => Code::Swap32,
                    (ByteOrder::Swap, 64) => Code::Swap64,
                    _ => return Err(err(pc, PrepareErrorKind::Malformed("byte swap width"))),
                };
            }
            Insn::Ja { off } => {
                op.code = Code::Ja;
                op.aux = target(pc, off as i64)?;
            }
            Insn::MayGoto { off } => {
                op.code = Code::MayGoto;
                op.aux = target(pc, off as i64)?;
            }
            Insn::Jmp {
                width,
                cond,
                dst,
                src,
                off,
            } => {
                op.dst = dst.0;
                op.aux = target(pc, off as i64)?;
                m.reads = bit(dst.0);
                match src {
                    Operand::Imm(imm) => {
                        op.code = jmp_code(width, cond, false);
                        op.imm = ext_imm(width, imm);
                    }
                    Operand::Reg(s) => {
                        op.code = jmp_code(width, cond, true);
                        op.src = s.0;
                        m.reads |= bit(s.0);
                    }
                }
            }
            Insn::Call(CallTarget::Helper(id)) => {
                op.code = Code::CallHelper;
                op.aux = helper(id).map_err(|kind| err(pc, kind))?;
                op.imm = id as i64 as u64;
            }
            Insn::Call(CallTarget::Local(rel)) => {
                op.code = Code::CallLocal;
                op.aux = target(pc, rel as i64)?;
            }
            Insn::Call(CallTarget::Reg(r)) => {
                op.code = Code::CallX;
                op.dst = r.0;
                m.reads = bit(r.0);
            }
            Insn::Call(CallTarget::Kfunc(id)) => {
                return Err(err(pc, PrepareErrorKind::Kfunc(id)));
            }
            Insn::Exit => {
                op.code = Code::Exit;
                m.reads = bit(0);
            }
            Insn::Load {
                size,
                sign_extend,
                dst,
                base,
                off,
            } => {
                op.code = match (size, sign_extend) {
                    (Size::B, false) => Code::LdxB,
                    (Size::H, false) => Code::LdxH,
                    (Size::W, false) => Code::LdxW,
                    (Size::DW, false) => Code::LdxDW,
                    (Size::B, true) => Code::LdxSB,
                    (Size::H, true) => Code::LdxSH,
                    (Size::W, true) => Code::LdxSW,
                    (Size::DW, true) => return Err(err(pc, PrepareErrorKind::Malformed("ldxsdw"))),
                };
                op.dst = dst.0;
                op.src = base.0;
                op.aux = off as i32 as u32;
                m.reads = bit(base.0);
                m.writes = bit(dst.0);
            }
            Insn::Store {
                size,
                base,
                off,
                src,
            } => {
                op.dst = base.0;
                op.aux = off as i32 as u32;
                m.reads = bit(base.0);
                match src {
                    Operand::Imm(imm) => {
                        op.imm = imm as i64 as u64;
                        op.code = match size {
                            Size::B => Code::StB,
                            Size::H => Code::StH,
                            Size::W => Code::StW,
                            Size::DW => Code::StDW,
                        };
                    }
                    Operand::Reg(s) => {
                        op.src = s.0;
                        m.reads |= bit(s.0);
                        op.code = match size {
                            Size::B => Code::StxB,
                            Size::H => Code::StxH,
                            Size::W => Code::StxW,
                            Size::DW => Code::StxDW,
                        };
                    }
                }
            }
            Insn::Atomic {
                size,
                op: aop,
                fetch,
                base,
                off,
                src,
            } => {
                op.code = match size {
                    Size::W => Code::AtomicW,
                    Size::DW => Code::AtomicDW,
                    _ => return Err(err(pc, PrepareErrorKind::Malformed("atomic size"))),
                };
                op.dst = base.0;
                op.src = src.0;
                // The offset travels in `imm` because `aux` holds the sub-operation.
                op.imm = off as i64 as u64;
                op.aux = match aop {
                    AtomicOp::Add => atomic::ADD,
                    AtomicOp::Or => atomic::OR,
                    AtomicOp::And => atomic::AND,
                    AtomicOp::Xor => atomic::XOR,
                    AtomicOp::Xchg => atomic::XCHG,
                    AtomicOp::CmpXchg => atomic::CMPXCHG,
                } | if fetch { atomic::FETCH } else { 0 };
                m.reads = bit(base.0) | bit(src.0);
                match aop {
                    AtomicOp::CmpXchg => {
                        m.reads |= bit(0);
                        m.writes = bit(0);
                    }
                    _ if fetch => m.writes = bit(src.0),
                    _ => {}
                }
            }
            Insn::LoadImm64 {
                dst,
                kind,
                imm_lo,
                imm_hi,
            } => {
                if insns.get(pc + 1) != Some(&Insn::LoadImm64Hi) {
                    return Err(err(
                        pc,
                        PrepareErrorKind::Malformed("lddw without its second slot"),
                    ));
                }
                op.code = Code::LdImm64;
                op.dst = dst.0;
                op.imm = match kind {
                    ImmKind::Imm => Insn::imm64(imm_lo, imm_hi),
                    ImmKind::MapIdx | ImmKind::MapIdxValue => {
                        resolve_lddw(kind, imm_lo, imm_hi).map_err(|e| err(pc, e))?
                    }
                    other => return Err(err(pc, PrepareErrorKind::UnsupportedLddw(other))),
                };
                m.writes = bit(dst.0);
            }
            Insn::LoadImm64Hi => {
                if !matches!(
                    pc.checked_sub(1).map(|p| &insns[p]),
                    Some(Insn::LoadImm64 { .. })
                ) {
                    return Err(err(
                        pc,
                        PrepareErrorKind::Malformed("stray lddw second slot"),
                    ));
                }
                op.code = Code::LdImm64Hi;
            }
        }
        if (m.reads | m.writes) & !0x7ff != 0 {
            return Err(err(
                pc,
                PrepareErrorKind::Malformed("register number above r10"),
            ));
        }
        if m.writes & bit(10) != 0 {
            return Err(err(
                pc,
                PrepareErrorKind::Malformed("write to the frame pointer r10"),
            ));
        }
        ops.push(op);
        masks.push(m);
    }
    Ok((ops, masks))
}
