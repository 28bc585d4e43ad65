//! The bpf_conformance vectors through the interpreter: every vector in `tests/` must produce
//! its `-- result`, in checked and in unchecked mode, and every vector in `negative/` must be
//! rejected (by the `.data` parser, the assembler, the decoder, preparation, a run-time error
//! or a result that differs from `-- result`).
//!
//! The vectors live outside the repository: `RDX_CONFORMANCE_DIR`, or
//! `../../../shared/conformance` relative to this crate. Missing vectors fail the test.

use std::path::{Path, PathBuf};

use rdx_bpf::asm::TestVector;
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Vm};
use rdx_bpf::maps::MapSet;

fn conformance_dir() -> PathBuf {
    let dir = std::env::var_os("RDX_CONFORMANCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance")
        });
    assert!(
        dir.join("tests").is_dir(),
        "conformance vectors not found at {} (set RDX_CONFORMANCE_DIR)",
        dir.display()
    );
    dir
}

fn vectors(sub: &str) -> Vec<(String, String)> {
    let mut files: Vec<_> = std::fs::read_dir(conformance_dir().join(sub))
        .expect("vector directory is readable")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "data"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            // Vectors are ASCII, but a stray byte must not abort the whole suite.
            let text = String::from_utf8_lossy(&std::fs::read(&p).expect("vector is readable"))
                .into_owned();
            (name, text)
        })
        .collect()
}

/// Runs a vector; `Ok(r0)` or a description of why it was rejected.
fn run(text: &str, checked: bool) -> Result<u64, String> {
    let v = TestVector::parse(text).map_err(|e| format!("parse: {e}"))?;
    let insns = v.program()?;
    let vm = Vm::new(
        &insns,
        &MapSet::default(),
        &Helpers::conformance(),
        Config {
            max_steps: 1 << 20,
            ..Config::default()
        },
    )
    .map_err(|e| format!("prepare: {e}"))?;
    let mut mem = v.mem.clone().unwrap_or_default();
    let input = if v.mem.is_some() {
        Input::Bytes(&mut mem)
    } else {
        Input::Empty
    };
    let r0 = if checked {
        vm.run_checked(input)
    } else {
        // SAFETY: only called after the same vector ran to completion in checked mode; runs
        // are deterministic, so the unchecked run makes exactly the accesses that were checked.
        unsafe { vm.run_unchecked(input) }
    }
    .map_err(|e| format!("run: {e}"))?;
    if v.error.is_some() {
        return Err(format!("expected an error, got r0 = {r0:#x}"));
    }
    match v.result {
        Some(want) if want == r0 => Ok(r0),
        Some(want) => Err(format!("r0 = {r0:#x}, expected {want:#x}")),
        None => Err("no -- result section".into()),
    }
}

#[test]
fn every_positive_vector_passes() {
    let all = vectors("tests");
    assert!(
        all.len() >= 313,
        "expected at least 313 vectors, found {}",
        all.len()
    );
    let mut failures = Vec::new();
    for (name, text) in &all {
        match run(text, true) {
            Ok(_) => {
                if let Err(e) = run(text, false) {
                    failures.push(format!("{name} (unchecked): {e}"));
                }
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
        // Where a vector carries both forms, the assembler must produce the raw bytes.
        let v = TestVector::parse(text).unwrap();
        if let (Some(asm), Some(raw)) = (&v.asm, &v.raw) {
            let ours = rdx_bpf::isa::raw_to_bytes(&rdx_bpf::asm::assemble_raw(asm).unwrap());
            if &ours != raw {
                failures.push(format!("{name}: assembly differs from -- raw"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} vectors failed:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

#[test]
fn every_negative_vector_is_rejected() {
    let all = vectors("negative");
    assert!(!all.is_empty(), "no negative vectors found");
    let accepted: Vec<_> = all
        .iter()
        .filter_map(|(name, text)| {
            run(text, true)
                .ok()
                .map(|r0| format!("{name}: r0 = {r0:#x}"))
        })
        .collect();
    assert!(
        accepted.is_empty(),
        "negative vectors accepted:\n{}",
        accepted.join("\n")
    );
}

#[test]
fn negative_vectors_fail_for_the_expected_reason() {
    // Spot checks that rejections come from the stage that should reject, not by accident.
    let dir = conformance_dir().join("negative");
    let why = |f: &str| run(&std::fs::read_to_string(dir.join(f)).unwrap(), true).unwrap_err();
    assert!(why("invalid_register.data").contains("invalid register"));
    assert!(why("error.data").contains("r0 is read before it holds a value"));
    assert!(why("unused-add64_imm-offset.data").contains("offset"));
    assert!(why("invalid_unknown_directive.data").contains("unknown section"));
    assert!(why("incorrect_return_value_high_bits.data").contains("expected"));
    assert!(why("invalid_label.data").contains("undefined label"));
}
