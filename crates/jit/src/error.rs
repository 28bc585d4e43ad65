//! Why a compilation failed: the one error type planning, both code generators and the
//! driver return.

use rdx_region::layout::Arch;

/// Why a program could not be compiled. Instruction indices are slot indices of the program.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The program has no instructions.
    #[error("program is empty")]
    Empty,
    /// An instruction the JIT does not compile.
    #[error("instruction {pc}: {what} is not supported by the JIT")]
    Unsupported {
        /// Its slot.
        pc: usize,
        /// What it is.
        what: String,
    },
    /// A jump leaves the function it is in.
    #[error("instruction {pc}: jump to {target} leaves the function starting at {function}")]
    JumpOutsideFunction {
        /// The jump's slot.
        pc: usize,
        /// Its target slot.
        target: i64,
        /// The function's first slot.
        function: usize,
    },
    /// A function can run past its last instruction.
    #[error("function starting at {function} can run past its last instruction {pc}")]
    FallsOffEnd {
        /// The function's first slot.
        function: usize,
        /// Its last slot.
        pc: usize,
    },
    /// A jump or call reaches the second slot of an `lddw`.
    #[error("instruction {pc}: the second slot of lddw is executed")]
    LddwSecondSlot {
        /// The slot.
        pc: usize,
    },
    /// Local calls recurse.
    #[error("instruction {pc}: local calls recurse (function at {function} reaches itself)")]
    Recursion {
        /// The call's slot.
        pc: usize,
        /// The function that reaches itself.
        function: usize,
    },
    /// Cranelift cannot target the architecture.
    #[error("cannot build a code generator for {arch}: {reason}")]
    Isa {
        /// The architecture.
        arch: Arch,
        /// Cranelift's message.
        reason: String,
    },
    /// Cranelift failed on a function.
    #[error("code generation failed for the function starting at {function}: {reason}")]
    Codegen {
        /// The function's first slot.
        function: usize,
        /// Cranelift's message.
        reason: String,
    },
    /// Cranelift emitted a relocation the artifact format has no kind for.
    #[error("unexpected relocation {kind} in generated code")]
    UnexpectedReloc {
        /// Its kind.
        kind: String,
    },
    /// A guard names a slot that is not a conditional jump.
    #[error("instruction {pc}: a guard must be a conditional jump, this is {what}")]
    BadGuard {
        /// The slot.
        pc: usize,
        /// What is there instead.
        what: String,
    },
    /// The baseline tier does not build this; compile with a Cranelift pipeline instead.
    #[error("the baseline tier does not support {what}")]
    NotInBaseline {
        /// The feature asked for.
        what: String,
    },
}
