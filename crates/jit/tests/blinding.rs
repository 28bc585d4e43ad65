//! Constant blinding: a program full of constants of its choosing (gadget bytes, as a JIT
//! spraying attack would pick them) compiles to code in which no 4-byte window of any of
//! them, nor of what folding two of them gives, appears; in both tiers, for both targets.
//! Without blinding the same constants do appear on x86-64 (the check can fail), and
//! blinded code computes what the interpreter computes.

use std::collections::HashMap;

use rdx_bpf::helpers::Helpers;
use rdx_bpf::interp::{Config, Input, Vm};
use rdx_bpf::maps::MapSet;
use rdx_jit::{Arch, Build, CompileOptions, Compiler, EntryAbi, ExecutableCode, Pipeline};
use rdx_region::abi::RunState;

/// 64-bit constants: `mov rax, imm32; ret`-style gadget bytes and others with no 0x00,
/// 0xff or 0xcc byte (so that any window of them is distinctive).
const WIDE: [u64; 4] = [
    0xc300_0042_48c0_c748,
    0x050f_5841_5a5e_5f58,
    0x9d8e_7f6a_5b4c_3d2e,
    0x1122_3344_5566_7788,
];

/// 32-bit immediates (ALU, jumps, stores), with no 0x00, 0xff or 0xcc byte.
const NARROW: [u32; 12] = [
    0x050f_c358,
    0x3d2e_1f10,
    0x6b5a_4938,
    0x1726_3544,
    0x7a6b_5c4d,
    0x2314_0516,
    0x5f4e_3d2c,
    0x0a1b_2c3d,
    0x4a3b_2c1d,
    0x1e2f_3a4b,
    0x6c5d_4e3f,
    0x2b3c_4d5e,
];

fn program() -> String {
    let [a, b, c, d] = WIDE;
    let n = NARROW;
    format!(
        "ldxdw %r9, [%r1]
         lddw %r1, {a:#x}
         add %r1, %r9
         lddw %r2, {b:#x}
         xor %r2, %r9
         lddw %r3, {c:#x}
         xor %r3, {x0:#x}
         add %r3, %r9
         lddw %r4, {d:#x}
         add %r4, {x1:#x}
         sub %r4, %r9
         mov %r5, %r9
         add %r5, {x2:#x}
         mov32 %r6, %r9
         xor32 %r6, {x3:#x}
         add %r5, {x4:#x}
         sub %r6, {x5:#x}
         and %r1, {x6:#x}
         or %r2, {x7:#x}
         mul %r5, {x8:#x}
         div32 %r6, {x9:#x}
         jeq %r1, {x10:#x}, skip
         stdw [%r10-8], 0
         stw [%r10-8], {x11:#x}
         stdw [%r10-16], {x1:#x}
         ldxdw %r7, [%r10-8]
         add %r1, %r7
         ldxdw %r7, [%r10-16]
         add %r2, %r7
     skip:
         mov %r0, %r1
         xor %r0, %r2
         xor %r0, %r3
         xor %r0, %r4
         xor %r0, %r5
         xor %r0, %r6
         exit",
        x0 = n[0],
        x1 = n[1],
        x2 = n[2],
        x3 = n[3],
        x4 = n[4],
        x5 = n[5],
        x6 = n[6],
        x7 = n[7],
        x8 = n[8],
        x9 = n[9],
        x10 = n[10],
        x11 = n[11],
    )
}

/// Every byte sequence no blinded code may contain: each 4-byte window of each constant,
/// and of the values folding pairs of them gives (`c ^ n0`, `d + n1`).
fn chosen_windows() -> Vec<Vec<u8>> {
    let sext = |v: u32| v as i32 as i64 as u64;
    let mut values: Vec<Vec<u8>> = WIDE.iter().map(|v| v.to_le_bytes().to_vec()).collect();
    values.extend(NARROW.iter().map(|v| v.to_le_bytes().to_vec()));
    values.push((WIDE[2] ^ sext(NARROW[0])).to_le_bytes().to_vec());
    values.push(WIDE[3].wrapping_add(sext(NARROW[1])).to_le_bytes().to_vec());
    values
        .iter()
        .flat_map(|v| v.windows(4).map(<[u8]>::to_vec).collect::<Vec<_>>())
        .collect()
}

fn compile(arch: Arch, pipeline: Pipeline, blind: bool) -> Vec<u8> {
    let insns = rdx_bpf::asm::assemble(&program()).unwrap();
    let mut opts = CompileOptions::new(arch, Build::Generic);
    opts.pipeline = pipeline;
    opts.blind_constants = blind;
    opts.entry_abi = EntryAbi::WithLength;
    let (artifact, _) = Compiler::new(arch).unwrap().compile(&insns, &opts).unwrap();
    artifact.code
}

fn found(code: &[u8]) -> Vec<String> {
    chosen_windows()
        .iter()
        .filter(|w| code.windows(w.len()).any(|c| c == w.as_slice()))
        .map(|w| format!("{w:02x?}"))
        .collect()
}

const TIERS: [Pipeline; 3] = [Pipeline::Optimizing, Pipeline::Fast, Pipeline::Baseline];

#[test]
fn no_window_of_a_chosen_constant_appears_in_blinded_code() {
    for arch in [Arch::X86_64, Arch::Aarch64] {
        for tier in TIERS {
            let code = compile(arch, tier, true);
            let hits = found(&code);
            assert!(hits.is_empty(), "{arch} {tier:?}: {hits:?}");
        }
    }
}

#[test]
fn without_blinding_the_constants_do_appear_on_x86_64() {
    for tier in TIERS {
        let hits = found(&compile(Arch::X86_64, tier, false));
        assert!(hits.len() >= 8, "{tier:?}: only {hits:?}");
    }
}

#[test]
fn each_compilation_draws_new_keys() {
    let a = compile(Arch::X86_64, Pipeline::Optimizing, true);
    let b = compile(Arch::X86_64, Pipeline::Optimizing, true);
    assert_ne!(a, b);
    let a = compile(Arch::X86_64, Pipeline::Baseline, true);
    let b = compile(Arch::X86_64, Pipeline::Baseline, true);
    assert_ne!(a, b);
}

#[test]
fn blinded_code_computes_what_the_interpreter_computes() {
    let Some(host) = Arch::host() else { return };
    let insns = rdx_bpf::asm::assemble(&program()).unwrap();
    let vm = Vm::new(
        &insns,
        &MapSet::new(&[]).unwrap(),
        &Helpers::standard(),
        Config::default(),
    )
    .unwrap();
    let input = 0x0123_4567_89ab_cdefu64.to_le_bytes();
    let want = vm.run_checked(Input::Bytes(&mut input.clone())).unwrap();
    for tier in TIERS {
        for blind in [true, false] {
            let mut opts = CompileOptions::new(host, Build::Generic);
            opts.pipeline = tier;
            opts.blind_constants = blind;
            opts.entry_abi = EntryAbi::WithLength;
            let (artifact, _) = Compiler::new(host).unwrap().compile(&insns, &opts).unwrap();
            let code = ExecutableCode::load_bytes(
                &artifact.to_bytes(),
                &HashMap::<rdx_jit::Symbol, u64>::new(),
            )
            .unwrap();
            let mut mem = input;
            let mut run = RunState::new(0);
            // SAFETY: the program reads its 8 bytes of memory and touches its stack.
            let r0 = unsafe { code.call_with_len(mem.as_mut_ptr(), &mut run, 8) };
            assert_eq!(r0, want, "{tier:?}, blind {blind}");
        }
    }
}

/// Every ALU operation and jump with a blinded immediate, in both widths, against the
/// interpreter.
#[test]
fn each_operation_with_a_blinded_immediate_matches_the_interpreter() {
    let Some(host) = Arch::host() else { return };
    let mut failures = Vec::new();
    let ops = [
        "mov", "add", "sub", "mul", "div", "mod", "or", "and", "xor", "sdiv", "smod",
    ];
    let mut sources = Vec::new();
    for op in ops {
        for width in ["", "32"] {
            for imm in [0x3d2e_1f10u32, 0x9a8b_7c6d] {
                sources.push(format!(
                    "lddw %r1, 0x9d8e7f6a5b4c3d2e\n{op}{width} %r1, {imm:#x}\nmov %r0, %r1\nexit"
                ));
            }
        }
    }
    for cond in ["jeq", "jgt", "jsgt", "jset", "jlt"] {
        for width in ["", "32"] {
            sources.push(format!(
                "lddw %r1, 0x9d8e7f6a5b4c3d2e\nmov %r0, 1\n{cond}{width} %r1, 0x5b4c3d2e, +1\nmov %r0, 2\nexit"
            ));
        }
    }
    for size in ["w", "dw"] {
        sources.push(format!(
            "stdw [%r10-8], 0\nst{size} [%r10-8], 0x9a8b7c6d\nldxdw %r0, [%r10-8]\nexit"
        ));
    }
    for src in &sources {
        let insns = rdx_bpf::asm::assemble(src).unwrap();
        let vm = Vm::new(
            &insns,
            &MapSet::new(&[]).unwrap(),
            &Helpers::standard(),
            Config::default(),
        )
        .unwrap();
        let want = vm.run_checked(Input::Bytes(&mut [0u8; 8])).unwrap();
        for tier in TIERS {
            let mut opts = CompileOptions::new(host, Build::Generic);
            opts.pipeline = tier;
            opts.entry_abi = EntryAbi::WithLength;
            let (artifact, _) = Compiler::new(host).unwrap().compile(&insns, &opts).unwrap();
            let code = ExecutableCode::load_bytes(
                &artifact.to_bytes(),
                &HashMap::<rdx_jit::Symbol, u64>::new(),
            )
            .unwrap();
            let mut mem = [0u8; 8];
            let mut run = RunState::new(0);
            // SAFETY: the program touches only its stack.
            let r0 = unsafe { code.call_with_len(mem.as_mut_ptr(), &mut run, 8) };
            if r0 != want {
                failures.push(format!("{tier:?}: {src:?}: {r0:#x}, want {want:#x}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
