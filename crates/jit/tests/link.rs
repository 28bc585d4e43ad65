//! The linker and the loader refuse bad artifacts with typed errors, before anything is
//! mapped executable.

use std::collections::HashMap;

use rdx_bpf::asm::assemble;
use rdx_jit::artifact::{ArtifactError, FORMAT_VERSION, HEADER_LEN};
use rdx_jit::link::{link, link_bytes, LinkTarget};
use rdx_jit::{
    Arch, Artifact, Build, CompileOptions, Compiler, ExecError, ExecutableCode, LinkError, Symbol,
};
use rdx_region::abi::RunState;

unsafe extern "C" fn twice(a: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    a * 2
}

fn artifact(arch: Arch) -> Artifact {
    let insns = assemble("mov %r1, 21\ncall 3\nlddw %r1, map 0\nexit")
        .unwrap_or_else(|_| assemble("mov %r1, 21\ncall 3\nexit").unwrap());
    Compiler::new(arch)
        .unwrap()
        .compile(&insns, &CompileOptions::new(arch, Build::Generic))
        .unwrap()
        .0
}

fn syms() -> HashMap<Symbol, u64> {
    let mut s = HashMap::new();
    s.insert(Symbol::Helper(3), twice as *const () as u64);
    s.insert(Symbol::Map(0), 0x1000);
    s
}

/// Executable anonymous mappings of this process.
fn exec_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')))
        .count()
}

#[test]
fn good_artifact_links_and_runs() {
    let host = Arch::host().unwrap();
    let bytes = artifact(host).to_bytes();
    let code = ExecutableCode::load_bytes(&bytes, &syms()).unwrap();
    let mut run = RunState::new(0);
    // SAFETY: the program only calls `twice`.
    let r0 = unsafe { code.call(std::ptr::null_mut(), &mut run) };
    assert_eq!(r0, 42);
    // Linking is deterministic and position-dependent only through relocations.
    let a = link_bytes(&bytes, LinkTarget::new(host), &syms(), 0x10000).unwrap();
    let b = link_bytes(&bytes, LinkTarget::new(host), &syms(), 0x10000).unwrap();
    assert_eq!(a, b);
}

#[test]
fn bad_artifacts_are_refused_before_mapping() {
    let host = Arch::host().unwrap();
    let other = if host == Arch::X86_64 {
        Arch::Aarch64
    } else {
        Arch::X86_64
    };
    let bytes = artifact(host).to_bytes();
    let before = exec_mappings();

    // Unresolved symbol, named.
    let mut missing = syms();
    missing.remove(&Symbol::Helper(3));
    match ExecutableCode::load_bytes(&bytes, &missing) {
        Err(ExecError::Link(LinkError::Unresolved(s))) => assert_eq!(s, vec![Symbol::Helper(3)]),
        other => panic!("expected unresolved helper:3, got {:?}", other.err()),
    }
    // Wrong architecture.
    let foreign = artifact(other).to_bytes();
    assert!(matches!(
        ExecutableCode::load_bytes(&foreign, &syms()),
        Err(ExecError::Link(LinkError::WrongArch { .. }))
    ));
    assert_eq!(
        link_bytes(&foreign, LinkTarget::new(host), &syms(), 0).unwrap_err(),
        LinkError::WrongArch {
            expected: host,
            found: other
        }
    );
    // Layout/format version the target does not run.
    let old = LinkTarget {
        arch: host,
        format_version: FORMAT_VERSION + 1,
    };
    assert!(matches!(
        link_bytes(&bytes, old, &syms(), 0),
        Err(LinkError::VersionMismatch { .. })
    ));
    let mut newer = bytes.clone();
    newer[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    assert!(matches!(
        ExecutableCode::load_bytes(&newer, &syms()),
        Err(ExecError::Link(LinkError::Artifact(
            ArtifactError::UnsupportedVersion { .. }
        )))
    ));
    // Tampered code byte.
    let mut tampered = bytes.clone();
    tampered[HEADER_LEN + 100] ^= 0x40;
    assert!(matches!(
        ExecutableCode::load_bytes(&tampered, &syms()),
        Err(ExecError::Link(LinkError::Artifact(
            ArtifactError::HashMismatch
        )))
    ));
    // Truncated anywhere.
    for len in [
        0,
        7,
        HEADER_LEN - 1,
        HEADER_LEN,
        bytes.len() / 2,
        bytes.len() - 1,
    ] {
        assert!(
            matches!(
                ExecutableCode::load_bytes(&bytes[..len], &syms()),
                Err(ExecError::Link(LinkError::Artifact(
                    ArtifactError::Truncated { .. }
                )))
            ),
            "truncated to {len}"
        );
    }
    // A misaligned load address.
    let parsed = Artifact::from_bytes(&bytes).unwrap();
    assert_eq!(
        link(&parsed, LinkTarget::new(host), &syms(), 0x1001).unwrap_err(),
        LinkError::MisalignedLoadAddress(0x1001)
    );

    assert_eq!(
        exec_mappings(),
        before,
        "a refused artifact left an executable mapping"
    );
}

#[test]
fn artifacts_are_process_independent_until_linked() {
    // The same source compiles to identical bytes; only relocations carry addresses.
    let host = Arch::host().unwrap();
    let a = artifact(host);
    let b = artifact(host);
    assert_eq!(a.to_bytes(), b.to_bytes());
    assert!(a.symbols.contains(&Symbol::Helper(3)));
    let l1 = link(&a, LinkTarget::new(host), &syms(), 0x10000).unwrap();
    let mut other = syms();
    other.insert(Symbol::Helper(3), 0xdead_beef_0000);
    let l2 = link(&a, LinkTarget::new(host), &other, 0x10000).unwrap();
    let differing: Vec<usize> = (0..l1.code.len())
        .filter(|&i| l1.code[i] != l2.code[i])
        .collect();
    let reloc = a
        .relocations
        .iter()
        .find(|r| a.symbol_of(r) == Some(&Symbol::Helper(3)))
        .unwrap();
    assert!(!differing.is_empty());
    assert!(differing
        .iter()
        .all(|&i| i >= reloc.offset as usize && i < reloc.offset as usize + 8));
}
