//! `rdx-bpf`: the eBPF toolchain both planes share — the instruction set (decoder, encoder,
//! disassembler, assembler), the object loader and the reference interpreter.
//!
//! This crate is pure: bytes in, programs and results out. It makes no system calls, maps
//! nothing executable and knows nothing of region layouts or transports, which keeps it
//! fuzzable and usable on the control plane and in tests alike. From `rdx-region` it takes
//! only the extension ABI both planes share: the helper table its helpers bind, the map types
//! and the native helper signature.

pub mod asm;
pub mod disasm;
pub mod helpers;
pub mod interp;
pub mod isa;
pub mod loader;
pub mod maps;
pub mod program;

pub use isa::{Insn, RawInsn};
pub use program::{MapDef, MapOrigin, Object, ObjectMapType, Program};
