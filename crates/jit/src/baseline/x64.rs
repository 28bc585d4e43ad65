//! x86-64 backend of the baseline tier.
//!
//! Register mapping (the kernel JIT's): `r0` = rax, `r1`..`r5` = rdi, rsi, rdx, rcx, r8 (the
//! System V argument registers, so a helper call needs no moves), `r6`..`r9` = rbx, r13, r14,
//! r15 (callee-saved), `r10` = rbp. r12 holds the run state for the whole run; r10 and r11
//! are scratch, r11 also the key register of an inlined lookup ([`Key::Kept`]).

// dynasm!'s expansion converts every dynamic register with `.into()`.
#![allow(clippy::useless_conversion)]

use dynasmrt::x64::X64Relocation;
use dynasmrt::{dynasm, DynamicLabel, DynasmApi, DynasmLabelApi, VecAssembler};
use rdx_bpf::isa::{AluOp, AtomicOp, ByteOrder, JmpCond, Operand, Reg, Size, Width};
use rdx_region::abi::RunStatus;

use super::{Addr, Emit, Key};
use crate::blinding::{plain_constant, BlindingKeys};
use crate::options::{EntryAbi, InlineArray};

const RAX: u8 = 0;
const RCX: u8 = 1;

/// Native register of each eBPF register.
const MAP: [u8; 11] = [0, 7, 6, 2, 1, 8, 3, 13, 14, 15, 5];

/// Bytes below the saved registers: the 512-byte frame, and 8 more in the entry function to
/// keep calls 16-byte aligned.
const FRAME: i32 = 512;

fn r(reg: Reg) -> u8 {
    MAP[reg.index()]
}

macro_rules! asm {
    ($ops:expr; $($t:tt)*) => {
        dynasm!($ops ; .arch x64 ; $($t)*)
    };
}

pub(super) struct X64 {
    ops: VecAssembler<X64Relocation>,
    /// Constant blinding's keys, when it is on.
    keys: Option<BlindingKeys>,
}

/// The register blinded immediates are unmasked in: r9, which no eBPF register maps to
/// and nothing else uses, so that it never disturbs a register an instruction sequence
/// keeps (r11, the kept key of an inlined lookup).
const BLIND: u8 = 9;

impl X64 {
    pub(super) fn new(insns: usize, blind: bool) -> Self {
        let mut ops = VecAssembler::new(0);
        ops.reserve_ops(insns * 6 + 64);
        Self {
            ops,
            keys: blind.then(BlindingKeys::new),
        }
    }

    /// Whether the immediate `value` may be emitted as it is: blinding is off, or it puts
    /// at most 16 chosen bits in the code (as a 64-bit or as a 32-bit immediate).
    fn plain(&self, value: u64) -> bool {
        self.keys.is_none()
            || plain_constant(value as i64)
            || (value <= u32::MAX as u64 && plain_constant(value as u32 as i32 as i64))
    }

    /// `reg = value` without `value` appearing in the code: it is emitted xored with a fresh
    /// random key, which a second instruction applies again (r10 holds a 64-bit key).
    fn blinded(&mut self, reg: u8, value: u64) {
        let key = self.keys.as_mut().expect("blinding is on").next();
        if value as i64 >= i32::MIN as i64 && value as i64 <= i32::MAX as i64 {
            // Both immediates are sign-extended, and so is their xor.
            let (masked, key) = ((value as i32) ^ (key as i32), key as i32);
            asm!(self.ops; mov Rq(reg), masked ; xor Rq(reg), key);
        } else if value <= u32::MAX as u64 {
            let (masked, key) = (((value as u32) ^ (key as u32)) as i32, key as u32 as i32);
            asm!(self.ops; mov Rd(reg), masked ; xor Rd(reg), key);
        } else {
            let masked = (value ^ key) as i64;
            asm!(self.ops; mov Rq(reg), QWORD masked ; mov r10, QWORD key as i64 ; xor Rq(reg), r10);
        }
    }

    /// `r11 = value` (the shortest form).
    fn imm_to_r11(&mut self, value: u64) {
        if !self.plain(value) {
            self.blinded(11, value);
        } else if value <= u32::MAX as u64 {
            asm!(self.ops; mov r11d, value as u32 as i32);
        } else if value as i64 >= i32::MIN as i64 && value as i64 <= i32::MAX as i64 {
            asm!(self.ops; mov r11, value as i64 as i32);
        } else {
            asm!(self.ops; mov r11, QWORD value as i64);
        }
    }

    /// Native register holding the second operand: `src` itself, or r11 loaded with the
    /// immediate (sign-extended for 64-bit operations, its 32 bits for 32-bit ones).
    fn operand(&mut self, width: Width, src: Operand) -> u8 {
        match src {
            Operand::Reg(s) => r(s),
            Operand::Imm(k) => {
                let v = match width {
                    Width::W64 => k as i64 as u64,
                    Width::W32 => k as u32 as u64,
                };
                self.imm_to_r11(v);
                11
            }
        }
    }

    fn shift(&mut self, width: Width, op: AluOp, d: u8, src: Operand) {
        let w64 = width == Width::W64;
        match src {
            Operand::Imm(k) => {
                let k = (k as u32 & if w64 { 63 } else { 31 }) as i8;
                if k == 0 {
                    if !w64 {
                        asm!(self.ops; mov Rd(d), Rd(d));
                    }
                    return;
                }
                match (op, w64) {
                    (AluOp::Lsh, true) => asm!(self.ops; shl Rq(d), k),
                    (AluOp::Rsh, true) => asm!(self.ops; shr Rq(d), k),
                    (_, true) => asm!(self.ops; sar Rq(d), k),
                    (AluOp::Lsh, false) => asm!(self.ops; shl Rd(d), k),
                    (AluOp::Rsh, false) => asm!(self.ops; shr Rd(d), k),
                    (_, false) => asm!(self.ops; sar Rd(d), k),
                }
            }
            Operand::Reg(s) => {
                // The count must be in cl (r4's register): shift a copy in r10 with rcx
                // saved in r11, so that neither operand's register matters.
                let s = r(s);
                asm!(self.ops; mov r10, Rq(d) ; mov r11, rcx);
                if s != RCX {
                    asm!(self.ops; mov rcx, Rq(s));
                }
                match (op, w64) {
                    (AluOp::Lsh, true) => asm!(self.ops; shl r10, cl),
                    (AluOp::Rsh, true) => asm!(self.ops; shr r10, cl),
                    (_, true) => asm!(self.ops; sar r10, cl),
                    (AluOp::Lsh, false) => asm!(self.ops; shl r10d, cl),
                    (AluOp::Rsh, false) => asm!(self.ops; shr r10d, cl),
                    (_, false) => asm!(self.ops; sar r10d, cl),
                }
                asm!(self.ops; mov rcx, r11);
                if w64 {
                    asm!(self.ops; mov Rq(d), r10);
                } else {
                    asm!(self.ops; mov Rd(d), r10d);
                }
            }
        }
    }

    /// eBPF division: `x / 0 = 0`, `x % 0 = x`, signed `x / -1 = -x`, `x % -1 = 0`; the
    /// hardware's `div` needs rax and rdx (`r0` and `r3`), saved around it.
    fn division(&mut self, width: Width, op: AluOp, d: u8, src: Operand) {
        let w64 = width == Width::W64;
        let signed = matches!(op, AluOp::SDiv | AluOp::SMod);
        let is_div = matches!(op, AluOp::Div | AluOp::SDiv);
        match src {
            Operand::Reg(s) if w64 => asm!(self.ops; mov r11, Rq(r(s))),
            Operand::Reg(s) => asm!(self.ops; mov r11d, Rd(r(s))),
            Operand::Imm(k) => self.imm_to_r11(if w64 {
                k as i64 as u64
            } else {
                k as u32 as u64
            }),
        }
        let nonzero = self.ops.new_dynamic_label();
        let done = self.ops.new_dynamic_label();
        asm!(self.ops; test r11, r11 ; jnz =>nonzero);
        match (is_div, w64) {
            (true, _) => asm!(self.ops; xor Rd(d), Rd(d)),
            (false, true) => {}
            (false, false) => asm!(self.ops; mov Rd(d), Rd(d)),
        }
        asm!(self.ops; jmp =>done ; =>nonzero);
        if signed {
            let general = self.ops.new_dynamic_label();
            if w64 {
                asm!(self.ops; cmp r11, -1);
            } else {
                asm!(self.ops; cmp r11d, -1);
            }
            asm!(self.ops; jne =>general);
            match (is_div, w64) {
                (true, true) => asm!(self.ops; neg Rq(d)),
                (true, false) => asm!(self.ops; neg Rd(d)),
                (false, _) => asm!(self.ops; xor Rd(d), Rd(d)),
            }
            asm!(self.ops; jmp =>done ; =>general);
        }
        asm!(self.ops; push rax ; push rdx);
        if w64 {
            asm!(self.ops; mov rax, Rq(d));
            if signed {
                asm!(self.ops; cqo ; idiv r11);
            } else {
                asm!(self.ops; xor edx, edx ; div r11);
            }
            if is_div {
                asm!(self.ops; mov r11, rax);
            } else {
                asm!(self.ops; mov r11, rdx);
            }
            asm!(self.ops; pop rdx ; pop rax ; mov Rq(d), r11);
        } else {
            asm!(self.ops; mov eax, Rd(d));
            if signed {
                asm!(self.ops; cdq ; idiv r11d);
            } else {
                asm!(self.ops; xor edx, edx ; div r11d);
            }
            if is_div {
                asm!(self.ops; mov r11d, eax);
            } else {
                asm!(self.ops; mov r11d, edx);
            }
            asm!(self.ops; pop rdx ; pop rax ; mov Rd(d), r11d);
        }
        asm!(self.ops; =>done);
    }

    /// `d = *(size *)(b + o)` in native registers.
    fn load_at(&mut self, size: Size, sign_extend: bool, d: u8, b: u8, o: i32) {
        match (size, sign_extend) {
            (Size::B, false) => asm!(self.ops; movzx Rd(d), BYTE [Rq(b) + o]),
            (Size::H, false) => asm!(self.ops; movzx Rd(d), WORD [Rq(b) + o]),
            (Size::W, false) => asm!(self.ops; mov Rd(d), DWORD [Rq(b) + o]),
            (Size::B, true) => asm!(self.ops; movsx Rq(d), BYTE [Rq(b) + o]),
            (Size::H, true) => asm!(self.ops; movsx Rq(d), WORD [Rq(b) + o]),
            (Size::W, true) => asm!(self.ops; movsxd Rq(d), DWORD [Rq(b) + o]),
            (Size::DW, _) => asm!(self.ops; mov Rq(d), QWORD [Rq(b) + o]),
        }
    }

    fn word_here(&self) -> usize {
        self.ops.offset().0 - 8
    }
}

impl Emit for X64 {
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
        while !self.ops.offset().0.is_multiple_of(16) {
            self.ops.push(0xcc);
        }
    }

    fn prologue(&mut self, entry: Option<EntryAbi>) {
        match entry {
            Some(abi) => {
                // Return address + 6 pushes = 56 bytes: 520 more keep rsp 16-byte aligned.
                asm!(self.ops
                    ; push rbp ; push rbx ; push r12 ; push r13 ; push r14 ; push r15
                    ; sub rsp, FRAME + 8
                    ; lea rbp, [rsp + FRAME]
                    ; mov r12, rsi
                );
                if abi == EntryAbi::WithLength {
                    asm!(self.ops; mov rsi, rdx);
                } else {
                    asm!(self.ops; xor esi, esi);
                }
                asm!(self.ops; xor edx, edx ; xor ecx, ecx ; xor r8d, r8d);
            }
            None => {
                // Return address + 5 pushes = 48 bytes.
                asm!(self.ops
                    ; push rbp ; push rbx ; push r13 ; push r14 ; push r15
                    ; sub rsp, FRAME
                    ; lea rbp, [rsp + FRAME]
                );
            }
        }
        asm!(self.ops
            ; xor eax, eax ; xor ebx, ebx ; xor r13d, r13d ; xor r14d, r14d ; xor r15d, r15d
        );
    }

    fn epilogue(&mut self, entry: bool) {
        if entry {
            asm!(self.ops
                ; add rsp, FRAME + 8
                ; pop r15 ; pop r14 ; pop r13 ; pop r12 ; pop rbx ; pop rbp
                ; ret
            );
        } else {
            asm!(self.ops
                ; add rsp, FRAME
                ; pop r15 ; pop r14 ; pop r13 ; pop rbx ; pop rbp
                ; ret
            );
        }
    }

    fn return_zero(&mut self, entry: bool) {
        asm!(self.ops; xor eax, eax);
        self.epilogue(entry);
    }

    fn set_status(&mut self, status: RunStatus, zero_budget: bool) {
        if zero_budget {
            asm!(self.ops; mov QWORD [r12], 0);
        }
        asm!(self.ops; mov DWORD [r12 + 8], status as u32 as i32);
    }

    fn charge(&mut self, amount: u64, exhausted: DynamicLabel) {
        if amount <= i32::MAX as u64 {
            asm!(self.ops; sub QWORD [r12], amount as i32);
        } else {
            asm!(self.ops; mov r11, QWORD amount as i64 ; sub QWORD [r12], r11);
        }
        asm!(self.ops; jb =>exhausted);
    }

    fn alu(&mut self, width: Width, op: AluOp, dst: Reg, src: Operand) {
        let d = r(dst);
        let w64 = width == Width::W64;
        match op {
            AluOp::Lsh | AluOp::Rsh | AluOp::Arsh => return self.shift(width, op, d, src),
            AluOp::Div | AluOp::Mod | AluOp::SDiv | AluOp::SMod => {
                return self.division(width, op, d, src)
            }
            AluOp::Neg => {
                if w64 {
                    asm!(self.ops; neg Rq(d));
                } else {
                    asm!(self.ops; neg Rd(d));
                }
                return;
            }
            AluOp::MovSx(bits) => {
                let s = match src {
                    Operand::Reg(s) => r(s),
                    Operand::Imm(k) => {
                        self.imm_to_r11(k as i64 as u64);
                        11
                    }
                };
                match (bits, w64) {
                    (8, true) => asm!(self.ops; movsx Rq(d), Rb(s)),
                    (16, true) => asm!(self.ops; movsx Rq(d), Rw(s)),
                    (_, true) => asm!(self.ops; movsxd Rq(d), Rd(s)),
                    (8, false) => asm!(self.ops; movsx Rd(d), Rb(s)),
                    (16, false) => asm!(self.ops; movsx Rd(d), Rw(s)),
                    (_, false) => asm!(self.ops; mov Rd(d), Rd(s)),
                }
                return;
            }
            _ => {}
        }
        let src = match src {
            Operand::Imm(k) if !self.plain(k as i64 as u64) => {
                // Blinded: unmasked into its register, then the register form (a 32-bit
                // operation reads its low half).
                self.blinded(BLIND, k as i64 as u64);
                None
            }
            other => Some(other),
        };
        if let Some(Operand::Imm(k)) = src {
            // Immediate forms: a 32-bit immediate, sign-extended in 64-bit operations
            // exactly as eBPF extends it.
            match (op, w64) {
                (AluOp::Mov, true) => asm!(self.ops; mov Rq(d), k),
                (AluOp::Mov, false) => asm!(self.ops; mov Rd(d), k),
                (AluOp::Add, true) => asm!(self.ops; add Rq(d), k),
                (AluOp::Add, false) => asm!(self.ops; add Rd(d), k),
                (AluOp::Sub, true) => asm!(self.ops; sub Rq(d), k),
                (AluOp::Sub, false) => asm!(self.ops; sub Rd(d), k),
                (AluOp::Mul, true) => asm!(self.ops; imul Rq(d), Rq(d), k),
                (AluOp::Mul, false) => asm!(self.ops; imul Rd(d), Rd(d), k),
                (AluOp::Or, true) => asm!(self.ops; or Rq(d), k),
                (AluOp::Or, false) => asm!(self.ops; or Rd(d), k),
                (AluOp::And, true) => asm!(self.ops; and Rq(d), k),
                (AluOp::And, false) => asm!(self.ops; and Rd(d), k),
                (AluOp::Xor, true) => asm!(self.ops; xor Rq(d), k),
                (AluOp::Xor, false) => asm!(self.ops; xor Rd(d), k),
                _ => unreachable!("handled above"),
            }
            return;
        }
        let s = match src {
            Some(src) => self.operand(width, src),
            None => BLIND,
        };
        match (op, w64) {
            (AluOp::Mov, true) => asm!(self.ops; mov Rq(d), Rq(s)),
            (AluOp::Mov, false) => asm!(self.ops; mov Rd(d), Rd(s)),
            (AluOp::Add, true) => asm!(self.ops; add Rq(d), Rq(s)),
            (AluOp::Add, false) => asm!(self.ops; add Rd(d), Rd(s)),
            (AluOp::Sub, true) => asm!(self.ops; sub Rq(d), Rq(s)),
            (AluOp::Sub, false) => asm!(self.ops; sub Rd(d), Rd(s)),
            (AluOp::Mul, true) => asm!(self.ops; imul Rq(d), Rq(s)),
            (AluOp::Mul, false) => asm!(self.ops; imul Rd(d), Rd(s)),
            (AluOp::Or, true) => asm!(self.ops; or Rq(d), Rq(s)),
            (AluOp::Or, false) => asm!(self.ops; or Rd(d), Rd(s)),
            (AluOp::And, true) => asm!(self.ops; and Rq(d), Rq(s)),
            (AluOp::And, false) => asm!(self.ops; and Rd(d), Rd(s)),
            (AluOp::Xor, true) => asm!(self.ops; xor Rq(d), Rq(s)),
            (AluOp::Xor, false) => asm!(self.ops; xor Rd(d), Rd(s)),
            _ => unreachable!("handled above"),
        }
    }

    fn endian(&mut self, order: ByteOrder, bits: u8, dst: Reg) {
        let d = r(dst);
        match (order, bits) {
            (ByteOrder::ToLe, 16) => asm!(self.ops; movzx Rd(d), Rw(d)),
            (ByteOrder::ToLe, 32) => asm!(self.ops; mov Rd(d), Rd(d)),
            (ByteOrder::ToLe, _) => {}
            (_, 16) => asm!(self.ops; ror Rw(d), 8 ; movzx Rd(d), Rw(d)),
            (_, 32) => asm!(self.ops; bswap Rd(d)),
            (_, _) => asm!(self.ops; bswap Rq(d)),
        }
    }

    fn load(&mut self, size: Size, sign_extend: bool, dst: Reg, base: Reg, off: i16) {
        self.load_at(size, sign_extend, r(dst), r(base), off as i32);
    }

    fn load_addr(&mut self, size: Size, sign_extend: bool, dst: Reg, addr: Addr) {
        let Some(index) = addr.index else {
            return self.load_at(size, sign_extend, r(dst), r(addr.base), addr.disp);
        };
        let (d, b, i, o) = (r(dst), r(addr.base), r(index), addr.disp);
        match (size, sign_extend) {
            (Size::B, false) => asm!(self.ops; movzx Rd(d), BYTE [Rq(b) + Rq(i) + o]),
            (Size::H, false) => asm!(self.ops; movzx Rd(d), WORD [Rq(b) + Rq(i) + o]),
            (Size::W, false) => asm!(self.ops; mov Rd(d), DWORD [Rq(b) + Rq(i) + o]),
            (Size::B, true) => asm!(self.ops; movsx Rq(d), BYTE [Rq(b) + Rq(i) + o]),
            (Size::H, true) => asm!(self.ops; movsx Rq(d), WORD [Rq(b) + Rq(i) + o]),
            (Size::W, true) => asm!(self.ops; movsxd Rq(d), DWORD [Rq(b) + Rq(i) + o]),
            (Size::DW, _) => asm!(self.ops; mov Rq(d), QWORD [Rq(b) + Rq(i) + o]),
        }
    }

    fn lea(&mut self, dst: Reg, addr: Addr) {
        let (d, b, o) = (r(dst), r(addr.base), addr.disp);
        match addr.index {
            Some(i) => asm!(self.ops; lea Rq(d), [Rq(b) + Rq(r(i)) + o]),
            None => asm!(self.ops; lea Rq(d), [Rq(b) + o]),
        }
    }

    fn alu3(&mut self, _: Width, _: AluOp, _: Reg, _: Reg, _: Operand) -> bool {
        // Two-operand forms only (64-bit additions are folded into `lea` by the driver).
        false
    }

    fn store(&mut self, size: Size, base: Reg, off: i16, src: Operand) {
        let (b, o) = (r(base), off as i32);
        match src {
            Operand::Reg(s) => {
                let s = r(s);
                match size {
                    Size::B => asm!(self.ops; mov BYTE [Rq(b) + o], Rb(s)),
                    Size::H => asm!(self.ops; mov WORD [Rq(b) + o], Rw(s)),
                    Size::W => asm!(self.ops; mov DWORD [Rq(b) + o], Rd(s)),
                    Size::DW => asm!(self.ops; mov QWORD [Rq(b) + o], Rq(s)),
                }
            }
            Operand::Imm(k)
                if matches!(size, Size::W | Size::DW) && !self.plain(k as i64 as u64) =>
            {
                self.blinded(BLIND, k as i64 as u64);
                if size == Size::W {
                    asm!(self.ops; mov DWORD [Rq(b) + o], Rd(BLIND));
                } else {
                    asm!(self.ops; mov QWORD [Rq(b) + o], Rq(BLIND));
                }
            }
            Operand::Imm(k) => match size {
                Size::B => asm!(self.ops; mov BYTE [Rq(b) + o], k as i8),
                Size::H => asm!(self.ops; mov WORD [Rq(b) + o], k as i16),
                Size::W => asm!(self.ops; mov DWORD [Rq(b) + o], k),
                Size::DW => asm!(self.ops; mov QWORD [Rq(b) + o], k),
            },
        }
    }

    fn atomic(&mut self, size: Size, op: AtomicOp, fetch: bool, base: Reg, off: i16, src: Reg) {
        let (b, o, s) = (r(base), off as i32, r(src));
        let w64 = size == Size::DW;
        match (op, fetch) {
            (AtomicOp::CmpXchg, _) => {
                // rax is r0: exactly the instruction's comparand and result.
                if w64 {
                    asm!(self.ops; lock cmpxchg QWORD [Rq(b) + o], Rq(s));
                } else {
                    // A successful 32-bit cmpxchg leaves rax's upper half: clear it.
                    asm!(self.ops; lock cmpxchg DWORD [Rq(b) + o], Rd(s) ; mov eax, eax);
                }
            }
            (AtomicOp::Xchg, _) => {
                if w64 {
                    asm!(self.ops; xchg QWORD [Rq(b) + o], Rq(s));
                } else {
                    asm!(self.ops; xchg DWORD [Rq(b) + o], Rd(s));
                }
            }
            (AtomicOp::Add, true) => {
                if w64 {
                    asm!(self.ops; lock xadd QWORD [Rq(b) + o], Rq(s));
                } else {
                    asm!(self.ops; lock xadd DWORD [Rq(b) + o], Rd(s));
                }
            }
            (_, false) => match (op, w64) {
                (AtomicOp::Add, true) => asm!(self.ops; lock add QWORD [Rq(b) + o], Rq(s)),
                (AtomicOp::Add, false) => asm!(self.ops; lock add DWORD [Rq(b) + o], Rd(s)),
                (AtomicOp::Or, true) => asm!(self.ops; lock or QWORD [Rq(b) + o], Rq(s)),
                (AtomicOp::Or, false) => asm!(self.ops; lock or DWORD [Rq(b) + o], Rd(s)),
                (AtomicOp::And, true) => asm!(self.ops; lock and QWORD [Rq(b) + o], Rq(s)),
                (AtomicOp::And, false) => asm!(self.ops; lock and DWORD [Rq(b) + o], Rd(s)),
                (AtomicOp::Xor, true) => asm!(self.ops; lock xor QWORD [Rq(b) + o], Rq(s)),
                (AtomicOp::Xor, false) => asm!(self.ops; lock xor DWORD [Rq(b) + o], Rd(s)),
                _ => unreachable!("xchg and cmpxchg handled above"),
            },
            (_, true) => {
                // Fetching or/and/xor: a cmpxchg loop, which needs rax (r0): saved on the
                // stack, where the operand is read from when it is r0 itself.
                let again = self.ops.new_dynamic_label();
                asm!(self.ops; lea r10, [Rq(b) + o] ; push rax);
                if w64 {
                    asm!(self.ops; mov rax, QWORD [r10] ; =>again ; mov r11, rax);
                    match (op, s == RAX) {
                        (AtomicOp::Or, false) => asm!(self.ops; or r11, Rq(s)),
                        (AtomicOp::And, false) => asm!(self.ops; and r11, Rq(s)),
                        (_, false) => asm!(self.ops; xor r11, Rq(s)),
                        (AtomicOp::Or, true) => asm!(self.ops; or r11, QWORD [rsp]),
                        (AtomicOp::And, true) => asm!(self.ops; and r11, QWORD [rsp]),
                        (_, true) => asm!(self.ops; xor r11, QWORD [rsp]),
                    }
                    asm!(self.ops
                        ; lock cmpxchg QWORD [r10], r11 ; jne =>again
                        ; mov r11, rax ; pop rax ; mov Rq(s), r11
                    );
                } else {
                    asm!(self.ops; mov eax, DWORD [r10] ; =>again ; mov r11d, eax);
                    match (op, s == RAX) {
                        (AtomicOp::Or, false) => asm!(self.ops; or r11d, Rd(s)),
                        (AtomicOp::And, false) => asm!(self.ops; and r11d, Rd(s)),
                        (_, false) => asm!(self.ops; xor r11d, Rd(s)),
                        (AtomicOp::Or, true) => asm!(self.ops; or r11d, DWORD [rsp]),
                        (AtomicOp::And, true) => asm!(self.ops; and r11d, DWORD [rsp]),
                        (_, true) => asm!(self.ops; xor r11d, DWORD [rsp]),
                    }
                    asm!(self.ops
                        ; lock cmpxchg DWORD [r10], r11d ; jne =>again
                        ; mov r11d, eax ; pop rax ; mov Rd(s), r11d
                    );
                }
            }
        }
    }

    fn load_imm64(&mut self, dst: Reg, value: u64) {
        let d = r(dst);
        if !self.plain(value) {
            self.blinded(d, value);
        } else if value <= u32::MAX as u64 {
            asm!(self.ops; mov Rd(d), value as u32 as i32);
        } else if value as i64 >= i32::MIN as i64 && value as i64 <= i32::MAX as i64 {
            asm!(self.ops; mov Rq(d), value as i64 as i32);
        } else {
            asm!(self.ops; mov Rq(d), QWORD value as i64);
        }
    }

    fn load_word(&mut self, dst: Reg) -> usize {
        asm!(self.ops; mov Rq(r(dst)), QWORD 0);
        self.word_here()
    }

    fn jump(&mut self, label: DynamicLabel) {
        asm!(self.ops; jmp =>label);
    }

    fn branch(&mut self, width: Width, cond: JmpCond, dst: Reg, src: Operand, l: DynamicLabel) {
        let d = r(dst);
        let w64 = width == Width::W64;
        let src = match src {
            Operand::Imm(k) if !self.plain(k as i64 as u64) => {
                self.blinded(BLIND, k as i64 as u64);
                None
            }
            other => Some(other),
        };
        match (src, cond, w64) {
            (None, JmpCond::Set, true) => asm!(self.ops; test Rq(d), Rq(BLIND)),
            (None, JmpCond::Set, false) => asm!(self.ops; test Rd(d), Rd(BLIND)),
            (None, _, true) => asm!(self.ops; cmp Rq(d), Rq(BLIND)),
            (None, _, false) => asm!(self.ops; cmp Rd(d), Rd(BLIND)),
            (Some(Operand::Imm(k)), JmpCond::Set, true) => asm!(self.ops; test Rq(d), k),
            (Some(Operand::Imm(k)), JmpCond::Set, false) => asm!(self.ops; test Rd(d), k),
            (Some(Operand::Imm(k)), _, true) => asm!(self.ops; cmp Rq(d), k),
            (Some(Operand::Imm(k)), _, false) => asm!(self.ops; cmp Rd(d), k),
            (Some(Operand::Reg(s)), JmpCond::Set, true) => asm!(self.ops; test Rq(d), Rq(r(s))),
            (Some(Operand::Reg(s)), JmpCond::Set, false) => asm!(self.ops; test Rd(d), Rd(r(s))),
            (Some(Operand::Reg(s)), _, true) => asm!(self.ops; cmp Rq(d), Rq(r(s))),
            (Some(Operand::Reg(s)), _, false) => asm!(self.ops; cmp Rd(d), Rd(r(s))),
        }
        match cond {
            JmpCond::Eq => asm!(self.ops; je =>l),
            JmpCond::Ne | JmpCond::Set => asm!(self.ops; jne =>l),
            JmpCond::Gt => asm!(self.ops; ja =>l),
            JmpCond::Ge => asm!(self.ops; jae =>l),
            JmpCond::Lt => asm!(self.ops; jb =>l),
            JmpCond::Le => asm!(self.ops; jbe =>l),
            JmpCond::Sgt => asm!(self.ops; jg =>l),
            JmpCond::Sge => asm!(self.ops; jge =>l),
            JmpCond::Slt => asm!(self.ops; jl =>l),
            JmpCond::Sle => asm!(self.ops; jle =>l),
        }
    }

    fn call_direct(&mut self) -> usize {
        asm!(self.ops; mov r11, QWORD 0);
        let at = self.word_here();
        asm!(self.ops; call r11);
        at
    }

    fn call_table(&mut self, id: u32) -> usize {
        asm!(self.ops; mov r11, QWORD 0);
        let at = self.word_here();
        let off = id as u64 * 8;
        if off <= i32::MAX as u64 {
            asm!(self.ops; call QWORD [r11 + off as i32]);
        } else {
            asm!(self.ops; mov r10, QWORD off as i64 ; call QWORD [r11 + r10]);
        }
        at
    }

    fn call_reg(&mut self, reg: Reg, table_len: u32, bad: DynamicLabel) -> usize {
        asm!(self.ops
            ; mov r10, Rq(r(reg))
            ; mov r11d, table_len as i32
            ; cmp r10, r11
            ; jae =>bad
            ; mov r11, QWORD 0
        );
        let at = self.word_here();
        asm!(self.ops; call QWORD [r11 + r10 * 8]);
        at
    }

    fn call_local(&mut self, function: DynamicLabel) {
        asm!(self.ops; call =>function);
    }

    fn branch_if_stopped(&mut self, stopped: DynamicLabel) {
        asm!(self.ops; cmp DWORD [r12 + 8], 0 ; jne =>stopped);
    }

    fn inline_lookup(&mut self, array: InlineArray, key: Key, checked: bool) -> usize {
        let done = self.ops.new_dynamic_label();
        match key {
            Key::Kept => {}
            Key::Frame(o) => asm!(self.ops; mov r11d, DWORD [rbp + o]),
            Key::AtR2 => asm!(self.ops; mov r11d, DWORD [rsi]),
        }
        if checked {
            // The key is unsigned: a 32-bit compare against the count, as an unsigned
            // 32-bit immediate.
            asm!(self.ops
                ; xor eax, eax
                ; cmp r11d, array.max_entries as i32
                ; jae =>done
            );
        }
        let stride = array.value_stride();
        let scaled = match stride {
            8 => true,
            s if s.is_power_of_two() => {
                asm!(self.ops; shl r11, s.trailing_zeros() as i8 - 3);
                true
            }
            s if s <= i32::MAX as u64 => {
                asm!(self.ops; imul r11, r11, s as i32);
                false
            }
            s => {
                asm!(self.ops; mov r10, QWORD s as i64 ; imul r11, r10);
                false
            }
        };
        asm!(self.ops; mov rax, QWORD 0);
        let at = self.word_here();
        if scaled {
            asm!(self.ops; lea rax, [rax + r11 * 8]);
        } else {
            asm!(self.ops; add rax, r11);
        }
        asm!(self.ops; =>done);
        at
    }

    fn keep_key(&mut self, src: Reg) {
        asm!(self.ops; mov r11d, Rd(r(src)));
    }

    fn finish(self) -> Result<Vec<u8>, String> {
        self.ops.finalize().map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn argument_registers_are_the_system_v_ones() {
        // r1..r5 in rdi, rsi, rdx, rcx, r8: helper calls need no moves.
        assert_eq!(&super::MAP[1..6], &[7, 6, 2, 1, 8]);
    }
}
