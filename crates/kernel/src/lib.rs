//! `rdx-kernel`: the Linux kernel as a baseline.
//!
//! A small safe API over the `bpf()` system call for tests and benchmarks that compare rdx with
//! the kernel: create maps, load programs and run them with `BPF_PROG_TEST_RUN`.
//!
//! Two ways in:
//! - [`KernelObject::open`] loads an ELF object exactly as clang produced it through libbpf,
//!   the kernel's own loader, so a comparison with rdx does not depend on rdx's loader.
//! - [`KernelProgram::load`] loads a raw instruction array (for example rdx's generated code)
//!   with a program type, an optional `fd_array` for `lddw` map references by index, and an
//!   optional verifier log; it reports how long the kernel took to load it.
//!   [`create_maps`] and [`load_linked`] do the same for a program as rdx's own loader
//!   linked it (maps by index, global data with its initial values).
//!
//! [`oracle`] turns the kernel into a reference for other implementations: test inputs
//! (hand-built and seeded random frames) and the kernel's [`oracle::Outcome`] for each (r0,
//! packet, context fields, every map), with [`oracle::difference`] to explain a mismatch.
//!
//! Every program, however loaded, runs through [`test_run`] and every map is read through
//! [`KernelMap`]. When the `bpf()` system call cannot be used (not root, a kernel without BPF,
//! a seccomp filter), [`probe`] and every other entry point return
//! [`KernelError::Unavailable`] naming the reason, so a caller can skip with a printed message
//! instead of passing silently.
//!
//! What this crate must not do: load or run anything through rdx. It is the independent side
//! of every comparison. It also never attaches programs to real hooks; `BPF_PROG_TEST_RUN` is
//! the only way programs run.
//!
//! ```no_run
//! use rdx_kernel::{KernelObject, TestRunInput};
//! # fn main() -> Result<(), rdx_kernel::KernelError> {
//! rdx_kernel::probe()?;
//! let object = KernelObject::open("hello.o")?;
//! let packet = [0u8; 64];
//! let out = object.program("hello")?.test_run(&TestRunInput::packet(&packet))?;
//! println!("r0 = {}, {} ns", out.retval, out.duration.as_nanos());
//! # Ok(()) }
//! ```

mod error;
mod linked;
mod map;
mod object;
pub mod oracle;
mod program;
mod run;

pub use error::{Errno, KernelError};
pub use linked::{create_maps, load_linked};
pub use map::{map_type, KernelMap, MapSnapshot, MapSpec};
pub use object::{KernelObject, ObjectMap, ObjectProgram};
pub use program::{KernelProgram, LoadOptions, LoadedProgram, ProgType};
pub use run::{test_run, TestRunInput, TestRunOutput};

use std::sync::OnceLock;

/// Checks once per process that the `bpf()` system call can create a map and load a program.
///
/// Returns [`KernelError::Unavailable`] with the reason (errno and what it usually means)
/// when it cannot; callers print that reason and skip.
pub fn probe() -> Result<(), KernelError> {
    static PROBE: OnceLock<Result<(), KernelError>> = OnceLock::new();
    PROBE.get_or_init(probe_uncached).clone()
}

fn probe_uncached() -> Result<(), KernelError> {
    use rdx_bpf::isa::RawInsn;
    // A map and the smallest valid program: `r0 = 0; exit`.
    KernelMap::create_unprobed(&MapSpec::array("rdx_probe", 4, 4, 1))
        .map_err(|e| e.into_unavailable("BPF_MAP_CREATE"))?;
    let insns = [
        RawInsn::new(0xb7, 0, 0, 0, 0),
        RawInsn::new(0x95, 0, 0, 0, 0),
    ];
    KernelProgram::load_unprobed(
        "rdx_probe",
        ProgType::SocketFilter,
        &insns,
        &LoadOptions::default(),
    )
    .map_err(|e| e.into_unavailable("BPF_PROG_LOAD"))?;
    Ok(())
}
