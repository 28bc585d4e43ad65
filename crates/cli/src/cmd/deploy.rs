//! `rdx deploy`: verify a program against a node's hook class, compile it (or take it from
//! the registry's cache), link it against the node, write it and publish it with one
//! compare-and-swap. The node's CPU does none of this. `--tier baseline` compiles with the
//! baseline JIT tier instead of Cranelift; the node records the tier with the version.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rdx_control::codeflow::{DeployObserver, DeployStage, DeployTimings, StageDone};
use rdx_control::{CodeFlow, ControlError, Extension, Tier};
use serde::Serialize;

use super::compile::Tier as TierArg;
use super::node::{attach, explain_held, StateArgs};

/// Which program goes to which node and hook: the arguments `deploy`, `profile` and
/// `optimize` share.
#[derive(clap::Args)]
pub struct ProgramTarget {
    /// Object file (`clang -O2 -g -target bpf -c prog.c -o prog.o`).
    pub object: PathBuf,
    /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`, `fabric://HOST:PORT?...`).
    #[arg(long)]
    pub node: String,
    /// Hook to attach to.
    #[arg(long)]
    pub hook: String,
    /// Program in the object (required if it has several).
    #[arg(long = "prog", value_name = "NAME")]
    pub program: Option<String>,
    /// Extension class bound to the hook (default: the only class the node declares for it).
    #[arg(long)]
    pub class: Option<String>,
}

/// Deploy an eBPF program into a running node's hook.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: ProgramTarget,
    /// JIT tier: `optimizing` (Cranelift, the fastest code) or `baseline` (one linear pass,
    /// compiles about 20x faster, slower code). `rdx node show` and `rdx history` show the
    /// tier of each version. See docs/jit.md.
    #[arg(long, value_enum, default_value_t = TierArg::Optimizing)]
    tier: TierArg,
    /// While another control plane holds the node's lease, wait up to SECS for it to be
    /// released or to expire instead of failing at once (default: fail at once).
    #[arg(long, value_name = "SECS")]
    wait: Option<f64>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Serialize)]
struct Report {
    node: String,
    hook: String,
    program: String,
    class: String,
    tier: Tier,
    version: u32,
    previous_version: u32,
    generation: u64,
    artifact: String,
    cached: bool,
    insns: usize,
    code_bytes: u64,
    map_ids: Vec<u32>,
    verify_us: f64,
    compile_us: f64,
    write_us: f64,
    publish_us: f64,
}

/// Prints each stage's progress on stderr (unless `--json`) and keeps what the report needs.
struct Progress {
    quiet: bool,
    /// `{name} ({n} insns) for {node}/{hook}`, printed as verification starts.
    what: String,
    /// `{arch} ({tier} tier)`, printed as compilation starts.
    target: String,
    timings: DeployTimings,
    class: Option<String>,
    artifact: Option<([u8; 32], bool)>,
}

impl Progress {
    fn print(&self, msg: &str) {
        if !self.quiet {
            eprint!("{msg}");
            let _ = std::io::stderr().flush();
        }
    }
}

impl DeployObserver for Progress {
    fn started(&mut self, stage: DeployStage) {
        match stage {
            DeployStage::Verify => self.print(&format!("verifying {} ... ", self.what)),
            DeployStage::Compile => self.print(&format!("compiling for {} ... ", self.target)),
            DeployStage::Prepare => self.print("linking and writing ... "),
            DeployStage::Publish => {}
        }
    }

    fn finished(&mut self, done: StageDone<'_>, took: Duration) {
        self.timings.finished(done, took);
        let us = took.as_secs_f64() * 1e6;
        match done {
            StageDone::Verified(v) => {
                self.print(&format!("ok, class {} ({us:.0} us)\n", v.class()));
                self.class = Some(v.class().to_string());
            }
            StageDone::Compiled(c) => {
                self.print(&format!(
                    "{} ({} bytes, {us:.0} us)\n",
                    if c.cached() { "cached" } else { "done" },
                    c.artifact().code.len()
                ));
                self.artifact = Some((*c.artifact_hash(), c.cached()));
            }
            StageDone::Prepared(p) => self.print(&format!(
                "{} bytes at {:#x} ({us:.0} us)\n",
                p.code_len, p.code_offset
            )),
            StageDone::Published(_) => {}
        }
    }

    fn failed(&mut self, stage: DeployStage, _: &ControlError) {
        if stage == DeployStage::Verify {
            self.print("rejected\n");
        }
    }
}

/// The verifier's rejection as `--json` prints it: the rule broken and where.
#[derive(Serialize)]
struct Rejected<'a> {
    node: &'a str,
    hook: &'a str,
    program: &'a str,
    class: &'a str,
    accepted: bool,
    rule: &'static str,
    pc: Option<usize>,
    insn: Option<&'a str>,
    message: &'a str,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.target.object)
        .with_context(|| format!("cannot read {}", args.target.object.display()))?;
    let object = rdx_bpf::loader::load(&bytes)
        .with_context(|| format!("cannot load {}", args.target.object.display()))?;
    let ext = Extension::from_object(&object, args.target.program.as_deref())?
        .with_origin(args.target.object.display().to_string());
    let registry = args.state.registry()?;
    let (node, mut cf) = attach(&registry, &args.target.node)?;
    cf.set_tier(match args.tier {
        TierArg::Optimizing => Tier::Optimizing,
        TierArg::Baseline => Tier::Baseline,
    });
    let mut progress = Progress {
        quiet: args.json,
        what: format!(
            "{} ({} insns) for {node}/{}",
            ext.name(),
            ext.insns().len(),
            args.target.hook
        ),
        target: format!("{} ({} tier)", cf.arch().name(), cf.tier()),
        timings: DeployTimings::default(),
        class: None,
        artifact: None,
    };
    if let Some(secs) = args.wait {
        wait_for_lease(&mut cf, &node, secs, args.json)?;
    }
    let deployed = cf.deploy_observed(
        &args.target.hook,
        &ext,
        args.target.class.as_deref(),
        Some(&registry),
        &mut progress,
    );
    let published = match deployed {
        Ok(p) => p,
        Err(ControlError::Verify {
            hook,
            class,
            source,
        }) if args.json => {
            let rejected = Rejected {
                node: &node,
                hook: &hook,
                program: ext.name(),
                class: &class,
                accepted: false,
                rule: source.rule.id(),
                pc: source.pc,
                insn: source.insn.as_deref(),
                message: &source.message,
            };
            println!("{}", serde_json::to_string_pretty(&rejected)?);
            return Err(ControlError::Verify {
                hook,
                class,
                source,
            }
            .into());
        }
        Err(e @ ControlError::LeaseHeld { .. }) => {
            return Err(anyhow::Error::new(e).context(format!(
                "node {node} is busy: `--wait SECS` waits for its lease instead of failing"
            )))
        }
        Err(e) => return Err(explain_held(&cf, &node)(e)),
    };
    let (artifact_hash, cached) = progress.artifact.expect("a deploy compiles");
    let artifact = rdx_control::codeflow::hex(&artifact_hash);
    let timings = &progress.timings;
    if args.json {
        let r = Report {
            node,
            hook: args.target.hook,
            program: ext.name().to_string(),
            class: progress.class.unwrap_or_default(),
            tier: published.tier,
            version: published.version,
            previous_version: published.previous_version,
            generation: published.generation,
            artifact,
            cached,
            insns: ext.insns().len(),
            code_bytes: published.code_len,
            map_ids: published.map_ids,
            verify_us: timings.validate_us,
            compile_us: timings.compile_us,
            write_us: timings.prepare_us,
            publish_us: timings.publish_us,
        };
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "deployed {} to {node}/{}: version {} (was {}), {} tier, published in {:.1} us",
            ext.name(),
            args.target.hook,
            published.version,
            if published.previous_version == 0 {
                "empty".to_string()
            } else {
                published.previous_version.to_string()
            },
            published.tier,
            timings.publish_us
        );
    }
    Ok(())
}

/// `--wait SECS`: takes the node's lease before the deploy starts, waiting up to `secs` while
/// another control plane holds it (the deploy then renews the lease it holds).
fn wait_for_lease(cf: &mut CodeFlow, node: &str, secs: f64, quiet: bool) -> anyhow::Result<()> {
    let wait = Duration::try_from_secs_f64(secs)
        .map_err(|_| anyhow::anyhow!("--wait {secs}: expected a number of seconds >= 0"))?;
    let started = Instant::now();
    let mut told = false;
    loop {
        match cf.mutual_excl() {
            Ok(()) => return Ok(()),
            Err(ControlError::LeaseHeld {
                pid, remaining_ms, ..
            }) if started.elapsed() < wait => {
                if !quiet && !told {
                    eprintln!(
                        "waiting up to {secs} s for {node}'s lease (held by pid {pid}, \
                         {remaining_ms} ms left) ..."
                    );
                    told = true;
                }
                let pause = Duration::from_millis(remaining_ms.clamp(1, 50))
                    .min(wait.saturating_sub(started.elapsed()));
                std::thread::sleep(pause);
            }
            Err(e) => {
                return Err(anyhow::Error::new(e)
                    .context(format!("node {node}: still busy after waiting {secs} s")))
            }
        }
    }
}
