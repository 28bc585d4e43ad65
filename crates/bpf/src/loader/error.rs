//! The loader's one error type. Every variant names where the problem is (section, symbol,
//! byte offset or instruction index) so that the message alone tells the user what to fix.

use crate::isa::DecodeErrorKind;

use super::btf::BtfError;

/// Why an object could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file does not start with the ELF magic.
    #[error("not an ELF file (it does not start with \\x7fELF)")]
    NotElf,
    /// The file is shorter than an ELF header: its length in bytes.
    #[error("truncated ELF file: {0} bytes is shorter than an ELF header")]
    Truncated(usize),
    /// A 32-bit ELF file.
    #[error("32-bit ELF file; eBPF objects are ELF64 (compile with `clang -target bpf`)")]
    WrongClass,
    #[error(
        "wrong machine type {machine} ({name}); eBPF objects have machine 247 (EM_BPF): \
         compile with `clang -target bpf`"
    )]
    /// An ELF file for another machine than eBPF.
    WrongMachine {
        /// Its `e_machine`.
        machine: u16,
        /// That machine's name, or `unknown`.
        name: &'static str,
    },
    #[error(
        "big-endian eBPF object; rdx runs little-endian eBPF \
         (compile with `-target bpf` or `-target bpfel`, not `bpfeb`)"
    )]
    /// A big-endian eBPF object.
    WrongEndianness,
    /// The ELF structure itself is inconsistent (offsets out of the file, bad tables...).
    #[error("malformed ELF: {what}: {reason}")]
    MalformedElf {
        /// The structure that is wrong (a section header, the symbol table, ...).
        what: String,
        /// How it is wrong.
        reason: String,
    },
    /// A program section with no bytes.
    #[error("section {section}: empty program section (no instructions)")]
    EmptyProgramSection {
        /// The section's name.
        section: String,
    },
    /// A program section whose length is not a multiple of 8.
    #[error("section {section}: {size} bytes is not a whole number of 8-byte instructions")]
    PartialInstruction {
        /// The section's name.
        section: String,
        /// Its length in bytes.
        size: u64,
    },
    /// A program section with no function symbol in it.
    #[error("section {section}: no function symbol marks a program entry point")]
    NoProgramSymbol {
        /// The section's name.
        section: String,
    },
    #[error(
        "section {section}: function {symbol} at offset {offset:#x} with size {size} \
         {reason}"
    )]
    /// A function symbol that does not fit its section or is misaligned.
    BadFunctionSymbol {
        /// The section's name.
        section: String,
        /// The symbol's name.
        symbol: String,
        /// Its offset in the section, in bytes.
        offset: u64,
        /// Its size in bytes.
        size: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    #[error(
        "section {section}: relocation at offset {offset:#x} refers to missing symbol #{index}"
    )]
    /// A relocation names a symbol index past the symbol table.
    MissingSymbol {
        /// The section the relocation applies to.
        section: String,
        /// Byte offset of the relocated instruction.
        offset: u64,
        /// The symbol index.
        index: usize,
    },
    #[error(
        "section {section}: relocation at offset {offset:#x} refers to undefined symbol \
         `{symbol}`; rdx links single objects and resolves no externs (kfuncs, kconfig, \
         other objects)"
    )]
    /// A relocation names a symbol the object does not define (an extern).
    UndefinedSymbol {
        /// The section the relocation applies to.
        section: String,
        /// Byte offset of the relocated instruction.
        offset: u64,
        /// The symbol's name.
        symbol: String,
    },
    /// A relocation that cannot be applied (wrong instruction, type or target).
    #[error("section {section}: relocation at offset {offset:#x}: {reason}")]
    BadRelocation {
        /// The section the relocation applies to.
        section: String,
        /// Byte offset of the relocated instruction.
        offset: u64,
        /// Why it cannot be applied.
        reason: String,
    },
    #[error(
        "section {section}: instruction {insn}: call target {target_section}+{target_insn} \
         is not the start of a function"
    )]
    /// A call's target is not the first instruction of a function.
    CallTargetNotFunction {
        /// The section of the call.
        section: String,
        /// Slot of the call in its section.
        insn: u64,
        /// The section of the target.
        target_section: String,
        /// Slot of the target in its section.
        target_insn: i64,
    },
    #[error(
        "section {section}: instruction {insn} (function {function}): jump to {target} \
         leaves the function (instructions {start}..{end})"
    )]
    /// A jump leaves the function it is in.
    JumpOutOfFunction {
        /// The section.
        section: String,
        /// The function's name.
        function: String,
        /// Slot of the jump in the section.
        insn: u64,
        /// Slot it would land on.
        target: i64,
        /// First slot of the function.
        start: u64,
        /// One past its last slot.
        end: u64,
    },
    #[error(
        "section {section}: instruction {insn}: lddw with pseudo source {src} has no \
         relocation; map references must be relocated by the loader, not pre-filled"
    )]
    /// An `lddw` of a map reference with no relocation (a pre-filled map fd or index).
    UnrelocatedMapReference {
        /// The section.
        section: String,
        /// Slot of the `lddw` in the section.
        insn: u64,
        /// Its pseudo source.
        src: u8,
    },
    /// An instruction failed strict decoding. `insn` counts instruction slots from the start
    /// of `section`, as `llvm-objdump -d` numbers them.
    #[error(
        "section {section}: instruction {insn} (function {function}, opcode {code:#04x}): {kind}"
    )]
    BadInstruction {
        /// The section.
        section: String,
        /// The function the instruction is in.
        function: String,
        /// Slot of the instruction in the section.
        insn: u64,
        /// Its opcode byte.
        code: u8,
        /// What the strict decoder refused.
        kind: DecodeErrorKind,
    },
    /// A program with its subprograms linked is longer than the loader accepts.
    #[error("program {program}: {insns} instructions after linking its subprograms exceeds the limit of {limit}")]
    ProgramTooLarge {
        /// The program's name.
        program: String,
        /// Its length in slots.
        insns: usize,
        /// The most slots a linked program may have.
        limit: usize,
    },
    /// A map declaration that cannot be used.
    #[error("map {map}: {reason}")]
    BadMap {
        /// The map's name.
        map: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A global-data section larger than the loader accepts.
    #[error("section {section}: {size} bytes of global data exceeds the limit of {limit} bytes")]
    GlobalDataTooLarge {
        /// The section's name.
        section: String,
        /// Its size in bytes.
        size: u64,
        /// The largest size accepted.
        limit: u64,
    },
    #[error(
        ".BTF.ext: the object carries {bytes} bytes of CO-RE relocations, which rdx does not \
         apply (no target kernel BTF on the control plane); build without \
         preserve_access_index / vmlinux.h types"
    )]
    /// CO-RE relocations, which need the target kernel's BTF.
    UnsupportedCoRe {
        /// Bytes of CO-RE relocation records in `.BTF.ext`.
        bytes: u32,
    },
    /// BTF-defined maps without a `.BTF` section to read them from.
    #[error("section .maps holds BTF-defined maps but the object has no .BTF section (compile with `-g`)")]
    MissingBtf,
    // Not `#[from]`: that would also make it the error's source, and reporters that print
    // the source chain (anyhow's `{:#}`) would say it twice.
    /// `.BTF` is malformed.
    #[error(".BTF: {0}")]
    Btf(BtfError),
}

impl From<BtfError> for LoadError {
    fn from(e: BtfError) -> Self {
        LoadError::Btf(e)
    }
}
