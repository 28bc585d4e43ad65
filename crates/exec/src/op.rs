//! The pre-lowered form every tier that interprets eBPF dispatches on: one flat 16-byte
//! [`Op`] per instruction slot, with the operation, width and operand kind folded into a
//! single [`Code`], immediates already sign- or zero-extended, jump and call targets absolute
//! slot indices and `lddw` values resolved.

macro_rules! opcodes {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        /// The operation of one slot.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u8)]
        #[allow(clippy::upper_case_acronyms)]
        pub enum Code { $($(#[$m])* $name),* }

        impl Code {
            /// Every code, in discriminant order.
            pub const ALL: &'static [Code] = &[$(Code::$name),*];
        }
    };
}

opcodes! {
    /// `dst = dst + imm` (64-bit).
    Add64I,
    /// `dst = dst - imm` (64-bit).
    Sub64I,
    /// `dst = dst * imm` (64-bit).
    Mul64I,
    /// `dst = dst / imm`, unsigned; 0 when imm is 0 (64-bit).
    Div64I,
    /// `dst = dst / imm`, signed; 0 when imm is 0 (64-bit).
    SDiv64I,
    /// `dst = dst | imm` (64-bit).
    Or64I,
    /// `dst = dst & imm` (64-bit).
    And64I,
    /// `dst = dst << imm`, the shift masked to the width (64-bit).
    Lsh64I,
    /// `dst = dst >> imm`, logical, the shift masked to the width (64-bit).
    Rsh64I,
    /// `dst = dst % imm`, unsigned; dst unchanged when imm is 0 (64-bit).
    Mod64I,
    /// `dst = dst % imm`, signed; dst unchanged when imm is 0 (64-bit).
    SMod64I,
    /// `dst = dst ^ imm` (64-bit).
    Xor64I,
    /// `dst = imm` (64-bit).
    Mov64I,
    /// `dst = dst >> imm`, arithmetic, the shift masked to the width (64-bit).
    Arsh64I,
    /// `dst = dst + src` (64-bit).
    Add64R,
    /// `dst = dst - src` (64-bit).
    Sub64R,
    /// `dst = dst * src` (64-bit).
    Mul64R,
    /// `dst = dst / src`, unsigned; 0 when src is 0 (64-bit).
    Div64R,
    /// `dst = dst / src`, signed; 0 when src is 0 (64-bit).
    SDiv64R,
    /// `dst = dst | src` (64-bit).
    Or64R,
    /// `dst = dst & src` (64-bit).
    And64R,
    /// `dst = dst << src`, the shift masked to the width (64-bit).
    Lsh64R,
    /// `dst = dst >> src`, logical, the shift masked to the width (64-bit).
    Rsh64R,
    /// `dst = dst % src`, unsigned; dst unchanged when src is 0 (64-bit).
    Mod64R,
    /// `dst = dst % src`, signed; dst unchanged when src is 0 (64-bit).
    SMod64R,
    /// `dst = dst ^ src` (64-bit).
    Xor64R,
    /// `dst = src` (64-bit).
    Mov64R,
    /// `dst = dst >> src`, arithmetic, the shift masked to the width (64-bit).
    Arsh64R,
    /// `dst = dst + imm` (32-bit, zero-extended).
    Add32I,
    /// `dst = dst - imm` (32-bit, zero-extended).
    Sub32I,
    /// `dst = dst * imm` (32-bit, zero-extended).
    Mul32I,
    /// `dst = dst / imm`, unsigned; 0 when imm is 0 (32-bit, zero-extended).
    Div32I,
    /// `dst = dst / imm`, signed; 0 when imm is 0 (32-bit, zero-extended).
    SDiv32I,
    /// `dst = dst | imm` (32-bit, zero-extended).
    Or32I,
    /// `dst = dst & imm` (32-bit, zero-extended).
    And32I,
    /// `dst = dst << imm`, the shift masked to the width (32-bit, zero-extended).
    Lsh32I,
    /// `dst = dst >> imm`, logical, the shift masked to the width (32-bit, zero-extended).
    Rsh32I,
    /// `dst = dst % imm`, unsigned; dst unchanged when imm is 0 (32-bit, zero-extended).
    Mod32I,
    /// `dst = dst % imm`, signed; dst unchanged when imm is 0 (32-bit, zero-extended).
    SMod32I,
    /// `dst = dst ^ imm` (32-bit, zero-extended).
    Xor32I,
    /// `dst = imm` (32-bit, zero-extended).
    Mov32I,
    /// `dst = dst >> imm`, arithmetic, the shift masked to the width (32-bit, zero-extended).
    Arsh32I,
    /// `dst = dst + src` (32-bit, zero-extended).
    Add32R,
    /// `dst = dst - src` (32-bit, zero-extended).
    Sub32R,
    /// `dst = dst * src` (32-bit, zero-extended).
    Mul32R,
    /// `dst = dst / src`, unsigned; 0 when src is 0 (32-bit, zero-extended).
    Div32R,
    /// `dst = dst / src`, signed; 0 when src is 0 (32-bit, zero-extended).
    SDiv32R,
    /// `dst = dst | src` (32-bit, zero-extended).
    Or32R,
    /// `dst = dst & src` (32-bit, zero-extended).
    And32R,
    /// `dst = dst << src`, the shift masked to the width (32-bit, zero-extended).
    Lsh32R,
    /// `dst = dst >> src`, logical, the shift masked to the width (32-bit, zero-extended).
    Rsh32R,
    /// `dst = dst % src`, unsigned; dst unchanged when src is 0 (32-bit, zero-extended).
    Mod32R,
    /// `dst = dst % src`, signed; dst unchanged when src is 0 (32-bit, zero-extended).
    SMod32R,
    /// `dst = dst ^ src` (32-bit, zero-extended).
    Xor32R,
    /// `dst = src` (32-bit, zero-extended).
    Mov32R,
    /// `dst = dst >> src`, arithmetic, the shift masked to the width (32-bit, zero-extended).
    Arsh32R,
    /// `dst = -dst` (64-bit).
    Neg64,
    /// `dst = -dst` (32-bit, zero-extended).
    Neg32,
    /// `dst` = the low 8 bits of `src`, sign-extended (64-bit).
    MovSx8To64,
    /// `dst` = the low 16 bits of `src`, sign-extended (64-bit).
    MovSx16To64,
    /// `dst` = the low 32 bits of `src`, sign-extended (64-bit).
    MovSx32To64,
    /// `dst` = the low 8 bits of `src`, sign-extended to 32 bits, then zero-extended.
    MovSx8To32,
    /// `dst` = the low 16 bits of `src`, sign-extended to 32 bits, then zero-extended.
    MovSx16To32,
    /// `dst` = its low 16 bits in little-endian order, zero-extended.
    Le16,
    /// `dst` = its low 32 bits in little-endian order, zero-extended.
    Le32,
    /// `dst` = its low 64 bits in little-endian order, zero-extended.
    Le64,
    /// `dst` = its low 16 bits in big-endian order, zero-extended.
    Be16,
    /// `dst` = its low 32 bits in big-endian order, zero-extended.
    Be32,
    /// `dst` = its low 64 bits in big-endian order, zero-extended.
    Be64,
    /// `dst` = its low 16 bits byte-swapped, zero-extended (whatever the host order).
    Swap16,
    /// `dst` = its low 32 bits byte-swapped, zero-extended (whatever the host order).
    Swap32,
    /// `dst` = its low 64 bits byte-swapped, zero-extended (whatever the host order).
    Swap64,
    /// Jump to slot `aux`.
    Ja,
    /// Jump to slot `aux` if `dst == imm` (64-bit).
    Jeq64I,
    /// Jump to slot `aux` if `dst > imm` (64-bit, unsigned).
    Jgt64I,
    /// Jump to slot `aux` if `dst >= imm` (64-bit, unsigned).
    Jge64I,
    /// Jump to slot `aux` if `dst & imm != 0` (64-bit).
    Jset64I,
    /// Jump to slot `aux` if `dst != imm` (64-bit).
    Jne64I,
    /// Jump to slot `aux` if `dst > imm` (64-bit, signed).
    Jsgt64I,
    /// Jump to slot `aux` if `dst >= imm` (64-bit, signed).
    Jsge64I,
    /// Jump to slot `aux` if `dst < imm` (64-bit, unsigned).
    Jlt64I,
    /// Jump to slot `aux` if `dst <= imm` (64-bit, unsigned).
    Jle64I,
    /// Jump to slot `aux` if `dst < imm` (64-bit, signed).
    Jslt64I,
    /// Jump to slot `aux` if `dst <= imm` (64-bit, signed).
    Jsle64I,
    /// Jump to slot `aux` if `dst == src` (64-bit).
    Jeq64R,
    /// Jump to slot `aux` if `dst > src` (64-bit, unsigned).
    Jgt64R,
    /// Jump to slot `aux` if `dst >= src` (64-bit, unsigned).
    Jge64R,
    /// Jump to slot `aux` if `dst & src != 0` (64-bit).
    Jset64R,
    /// Jump to slot `aux` if `dst != src` (64-bit).
    Jne64R,
    /// Jump to slot `aux` if `dst > src` (64-bit, signed).
    Jsgt64R,
    /// Jump to slot `aux` if `dst >= src` (64-bit, signed).
    Jsge64R,
    /// Jump to slot `aux` if `dst < src` (64-bit, unsigned).
    Jlt64R,
    /// Jump to slot `aux` if `dst <= src` (64-bit, unsigned).
    Jle64R,
    /// Jump to slot `aux` if `dst < src` (64-bit, signed).
    Jslt64R,
    /// Jump to slot `aux` if `dst <= src` (64-bit, signed).
    Jsle64R,
    /// Jump to slot `aux` if `dst == imm` (low 32 bits).
    Jeq32I,
    /// Jump to slot `aux` if `dst > imm` (low 32 bits, unsigned).
    Jgt32I,
    /// Jump to slot `aux` if `dst >= imm` (low 32 bits, unsigned).
    Jge32I,
    /// Jump to slot `aux` if `dst & imm != 0` (low 32 bits).
    Jset32I,
    /// Jump to slot `aux` if `dst != imm` (low 32 bits).
    Jne32I,
    /// Jump to slot `aux` if `dst > imm` (low 32 bits, signed).
    Jsgt32I,
    /// Jump to slot `aux` if `dst >= imm` (low 32 bits, signed).
    Jsge32I,
    /// Jump to slot `aux` if `dst < imm` (low 32 bits, unsigned).
    Jlt32I,
    /// Jump to slot `aux` if `dst <= imm` (low 32 bits, unsigned).
    Jle32I,
    /// Jump to slot `aux` if `dst < imm` (low 32 bits, signed).
    Jslt32I,
    /// Jump to slot `aux` if `dst <= imm` (low 32 bits, signed).
    Jsle32I,
    /// Jump to slot `aux` if `dst == src` (low 32 bits).
    Jeq32R,
    /// Jump to slot `aux` if `dst > src` (low 32 bits, unsigned).
    Jgt32R,
    /// Jump to slot `aux` if `dst >= src` (low 32 bits, unsigned).
    Jge32R,
    /// Jump to slot `aux` if `dst & src != 0` (low 32 bits).
    Jset32R,
    /// Jump to slot `aux` if `dst != src` (low 32 bits).
    Jne32R,
    /// Jump to slot `aux` if `dst > src` (low 32 bits, signed).
    Jsgt32R,
    /// Jump to slot `aux` if `dst >= src` (low 32 bits, signed).
    Jsge32R,
    /// Jump to slot `aux` if `dst < src` (low 32 bits, unsigned).
    Jlt32R,
    /// Jump to slot `aux` if `dst <= src` (low 32 bits, unsigned).
    Jle32R,
    /// Jump to slot `aux` if `dst < src` (low 32 bits, signed).
    Jslt32R,
    /// Jump to slot `aux` if `dst <= src` (low 32 bits, signed).
    Jsle32R,
    /// `dst` = the 1 byte at `src + aux` (offset as `i32`), zero-extended.
    LdxB,
    /// `dst` = the 2 bytes at `src + aux` (offset as `i32`), zero-extended.
    LdxH,
    /// `dst` = the 4 bytes at `src + aux` (offset as `i32`), zero-extended.
    LdxW,
    /// `dst` = the 8 bytes at `src + aux` (offset as `i32`), zero-extended.
    LdxDW,
    /// `dst` = the 1 byte at `src + aux` (offset as `i32`), sign-extended.
    LdxSB,
    /// `dst` = the 2 bytes at `src + aux` (offset as `i32`), sign-extended.
    LdxSH,
    /// `dst` = the 4 bytes at `src + aux` (offset as `i32`), sign-extended.
    LdxSW,
    /// Store the low 1 byte of `imm` at `dst + aux` (offset as `i32`).
    StB,
    /// Store the low 2 bytes of `imm` at `dst + aux` (offset as `i32`).
    StH,
    /// Store the low 4 bytes of `imm` at `dst + aux` (offset as `i32`).
    StW,
    /// Store the low 8 bytes of `imm` at `dst + aux` (offset as `i32`).
    StDW,
    /// Store the low 1 byte of `src` at `dst + aux` (offset as `i32`).
    StxB,
    /// Store the low 2 bytes of `src` at `dst + aux` (offset as `i32`).
    StxH,
    /// Store the low 4 bytes of `src` at `dst + aux` (offset as `i32`).
    StxW,
    /// Store the low 8 bytes of `src` at `dst + aux` (offset as `i32`).
    StxDW,
    /// Atomic operation [`atomic`]`::*` in `aux` on the 4 bytes at `dst + imm` with `src`.
    AtomicW,
    /// Atomic operation [`atomic`]`::*` in `aux` on the 8 bytes at `dst + imm` with `src`.
    AtomicDW,
    /// `dst = imm`, the resolved 64-bit `lddw` value; the next slot is its second half.
    LdImm64,
    /// Call helper `imm` with `r1`..`r5`; the result lands in `r0`.
    CallHelper,
    /// Call the local function at slot `aux` in a fresh stack frame.
    CallLocal,
    /// Call the helper register `dst` names, with `r1`..`r5`.
    CallX,
    /// Return `r0` to the caller frame, or end the run in the entry function.
    Exit,
    /// The second slot of an `lddw`: never executed (a run that reaches it stops).
    LdImm64Hi,
    /// One past the last instruction: reaching it means the program fell off its end.
    FellOff,
    /// `may_goto`: jump to slot `aux` when the frame's loop counter is used up, else take one
    /// from it (see [`crate::machine::MAY_GOTO_LOOPS`]).
    MayGoto,
}

impl Code {
    /// The code with discriminant `raw`, if there is one.
    #[inline(always)]
    pub fn from_u8(raw: u8) -> Option<Code> {
        Code::ALL.get(raw as usize).copied()
    }

    /// Whether this is a conditional jump (the only kind of slot a guard replaces).
    pub fn is_cond_jump(self) -> bool {
        (Code::Jeq64I as u8..=Code::Jsle32R as u8).contains(&(self as u8))
    }
}

/// One pre-lowered slot.
///
/// `aux` is the absolute jump/call target, the memory offset (as `i32` bits), the helper
/// table index (interpreter) or the atomic sub-operation; `imm` the extended immediate, the
/// resolved `lddw` value or (for [`Code::CallHelper`]) the helper id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    /// The operation, width and operand kind.
    pub code: Code,
    /// Destination register index (0..=10).
    pub dst: u8,
    /// Source register index (0..=10).
    pub src: u8,
    /// Target slot, memory offset, helper table index or atomic sub-operation (see above).
    pub aux: u32,
    /// Extended immediate, resolved `lddw` value or helper id (see above).
    pub imm: u64,
}

const _: () = assert!(std::mem::size_of::<Op>() == 16);

impl Op {
    /// A slot of `code` with every operand zero.
    pub const fn new(code: Code) -> Op {
        Op {
            code,
            dst: 0,
            src: 0,
            aux: 0,
            imm: 0,
        }
    }
}

/// Atomic sub-operations packed into [`Op::aux`].
pub mod atomic {
    /// `*addr += src`.
    pub const ADD: u32 = 0;
    /// `*addr |= src`.
    pub const OR: u32 = 1;
    /// `*addr &= src`.
    pub const AND: u32 = 2;
    /// `*addr ^= src`.
    pub const XOR: u32 = 3;
    /// Store `src` at `addr`; with [`FETCH`] (which eBPF's `xchg` always carries) `src`
    /// receives the old value.
    pub const XCHG: u32 = 4;
    /// If `*addr == r0`, store `src`; `r0` receives the old value either way.
    pub const CMPXCHG: u32 = 5;
    /// Or-ed into the sub-operation: the old value is written back to the source register.
    pub const FETCH: u32 = 8;
}

/// Registers one slot reads (which must hold values) and writes, for runs that check
/// register initialisation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegMasks {
    /// Bit `i` set: the slot reads `r<i>`.
    pub reads: u16,
    /// Bit `i` set: the slot writes `r<i>`.
    pub writes: u16,
}
