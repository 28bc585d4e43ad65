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
    Add64I, Sub64I, Mul64I, Div64I, SDiv64I, Or64I, And64I, Lsh64I, Rsh64I, Mod64I, SMod64I,
    Xor64I, Mov64I, Arsh64I,
    Add64R, Sub64R, Mul64R, Div64R, SDiv64R, Or64R, And64R, Lsh64R, Rsh64R, Mod64R, SMod64R,
    Xor64R, Mov64R, Arsh64R,
    Add32I, Sub32I, Mul32I, Div32I, SDiv32I, Or32I, And32I, Lsh32I, Rsh32I, Mod32I, SMod32I,
    Xor32I, Mov32I, Arsh32I,
    Add32R, Sub32R, Mul32R, Div32R, SDiv32R, Or32R, And32R, Lsh32R, Rsh32R, Mod32R, SMod32R,
    Xor32R, Mov32R, Arsh32R,
    Neg64, Neg32, MovSx8To64, MovSx16To64, MovSx32To64, MovSx8To32, MovSx16To32,
    Le16, Le32, Le64, Be16, Be32, Be64, Swap16, Swap32, Swap64,
    Ja,
    Jeq64I, Jgt64I, Jge64I, Jset64I, Jne64I, Jsgt64I, Jsge64I, Jlt64I, Jle64I, Jslt64I, Jsle64I,
    Jeq64R, Jgt64R, Jge64R, Jset64R, Jne64R, Jsgt64R, Jsge64R, Jlt64R, Jle64R, Jslt64R, Jsle64R,
    Jeq32I, Jgt32I, Jge32I, Jset32I, Jne32I, Jsgt32I, Jsge32I, Jlt32I, Jle32I, Jslt32I, Jsle32I,
    Jeq32R, Jgt32R, Jge32R, Jset32R, Jne32R, Jsgt32R, Jsge32R, Jlt32R, Jle32R, Jslt32R, Jsle32R,
    LdxB, LdxH, LdxW, LdxDW, LdxSB, LdxSH, LdxSW,
    StB, StH, StW, StDW, StxB, StxH, StxW, StxDW,
    AtomicW, AtomicDW,
    LdImm64, CallHelper, CallLocal, CallX, Exit,
    /// The second slot of an `lddw`: never executed (a run that reaches it stops).
    LdImm64Hi,
    /// One past the last instruction: reaching it means the program fell off its end.
    FellOff,
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
    pub code: Code,
    pub dst: u8,
    pub src: u8,
    pub aux: u32,
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
    pub const ADD: u32 = 0;
    pub const OR: u32 = 1;
    pub const AND: u32 = 2;
    pub const XOR: u32 = 3;
    pub const XCHG: u32 = 4;
    pub const CMPXCHG: u32 = 5;
    /// Or-ed into the sub-operation: the old value is written back to the source register.
    pub const FETCH: u32 = 8;
}

/// Registers one slot reads (which must hold values) and writes, for runs that check
/// register initialisation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegMasks {
    pub reads: u16,
    pub writes: u16,
}
