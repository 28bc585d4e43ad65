//! `rdx compile`: verifies the programs of an object and compiles each for one or more target
//! architectures into relocatable artifacts (`DIR/<program>.<arch>.rdxa`, format in
//! docs/artifact.md). Also the native runner behind `rdx run --jit`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use rdx_bpf::interp::{ContextModel, SkBuff, XdpMd};
use rdx_bpf::isa::Size;
use rdx_bpf::loader::LoadedObject;
use rdx_bpf::maps::MapSet;
use rdx_bpf::program::{MapDef, Program};
use rdx_deopt::host::LowPacket;
use rdx_jit::{Arch, CompileError, Build, CompileOptions, Compiler, ExecutableCode, Pipeline};
use rdx_region::abi::{RunState, RunStatus};
use rdx_verifier::{EimSpec, KernelProgType, VerifyOptions};
use serde::Serialize;

use crate::cmd::run::CtxModel;
use crate::object_file;

/// Verify and compile the programs of an eBPF object into relocatable native artifacts.
#[derive(clap::Args)]
pub struct Args {
    /// Object file (`clang -O2 -g -target bpf -c prog.c -o prog.o`).
    object: PathBuf,
    /// Target architectures, comma-separated: x86_64, aarch64.
    #[arg(long, value_delimiter = ',', default_value = "x86_64,aarch64")]
    target: Vec<String>,
    /// Output directory (created if missing).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    out: PathBuf,
    /// EIM spec (YAML) of the target host; requires --hook and --class.
    #[arg(long, value_name = "SPEC.yaml", requires_all = ["hook", "class"])]
    eim: Option<PathBuf>,
    /// Hook of the EIM spec the program is for.
    #[arg(long)]
    hook: Option<String>,
    /// Extension class the program is verified and compiled under.
    #[arg(long)]
    class: Option<String>,
    /// Only this program (all programs if omitted).
    #[arg(long = "prog", value_name = "NAME")]
    program: Option<String>,
    /// Code generator: `optimizing` (Cranelift, the fastest code) or `baseline` (one linear
    /// pass, compiles about 20x faster; a program it does not support falls back to
    /// optimizing). See docs/jit.md.
    #[arg(long, value_enum, default_value_t = Tier::Optimizing)]
    tier: Tier,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Which JIT tier builds the artifacts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Optimizing,
    Baseline,
}

/// Compiles with `tier`; a program the baseline tier does not support is compiled by the
/// optimizing tier instead. Returns the artifact, the tier that built it, the instruction
/// count and the compile time. The Cranelift compiler is only built when it is used.
pub fn compile_tier(
    compiler: &mut Option<Compiler>,
    insns: &[rdx_bpf::isa::Insn],
    opts: &CompileOptions,
    tier: Tier,
) -> anyhow::Result<(rdx_jit::Artifact, Tier, std::time::Duration)> {
    if tier == Tier::Baseline {
        let t = std::time::Instant::now();
        let mut o = opts.clone();
        o.pipeline = Pipeline::Baseline;
        match rdx_jit::compile(insns, &o) {
            Ok(a) => return Ok((a, Tier::Baseline, t.elapsed())),
            Err(CompileError::NotInBaseline { what }) => {
                eprintln!("note: the baseline tier does not support {what}: compiling with the optimizing tier");
            }
            Err(e) => return Err(e.into()),
        }
    }
    let compiler = match compiler {
        Some(c) => c,
        None => compiler.insert(Compiler::new(opts.arch)?),
    };
    let (artifact, stats) = compiler.compile(insns, opts)?;
    Ok((artifact, Tier::Optimizing, stats.elapsed))
}

#[derive(Serialize)]
struct Compiled {
    program: String,
    arch: String,
    path: String,
    insns: usize,
    tier: Tier,
    code_bytes: usize,
    relocations: usize,
    symbols: Vec<String>,
    needs_budget: bool,
    compile_us: u128,
}

/// Verifies `prog` (under the EIM class, or as the kernel program type its section names)
/// and returns whether the JIT must meter it. Nothing is compiled that this did not accept.
fn verify(
    prog: &Program,
    maps: &[MapDef],
    eim: Option<(&EimSpec, &str, &str)>,
) -> anyhow::Result<bool> {
    let opts = match eim {
        Some((spec, hook, class)) => VerifyOptions::eim(spec, hook, class)?,
        None => VerifyOptions::kernel(KernelProgType::from_section(&prog.section).with_context(
            || {
                format!(
                    "program {} is in section {:?}: pass --eim/--hook/--class",
                    prog.name, prog.section
                )
            },
        )?),
    };
    let verified = rdx_verifier::verify(prog, maps, &opts)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("program {} was rejected by the verifier", prog.name))?;
    Ok(verified.needs_budget)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let archs: Vec<Arch> = args
        .target
        .iter()
        .map(|t| t.parse::<Arch>())
        .collect::<Result<_, _>>()?;
    if archs.is_empty() {
        bail!("--target names no architecture");
    }
    let loaded = object_file::load(&args.object)?;
    let spec = match &args.eim {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            Some(
                EimSpec::from_yaml(&text)
                    .with_context(|| format!("invalid EIM spec {}", path.display()))?,
            )
        }
        None => None,
    };
    let eim = spec.as_ref().map(|s| {
        (
            s,
            args.hook.as_deref().unwrap_or_default(),
            args.class.as_deref().unwrap_or_default(),
        )
    });
    let selected: Vec<usize> = match &args.program {
        None => (0..loaded.object.programs.len()).collect(),
        Some(name) => vec![crate::cmd::run::find_program(&loaded, name)?],
    };
    if selected.is_empty() {
        bail!("{} contains no programs", args.object.display());
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;

    let mut results = Vec::new();
    for &arch in &archs {
        let mut compiler = None;
        for &i in &selected {
            let prog = &loaded.object.programs[i];
            let needs_budget = verify(prog, &loaded.object.maps, eim)?;
            let mut opts = CompileOptions::new(arch, Build::Generic);
            opts.needs_budget = needs_budget;
            opts.eim_class = args.class.clone().unwrap_or_default();
            let (artifact, tier, elapsed) =
                compile_tier(&mut compiler, &prog.insns, &opts, args.tier)
                    .with_context(|| format!("cannot compile {} for {arch}", prog.name))?;
            let path = args.out.join(format!("{}.{arch}.rdxa", prog.name));
            write(&path, &artifact.to_bytes())?;
            results.push(Compiled {
                program: prog.name.clone(),
                arch: arch.to_string(),
                path: path.display().to_string(),
                insns: prog.insns.len(),
                tier,
                code_bytes: artifact.code.len(),
                relocations: artifact.relocations.len(),
                symbols: artifact.symbols.iter().map(|s| s.to_string()).collect(),
                needs_budget,
                compile_us: elapsed.as_micros(),
            });
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        for r in &results {
            println!(
                "{} [{}, {}]: {} insns -> {} bytes, {} relocations ({}), budget {}, {} us -> {}",
                r.program,
                r.arch,
                serde_json::to_value(r.tier)?.as_str().unwrap_or_default(),
                r.insns,
                r.code_bytes,
                r.relocations,
                if r.symbols.is_empty() {
                    "no symbols".to_string()
                } else {
                    r.symbols.join(" ")
                },
                if r.needs_budget {
                    "metered"
                } else {
                    "not needed"
                },
                r.compile_us,
                r.path
            );
        }
    }
    Ok(())
}

fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// Runs a program natively through rdx's JIT on this host, for `rdx run --jit`: verified as
/// the kernel program type of its section, compiled, linked against the interpreter crate's
/// native helpers and the given maps, mapped W^X.
pub struct JitRunner {
    code: ExecutableCode,
    needs_budget: bool,
    /// Packet memory below 4 GiB: `xdp_md` and `__sk_buff` hold 32-bit packet pointers.
    packet: LowPacket,
}

impl JitRunner {
    pub fn new(loaded: &LoadedObject, index: usize, maps: &MapSet) -> anyhow::Result<Self> {
        let prog = &loaded.object.programs[index];
        let host = Arch::host().context("this host's architecture has no JIT")?;
        let needs_budget = verify(prog, &loaded.object.maps, None)?;
        let mut opts = CompileOptions::new(host, Build::Generic);
        opts.needs_budget = needs_budget;
        let artifact = rdx_jit::compile(&prog.insns, &opts)
            .with_context(|| format!("cannot compile {}", prog.name))?;
        let syms = rdx_deopt::host::native_symbols(maps);
        let code = ExecutableCode::load(&artifact, &syms)
            .with_context(|| format!("cannot load {} natively", prog.name))?;
        Ok(JitRunner {
            code,
            needs_budget,
            packet: LowPacket::new(1 << 16)
                .context("cannot map packet memory below 4 GiB for the 32-bit context pointers")?,
        })
    }

    pub fn run(&mut self, model: CtxModel, input: Option<&[u8]>) -> anyhow::Result<u64> {
        const SKB_SIZE: usize = 192;
        let mut ctx = vec![0u8; SKB_SIZE];
        let put = |ctx: &mut Vec<u8>, off: usize, v: u32| {
            ctx[off..off + 4].copy_from_slice(&v.to_le_bytes())
        };
        let (packet, offs) = match model {
            CtxModel::Xdp => {
                let xdp = XdpMd::new(input.unwrap_or_default().to_vec());
                put(&mut ctx, XdpMd::OFF_INGRESS_IFINDEX, xdp.ingress_ifindex);
                (
                    xdp.packet_data().to_vec(),
                    (XdpMd::OFF_DATA, XdpMd::OFF_DATA_END, XdpMd::OFF_DATA_META),
                )
            }
            CtxModel::Skb => {
                let skb = match input {
                    Some(frame) => SkBuff::socket_filter_test_run(frame)
                        .context("the skb model takes an Ethernet frame of at least 14 bytes")?,
                    None => SkBuff::new(Vec::new()),
                };
                for off in (0..SKB_SIZE).step_by(4) {
                    if let Ok(v) = skb.load(off, Size::W) {
                        put(&mut ctx, off, v as u32);
                    }
                }
                (
                    skb.packet_data().to_vec(),
                    (
                        SkBuff::OFF_DATA,
                        SkBuff::OFF_DATA_END,
                        SkBuff::OFF_DATA_META,
                    ),
                )
            }
            CtxModel::Raw => {
                bail!("--jit runs xdp and skb programs (raw contexts are not verified)")
            }
        };
        if packet.len() > self.packet.capacity() {
            bail!(
                "packet of {} bytes is larger than {}",
                packet.len(),
                self.packet.capacity()
            );
        }
        self.packet.set(&packet);
        let data = self.packet.region().addr as u32;
        put(&mut ctx, offs.0, data);
        put(&mut ctx, offs.1, data + packet.len() as u32);
        put(&mut ctx, offs.2, data);
        let mut run = RunState::new(if self.needs_budget { 1 << 24 } else { 0 });
        // SAFETY: the verifier accepted the program for this context type; the context and
        // its packet are laid out as the program reads them.
        let r0 = unsafe { self.code.call(ctx.as_mut_ptr(), &mut run) };
        if run.status == RunStatus::BudgetExhausted as u32 {
            bail!("the run spent its instruction budget");
        }
        Ok(r0)
    }
}

#[cfg(test)]
mod tier_tests {
    use super::*;

    #[test]
    fn baseline_builds_what_it_supports_and_falls_back_otherwise() {
        let prog = rdx_bpf::asm::assemble("mov %r0, 1\njeq %r0, 1, +1\nmov %r0, 2\nexit").unwrap();
        let mut compiler = None;
        let opts = CompileOptions::new(Arch::X86_64, Build::Generic);
        let (artifact, tier, _) =
            compile_tier(&mut compiler, &prog, &opts, Tier::Baseline).unwrap();
        assert_eq!(tier, Tier::Baseline);
        assert!(compiler.is_none(), "no Cranelift compiler built for the baseline tier");
        assert!(!artifact.code.is_empty());

        let mut elite = opts.clone();
        elite.build = Build::Elite(rdx_jit::Speculation::default());
        let (_, tier, _) = compile_tier(&mut compiler, &prog, &elite, Tier::Baseline).unwrap();
        assert_eq!(tier, Tier::Optimizing);
        assert!(compiler.is_some());
    }
}
