//! A host for fleet tests and benchmarks: declares the hooks named on its command line
//! (context `struct { u64 value; u64 out; }`), exposes its region, registers, and runs hooks
//! on request from stdin. It links only `rdx-runtime`: programs arrive through the region.
//!
//! Its EIM spec binds two classes to every hook: `default` (map helpers) and `tight` (no
//! helpers at all), so plans can name a class that rejects a program.
//!
//! ```text
//! fleet-host --path P HOOK...
//! stdout: "ready <path> <pid>"
//! stdin:  run HOOK VALUE  -> "ret R0 out OUT"
//!         stats HOOK      -> "stats runs R failures F hold_timeouts T"
//!         quit
//! ```

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
    while let Some(a) = args.next() {
        match a.as_str() {
            "--path" => path = Some(args.next().ok_or("--path needs a value")?),
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
    for h in &hooks {
        b = b.hook(h, HookSpec::for_context::<Ctx>().default_return(0));
    }
    let rt = b.build()?;
    rt.register()?;
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
