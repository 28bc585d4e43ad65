//! `rdx acl`: RDMA access-control policies — check, compile to the rule table, test against
//! pcap traces, and apply to a running node. Parsing, compiling and the enforcement program's
//! layouts are in `rdx-acl`; `apply` drives the CodeFlow API like `rdx deploy` does.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use rdx_acl::enforce;
use rdx_control::registry::HistoryAction;
use rdx_control::Extension;
use serde::Serialize;

use super::node::{attach, explain_held, StateArgs};

/// Check, compile and test RDMA ACL policy files.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: AclCommand,
}

#[derive(clap::Subcommand)]
enum AclCommand {
    /// Parse and check a policy file; print warnings (shadowed, empty or unapplied policies).
    Check {
        /// Policy file.
        file: PathBuf,
    },
    /// Compile a policy file into its rule table; optionally write the table image.
    Compile {
        /// Policy file.
        file: PathBuf,
        /// Write the rule image (the bytes placed in XState) to this file.
        #[arg(short, long, value_name = "IMAGE")]
        output: Option<PathBuf>,
    },
    /// Run every packet of a pcap trace through a policy file: verdict per packet, counters.
    Test {
        /// Policy file.
        file: PathBuf,
        /// pcap trace (link type Ethernet for RoCEv2 or 247 for InfiniBand).
        trace: PathBuf,
        /// Print only the counters.
        #[arg(long)]
        summary: bool,
    },
    /// Compile a policy file and deploy it to a node's packet hook with the enforcement
    /// program (bpf/acl/enforce.c): rules and code are written, then published together with
    /// one compare-and-swap, so no packet sees a mix of the old and new rule sets.
    Apply {
        /// Policy file.
        file: PathBuf,
        /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`, `fabric://HOST:PORT?...`).
        #[arg(long)]
        node: String,
        /// The hook (declared with the context of bpf/acl/acl.yaml).
        #[arg(long, default_value = enforce::HOOK)]
        hook: String,
        /// Extension class (default: the only one the node binds to the hook).
        #[arg(long)]
        class: Option<String>,
        /// Enforcement program object (default: bpf/acl/enforce.c, compiled into this binary).
        #[arg(long, value_name = "OBJ")]
        object: Option<PathBuf>,
        /// Generation word reported with every decision (default: a hash of the rules).
        #[arg(long)]
        generation: Option<u64>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        state: StateArgs,
    },
    /// The enforcement program's counters on a node, summed over the host's threads (they
    /// live at the start of each thread's `acl_scratch` value and survive policy updates).
    Stats {
        /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`, `fabric://HOST:PORT?...`).
        #[arg(long)]
        node: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        state: StateArgs,
    },
}

/// The enforcement program `bpf/acl/enforce.c`, compiled by this crate's build script: the
/// binary carries what `apply` deploys, so it needs no build tree at run time.
const ENFORCE_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/acl_enforce.o"));

#[derive(Serialize)]
struct ApplyReport {
    node: String,
    hook: String,
    policy: String,
    rules: usize,
    generation: u64,
    class: String,
    version: u32,
    previous_version: u32,
    cached: bool,
    verify_us: f64,
    compile_us: f64,
    write_us: f64,
    publish_us: f64,
}

struct ApplyArgs {
    file: PathBuf,
    node: String,
    hook: String,
    class: Option<String>,
    object: Option<PathBuf>,
    generation: Option<u64>,
    json: bool,
    state: StateArgs,
}

fn apply(a: ApplyArgs) -> anyhow::Result<()> {
    let set = rdx_acl::api::load(&a.file)?;
    let rules = rdx_acl::compile::compile(&set)
        .with_context(|| format!("cannot compile {}", a.file.display()))?;
    let generation = a
        .generation
        .unwrap_or_else(|| enforce::content_generation(&rules));
    let (object_name, bytes) = match &a.object {
        Some(path) => (
            path.display().to_string(),
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?,
        ),
        None => (
            "the built-in bpf/acl/enforce.c".to_string(),
            ENFORCE_OBJECT.to_vec(),
        ),
    };
    let object = rdx_bpf::loader::load(&bytes)
        .with_context(|| format!("cannot load {object_name}"))?;
    // The code does not depend on the policy: it is compiled (and cached) from the object as
    // built; the classifier goes into the bank of its XState maps that no running version
    // reads, and the version's copy of the control section names that bank.
    let code = Extension::from_object(&object, None)?;
    let (_, image) = enforce::image(&rules)?;
    let mut with_rules = object.clone();
    let section = with_rules
        .maps
        .iter_mut()
        .find(|m| m.name == enforce::RULES_SECTION)
        .with_context(|| {
            format!(
                "{object_name} has no {} section: not the ACL enforcement program",
                enforce::RULES_SECTION
            )
        })?;
    let section_size = section.value_size as usize;

    let registry = a.state.registry()?;
    let (node, mut cf) = attach(&registry, &a.node)?;
    // Only the active version may still run once older ones are released (epoch wait), so
    // the bank it does not read is free to write.
    cf.reclaim(0)
        .context("cannot release the hook's previous versions")?;
    let bank = match active_bank(&mut cf, &a.hook)? {
        Some(b) => 1 - b,
        None => 0,
    };
    let tag = rdx_control::lease::now_ms() << 20 ^ std::process::id() as u64;
    section.initial_value = Some(enforce::control_section(
        &image,
        bank,
        generation,
        tag,
        section_size,
    )?);
    let policy_ext =
        Extension::from_object(&with_rules, None)?.with_origin(a.file.display().to_string());
    let progress = |msg: String| {
        if !a.json {
            eprint!("{msg}");
            let _ = std::io::stderr().flush();
        }
    };
    let us = |t: Instant| t.elapsed().as_secs_f64() * 1e6;
    progress(format!(
        "{}: {} rules, generation {generation:#x}; verifying for {node}/{} ... ",
        a.file.display(),
        rules.rules.len(),
        a.hook
    ));
    let t = Instant::now();
    let checked = cf
        .validate_code(&policy_ext, &a.hook, a.class.as_deref())
        .inspect_err(|_| progress("rejected\n".into()))?;
    let verify_us = us(t);
    progress(format!("ok ({verify_us:.0} us)\n"));
    pause_point("verified");
    let t = Instant::now();
    let compiled = cf.jit_compile_code(&code, &checked, Some(&registry))?;
    let compile_us = us(t);
    let t = Instant::now();
    let mut prepared = cf
        .prepare_prog(&a.hook, &policy_ext, &compiled)
        .map_err(explain_held(&cf, &node))?;
    prepared.record_as(HistoryAction::AclApply);
    pause_point("prepared");
    let writes = enforce::bank_writes(&image, &rdx_acl::classify::image::Dirty::everything(), bank);
    let (first_half, second_half) = writes.split_at(writes.len() / 2);
    let written = write_bank(&cf, &prepared.map_ids, first_half).and_then(|()| {
        pause_point("half-written");
        write_bank(&cf, &prepared.map_ids, second_half)
    });
    if let Err(e) = written {
        cf.abort(prepared)?;
        return Err(e);
    }
    let write_us = us(t);
    pause_point("written");
    let t = Instant::now();
    let published = cf.tx(vec![prepared])?.remove(0);
    let publish_us = us(t);
    pause_point("published");
    let report = ApplyReport {
        node,
        hook: a.hook,
        policy: a.file.display().to_string(),
        rules: rules.rules.len(),
        generation,
        class: checked.class().to_string(),
        version: published.version,
        previous_version: published.previous_version,
        cached: compiled.cached(),
        verify_us,
        compile_us,
        write_us,
        publish_us,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "applied {} to {}/{}: version {} (was {}), {} rules, generation {:#x}; compile {:.0} us{}, write {:.0} us, publish {:.1} us",
            report.policy,
            report.node,
            report.hook,
            report.version,
            report.previous_version,
            report.rules,
            report.generation,
            report.compile_us,
            if report.cached { " (cached)" } else { "" },
            report.write_us,
            report.publish_us
        );
    }
    Ok(())
}

/// Environment variable naming a step of `apply` at which it stops and waits to be killed
/// (`verified`, `prepared`, `half-written`, `written`, `published`): how the tests show that
/// an apply killed at any step leaves the running version deciding by a complete policy.
const PAUSE_ENV: &str = "RDX_ACL_APPLY_PAUSE_AT";

/// Stops for good at `step` when [`PAUSE_ENV`] names it, after saying so on stderr.
fn pause_point(step: &str) {
    if std::env::var(PAUSE_ENV).is_ok_and(|v| v == step) {
        eprintln!("rdx acl apply: paused at {step}");
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}

/// The bank the hook's active version reads, from its control block, if it runs the
/// enforcement program; `None` when no version is active or the active one has no control
/// block (then no running version reads either bank).
///
/// The control block is found by what the node holds, not by name: the node names a
/// version's global-data maps after the program (`acl_enforce.data.acl`), so a lookup by the
/// section name finds nothing. It is the one-element map of [`CONTROL_SIZE`]-byte values
/// starting with [`CONTROL_MAGIC`] (no other map of the program has that shape). A map of
/// the active version that cannot be opened is an error rather than "no control block":
/// guessing bank 0 there would write the bank the running version reads.
///
/// [`CONTROL_SIZE`]: rdx_acl::classify::image::CONTROL_SIZE
/// [`CONTROL_MAGIC`]: rdx_acl::classify::image::CONTROL_MAGIC
fn active_bank(cf: &mut rdx_control::CodeFlow, hook: &str) -> anyhow::Result<Option<u32>> {
    use rdx_acl::classify::image::{CONTROL_MAGIC, CONTROL_SIZE};
    let Some(active) = cf.versions(hook)?.into_iter().find(|v| v.active) else {
        return Ok(None);
    };
    let t = cf.transport();
    let info = &cf.view().info;
    let mut found: Option<u32> = None;
    for id in active.map_ids {
        let m = rdx_transport::xstate::open(t, info, id as u32).with_context(|| {
            format!(
                "cannot open map {id} of {hook}'s active version {} to find the bank it reads",
                active.version
            )
        })?;
        if m.map.max_entries != 1 || m.map.value_size as usize != CONTROL_SIZE {
            continue;
        }
        let mut head = [0u8; 16];
        t.read(m.map.data, &mut head)?;
        if head[..8] != CONTROL_MAGIC {
            continue;
        }
        let bank = u32::from_le_bytes(head[enforce::BANK_OFFSET..16].try_into()?);
        anyhow::ensure!(
            bank <= 1,
            "the control block of {hook}'s active version {} (map {}) names bank {bank}: the \
             node holds an inconsistent ACL deployment",
            active.version,
            m.name
        );
        anyhow::ensure!(
            found.is_none_or(|b| b == bank),
            "{hook}'s active version {} has two control blocks naming different banks",
            active.version
        );
        found = Some(bank);
    }
    Ok(found)
}

/// The program's counters: the first [`enforce::STATS_SIZE`] bytes of every thread's copy of
/// [`enforce::STATS_MAP`], summed.
fn read_stats(cf: &rdx_control::CodeFlow) -> anyhow::Result<(enforce::Stats, u32)> {
    use rdx_transport::xstate;
    let t = cf.transport();
    let m = xstate::find(t, &cf.view().info, enforce::STATS_MAP).with_context(|| {
        format!(
            "the node has no map {}: the ACL enforcement program was never deployed there",
            enforce::STATS_MAP
        )
    })?;
    anyhow::ensure!(
        m.map.value_size as usize >= enforce::STATS_SIZE,
        "map {} has {} bytes per value, fewer than the counters' {}",
        enforce::STATS_MAP,
        m.map.value_size,
        enforce::STATS_SIZE
    );
    let mut total = enforce::Stats::default();
    let mut buf = [0u8; enforce::STATS_SIZE];
    for copy in 0..m.map.copies {
        let at = xstate::lookup_ref(t, &m.map, &0u32.to_le_bytes(), copy)?
            .context("the counters' element is missing")?;
        t.read(at, &mut buf)?;
        total.add(&enforce::Stats::from_bytes(&buf)?);
    }
    Ok((total, m.map.copies))
}

fn stats(node: &str, json: bool, state: &StateArgs) -> anyhow::Result<()> {
    let registry = state.registry()?;
    let (node, cf) = attach(&registry, node)?;
    let (s, threads) = read_stats(&cf)?;
    // Runs that spent their instruction budget: the runtime stops them and the hook's
    // default (deny) decides the frame; the program cannot count them itself.
    let hook = cf.view().hook(enforce::HOOK)?;
    let status = rdx_control::node::hook_status(cf.transport(), &cf.view().info, hook.index)?;
    let budget_exhausted = status.failures.saturating_sub(status.deopts);
    let malformed: serde_json::Map<String, serde_json::Value> =
        rdx_acl::packet::MalformedReason::ALL
            .iter()
            .zip(s.malformed)
            .map(|(r, n)| (r.name().to_string(), n.into()))
            .collect();
    if json {
        let v = serde_json::json!({
            "node": node,
            "threads": threads,
            "packets": s.packets,
            "allowed": s.allowed,
            "denied": s.denied,
            "not_rdma": s.not_rdma,
            "default": s.default_hits,
            "malformed": malformed,
            "cm_table_full": s.cm_table_full,
            "cm_unknown_connection": s.cm_unknown_connection,
            "cm_created": s.cm_created,
            "cm_removed": s.cm_removed,
            "uninspected": s.uninspected,
            "budget_exhausted": budget_exhausted,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{node}: packets {} allowed {} denied {} not_rdma {} default {} uninspected {} malformed {} cm_created {} cm_removed {} cm_unknown_connection {} cm_table_full {} budget_exhausted {budget_exhausted} ({threads} threads)",
            s.packets,
            s.allowed,
            s.denied,
            s.not_rdma,
            s.default_hits,
            s.uninspected,
            s.malformed.iter().sum::<u64>(),
            s.cm_created,
            s.cm_removed,
            s.cm_unknown_connection,
            s.cm_table_full
        );
        for (name, n) in malformed.iter().filter(|(_, n)| n.as_u64() != Some(0)) {
            println!("  malformed {name} {n}");
        }
    }
    Ok(())
}

/// Copies the image into the version's bank maps.
fn write_bank(
    cf: &rdx_control::CodeFlow,
    map_ids: &[u32],
    writes: &[enforce::BankWrite<'_>],
) -> anyhow::Result<()> {
    let t = cf.transport();
    let info = &cf.view().info;
    let maps: Vec<rdx_transport::xstate::MapInfo> = map_ids
        .iter()
        .filter_map(|&id| rdx_transport::xstate::open(t, info, id).ok())
        .collect();
    for w in writes {
        let m = &maps
            .iter()
            .find(|m| m.name == w.map)
            .with_context(|| format!("the new version has no map {}", w.map))?
            .map;
        let at = m.data + w.first as u64 * m.value_stride as u64;
        anyhow::ensure!(
            w.bytes.len() % m.value_stride as usize == 0
                && w.first as u64 * m.value_stride as u64 + w.bytes.len() as u64
                    <= m.max_entries as u64 * m.value_stride as u64,
            "map {} has another shape than the program's",
            w.map
        );
        t.write(at, w.bytes)?;
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        AclCommand::Check { file } => {
            print!("{}", rdx_acl::api::check(&file)?);
        }
        AclCommand::Compile { file, output } => {
            let report = rdx_acl::api::compile_file(&file)?;
            print!("{report}");
            if let Some(out) = output {
                std::fs::write(&out, &report.image)
                    .with_context(|| format!("cannot write {}", out.display()))?;
                println!("wrote {} bytes to {}", report.image.len(), out.display());
            }
        }
        AclCommand::Test {
            file,
            trace,
            summary,
        } => {
            let mut report = rdx_acl::api::test(&file, &trace)?;
            if summary {
                report.verdicts.clear();
            }
            print!("{report}");
        }
        AclCommand::Apply {
            file,
            node,
            hook,
            class,
            object,
            generation,
            json,
            state,
        } => apply(ApplyArgs {
            file,
            node,
            hook,
            class,
            object,
            generation,
            json,
            state,
        })?,
        AclCommand::Stats { node, json, state } => stats(&node, json, &state)?,
    }
    Ok(())
}
