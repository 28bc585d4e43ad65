//! The headline benchmark: how long it takes to get a program running in a live process.
//!
//! For generated programs of about 1.3K, 10K and 95K instructions it measures, in one run:
//! - **rdx deploy**: link, write and publish into a host process's region through the
//!   shared-memory transport, compilation cached (what `rdx deploy` does on a warm cache);
//! - **kernel (agent baseline)**: loading the same instructions into the kernel with
//!   `bpf(BPF_PROG_LOAD)` — the kernel's verification plus JIT, what a local agent pays;
//! - **rdx agent mode**: verification and JIT done where the program runs, then deployed.
//!
//! and prints the ratios. Then the host's request throughput while deploys run continuously,
//! from a separate control-plane process (rdx) against an agent inside the host (agent mode),
//! with the host pinned to one CPU as a service owning its core would be.
//!
//! The programs are generated here (no kernel sources): a main loop, bounded by a constant
//! trip count the verifiers must follow, calling functions whose bodies mix map lookups
//! (1.3K), deep if/else chains (10K) and unrolled arithmetic (95K). As with the kernel's
//! scale tests, verification cost follows the instructions processed over all iterations
//! (hundreds of thousands), not the program size.
//!
//! Run: `cargo bench -p rdx-control --bench injection` (root: the kernel baseline needs
//! `bpf()`; without it that column is skipped with the reason).

use rdx_bpf::isa::{AluOp, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width};
use rdx_bpf::program::{MapDef, MapOrigin, MapType};
use rdx_control::{create_codeflow, CodeFlow, ExtSpec, Extension};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const HOOK: &str = "on_request";

/// The host's EIM: the same hook and class as the control tests' host.
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

// ---------------------------------------------------------------------------------------
// Program generators
// ---------------------------------------------------------------------------------------

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

/// `r0 = lookup(map 0, key)`, null-checked: adds the value to r6.
fn map_access(out: &mut Vec<Insn>, key: i32) {
    out.push(Insn::Store {
        size: Size::W,
        base: Reg(10),
        off: -4,
        src: imm(key & 3),
    });
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

/// Body shapes.
#[derive(Clone, Copy)]
enum Shape {
    /// Mostly map lookups.
    MapAccesses,
    /// Mostly nested if/else chains on the unknown value.
    DeepBranching,
    /// Mostly straight-line arithmetic (an unrolled loop body).
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
        // Every conditional jump on a path leaves one pending state in a depth-first
        // verifier until the path ends, and the path runs through every trip of the main
        // loop: the kernel caps that at 8192 pending branches. The mixes keep
        // branches-per-function x functions x trips well under it.
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
                // t = v ^ a; if (t > a) { if (t & b) acc += 1 else acc -= 2 } else acc ^= c;
                // t is a scratch copy (the xor unlinks it from v, so v keeps its range) and
                // every arm clears it, so the states meeting at the join differ only in the
                // unknown accumulator and a verifier can prune there.
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
    // main: value = map[0][0]; for (i = 0; i < trips; i++) acc = f_k(acc, value) for all k
    let mut main = vec![alu(AluOp::Mov, 6, imm(0))];
    main.push(Insn::Store {
        size: Size::W,
        base: Reg(10),
        off: -4,
        src: imm(0),
    });
    main.push(alu(AluOp::Mov, 2, reg(10)));
    main.push(alu(AluOp::Add, 2, imm(-4)));
    main.push(Insn::LoadImm64 {
        dst: Reg(1),
        kind: ImmKind::MapIdx,
        imm_lo: 0,
        imm_hi: 0,
    });
    main.push(Insn::LoadImm64Hi);
    main.push(Insn::Call(CallTarget::Helper(1)));
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

fn bench_map() -> MapDef {
    MapDef {
        name: "bench_vals".into(),
        map_type: MapType::Array,
        key_size: 4,
        value_size: 8,
        max_entries: 4,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    }
}

struct Case {
    label: &'static str,
    insns: Vec<Insn>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            label: "1.3K map accesses",
            insns: generate(1, 1300, 30, Shape::MapAccesses),
        },
        Case {
            label: "10K deep branching",
            insns: generate(2, 5000, 2, Shape::DeepBranching),
        },
        Case {
            label: "95K unrolled",
            insns: generate(10, 9500, 4, Shape::Unrolled),
        },
    ]
}

// ---------------------------------------------------------------------------------------
// Host process (this binary re-executed with RDX_BENCH_HOST=path)
// ---------------------------------------------------------------------------------------

#[repr(C)]
struct Ctx {
    value: u64,
    out: u64,
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it; the call reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The host: serves requests on one thread, pinned to CPU 0 with every thread it has; on
/// `agent` it starts an in-process agent (verify + JIT + deploy into its own region) on
/// another thread that shares the host's CPU, as a local agent or an in-process loader does.
fn host_main(path: &str) {
    pin_to_cpu(0);
    let rt = rdx_runtime::Runtime::builder()
        .path(path)
        .eim_spec(EIM)
        .code_size(64 << 20)
        .scratch_size(1 << 20)
        .thread_slots(8)
        .hook(
            HOOK,
            rdx_runtime::HookSpec::for_context::<Ctx>().default_return(0),
        )
        .build()
        .expect("host runtime");
    rt.register().expect("register");
    let served = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let agent_on = AtomicBool::new(false);
    std::thread::scope(|s| {
        let hook = rt.hook(HOOK).unwrap();
        let (served_r, stop_r) = (&served, &stop);
        s.spawn(move || {
            let mut i = 0u64;
            while !stop_r.load(Ordering::Relaxed) {
                for _ in 0..64 {
                    let mut ctx = Ctx { value: i, out: 0 };
                    std::hint::black_box(hook.run(&mut ctx));
                    i += 1;
                }
                served_r.fetch_add(64, Ordering::Relaxed);
            }
        });
        let agent_r = &agent_on;
        let stop_a = &stop;
        let address = format!("shm:{path}");
        s.spawn(move || {
            // The agent: idle until asked, then verify + compile + deploy in a loop.
            let ext = Extension::new(
                "agent",
                "rdx/on_request",
                cases().remove(0).insns,
                vec![bench_map()],
            );
            let mut cf: Option<CodeFlow> = None;
            let mut deploys = 0u64;
            while !stop_a.load(Ordering::Relaxed) {
                if !agent_r.load(Ordering::Relaxed) {
                    cf = None; // give the lease back
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                let flow = cf
                    .get_or_insert_with(|| create_codeflow(&address, ExtSpec::default()).unwrap());
                flow.deploy(HOOK, &ext, None, None).unwrap();
                deploys += 1;
                if flow.arena_usage().unwrap()[0].0 < 1 << 20 || deploys % 128 == 127 {
                    let _ = flow.reclaim(1);
                }
            }
        });
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        writeln!(out, "ready").unwrap();
        out.flush().unwrap();
        for line in std::io::stdin().lock().lines() {
            let line = line.unwrap();
            match line.trim() {
                "served" => writeln!(out, "{}", served.load(Ordering::Relaxed)).unwrap(),
                "agent on" => {
                    agent_on.store(true, Ordering::Relaxed);
                    writeln!(out, "ok").unwrap()
                }
                "agent off" => {
                    agent_on.store(false, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(50));
                    writeln!(out, "ok").unwrap()
                }
                _ => break,
            }
            out.flush().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    let _ = rt.teardown(Duration::from_millis(100));
    let _ = rt.unlink();
}

struct HostProc {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    path: String,
}

impl HostProc {
    fn start() -> HostProc {
        let path = format!("/dev/shm/rdx-bench-injection-{}", std::process::id());
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env("RDX_BENCH_HOST", &path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut l = String::new();
        stdout.read_line(&mut l).unwrap();
        assert_eq!(l.trim(), "ready");
        HostProc {
            child,
            stdin,
            stdout,
            path,
        }
    }
    fn cmd(&mut self, c: &str) -> String {
        writeln!(self.stdin, "{c}").unwrap();
        self.stdin.flush().unwrap();
        let mut l = String::new();
        self.stdout.read_line(&mut l).unwrap();
        l.trim().to_string()
    }
    fn served(&mut self) -> u64 {
        self.cmd("served").parse().unwrap()
    }
}

impl Drop for HostProc {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

// ---------------------------------------------------------------------------------------
// Measurements
// ---------------------------------------------------------------------------------------

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn fmt_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{us:.1} us")
    }
}

fn kernel_load_us(insns: &[Insn], reps: usize) -> Result<f64, String> {
    rdx_kernel::probe().map_err(|e| e.to_string())?;
    let maps = rdx_kernel::create_maps(&[bench_map()]).map_err(|e| e.to_string())?;
    let prog = rdx_bpf::program::Program {
        name: "rdx_bench".into(),
        section: "socket".into(),
        insns: insns.to_vec(),
    };
    let mut times = Vec::new();
    for _ in 0..reps {
        let loaded =
            rdx_kernel::load_linked(&prog, rdx_kernel::ProgType::SocketFilter, &maps, "GPL", 0)
                .map_err(|e| e.to_string())?;
        times.push(loaded.load_time.as_secs_f64() * 1e6);
    }
    Ok(median(times))
}

fn main() {
    if let Ok(path) = std::env::var("RDX_BENCH_HOST") {
        host_main(&path);
        return;
    }
    if std::env::args().any(|a| a == "--list" || a.starts_with("--exact")) {
        return; // `cargo test --benches` probing
    }
    let mut host = HostProc::start();
    let address = format!("shm:{}", host.path);
    let mut cf = create_codeflow(&address, ExtSpec::default()).expect("attach");

    println!("rdx injection latency (median; rdx deploy = link + write + publish, compiled artifact cached)");
    println!(
        "{:<20} {:>7} {:>10} | {:>11} {:>11} {:>11} | {:>9} {:>9}",
        "program", "insns", "code", "rdx deploy", "kernel", "agent mode", "kernel/x", "agent/x"
    );
    for case in cases() {
        let ext = Extension::new(
            "bench",
            "rdx/on_request",
            case.insns.clone(),
            vec![bench_map()],
        );
        // Agent mode: verification and JIT where the program runs, then the deploy.
        let mut agent = Vec::new();
        let mut compiled = None;
        for _ in 0..3 {
            let t = Instant::now();
            let checked = cf
                .validate_code(&ext, HOOK, None)
                .expect("rdx verifier accepts the generated program");
            let c = cf.jit_compile_code(&ext, &checked, None).expect("JIT");
            cf.deploy_prog(HOOK, &ext, &c).expect("deploy");
            agent.push(t.elapsed().as_secs_f64() * 1e6);
            compiled = Some(c);
        }
        let compiled = compiled.unwrap();
        let code_len = compiled.artifact.code.len() as u64;
        let reps = if case.insns.len() > 50_000 { 60 } else { 300 };
        let mut rdx = Vec::with_capacity(reps);
        for _ in 0..reps {
            let [(code_free, _), _] = cf.arena_usage().unwrap();
            if code_free < 3 * code_len {
                cf.reclaim(1).expect("reclaim");
            }
            let t = Instant::now();
            let p = cf.prepare_prog(HOOK, &ext, &compiled).expect("prepare");
            cf.tx(vec![p]).expect("publish");
            rdx.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let rdx = median(rdx);
        let agent = median(agent);
        let kernel = kernel_load_us(&case.insns, 3);
        let (kernel_s, kernel_ratio) = match &kernel {
            Ok(k) => (fmt_us(*k), format!("{:.0}x", k / rdx)),
            Err(e) => {
                eprintln!("kernel baseline skipped: {e}");
                ("skipped".into(), "-".into())
            }
        };
        println!(
            "{:<20} {:>7} {:>8}KB | {:>11} {:>11} {:>11} | {:>9} {:>9}",
            case.label,
            case.insns.len(),
            code_len / 1024,
            fmt_us(rdx),
            kernel_s,
            fmt_us(agent),
            kernel_ratio,
            format!("{:.0}x", agent / rdx)
        );
        cf.reclaim(0).ok();
    }

    // Throughput of the host (pinned to CPU 0) while deploys run continuously.
    let window = Duration::from_secs(2);
    let rate = |host: &mut HostProc, work: &mut dyn FnMut()| {
        let (t0, n0) = (Instant::now(), host.served());
        while t0.elapsed() < window {
            work();
        }
        let n1 = host.served();
        (n1 - n0) as f64 / t0.elapsed().as_secs_f64()
    };
    let small = Extension::new(
        "bench",
        "rdx/on_request",
        cases().remove(0).insns,
        vec![bench_map()],
    );
    let checked = cf.validate_code(&small, HOOK, None).unwrap();
    let compiled = cf.jit_compile_code(&small, &checked, None).unwrap();
    cf.deploy_prog(HOOK, &small, &compiled).unwrap();
    let idle = rate(&mut host, &mut || {
        std::thread::sleep(Duration::from_millis(10))
    });
    let mut deploys = 0u64;
    let with_rdx = rate(&mut host, &mut || {
        // Reclaim well before the allocation table (511 entries) or the code arena fills.
        let [(free, _), _] = cf.arena_usage().unwrap();
        if free < 1 << 20 || deploys % 128 == 127 {
            cf.reclaim(1).unwrap();
        }
        cf.deploy_prog(HOOK, &small, &compiled).unwrap();
        deploys += 1;
    });
    cf.reclaim(0).ok();
    cf.release().unwrap();
    host.cmd("agent on");
    let with_agent = rate(&mut host, &mut || {
        std::thread::sleep(Duration::from_millis(10))
    });
    host.cmd("agent off");
    println!();
    println!("host throughput (requests/s, host pinned to one CPU, the 1.3K program attached in every phase):");
    println!("  no deploys:                         {idle:>14.0}");
    println!(
        "  rdx deploys from another process:   {with_rdx:>14.0}  ({:+.2}%, {deploys} deploys in {}s)",
        100.0 * (with_rdx - idle) / idle,
        window.as_secs()
    );
    println!(
        "  agent mode (verify+JIT in the host): {with_agent:>13.0}  ({:+.2}%)",
        100.0 * (with_agent - idle) / idle
    );
}
