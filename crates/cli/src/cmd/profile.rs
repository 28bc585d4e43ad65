//! `rdx profile`: scouting. Deploys an instrumented build of a program whose branch counters
//! live in the node's XState, lets the node's traffic run through it, reads the counters
//! remotely and reports each conditional jump as likely, unlikely or unknown. The profile is
//! what `rdx optimize` compiles an elite version from. The node's CPU only runs the
//! instrumented code; everything else happens here.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use rdx_bpf::program::{MapDef, MapOrigin, MapType};
use rdx_control::codeflow::{hex, Compiled};
use rdx_control::registry::HistoryEntry;
use rdx_control::Extension;
use rdx_deopt::profile::{BranchProfile, Policy};
use rdx_jit::{branch_sites, BranchCounters, CompileOptions, Compiler, Symbol};
use serde::{Deserialize, Serialize};

use super::node::{attach, StateArgs};

/// Profile a program's branches on a live node (deploys an instrumented build).
#[derive(clap::Args)]
pub struct Args {
    /// Object file with the program to profile.
    object: PathBuf,
    #[arg(long)]
    node: String,
    #[arg(long)]
    hook: String,
    /// Program in the object (required if it has several).
    #[arg(long = "prog", value_name = "NAME")]
    program: Option<String>,
    /// Extension class bound to the hook (default: the only class declared for it).
    #[arg(long)]
    class: Option<String>,
    /// How long to let traffic run through the instrumented build.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Runs through a branch below which it stays "unknown".
    #[arg(long, default_value_t = 64)]
    min_runs: u64,
    /// Largest share of runs a direction may have and still be cold.
    #[arg(long, default_value_t = 0.0)]
    cold_share: f64,
    /// Write the profile here (JSON) for `rdx optimize --profile`.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Leave the instrumented build deployed (default: redeploy the plain build).
    #[arg(long)]
    keep: bool,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

/// A profile as `rdx profile --out` writes it.
#[derive(Serialize, Deserialize)]
pub struct SavedProfile {
    pub program: String,
    /// The program's bytecode-and-maps hash (`Extension::hash`): a profile only applies to
    /// the program it was taken from.
    pub program_hash: String,
    pub node: String,
    pub hook: String,
    pub seconds: f64,
    pub policy: Policy,
    pub profile: BranchProfile,
}

#[derive(Serialize)]
struct Row {
    pc: usize,
    taken: u64,
    fell_through: u64,
    bias: String,
}

/// Name of the counter map of a program's instrumented build.
pub fn counter_map_name(ext: &Extension) -> String {
    format!("rdx_prof_{}", &ext.hash_hex()[..8])
}

fn read_counters(cf: &rdx_control::CodeFlow, name: &str, len: usize) -> anyhow::Result<Vec<u8>> {
    let m = super::map::find_map(cf, name)?;
    let mut out = vec![0u8; m.map.lookup_len()];
    if !rdx_transport::xstate::lookup(cf.transport(), &m.map, &0u32.to_le_bytes(), &mut out)? {
        bail!("counter map {name} has no entry 0");
    }
    out.truncate(len);
    Ok(out)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.object)
        .with_context(|| format!("cannot read {}", args.object.display()))?;
    let object = rdx_bpf::loader::load(&bytes)
        .with_context(|| format!("cannot load {}", args.object.display()))?;
    let ext = Extension::from_object(&object, args.program.as_deref())?;
    let sites = branch_sites(&ext.insns);
    if sites.is_empty() {
        bail!("{} has no conditional jump: nothing to profile", ext.name);
    }
    if !(args.seconds.is_finite() && args.seconds >= 0.0) {
        bail!("--seconds must be a non-negative number");
    }
    let counter_bytes = 16 * sites.len();
    let map_name = counter_map_name(&ext);
    let mut maps = ext.maps.clone();
    let counter_index = maps.len() as u32;
    maps.push(MapDef {
        name: map_name.clone(),
        map_type: MapType::Array,
        key_size: 4,
        value_size: counter_bytes as u32,
        max_entries: 1,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    });
    let scout = Extension::new(&ext.name, &ext.section, ext.insns.clone(), maps);

    let registry = args.state.registry()?;
    let (node, mut cf) = attach(&registry, &args.node)?;
    let checked = cf.validate_code(&scout, &args.hook, args.class.as_deref())?;
    let arch: rdx_jit::Arch = cf
        .arch()
        .name()
        .parse()
        .context("the node's architecture")?;
    let mut opts = CompileOptions::new(arch);
    opts.needs_budget = checked.facts.needs_budget;
    opts.eim_class = format!("{}/{}", checked.hook, checked.class);
    opts.verify_ir = false;
    opts.branch_counters = Some(BranchCounters {
        symbol: Symbol::MapValue(counter_index),
    });
    let (artifact, _) = Compiler::new(arch)?.compile(&scout.insns, &opts)?;
    let artifact_bytes = artifact.to_bytes();
    let compiled = Compiled {
        artifact_hash: sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(
            &artifact_bytes,
        ))
        .into(),
        artifact,
        cached: false,
        budget: checked.facts.budget.unwrap_or(u64::MAX),
        class: checked.class.clone(),
    };
    let prepared = cf.prepare_prog(&args.hook, &scout, &compiled)?;
    let published = cf.tx(vec![prepared])?.remove(0);
    let record = |action: &str, version: u32, previous: u32, generation: u64| {
        registry.record(&HistoryEntry {
            id: 0,
            node: node.clone(),
            hook: args.hook.clone(),
            action: action.into(),
            version,
            previous_version: previous,
            program: ext.name.clone(),
            object: args.object.display().to_string(),
            class: checked.class.clone(),
            artifact: hex(&compiled.artifact_hash),
            at_ms: rdx_control::lease::now_ms(),
            generation,
        })
    };
    record(
        "profile",
        published.version,
        published.previous_version,
        published.generation,
    )?;
    if !args.json {
        eprintln!(
            "instrumented {} ({} conditional jumps) deployed to {node}/{} as version {}; profiling for {:.1} s",
            ext.name,
            sites.len(),
            args.hook,
            published.version,
            args.seconds
        );
    }

    // The counter map may be an earlier profile's (same program, same name): measure the
    // difference over this window only.
    let before = read_counters(&cf, &map_name, counter_bytes)?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    let after = read_counters(&cf, &map_name, counter_bytes)?;
    let elapsed = started.elapsed().as_secs_f64();
    let mut profile = BranchProfile::from_counters(&ext.insns, &after)?;
    let base = BranchProfile::from_counters(&ext.insns, &before)?;
    for (p, b) in profile.branches.iter_mut().zip(&base.branches) {
        p.taken = p.taken.wrapping_sub(b.taken);
        p.fell_through = p.fell_through.wrapping_sub(b.fell_through);
    }

    if !args.keep {
        let plain = cf.validate_code(&ext, &args.hook, args.class.as_deref())?;
        let compiled = cf.jit_compile_code(&ext, &plain, Some(&registry))?;
        let prepared = cf.prepare_prog(&args.hook, &ext, &compiled)?;
        let restored = cf.tx(vec![prepared])?.remove(0);
        registry.record(&HistoryEntry {
            id: 0,
            node: node.clone(),
            hook: args.hook.clone(),
            action: "deploy".into(),
            version: restored.version,
            previous_version: restored.previous_version,
            program: ext.name.clone(),
            object: args.object.display().to_string(),
            class: plain.class.clone(),
            artifact: hex(&compiled.artifact_hash),
            at_ms: rdx_control::lease::now_ms(),
            generation: restored.generation,
        })?;
        if !args.json {
            eprintln!(
                "plain build redeployed as version {}",
                restored.version
            );
        }
    }

    let policy = Policy {
        min_runs: args.min_runs,
        cold_share: args.cold_share,
    };
    let rows: Vec<Row> = profile
        .branches
        .iter()
        .zip(profile.classify(&policy))
        .map(|(b, (_, bias))| Row {
            pc: b.pc,
            taken: b.taken,
            fell_through: b.fell_through,
            bias: format!("{bias:?}").to_lowercase(),
        })
        .collect();
    let saved = SavedProfile {
        program: ext.name.clone(),
        program_hash: ext.hash_hex(),
        node: node.clone(),
        hook: args.hook.clone(),
        seconds: elapsed,
        policy,
        profile,
    };
    if let Some(path) = &args.out {
        std::fs::write(path, serde_json::to_string_pretty(&saved)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("profile of {} on {node}/{} over {elapsed:.1} s:", ext.name, args.hook);
        println!("{:>6} {:>12} {:>12}  bias", "slot", "taken", "fell through");
        for r in rows {
            println!("{:>6} {:>12} {:>12}  {}", r.pc, r.taken, r.fell_through, r.bias);
        }
    }
    Ok(())
}
