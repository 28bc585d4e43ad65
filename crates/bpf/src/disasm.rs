//! A disassembler whose text reads like `llvm-objdump -d` of a BPF object:
//!
//! ```text
//!      0:  r2 = *(u32 *)(r1 + 4)
//!      1:  if r2 > 5 goto +2 <LBB0_4>
//!      2:  r1 = 0x1122 ll
//!      4:  lock *(u64 *)(r10 - 8) += r1
//! LBB0_4:
//!      5:  call 1
//!      6:  exit
//! ```
//!
//! Indices count 8-byte slots, as everywhere in rdx, so they match the decoder's and the
//! interpreter's error messages. Jump and local-call targets get `LBB0_<slot>` labels.

use std::collections::BTreeSet;
use std::fmt::{self, Write as _};

use crate::isa::{
    self, AluOp, AtomicOp, ByteOrder, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width,
};

/// How to print a listing.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Show each slot's encoded bytes, as objdump does.
    pub raw_bytes: bool,
    /// Names of the object's maps by index, for `lddw` map references.
    pub map_names: Vec<String>,
}

/// One instruction's text (`r0 = *(u32 *)(r1 + 4)`), given its slot index `pc` for targets.
pub struct InsnText<'a> {
    /// The instruction.
    pub insn: &'a Insn,
    /// Its slot index, to print jump and call targets as absolute slots.
    pub pc: usize,
    /// Names of the object's maps by index, for `lddw` map references.
    pub map_names: &'a [String],
}

fn reg(width: Width, r: Reg) -> String {
    match width {
        Width::W64 => format!("r{}", r.0),
        Width::W32 => format!("w{}", r.0),
    }
}

fn size_name(size: Size, signed: bool) -> &'static str {
    match (size, signed) {
        (Size::B, false) => "u8",
        (Size::H, false) => "u16",
        (Size::W, false) => "u32",
        (Size::DW, false) => "u64",
        (Size::B, true) => "s8",
        (Size::H, true) => "s16",
        (Size::W, true) => "s32",
        (Size::DW, true) => "s64",
    }
}

fn mem(base: Reg, off: i16) -> String {
    match off {
        0 => format!("{base} + 0"),
        o if o < 0 => format!("{base} - {}", -(o as i32)),
        o => format!("{base} + {o}"),
    }
}

fn imm_text(imm: i32) -> String {
    imm.to_string()
}

/// The label name of slot `target`.
pub fn label(target: i64) -> String {
    format!("LBB0_{target}")
}

fn rel(off: i64) -> String {
    if off < 0 {
        format!("-{}", -off)
    } else {
        format!("+{off}")
    }
}

impl fmt::Display for InsnText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pc = self.pc as i64;
        match *self.insn {
            Insn::Alu {
                width,
                op,
                dst,
                src,
            } => {
                let d = reg(width, dst);
                let s = match src {
                    Operand::Reg(r) => reg(width, r),
                    Operand::Imm(i) => imm_text(i),
                };
                let sym = match op {
                    AluOp::Add => "+=",
                    AluOp::Sub => "-=",
                    AluOp::Mul => "*=",
                    AluOp::Div => "/=",
                    AluOp::SDiv => "s/=",
                    AluOp::Or => "|=",
                    AluOp::And => "&=",
                    AluOp::Lsh => "<<=",
                    AluOp::Rsh => ">>=",
                    AluOp::Mod => "%=",
                    AluOp::SMod => "s%=",
                    AluOp::Xor => "^=",
                    AluOp::Mov => "=",
                    AluOp::Arsh => "s>>=",
                    AluOp::Neg => return write!(f, "{d} = -{d}"),
                    AluOp::MovSx(bits) => {
                        let Operand::Reg(r) = src else {
                            return write!(f, "{d} = (s{bits}){s}");
                        };
                        return write!(f, "{d} = (s{bits}){}", reg(width, r));
                    }
                };
                write!(f, "{d} {sym} {s}")
            }
            Insn::Endian { order, bits, dst } => {
                let name = match order {
                    ByteOrder::ToLe => "le",
                    ByteOrder::ToBe => "be",
                    ByteOrder::Swap => "bswap",
                };
                write!(f, "{dst} = {name}{bits} {dst}")
            }
            Insn::Ja { off } => {
                let kw = if i16::try_from(off).is_ok() {
                    "goto"
                } else {
                    "gotol"
                };
                write!(
                    f,
                    "{kw} {} <{}>",
                    rel(off as i64),
                    label(pc + 1 + off as i64)
                )
            }
            Insn::Jmp {
                width,
                cond,
                dst,
                src,
                off,
            } => {
                let sym = match cond {
                    JmpCond::Eq => "==",
                    JmpCond::Gt => ">",
                    JmpCond::Ge => ">=",
                    JmpCond::Set => "&",
                    JmpCond::Ne => "!=",
                    JmpCond::Sgt => "s>",
                    JmpCond::Sge => "s>=",
                    JmpCond::Lt => "<",
                    JmpCond::Le => "<=",
                    JmpCond::Slt => "s<",
                    JmpCond::Sle => "s<=",
                };
                let s = match src {
                    Operand::Reg(r) => reg(width, r),
                    Operand::Imm(i) => imm_text(i),
                };
                write!(
                    f,
                    "if {} {sym} {s} goto {} <{}>",
                    reg(width, dst),
                    rel(off as i64),
                    label(pc + 1 + off as i64)
                )
            }
            Insn::Call(CallTarget::Helper(id)) => write!(f, "call {id}"),
            Insn::Call(CallTarget::Local(r)) => {
                write!(f, "call {} <{}>", rel(r as i64), label(pc + 1 + r as i64))
            }
            Insn::Call(CallTarget::Kfunc(id)) => write!(f, "call kfunc#{id}"),
            Insn::Call(CallTarget::Reg(r)) => write!(f, "callx {r}"),
            Insn::Exit => write!(f, "exit"),
            Insn::MayGoto { off } => write!(
                f,
                "may_goto {} <{}>",
                rel(off as i64),
                label(pc + 1 + off as i64)
            ),
            Insn::Load {
                size,
                sign_extend,
                dst,
                base,
                off,
            } => write!(
                f,
                "{dst} = *({} *)({})",
                size_name(size, sign_extend),
                mem(base, off)
            ),
            Insn::Store {
                size,
                base,
                off,
                src,
            } => {
                let s = match src {
                    Operand::Reg(r) => r.to_string(),
                    Operand::Imm(i) => imm_text(i),
                };
                write!(
                    f,
                    "*({} *)({}) = {s}",
                    size_name(size, false),
                    mem(base, off)
                )
            }
            Insn::Atomic {
                size,
                op,
                fetch,
                base,
                off,
                src,
            } => {
                let (width, ty) = if size == Size::W {
                    (Width::W32, "u32")
                } else {
                    (Width::W64, "u64")
                };
                let s = reg(width, src);
                let at = mem(base, off);
                let bits = if size == Size::W { 32 } else { 64 };
                match (op, fetch) {
                    (AtomicOp::Xchg, _) => {
                        let name = if bits == 32 { "xchg32_32" } else { "xchg_64" };
                        write!(f, "{s} = {name}({at}, {s})")
                    }
                    (AtomicOp::CmpXchg, _) => {
                        let name = if bits == 32 {
                            "cmpxchg32_32"
                        } else {
                            "cmpxchg_64"
                        };
                        let r0 = reg(width, Reg(0));
                        write!(f, "{r0} = {name}({at}, {r0}, {s})")
                    }
                    (op, false) => {
                        let sym = match op {
                            AtomicOp::Add => "+=",
                            AtomicOp::Or => "|=",
                            AtomicOp::And => "&=",
                            _ => "^=",
                        };
                        write!(f, "lock *({ty} *)({at}) {sym} {s}")
                    }
                    (op, true) => {
                        let name = match op {
                            AtomicOp::Add => "add",
                            AtomicOp::Or => "or",
                            AtomicOp::And => "and",
                            _ => "xor",
                        };
                        write!(f, "{s} = atomic_fetch_{name}(({ty} *)({at}), {s})")
                    }
                }
            }
            Insn::LoadImm64 {
                dst,
                kind,
                imm_lo,
                imm_hi,
            } => {
                let map = |i: i32| {
                    usize::try_from(i)
                        .ok()
                        .and_then(|i| self.map_names.get(i))
                        .cloned()
                        .unwrap_or_else(|| format!("map[{i}]"))
                };
                match kind {
                    ImmKind::Imm => write!(f, "{dst} = {:#x} ll", Insn::imm64(imm_lo, imm_hi)),
                    ImmKind::MapIdx => write!(f, "{dst} = {} ll", map(imm_lo)),
                    ImmKind::MapIdxValue => {
                        write!(f, "{dst} = &{} + {imm_hi} ll", map(imm_lo))
                    }
                    ImmKind::MapFd => write!(f, "{dst} = map_fd({imm_lo}) ll"),
                    ImmKind::MapValue => {
                        write!(f, "{dst} = map_value(fd {imm_lo}) + {imm_hi} ll")
                    }
                    ImmKind::BtfId => write!(f, "{dst} = btf_id({imm_lo}) ll"),
                    ImmKind::Func => {
                        write!(f, "{dst} = func <{}> ll", label(pc + 1 + imm_lo as i64))
                    }
                }
            }
            Insn::LoadImm64Hi => write!(f, "<lddw second slot>"),
        }
    }
}

/// The text of one instruction at slot `pc`.
pub fn insn_text(insn: &Insn, pc: usize) -> String {
    InsnText {
        insn,
        pc,
        map_names: &[],
    }
    .to_string()
}

/// A full listing: one line per instruction (`lddw` second slots are folded into their
/// first), `LBB0_<slot>:` label lines before jump and call targets.
pub fn disassemble_with(insns: &[Insn], opts: &Options) -> String {
    let targets: BTreeSet<i64> = insns
        .iter()
        .enumerate()
        .filter_map(|(pc, i)| i.jump_target(pc).or_else(|| i.call_target(pc)))
        .collect();
    let raw = if opts.raw_bytes {
        isa::encode(insns)
    } else {
        Vec::new()
    };
    let mut out = String::new();
    for (pc, insn) in insns.iter().enumerate() {
        if *insn == Insn::LoadImm64Hi && pc > 0 && matches!(insns[pc - 1], Insn::LoadImm64 { .. }) {
            continue;
        }
        if targets.contains(&(pc as i64)) {
            let _ = writeln!(out, "{}:", label(pc as i64));
        }
        let _ = write!(out, "{pc:>6}:\t");
        if opts.raw_bytes {
            let slots = if matches!(insn, Insn::LoadImm64 { .. }) {
                2
            } else {
                1
            };
            let bytes: Vec<String> = raw[pc..(pc + slots).min(raw.len())]
                .iter()
                .flat_map(|r| r.to_bytes())
                .map(|b| format!("{b:02x}"))
                .collect();
            let _ = write!(out, "{}\t", bytes.join(" "));
        }
        let _ = writeln!(
            out,
            "{}",
            InsnText {
                insn,
                pc,
                map_names: &opts.map_names,
            }
        );
    }
    out
}

/// [`disassemble_with`] default options.
pub fn disassemble(insns: &[Insn]) -> String {
    disassemble_with(insns, &Options::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::assemble;

    #[test]
    fn reads_like_objdump() {
        let insns = assemble(
            "ldxw %r0, [%r1+4]
             jgt %r1, 5, +2
             lddw %r1, 0x1122
             lock add [%r10-8], %r1
             call 1
             mov32 %r2, -1
             lock fetch add32 [%r10-8], %r3
             lock cmpxchg [%r10-8], %r1
             lock xchg32 [%r10-4], %r4
             ldxsh %r5, [%r10-2]
             stw [%r10-4], 7
             movsx864 %r1, %r2
             be16 %r3
             swap32 %r3
             jslt32 %r1, %r2, -3
             arsh %r3, 2
             neg %r4
             call local f
             call %r2
             ja32 +0
             exit
             f:
             exit",
        )
        .unwrap();
        let text = disassemble(&insns);
        let want = [
            "r0 = *(u32 *)(r1 + 4)",
            "if r1 > 5 goto +2 <LBB0_4>",
            "r1 = 0x1122 ll",
            "lock *(u64 *)(r10 - 8) += r1",
            "call 1",
            "w2 = -1",
            "w3 = atomic_fetch_add((u32 *)(r10 - 8), w3)",
            "r0 = cmpxchg_64(r10 - 8, r0, r1)",
            "w4 = xchg32_32(r10 - 4, w4)",
            "r5 = *(s16 *)(r10 - 2)",
            "*(u32 *)(r10 - 4) = 7",
            "r1 = (s8)r2",
            "r3 = be16 r3",
            "r3 = bswap32 r3",
            "if w1 s< w2 goto -3",
            "r3 s>>= 2",
            "r4 = -r4",
            "call +3 <LBB0_22>",
            "callx r2",
            "exit",
        ];
        for w in want {
            assert!(text.contains(w), "missing `{w}` in\n{text}");
        }
        assert!(text.contains("LBB0_4:\n     4:\t"), "{text}");
        assert_eq!(insn_text(&insns[0], 0), "r0 = *(u32 *)(r1 + 4)");
        let raw = disassemble_with(
            &insns[..1],
            &Options {
                raw_bytes: true,
                map_names: vec![],
            },
        );
        assert_eq!(
            raw,
            "     0:\t61 10 04 00 00 00 00 00\tr0 = *(u32 *)(r1 + 4)\n"
        );
    }

    #[test]
    fn may_goto_round_trips_through_the_assembler() {
        let insns = assemble("loop:\nmay_goto out\nja loop\nout:\nexit").unwrap();
        assert_eq!(insns[0], Insn::MayGoto { off: 1 });
        let text = disassemble(&insns);
        assert!(text.contains("may_goto +1 <LBB0_2>"), "{text}");
    }

    #[test]
    fn names_maps() {
        let insns = [
            Insn::LoadImm64 {
                dst: Reg(1),
                kind: ImmKind::MapIdx,
                imm_lo: 0,
                imm_hi: 0,
            },
            Insn::LoadImm64Hi,
            Insn::Exit,
        ];
        let text = disassemble_with(
            &insns,
            &Options {
                raw_bytes: false,
                map_names: vec!["counters".into()],
            },
        );
        assert!(text.contains("r1 = counters ll"), "{text}");
    }
}
