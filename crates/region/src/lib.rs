//! `rdx-region`: the one source of truth for everything the control plane and the data plane
//! share — the region layout and the calling convention of native extension code.
//!
//! Like the kernel's `include/uapi/linux/bpf.h`, this crate holds `#[repr(C)]` definitions,
//! constants, size assertions and the pure arithmetic both sides need to agree on them
//! (section placement, the header check). It must not grow logic of either side: no
//! loaders, no compilers, no transports, no I/O.
//!
//! - [`abi`]: how native extension code is called and calls helpers.
//! - [`layout`]: the region's structures (header, the collective update record in page 0,
//!   context table, hook slots, thread slots, counters, XState meta table and map objects).
//! - [`geometry`]: where sections go for given capacities, and [`geometry::check_header`],
//!   which every reader runs before trusting a region.
//!
//! ```
//! use rdx_region::geometry::{plan, RegionParams};
//! use rdx_region::layout::SectionId;
//! let (sections, size) = plan(&RegionParams::default()).unwrap();
//! assert_eq!(sections[SectionId::Code as usize].end(), size);
//! ```

pub mod abi;
pub mod geometry;
pub mod layout;
