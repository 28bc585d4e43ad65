//! `rdx profile`: scouting. Deploys an instrumented build of a program whose branch counters
//! live in the node's XState, lets the node's traffic run through it, reads the counters
//! remotely and reports each conditional jump as likely, unlikely or unknown. The profile is
//! what `rdx optimize` compiles an elite version from. The node's CPU only runs the
//! instrumented code; everything else happens here.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use rdx_bpf::program::{MapDef, MapOrigin};
use rdx_region::layout::MapType;
use rdx_control::registry::Registry;
use rdx_control::{CodeFlow, Extension};
use rdx_deopt::profile::{BranchProfile, Policy};
use rdx_jit::{branch_sites, BranchCounters, Symbol};
use serde::{Deserialize, Serialize};

use super::deploy::ProgramTarget;
use super::node::{attach, StateArgs};

/// Profile a program's branches on a live node (deploys an instrumented build).
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: ProgramTarget,
    /// How long to let traffic run through the instrumented build.
    #[arg(long, default_value_t = 5.0, value_name = "SECS")]
    seconds: f64,
    /// Runs through a branch below which it stays "unknown".
    #[arg(long, default_value_t = 64, value_name = "RUNS")]
    min_runs: u64,
    /// Largest share of runs a direction may have and still be cold.
    #[arg(long, default_value_t = 0.0, value_name = "SHARE")]
    cold_share: f64,
    /// Write the profile here (JSON) for `rdx optimize --profile`.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Leave the instrumented build deployed (default: redeploy the plain build).
    #[arg(long)]
    keep: bool,
    /// Print JSON instead of text.
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

/// Where `rdx optimize` keeps the profile an elite version of `node`/`hook` was compiled
/// from (in the state directory), so that `rdx watch` can merge a fresh scouting window into
/// it when that version deoptimises too often.
pub fn published_profile_path(
    state_dir: &std::path::Path,
    node: &str,
    hook: &str,
    version: u32,
) -> PathBuf {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    state_dir
        .join("profiles")
        .join(format!("{}.{}.v{version}.json", clean(node), clean(hook)))
}

/// Saves the profile an elite version was published from (see [`published_profile_path`]).
pub fn save_published_profile(
    state_dir: &std::path::Path,
    version: u32,
    saved: &SavedProfile,
) -> anyhow::Result<()> {
    let path = published_profile_path(state_dir, &saved.node, &saved.hook, version);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(&path, serde_json::to_string(saved)?)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Name of the counter map of a program's instrumented build.
pub fn counter_map_name(ext: &Extension) -> String {
    format!("rdx_prof_{}", &ext.hash_hex()[..8])
}

fn read_counters(cf: &CodeFlow, name: &str, len: usize) -> anyhow::Result<Vec<u8>> {
    let m = super::map::find_map(cf, name)?;
    let mut out = vec![0u8; m.map.lookup_len()];
    if !rdx_transport::xstate::lookup(cf.transport(), &m.map, &0u32.to_le_bytes(), &mut out)? {
        bail!("counter map {name} has no entry 0");
    }
    out.truncate(len);
    Ok(out)
}

/// One scouting window on a live node, as `rdx profile` runs it and as `rdx watch` can
/// call it to re-profile: what to profile and where.
pub struct Scout<'a> {
    pub ext: &'a Extension,
    pub hook: &'a str,
    pub class: Option<&'a str>,
    pub window: Duration,
    /// Leave the instrumented build published (default: publish the plain build again).
    pub keep: bool,
}

/// What a scouting window found.
pub struct Scouted {
    pub profile: BranchProfile,
    /// Length of the window actually measured.
    pub seconds: f64,
    pub instrumented_version: u32,
    /// The plain build's version, when it was published again.
    pub restored_version: Option<u32>,
}

/// Publishes the instrumented build of `s.ext` with one `tx`, measures its branch counters
/// (read remotely from the node's XState) over `s.window`, and unless `s.keep` publishes the
/// plain build again with one `tx`. Requests are served throughout by a complete version.
pub fn scout(cf: &mut CodeFlow, registry: &Registry, s: &Scout<'_>) -> anyhow::Result<Scouted> {
    let ext = s.ext;
    let sites = branch_sites(ext.insns());
    if sites.is_empty() {
        bail!("{} has no conditional jump: nothing to profile", ext.name());
    }
    let counter_bytes = 16 * sites.len();
    let map_name = counter_map_name(ext);
    let mut maps = ext.maps().to_vec();
    let counter_index = maps.len() as u32;
    maps.push(MapDef {
        name: map_name.clone(),
        map_type: MapType::Array.into(),
        key_size: 4,
        value_size: counter_bytes as u32,
        max_entries: 1,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    });
    let scout = Extension::new(ext.name(), ext.section(), ext.insns().to_vec(), maps)
        .with_origin(ext.origin());

    let checked = cf.validate_code(&scout, s.hook, s.class)?;
    let compiled = cf.jit_compile_scouting(
        &scout,
        &checked,
        BranchCounters {
            symbol: Symbol::MapValue(counter_index),
        },
    )?;
    let prepared = cf.prepare_prog(s.hook, &scout, &compiled)?;
    let published = cf.tx(vec![prepared])?.remove(0);

    // The counter map may be an earlier profile's (same program, same name): measure the
    // difference over this window only.
    let before = read_counters(cf, &map_name, counter_bytes)?;
    let started = Instant::now();
    std::thread::sleep(s.window);
    let after = read_counters(cf, &map_name, counter_bytes)?;
    let seconds = started.elapsed().as_secs_f64();
    let mut profile = BranchProfile::from_counters(ext.insns(), &after)?;
    let base = BranchProfile::from_counters(ext.insns(), &before)?;
    for (p, b) in profile.branches.iter_mut().zip(&base.branches) {
        p.taken = p.taken.wrapping_sub(b.taken);
        p.fell_through = p.fell_through.wrapping_sub(b.fell_through);
    }

    let mut restored_version = None;
    if !s.keep {
        let plain = cf.validate_code(ext, s.hook, s.class)?;
        let compiled = cf.jit_compile_code(ext, &plain, Some(registry))?;
        let prepared = cf.prepare_prog(s.hook, ext, &compiled)?;
        let restored = cf.tx(vec![prepared])?.remove(0);
        restored_version = Some(restored.version);
    }
    Ok(Scouted {
        profile,
        seconds,
        instrumented_version: published.version,
        restored_version,
    })
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.target.object)
        .with_context(|| format!("cannot read {}", args.target.object.display()))?;
    let object = rdx_bpf::loader::load(&bytes)
        .with_context(|| format!("cannot load {}", args.target.object.display()))?;
    let ext = Extension::from_object(&object, args.target.program.as_deref())?
        .with_origin(args.target.object.display().to_string());
    if !(args.seconds.is_finite() && args.seconds >= 0.0) {
        bail!("--seconds must be a non-negative number");
    }
    let registry = args.state.registry()?;
    let (node, mut cf) = attach(&registry, &args.target.node)?;
    if !args.json {
        eprintln!(
            "deploying an instrumented build of {} to {node}/{} and profiling for {:.1} s",
            ext.name(), args.target.hook, args.seconds
        );
    }
    let scouted = scout(
        &mut cf,
        &registry,
        &Scout {
            ext: &ext,
            hook: &args.target.hook,
            class: args.target.class.as_deref(),
            window: Duration::from_secs_f64(args.seconds),
            keep: args.keep,
        },
    )?;
    if !args.json {
        eprintln!(
            "instrumented build was version {}{}",
            scouted.instrumented_version,
            scouted
                .restored_version
                .map(|v| format!("; plain build published again as version {v}"))
                .unwrap_or_default()
        );
    }

    let policy = Policy {
        min_runs: args.min_runs,
        cold_share: args.cold_share,
    };
    let profile = scouted.profile;
    let elapsed = scouted.seconds;
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
        program: ext.name().to_string(),
        program_hash: ext.hash_hex(),
        node: node.clone(),
        hook: args.target.hook.clone(),
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
        println!(
            "profile of {} on {node}/{} over {elapsed:.1} s:",
            ext.name(), args.target.hook
        );
        println!("{:>6} {:>12} {:>12}  bias", "slot", "taken", "fell through");
        for r in rows {
            println!(
                "{:>6} {:>12} {:>12}  {}",
                r.pc, r.taken, r.fell_through, r.bias
            );
        }
    }
    Ok(())
}
