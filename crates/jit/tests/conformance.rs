//! Every ISA test vector through the JIT on this host, in both code generators (the
//! optimizing tier and `Pipeline::Baseline`), compared with the expected result and with the
//! interpreter on the same input.
//!
//! Two sets (`rdx_testdata::vectors`): rdx's own vectors, written from RFC 9669, always run;
//! the external bpf_conformance suite runs when `RDX_CONFORMANCE_DIR` or
//! `../shared/conformance` holds it, and is reported as skipped otherwise.

use std::collections::HashMap;

use rdx_bpf::asm::TestVector;
use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Vm};
use rdx_bpf::maps::MapSet;
use rdx_jit::{
    Arch, Build, CompileOptions, Compiler, EntryAbi, ExecutableCode, HelperCalls, Pipeline, Symbol,
};
use rdx_region::abi::RunState;

/// Helper 5 of the conformance suite ("unwind"): returns its first argument.
unsafe extern "C" fn unwind(a: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    a
}

const TABLE_LEN: u32 = 16;

/// Every positive vector of every present set, parsed, named by its `set/stem` id.
fn vectors() -> Vec<(String, TestVector)> {
    rdx_testdata::vectors::all()
        .iter()
        .flat_map(|set| set.positive())
        .map(|f| {
            let v = TestVector::parse(&f.text).unwrap_or_else(|e| panic!("{}: {e}", f.id));
            (f.id, v)
        })
        .collect()
}

fn interpret(v: &TestVector) -> Result<u64, String> {
    let insns = v.program()?;
    let vm = Vm::new(
        &insns,
        &MapSet::default(),
        &Helpers::conformance(),
        Config::default(),
    )
    .map_err(|e| e.to_string())?;
    let mut mem = v.mem.clone().unwrap_or_default();
    let input = if v.mem.is_some() {
        Input::Bytes(&mut mem)
    } else {
        Input::Empty
    };
    vm.run_checked(input).map_err(|e| e.to_string())
}

fn jit(
    compiler: &Compiler,
    pipeline: Pipeline,
    v: &TestVector,
    helper_calls: HelperCalls,
    table: &[u64],
) -> Result<u64, String> {
    let insns = v.program()?;
    let mut opts = CompileOptions::new(compiler.arch(), Build::Generic);
    opts.entry_abi = EntryAbi::WithLength;
    opts.helper_calls = helper_calls;
    opts.pipeline = pipeline;
    let (artifact, _) = compiler.compile(&insns, &opts).map_err(|e| e.to_string())?;
    let mut syms = HashMap::new();
    syms.insert(Symbol::Helper(5), unwind as *const () as u64);
    syms.insert(
        Symbol::Var("rdx_helper_table".into()),
        table.as_ptr() as u64,
    );
    let code =
        ExecutableCode::load_bytes(&artifact.to_bytes(), &syms).map_err(|e| e.to_string())?;
    let mut mem = v.mem.clone().unwrap_or_default();
    let (ptr, len) = if v.mem.is_some() {
        (mem.as_mut_ptr(), mem.len() as u64)
    } else {
        (std::ptr::null_mut(), 0)
    };
    // Programs with a `callx` (which may be a tail call) are always metered: a budget no
    // vector comes near.
    let mut run = RunState::new(1 << 30);
    // SAFETY: the vectors are conformance programs that touch only their memory and stack;
    // each has just run to completion in the checked interpreter.
    let r0 = unsafe { code.call_with_len(ptr, &mut run, len) };
    if run.status != 0 {
        return Err(format!("stopped with status {}", run.status));
    }
    Ok(r0)
}

#[test]
fn every_vector_matches_the_interpreter_and_the_expected_result() {
    every_vector_matches(Pipeline::Optimizing);
}

#[test]
fn baseline_every_vector_matches_the_interpreter_and_the_expected_result() {
    every_vector_matches(Pipeline::Baseline);
}

fn every_vector_matches(pipeline: Pipeline) {
    let host = Arch::host().expect("supported host");
    let compiler = Compiler::new(host).unwrap();
    let mut table = vec![0u64; TABLE_LEN as usize];
    table[5] = unwind as *const () as u64;
    let all = vectors();
    let mut failures = Vec::new();
    for (name, v) in &all {
        let want = v.result.expect("positive vectors carry a result");
        match interpret(v) {
            Ok(r) if r == want => {}
            other => failures.push(format!(
                "{name}: interpreter gave {other:?}, expected {want:#x}"
            )),
        }
        let uses_callx = v.program().unwrap().iter().any(|i| {
            matches!(
                i,
                rdx_bpf::isa::Insn::Call(rdx_bpf::isa::CallTarget::Reg(_))
            )
        });
        let mut modes = vec![HelperCalls::Table {
            table_len: TABLE_LEN,
        }];
        if !uses_callx {
            modes.push(HelperCalls::Direct);
        }
        for mode in modes {
            match jit(&compiler, pipeline, v, mode, &table) {
                Ok(r) if r == want => {}
                other => failures.push(format!(
                    "{name} ({pipeline:?}, {mode:?}): JIT gave {other:?}, expected {want:#x}"
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
