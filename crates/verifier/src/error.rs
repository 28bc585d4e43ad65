//! Verification errors: the rule broken, where, and the abstract state there.

use std::fmt;

/// The rules a program can break. Each has a stable id (used by the corpus' `expect:` lines
/// and in messages) listed in `docs/verifier.md`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// Malformed control flow: jumps out of their function, falling off the end, unsupported
    /// instructions.
    BadCfg,
    /// An instruction no path reaches.
    Unreachable,
    /// A register read before it was written.
    UninitRegister,
    /// Stack bytes read before they were written.
    UninitStack,
    /// A memory access outside its region (map value, packet range, stack, record, variable).
    OutOfBounds,
    /// A dereference of a pointer that may be null.
    NullDeref,
    /// A load or store through something that is not a dereferenceable pointer.
    InvalidMemBase,
    /// A context access at an offset or size the hook does not offer.
    CtxAccess,
    /// A write to read-only memory (read-only maps, read-only fields, the frame pointer).
    ReadOnly,
    /// Arithmetic that pointers do not support.
    PointerArith,
    /// A pointer escaping as a number: stored to memory other code reads, returned, partly
    /// spilled, compared or passed as a scalar.
    PointerLeak,
    /// A comparison between pointers that is neither a null check nor a packet bounds check.
    PointerCompare,
    /// A misaligned stack or atomic access.
    Misaligned,
    /// A stack access with a variable offset.
    VarStackOffset,
    /// The stack limit exceeded (one frame or the sum along a call chain).
    StackLimit,
    /// A call to a helper id that does not exist in this environment.
    UnknownHelper,
    /// A helper argument of the wrong type, size or range.
    HelperArg,
    /// A ring-buffer record neither submitted nor discarded on some path.
    UnreleasedReference,
    /// `r0` not an initialised scalar (or out of the hook's range) at the entry program's exit.
    ReturnValue,
    /// A loop the verifier proves never exits.
    InfiniteLoop,
    /// The exploration limit (1M instructions, pending branches, states) exceeded.
    TooComplex,
    /// More than 8 nested frames, or recursion.
    CallDepth,
    /// An EIM class forbids this context access.
    EimContext,
    /// An EIM class forbids this host function or helper.
    EimFunction,
    /// An EIM class forbids this host-variable access.
    EimVariable,
    /// An EIM function's argument constraint may be violated.
    EimArgument,
    /// The class's XState memory limit is exceeded by the program's maps.
    EimMemory,
    /// The program uses a map kind or instruction the environment does not support.
    Unsupported,
}

impl Rule {
    /// Every rule, in the order of the table in `docs/verifier.md`.
    pub const ALL: [Rule; 28] = [
        Rule::BadCfg,
        Rule::Unreachable,
        Rule::UninitRegister,
        Rule::UninitStack,
        Rule::OutOfBounds,
        Rule::NullDeref,
        Rule::InvalidMemBase,
        Rule::CtxAccess,
        Rule::ReadOnly,
        Rule::PointerArith,
        Rule::PointerLeak,
        Rule::PointerCompare,
        Rule::Misaligned,
        Rule::VarStackOffset,
        Rule::StackLimit,
        Rule::UnknownHelper,
        Rule::HelperArg,
        Rule::UnreleasedReference,
        Rule::ReturnValue,
        Rule::InfiniteLoop,
        Rule::TooComplex,
        Rule::CallDepth,
        Rule::EimContext,
        Rule::EimFunction,
        Rule::EimVariable,
        Rule::EimArgument,
        Rule::EimMemory,
        Rule::Unsupported,
    ];

    /// The rule's stable id, as printed in brackets after a rejection (`out-of-bounds`, ...).
    pub fn id(self) -> &'static str {
        match self {
            Rule::BadCfg => "bad-cfg",
            Rule::Unreachable => "unreachable",
            Rule::UninitRegister => "uninit-register",
            Rule::UninitStack => "uninit-stack",
            Rule::OutOfBounds => "out-of-bounds",
            Rule::NullDeref => "null-deref",
            Rule::InvalidMemBase => "invalid-mem-base",
            Rule::CtxAccess => "ctx-access",
            Rule::ReadOnly => "read-only",
            Rule::PointerArith => "pointer-arith",
            Rule::PointerLeak => "pointer-leak",
            Rule::PointerCompare => "pointer-compare",
            Rule::Misaligned => "misaligned",
            Rule::VarStackOffset => "var-stack-offset",
            Rule::StackLimit => "stack-limit",
            Rule::UnknownHelper => "unknown-helper",
            Rule::HelperArg => "helper-arg",
            Rule::UnreleasedReference => "unreleased-reference",
            Rule::ReturnValue => "return-value",
            Rule::InfiniteLoop => "infinite-loop",
            Rule::TooComplex => "too-complex",
            Rule::CallDepth => "call-depth",
            Rule::EimContext => "eim-context",
            Rule::EimFunction => "eim-function",
            Rule::EimVariable => "eim-variable",
            Rule::EimArgument => "eim-argument",
            Rule::EimMemory => "eim-memory",
            Rule::Unsupported => "unsupported",
        }
    }

    /// The rule with stable id `id`, if there is one.
    pub fn from_id(id: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.id() == id)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// A broken rule, before the driver adds where it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule broken.
    pub rule: Rule,
    /// What broke it, in terms of the program's values.
    pub message: String,
}

impl Violation {
    /// A violation of `rule` explained by `message`.
    pub fn new(rule: Rule, message: impl Into<String>) -> Self {
        Violation {
            rule,
            message: message.into(),
        }
    }
}

/// Why a program was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct VerifyError {
    /// The rule broken.
    pub rule: Rule,
    /// What broke it, in terms of the program's values.
    pub message: String,
    /// Instruction index (slot) where the rule broke, when it is about one instruction.
    pub pc: Option<usize>,
    /// Disassembly of that instruction.
    pub insn: Option<String>,
    /// The abstract registers and stack just before that instruction.
    pub state: Option<String>,
    /// The full verification log, when requested.
    pub log: Option<String>,
}

impl VerifyError {
    /// A violation of `rule` about the program as a whole (no instruction, state or log).
    pub fn global(rule: Rule, message: impl Into<String>) -> Self {
        VerifyError {
            rule,
            message: message.into(),
            pc: None,
            insn: None,
            state: None,
            log: None,
        }
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.pc, &self.insn) {
            (Some(pc), Some(insn)) => write!(f, "instruction {pc} `{insn}`: ")?,
            (Some(pc), None) => write!(f, "instruction {pc}: ")?,
            _ => {}
        }
        write!(f, "{} [{}]", self.message, self.rule)?;
        if let Some(s) = &self.state {
            write!(f, "\n  state: {}", s.replace('\n', "\n         "))?;
        }
        Ok(())
    }
}
