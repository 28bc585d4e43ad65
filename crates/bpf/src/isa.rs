//! The eBPF instruction set (RFC 9669): raw encoding, a validated decoded form and the encoder.
//!
//! Programs are kept *slot-indexed*: one decoded [`Insn`] per 8-byte slot, so that jump
//! offsets, error indices and relocation offsets all count the same units as the wire format.
//! The second slot of a wide `lddw` decodes to [`Insn::LoadImm64Hi`]; executing or jumping to
//! it is an error that [`decode`] rejects up front.
//!
//! The decoder is strict: every field an opcode does not use must be zero, every register must
//! exist, and `r10` (the read-only frame pointer) is never a destination. That strictness is
//! what lets every later stage (verifier, interpreter, JIT) match on the decoded form without
//! re-checking the encoding.

use std::fmt;

/// Size of one instruction slot in bytes.
pub const INSN_SIZE: usize = 8;
/// Number of general registers (`r0`..`r10`).
pub const NUM_REGS: usize = 11;
/// The read-only frame pointer register.
pub const FRAME_POINTER: Reg = Reg(10);
/// Stack bytes available to each call frame.
pub const STACK_SIZE: usize = 512;

/// Raw opcode constants of RFC 9669, for code that builds or inspects raw instructions.
pub mod op {
    /// `BPF_LD` class: only `lddw` (64-bit immediate loads) is accepted.
    pub const CLASS_LD: u8 = 0x00;
    /// `BPF_LDX` class: loads from memory into a register.
    pub const CLASS_LDX: u8 = 0x01;
    /// `BPF_ST` class: stores of an immediate.
    pub const CLASS_ST: u8 = 0x02;
    /// `BPF_STX` class: stores of a register, and atomics.
    pub const CLASS_STX: u8 = 0x03;
    /// `BPF_ALU` class: 32-bit arithmetic, results zero-extended.
    pub const CLASS_ALU: u8 = 0x04;
    /// `BPF_JMP` class: 64-bit jumps, calls and exit.
    pub const CLASS_JMP: u8 = 0x05;
    /// `BPF_JMP32` class: jumps comparing the low 32 bits.
    pub const CLASS_JMP32: u8 = 0x06;
    /// `BPF_ALU64` class: 64-bit arithmetic.
    pub const CLASS_ALU64: u8 = 0x07;

    /// `BPF_K`: the second operand is the immediate.
    pub const SRC_K: u8 = 0x00;
    /// `BPF_X`: the second operand is the `src` register.
    pub const SRC_X: u8 = 0x08;

    /// `BPF_ADD`: `dst += src`.
    pub const ALU_ADD: u8 = 0x00;
    /// `BPF_SUB`: `dst -= src`.
    pub const ALU_SUB: u8 = 0x10;
    /// `BPF_MUL`: `dst *= src`.
    pub const ALU_MUL: u8 = 0x20;
    /// `BPF_DIV`: `dst /= src` (signed with `off == 1`).
    pub const ALU_DIV: u8 = 0x30;
    /// `BPF_OR`: `dst |= src`.
    pub const ALU_OR: u8 = 0x40;
    /// `BPF_AND`: `dst &= src`.
    pub const ALU_AND: u8 = 0x50;
    /// `BPF_LSH`: `dst <<= src`.
    pub const ALU_LSH: u8 = 0x60;
    /// `BPF_RSH`: `dst >>= src`, logical.
    pub const ALU_RSH: u8 = 0x70;
    /// `BPF_NEG`: `dst = -dst`.
    pub const ALU_NEG: u8 = 0x80;
    /// `BPF_MOD`: `dst %= src` (signed with `off == 1`).
    pub const ALU_MOD: u8 = 0x90;
    /// `BPF_XOR`: `dst ^= src`.
    pub const ALU_XOR: u8 = 0xa0;
    /// `BPF_MOV`: `dst = src` (sign-extending with `off` 8, 16 or 32).
    pub const ALU_MOV: u8 = 0xb0;
    /// `BPF_ARSH`: `dst >>= src`, arithmetic.
    pub const ALU_ARSH: u8 = 0xc0;
    /// `BPF_END`: byte-order conversion of the low `imm` bits.
    pub const ALU_END: u8 = 0xd0;

    /// `BPF_JA`: unconditional jump.
    pub const JMP_JA: u8 = 0x00;
    /// `BPF_JEQ`: jump if `dst == src`.
    pub const JMP_JEQ: u8 = 0x10;
    /// `BPF_JGT`: jump if `dst > src`, unsigned.
    pub const JMP_JGT: u8 = 0x20;
    /// `BPF_JGE`: jump if `dst >= src`, unsigned.
    pub const JMP_JGE: u8 = 0x30;
    /// `BPF_JSET`: jump if `dst & src != 0`.
    pub const JMP_JSET: u8 = 0x40;
    /// `BPF_JNE`: jump if `dst != src`.
    pub const JMP_JNE: u8 = 0x50;
    /// `BPF_JSGT`: jump if `dst > src`, signed.
    pub const JMP_JSGT: u8 = 0x60;
    /// `BPF_JSGE`: jump if `dst >= src`, signed.
    pub const JMP_JSGE: u8 = 0x70;
    /// `BPF_CALL`: call a helper, a local function or a kernel function (by `src`).
    pub const JMP_CALL: u8 = 0x80;
    /// `BPF_EXIT`: return `r0` from the current function.
    pub const JMP_EXIT: u8 = 0x90;
    /// `BPF_JLT`: jump if `dst < src`, unsigned.
    pub const JMP_JLT: u8 = 0xa0;
    /// `BPF_JLE`: jump if `dst <= src`, unsigned.
    pub const JMP_JLE: u8 = 0xb0;
    /// `BPF_JSLT`: jump if `dst < src`, signed.
    pub const JMP_JSLT: u8 = 0xc0;
    /// `BPF_JSLE`: jump if `dst <= src`, signed.
    pub const JMP_JSLE: u8 = 0xd0;
    /// `BPF_JCOND`: a jump on a condition the machine keeps (`src` names it; only
    /// [`MAY_GOTO`] exists).
    pub const JMP_JCOND: u8 = 0xe0;
    /// `src` of `BPF_JCOND` for `may_goto`.
    pub const MAY_GOTO: u8 = 0;

    /// `BPF_W`: 4-byte access.
    pub const SIZE_W: u8 = 0x00;
    /// `BPF_H`: 2-byte access.
    pub const SIZE_H: u8 = 0x08;
    /// `BPF_B`: 1-byte access.
    pub const SIZE_B: u8 = 0x10;
    /// `BPF_DW`: 8-byte access.
    pub const SIZE_DW: u8 = 0x18;

    /// `BPF_IMM`: 64-bit immediate load (`lddw`).
    pub const MODE_IMM: u8 = 0x00;
    /// `BPF_ABS`: legacy packet load at a constant offset (refused).
    pub const MODE_ABS: u8 = 0x20;
    /// `BPF_IND`: legacy packet load at a register offset (refused).
    pub const MODE_IND: u8 = 0x40;
    /// `BPF_MEM`: plain load or store.
    pub const MODE_MEM: u8 = 0x60;
    /// `BPF_MEMSX`: sign-extending load.
    pub const MODE_MEMSX: u8 = 0x80;
    /// `BPF_ATOMIC`: atomic read-modify-write; `imm` selects the operation.
    pub const MODE_ATOMIC: u8 = 0xc0;

    /// Atomic `*ptr += src`.
    pub const ATOMIC_ADD: i32 = 0x00;
    /// Atomic `*ptr |= src`.
    pub const ATOMIC_OR: i32 = 0x40;
    /// Atomic `*ptr &= src`.
    pub const ATOMIC_AND: i32 = 0x50;
    /// Atomic `*ptr ^= src`.
    pub const ATOMIC_XOR: i32 = 0xa0;
    /// Or-ed into an atomic operation: `src` receives the old value.
    pub const ATOMIC_FETCH: i32 = 0x01;
    /// Atomic exchange of `*ptr` and `src` (always fetching).
    pub const ATOMIC_XCHG: i32 = 0xe0 | ATOMIC_FETCH;
    /// Atomic compare-and-exchange: if `*ptr == r0`, store `src`; `r0` receives the old value.
    pub const ATOMIC_CMPXCHG: i32 = 0xf0 | ATOMIC_FETCH;

    /// `lddw` source (the first slot's `src`): `imm` is a map file descriptor.
    pub const PSEUDO_MAP_FD: u8 = 1;
    /// `lddw` source: a map fd and, in the second slot, an offset into its value.
    pub const PSEUDO_MAP_VALUE: u8 = 2;
    /// `lddw` source: the BTF id of a kernel variable.
    pub const PSEUDO_BTF_ID: u8 = 3;
    /// `lddw` source: a subprogram by its slot offset relative to the next instruction.
    pub const PSEUDO_FUNC: u8 = 4;
    /// `lddw` source: an index into the program's map table.
    pub const PSEUDO_MAP_IDX: u8 = 5;
    /// `lddw` source: a map table index and, in the second slot, a value offset.
    pub const PSEUDO_MAP_IDX_VALUE: u8 = 6;

    /// `call` source: a BPF-to-BPF call, `imm` being the slot offset relative to the next
    /// instruction.
    pub const PSEUDO_CALL: u8 = 1;
    /// `call` source: a kernel function by BTF id.
    pub const PSEUDO_KFUNC_CALL: u8 = 2;
}

/// One 8-byte instruction slot exactly as encoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RawInsn {
    /// Opcode: class in bits 0..3, then source or size and mode, then operation.
    pub code: u8,
    /// Destination register number (low nibble of byte 1).
    pub dst: u8,
    /// Source register number (high nibble of byte 1).
    pub src: u8,
    /// Signed offset: memory displacement in bytes or jump distance in slots.
    pub off: i16,
    /// Signed immediate.
    pub imm: i32,
}

impl RawInsn {
    /// A slot from its fields, as written.
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Self {
        Self {
            code,
            dst,
            src,
            off,
            imm,
        }
    }

    /// Decodes one little-endian slot.
    pub fn from_bytes(b: [u8; INSN_SIZE]) -> Self {
        Self {
            code: b[0],
            dst: b[1] & 0x0f,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    /// Encodes one little-endian slot.
    pub fn to_bytes(self) -> [u8; INSN_SIZE] {
        let off = self.off.to_le_bytes();
        let imm = self.imm.to_le_bytes();
        [
            self.code,
            (self.src << 4) | (self.dst & 0x0f),
            off[0],
            off[1],
            imm[0],
            imm[1],
            imm[2],
            imm[3],
        ]
    }

    /// The instruction class (`op::CLASS_*`).
    pub fn class(self) -> u8 {
        self.code & 0x07
    }
}

/// Splits a byte buffer into raw slots. The length must be a multiple of 8.
pub fn raw_from_bytes(bytes: &[u8]) -> Result<Vec<RawInsn>, DecodeError> {
    if !bytes.len().is_multiple_of(INSN_SIZE) {
        return Err(DecodeError {
            index: bytes.len() / INSN_SIZE,
            code: 0,
            kind: DecodeErrorKind::TrailingBytes(bytes.len() % INSN_SIZE),
        });
    }
    Ok(bytes
        .chunks_exact(INSN_SIZE)
        .map(|c| RawInsn::from_bytes(c.try_into().expect("chunk of 8")))
        .collect())
}

/// Concatenates raw slots into bytes.
pub fn raw_to_bytes(insns: &[RawInsn]) -> Vec<u8> {
    insns.iter().flat_map(|i| i.to_bytes()).collect()
}

/// A register number, always `0..=10`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg(pub u8);

impl Reg {
    /// The register number as an index (`0..=10`).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

/// Operation width of ALU and conditional-jump instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Width {
    /// The low 32 bits, the result zero-extended (`ALU`, `JMP32`).
    W32,
    /// All 64 bits (`ALU64`, `JMP`).
    W64,
}

/// Second operand of ALU, jump and store instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// A register.
    Reg(Reg),
    /// The instruction's immediate, sign-extended to the operation's width.
    Imm(i32),
}

/// An arithmetic or logic operation of an `ALU`/`ALU64` instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AluOp {
    /// `dst += src`.
    Add,
    /// `dst -= src`.
    Sub,
    /// `dst *= src`.
    Mul,
    /// Unsigned division; division by zero yields 0.
    Div,
    /// Signed division (`off == 1`); division by zero yields 0.
    SDiv,
    /// `dst |= src`.
    Or,
    /// `dst &= src`.
    And,
    /// `dst <<= src`, the shift masked to the width.
    Lsh,
    /// `dst >>= src`, logical, the shift masked to the width.
    Rsh,
    /// Negation; the operand is always `Imm(0)`.
    Neg,
    /// Unsigned modulo; modulo by zero leaves the dividend.
    Mod,
    /// Signed modulo (`off == 1`); modulo by zero leaves the dividend.
    SMod,
    /// `dst ^= src`.
    Xor,
    /// `dst = src`.
    Mov,
    /// Sign-extending move from the low `bits` (8, 16 or 32) of the source register.
    MovSx(u8),
    /// `dst >>= src`, arithmetic, the shift masked to the width.
    Arsh,
}

/// Byte-order operation of `END` instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    /// Convert to little-endian (`le16/32/64`): a truncation/zero-extension on little-endian hosts.
    ToLe,
    /// Convert to big-endian (`be16/32/64`).
    ToBe,
    /// Unconditional byte swap (`bswap16/32/64`, ALU64 class).
    Swap,
}

/// The comparison of a conditional jump.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JmpCond {
    /// `dst == src`.
    Eq,
    /// `dst > src`, unsigned.
    Gt,
    /// `dst >= src`, unsigned.
    Ge,
    /// `dst & src != 0`.
    Set,
    /// `dst != src`.
    Ne,
    /// `dst > src`, signed.
    Sgt,
    /// `dst >= src`, signed.
    Sge,
    /// `dst < src`, unsigned.
    Lt,
    /// `dst <= src`, unsigned.
    Le,
    /// `dst < src`, signed.
    Slt,
    /// `dst <= src`, signed.
    Sle,
}

/// Memory access size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Size {
    /// 1 byte.
    B,
    /// 2 bytes.
    H,
    /// 4 bytes.
    W,
    /// 8 bytes.
    DW,
}

impl Size {
    /// The access size in bytes.
    pub fn bytes(self) -> usize {
        match self {
            Size::B => 1,
            Size::H => 2,
            Size::W => 4,
            Size::DW => 8,
        }
    }

    fn from_code(code: u8) -> Self {
        match code & 0x18 {
            op::SIZE_W => Size::W,
            op::SIZE_H => Size::H,
            op::SIZE_B => Size::B,
            _ => Size::DW,
        }
    }

    fn code(self) -> u8 {
        match self {
            Size::W => op::SIZE_W,
            Size::H => op::SIZE_H,
            Size::B => op::SIZE_B,
            Size::DW => op::SIZE_DW,
        }
    }
}

/// The operation of an atomic read-modify-write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// `*ptr += src`.
    Add,
    /// `*ptr |= src`.
    Or,
    /// `*ptr &= src`.
    And,
    /// `*ptr ^= src`.
    Xor,
    /// Always fetches: the old value lands in `src`.
    Xchg,
    /// Compares with `r0`; the old value always lands in `r0`.
    CmpXchg,
}

/// Meaning of a 64-bit immediate load (`lddw`), from its `src` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImmKind {
    /// A plain 64-bit constant.
    Imm,
    /// `imm_lo` is a map file descriptor; the result is a map handle.
    MapFd,
    /// `imm_lo` is a map fd, `imm_hi` an offset into its value; the result is a pointer.
    MapValue,
    /// `imm_lo` is a BTF id of a kernel variable.
    BtfId,
    /// `imm_lo` is a relative instruction offset of a subprogram; the result is a code address.
    Func,
    /// Like `MapFd`, with an index into the program's map table instead of an fd.
    MapIdx,
    /// Like `MapValue`, with an index into the program's map table instead of an fd.
    MapIdxValue,
}

/// Target of a `call` instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallTarget {
    /// A helper by its static id.
    Helper(i32),
    /// A BPF-to-BPF call; the value is the slot offset relative to the next instruction.
    Local(i32),
    /// A kernel function by BTF id.
    Kfunc(i32),
    /// `callx`: the helper id (or address, depending on the runtime) is in a register.
    Reg(Reg),
}

/// One decoded instruction slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Insn {
    /// Arithmetic: `dst = dst op src`.
    Alu {
        /// 64-bit or 32-bit.
        width: Width,
        /// The operation.
        op: AluOp,
        /// Destination and left operand.
        dst: Reg,
        /// Right operand.
        src: Operand,
    },
    /// Byte-order conversion of `dst`'s low `bits` bits.
    Endian {
        /// Little-endian, big-endian or unconditional swap.
        order: ByteOrder,
        /// 16, 32 or 64.
        bits: u8,
        /// The register converted in place.
        dst: Reg,
    },
    /// Unconditional jump; `off` is relative to the next slot (`ja` uses 16 bits, `gotol` 32).
    Ja {
        /// Slots to skip, relative to the next slot.
        off: i32,
    },
    /// Conditional jump: to `off` slots after the next if `dst cond src`.
    Jmp {
        /// 64-bit or 32-bit comparison.
        width: Width,
        /// The comparison.
        cond: JmpCond,
        /// Left operand.
        dst: Reg,
        /// Right operand.
        src: Operand,
        /// Slots to skip, relative to the next slot.
        off: i16,
    },
    /// `may_goto` (`0xe5`): jumps `off` slots after the next when the current frame's hidden
    /// loop counter has run out, else takes one from it and falls through. The counter starts
    /// at `rdx_exec::machine::MAY_GOTO_LOOPS` in every frame, so a loop through it ends.
    MayGoto {
        /// Slots to skip, relative to the next slot.
        off: i16,
    },
    /// A call to a helper, a local function, a kernel function or a register's target.
    Call(CallTarget),
    /// Return `r0` from the current function (ends the program in the entry function).
    Exit,
    /// `ldx` (and `ldxs*` when `sign_extend`): `dst = *(size *)(base + off)`.
    Load {
        /// Bytes loaded.
        size: Size,
        /// Sign-extend the loaded value instead of zero-extending it.
        sign_extend: bool,
        /// The register loaded.
        dst: Reg,
        /// The register holding the address.
        base: Reg,
        /// Byte displacement from `base`.
        off: i16,
    },
    /// `st` (immediate source) or `stx` (register source): `*(size *)(base + off) = src`.
    Store {
        /// Bytes stored.
        size: Size,
        /// The register holding the address.
        base: Reg,
        /// Byte displacement from `base`.
        off: i16,
        /// The value stored (its low `size` bytes).
        src: Operand,
    },
    /// Atomic read-modify-write on `*(size *)(base + off)`; `size` is `W` or `DW`.
    Atomic {
        /// `W` or `DW`.
        size: Size,
        /// The operation.
        op: AtomicOp,
        /// `src` receives the old value (always for `Xchg` and `CmpXchg`).
        fetch: bool,
        /// The register holding the address.
        base: Reg,
        /// Byte displacement from `base`.
        off: i16,
        /// The operand register.
        src: Reg,
    },
    /// First slot of `lddw`; the next slot is always [`Insn::LoadImm64Hi`].
    LoadImm64 {
        /// The register loaded.
        dst: Reg,
        /// What the 64-bit value means (constant, map reference, function, ...).
        kind: ImmKind,
        /// The first slot's immediate: the low 32 bits.
        imm_lo: i32,
        /// The second slot's immediate: the high 32 bits.
        imm_hi: i32,
    },
    /// Second slot of `lddw`: not an instruction of its own.
    LoadImm64Hi,
}

impl Insn {
    /// The 64-bit constant of an `lddw` (`imm_hi << 32 | imm_lo`).
    pub fn imm64(imm_lo: i32, imm_hi: i32) -> u64 {
        ((imm_hi as u32 as u64) << 32) | imm_lo as u32 as u64
    }

    /// Slot index a jump at `pc` lands on, if this is a jump (not a call).
    pub fn jump_target(&self, pc: usize) -> Option<i64> {
        match *self {
            Insn::Ja { off } => Some(pc as i64 + 1 + off as i64),
            Insn::Jmp { off, .. } | Insn::MayGoto { off } => Some(pc as i64 + 1 + off as i64),
            _ => None,
        }
    }

    /// Slot index a local call at `pc` enters, if this is a local call.
    pub fn call_target(&self, pc: usize) -> Option<i64> {
        match *self {
            Insn::Call(CallTarget::Local(rel)) => Some(pc as i64 + 1 + rel as i64),
            _ => None,
        }
    }
}

/// Why a slot failed to decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeErrorKind {
    /// The opcode byte names no instruction this decoder accepts.
    #[error("unknown opcode")]
    UnknownOpcode,
    /// A register number above 10.
    #[error("invalid register r{0}")]
    InvalidRegister(u8),
    /// An instruction writes `r10`.
    #[error("r10 is the read-only frame pointer and cannot be written")]
    WriteToFramePointer,
    /// A field the opcode does not use holds a nonzero value.
    #[error("unused {field} field must be zero, found {value}")]
    NonZeroField {
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: i64,
    },
    /// An offset the opcode does not allow (e.g. a signed division with `off` other than 0 or 1).
    #[error("invalid offset {0} for this opcode")]
    InvalidOffset(i16),
    /// An immediate the opcode does not allow.
    #[error("invalid immediate {0} for this opcode")]
    InvalidImmediate(i32),
    /// A `src` value the opcode does not allow (e.g. an unknown `lddw` source).
    #[error("invalid source {0} for this opcode")]
    InvalidSource(u8),
    /// `LD_ABS`/`LD_IND` (legacy packet access), which rdx does not implement.
    #[error("legacy packet access (LD_ABS/LD_IND) is not supported")]
    LegacyPacketAccess,
    /// An `lddw` in the last slot.
    #[error("lddw is missing its second slot")]
    TruncatedLddw,
    /// The second slot of an `lddw` is not an all-zero slot apart from its immediate.
    #[error("malformed second slot of lddw")]
    BadLddwSecondSlot,
    /// A jump lands outside the program.
    #[error("jump to {target} is outside the program (0..{len})")]
    JumpOutOfRange {
        /// The slot it would land on.
        target: i64,
        /// Slots in the program.
        len: usize,
    },
    /// A jump lands on the second slot of an `lddw`: the slot given.
    #[error("jump to {0} lands in the middle of an lddw")]
    JumpIntoLddw(i64),
    /// A local call enters outside the program.
    #[error("call target {target} is outside the program (0..{len})")]
    CallOutOfRange {
        /// The slot it would enter.
        target: i64,
        /// Slots in the program.
        len: usize,
    },
    /// The byte length is not a multiple of 8: the bytes left over.
    #[error("{0} trailing bytes after the last instruction")]
    TrailingBytes(usize),
    /// The program has no instructions.
    #[error("program is empty")]
    Empty,
}

/// A decoding error, naming the slot index and its opcode byte.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("instruction {index} (opcode {code:#04x}): {kind}")]
pub struct DecodeError {
    /// Slot index of the instruction.
    pub index: usize,
    /// Its opcode byte.
    pub code: u8,
    /// What is wrong with it.
    pub kind: DecodeErrorKind,
}

fn reg(r: u8) -> Result<Reg, DecodeErrorKind> {
    if (r as usize) < NUM_REGS {
        Ok(Reg(r))
    } else {
        Err(DecodeErrorKind::InvalidRegister(r))
    }
}

fn dst_reg(r: u8) -> Result<Reg, DecodeErrorKind> {
    let r = reg(r)?;
    if r == FRAME_POINTER {
        Err(DecodeErrorKind::WriteToFramePointer)
    } else {
        Ok(r)
    }
}

fn zero(field: &'static str, value: i64) -> Result<(), DecodeErrorKind> {
    if value == 0 {
        Ok(())
    } else {
        Err(DecodeErrorKind::NonZeroField { field, value })
    }
}

fn decode_alu(raw: RawInsn) -> Result<Insn, DecodeErrorKind> {
    let width = if raw.class() == op::CLASS_ALU64 {
        Width::W64
    } else {
        Width::W32
    };
    let is_x = raw.code & op::SRC_X != 0;
    let opc = raw.code & 0xf0;
    let dst = dst_reg(raw.dst)?;

    if opc == op::ALU_END {
        zero("offset", raw.off as i64)?;
        zero("source", raw.src as i64)?;
        let order = match (width, is_x) {
            (Width::W32, false) => ByteOrder::ToLe,
            (Width::W32, true) => ByteOrder::ToBe,
            (Width::W64, false) => ByteOrder::Swap,
            (Width::W64, true) => return Err(DecodeErrorKind::UnknownOpcode),
        };
        let bits = match raw.imm {
            16 | 32 | 64 => raw.imm as u8,
            other => return Err(DecodeErrorKind::InvalidImmediate(other)),
        };
        return Ok(Insn::Endian { order, bits, dst });
    }

    let src = if is_x {
        zero("immediate", raw.imm as i64)?;
        Operand::Reg(reg(raw.src)?)
    } else {
        zero("source", raw.src as i64)?;
        Operand::Imm(raw.imm)
    };

    let op = match opc {
        op::ALU_ADD => AluOp::Add,
        op::ALU_SUB => AluOp::Sub,
        op::ALU_MUL => AluOp::Mul,
        op::ALU_DIV | op::ALU_MOD => {
            let signed = match raw.off {
                0 => false,
                1 => true,
                other => return Err(DecodeErrorKind::InvalidOffset(other)),
            };
            return Ok(Insn::Alu {
                width,
                op: match (opc == op::ALU_DIV, signed) {
                    (true, false) => AluOp::Div,
                    (true, true) => AluOp::SDiv,
                    (false, false) => AluOp::Mod,
                    (false, true) => AluOp::SMod,
                },
                dst,
                src,
            });
        }
        op::ALU_OR => AluOp::Or,
        op::ALU_AND => AluOp::And,
        op::ALU_LSH => AluOp::Lsh,
        op::ALU_RSH => AluOp::Rsh,
        op::ALU_NEG => {
            if is_x {
                return Err(DecodeErrorKind::InvalidSource(raw.src));
            }
            zero("offset", raw.off as i64)?;
            zero("immediate", raw.imm as i64)?;
            AluOp::Neg
        }
        op::ALU_XOR => AluOp::Xor,
        op::ALU_MOV => {
            let mov = match (raw.off, is_x, width) {
                (0, _, _) => AluOp::Mov,
                (8 | 16, true, _) => AluOp::MovSx(raw.off as u8),
                (32, true, Width::W64) => AluOp::MovSx(32),
                (other, _, _) => return Err(DecodeErrorKind::InvalidOffset(other)),
            };
            return Ok(Insn::Alu {
                width,
                op: mov,
                dst,
                src,
            });
        }
        op::ALU_ARSH => AluOp::Arsh,
        _ => return Err(DecodeErrorKind::UnknownOpcode),
    };
    zero("offset", raw.off as i64)?;
    Ok(Insn::Alu {
        width,
        op,
        dst,
        src,
    })
}

fn decode_jmp(raw: RawInsn) -> Result<Insn, DecodeErrorKind> {
    let width = if raw.class() == op::CLASS_JMP {
        Width::W64
    } else {
        Width::W32
    };
    let is_x = raw.code & op::SRC_X != 0;
    let opc = raw.code & 0xf0;
    match opc {
        op::JMP_JA => {
            if is_x {
                return Err(DecodeErrorKind::UnknownOpcode);
            }
            zero("destination", raw.dst as i64)?;
            zero("source", raw.src as i64)?;
            match width {
                Width::W64 => {
                    zero("immediate", raw.imm as i64)?;
                    Ok(Insn::Ja {
                        off: raw.off as i32,
                    })
                }
                Width::W32 => {
                    zero("offset", raw.off as i64)?;
                    Ok(Insn::Ja { off: raw.imm })
                }
            }
        }
        op::JMP_CALL => {
            if width == Width::W32 {
                return Err(DecodeErrorKind::UnknownOpcode);
            }
            zero("offset", raw.off as i64)?;
            if is_x {
                zero("source", raw.src as i64)?;
                zero("immediate", raw.imm as i64)?;
                return Ok(Insn::Call(CallTarget::Reg(reg(raw.dst)?)));
            }
            zero("destination", raw.dst as i64)?;
            Ok(Insn::Call(match raw.src {
                0 => CallTarget::Helper(raw.imm),
                op::PSEUDO_CALL => CallTarget::Local(raw.imm),
                op::PSEUDO_KFUNC_CALL => CallTarget::Kfunc(raw.imm),
                other => return Err(DecodeErrorKind::InvalidSource(other)),
            }))
        }
        op::JMP_JCOND => {
            if is_x || width == Width::W32 {
                return Err(DecodeErrorKind::UnknownOpcode);
            }
            if raw.src != op::MAY_GOTO {
                return Err(DecodeErrorKind::InvalidSource(raw.src));
            }
            zero("destination", raw.dst as i64)?;
            zero("immediate", raw.imm as i64)?;
            Ok(Insn::MayGoto { off: raw.off })
        }
        op::JMP_EXIT => {
            if is_x || width == Width::W32 {
                return Err(DecodeErrorKind::UnknownOpcode);
            }
            zero("destination", raw.dst as i64)?;
            zero("source", raw.src as i64)?;
            zero("offset", raw.off as i64)?;
            zero("immediate", raw.imm as i64)?;
            Ok(Insn::Exit)
        }
        _ => {
            let cond = match opc {
                op::JMP_JEQ => JmpCond::Eq,
                op::JMP_JGT => JmpCond::Gt,
                op::JMP_JGE => JmpCond::Ge,
                op::JMP_JSET => JmpCond::Set,
                op::JMP_JNE => JmpCond::Ne,
                op::JMP_JSGT => JmpCond::Sgt,
                op::JMP_JSGE => JmpCond::Sge,
                op::JMP_JLT => JmpCond::Lt,
                op::JMP_JLE => JmpCond::Le,
                op::JMP_JSLT => JmpCond::Slt,
                op::JMP_JSLE => JmpCond::Sle,
                _ => return Err(DecodeErrorKind::UnknownOpcode),
            };
            let src = if is_x {
                zero("immediate", raw.imm as i64)?;
                Operand::Reg(reg(raw.src)?)
            } else {
                zero("source", raw.src as i64)?;
                Operand::Imm(raw.imm)
            };
            Ok(Insn::Jmp {
                width,
                cond,
                dst: reg(raw.dst)?,
                src,
                off: raw.off,
            })
        }
    }
}

fn decode_mem(raw: RawInsn) -> Result<Insn, DecodeErrorKind> {
    let size = Size::from_code(raw.code);
    let mode = raw.code & 0xe0;
    match (raw.class(), mode) {
        (op::CLASS_LDX, op::MODE_MEM) | (op::CLASS_LDX, op::MODE_MEMSX) => {
            let sign_extend = mode == op::MODE_MEMSX;
            if sign_extend && size == Size::DW {
                return Err(DecodeErrorKind::UnknownOpcode);
            }
            zero("immediate", raw.imm as i64)?;
            Ok(Insn::Load {
                size,
                sign_extend,
                dst: dst_reg(raw.dst)?,
                base: reg(raw.src)?,
                off: raw.off,
            })
        }
        (op::CLASS_ST, op::MODE_MEM) => {
            zero("source", raw.src as i64)?;
            Ok(Insn::Store {
                size,
                base: reg(raw.dst)?,
                off: raw.off,
                src: Operand::Imm(raw.imm),
            })
        }
        (op::CLASS_STX, op::MODE_MEM) => {
            zero("immediate", raw.imm as i64)?;
            Ok(Insn::Store {
                size,
                base: reg(raw.dst)?,
                off: raw.off,
                src: Operand::Reg(reg(raw.src)?),
            })
        }
        (op::CLASS_STX, op::MODE_ATOMIC) => {
            if !matches!(size, Size::W | Size::DW) {
                return Err(DecodeErrorKind::UnknownOpcode);
            }
            let (op, fetch) = match raw.imm {
                op::ATOMIC_XCHG => (AtomicOp::Xchg, true),
                op::ATOMIC_CMPXCHG => (AtomicOp::CmpXchg, true),
                imm => {
                    let fetch = imm & op::ATOMIC_FETCH != 0;
                    let op = match imm & !op::ATOMIC_FETCH {
                        op::ATOMIC_ADD => AtomicOp::Add,
                        op::ATOMIC_OR => AtomicOp::Or,
                        op::ATOMIC_AND => AtomicOp::And,
                        op::ATOMIC_XOR => AtomicOp::Xor,
                        _ => return Err(DecodeErrorKind::InvalidImmediate(imm)),
                    };
                    (op, fetch)
                }
            };
            let src = if fetch {
                dst_reg(raw.src)?
            } else {
                reg(raw.src)?
            };
            Ok(Insn::Atomic {
                size,
                op,
                fetch,
                base: reg(raw.dst)?,
                off: raw.off,
                src,
            })
        }
        (op::CLASS_LD, op::MODE_ABS) | (op::CLASS_LD, op::MODE_IND) => {
            Err(DecodeErrorKind::LegacyPacketAccess)
        }
        _ => Err(DecodeErrorKind::UnknownOpcode),
    }
}

/// Decodes one slot that is not the second half of an `lddw`. For `lddw`, `next` must be the
/// following slot.
pub fn decode_one(raw: RawInsn, next: Option<RawInsn>) -> Result<Insn, DecodeErrorKind> {
    match raw.class() {
        op::CLASS_ALU | op::CLASS_ALU64 => decode_alu(raw),
        op::CLASS_JMP | op::CLASS_JMP32 => decode_jmp(raw),
        op::CLASS_LD if raw.code == op::CLASS_LD | op::MODE_IMM | op::SIZE_DW => {
            zero("offset", raw.off as i64)?;
            let kind = match raw.src {
                0 => ImmKind::Imm,
                op::PSEUDO_MAP_FD => ImmKind::MapFd,
                op::PSEUDO_MAP_VALUE => ImmKind::MapValue,
                op::PSEUDO_BTF_ID => ImmKind::BtfId,
                op::PSEUDO_FUNC => ImmKind::Func,
                op::PSEUDO_MAP_IDX => ImmKind::MapIdx,
                op::PSEUDO_MAP_IDX_VALUE => ImmKind::MapIdxValue,
                other => return Err(DecodeErrorKind::InvalidSource(other)),
            };
            let next = next.ok_or(DecodeErrorKind::TruncatedLddw)?;
            if next.code != 0 || next.dst != 0 || next.src != 0 || next.off != 0 {
                return Err(DecodeErrorKind::BadLddwSecondSlot);
            }
            Ok(Insn::LoadImm64 {
                dst: dst_reg(raw.dst)?,
                kind,
                imm_lo: raw.imm,
                imm_hi: next.imm,
            })
        }
        _ => decode_mem(raw),
    }
}

/// Decodes and validates a whole program: every slot, `lddw` pairing, and that every jump and
/// local call lands on an instruction inside the program.
pub fn decode(raw: &[RawInsn]) -> Result<Vec<Insn>, DecodeError> {
    if raw.is_empty() {
        return Err(DecodeError {
            index: 0,
            code: 0,
            kind: DecodeErrorKind::Empty,
        });
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut pc = 0;
    while pc < raw.len() {
        let insn = decode_one(raw[pc], raw.get(pc + 1).copied()).map_err(|kind| DecodeError {
            index: pc,
            code: raw[pc].code,
            kind,
        })?;
        out.push(insn);
        if matches!(insn, Insn::LoadImm64 { .. }) {
            out.push(Insn::LoadImm64Hi);
            pc += 1;
        }
        pc += 1;
    }
    let len = out.len();
    let lands_badly = |target: i64| -> Option<DecodeErrorKind> {
        if target < 0 || target >= len as i64 {
            Some(DecodeErrorKind::JumpOutOfRange { target, len })
        } else if out[target as usize] == Insn::LoadImm64Hi {
            Some(DecodeErrorKind::JumpIntoLddw(target))
        } else {
            None
        }
    };
    for (pc, insn) in out.iter().enumerate() {
        let err = if let Some(t) = insn.jump_target(pc) {
            lands_badly(t)
        } else if let Some(t) = insn.call_target(pc) {
            lands_badly(t).map(|k| match k {
                DecodeErrorKind::JumpOutOfRange { target, len } => {
                    DecodeErrorKind::CallOutOfRange { target, len }
                }
                other => other,
            })
        } else {
            None
        };
        if let Some(kind) = err {
            return Err(DecodeError {
                index: pc,
                code: raw[pc].code,
                kind,
            });
        }
    }
    Ok(out)
}

/// Decodes a program from its byte encoding.
pub fn decode_bytes(bytes: &[u8]) -> Result<Vec<Insn>, DecodeError> {
    decode(&raw_from_bytes(bytes)?)
}

fn operand_fields(src: Operand) -> (u8, u8, i32) {
    match src {
        Operand::Reg(r) => (op::SRC_X, r.0, 0),
        Operand::Imm(i) => (op::SRC_K, 0, i),
    }
}

/// Encodes one decoded slot. `LoadImm64Hi` encodes to an all-zero slot carrying no data: use
/// [`encode`] on a whole program so that the high half lands in the second slot.
pub fn encode_one(insn: &Insn) -> RawInsn {
    match *insn {
        Insn::Alu {
            width,
            op: alu,
            dst,
            src,
        } => {
            let class = if width == Width::W64 {
                op::CLASS_ALU64
            } else {
                op::CLASS_ALU
            };
            let (sx, s, imm) = operand_fields(src);
            let (opc, off) = match alu {
                AluOp::Add => (op::ALU_ADD, 0),
                AluOp::Sub => (op::ALU_SUB, 0),
                AluOp::Mul => (op::ALU_MUL, 0),
                AluOp::Div => (op::ALU_DIV, 0),
                AluOp::SDiv => (op::ALU_DIV, 1),
                AluOp::Or => (op::ALU_OR, 0),
                AluOp::And => (op::ALU_AND, 0),
                AluOp::Lsh => (op::ALU_LSH, 0),
                AluOp::Rsh => (op::ALU_RSH, 0),
                AluOp::Neg => (op::ALU_NEG, 0),
                AluOp::Mod => (op::ALU_MOD, 0),
                AluOp::SMod => (op::ALU_MOD, 1),
                AluOp::Xor => (op::ALU_XOR, 0),
                AluOp::Mov => (op::ALU_MOV, 0),
                AluOp::MovSx(bits) => (op::ALU_MOV, bits as i16),
                AluOp::Arsh => (op::ALU_ARSH, 0),
            };
            RawInsn::new(class | opc | sx, dst.0, s, off, imm)
        }
        Insn::Endian { order, bits, dst } => {
            let code = match order {
                ByteOrder::ToLe => op::CLASS_ALU | op::ALU_END | op::SRC_K,
                ByteOrder::ToBe => op::CLASS_ALU | op::ALU_END | op::SRC_X,
                ByteOrder::Swap => op::CLASS_ALU64 | op::ALU_END | op::SRC_K,
            };
            RawInsn::new(code, dst.0, 0, 0, bits as i32)
        }
        Insn::Ja { off } => match i16::try_from(off) {
            Ok(o) => RawInsn::new(op::CLASS_JMP | op::JMP_JA, 0, 0, o, 0),
            Err(_) => RawInsn::new(op::CLASS_JMP32 | op::JMP_JA, 0, 0, 0, off),
        },
        Insn::Jmp {
            width,
            cond,
            dst,
            src,
            off,
        } => {
            let class = if width == Width::W64 {
                op::CLASS_JMP
            } else {
                op::CLASS_JMP32
            };
            let opc = match cond {
                JmpCond::Eq => op::JMP_JEQ,
                JmpCond::Gt => op::JMP_JGT,
                JmpCond::Ge => op::JMP_JGE,
                JmpCond::Set => op::JMP_JSET,
                JmpCond::Ne => op::JMP_JNE,
                JmpCond::Sgt => op::JMP_JSGT,
                JmpCond::Sge => op::JMP_JSGE,
                JmpCond::Lt => op::JMP_JLT,
                JmpCond::Le => op::JMP_JLE,
                JmpCond::Slt => op::JMP_JSLT,
                JmpCond::Sle => op::JMP_JSLE,
            };
            let (sx, s, imm) = operand_fields(src);
            RawInsn::new(class | opc | sx, dst.0, s, off, imm)
        }
        Insn::Call(target) => {
            let code = op::CLASS_JMP | op::JMP_CALL;
            match target {
                CallTarget::Helper(id) => RawInsn::new(code, 0, 0, 0, id),
                CallTarget::Local(rel) => RawInsn::new(code, 0, op::PSEUDO_CALL, 0, rel),
                CallTarget::Kfunc(id) => RawInsn::new(code, 0, op::PSEUDO_KFUNC_CALL, 0, id),
                CallTarget::Reg(r) => RawInsn::new(code | op::SRC_X, r.0, 0, 0, 0),
            }
        }
        Insn::Exit => RawInsn::new(op::CLASS_JMP | op::JMP_EXIT, 0, 0, 0, 0),
        Insn::MayGoto { off } => {
            RawInsn::new(op::CLASS_JMP | op::JMP_JCOND, 0, op::MAY_GOTO, off, 0)
        }
        Insn::Load {
            size,
            sign_extend,
            dst,
            base,
            off,
        } => {
            let mode = if sign_extend {
                op::MODE_MEMSX
            } else {
                op::MODE_MEM
            };
            RawInsn::new(op::CLASS_LDX | mode | size.code(), dst.0, base.0, off, 0)
        }
        Insn::Store {
            size,
            base,
            off,
            src,
        } => match src {
            Operand::Imm(imm) => RawInsn::new(
                op::CLASS_ST | op::MODE_MEM | size.code(),
                base.0,
                0,
                off,
                imm,
            ),
            Operand::Reg(r) => RawInsn::new(
                op::CLASS_STX | op::MODE_MEM | size.code(),
                base.0,
                r.0,
                off,
                0,
            ),
        },
        Insn::Atomic {
            size,
            op: aop,
            fetch,
            base,
            off,
            src,
        } => {
            let imm = match aop {
                AtomicOp::Add => op::ATOMIC_ADD,
                AtomicOp::Or => op::ATOMIC_OR,
                AtomicOp::And => op::ATOMIC_AND,
                AtomicOp::Xor => op::ATOMIC_XOR,
                AtomicOp::Xchg => op::ATOMIC_XCHG,
                AtomicOp::CmpXchg => op::ATOMIC_CMPXCHG,
            } | if fetch { op::ATOMIC_FETCH } else { 0 };
            RawInsn::new(
                op::CLASS_STX | op::MODE_ATOMIC | size.code(),
                base.0,
                src.0,
                off,
                imm,
            )
        }
        Insn::LoadImm64 {
            dst, kind, imm_lo, ..
        } => {
            let src = match kind {
                ImmKind::Imm => 0,
                ImmKind::MapFd => op::PSEUDO_MAP_FD,
                ImmKind::MapValue => op::PSEUDO_MAP_VALUE,
                ImmKind::BtfId => op::PSEUDO_BTF_ID,
                ImmKind::Func => op::PSEUDO_FUNC,
                ImmKind::MapIdx => op::PSEUDO_MAP_IDX,
                ImmKind::MapIdxValue => op::PSEUDO_MAP_IDX_VALUE,
            };
            RawInsn::new(
                op::CLASS_LD | op::MODE_IMM | op::SIZE_DW,
                dst.0,
                src,
                0,
                imm_lo,
            )
        }
        Insn::LoadImm64Hi => RawInsn::default(),
    }
}

/// Encodes a slot-indexed program back to raw slots (the inverse of [`decode`]).
pub fn encode(insns: &[Insn]) -> Vec<RawInsn> {
    let mut out: Vec<RawInsn> = insns.iter().map(encode_one).collect();
    for (pc, insn) in insns.iter().enumerate() {
        if let (Insn::LoadImm64 { imm_hi, .. }, Some(next)) = (insn, out.get_mut(pc + 1)) {
            next.imm = *imm_hi;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn strict_fields_are_enforced() {
        // add64 r0, 1 with a nonzero offset.
        let raw = [
            RawInsn::new(0x07, 0, 0, 1, 1),
            RawInsn::new(0x95, 0, 0, 0, 0),
        ];
        let err = decode(&raw).unwrap_err();
        assert_eq!(err.index, 0);
        assert!(matches!(
            err.kind,
            DecodeErrorKind::NonZeroField {
                field: "offset",
                ..
            }
        ));
    }

    #[test]
    fn lddw_pairs_and_jump_checks() {
        let raw = [
            RawInsn::new(0x18, 0, 0, 0, 1),
            RawInsn::new(0, 0, 0, 0, 2),
            RawInsn::new(0x05, 0, 0, -2, 0),
            RawInsn::new(0x95, 0, 0, 0, 0),
        ];
        let err = decode(&raw).unwrap_err();
        assert_eq!(err.kind, DecodeErrorKind::JumpIntoLddw(1));
        let ok = decode(
            &raw[..2]
                .iter()
                .copied()
                .chain([RawInsn::new(0x95, 0, 0, 0, 0)])
                .collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(
            ok[0],
            Insn::LoadImm64 {
                dst: Reg(0),
                kind: ImmKind::Imm,
                imm_lo: 1,
                imm_hi: 2
            }
        );
        assert_eq!(Insn::imm64(1, 2), 0x2_0000_0001);
    }

    #[test]
    fn may_goto_decodes_from_0xe5_only() {
        let raw = [
            RawInsn::new(0xe5, 0, 0, 1, 0),
            RawInsn::new(0x95, 0, 0, 0, 0),
            RawInsn::new(0x95, 0, 0, 0, 0),
        ];
        let insns = decode(&raw).unwrap();
        assert_eq!(insns[0], Insn::MayGoto { off: 1 });
        assert_eq!(insns[0].jump_target(0), Some(2));
        assert_eq!(encode(&insns), raw);
        for (bad, kind) in [
            (
                RawInsn::new(0xe5, 0, 1, 1, 0),
                DecodeErrorKind::InvalidSource(1),
            ),
            (
                RawInsn::new(0xe6, 0, 0, 1, 0),
                DecodeErrorKind::UnknownOpcode,
            ),
            (
                RawInsn::new(0xed, 0, 0, 1, 0),
                DecodeErrorKind::UnknownOpcode,
            ),
        ] {
            let e = decode(&[bad, raw[1], raw[2]]).unwrap_err();
            assert_eq!(e.kind, kind, "{bad:?}");
        }
        assert!(decode(&[RawInsn::new(0xe5, 1, 0, 1, 0), raw[1], raw[2]]).is_err());
        assert!(decode(&[RawInsn::new(0xe5, 0, 0, 1, 7), raw[1], raw[2]]).is_err());
    }

    #[test]
    fn frame_pointer_is_read_only() {
        let raw = [
            RawInsn::new(0xb7, 10, 0, 0, 0),
            RawInsn::new(0x95, 0, 0, 0, 0),
        ];
        assert_eq!(
            decode(&raw).unwrap_err().kind,
            DecodeErrorKind::WriteToFramePointer
        );
    }

    proptest! {
        #[test]
        fn decode_never_panics_and_roundtrips(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(insns) = decode_bytes(&bytes) {
                let re = raw_to_bytes(&encode(&insns));
                // Re-decoding what we encode must give the same program.
                prop_assert_eq!(decode_bytes(&re).unwrap(), insns);
            }
        }
    }
}
