//! The loader's one error type. Every variant names where the problem is (section, symbol,
//! byte offset or instruction index) so that the message alone tells the user what to fix.

use crate::isa::DecodeErrorKind;

use super::btf::BtfError;

/// Why an object could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    #[error("not an ELF file (it does not start with \\x7fELF)")]
    NotElf,
    #[error("truncated ELF file: {0} bytes is shorter than an ELF header")]
    Truncated(usize),
    #[error("32-bit ELF file; eBPF objects are ELF64 (compile with `clang -target bpf`)")]
    WrongClass,
    #[error(
        "wrong machine type {machine} ({name}); eBPF objects have machine 247 (EM_BPF): \
         compile with `clang -target bpf`"
    )]
    WrongMachine { machine: u16, name: &'static str },
    #[error(
        "big-endian eBPF object; rdx runs little-endian eBPF \
         (compile with `-target bpf` or `-target bpfel`, not `bpfeb`)"
    )]
    WrongEndianness,
    /// The ELF structure itself is inconsistent (offsets out of the file, bad tables...).
    #[error("malformed ELF: {what}: {reason}")]
    MalformedElf { what: String, reason: String },
    #[error("section {section}: empty program section (no instructions)")]
    EmptyProgramSection { section: String },
    #[error("section {section}: {size} bytes is not a whole number of 8-byte instructions")]
    PartialInstruction { section: String, size: u64 },
    #[error("section {section}: no function symbol marks a program entry point")]
    NoProgramSymbol { section: String },
    #[error(
        "section {section}: function {symbol} at offset {offset:#x} with size {size} \
         {reason}"
    )]
    BadFunctionSymbol {
        section: String,
        symbol: String,
        offset: u64,
        size: u64,
        reason: &'static str,
    },
    #[error(
        "section {section}: relocation at offset {offset:#x} refers to missing symbol #{index}"
    )]
    MissingSymbol {
        section: String,
        offset: u64,
        index: usize,
    },
    #[error(
        "section {section}: relocation at offset {offset:#x} refers to undefined symbol \
         `{symbol}`; rdx links single objects and resolves no externs (kfuncs, kconfig, \
         other objects)"
    )]
    UndefinedSymbol {
        section: String,
        offset: u64,
        symbol: String,
    },
    #[error("section {section}: relocation at offset {offset:#x}: {reason}")]
    BadRelocation {
        section: String,
        offset: u64,
        reason: String,
    },
    #[error(
        "section {section}: instruction {insn}: call target {target_section}+{target_insn} \
         is not the start of a function"
    )]
    CallTargetNotFunction {
        section: String,
        insn: u64,
        target_section: String,
        target_insn: i64,
    },
    #[error(
        "section {section}: instruction {insn} (function {function}): jump to {target} \
         leaves the function (instructions {start}..{end})"
    )]
    JumpOutOfFunction {
        section: String,
        function: String,
        insn: u64,
        target: i64,
        start: u64,
        end: u64,
    },
    #[error(
        "section {section}: instruction {insn}: lddw with pseudo source {src} has no \
         relocation; map references must be relocated by the loader, not pre-filled"
    )]
    UnrelocatedMapReference { section: String, insn: u64, src: u8 },
    /// An instruction failed strict decoding. `insn` counts instruction slots from the start
    /// of `section`, as `llvm-objdump -d` numbers them.
    #[error(
        "section {section}: instruction {insn} (function {function}, opcode {code:#04x}): {kind}"
    )]
    BadInstruction {
        section: String,
        function: String,
        insn: u64,
        code: u8,
        kind: DecodeErrorKind,
    },
    #[error("program {program}: {insns} instructions after linking its subprograms exceeds the limit of {limit}")]
    ProgramTooLarge {
        program: String,
        insns: usize,
        limit: usize,
    },
    #[error("map {map}: {reason}")]
    BadMap { map: String, reason: String },
    #[error("section {section}: {size} bytes of global data exceeds the limit of {limit} bytes")]
    GlobalDataTooLarge {
        section: String,
        size: u64,
        limit: u64,
    },
    #[error(
        ".BTF.ext: the object carries {bytes} bytes of CO-RE relocations, which rdx does not \
         apply (no target kernel BTF on the control plane); build without \
         preserve_access_index / vmlinux.h types"
    )]
    UnsupportedCoRe { bytes: u32 },
    #[error("section .maps holds BTF-defined maps but the object has no .BTF section (compile with `-g`)")]
    MissingBtf,
    // Not `#[from]`: that would also make it the error's source, and reporters that print
    // the source chain (anyhow's `{:#}`) would say it twice.
    #[error(".BTF: {0}")]
    Btf(BtfError),
}

impl From<BtfError> for LoadError {
    fn from(e: BtfError) -> Self {
        LoadError::Btf(e)
    }
}
