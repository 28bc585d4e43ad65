//! cache-and-store: two sandboxes in two processes sharing one address plan.
//!
//! - The **storage** process (`cache-and-store store --plan <file>`) joins the plan at slot 1,
//!   exports `lookup`, and keeps its data in an XState hash table that its own `put` hook
//!   writes.
//! - The **cache** (this process, slot 2) runs an `on_get` hook whose extension serves hits
//!   from its own map and, on a miss, calls storage's `lookup` directly: the storage code runs
//!   on the cache's thread, against the storage's table. Nothing is sent to the storage
//!   process, so stopping it (SIGSTOP) does not stop the cache from answering.
//!
//! This process also plays the control plane: it deploys `put` and the exported `lookup` into
//! the storage region and `on_get` into its own.
//!
//! `cache-and-store` (or `cache-and-store demo`) runs the whole scenario and prints what
//! happens; it exits non-zero if any request is answered wrongly.
//!
//! SIGINT or SIGTERM stop either process with its files removed (the plan and both regions
//! for the demo, which also kills the storage process; its own region for the storage).

use anyhow::{bail, Context, Result};
use rdx_control::{create_codeflow, AttachOptions, Extension};
use rdx_runtime::{HookSpec, Runtime};
use rdx_xcall::service::Service;
use rdx_xcall_plan::plan::{Plan, PlanSpec};
use rdx_xcall_plan::Target;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Instant;

const STORAGE_SLOT: u16 = 1;
const CACHE_SLOT: u16 = 2;
const CALL_ID: u32 = 1100;
const STORAGE_EIM: &str = include_str!("../storage.eim.yaml");

#[repr(C)]
#[derive(Default, Debug)]
struct Request {
    key: u64,
    value: u64,
    /// 1 cache hit, 2 from storage, 3 absent, 4 error (errno in `value`).
    source: u64,
}

fn cache_eim() -> String {
    format!(
        "version: 1
hooks:
  - name: on_get
    context:
      size: 24
      fields:
        - {{ name: key, offset: 0, size: 8, access: read }}
        - {{ name: value, offset: 8, size: 8, access: read_write }}
        - {{ name: source, offset: 16, size: 8, access: read_write }}
functions:
{call}classes:
  - name: cache
    hook: on_get
    context: {{ read: [key, value, source], write: [value, source] }}
    functions: [call_storage_lookup]
    helpers: [map_lookup_elem, map_update_elem]
    instructions: \"< 10000\"
    xstate_bytes: 1048576
",
        call = rdx_xcall_plan::eim::call_function(
            "call_storage_lookup",
            CALL_ID,
            Target::new(STORAGE_SLOT, 0),
            8,
            8
        )
    )
}

fn extension(object: &str, prog: &str) -> Result<Extension> {
    let obj = rdx_bpf::loader::load(&std::fs::read(rdx_testdata::object_path(object))?)?;
    Ok(Extension::from_object(&obj, Some(prog))?)
}

/// Files this process created, removed on SIGINT/SIGTERM (a region outlives its host).
static CREATED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// The storage process the demo started (0: none), killed on SIGINT/SIGTERM.
static STORAGE_PID: AtomicU32 = AtomicU32::new(0);

fn created(path: impl Into<PathBuf>) {
    CREATED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(path.into());
}

/// Blocks SIGINT and SIGTERM in this thread and every thread it starts from now on, and
/// starts the thread that takes them: it kills the storage process (if any), removes the
/// files recorded with [`created`] and exits with `code`.
fn remove_files_on_termination(code: i32) -> Result<()> {
    // SAFETY: sigemptyset/sigaddset initialise and fill the set they are given.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    };
    // SAFETY: `set` is an initialised signal set; the old mask is not wanted.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        bail!(
            "blocking SIGINT/SIGTERM: {}",
            std::io::Error::from_raw_os_error(rc)
        );
    }
    std::thread::spawn(move || {
        let mut sig = 0;
        // SAFETY: `set` is initialised and `sig` writable; the signals are blocked in every
        // thread, so sigwait is their only taker.
        unsafe { libc::sigwait(&set, &mut sig) };
        let pid = STORAGE_PID.load(Ordering::Acquire);
        if pid != 0 {
            // SAFETY: signalling our own child (SIGKILL ends it even while it is stopped);
            // it is reaped when this process exits.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        for path in CREATED.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = std::fs::remove_file(path);
        }
        std::process::exit(code);
    });
    Ok(())
}

/// The storage process: serves `put <k> <v>` on stdin through its own hook, until its stdin
/// ends (its region is then removed).
fn store(plan: &str) -> Result<()> {
    remove_files_on_termination(0)?;
    let plan = Plan::open(plan)?;
    let svc = Service::builder(&plan, "storage")
        .slot(STORAGE_SLOT)
        .export("lookup", 8)
        .runtime(
            Runtime::builder()
                .eim_spec(STORAGE_EIM)
                .hook("put", HookSpec::new(16)),
        )
        .build()?;
    created(svc.runtime().path());
    println!("ready {}", svc.address());
    let put = svc.runtime().hook("put")?;
    let served = serve_puts(&put);
    svc.runtime().unlink()?;
    served
}

fn serve_puts(put: &rdx_runtime::Hook<'_>) -> Result<()> {
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["put", k, v] => {
                let mut ctx = [k.parse::<u64>()?, v.parse::<u64>()?];
                println!("ok {}", put.run(&mut ctx));
            }
            _ => break,
        }
    }
    Ok(())
}

fn demo() -> Result<()> {
    remove_files_on_termination(1)?;
    let plan_path = format!("/dev/shm/rdx-cache-and-store-{}", std::process::id());
    let _ = std::fs::remove_file(&plan_path);
    created(&plan_path);
    let plan = Plan::create(&plan_path, PlanSpec::default())?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["store", "--plan", &plan_path])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the storage process")?;
    STORAGE_PID.store(child.id(), Ordering::Release);
    let result = run(&plan, &mut child);
    let storage_region = plan.slot(STORAGE_SLOT).ok().map(|s| s.path);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&plan_path);
    if let Some(path) = storage_region {
        let _ = std::fs::remove_file(path);
    }
    result
}

fn run(plan: &Plan, child: &mut std::process::Child) -> Result<()> {
    let mut stdin = child.stdin.take().context("storage stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().context("storage stdout")?);
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    let address = line
        .trim()
        .strip_prefix("ready ")
        .with_context(|| format!("storage said {line:?}"))?
        .to_string();
    if let Some(path) = address.strip_prefix("shm:") {
        created(path);
    }
    let storage_pid = child.id();
    println!("storage sandbox: pid {storage_pid}, slot {STORAGE_SLOT}, region {address}");

    // Control plane: the storage's write path and its exported lookup.
    let mut cf = create_codeflow(&address, AttachOptions::default())?;
    cf.deploy("put", &extension("xcall/storage", "put")?, None, None)?;
    let v = rdx_xcall_control::deploy_export(
        &mut cf,
        "lookup",
        &extension("xcall/storage", "lookup")?,
        None,
    )?;
    println!("deployed storage.lookup version {} (exported)", v.version);
    for (k, val) in [(1u64, 100u64), (2, 200), (3, 300)] {
        writeln!(stdin, "put {k} {val}")?;
        stdin.flush()?;
        line.clear();
        stdout.read_line(&mut line)?;
        if line.trim() != "ok 1" {
            bail!("storage put {k}: {line:?}");
        }
    }

    // The cache sandbox, in this process.
    let cache = Service::builder(plan, "cache")
        .slot(CACHE_SLOT)
        .runtime(
            Runtime::builder()
                .eim_spec(cache_eim())
                .hook("on_get", HookSpec::new(24)),
        )
        .build()?;
    created(cache.runtime().path());
    cache.runtime().register_function(
        "call_storage_lookup",
        CALL_ID,
        rdx_xcall::call::xcall_call,
    )?;
    rdx_xcall::attach::attach(plan, STORAGE_SLOT)?;
    let mut ccf = create_codeflow(&cache.address(), AttachOptions::default())?;
    ccf.deploy("on_get", &extension("xcall/cache", "on_get")?, None, None)?;
    let hook = cache.runtime().hook("on_get")?;
    let result = requests(&hook, storage_pid);
    let _ = cache.runtime().unlink();
    result
}

fn requests(hook: &rdx_runtime::Hook<'_>, storage_pid: u32) -> Result<()> {
    let get = |key: u64| {
        let mut r = Request {
            key,
            ..Default::default()
        };
        hook.run(&mut r);
        r
    };
    let expect = |r: &Request, value: u64, source: u64| -> Result<()> {
        let name = ["?", "cache hit", "storage", "absent", "error"][r.source.min(4) as usize];
        println!("  get {} -> {} ({name})", r.key, r.value);
        if (r.value, r.source) != (value, source) {
            bail!("get {}: expected ({value}, {source}), got {r:?}", r.key);
        }
        Ok(())
    };
    println!("storage running:");
    expect(&get(1), 100, 2)?;
    expect(&get(1), 100, 1)?;
    expect(&get(9), 0, 3)?;

    // SAFETY: signalling our own child.
    unsafe { libc::kill(storage_pid as i32, libc::SIGSTOP) };
    std::thread::sleep(std::time::Duration::from_millis(20));
    let state = std::fs::read_to_string(format!("/proc/{storage_pid}/status"))?
        .lines()
        .find(|l| l.starts_with("State:"))
        .unwrap_or_default()
        .to_string();
    println!("storage stopped with SIGSTOP ({state}):");
    let start = Instant::now();
    expect(&get(2), 200, 2)?;
    expect(&get(3), 300, 2)?;
    expect(&get(2), 200, 1)?;
    let n = 10_000u64;
    for i in 0..n {
        let r = get(4 + i % 2); // absent keys: every one goes to storage
        if r.source != 3 {
            bail!("while stopped: {r:?}");
        }
    }
    println!(
        "  {n} more misses served by storage code while it was stopped, {:.0} ns each on average",
        start.elapsed().as_nanos() as f64 / (n + 3) as f64
    );
    if !state.contains('T') {
        bail!("the storage process was not stopped: {state}");
    }
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] | ["demo"] => demo(),
        ["store", "--plan", plan] => store(plan),
        _ => bail!("usage: cache-and-store [demo] | store --plan <file>"),
    }
}
