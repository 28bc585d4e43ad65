//! Reading and loading an object file named on the command line, with the path in every error.

use std::path::Path;

use anyhow::Context as _;
use rdx_bpf::loader::{self, LoadedObject};
use rdx_bpf::program::MapType;

pub fn load(path: &Path) -> anyhow::Result<LoadedObject> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    loader::load_detailed(&bytes).with_context(|| format!("cannot load {}", path.display()))
}

/// The kernel's name for a map type, without the `BPF_MAP_TYPE_` prefix, lower case.
pub fn map_type_name(t: MapType) -> String {
    match t {
        MapType::Hash => "hash".into(),
        MapType::Array => "array".into(),
        MapType::ProgArray => "prog_array".into(),
        MapType::PerCpuHash => "percpu_hash".into(),
        MapType::PerCpuArray => "percpu_array".into(),
        MapType::LpmTrie => "lpm_trie".into(),
        MapType::RingBuf => "ringbuf".into(),
        MapType::Other(n) => format!("type_{n}"),
    }
}

/// Bytes as contiguous lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
