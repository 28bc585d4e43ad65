//! `rdx-test-host`: the host process that rdx's integration tests, benchmarks and demo start
//! and deploy into. One binary for every crate's tests: a *mode* chooses what the region
//! declares, and every mode speaks the same line protocol on stdin and stdout.
//!
//! It owns nothing but that fixture. It links only the data plane (the runtime, and the
//! fabric's server side): nothing in it
//! loads, verifies or compiles programs, which arrive through the region (the control
//! crate's agentless test checks the binary for control-plane code and watches it make no
//! system call while programs are deployed). It is not shipped (`publish = false`), and no
//! shipped crate depends on this one.
//!
//! ```text
//! rdx-test-host MODE [--path P] [--hold-timeout-ms N] [--code-size BYTES] [--serve] [--forward] [HOOK...]
//! MODE     runtime  no EIM spec; exports host function `host_add` (id 1000: r1 + r2) and
//!                   variable `host_counter` (u64); a hook with nothing attached returns
//!                   u64::MAX (the runtime's cross-process tests)
//!          fleet    an EIM spec binding two classes to every hook: `default` (map helpers)
//!                   and `tight` (no helpers at all), so plans can name a class that rejects
//!                   a program (the fleet's tests and benchmark)
//!          control  the EIM spec eim/on_request.yaml, 4 MiB of scratchpad and (by default)
//!                   of code (the control plane's tests and the demo)
//! HOOK     hooks to declare, context `struct { u64 value; u64 out; }` (default: on_request)
//! stdout:  "ready <path> <pid>" once the region is registered; with the fabric,
//!          "ready <bootstrap address> <provider> <pid>" once it is served
//! stdin:   run [HOOK] VALUE   -> "ret R0 out OUT"   (the first hook when HOOK is left out)
//!          loop HOOK N VALUE  -> "done SUM"         (N runs, the sum of their r0)
//!          stats HOOK         -> "stats runs R failures F errors E hold_timeouts T"
//!          served             -> "served N"         (runs the --serve worker completed)
//!          rotate             -> "rotated"          (fabric: re-reads the token file and
//!                                                    revokes every key handed out)
//!          quit
//! ```
//!
//! Every mode serves its region across hosts when the environment asks for it
//! (`RDX_FABRIC_LISTEN`, `RDX_FABRIC_TOKEN_FILE`, `RDX_FABRIC_PROVIDER`:
//! `rdx_fabric::serve_from_env`, the data plane's opt-in); only the provider then answers
//! region requests, no thread of this host reads them.
//!
//! `--serve` starts a worker thread that runs the first hook continuously. With `--forward`
//! the host is one hop of a request chain (A -> B -> C -> D, each host's stdout piped into
//! the next one's stdin): "ready" goes to stderr, and every stdin line `req ID OUT WAITED`
//! runs the first hook with `value = ID, out = OUT` and is written to stdout as
//! `req ID OUT' WAITED'`, where `WAITED'` counts the hops whose slot was held (a broadcast's
//! bubble) when the request arrived. End of input ends the host.

use rdx_fabric::FabricServer;
use rdx_runtime::{HookSpec, Runtime, RuntimeBuilder};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The context of every hook.
#[repr(C)]
struct Ctx {
    value: u64,
    out: u64,
}

/// What the region declares.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Runtime,
    Fleet,
    Control,
}

/// The control mode's EIM spec.
const ON_REQUEST_EIM: &str = include_str!("../../../eim/on_request.yaml");

/// The runtime mode's host variable.
static HOST_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The runtime mode's host function: `r1 + r2`.
unsafe extern "C" fn host_add(a: u64, b: u64, _: u64, _: u64, _: u64) -> u64 {
    a.wrapping_add(b)
}

struct Options {
    mode: Mode,
    path: Option<String>,
    hold_timeout: Option<Duration>,
    code_size: Option<u64>,
    serve: bool,
    forward: bool,
    hooks: Vec<String>,
}

type Error = Box<dyn std::error::Error>;

fn main() {
    if let Err(e) = run() {
        eprintln!("rdx-test-host: {e}");
        std::process::exit(1);
    }
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, Error> {
    let mode = match args.next().as_deref() {
        Some("runtime") => Mode::Runtime,
        Some("fleet") => Mode::Fleet,
        Some("control") => Mode::Control,
        other => return Err(format!("mode runtime, fleet or control, not {other:?}").into()),
    };
    let mut o = Options {
        mode,
        path: None,
        hold_timeout: None,
        code_size: None,
        serve: false,
        forward: false,
        hooks: Vec::new(),
    };
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--path" => o.path = Some(value()?),
            "--hold-timeout-ms" => o.hold_timeout = Some(Duration::from_millis(value()?.parse()?)),
            "--code-size" => o.code_size = Some(value()?.parse()?),
            "--serve" => o.serve = true,
            "--forward" => o.forward = true,
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}").into()),
            hook => o.hooks.push(hook.to_string()),
        }
    }
    if o.hooks.is_empty() {
        o.hooks.push("on_request".into());
    }
    Ok(o)
}

/// The fleet mode's EIM spec: classes `default` and `tight` for every hook.
fn fleet_eim(hooks: &[String]) -> String {
    let mut s = String::from("version: 1\nhooks:\n");
    for h in hooks {
        s += &format!(
            "  - name: {h}\n    context:\n      size: 16\n      fields:\n        \
             - {{name: value, offset: 0, size: 8, access: read}}\n        \
             - {{name: out, offset: 8, size: 8, access: read_write}}\n"
        );
    }
    s += "classes:\n";
    for h in hooks {
        s += &format!(
            "  - name: default\n    hook: {h}\n    context: {{read: [value, out], write: [out]}}\n    \
             helpers: [map_lookup_elem, map_update_elem, map_delete_elem]\n    \
             instructions: 100000\n    xstate_bytes: 1048576\n\
             \x20 - name: tight\n    hook: {h}\n    context: {{read: [value, out], write: [out]}}\n    \
             helpers: []\n    instructions: 1000\n    xstate_bytes: 0\n"
        );
    }
    s
}

fn builder(o: &Options) -> RuntimeBuilder {
    let (eim, size, default_return) = match o.mode {
        Mode::Runtime => (None, 1 << 20, u64::MAX),
        Mode::Fleet => (Some(fleet_eim(&o.hooks)), 1 << 20, 0),
        Mode::Control => (Some(ON_REQUEST_EIM.to_string()), 4 << 20, 0),
    };
    let mut b = Runtime::builder()
        .scratch_size(size)
        .code_size(o.code_size.unwrap_or(size))
        .thread_slots(8);
    if let Some(eim) = eim {
        b = b.eim_spec(eim);
    }
    if let Some(p) = &o.path {
        b = b.path(p);
    }
    if let Some(t) = o.hold_timeout {
        b = b.hold_timeout(t);
    }
    for h in &o.hooks {
        b = b.hook(
            h,
            HookSpec::for_context::<Ctx>().default_return(default_return),
        );
    }
    b
}

fn run() -> Result<(), Error> {
    let o = parse(std::env::args().skip(1))?;
    let rt = builder(&o).build()?;
    if o.mode == Mode::Runtime {
        rt.register_function("host_add", 1000, host_add)?;
        // SAFETY: a static of 8 bytes that lives for the whole process; extensions access it
        // only through the region's context table, as the runtime's contract allows.
        unsafe { rt.register_variable("host_counter", HOST_COUNTER.as_ptr().cast(), 8)? };
    }
    rt.register()?;
    let mut fabric = rdx_fabric::serve_from_env(rt.path())?;
    let ready = match &fabric {
        Some(server) => format!(
            "ready {} {} {}",
            server.bootstrap_addr(),
            server.provider(),
            std::process::id()
        ),
        None => format!("ready {} {}", rt.path().display(), std::process::id()),
    };
    let first = o.hooks[0].as_str();
    if o.forward {
        forward_requests(&rt, first, &ready)?;
    } else {
        let served = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| -> Result<(), Error> {
            if o.serve {
                let hook = rt.hook(first)?;
                let (served, stop) = (&served, &stop);
                s.spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..256 {
                            let mut ctx = Ctx { value: i, out: 0 };
                            std::hint::black_box(hook.run(&mut ctx));
                            i += 1;
                        }
                        served.fetch_add(256, Ordering::Relaxed);
                    }
                });
            }
            let result = serve_lines(&rt, first, &ready, &served, &mut fabric);
            stop.store(true, Ordering::Relaxed);
            result
        })?;
    }
    drop(fabric);
    rt.teardown(Duration::from_millis(100))?;
    rt.unlink()?;
    Ok(())
}

/// The line protocol, until `quit` or the end of input.
fn serve_lines(
    rt: &Runtime,
    first: &str,
    ready: &str,
    served: &AtomicU64,
    fabric: &mut Option<FabricServer>,
) -> Result<(), Error> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "{ready}")?;
    out.flush()?;
    let run_once = |hook: &str, value: &str| -> Result<(u64, u64), Error> {
        let mut ctx = Ctx {
            value: value.parse()?,
            out: 0,
        };
        let r0 = rt.hook(hook)?.run(&mut ctx);
        Ok((r0, ctx.out))
    };
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["run", value] => {
                let (r0, o) = run_once(first, value)?;
                writeln!(out, "ret {r0} out {o}")?;
            }
            ["run", hook, value] => {
                let (r0, o) = run_once(hook, value)?;
                writeln!(out, "ret {r0} out {o}")?;
            }
            ["loop", hook, n, value] => {
                let h = rt.hook(hook)?;
                let value = value.parse()?;
                let mut sum = 0u64;
                for _ in 0..n.parse::<u64>()? {
                    let mut ctx = Ctx { value, out: 0 };
                    sum = sum.wrapping_add(h.run(&mut ctx));
                }
                writeln!(out, "done {sum}")?;
            }
            ["stats", hook] => {
                let s = rt.hook_stats(hook)?;
                writeln!(
                    out,
                    "stats runs {} failures {} errors {} hold_timeouts {}",
                    s.runs, s.failures, s.errors, s.hold_timeouts
                )?;
            }
            ["served"] => writeln!(out, "served {}", served.load(Ordering::Relaxed))?,
            // The operator replaced the token file (a leak is suspected): serve the new
            // token and revoke every key handed out under the old one.
            ["rotate"] => match rotate(fabric.as_mut()) {
                Ok(()) => writeln!(out, "rotated")?,
                Err(e) => writeln!(out, "error {e}")?,
            },
            ["quit"] => break,
            _ => writeln!(out, "error unknown command {line:?}")?,
        }
        out.flush()?;
    }
    Ok(())
}

/// Re-reads the token file the environment names and makes the fabric server answer only it.
fn rotate(fabric: Option<&mut FabricServer>) -> Result<(), Error> {
    let server = fabric.ok_or("not serving over the fabric")?;
    let file = std::env::var_os(rdx_fabric::ENV_TOKEN_FILE).ok_or("no token file")?;
    server.rotate(rdx_fabric::read_token_file(std::path::Path::new(&file))?)?;
    Ok(())
}

/// One hop of a request chain: stdin to the hook to stdout.
fn forward_requests(rt: &Runtime, hook_name: &str, ready: &str) -> Result<(), Error> {
    use rdx_region::layout::{offsets, ACTIVE_HOLD};
    use rdx_transport::Transport;
    let hook = rt.hook(hook_name)?;
    let region = rt.region();
    let active_at = rt.info().hook_offset(hook.index()) + offsets::HOOK_ACTIVE;
    eprintln!("{ready}");
    // Line-buffered: each request is forwarded as soon as its hook ran. Batching output
    // would keep requests that already passed this hop from the next one while this hop
    // waits (on its input or on a held hook), and a drain waiting for them would stall.
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut input = std::io::BufReader::with_capacity(1 << 16, std::io::stdin());
    let mut line = String::new();
    loop {
        line.clear();
        if input.read_line(&mut line)? == 0 {
            break;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let ["req", id, stamp, waited] = words.as_slice() else {
            return Err(format!("unknown request {line:?}").into());
        };
        let held = region.read_u64(active_at)? & ACTIVE_HOLD != 0;
        let mut ctx = Ctx {
            value: id.parse()?,
            out: stamp.parse()?,
        };
        hook.run(&mut ctx);
        let waited: u64 = waited.parse::<u64>()? + held as u64;
        writeln!(out, "req {id} {} {waited}", ctx.out)?;
    }
    Ok(())
}
