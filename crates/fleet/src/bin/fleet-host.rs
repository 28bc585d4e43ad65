//! A host for fleet tests and benchmarks: declares the hooks named on its command line
//! (context `struct { u64 value; u64 out; }`), exposes its region, registers, and runs hooks
//! on request from stdin. It links only `rdx-runtime`: programs arrive through the region.
//!
//! Its EIM spec binds two classes to every hook: `default` (map helpers) and `tight` (no
//! helpers at all), so plans can name a class that rejects a program.
//!
//! ```text
//! fleet-host [--path P] [--hold-timeout-ms N] HOOK...
//! stdout: "ready <path> <pid>"
//! stdin:  run HOOK VALUE  -> "ret R0 out OUT"
//!         stats HOOK      -> "stats runs R failures F hold_timeouts T"
//!         quit
//! ```
//!
//! With `--forward` it is one hop of a request chain (A -> B -> C -> D, each host's stdout
//! piped into the next one's stdin): "ready" goes to stderr, and every stdin line
//! `req ID OUT WAITED` runs the first hook with `out = OUT` and is written to stdout as
//! `req ID OUT' WAITED'`, where `WAITED'` counts the hops whose slot was held (the
//! broadcast's bubble) when the request arrived. End of input ends the host.

use rdx_runtime::{HookSpec, Runtime};
use std::io::{BufRead, Write};
use std::time::Duration;

#[repr(C)]
struct Ctx {
    value: u64,
    out: u64,
}

fn eim(hooks: &[String]) -> String {
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

fn main() {
    if let Err(e) = run() {
        eprintln!("fleet-host: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut path = None;
    let mut hooks = Vec::new();
    let mut forward = false;
    let mut hold_timeout = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--path" => path = Some(args.next().ok_or("--path needs a value")?),
            "--forward" => forward = true,
            "--hold-timeout-ms" => {
                let ms: u64 = args
                    .next()
                    .ok_or("--hold-timeout-ms needs a value")?
                    .parse()?;
                hold_timeout = Some(Duration::from_millis(ms));
            }
            name => hooks.push(name.to_string()),
        }
    }
    if hooks.is_empty() {
        return Err("name at least one hook".into());
    }
    let mut b = Runtime::builder()
        .eim_spec(eim(&hooks))
        .scratch_size(1 << 20)
        .code_size(1 << 20)
        .thread_slots(8);
    if let Some(p) = &path {
        b = b.path(p);
    }
    if let Some(t) = hold_timeout {
        b = b.hold_timeout(t);
    }
    for h in &hooks {
        b = b.hook(h, HookSpec::for_context::<Ctx>().default_return(0));
    }
    let rt = b.build()?;
    rt.register()?;
    if forward {
        forward_requests(&rt, &hooks[0])?;
        rt.teardown(Duration::from_millis(100))?;
        rt.unlink()?;
        return Ok(());
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "ready {} {}", rt.path().display(), std::process::id())?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["run", hook, value] => {
                let mut ctx = Ctx {
                    value: value.parse()?,
                    out: 0,
                };
                let r0 = rt.hook(hook)?.run(&mut ctx);
                writeln!(out, "ret {r0} out {}", ctx.out)?;
            }
            ["stats", hook] => {
                let s = rt.hook_stats(hook)?;
                writeln!(
                    out,
                    "stats runs {} failures {} hold_timeouts {}",
                    s.runs, s.failures, s.hold_timeouts
                )?;
            }
            ["quit"] => break,
            _ => writeln!(out, "error unknown command {line:?}")?,
        }
        out.flush()?;
    }
    rt.teardown(Duration::from_millis(100))?;
    rt.unlink()?;
    Ok(())
}

/// One hop of a request chain: stdin to the hook to stdout.
fn forward_requests(rt: &Runtime, hook_name: &str) -> Result<(), Box<dyn std::error::Error>> {
    use rdx_region::layout::{offsets, ACTIVE_HOLD};
    use rdx_transport::Transport;
    let hook = rt.hook(hook_name)?;
    let region = rt.region();
    let active_at = rt.info().hook_offset(hook.index()) + offsets::HOOK_ACTIVE;
    eprintln!("ready {} {}", rt.path().display(), std::process::id());
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
