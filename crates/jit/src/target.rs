//! The code-generator target of each architecture ([`Arch`] itself is the region's, the one
//! both planes share).

use rdx_region::layout::Arch;

/// The Linux target triple code is generated for.
pub(crate) fn triple(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "x86_64-unknown-linux-gnu",
        Arch::Aarch64 => "aarch64-unknown-linux-gnu",
    }
}
