//! Why a compilation failed: the one error type planning, both code generators and the
//! driver return.

use crate::target::Arch;

/// Why a program could not be compiled. Instruction indices are slot indices of the program.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("program is empty")]
    Empty,
    #[error("instruction {pc}: {what} is not supported by the JIT")]
    Unsupported { pc: usize, what: String },
    #[error("instruction {pc}: jump to {target} leaves the function starting at {function}")]
    JumpOutsideFunction {
        pc: usize,
        target: i64,
        function: usize,
    },
    #[error("function starting at {function} can run past its last instruction {pc}")]
    FallsOffEnd { function: usize, pc: usize },
    #[error("instruction {pc}: the second slot of lddw is executed")]
    LddwSecondSlot { pc: usize },
    #[error("instruction {pc}: local calls recurse (function at {function} reaches itself)")]
    Recursion { pc: usize, function: usize },
    #[error("cannot build a code generator for {arch}: {reason}")]
    Isa { arch: Arch, reason: String },
    #[error("code generation failed for the function starting at {function}: {reason}")]
    Codegen { function: usize, reason: String },
    #[error("unexpected relocation {kind} in generated code")]
    UnexpectedReloc { kind: String },
    #[error("instruction {pc}: a guard must be a conditional jump, this is {what}")]
    BadGuard { pc: usize, what: String },
    /// The baseline tier does not build this; compile with a Cranelift pipeline instead.
    #[error("the baseline tier does not support {what}")]
    NotInBaseline { what: String },
}
