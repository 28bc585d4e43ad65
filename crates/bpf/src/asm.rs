//! An assembler for the syntax of the bpf_conformance suite, and a parser for its `.data`
//! test vectors.
//!
//! One instruction per line: `mnemonic operand, operand, ...`; `#` starts a comment; `name:`
//! defines a label at the next instruction; jump targets are `+N`/`-N` slot offsets or labels
//! (the label `exit` implicitly names the first `exit` instruction unless defined).
//!
//! ```text
//! mov32 %r0, 0            add %r1, %r2         neg %r3          movsx1632 %r1, %r2
//! ldxdw %r0, [%r1+8]      ldxsb %r0, [%r10-1]  stw [%r10-4], 7  stxb [%r1], %r2
//! lddw %r0, 0x1122334455667788                 be16 %r0   le32 %r0   swap64 %r0
//! ja +2   ja label   ja32 label (gotol)        jne %r1, 5, label   jslt32 %r1, %r2, -3
//! call 1 (helper)   call local func   call %r2 (callx)   exit
//! lock add [%r10-8], %r1   lock fetch xor32 [%r1+4], %r2   lock xchg ...   lock cmpxchg ...
//! ```
//!
//! Everything is validated: unknown mnemonics, wrong operand counts, registers other than
//! `%r0`..`%r10`, immediates outside 32 bits (64 for `lddw`), offsets outside 16 bits and
//! undefined or duplicate labels are [`AsmError`]s naming the line.

use std::collections::HashMap;

use crate::isa::{
    self, AluOp, AtomicOp, ByteOrder, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width,
};

/// An assembly error, naming the 1-based source line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct AsmError {
    /// 1-based line of the source.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

fn err(line: usize, reason: impl Into<String>) -> AsmError {
    AsmError {
        line,
        reason: reason.into(),
    }
}

/// A jump or call target before labels are resolved.
#[derive(Clone, Debug)]
enum Target {
    Rel(i64),
    Label(String),
}

/// One parsed line, before label resolution.
#[derive(Clone, Debug)]
struct Pending {
    line: usize,
    insn: Insn,
    target: Option<Target>,
}

fn parse_reg(s: &str, line: usize) -> Result<Reg, AsmError> {
    let n = s
        .strip_prefix("%r")
        .and_then(|n| n.parse::<u8>().ok())
        .filter(|n| n.to_string() == s[2..])
        .ok_or_else(|| err(line, format!("invalid register `{s}`")))?;
    if n as usize >= isa::NUM_REGS {
        return Err(err(line, format!("invalid register `{s}` (r0..r10 exist)")));
    }
    Ok(Reg(n))
}

/// Parses an unsigned or signed decimal or `0x` hexadecimal number as an `i128`.
fn parse_num(s: &str) -> Option<i128> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        if hex.is_empty() || hex.len() > 16 {
            return None;
        }
        i128::from_str_radix(hex, 16).ok()?
    } else {
        if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) || body.len() > 20 {
            return None;
        }
        body.parse::<i128>().ok()?
    };
    Some(if neg { -v } else { v })
}

/// A 32-bit immediate: decimal in the signed range, or hexadecimal up to `0xffffffff` (taken
/// as its bit pattern).
fn parse_imm32(s: &str, line: usize) -> Result<i32, AsmError> {
    let v = parse_num(s).ok_or_else(|| err(line, format!("invalid immediate `{s}`")))?;
    let is_hex = s.trim_start_matches(['-', '+']).starts_with("0x");
    if (i32::MIN as i128..=i32::MAX as i128).contains(&v) {
        Ok(v as i32)
    } else if is_hex && (0..=u32::MAX as i128).contains(&v) {
        Ok(v as u32 as i32)
    } else {
        Err(err(
            line,
            format!("immediate `{s}` does not fit in 32 bits"),
        ))
    }
}

fn parse_imm64(s: &str, line: usize) -> Result<u64, AsmError> {
    let v = parse_num(s).ok_or_else(|| err(line, format!("invalid immediate `{s}`")))?;
    if (i64::MIN as i128..=u64::MAX as i128).contains(&v) {
        Ok(v as u64)
    } else {
        Err(err(
            line,
            format!("immediate `{s}` does not fit in 64 bits"),
        ))
    }
}

fn parse_off16(s: &str, line: usize) -> Result<i16, AsmError> {
    let v = parse_num(s).ok_or_else(|| err(line, format!("invalid offset `{s}`")))?;
    i16::try_from(v).map_err(|_| err(line, format!("offset `{s}` does not fit in 16 bits")))
}

/// `[%rN]`, `[%rN+off]`, `[%rN-off]`.
fn parse_mem(s: &str, line: usize) -> Result<(Reg, i16), AsmError> {
    let inner = s
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .ok_or_else(|| {
            err(
                line,
                format!("expected a memory operand `[%rN+off]`, found `{s}`"),
            )
        })?;
    match inner.find(['+', '-']) {
        Some(i) => Ok((
            parse_reg(&inner[..i], line)?,
            parse_off16(&inner[i..], line)?,
        )),
        None => Ok((parse_reg(inner, line)?, 0)),
    }
}

fn parse_target(s: &str, line: usize) -> Result<Target, AsmError> {
    if s.starts_with(['+', '-']) {
        let v = parse_num(s).ok_or_else(|| err(line, format!("invalid jump offset `{s}`")))?;
        return Ok(Target::Rel(v as i64));
    }
    if s.is_empty()
        || !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        || s.as_bytes()[0].is_ascii_digit()
    {
        return Err(err(line, format!("invalid label `{s}`")));
    }
    Ok(Target::Label(s.to_string()))
}

fn expect_operands(ops: &[&str], n: usize, mnemonic: &str, line: usize) -> Result<(), AsmError> {
    if ops.len() != n {
        return Err(err(
            line,
            format!(
                "`{mnemonic}` takes {n} operand{}, found {}",
                if n == 1 { "" } else { "s" },
                ops.len()
            ),
        ));
    }
    Ok(())
}

fn alu_op(name: &str) -> Option<AluOp> {
    Some(match name {
        "add" => AluOp::Add,
        "sub" => AluOp::Sub,
        "mul" => AluOp::Mul,
        "div" => AluOp::Div,
        "sdiv" => AluOp::SDiv,
        "or" => AluOp::Or,
        "and" => AluOp::And,
        "lsh" => AluOp::Lsh,
        "rsh" => AluOp::Rsh,
        "neg" => AluOp::Neg,
        "mod" => AluOp::Mod,
        "smod" => AluOp::SMod,
        "xor" => AluOp::Xor,
        "mov" => AluOp::Mov,
        "arsh" => AluOp::Arsh,
        _ => return None,
    })
}

fn jmp_cond(name: &str) -> Option<JmpCond> {
    Some(match name {
        "jeq" => JmpCond::Eq,
        "jgt" => JmpCond::Gt,
        "jge" => JmpCond::Ge,
        "jset" => JmpCond::Set,
        "jne" => JmpCond::Ne,
        "jsgt" => JmpCond::Sgt,
        "jsge" => JmpCond::Sge,
        "jlt" => JmpCond::Lt,
        "jle" => JmpCond::Le,
        "jslt" => JmpCond::Slt,
        "jsle" => JmpCond::Sle,
        _ => return None,
    })
}

fn size_suffix(s: &str) -> Option<Size> {
    Some(match s {
        "b" => Size::B,
        "h" => Size::H,
        "w" => Size::W,
        "dw" => Size::DW,
        _ => return None,
    })
}

/// Splits `name32` into (`name`, W32) and `name` into (`name`, W64).
fn width_of(m: &str) -> (&str, Width) {
    match m.strip_suffix("32") {
        Some(base) => (base, Width::W32),
        None => (m, Width::W64),
    }
}

fn parse_line(mnemonic: &str, ops: &[&str], line: usize) -> Result<Pending, AsmError> {
    let p = |insn| {
        Ok(Pending {
            line,
            insn,
            target: None,
        })
    };
    // Byte order: le16/be32/swap64 (bswap64 is accepted as an alias of swap64).
    for (prefix, order) in [
        ("le", ByteOrder::ToLe),
        ("be", ByteOrder::ToBe),
        ("swap", ByteOrder::Swap),
        ("bswap", ByteOrder::Swap),
    ] {
        if let Some(bits) = mnemonic.strip_prefix(prefix) {
            if let Ok(bits @ (16 | 32 | 64)) = bits.parse::<u8>() {
                expect_operands(ops, 1, mnemonic, line)?;
                return p(Insn::Endian {
                    order,
                    bits,
                    dst: parse_reg(ops[0], line)?,
                });
            }
        }
    }
    // movsx{8,16,32}{32,64}: sign-extending moves.
    if let Some(rest) = mnemonic.strip_prefix("movsx") {
        let (bits, width) = match rest {
            "832" => (8, Width::W32),
            "1632" => (16, Width::W32),
            "864" => (8, Width::W64),
            "1664" => (16, Width::W64),
            "3264" => (32, Width::W64),
            _ => return Err(err(line, format!("invalid mnemonic `{mnemonic}`"))),
        };
        expect_operands(ops, 2, mnemonic, line)?;
        return p(Insn::Alu {
            width,
            op: AluOp::MovSx(bits),
            dst: parse_reg(ops[0], line)?,
            src: Operand::Reg(parse_reg(ops[1], line)?),
        });
    }
    let (base, width) = width_of(mnemonic);
    if let Some(op) = alu_op(base) {
        if op == AluOp::Neg {
            expect_operands(ops, 1, mnemonic, line)?;
            return p(Insn::Alu {
                width,
                op,
                dst: parse_reg(ops[0], line)?,
                src: Operand::Imm(0),
            });
        }
        expect_operands(ops, 2, mnemonic, line)?;
        let dst = parse_reg(ops[0], line)?;
        let src = if ops[1].starts_with('%') {
            Operand::Reg(parse_reg(ops[1], line)?)
        } else {
            Operand::Imm(parse_imm32(ops[1], line)?)
        };
        return p(Insn::Alu {
            width,
            op,
            dst,
            src,
        });
    }
    if let Some(cond) = jmp_cond(base) {
        expect_operands(ops, 3, mnemonic, line)?;
        let dst = parse_reg(ops[0], line)?;
        let src = if ops[1].starts_with('%') {
            Operand::Reg(parse_reg(ops[1], line)?)
        } else {
            Operand::Imm(parse_imm32(ops[1], line)?)
        };
        return Ok(Pending {
            line,
            insn: Insn::Jmp {
                width,
                cond,
                dst,
                src,
                off: 0,
            },
            target: Some(parse_target(ops[2], line)?),
        });
    }
    match mnemonic {
        "ja" | "ja32" | "gotol" => {
            expect_operands(ops, 1, mnemonic, line)?;
            let target = parse_target(ops[0], line)?;
            // `ja` has a 16-bit offset; `ja32`/`gotol` a 32-bit one. The encoder picks the
            // form from the resolved distance, so remember which was asked for.
            return Ok(Pending {
                line,
                insn: Insn::Ja {
                    off: if mnemonic == "ja" { 0 } else { i32::MAX },
                },
                target: Some(target),
            });
        }
        "may_goto" => {
            expect_operands(ops, 1, mnemonic, line)?;
            return Ok(Pending {
                line,
                insn: Insn::MayGoto { off: 0 },
                target: Some(parse_target(ops[0], line)?),
            });
        }
        "exit" => {
            expect_operands(ops, 0, mnemonic, line)?;
            return p(Insn::Exit);
        }
        "call" => {
            let (mode, target) = match ops {
                [t] => ("helper", *t),
                [m, t] => (*m, *t),
                _ => return Err(err(line, "`call` takes 1 or 2 operands")),
            };
            return match mode {
                "helper" if target.starts_with('%') => {
                    p(Insn::Call(CallTarget::Reg(parse_reg(target, line)?)))
                }
                "helper" => p(Insn::Call(CallTarget::Helper(parse_imm32(target, line)?))),
                "runtime" => p(Insn::Call(CallTarget::Kfunc(parse_imm32(target, line)?))),
                "local" => Ok(Pending {
                    line,
                    insn: Insn::Call(CallTarget::Local(0)),
                    target: Some(parse_target(target, line)?),
                }),
                other => Err(err(line, format!("invalid call mode `{other}`"))),
            };
        }
        "callx" => {
            expect_operands(ops, 1, mnemonic, line)?;
            return p(Insn::Call(CallTarget::Reg(parse_reg(ops[0], line)?)));
        }
        "lddw" => {
            expect_operands(ops, 2, mnemonic, line)?;
            let dst = parse_reg(ops[0], line)?;
            let v = parse_imm64(ops[1], line)?;
            return p(Insn::LoadImm64 {
                dst,
                kind: ImmKind::Imm,
                imm_lo: v as u32 as i32,
                imm_hi: (v >> 32) as u32 as i32,
            });
        }
        "lock" => return parse_lock(ops, line),
        _ => {}
    }
    if let Some(rest) = mnemonic.strip_prefix("ldxs") {
        let size = size_suffix(rest)
            .filter(|s| *s != Size::DW)
            .ok_or_else(|| err(line, format!("invalid mnemonic `{mnemonic}`")))?;
        expect_operands(ops, 2, mnemonic, line)?;
        let (base, off) = parse_mem(ops[1], line)?;
        return p(Insn::Load {
            size,
            sign_extend: true,
            dst: parse_reg(ops[0], line)?,
            base,
            off,
        });
    }
    if let Some(size) = mnemonic.strip_prefix("ldx").and_then(size_suffix) {
        expect_operands(ops, 2, mnemonic, line)?;
        let (base, off) = parse_mem(ops[1], line)?;
        return p(Insn::Load {
            size,
            sign_extend: false,
            dst: parse_reg(ops[0], line)?,
            base,
            off,
        });
    }
    if let Some(size) = mnemonic.strip_prefix("stx").and_then(size_suffix) {
        expect_operands(ops, 2, mnemonic, line)?;
        let (base, off) = parse_mem(ops[0], line)?;
        return p(Insn::Store {
            size,
            base,
            off,
            src: Operand::Reg(parse_reg(ops[1], line)?),
        });
    }
    if let Some(size) = mnemonic.strip_prefix("st").and_then(size_suffix) {
        expect_operands(ops, 2, mnemonic, line)?;
        let (base, off) = parse_mem(ops[0], line)?;
        return p(Insn::Store {
            size,
            base,
            off,
            src: Operand::Imm(parse_imm32(ops[1], line)?),
        });
    }
    Err(err(line, format!("invalid mnemonic `{mnemonic}`")))
}

/// `lock [fetch] op[32] [%rN+off], %rM`.
fn parse_lock(ops: &[&str], line: usize) -> Result<Pending, AsmError> {
    let (fetch, rest) = match ops.first() {
        Some(&"fetch") => (true, &ops[1..]),
        _ => (false, ops),
    };
    if rest.len() != 3 {
        return Err(err(
            line,
            "invalid number of operands for lock: expected `lock [fetch] op [%rN+off], %rM`",
        ));
    }
    let (name, width) = width_of(rest[0]);
    let size = if width == Width::W32 {
        Size::W
    } else {
        Size::DW
    };
    let op = match name {
        "add" => AtomicOp::Add,
        "or" => AtomicOp::Or,
        "and" => AtomicOp::And,
        "xor" => AtomicOp::Xor,
        "xchg" => AtomicOp::Xchg,
        "cmpxchg" => AtomicOp::CmpXchg,
        other => return Err(err(line, format!("invalid atomic operation `{other}`"))),
    };
    let (base, off) = parse_mem(rest[1], line)?;
    let src = parse_reg(rest[2], line)?;
    Ok(Pending {
        line,
        insn: Insn::Atomic {
            size,
            op,
            // xchg and cmpxchg always fetch.
            fetch: fetch || matches!(op, AtomicOp::Xchg | AtomicOp::CmpXchg),
            base,
            off,
            src,
        },
        target: None,
    })
}

/// Splits a line into mnemonic and operands, dropping the comment. Operands are separated by
/// commas and/or spaces.
fn tokenize(text: &str) -> Vec<&str> {
    let code = match text.find('#') {
        Some(i) => &text[..i],
        None => text,
    };
    code.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|t| !t.is_empty())
        .collect()
}

/// Assembles `source` into a slot-indexed program (one [`Insn`] per slot; `lddw` is followed
/// by [`Insn::LoadImm64Hi`]).
pub fn assemble(source: &str) -> Result<Vec<Insn>, AsmError> {
    Ok(assemble_slots(source)?.0)
}

/// [`assemble`], and the slots written as `ja32`/`gotol`: an [`Insn::Ja`] does not say which
/// encoding it came from, and [`assemble_raw`] must keep the one the source asked for.
fn assemble_slots(source: &str) -> Result<(Vec<Insn>, Vec<usize>), AsmError> {
    let mut long_jumps = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();
    let mut labels: HashMap<String, usize> = HashMap::new();
    let mut slot = 0usize;
    let mut first_exit = None;
    for (i, text) in source.lines().enumerate() {
        let line = i + 1;
        let mut toks = tokenize(text);
        // Labels: `name:` alone or before an instruction.
        while let Some(label) = toks.first().and_then(|t| t.strip_suffix(':')) {
            match parse_target(label, line)? {
                Target::Label(l) => {
                    if labels.insert(l.clone(), slot).is_some() {
                        return Err(err(line, format!("duplicate label `{l}`")));
                    }
                }
                Target::Rel(_) => return Err(err(line, format!("invalid label `{label}`"))),
            }
            toks.remove(0);
        }
        let Some((&mnemonic, ops)) = toks.split_first() else {
            continue;
        };
        let p = parse_line(mnemonic, ops, line)?;
        if p.insn == Insn::Exit && first_exit.is_none() {
            first_exit = Some(slot);
        }
        slot += if matches!(p.insn, Insn::LoadImm64 { .. }) {
            2
        } else {
            1
        };
        pending.push(p);
    }
    if let Some(e) = first_exit {
        labels.entry("exit".to_string()).or_insert(e);
    }
    let mut out = Vec::with_capacity(slot);
    for p in pending {
        let pc = out.len();
        let mut insn = p.insn;
        if let Some(t) = &p.target {
            let rel = match t {
                Target::Rel(r) => *r,
                Target::Label(l) => {
                    let at = *labels
                        .get(l)
                        .ok_or_else(|| err(p.line, format!("undefined label `{l}`")))?;
                    at as i64 - pc as i64 - 1
                }
            };
            match &mut insn {
                Insn::Ja { off } => {
                    let long = *off == i32::MAX;
                    let limit = if long {
                        i32::MAX as i64
                    } else {
                        i16::MAX as i64
                    };
                    if rel > limit || rel < -limit - 1 {
                        return Err(err(p.line, format!("jump offset {rel} out of range")));
                    }
                    if long {
                        long_jumps.push(pc);
                    }
                    *off = rel as i32;
                }
                Insn::Jmp { off, .. } | Insn::MayGoto { off } => {
                    *off = i16::try_from(rel)
                        .map_err(|_| err(p.line, format!("jump offset {rel} out of range")))?;
                }
                Insn::Call(CallTarget::Local(r)) => {
                    *r = i32::try_from(rel)
                        .map_err(|_| err(p.line, format!("call offset {rel} out of range")))?;
                }
                _ => unreachable!("only jumps and calls carry targets"),
            }
        }
        out.push(insn);
        if matches!(insn, Insn::LoadImm64 { .. }) {
            out.push(Insn::LoadImm64Hi);
        }
    }
    Ok((out, long_jumps))
}

/// Assembles to raw slots; `ja32`/`gotol` always use the 32-bit form (JMP32 class, offset in
/// the immediate), even where a 16-bit `ja` would reach, which [`isa::encode`] alone would
/// pick.
pub fn assemble_raw(source: &str) -> Result<Vec<isa::RawInsn>, AsmError> {
    let (insns, long_jumps) = assemble_slots(source)?;
    let mut raw = isa::encode(&insns);
    for slot in long_jumps {
        if let Insn::Ja { off } = insns[slot] {
            raw[slot] = isa::RawInsn::new(isa::op::CLASS_JMP32 | isa::op::JMP_JA, 0, 0, 0, off);
        }
    }
    Ok(raw)
}

/// A bpf_conformance `.data` test vector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TestVector {
    /// The `-- asm` section, if any.
    pub asm: Option<String>,
    /// The `-- raw` section as bytes, if any.
    pub raw: Option<Vec<u8>>,
    /// The `-- mem` section; `None` when absent (then `r1` = `r2` = 0).
    pub mem: Option<Vec<u8>>,
    /// The expected `r0`.
    pub result: Option<u64>,
    /// The `-- error` text: the program must be rejected.
    pub error: Option<String>,
}

/// A `.data` file that cannot be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct VectorError {
    /// 1-based line of the file.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

impl TestVector {
    /// Parses a `.data` file. Sections: `-- asm`, `-- raw` (hex bytes like `07 00 01 00 ...`,
    /// or 64-bit little-endian words like `0x0000000000000095`), `-- mem` (hex bytes),
    /// `-- result` (a number), `-- error` (text); `-- c` and `-- no register offset` are
    /// informative and skipped. Any other section is an error. `#` starts a comment outside
    /// the `-- c` section.
    pub fn parse(text: &str) -> Result<TestVector, VectorError> {
        #[derive(PartialEq)]
        enum Sec {
            None,
            Asm,
            Raw,
            Mem,
            Result,
            Error,
            Skip,
        }
        let mut v = TestVector::default();
        let mut sec = Sec::None;
        let mut asm = String::new();
        let mut raw_toks: Vec<(usize, String)> = Vec::new();
        let mut mem_toks: Vec<(usize, String)> = Vec::new();
        let mut result: Option<(usize, String)> = None;
        let mut error: Option<String> = None;
        let bad = |line: usize, reason: String| VectorError { line, reason };
        for (i, raw_line) in text.lines().enumerate() {
            let line = i + 1;
            if let Some(name) = raw_line.trim_start().strip_prefix("--") {
                let name = name.trim();
                sec = match name {
                    "asm" => Sec::Asm,
                    "raw" => Sec::Raw,
                    "mem" => Sec::Mem,
                    "result" => Sec::Result,
                    "error" => Sec::Error,
                    "c" | "no register offset" => Sec::Skip,
                    other => return Err(bad(line, format!("unknown section `-- {other}`"))),
                };
                match sec {
                    Sec::Asm => v.asm = Some(String::new()),
                    Sec::Raw => v.raw = Some(Vec::new()),
                    Sec::Mem => v.mem = Some(Vec::new()),
                    Sec::Error => error = Some(String::new()),
                    _ => {}
                }
                continue;
            }
            if sec == Sec::Skip {
                continue;
            }
            let content = match raw_line.find('#') {
                Some(i) => &raw_line[..i],
                None => raw_line,
            };
            match sec {
                Sec::Asm => {
                    asm.push_str(raw_line);
                    asm.push('\n');
                }
                Sec::Raw => {
                    raw_toks.extend(content.split_whitespace().map(|t| (line, t.to_string())))
                }
                Sec::Mem => {
                    mem_toks.extend(content.split_whitespace().map(|t| (line, t.to_string())))
                }
                Sec::Result => {
                    if !content.trim().is_empty() {
                        result = Some((line, content.trim().to_string()));
                    }
                }
                Sec::Error => {
                    let e = error.get_or_insert_with(String::new);
                    if !e.is_empty() {
                        e.push('\n');
                    }
                    e.push_str(raw_line.trim());
                }
                Sec::None | Sec::Skip => {
                    if !content.trim().is_empty() {
                        return Err(bad(line, "text outside any section".into()));
                    }
                }
            }
        }
        if v.asm.is_some() {
            v.asm = Some(asm);
        }
        if v.raw.is_some() {
            let words = raw_toks.iter().any(|(_, t)| t.starts_with("0x"));
            let mut bytes = Vec::new();
            for (line, t) in &raw_toks {
                if words {
                    let w = t
                        .strip_prefix("0x")
                        .and_then(|h| u64::from_str_radix(h, 16).ok())
                        .ok_or_else(|| bad(*line, format!("invalid raw word `{t}`")))?;
                    bytes.extend_from_slice(&w.to_le_bytes());
                } else {
                    let b = (t.len() == 2)
                        .then(|| u8::from_str_radix(t, 16).ok())
                        .flatten()
                        .ok_or_else(|| bad(*line, format!("invalid raw byte `{t}`")))?;
                    bytes.push(b);
                }
            }
            v.raw = Some(bytes);
        }
        if v.mem.is_some() {
            let mut bytes = Vec::new();
            for (line, t) in &mem_toks {
                let b = u8::from_str_radix(t.trim_start_matches("0x"), 16)
                    .map_err(|_| bad(*line, format!("invalid memory byte `{t}`")))?;
                bytes.push(b);
            }
            v.mem = Some(bytes);
        }
        if let Some((line, r)) = result {
            let n = if let Some(h) = r.strip_prefix("0x").or_else(|| r.strip_prefix("0X")) {
                u64::from_str_radix(h, 16).ok()
            } else {
                r.parse::<u64>().ok()
            };
            v.result = Some(n.ok_or_else(|| bad(line, format!("invalid result `{r}`")))?);
        }
        v.error = error;
        Ok(v)
    }

    /// The program as the bytes a runtime is handed: `-- raw` if present, else `-- asm`
    /// assembled ([`assemble_raw`], so `gotol` keeps its encoding).
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        if let Some(raw) = &self.raw {
            return Ok(raw.clone());
        }
        match &self.asm {
            Some(src) => Ok(isa::raw_to_bytes(
                &assemble_raw(src).map_err(|e| e.to_string())?,
            )),
            None => Err("no -- asm or -- raw section".into()),
        }
    }

    /// The program: [`TestVector::bytes`] through the strict decoder, since what the suite
    /// hands a runtime is bytes.
    pub fn program(&self) -> Result<Vec<Insn>, String> {
        isa::decode_bytes(&self.bytes()?).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assembles_the_conformance_syntax() {
        let src = "
            mov32 %r0, 0          # comment
            lddw %r1, 0x1122334455667788
            ldxdw %r2, [%r1+8]
            stb [%r10-1], 0x80
            ldxsb %r3, [%r10-1]
        loop:
            add %r0, 1
            jne %r0, 3, loop
            lock fetch add32 [%r10-8], %r1
            lock cmpxchg [%r10-8], %r2
            call local func
            call 1
            call %r2
            ja32 +0
            movsx1632 %r4, %r3
            be16 %r0
            swap64 %r0
            exit
        func:
            neg32 %r0
            exit";
        let insns = assemble(src).unwrap();
        assert_eq!(insns.len(), 20);
        assert_eq!(insns[2], Insn::LoadImm64Hi);
        assert_eq!(
            insns[7],
            Insn::Jmp {
                width: Width::W64,
                cond: JmpCond::Ne,
                dst: Reg(0),
                src: Operand::Imm(3),
                off: -2
            }
        );
        assert_eq!(insns[10], Insn::Call(CallTarget::Local(7)));
        assert_eq!(insns[12], Insn::Call(CallTarget::Reg(Reg(2))));
        assert!(isa::decode(&isa::encode(&insns)).is_ok());
    }

    #[test]
    fn gotol_keeps_its_32_bit_encoding() {
        // A short `gotol` is the JMP32-class `ja` with the offset in the immediate, not the
        // 16-bit `ja` that `isa::encode` would choose for the same distance.
        let raw = assemble_raw("gotol +1\nja +1\nexit\nexit").unwrap();
        assert_eq!(raw[0], isa::RawInsn::new(0x06, 0, 0, 0, 1));
        assert_eq!(raw[1], isa::RawInsn::new(0x05, 0, 0, 1, 0));
        let decoded = isa::decode(&raw).unwrap();
        assert_eq!(decoded, assemble("gotol +1\nja +1\nexit\nexit").unwrap());
    }

    #[test]
    fn rejects_bad_input_with_line_numbers() {
        let cases = [
            ("or %r0, %r50", "invalid register"),
            ("mov32 %r0, 2147483648", "32 bits"),
            ("mov32 %r0, 0x100000000", "32 bits"),
            ("ja NOT_A_LABEL\nexit", "undefined label"),
            ("lock or [%r10-8]", "number of operands"),
            ("lock", "number of operands"),
            ("ldxq %r0, %r1", "invalid mnemonic"),
            ("ldxb %r0, %r1", "memory operand"),
            ("ldxb %r0, [%r1+0x10000]", "16 bits"),
            ("lddw %r0", "operand"),
            ("a:\na:\nexit", "duplicate label"),
        ];
        for (src, want) in cases {
            let e = assemble(src).unwrap_err();
            assert!(e.reason.contains(want), "{src}: {e}");
        }
        assert_eq!(assemble("exit\nmov %r11, 1").unwrap_err().line, 2);
    }

    #[test]
    fn parses_vectors() {
        let v = TestVector::parse(
            "# c\n-- asm\nmov %r0, %r2 # x\nexit\n-- mem\n00 01\n-- no register offset\nfoo\n-- result\n0x2\n",
        )
        .unwrap();
        assert_eq!(v.mem, Some(vec![0, 1]));
        assert_eq!(v.result, Some(2));
        assert_eq!(v.program().unwrap().len(), 2);
        let v = TestVector::parse("-- raw\n0x0000000000000095\n-- result\n0\n").unwrap();
        assert_eq!(v.program().unwrap(), vec![Insn::Exit]);
        assert!(TestVector::parse("-- bogus\n").is_err());
    }
}
