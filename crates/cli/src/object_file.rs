//! Reading and loading an object file named on the command line, with the path in every error.

use std::path::Path;

use anyhow::Context as _;
use rdx_bpf::loader::{self, LoadedObject};
use rdx_bpf::program::ObjectMapType;
use rdx_region::layout::MapType;

pub fn load(path: &Path) -> anyhow::Result<LoadedObject> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    loader::load_detailed(&bytes).with_context(|| format!("cannot load {}", path.display()))
}

/// The kernel's name for a map type, without the `BPF_MAP_TYPE_` prefix, lower case.
pub fn map_type_name(t: ObjectMapType) -> String {
    let ObjectMapType::Supported(t) = t else {
        return format!("type_{}", t.to_kernel());
    };
    match t {
        MapType::Hash => "hash",
        MapType::Array => "array",
        MapType::ProgArray => "prog_array",
        MapType::PerThreadHash => "percpu_hash",
        MapType::PerThreadArray => "percpu_array",
        MapType::LpmTrie => "lpm_trie",
        MapType::RingBuf => "ringbuf",
    }
    .into()
}

/// Bytes as contiguous lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
