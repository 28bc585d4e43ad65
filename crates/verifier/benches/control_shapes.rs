//! Instructions processed and verification time on the control-plane bench's programs
//! (`crates/control/benches/injection.rs`: the same generators, reproduced here so that the
//! verifier can be measured without a host) and on the ACL enforcement program
//! (`bpf/acl/enforce.c`), against the kernel's processed count and load time for the same
//! instructions in the same run.
//!
//! Run: `cargo bench -p rdx-verifier --bench control_shapes` (as root for the kernel column;
//! without `bpf()` it prints `n/a`). `-- --reps N` sets the repetitions (median; default 3);
//! `-- --no-kernel` leaves the kernel out.
//! The ACL program runs at an rdx hook whose context the kernel does not have, so it has no
//! kernel column.

use rdx_bpf::isa::{AluOp, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width};
use rdx_bpf::{MapDef, MapOrigin, MapType, Program};
use rdx_verifier::{verify_insns, EimSpec, VerifyOptions};
use std::time::{Duration, Instant};

/// The control bench's EIM: hook `on_request`, class `default`.
const EIM: &str = "\
version: 1
hooks:
  - name: on_request
    context:
      size: 16
      fields:
        - {name: value, offset: 0, size: 8, access: read}
        - {name: out, offset: 8, size: 8, access: read_write}
classes:
  - name: default
    hook: on_request
    context: {read: [value, out], write: [out]}
    helpers: [map_lookup_elem, map_update_elem]
    instructions: 4000000
    xstate_bytes: 1048576
";

fn alu(op: AluOp, dst: u8, src: Operand) -> Insn {
    Insn::Alu {
        width: Width::W64,
        op,
        dst: Reg(dst),
        src,
    }
}
fn imm(v: i32) -> Operand {
    Operand::Imm(v)
}
fn reg(r: u8) -> Operand {
    Operand::Reg(Reg(r))
}
fn jmp(cond: JmpCond, dst: u8, src: Operand, off: i16) -> Insn {
    Insn::Jmp {
        width: Width::W64,
        cond,
        dst: Reg(dst),
        src,
        off,
    }
}
fn lookup(out: &mut Vec<Insn>) {
    out.push(alu(AluOp::Mov, 2, reg(10)));
    out.push(alu(AluOp::Add, 2, imm(-4)));
    out.push(Insn::LoadImm64 {
        dst: Reg(1),
        kind: ImmKind::MapIdx,
        imm_lo: 0,
        imm_hi: 0,
    });
    out.push(Insn::LoadImm64Hi);
    out.push(Insn::Call(CallTarget::Helper(1)));
}

/// `r0 = lookup(map 0, key)`, null-checked: adds the value to r6.
fn map_access(out: &mut Vec<Insn>, key: i32) {
    out.push(Insn::Store {
        size: Size::W,
        base: Reg(10),
        off: -4,
        src: imm(key & 3),
    });
    lookup(out);
    out.push(jmp(JmpCond::Eq, 0, imm(0), 2));
    out.push(Insn::Load {
        size: Size::DW,
        sign_extend: false,
        dst: Reg(1),
        base: Reg(0),
        off: 0,
    });
    out.push(alu(AluOp::Add, 6, reg(1)));
}

#[derive(Clone, Copy)]
enum Shape {
    MapAccesses,
    DeepBranching,
    Unrolled,
}

/// One function `f(acc = r1, value = r2) -> acc'` of about `len` instructions.
fn function(len: usize, shape: Shape, seed: i32) -> Vec<Insn> {
    let mut f = vec![alu(AluOp::Mov, 6, reg(1)), alu(AluOp::Mov, 7, reg(2))];
    let mut i = seed;
    let mut step = 0usize;
    while f.len() + 3 < len {
        i = i.wrapping_mul(1_103_515_245).wrapping_add(12345) & 0x7fff;
        step += 1;
        let pick = match shape {
            Shape::MapAccesses => [0, 0, 2, 0, 2][step % 5],
            Shape::DeepBranching => [0, 1, 0, 2][step % 4],
            Shape::Unrolled => usize::from(step.is_multiple_of(32)) * 2,
        };
        match pick {
            0 => {
                f.push(alu(AluOp::Add, 6, reg(7)));
                f.push(alu(AluOp::Xor, 6, imm(i)));
                f.push(alu(AluOp::Mul, 6, imm(3)));
                f.push(alu(AluOp::Rsh, 6, imm(1)));
            }
            1 => {
                f.push(alu(AluOp::Mov, 8, reg(7)));
                f.push(alu(AluOp::Xor, 8, imm(i)));
                f.push(jmp(JmpCond::Gt, 8, imm(i), 3));
                f.push(alu(AluOp::Xor, 6, imm(i | 1)));
                f.push(alu(AluOp::Mov, 8, imm(0)));
                f.push(Insn::Ja { off: 6 });
                f.push(jmp(JmpCond::Set, 8, imm(1 << (i % 16)), 3));
                f.push(alu(AluOp::Add, 6, imm(-2)));
                f.push(alu(AluOp::Mov, 8, imm(0)));
                f.push(Insn::Ja { off: 2 });
                f.push(alu(AluOp::Add, 6, imm(1)));
                f.push(alu(AluOp::Mov, 8, imm(0)));
            }
            _ => map_access(&mut f, i),
        }
    }
    f.push(alu(AluOp::Mov, 0, reg(6)));
    f.push(Insn::Exit);
    f
}

/// A program of about `functions * body` instructions whose main loop runs `trips` times.
fn generate(functions: usize, body: usize, trips: i32, shape: Shape) -> Vec<Insn> {
    let bodies: Vec<Vec<Insn>> = (0..functions)
        .map(|k| function(body, shape, 7 + k as i32))
        .collect();
    let mut main = vec![alu(AluOp::Mov, 6, imm(0))];
    main.push(Insn::Store {
        size: Size::W,
        base: Reg(10),
        off: -4,
        src: imm(0),
    });
    lookup(&mut main);
    let exit_jump = main.len();
    main.push(Insn::Exit); // placeholder: if r0 == 0 goto out
    main.push(Insn::Load {
        size: Size::DW,
        sign_extend: false,
        dst: Reg(7),
        base: Reg(0),
        off: 0,
    });
    main.push(alu(AluOp::Mov, 8, imm(0)));
    let loop_head = main.len();
    let mut calls = Vec::new();
    for _ in 0..functions {
        main.push(alu(AluOp::Mov, 1, reg(6)));
        main.push(alu(AluOp::Mov, 2, reg(7)));
        calls.push(main.len());
        main.push(Insn::Call(CallTarget::Local(0)));
        main.push(alu(AluOp::Mov, 6, reg(0)));
    }
    main.push(alu(AluOp::Add, 8, imm(1)));
    let back = main.len();
    main.push(jmp(
        JmpCond::Lt,
        8,
        imm(trips),
        (loop_head as i64 - back as i64 - 1) as i16,
    ));
    let out = main.len();
    main[exit_jump] = jmp(JmpCond::Eq, 0, imm(0), (out - exit_jump - 1) as i16);
    main.push(alu(AluOp::Mov, 0, reg(6)));
    main.push(alu(AluOp::And, 0, imm(1)));
    main.push(Insn::Exit);
    let mut prog = main;
    for (k, b) in bodies.into_iter().enumerate() {
        let start = prog.len();
        prog[calls[k]] = Insn::Call(CallTarget::Local((start - calls[k] - 1) as i32));
        prog.extend(b);
    }
    prog
}

/// `2^splits` paths, each with its own exact map-value offset, through a `len`-instruction body.
fn path_sensitive(len: usize, splits: u32, seed: i32) -> Vec<Insn> {
    let mut p = vec![
        alu(AluOp::Mov, 6, imm(0)),
        Insn::Store {
            size: Size::W,
            base: Reg(10),
            off: -4,
            src: imm(0),
        },
    ];
    lookup(&mut p);
    let exit_jump = p.len();
    p.push(Insn::Exit); // placeholder: if r0 == 0 goto out
    p.push(alu(AluOp::Mov, 9, reg(0)));
    p.push(Insn::Load {
        size: Size::DW,
        sign_extend: false,
        dst: Reg(7),
        base: Reg(9),
        off: 0,
    });
    p.push(alu(AluOp::Mov, 6, reg(7)));
    p.push(alu(AluOp::Mov, 8, imm(0)));
    for k in 0..splits {
        p.push(jmp(JmpCond::Set, 7, imm(1 << k), 1));
        p.push(Insn::Ja { off: 1 });
        p.push(alu(AluOp::Add, 8, imm(8 << k)));
    }
    let mut i = seed;
    let mut step = 0usize;
    let load = |dst: u8, base: u8, off: i16| Insn::Load {
        size: Size::DW,
        sign_extend: false,
        dst: Reg(dst),
        base: Reg(base),
        off,
    };
    while p.len() + 12 < len {
        i = i.wrapping_mul(1_103_515_245).wrapping_add(12345) & 0x7fff;
        step += 1;
        let slot = i16::try_from((i % 64) * 8).expect("small");
        match [0, 1, 2, 0, 3, 1, 0, 2][step % 8] {
            0 => {
                p.push(alu(AluOp::Mov, 1, reg(9)));
                p.push(alu(AluOp::Add, 1, reg(8)));
                p.push(load(2, 1, slot));
                p.push(alu(AluOp::Add, 6, reg(2)));
                p.push(alu(AluOp::Xor, 6, imm(i)));
            }
            1 => {
                p.push(alu(AluOp::Mov, 1, reg(9)));
                p.push(alu(AluOp::Add, 1, reg(8)));
                p.push(Insn::Store {
                    size: Size::DW,
                    base: Reg(1),
                    off: slot,
                    src: reg(6),
                });
                p.push(alu(AluOp::Mul, 6, imm(3)));
            }
            2 => {
                p.push(alu(AluOp::Mov, 3, reg(6)));
                p.push(alu(AluOp::And, 3, imm(7)));
                p.push(alu(AluOp::Lsh, 3, imm(3)));
                p.push(alu(AluOp::Mov, 1, reg(9)));
                p.push(alu(AluOp::Add, 1, reg(3)));
                p.push(load(3, 1, 0));
                p.push(jmp(JmpCond::Gt, 3, imm(63), 5));
                p.push(alu(AluOp::Lsh, 3, imm(3)));
                p.push(alu(AluOp::Mov, 1, reg(9)));
                p.push(alu(AluOp::Add, 1, reg(3)));
                p.push(load(2, 1, 0));
                p.push(alu(AluOp::Xor, 6, reg(2)));
                p.push(alu(AluOp::Mov, 3, imm(0)));
                p.push(alu(AluOp::Mov, 2, imm(0)));
                p.push(alu(AluOp::Mov, 1, imm(0)));
            }
            _ => {
                p.push(jmp(JmpCond::Set, 6, imm(1 << (i % 16)), 2));
                p.push(alu(AluOp::Add, 6, reg(7)));
                p.push(Insn::Ja { off: 1 });
                p.push(alu(AluOp::Xor, 6, reg(7)));
            }
        }
    }
    let out = p.len();
    p[exit_jump] = jmp(JmpCond::Eq, 0, imm(0), (out - exit_jump - 1) as i16);
    p.push(alu(AluOp::Mov, 0, reg(6)));
    p.push(alu(AluOp::And, 0, imm(1)));
    p.push(Insn::Exit);
    p
}

fn array(name: &str, value_size: u32, max_entries: u32) -> MapDef {
    MapDef {
        name: name.into(),
        map_type: MapType::Array,
        key_size: 4,
        value_size,
        max_entries,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    }
}

struct Case {
    label: &'static str,
    insns: Vec<Insn>,
    maps: Vec<MapDef>,
    opts: VerifyOptions,
    /// Loadable into the kernel as a socket filter (the generated programs).
    kernel: bool,
}

fn cases() -> Vec<Case> {
    let spec = EimSpec::from_yaml(EIM).expect("bench EIM");
    let control = VerifyOptions::eim(&spec, "on_request", "default").expect("bench class");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let acl_spec = EimSpec::from_yaml(
        &std::fs::read_to_string(root.join("bpf/acl/acl.yaml")).expect("bpf/acl/acl.yaml"),
    )
    .expect("acl spec");
    let acl = rdx_bpf::loader::load(&rdx_testdata::object("acl/enforce")).expect("enforce.o");
    let prog = acl.program("acl_enforce").expect("acl_enforce").clone();
    vec![
        Case {
            label: "1.3K map accesses",
            insns: generate(1, 1300, 30, Shape::MapAccesses),
            maps: vec![array("bench_vals", 8, 4)],
            opts: control.clone(),
            kernel: true,
        },
        Case {
            label: "10K path-sensitive",
            insns: path_sensitive(10_000, 5, 7),
            maps: vec![array("bench_wide", 1024, 1)],
            opts: control.clone(),
            kernel: true,
        },
        Case {
            label: "10K deep branching",
            insns: generate(2, 5000, 2, Shape::DeepBranching),
            maps: vec![array("bench_vals", 8, 4)],
            opts: control.clone(),
            kernel: true,
        },
        Case {
            label: "95K unrolled",
            insns: generate(10, 9500, 4, Shape::Unrolled),
            maps: vec![array("bench_vals", 8, 4)],
            opts: control,
            kernel: true,
        },
        Case {
            label: "ACL enforce.c",
            insns: prog.insns,
            maps: acl.maps,
            opts: VerifyOptions::eim(&acl_spec, "acl_packet", "acl").expect("acl class"),
            kernel: false,
        },
    ]
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Median load time and the kernel's processed count (from its statistics line).
fn kernel_load(case: &Case, reps: usize) -> Result<(Duration, u64), String> {
    rdx_kernel::probe().map_err(|e| e.to_string())?;
    let maps = rdx_kernel::create_maps(&case.maps).map_err(|e| e.to_string())?;
    let prog = Program {
        name: "rdx_bench".into(),
        section: "socket".into(),
        insns: case.insns.clone(),
    };
    const LOG_STATS: u32 = 4;
    let mut times = Vec::new();
    let mut processed = 0;
    for _ in 0..reps {
        let loaded = rdx_kernel::load_linked(
            &prog,
            rdx_kernel::ProgType::SocketFilter,
            &maps,
            "GPL",
            LOG_STATS,
        )
        .map_err(|e| e.to_string())?;
        times.push(loaded.load_time);
        processed = loaded
            .log
            .split_whitespace()
            .skip_while(|w| *w != "processed")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
    }
    Ok((median(times), processed))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reps = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(3usize)
        .max(1);
    let with_kernel = !args.iter().any(|a| a == "--no-kernel");
    println!(
        "{:<20} {:>6} {:>10} {:>11} {:>10} {:>11} {:>9}",
        "program", "insns", "rdx.proc", "rdx verify", "k.proc", "kernel load", "proc k/rdx"
    );
    for case in cases() {
        let mut times = Vec::new();
        let mut processed = 0;
        let mut verdict = String::from("accepted");
        for _ in 0..reps {
            let t = Instant::now();
            let r = verify_insns(&case.insns, &case.maps, &case.opts);
            times.push(t.elapsed());
            match r {
                Ok(v) => processed = v.processed_insns,
                Err(e) => verdict = format!("rejected: {e}"),
            }
        }
        let ours = median(times);
        let kernel = if case.kernel && with_kernel {
            kernel_load(&case, reps).map(Some)
        } else {
            Ok(None)
        };
        let (kp, kt, ratio) = match &kernel {
            Ok(Some((t, p))) => (
                p.to_string(),
                format!("{:.1} ms", t.as_secs_f64() * 1e3),
                format!("{:.2}", *p as f64 / processed.max(1) as f64),
            ),
            Ok(None) => ("-".into(), "-".into(), "-".into()),
            Err(e) => {
                eprintln!("kernel baseline unavailable: {e}");
                ("n/a".into(), "n/a".into(), "n/a".into())
            }
        };
        println!(
            "{:<20} {:>6} {:>10} {:>11} {:>10} {:>11} {:>9}",
            case.label,
            case.insns.len(),
            processed,
            format!("{:.1} ms", ours.as_secs_f64() * 1e3),
            kp,
            kt,
            ratio
        );
        if verdict != "accepted" {
            println!("  {verdict}");
        }
    }
}
