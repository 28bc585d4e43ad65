//! aarch64 backend of the baseline tier.
//!
//! Register mapping (the kernel JIT's): `r0` = x7, `r1`..`r5` = x0..x4 (the AAPCS64 argument
//! registers, so a helper call only moves its result), `r6`..`r9` = x19..x22 (callee-saved),
//! `r10` = x25. x26 holds the run state for the whole run; x9..x12 are scratch, x12 (used
//! otherwise only inside atomics) also the key register of an inlined lookup
//! ([`Key::Kept`]).
//!
//! Every immediate handed to the assembler is range-checked here first (the assembler panics
//! on an unencodable one): out-of-range constants and offsets go through a scratch register.

// dynasm!'s expansion converts every dynamic register with `.into()`.
#![allow(clippy::useless_conversion)]

use dynasmrt::aarch64::Aarch64Relocation;
use dynasmrt::{dynasm, DynamicLabel, DynasmApi, DynasmLabelApi, VecAssembler};
use rdx_bpf::isa::{AluOp, AtomicOp, ByteOrder, JmpCond, Operand, Reg, Size, Width};
use rdx_region::abi::RunStatus;

use super::{Addr, Emit, Key};
use crate::options::{EntryAbi, InlineArray};

/// Native register of each eBPF register.
const MAP: [u8; 11] = [7, 0, 1, 2, 3, 4, 19, 20, 21, 22, 25];
const R0: u8 = 7;
const RUN: u8 = 26;
const T0: u8 = 9;
const T1: u8 = 10;
const T2: u8 = 11;
const T3: u8 = 12;

fn r(reg: Reg) -> u8 {
    MAP[reg.index()]
}

macro_rules! asm {
    ($ops:expr; $($t:tt)*) => {
        dynasm!($ops ; .arch aarch64 ; $($t)*)
    };
}

pub(super) struct A64 {
    ops: VecAssembler<Aarch64Relocation>,
}

impl A64 {
    pub(super) fn new(insns: usize) -> Self {
        let mut ops = VecAssembler::new(0);
        ops.reserve_ops(insns * 8 + 64);
        Self { ops }
    }

    /// `X(t) = value` with movz/movn and movk.
    fn mov_imm(&mut self, t: u8, value: u64) {
        let chunks: [u32; 4] = std::array::from_fn(|i| ((value >> (16 * i)) & 0xffff) as u32);
        let ones = chunks.iter().filter(|&&c| c == 0xffff).count();
        let zeros = chunks.iter().filter(|&&c| c == 0).count();
        if ones > zeros {
            // Mostly ones: movn writes the complement, movk patches the rest.
            let first = chunks.iter().position(|&c| c != 0xffff).unwrap_or(0);
            let shift = 16 * first as u32;
            let v = !chunks[first] & 0xffff;
            asm!(self.ops; movn X(t), v, lsl shift);
            for (i, &c) in chunks.iter().enumerate().skip(first + 1) {
                if c != 0xffff {
                    let shift = 16 * i as u32;
                    asm!(self.ops; movk X(t), c, lsl shift);
                }
            }
        } else {
            let first = chunks.iter().position(|&c| c != 0).unwrap_or(0);
            let shift = 16 * first as u32;
            let v = chunks[first];
            asm!(self.ops; movz X(t), v, lsl shift);
            for (i, &c) in chunks.iter().enumerate().skip(first + 1) {
                if c != 0 {
                    let shift = 16 * i as u32;
                    asm!(self.ops; movk X(t), c, lsl shift);
                }
            }
        }
    }

    /// `X(t) = <linked 64-bit word>`: a pc-relative load of a literal placed inline.
    fn literal(&mut self, t: u8) -> usize {
        asm!(self.ops; ldr X(t), 8 ; b 12);
        let at = self.ops.offset().0;
        asm!(self.ops; .u64 0);
        at
    }

    /// The operand's value: its register, or the immediate in T0 (sign-extended for 64-bit
    /// operations, its 32 bits for 32-bit ones).
    fn operand(&mut self, width: Width, src: Operand, scratch: u8) -> u8 {
        match src {
            Operand::Reg(s) => r(s),
            Operand::Imm(k) => {
                self.mov_imm(scratch, imm_value(width, k));
                scratch
            }
        }
    }

    /// `X(T0) = X(base) + off`.
    fn address(&mut self, base: u8, off: i16) {
        let o = off as i32;
        if (0..=4095).contains(&o) {
            let u = o as u32;
            asm!(self.ops; add XSP(T0), XSP(base), u);
        } else if (-4095..0).contains(&o) {
            let u = (-o) as u32;
            asm!(self.ops; sub XSP(T0), XSP(base), u);
        } else {
            self.mov_imm(T0, o as i64 as u64);
            asm!(self.ops; add X(T0), X(base), X(T0));
        }
    }

    /// `X(d) = X(s) + k` (a move for 0; larger constants through T0).
    fn add_imm(&mut self, d: u8, s: u8, k: i32) {
        if k == 0 {
            if d != s {
                asm!(self.ops; mov X(d), X(s));
            }
        } else if (1..=4095).contains(&k) {
            let u = k as u32;
            asm!(self.ops; add XSP(d), XSP(s), u);
        } else if (-4095..0).contains(&k) {
            let u = k.unsigned_abs();
            asm!(self.ops; sub XSP(d), XSP(s), u);
        } else {
            self.mov_imm(T0, k as i64 as u64);
            asm!(self.ops; add X(d), X(s), X(T0));
        }
    }

    /// `d = *(size *)(b + o)` in native registers; `b` may be T1 (not T0, which holds an
    /// offset out of the immediate forms' range).
    fn load_at(&mut self, size: Size, sign_extend: bool, d: u8, b: u8, o: i32) {
        if (-256..=255).contains(&o) {
            match (size, sign_extend) {
                (Size::B, false) => asm!(self.ops; ldurb W(d), [X(b), o]),
                (Size::H, false) => asm!(self.ops; ldurh W(d), [X(b), o]),
                (Size::W, false) => asm!(self.ops; ldur W(d), [X(b), o]),
                (Size::B, true) => asm!(self.ops; ldursb X(d), [X(b), o]),
                (Size::H, true) => asm!(self.ops; ldursh X(d), [X(b), o]),
                (Size::W, true) => asm!(self.ops; ldursw X(d), [X(b), o]),
                (Size::DW, _) => asm!(self.ops; ldur X(d), [X(b), o]),
            }
            return;
        }
        self.mov_imm(T0, o as i64 as u64);
        self.load_indexed(size, sign_extend, d, b, T0);
    }

    /// `d = *(size *)(b + i)` in native registers.
    fn load_indexed(&mut self, size: Size, sign_extend: bool, d: u8, b: u8, i: u8) {
        match (size, sign_extend) {
            (Size::B, false) => asm!(self.ops; ldrb W(d), [X(b), X(i)]),
            (Size::H, false) => asm!(self.ops; ldrh W(d), [X(b), X(i)]),
            (Size::W, false) => asm!(self.ops; ldr W(d), [X(b), X(i)]),
            (Size::B, true) => asm!(self.ops; ldrsb X(d), [X(b), X(i)]),
            (Size::H, true) => asm!(self.ops; ldrsh X(d), [X(b), X(i)]),
            (Size::W, true) => asm!(self.ops; ldrsw X(d), [X(b), X(i)]),
            (Size::DW, _) => asm!(self.ops; ldr X(d), [X(b), X(i)]),
        }
    }

    fn epilogue_body(&mut self) {
        asm!(self.ops
            ; add sp, sp, 512
            ; ldp x25, x26, [sp], 16
            ; ldp x21, x22, [sp], 16
            ; ldp x19, x20, [sp], 16
            ; ldp x29, x30, [sp], 16
            ; ret
        );
    }
}

fn imm_value(width: Width, k: i32) -> u64 {
    match width {
        Width::W64 => k as i64 as u64,
        Width::W32 => k as u32 as u64,
    }
}

impl Emit for A64 {
    fn offset(&self) -> usize {
        self.ops.offset().0
    }

    fn new_label(&mut self) -> DynamicLabel {
        self.ops.new_dynamic_label()
    }

    fn bind(&mut self, label: DynamicLabel) {
        asm!(self.ops; =>label);
    }

    fn pad16(&mut self) {
        // Zero words are permanently undefined instructions.
        while !self.ops.offset().0.is_multiple_of(16) {
            asm!(self.ops; .u32 0);
        }
    }

    fn prologue(&mut self, entry: Option<EntryAbi>) {
        asm!(self.ops
            ; stp x29, x30, [sp, -16]!
            ; add x29, sp, 0
            ; stp x19, x20, [sp, -16]!
            ; stp x21, x22, [sp, -16]!
            ; stp x25, x26, [sp, -16]!
            ; sub sp, sp, 512
            ; add x25, sp, 512
        );
        if let Some(abi) = entry {
            asm!(self.ops; mov x26, x1);
            if abi == EntryAbi::WithLength {
                asm!(self.ops; mov x1, x2);
            } else {
                asm!(self.ops; movz x1, 0);
            }
            asm!(self.ops; movz x2, 0 ; movz x3, 0 ; movz x4, 0);
        }
        asm!(self.ops
            ; movz x7, 0 ; movz x19, 0 ; movz x20, 0 ; movz x21, 0 ; movz x22, 0
        );
    }

    fn epilogue(&mut self, entry: bool) {
        if entry {
            asm!(self.ops; mov x0, x7);
        }
        // Subprograms leave r0 in x7, where their caller expects it.
        self.epilogue_body();
    }

    fn return_zero(&mut self, entry: bool) {
        asm!(self.ops; movz x7, 0);
        self.epilogue(entry);
    }

    fn set_status(&mut self, status: RunStatus, zero_budget: bool) {
        if zero_budget {
            asm!(self.ops; str xzr, [X(RUN)]);
        }
        let s = status as u32;
        asm!(self.ops; movz W(T0), s ; str W(T0), [X(RUN), 8]);
    }

    fn charge(&mut self, amount: u64, exhausted: DynamicLabel) {
        asm!(self.ops; ldr X(T0), [X(RUN)]);
        if amount <= 4095 {
            let a = amount as u32;
            asm!(self.ops; subs X(T0), XSP(T0), a);
        } else {
            self.mov_imm(T1, amount);
            asm!(self.ops; subs X(T0), X(T0), X(T1));
        }
        asm!(self.ops; b.lo =>exhausted ; str X(T0), [X(RUN)]);
    }

    fn alu(&mut self, width: Width, op: AluOp, dst: Reg, src: Operand) {
        let d = r(dst);
        let w64 = width == Width::W64;
        match op {
            AluOp::Mov => match src {
                Operand::Imm(k) => self.mov_imm(d, imm_value(width, k)),
                Operand::Reg(s) if w64 => asm!(self.ops; mov X(d), X(r(s))),
                Operand::Reg(s) => asm!(self.ops; mov W(d), W(r(s))),
            },
            AluOp::MovSx(bits) => {
                let s = match src {
                    Operand::Reg(s) => r(s),
                    Operand::Imm(k) => {
                        self.mov_imm(T0, k as i64 as u64);
                        T0
                    }
                };
                match (bits, w64) {
                    (8, true) => asm!(self.ops; sxtb X(d), W(s)),
                    (16, true) => asm!(self.ops; sxth X(d), W(s)),
                    (_, true) => asm!(self.ops; sxtw X(d), W(s)),
                    (8, false) => asm!(self.ops; sxtb W(d), W(s)),
                    (16, false) => asm!(self.ops; sxth W(d), W(s)),
                    (_, false) => asm!(self.ops; mov W(d), W(s)),
                }
            }
            AluOp::Neg => {
                if w64 {
                    asm!(self.ops; neg X(d), X(d));
                } else {
                    asm!(self.ops; neg W(d), W(d));
                }
            }
            AluOp::Add | AluOp::Sub if matches!(src, Operand::Imm(k) if (-4095..=4095).contains(&k)) =>
            {
                let Operand::Imm(k) = src else {
                    unreachable!("matched above")
                };
                let add = (op == AluOp::Add) == (k >= 0);
                let u = k.unsigned_abs();
                match (add, w64) {
                    (true, true) => asm!(self.ops; add XSP(d), XSP(d), u),
                    (false, true) => asm!(self.ops; sub XSP(d), XSP(d), u),
                    (true, false) => asm!(self.ops; add WSP(d), WSP(d), u),
                    (false, false) => asm!(self.ops; sub WSP(d), WSP(d), u),
                }
            }
            AluOp::Lsh | AluOp::Rsh | AluOp::Arsh => match src {
                Operand::Imm(k) => {
                    let k = k as u32 & if w64 { 63 } else { 31 };
                    if k == 0 && w64 {
                        return;
                    }
                    match (op, w64) {
                        (AluOp::Lsh, true) => asm!(self.ops; lsl X(d), X(d), k),
                        (AluOp::Rsh, true) => asm!(self.ops; lsr X(d), X(d), k),
                        (_, true) => asm!(self.ops; asr X(d), X(d), k),
                        (AluOp::Lsh, false) => asm!(self.ops; lsl W(d), W(d), k),
                        (AluOp::Rsh, false) => asm!(self.ops; lsr W(d), W(d), k),
                        (_, false) => asm!(self.ops; asr W(d), W(d), k),
                    }
                }
                Operand::Reg(s) => {
                    // The variable shifts take the amount modulo the width: eBPF's masking.
                    let s = r(s);
                    match (op, w64) {
                        (AluOp::Lsh, true) => asm!(self.ops; lslv X(d), X(d), X(s)),
                        (AluOp::Rsh, true) => asm!(self.ops; lsrv X(d), X(d), X(s)),
                        (_, true) => asm!(self.ops; asrv X(d), X(d), X(s)),
                        (AluOp::Lsh, false) => asm!(self.ops; lslv W(d), W(d), W(s)),
                        (AluOp::Rsh, false) => asm!(self.ops; lsrv W(d), W(d), W(s)),
                        (_, false) => asm!(self.ops; asrv W(d), W(d), W(s)),
                    }
                }
            },
            AluOp::Div | AluOp::SDiv | AluOp::Mod | AluOp::SMod => {
                // The hardware already has eBPF's semantics: x / 0 = 0, MIN / -1 = MIN; the
                // remainder as x - (x / y) * y then gives x % 0 = x and MIN % -1 = 0.
                let s = self.operand(width, src, T1);
                let signed = matches!(op, AluOp::SDiv | AluOp::SMod);
                let is_div = matches!(op, AluOp::Div | AluOp::SDiv);
                let q = if is_div { d } else { T0 };
                match (signed, w64) {
                    (false, true) => asm!(self.ops; udiv X(q), X(d), X(s)),
                    (true, true) => asm!(self.ops; sdiv X(q), X(d), X(s)),
                    (false, false) => asm!(self.ops; udiv W(q), W(d), W(s)),
                    (true, false) => asm!(self.ops; sdiv W(q), W(d), W(s)),
                }
                if !is_div {
                    if w64 {
                        asm!(self.ops; msub X(d), X(T0), X(s), X(d));
                    } else {
                        asm!(self.ops; msub W(d), W(T0), W(s), W(d));
                    }
                }
            }
            _ => {
                let s = self.operand(width, src, T0);
                match (op, w64) {
                    (AluOp::Add, true) => asm!(self.ops; add X(d), X(d), X(s)),
                    (AluOp::Add, false) => asm!(self.ops; add W(d), W(d), W(s)),
                    (AluOp::Sub, true) => asm!(self.ops; sub X(d), X(d), X(s)),
                    (AluOp::Sub, false) => asm!(self.ops; sub W(d), W(d), W(s)),
                    (AluOp::Mul, true) => asm!(self.ops; mul X(d), X(d), X(s)),
                    (AluOp::Mul, false) => asm!(self.ops; mul W(d), W(d), W(s)),
                    (AluOp::Or, true) => asm!(self.ops; orr X(d), X(d), X(s)),
                    (AluOp::Or, false) => asm!(self.ops; orr W(d), W(d), W(s)),
                    (AluOp::And, true) => asm!(self.ops; and X(d), X(d), X(s)),
                    (AluOp::And, false) => asm!(self.ops; and W(d), W(d), W(s)),
                    (AluOp::Xor, true) => asm!(self.ops; eor X(d), X(d), X(s)),
                    (AluOp::Xor, false) => asm!(self.ops; eor W(d), W(d), W(s)),
                    _ => unreachable!("handled above"),
                }
            }
        }
    }

    fn endian(&mut self, order: ByteOrder, bits: u8, dst: Reg) {
        let d = r(dst);
        match (order, bits) {
            (ByteOrder::ToLe, 16) => asm!(self.ops; uxth W(d), W(d)),
            (ByteOrder::ToLe, 32) => asm!(self.ops; mov W(d), W(d)),
            (ByteOrder::ToLe, _) => {}
            (_, 16) => asm!(self.ops; rev16 W(d), W(d) ; uxth W(d), W(d)),
            (_, 32) => asm!(self.ops; rev W(d), W(d)),
            (_, _) => asm!(self.ops; rev X(d), X(d)),
        }
    }

    fn load(&mut self, size: Size, sign_extend: bool, dst: Reg, base: Reg, off: i16) {
        self.load_at(size, sign_extend, r(dst), r(base), off as i32);
    }

    fn load_addr(&mut self, size: Size, sign_extend: bool, dst: Reg, addr: Addr) {
        let (d, b) = (r(dst), r(addr.base));
        match addr.index {
            None => self.load_at(size, sign_extend, d, b, addr.disp),
            Some(i) if addr.disp == 0 => self.load_indexed(size, sign_extend, d, b, r(i)),
            Some(i) => {
                let i = r(i);
                asm!(self.ops; add X(T1), X(b), X(i));
                self.load_at(size, sign_extend, d, T1, addr.disp);
            }
        }
    }

    fn alu3(&mut self, width: Width, op: AluOp, dst: Reg, a: Reg, src: Operand) -> bool {
        let (d, a) = (r(dst), r(a));
        let w64 = width == Width::W64;
        match op {
            AluOp::Lsh | AluOp::Rsh | AluOp::Arsh => match src {
                Operand::Imm(k) => {
                    let k = k as u32 & if w64 { 63 } else { 31 };
                    match (op, w64) {
                        _ if k == 0 && w64 => asm!(self.ops; mov X(d), X(a)),
                        _ if k == 0 => asm!(self.ops; mov W(d), W(a)),
                        (AluOp::Lsh, true) => asm!(self.ops; lsl X(d), X(a), k),
                        (AluOp::Rsh, true) => asm!(self.ops; lsr X(d), X(a), k),
                        (_, true) => asm!(self.ops; asr X(d), X(a), k),
                        (AluOp::Lsh, false) => asm!(self.ops; lsl W(d), W(a), k),
                        (AluOp::Rsh, false) => asm!(self.ops; lsr W(d), W(a), k),
                        (_, false) => asm!(self.ops; asr W(d), W(a), k),
                    }
                }
                Operand::Reg(s) => {
                    let s = r(s);
                    match (op, w64) {
                        (AluOp::Lsh, true) => asm!(self.ops; lslv X(d), X(a), X(s)),
                        (AluOp::Rsh, true) => asm!(self.ops; lsrv X(d), X(a), X(s)),
                        (_, true) => asm!(self.ops; asrv X(d), X(a), X(s)),
                        (AluOp::Lsh, false) => asm!(self.ops; lslv W(d), W(a), W(s)),
                        (AluOp::Rsh, false) => asm!(self.ops; lsrv W(d), W(a), W(s)),
                        (_, false) => asm!(self.ops; asrv W(d), W(a), W(s)),
                    }
                }
            },
            AluOp::Add | AluOp::Sub | AluOp::Mul | AluOp::Or | AluOp::And | AluOp::Xor => {
                let s = self.operand(width, src, T0);
                match (op, w64) {
                    (AluOp::Add, true) => asm!(self.ops; add X(d), X(a), X(s)),
                    (AluOp::Add, false) => asm!(self.ops; add W(d), W(a), W(s)),
                    (AluOp::Sub, true) => asm!(self.ops; sub X(d), X(a), X(s)),
                    (AluOp::Sub, false) => asm!(self.ops; sub W(d), W(a), W(s)),
                    (AluOp::Mul, true) => asm!(self.ops; mul X(d), X(a), X(s)),
                    (AluOp::Mul, false) => asm!(self.ops; mul W(d), W(a), W(s)),
                    (AluOp::Or, true) => asm!(self.ops; orr X(d), X(a), X(s)),
                    (AluOp::Or, false) => asm!(self.ops; orr W(d), W(a), W(s)),
                    (AluOp::And, true) => asm!(self.ops; and X(d), X(a), X(s)),
                    (AluOp::And, false) => asm!(self.ops; and W(d), W(a), W(s)),
                    (AluOp::Xor, true) => asm!(self.ops; eor X(d), X(a), X(s)),
                    (_, _) => asm!(self.ops; eor W(d), W(a), W(s)),
                }
            }
            _ => return false,
        }
        true
    }

    fn lea(&mut self, dst: Reg, addr: Addr) {
        let (d, b) = (r(dst), r(addr.base));
        match addr.index {
            Some(i) => {
                let i = r(i);
                asm!(self.ops; add X(d), X(b), X(i));
                self.add_imm(d, d, addr.disp);
            }
            None => self.add_imm(d, b, addr.disp),
        }
    }

    fn store(&mut self, size: Size, base: Reg, off: i16, src: Operand) {
        let (b, o) = (r(base), off as i32);
        let s = match src {
            Operand::Reg(s) => r(s),
            Operand::Imm(k) => {
                self.mov_imm(T1, k as i64 as u64);
                T1
            }
        };
        if (-256..=255).contains(&o) {
            match size {
                Size::B => asm!(self.ops; sturb W(s), [X(b), o]),
                Size::H => asm!(self.ops; sturh W(s), [X(b), o]),
                Size::W => asm!(self.ops; stur W(s), [X(b), o]),
                Size::DW => asm!(self.ops; stur X(s), [X(b), o]),
            }
            return;
        }
        self.mov_imm(T0, o as i64 as u64);
        match size {
            Size::B => asm!(self.ops; strb W(s), [X(b), X(T0)]),
            Size::H => asm!(self.ops; strh W(s), [X(b), X(T0)]),
            Size::W => asm!(self.ops; str W(s), [X(b), X(T0)]),
            Size::DW => asm!(self.ops; str X(s), [X(b), X(T0)]),
        }
    }

    fn atomic(&mut self, size: Size, op: AtomicOp, fetch: bool, base: Reg, off: i16, src: Reg) {
        // Load-exclusive / store-exclusive loops (no LSE requirement): T0 = address,
        // T1 = old value, T2 = new value, T3 = store status.
        let (b, s) = (r(base), r(src));
        let w64 = size == Size::DW;
        self.address(b, off);
        let again = self.ops.new_dynamic_label();
        asm!(self.ops; =>again);
        if w64 {
            asm!(self.ops; ldaxr X(T1), [X(T0)]);
        } else {
            asm!(self.ops; ldaxr W(T1), [X(T0)]);
        }
        if op == AtomicOp::CmpXchg {
            let done = self.ops.new_dynamic_label();
            if w64 {
                asm!(self.ops
                    ; cmp X(T1), X(R0) ; b.ne =>done
                    ; stlxr W(T3), X(s), [X(T0)] ; cbnz W(T3), =>again
                    ; =>done ; mov X(R0), X(T1)
                );
            } else {
                asm!(self.ops
                    ; cmp W(T1), W(R0) ; b.ne =>done
                    ; stlxr W(T3), W(s), [X(T0)] ; cbnz W(T3), =>again
                    ; =>done ; mov W(R0), W(T1)
                );
            }
            return;
        }
        let new = if op == AtomicOp::Xchg { s } else { T2 };
        match (op, w64) {
            (AtomicOp::Add, true) => asm!(self.ops; add X(T2), X(T1), X(s)),
            (AtomicOp::Add, false) => asm!(self.ops; add W(T2), W(T1), W(s)),
            (AtomicOp::Or, true) => asm!(self.ops; orr X(T2), X(T1), X(s)),
            (AtomicOp::Or, false) => asm!(self.ops; orr W(T2), W(T1), W(s)),
            (AtomicOp::And, true) => asm!(self.ops; and X(T2), X(T1), X(s)),
            (AtomicOp::And, false) => asm!(self.ops; and W(T2), W(T1), W(s)),
            (AtomicOp::Xor, true) => asm!(self.ops; eor X(T2), X(T1), X(s)),
            (AtomicOp::Xor, false) => asm!(self.ops; eor W(T2), W(T1), W(s)),
            _ => {}
        }
        if w64 {
            asm!(self.ops; stlxr W(T3), X(new), [X(T0)] ; cbnz W(T3), =>again);
        } else {
            asm!(self.ops; stlxr W(T3), W(new), [X(T0)] ; cbnz W(T3), =>again);
        }
        if fetch || op == AtomicOp::Xchg {
            if w64 {
                asm!(self.ops; mov X(s), X(T1));
            } else {
                asm!(self.ops; mov W(s), W(T1));
            }
        }
    }

    fn load_imm64(&mut self, dst: Reg, value: u64) {
        self.mov_imm(r(dst), value);
    }

    fn load_word(&mut self, dst: Reg) -> usize {
        self.literal(r(dst))
    }

    fn jump(&mut self, label: DynamicLabel) {
        asm!(self.ops; b =>label);
    }

    fn branch(&mut self, width: Width, cond: JmpCond, dst: Reg, src: Operand, l: DynamicLabel) {
        let d = r(dst);
        let w64 = width == Width::W64;
        match src {
            Operand::Imm(k) if cond != JmpCond::Set && (0..=4095).contains(&k) => {
                let u = k as u32;
                if w64 {
                    asm!(self.ops; cmp XSP(d), u);
                } else {
                    asm!(self.ops; cmp WSP(d), u);
                }
            }
            _ => {
                let s = self.operand(width, src, T0);
                match (cond == JmpCond::Set, w64) {
                    (true, true) => asm!(self.ops; tst X(d), X(s)),
                    (true, false) => asm!(self.ops; tst W(d), W(s)),
                    (false, true) => asm!(self.ops; cmp X(d), X(s)),
                    (false, false) => asm!(self.ops; cmp W(d), W(s)),
                }
            }
        }
        match cond {
            JmpCond::Eq => asm!(self.ops; b.eq =>l),
            JmpCond::Ne | JmpCond::Set => asm!(self.ops; b.ne =>l),
            JmpCond::Gt => asm!(self.ops; b.hi =>l),
            JmpCond::Ge => asm!(self.ops; b.hs =>l),
            JmpCond::Lt => asm!(self.ops; b.lo =>l),
            JmpCond::Le => asm!(self.ops; b.ls =>l),
            JmpCond::Sgt => asm!(self.ops; b.gt =>l),
            JmpCond::Sge => asm!(self.ops; b.ge =>l),
            JmpCond::Slt => asm!(self.ops; b.lt =>l),
            JmpCond::Sle => asm!(self.ops; b.le =>l),
        }
    }

    fn call_direct(&mut self) -> usize {
        let at = self.literal(T0);
        asm!(self.ops; blr X(T0) ; mov X(R0), x0);
        at
    }

    fn call_table(&mut self, id: u32) -> usize {
        let at = self.literal(T0);
        let off = id as u64 * 8;
        if off <= 32760 {
            let o = off as u32;
            asm!(self.ops; ldr X(T0), [X(T0), o]);
        } else {
            self.mov_imm(T1, off);
            asm!(self.ops; ldr X(T0), [X(T0), X(T1)]);
        }
        asm!(self.ops; blr X(T0) ; mov X(R0), x0);
        at
    }

    fn call_reg(&mut self, reg: Reg, table_len: u32, bad: DynamicLabel) -> usize {
        let i = r(reg);
        self.mov_imm(T1, table_len as u64);
        asm!(self.ops; cmp X(i), X(T1) ; b.hs =>bad);
        let at = self.literal(T0);
        asm!(self.ops
            ; ldr X(T0), [X(T0), X(i), lsl 3]
            ; blr X(T0)
            ; mov X(R0), x0
        );
        at
    }

    fn call_local(&mut self, function: DynamicLabel) {
        asm!(self.ops; bl =>function);
    }

    fn branch_if_stopped(&mut self, stopped: DynamicLabel) {
        asm!(self.ops; ldr W(T0), [X(RUN), 8] ; cbnz W(T0), =>stopped);
    }

    fn inline_lookup(&mut self, array: InlineArray, key: Key, checked: bool) -> usize {
        let done = self.ops.new_dynamic_label();
        let k = match key {
            Key::Kept => T3,
            Key::Frame(o) if (-256..=255).contains(&o) => {
                asm!(self.ops; ldur W(T0), [x25, o]);
                T0
            }
            _ => {
                asm!(self.ops; ldr W(T0), [x1]);
                T0
            }
        };
        if checked {
            asm!(self.ops; movz X(R0), 0);
            if array.max_entries <= 4095 {
                let n = array.max_entries;
                asm!(self.ops; cmp WSP(k), n);
            } else {
                self.mov_imm(T1, array.max_entries as u64);
                asm!(self.ops; cmp W(k), W(T1));
            }
            asm!(self.ops; b.hs =>done);
        }
        let stride = array.value_stride();
        let at = self.literal(R0);
        if stride.is_power_of_two() {
            let shift = stride.trailing_zeros();
            asm!(self.ops; add X(R0), X(R0), X(k), lsl shift);
        } else {
            self.mov_imm(T1, stride);
            asm!(self.ops; mul X(T1), X(k), X(T1) ; add X(R0), X(R0), X(T1));
        }
        asm!(self.ops; =>done);
        at
    }

    fn keep_key(&mut self, src: Reg) {
        asm!(self.ops; mov W(T3), W(r(src)));
    }

    fn finish(self) -> Result<Vec<u8>, String> {
        self.ops.finalize().map_err(|e| e.to_string())
    }
}
