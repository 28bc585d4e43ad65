//! A minimal host for tests and demos: declares hooks, exposes its region, then runs hooks
//! on request from stdin. It never loads anything: programs arrive through the region.
//!
//! ```text
//! rdx-stdio-host [--path P] [--hold-timeout-ms N] HOOK...
//! stdin:  run HOOK VALUE     -> "ret R0 out OUT"   (context: struct { u64 value; u64 out; })
//!         loop HOOK N VALUE  -> "done SUM"
//!         stats HOOK         -> "stats runs F failures F errors F hold_timeouts F"
//!         quit
//! ```
//! Exports host function `host_add` (id 1000: r1 + r2) and variable `host_counter` (u64).

use rdx_runtime::{HookSpec, Runtime};
use std::io::{BufRead, Write};
use std::time::Duration;

#[repr(C)]
struct Ctx {
    value: u64,
    out: u64,
}

static mut HOST_COUNTER: u64 = 0;

unsafe extern "C" fn host_add(a: u64, b: u64, _: u64, _: u64, _: u64) -> u64 {
    a.wrapping_add(b)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("rdx-stdio-host: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut b = Runtime::builder()
        .scratch_size(1 << 20)
        .code_size(1 << 20)
        .thread_slots(8);
    let mut hooks = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--path" => b = b.path(args.next().ok_or("--path needs a value")?),
            "--hold-timeout-ms" => {
                b = b.hold_timeout(Duration::from_millis(
                    args.next()
                        .ok_or("--hold-timeout-ms needs a value")?
                        .parse()?,
                ))
            }
            name => hooks.push(name.to_string()),
        }
    }
    for h in &hooks {
        b = b.hook(h, HookSpec::for_context::<Ctx>().default_return(u64::MAX));
    }
    let rt = b.build()?;
    rt.register_function("host_add", 1000, host_add)?;
    // SAFETY: a static that lives for the whole process.
    unsafe {
        rt.register_variable(
            "host_counter",
            std::ptr::addr_of_mut!(HOST_COUNTER) as *mut u8,
            8,
        )?
    };
    rt.register()?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "region {}", rt.path().display())?;
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
            ["loop", hook, n, value] => {
                let h = rt.hook(hook)?;
                let mut sum = 0u64;
                for _ in 0..n.parse::<u64>()? {
                    let mut ctx = Ctx {
                        value: value.parse()?,
                        out: 0,
                    };
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
            ["quit"] => break,
            _ => writeln!(out, "error unknown command {line:?}")?,
        }
        out.flush()?;
    }
    rt.teardown(Duration::from_millis(100))?;
    rt.unlink()?;
    Ok(())
}
