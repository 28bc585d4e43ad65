//! `rdx-region`: the one source of truth for everything the control plane and the data plane
//! share — the region layout and the calling convention of native extension code.
//!
//! Like the kernel's `include/uapi/linux/bpf.h`, this crate holds `#[repr(C)]` definitions,
//! constants and size assertions only. It must not grow logic of either side: no loaders, no
//! compilers, no transports.

pub mod abi;
