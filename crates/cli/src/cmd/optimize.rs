//! `rdx optimize`: compiles the elite version of a program from a profile (`rdx profile
//! --out`) — cold branches become guards with deoptimisation exits and the code behind them
//! is dropped — and publishes it with one transaction, together with the fallback image
//! the node's runtime continues deoptimised runs in (written in the same code record, so
//! one version flip publishes both). `--revert` publishes the plain build again with one
//! transaction.

use std::path::PathBuf;

use anyhow::{bail, Context as _};
use rdx_control::Extension;
use serde::Serialize;

use super::deploy::ProgramTarget;
use super::node::{attach, StateArgs};
use super::profile::{save_published_profile, SavedProfile};

/// Compile a profile-specialised (elite) build of a program, or revert to the plain build.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: ProgramTarget,
    /// Profile written by `rdx profile --out` (required unless --revert).
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// Publish the plain (generic) build of the program again.
    #[arg(long)]
    revert: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Serialize)]
struct Report {
    program: String,
    guards: usize,
    dropped_insns: usize,
    elite_code_bytes: usize,
    generic_code_bytes: usize,
    published: bool,
    version: u32,
    previous_version: u32,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let bytes = std::fs::read(&args.target.object)
        .with_context(|| format!("cannot read {}", args.target.object.display()))?;
    let object = rdx_bpf::loader::load(&bytes)
        .with_context(|| format!("cannot load {}", args.target.object.display()))?;
    let ext = Extension::from_object(&object, args.target.program.as_deref())?;
    let registry = args.state.registry()?;
    let (node, mut cf) = attach(&registry, &args.target.node)?;
    // Recorded in the history, from where `rdx watch` finds the object to re-profile.
    let object_label = std::fs::canonicalize(&args.target.object)
        .unwrap_or_else(|_| args.target.object.clone())
        .display()
        .to_string();
    let ext = ext.with_origin(object_label);
    let checked = cf.validate_code(&ext, &args.target.hook, args.target.class.as_deref())?;

    if args.revert {
        let compiled = cf.jit_compile_code(&ext, &checked, Some(&registry))?;
        let prepared = cf.prepare_prog(&args.target.hook, &ext, &compiled)?;
        let published = cf.tx(vec![prepared])?.remove(0);
        println!(
            "reverted {node}/{} to the plain build of {}: version {} (was {})",
            args.target.hook, ext.name(), published.version, published.previous_version
        );
        return Ok(());
    }

    let Some(path) = &args.profile else {
        bail!("--profile FILE is required (write one with `rdx profile --out FILE`)");
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut saved: SavedProfile = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a profile written by rdx profile", path.display()))?;
    if saved.program_hash != ext.hash_hex() {
        bail!(
            "{} profiles program {} ({}), not this build of {} ({})",
            path.display(),
            saved.program,
            &saved.program_hash[..saved.program_hash.len().min(12)],
            ext.name(),
            &ext.hash_hex()[..12]
        );
    }
    saved.profile.check(ext.insns())?;
    // The generic build, for the size comparison (and cached for `--revert`).
    let generic = cf.jit_compile_code(&ext, &checked, Some(&registry))?;
    let generic = generic.artifact();
    let speculation = saved.profile.speculation(&saved.policy);
    let (elite, stats) = cf.jit_compile_elite(&ext, &checked, speculation)?;
    let prepared = cf.prepare_prog(&args.target.hook, &ext, &elite)?;
    let published = cf.tx(vec![prepared])?.remove(0);
    // Kept for `rdx watch`, which merges a fresh window into it when this version
    // deoptimises too often.
    saved.node = node.clone();
    saved.hook = args.target.hook.clone();
    save_published_profile(registry.dir(), published.version, &saved)?;
    let report = Report {
        program: ext.name().to_string(),
        guards: stats.guards,
        dropped_insns: stats.dropped_insns,
        elite_code_bytes: elite.artifact().code.len(),
        generic_code_bytes: generic.code.len(),
        published: true,
        version: published.version,
        previous_version: published.previous_version,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "elite build of {}: {} guards, {} of {} slots dropped, {} code bytes (generic: {})",
            ext.name(),
            stats.guards,
            stats.dropped_insns,
            ext.insns().len(),
            elite.artifact().code.len(),
            generic.code.len()
        );
        println!(
            "published on {node}/{}: version {} (was {}); failed guards continue in its \
             fallback image",
            args.target.hook, published.version, published.previous_version
        );
    }
    Ok(())
}
