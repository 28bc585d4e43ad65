//! `rdx deploy`: verify a program against a node's hook class, compile it (or take it from
//! the registry's cache), link it against the node, write it and publish it with one
//! compare-and-swap. The node's CPU does none of this. `--tier baseline` compiles with the
//! baseline JIT tier instead of Cranelift; the node records the tier with the version.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use rdx_control::registry::HistoryEntry;
use rdx_control::{Extension, Tier};
use serde::Serialize;

use super::compile::Tier as TierArg;
use super::node::{attach, StateArgs};

/// Which program goes to which node and hook: the arguments `deploy`, `profile` and
/// `optimize` share.
#[derive(clap::Args)]
pub struct ProgramTarget {
    /// Object file (`clang -O2 -g -target bpf -c prog.c -o prog.o`).
    pub object: PathBuf,
    /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`).
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

pub fn run(args: Args) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.target.object)
        .with_context(|| format!("cannot read {}", args.target.object.display()))?;
    let object = rdx_bpf::loader::load(&bytes)
        .with_context(|| format!("cannot load {}", args.target.object.display()))?;
    let ext = Extension::from_object(&object, args.target.program.as_deref())?;
    let registry = args.state.registry()?;
    let (node, mut cf) = attach(&registry, &args.target.node)?;
    cf.set_tier(match args.tier {
        TierArg::Optimizing => Tier::Optimizing,
        TierArg::Baseline => Tier::Baseline,
    });
    let progress = |msg: String| {
        if !args.json {
            eprint!("{msg}");
            let _ = std::io::stderr().flush();
        }
    };
    let us = |t: Instant| t.elapsed().as_secs_f64() * 1e6;

    progress(format!(
        "verifying {} ({} insns) for {node}/{} ... ",
        ext.name(),
        ext.insns().len(),
        args.target.hook
    ));
    let t = Instant::now();
    let checked = cf
        .validate_code(&ext, &args.target.hook, args.target.class.as_deref())
        .inspect_err(|_| progress("rejected\n".into()))?;
    let verify_us = us(t);
    progress(format!("ok, class {} ({verify_us:.0} us)\n", checked.class()));

    progress(format!(
        "compiling for {} ({} tier) ... ",
        cf.arch().name(),
        cf.tier()
    ));
    let t = Instant::now();
    let compiled = cf.jit_compile_code(&ext, &checked, Some(&registry))?;
    let compile_us = us(t);
    progress(format!(
        "{} ({} bytes, {compile_us:.0} us)\n",
        if compiled.cached() { "cached" } else { "done" },
        compiled.artifact().code.len()
    ));

    progress("linking and writing ... ".into());
    let t = Instant::now();
    let prepared = cf.prepare_prog(&args.target.hook, &ext, &compiled)?;
    let write_us = us(t);
    progress(format!(
        "{} bytes at {:#x} ({write_us:.0} us)\n",
        prepared.code_len, prepared.code_offset
    ));

    let t = Instant::now();
    let published = cf.tx(vec![prepared])?.remove(0);
    let publish_us = us(t);
    let artifact = rdx_control::codeflow::hex(compiled.artifact_hash());
    registry.record_with_tier(
        &HistoryEntry {
        id: 0,
        node: node.clone(),
        hook: args.target.hook.clone(),
        action: "deploy".into(),
        version: published.version,
        previous_version: published.previous_version,
        program: ext.name().to_string(),
        object: args.target.object.display().to_string(),
        class: checked.class().to_string(),
        artifact: artifact.clone(),
        at_ms: rdx_control::lease::now_ms(),
        generation: published.generation,
        },
        Some(published.tier),
    )?;
    if args.json {
        let r = Report {
            node,
            hook: args.target.hook,
            program: ext.name().to_string(),
            class: checked.class().to_string(),
            tier: published.tier,
            version: published.version,
            previous_version: published.previous_version,
            generation: published.generation,
            artifact,
            cached: compiled.cached(),
            insns: ext.insns().len(),
            code_bytes: published.code_len,
            map_ids: published.map_ids,
            verify_us,
            compile_us,
            write_us,
            publish_us,
        };
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "deployed {} to {node}/{}: version {} (was {}), {} tier, published in {publish_us:.1} us",
            ext.name(),
            args.target.hook,
            published.version,
            if published.previous_version == 0 {
                "empty".to_string()
            } else {
                published.previous_version.to_string()
            },
            published.tier
        );
    }
    Ok(())
}
