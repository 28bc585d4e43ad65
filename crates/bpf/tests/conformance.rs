//! The ISA test vectors through the interpreter: every vector in `tests/` must produce its
//! `-- result`, in checked and in unchecked mode, and every vector in `negative/` must be
//! rejected (by the `.data` parser, the assembler, the decoder, preparation, a run-time error
//! or a result that differs from `-- result`).
//!
//! Two sets (`rdx_testdata::vectors`): rdx's own vectors, written from RFC 9669, always run;
//! the external bpf_conformance suite runs when `RDX_CONFORMANCE_DIR` or
//! `../shared/conformance` holds it, and is reported as skipped otherwise.

use rdx_bpf::asm::TestVector;
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Vm};
use rdx_bpf::maps::MapSet;
use rdx_testdata::vectors::{self, VectorFile, VectorSet};

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
    // Every set runs before the verdict, so a failure in one does not hide the other's.
    let mut failures = Vec::new();
    let mut count = 0;
    for set in vectors::all() {
        let all = set.positive();
        count += all.len();
        failures.extend(all.iter().filter_map(positive_vector_failure));
    }
    assert!(
        failures.is_empty(),
        "{} of {count} vectors failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Why a positive vector fails, if it does.
fn positive_vector_failure(f: &VectorFile) -> Option<String> {
    let name = &f.id;
    if let Err(e) = run(&f.text, true) {
        return Some(format!("{name}: {e}"));
    }
    if let Err(e) = run(&f.text, false) {
        return Some(format!("{name} (unchecked): {e}"));
    }
    // Where a vector carries both forms, the assembler must produce the raw bytes.
    let v = TestVector::parse(&f.text).unwrap();
    if let (Some(asm), Some(raw)) = (&v.asm, &v.raw) {
        let ours = rdx_bpf::isa::raw_to_bytes(&rdx_bpf::asm::assemble_raw(asm).unwrap());
        if &ours != raw {
            return Some(format!("{name}: assembly differs from -- raw"));
        }
    }
    None
}

#[test]
fn every_negative_vector_is_rejected() {
    let accepted: Vec<_> = vectors::all()
        .iter()
        .flat_map(|set| set.negative())
        .filter_map(|f| {
            run(&f.text, true)
                .ok()
                .map(|r0| format!("{}: r0 = {r0:#x}", f.id))
        })
        .collect();
    assert!(
        accepted.is_empty(),
        "negative vectors accepted:\n{}",
        accepted.join("\n")
    );
}

/// Why a negative vector of `set` is rejected.
fn rejection(set: &VectorSet, file_name: &str) -> String {
    run(&set.file("negative", file_name), true).unwrap_err()
}

#[test]
fn own_negative_vectors_fail_for_the_expected_reason() {
    // Each names the stage that must reject it, so a vector rejected by accident (a typo that
    // breaks the assembly of a program meant to fail at run time) is caught.
    let set = vectors::own();
    let cases = [
        ("asm-invalid-register.data", "invalid register"),
        ("asm-unknown-mnemonic.data", "invalid mnemonic"),
        ("asm-immediate-too-wide.data", "does not fit in 32 bits"),
        ("asm-offset-too-wide.data", "does not fit in 16 bits"),
        ("asm-undefined-label.data", "undefined label"),
        ("vector-unknown-section.data", "unknown section"),
        ("write-to-r10.data", "read-only frame pointer"),
        (
            "raw-unused-source-register.data",
            "unused source field must be zero",
        ),
        (
            "raw-exit-with-immediate.data",
            "unused immediate field must be zero",
        ),
        ("raw-undefined-opcode.data", "unknown opcode"),
        ("raw-legacy-packet-load.data", "legacy packet access"),
        (
            "raw-lddw-missing-second-slot.data",
            "malformed second slot of lddw",
        ),
        ("jump-into-lddw.data", "lands in the middle of an lddw"),
        ("jump-outside-program.data", "is outside the program"),
        (
            "read-uninitialized-register.data",
            "r3 is read before it holds a value",
        ),
        ("exit-without-r0.data", "r0 is read before it holds a value"),
        (
            "load-past-input-memory.data",
            "outside the program's memory",
        ),
        (
            "store-below-stack-frame.data",
            "outside the program's memory",
        ),
        ("atomic-misaligned.data", "not naturally aligned"),
        ("fall-off-end.data", "fell off the end"),
        ("unknown-helper.data", "unknown helper"),
        ("recursion-too-deep.data", "call depth"),
        (
            "wrong-result-mov32-sign-extension.data",
            "r0 = 0xffffffff, expected",
        ),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .filter_map(|(file, want)| {
            let why = rejection(&set, file);
            (!why.contains(want))
                .then(|| format!("{file}: rejected with `{why}`, expected `{want}`"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Every negative vector has its reason checked here.
    assert_eq!(
        set.negative().len(),
        cases.len(),
        "a negative vector without a reason above"
    );
}

#[test]
fn external_negative_vectors_fail_for_the_expected_reason() {
    // Spot checks that rejections come from the stage that should reject, not by accident.
    let Some(set) = vectors::external() else {
        return;
    };
    let why = |f: &str| rejection(&set, f);
    assert!(why("invalid_register.data").contains("invalid register"));
    assert!(why("error.data").contains("r0 is read before it holds a value"));
    assert!(why("unused-add64_imm-offset.data").contains("offset"));
    assert!(why("invalid_unknown_directive.data").contains("unknown section"));
    assert!(why("incorrect_return_value_high_bits.data").contains("expected"));
    assert!(why("invalid_label.data").contains("undefined label"));
}
