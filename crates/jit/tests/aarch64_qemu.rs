//! aarch64 for real: every ISA test vector (rdx's own, and the external bpf_conformance suite
//! when it is present: `rdx_testdata::vectors`), compiled for aarch64 on this host, linked by
//! `rdx_jit::link` against the addresses the C harness (`harness/rdx_harness.c`) exports, and
//! run by that harness under `qemu-aarch64`. Results must equal the vectors' expected r0.
//! Both code generators run: the optimizing tier (also with elite artifacts) and
//! `Pipeline::Baseline` (also with 400 random programs of the differential generator,
//! `support/random_programs.rs`, and 200 of the patterns it fuses, `support/fused_programs.rs`,
//! checked against the interpreter's r0).
//!
//! Skips, printing why, only when the cross compiler or qemu is missing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rdx_bpf::asm::{assemble, TestVector};
use rdx_bpf::isa::{CallTarget, Insn};
use rdx_jit::link::{link_bytes, LinkTarget};
use rdx_jit::{Arch, Build, CompileOptions, Compiler, EntryAbi, HelperCalls, Pipeline, Symbol};

#[path = "support/random_programs.rs"]
#[allow(dead_code)]
mod random_programs;

#[path = "support/fused_programs.rs"]
mod fused_programs;

const CODE_BASE: u64 = 0x5000_0000;

fn find_tool(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names
        .iter()
        .flat_map(|n| std::env::split_paths(&path).map(move |d| d.join(n)))
        .find(|p| p.is_file())
}

struct Job {
    name: String,
    code: Vec<u8>,
    entry: u32,
    mem: Option<Vec<u8>>,
    budget: u64,
    want_r0: u64,
    want_status: u32,
    /// The deoptimisation slot an elite job must report (status 3).
    want_pc: u32,
}

fn write_jobs(jobs: &[Job], path: &Path) {
    let mut b = b"RDXH".to_vec();
    b.extend_from_slice(&(jobs.len() as u32).to_le_bytes());
    for j in jobs {
        b.extend_from_slice(&(j.name.len() as u16).to_le_bytes());
        b.extend_from_slice(j.name.as_bytes());
        b.extend_from_slice(&CODE_BASE.to_le_bytes());
        b.extend_from_slice(&(j.code.len() as u32).to_le_bytes());
        b.extend_from_slice(&j.entry.to_le_bytes());
        b.extend_from_slice(&j.code);
        match &j.mem {
            Some(m) => {
                b.extend_from_slice(&(m.len() as u32).to_le_bytes());
                b.extend_from_slice(m);
            }
            None => b.extend_from_slice(&u32::MAX.to_le_bytes()),
        }
        b.extend_from_slice(&j.budget.to_le_bytes());
    }
    std::fs::write(path, b).unwrap();
}

#[test]
fn conformance_vectors_pass_on_aarch64_under_qemu() {
    run_on_aarch64(Pipeline::Optimizing);
}

#[test]
fn baseline_conformance_vectors_pass_on_aarch64_under_qemu() {
    run_on_aarch64(Pipeline::Baseline);
}

fn run_on_aarch64(pipeline: Pipeline) {
    let tier = match pipeline {
        Pipeline::Baseline => "baseline",
        _ => "optimizing",
    };
    let Some(gcc) = find_tool(&["aarch64-linux-gnu-gcc"]) else {
        eprintln!("SKIPPED: aarch64-linux-gnu-gcc not found (apt install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)");
        return;
    };
    let Some(qemu) = find_tool(&["qemu-aarch64", "qemu-aarch64-static"]) else {
        eprintln!("SKIPPED: qemu-aarch64 not found (apt install qemu-user-static)");
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let harness = dir.join(format!("rdx_harness_aarch64_{tier}"));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("harness/rdx_harness.c");
    let st = Command::new(&gcc)
        .args(["-O2", "-static", "-Wall", "-Werror", "-o"])
        .arg(&harness)
        .arg(&src)
        .status()
        .expect("run the cross compiler");
    assert!(st.success(), "building the harness failed");

    let out = Command::new(&qemu)
        .arg(&harness)
        .arg("symbols")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "harness symbols: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut syms: HashMap<Symbol, u64> = HashMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let (name, addr) = line.split_once(' ').unwrap();
        let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16).unwrap();
        syms.insert(name.parse().unwrap(), addr);
    }

    let compiler = Compiler::new(Arch::Aarch64).unwrap();
    let mut jobs = Vec::new();
    let mut add = |name: String,
                   insns: &[Insn],
                   opts: &CompileOptions,
                   mem: Option<Vec<u8>>,
                   budget: u64,
                   want_r0: u64,
                   want_status: u32| {
        let mut opts = opts.clone();
        opts.pipeline = pipeline;
        let (artifact, _) = compiler
            .compile(insns, &opts)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // Through the serialised form, as the control plane ships it.
        let linked = link_bytes(
            &artifact.to_bytes(),
            LinkTarget::new(Arch::Aarch64),
            &syms,
            CODE_BASE,
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        jobs.push(Job {
            name,
            code: linked.code,
            entry: linked.entry_offset,
            mem,
            budget,
            want_r0,
            want_status,
            want_pc: 0,
        });
    };

    for f in rdx_testdata::vectors::all()
        .iter()
        .flat_map(|set| set.positive())
    {
        let v = TestVector::parse(&f.text).unwrap_or_else(|e| panic!("{}: {e}", f.id));
        let insns = v.program().unwrap_or_else(|e| panic!("{}: {e}", f.id));
        let mut opts = CompileOptions::new(Arch::Aarch64, Build::Generic);
        opts.entry_abi = EntryAbi::WithLength;
        let callx = insns
            .iter()
            .any(|i| matches!(i, Insn::Call(CallTarget::Reg(_))));
        if callx {
            opts.helper_calls = HelperCalls::Table { table_len: 16 };
        }
        // A `callx` may be a tail call, so such a program is always metered: it gets a budget.
        let budget = if callx { 1 << 20 } else { 0 };
        add(
            f.id,
            &insns,
            &opts,
            v.mem.clone(),
            budget,
            v.result.unwrap(),
            0,
        );
    }

    // Random programs of the differential generator, with the interpreter's r0 (which folds
    // in the stack) as the expected result: every ALU, jump, memory and atomic form with
    // random operands, immediates and offsets, metered and not.
    if pipeline == Pipeline::Baseline {
        use proptest::prelude::any;
        use proptest::strategy::{Strategy, ValueTree};
        use random_programs::{build, interpret, Raw, MEM};
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = (proptest::collection::vec(any::<Raw>(), 1..48), any::<u64>());
        for n in 0..400 {
            let (raw, seed) = strategy.new_tree(&mut runner).unwrap().current();
            let insns = build(&raw);
            let init: Vec<u8> = (0..MEM as u64)
                .map(|i| (seed.rotate_left(i as u32 * 7) ^ i) as u8)
                .collect();
            let want = interpret(&insns, &mut init.clone());
            let mut opts = CompileOptions::new(Arch::Aarch64, Build::Generic);
            opts.entry_abi = EntryAbi::WithLength;
            opts.needs_budget = n % 2 == 0;
            add(
                format!("random-{n}"),
                &insns,
                &opts,
                Some(init),
                1 << 20,
                want,
                0,
            );
        }
        let strategy = (
            proptest::collection::vec(any::<fused_programs::Pattern>(), 1..24),
            any::<u64>(),
        );
        for n in 0..200 {
            let (patterns, seed) = strategy.new_tree(&mut runner).unwrap().current();
            let insns = fused_programs::build(&patterns);
            let init: Vec<u8> = (0..MEM as u64)
                .map(|i| (seed.rotate_left(i as u32 * 5) ^ i) as u8)
                .collect();
            let want = interpret(&insns, &mut init.clone());
            let mut opts = CompileOptions::new(Arch::Aarch64, Build::Generic);
            opts.entry_abi = EntryAbi::WithLength;
            add(format!("fused-{n}"), &insns, &opts, Some(init), 0, want, 0);
        }
    }

    // Metering, helper arguments and local calls on aarch64.
    let lp = assemble("mov %r0, 0\nmov %r1, 1000\nadd %r0, 2\nsub %r1, 1\njne %r1, 0, -3\nexit")
        .unwrap();
    let mut metered = CompileOptions::new(Arch::Aarch64, Build::Generic);
    metered.needs_budget = true;
    add("budget-exhausted".into(), &lp, &metered, None, 100, 0, 1);
    add(
        "budget-enough".into(),
        &lp,
        &metered,
        None,
        1 << 20,
        2000,
        0,
    );
    // A packet-style counted loop (`src/loops.rs`): its latch compiled as an ordered compare,
    // its bounds check decided on entry. 64 bytes: the unchecked copy runs; 40 bytes: the
    // checked loop, which leaves at the end of the memory.
    let counted = assemble(
        "mov %r3, %r1\nadd %r3, %r2\nmov %r4, 0\nmov %r0, 0\nhead:\nmov %r5, %r1\nadd %r5, %r4\n\
         add %r5, 2\njgt %r5, %r3, out\nldxh %r6, [%r5-2]\nadd %r0, %r6\nadd %r4, 2\n\
         jne %r4, 64, head\nout:\nexit",
    )
    .unwrap();
    for len in [64usize, 40] {
        let mem: Vec<u8> = (0..len).map(|i| (i * 37 + 5) as u8).collect();
        let want = random_programs::interpret(&counted, &mut mem.clone());
        let mut o = CompileOptions::new(Arch::Aarch64, Build::Generic);
        o.entry_abi = EntryAbi::WithLength;
        add(
            format!("counted-loop-{len}"),
            &counted,
            &o,
            Some(mem),
            0,
            want,
            0,
        );
    }
    let calls = assemble(
        "mov %r1, 1\nmov %r2, 2\nmov %r3, 3\nmov %r4, 4\nmov %r5, 5\ncall 9\nmov %r6, %r0\nmov %r1, 7\ncall local sub\nadd %r0, %r6\nexit\nsub:\nmov %r0, %r1\nmul %r0, 100000\nexit",
    )
    .unwrap();
    {
        for (mode, name) in [
            (HelperCalls::Direct, "helpers-direct"),
            (HelperCalls::Table { table_len: 16 }, "helpers-table"),
        ] {
            let mut o = metered.clone();
            o.helper_calls = mode;
            add(name.into(), &calls, &o, None, 1 << 20, 712345, 0);
        }
    }

    // Tail calls (the harness's helper 12 succeeds for index 0 by setting the status to
    // TailCalled, 4): a failed one lets the program go on, a successful one returns at once,
    // from the entry function and from a subprogram. Such programs are always metered.
    let tail_main = assemble(
        "mov %r6, 0\nmov %r3, 1\ncall 12\nadd %r6, 1\nmov %r3, 0\ncall 12\nadd %r6, 100\n\
         mov %r0, %r6\nexit",
    )
    .unwrap();
    let tail_sub = assemble(
        "mov %r6, 5\ncall local sub\nmov %r0, 99\nexit\nsub:\nmov %r3, 0\ncall 12\nmov %r0, 7\nexit",
    )
    .unwrap();
    for (name, prog) in [("tail-call-main", &tail_main), ("tail-call-sub", &tail_sub)] {
        for (mode, how) in [
            (HelperCalls::Direct, "direct"),
            (HelperCalls::Table { table_len: 16 }, "table"),
        ] {
            let mut o = CompileOptions::new(Arch::Aarch64, Build::Generic);
            o.helper_calls = mode;
            add(format!("{name}-{how}"), prog, &o, None, 1 << 20, 0, 4);
        }
    }

    // Elite artifacts: the eBPF stack in the run area, a guard exit inside a subprogram
    // (status 3 = Deopt, the guard's slot handed over), and the same guard holding. The
    // baseline tier refuses elite builds (`CompileError::NotInBaseline`).
    let elite_prog = assemble(
        "mov %r6, 7\nstdw [%r10-8], 42\nmov %r1, %r10\nadd %r1, -8\ncall local, +2\n\
         add %r0, %r6\nexit\nldxdw %r0, [%r1]\nmov %r6, 100\njgt %r0, 40, +1\nexit\n\
         ldxdw %r3, [%r1]\nadd %r0, %r3\nexit",
    )
    .unwrap();
    for (name, expect, want_r0, want_status, want_pc) in [
        ("elite-guard-fails", rdx_jit::Expect::NotTaken, 0, 3, 9),
        ("elite-guard-holds", rdx_jit::Expect::Taken, 91, 0, 0),
    ]
    .into_iter()
    .filter(|_| pipeline != Pipeline::Baseline)
    {
        let o = CompileOptions::new(
            Arch::Aarch64,
            Build::Elite(rdx_jit::Speculation {
                guards: [(9, expect)].into_iter().collect(),
            }),
        );
        let (artifact, _) = compiler.compile(&elite_prog, &o).unwrap();
        let linked = link_bytes(
            &artifact.to_bytes(),
            LinkTarget::new(Arch::Aarch64),
            &syms,
            CODE_BASE,
        )
        .unwrap();
        jobs.push(Job {
            name: name.into(),
            code: linked.code,
            entry: linked.entry_offset,
            mem: None,
            budget: 0,
            want_r0,
            want_status,
            want_pc,
        });
    }

    // Inlined array lookups (the harness's map 0: 8 values, value i = 3 * i + 1): a hit, a miss
    // (NULL, then 99), and a masked key whose range check and NULL test the compiler drops.
    let mut inline_opts = CompileOptions::new(Arch::Aarch64, Build::Generic);
    inline_opts.entry_abi = EntryAbi::WithLength;
    inline_opts.pipeline = pipeline;
    inline_opts.inline_arrays.insert(
        0,
        rdx_jit::InlineArray {
            max_entries: 8,
            value_size: 8,
        },
    );
    for (name, mask, key, want) in [
        ("inline-array-hit", None, 3u32, 10u64),
        ("inline-array-miss", None, 8, 99),
        ("inline-array-masked", Some(7), 13, 16),
    ] {
        let (artifact, _) = compiler
            .compile(&array_lookup_program(mask), &inline_opts)
            .unwrap();
        assert!(!artifact.symbols.contains(&Symbol::Helper(1)), "{name}");
        let linked = link_bytes(
            &artifact.to_bytes(),
            LinkTarget::new(Arch::Aarch64),
            &syms,
            CODE_BASE,
        )
        .unwrap();
        jobs.push(Job {
            name: name.into(),
            code: linked.code,
            entry: linked.entry_offset,
            mem: Some(key.to_le_bytes().to_vec()),
            budget: 0,
            want_r0: want,
            want_status: 0,
            want_pc: 0,
        });
    }

    let job_file = dir.join(format!("aarch64_jobs_{tier}.bin"));
    write_jobs(&jobs, &job_file);
    let out = Command::new(&qemu)
        .arg(&harness)
        .arg("run")
        .arg(&job_file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "harness failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: HashMap<&str, (u64, u32, u32)> = stdout
        .lines()
        .map(|l| {
            let mut it = l.split(' ');
            let name = it.next().unwrap();
            let r0 = u64::from_str_radix(it.next().unwrap().trim_start_matches("0x"), 16).unwrap();
            let status = it.next().unwrap().parse().unwrap();
            let pc = it.next().unwrap().parse().unwrap();
            (name, (r0, status, pc))
        })
        .collect();
    let mut failures = Vec::new();
    for j in &jobs {
        match results.get(j.name.as_str()) {
            Some(&(r0, status, pc))
                if status == j.want_status
                    && (status != 0 || r0 == j.want_r0)
                    && (status != 3 || pc == j.want_pc) => {}
            other => failures.push(format!(
                "{}: got {other:?}, want r0 {:#x} status {} pc {}",
                j.name, j.want_r0, j.want_status, j.want_pc
            )),
        }
    }
    eprintln!("{} {tier}-tier jobs ran on aarch64 under qemu", jobs.len());
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// `key = *(u32 *)r1 [& mask]`, passed through the stack; `v = bpf_map_lookup_elem(map 0,
/// &key)`; `return v ? *v : 99`.
fn array_lookup_program(mask: Option<i32>) -> Vec<Insn> {
    use rdx_bpf::isa::{AluOp, ImmKind, JmpCond, Operand, Reg, Size, Width};
    let alu = |op, dst, src| Insn::Alu {
        width: Width::W64,
        op,
        dst: Reg(dst),
        src,
    };
    let mut p = vec![Insn::Load {
        size: Size::W,
        sign_extend: false,
        dst: Reg(3),
        base: Reg(1),
        off: 0,
    }];
    if let Some(m) = mask {
        p.push(alu(AluOp::And, 3, Operand::Imm(m)));
    }
    p.extend([
        Insn::Store {
            size: Size::W,
            base: Reg(10),
            off: -4,
            src: Operand::Reg(Reg(3)),
        },
        alu(AluOp::Mov, 2, Operand::Reg(Reg(10))),
        alu(AluOp::Add, 2, Operand::Imm(-4)),
        Insn::LoadImm64 {
            dst: Reg(1),
            kind: ImmKind::MapIdx,
            imm_lo: 0,
            imm_hi: 0,
        },
        Insn::LoadImm64Hi,
        Insn::Call(CallTarget::Helper(1)),
        Insn::Jmp {
            width: Width::W64,
            cond: JmpCond::Ne,
            dst: Reg(0),
            src: Operand::Imm(0),
            off: 2,
        },
        alu(AluOp::Mov, 0, Operand::Imm(99)),
        Insn::Exit,
        Insn::Load {
            size: Size::DW,
            sign_extend: false,
            dst: Reg(0),
            base: Reg(0),
            off: 0,
        },
        Insn::Exit,
    ]);
    p
}
