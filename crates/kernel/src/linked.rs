//! rdx's own loader output in the kernel: maps created from [`rdx_bpf::MapDef`]s and programs
//! whose `lddw` map references are indices (`BPF_PSEUDO_MAP_IDX[_VALUE]`, exactly the
//! kernel's encoding) loaded with an `fd_array`. Benchmarks use this to time the kernel's
//! verifier and JIT on the very instructions rdx runs; tests use it to check rdx's relocations
//! against libbpf's.

use std::os::fd::{AsFd, BorrowedFd};

use rdx_bpf::{MapDef, MapOrigin, Program};

use crate::error::{Errno, KernelError};
use crate::map::{KernelMap, MapSpec};
use crate::program::{KernelProgram, LoadOptions, LoadedProgram, ProgType};

/// `BPF_F_RDONLY_PROG`: the program may only read the map (libbpf sets it for `.rodata`).
const BPF_F_RDONLY_PROG: u32 = 1 << 7;

impl ProgType {
    /// The program type libbpf infers from a section name, for the sections rdx compares
    /// (`socket`, `xdp`, `tc`/`classifier`, with or without a `/suffix`).
    pub fn from_section(section: &str) -> Option<ProgType> {
        let base = section.split('/').next().unwrap_or(section);
        match base {
            "socket" => Some(ProgType::SocketFilter),
            "xdp" | "xdp.frags" => Some(ProgType::Xdp),
            "tc" | "classifier" | "tcx" => Some(ProgType::SchedCls),
            _ => None,
        }
    }
}

/// Creates one kernel map per definition, in order, so that index `i` of the result is map
/// index `i` of rdx's program. Global-data maps get their initial value; `.rodata` is made
/// read-only for programs and frozen, as libbpf does.
pub fn create_maps(defs: &[MapDef]) -> Result<Vec<KernelMap>, KernelError> {
    crate::probe()?;
    defs.iter().map(create_map).collect()
}

fn create_map(def: &MapDef) -> Result<KernelMap, KernelError> {
    let mut spec = MapSpec {
        name: def.name.clone(),
        map_type: def.map_type.to_kernel(),
        key_size: def.key_size,
        value_size: def.value_size,
        max_entries: def.max_entries,
        flags: def.flags,
    };
    if def.origin == MapOrigin::GlobalData && def.read_only {
        spec.flags |= BPF_F_RDONLY_PROG;
    }
    let map = KernelMap::create(&spec)?;
    if let Some(initial) = &def.initial_value {
        map.update(&0u32.to_le_bytes(), initial, 0)?;
    }
    if def.origin == MapOrigin::GlobalData && def.read_only {
        map.freeze()?;
    }
    Ok(map)
}

/// Loads one program as rdx's loader linked it. `maps` are the object's maps in order
/// (from [`create_maps`]).
pub fn load_linked(
    program: &Program,
    prog_type: ProgType,
    maps: &[KernelMap],
    license: &str,
    log_level: u32,
) -> Result<LoadedProgram, KernelError> {
    let raw = rdx_bpf::isa::encode(&program.insns);
    let fds: Vec<BorrowedFd<'_>> = maps.iter().map(|m| m.as_fd()).collect();
    let options = LoadOptions {
        license,
        fd_array: &fds,
        log_level,
        ..LoadOptions::default()
    };
    KernelProgram::load(&program.name, prog_type, &raw, &options)
}

impl KernelMap {
    /// Makes the map read-only for user space from now on (`BPF_MAP_FREEZE`).
    pub fn freeze(&self) -> Result<(), KernelError> {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain system call on a descriptor we own; no memory is passed.
        let ret = unsafe { libbpf_sys::bpf_map_freeze(self.as_fd().as_raw_fd()) };
        if ret < 0 {
            return Err(KernelError::Map {
                map: self.name().to_string(),
                operation: "BPF_MAP_FREEZE",
                errno: Errno::from_ret(ret),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_types_follow_libbpf_section_names() {
        assert_eq!(
            ProgType::from_section("socket"),
            Some(ProgType::SocketFilter)
        );
        assert_eq!(
            ProgType::from_section("socket/filter"),
            Some(ProgType::SocketFilter)
        );
        assert_eq!(ProgType::from_section("xdp"), Some(ProgType::Xdp));
        assert_eq!(ProgType::from_section("xdp/ingress"), Some(ProgType::Xdp));
        assert_eq!(ProgType::from_section("tc"), Some(ProgType::SchedCls));
        assert_eq!(ProgType::from_section("rdx/hook"), None);
        for t in [ProgType::SocketFilter, ProgType::SchedCls, ProgType::Xdp] {
            assert_eq!(ProgType::from_kernel(t.to_kernel()), t);
        }
    }
}
