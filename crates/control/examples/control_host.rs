//! The host the control plane's end-to-end tests (and benchmark) deploy into: one hook,
//! `on_request`, with context `struct { u64 value; u64 out; }`, an EIM spec with one class
//! for it, and optionally a worker thread that serves requests continuously.
//!
//! It links only `rdx-runtime`: nothing in it loads, verifies or compiles programs.
//!
//! ```text
//! control_host --path /dev/shm/rdx-x [--serve] [--code-size BYTES]
//! stdout: "ready <path> <pid>" once the region is registered
//! stdin:  run VALUE   -> "ret R0 out OUT"
//!         served      -> "served N"   (requests the --serve worker completed so far)
//!         quit
//! ```

use rdx_runtime::{HookSpec, Runtime};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

#[repr(C)]
struct Ctx {
    value: u64,
    out: u64,
}

/// The host's Extension Interface Model: what extensions of `on_request` may touch.
pub const EIM: &str = include_str!("../../../eim/on_request.yaml");

fn main() {
    if let Err(e) = run() {
        eprintln!("control_host: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mut path = None;
    let mut serve = false;
    let mut code_size: u64 = 4 << 20;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--path" => path = Some(args.next().ok_or("--path needs a value")?),
            "--serve" => serve = true,
            "--code-size" => code_size = args.next().ok_or("--code-size needs a value")?.parse()?,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let mut b = Runtime::builder()
        .eim_spec(EIM)
        .scratch_size(4 << 20)
        .code_size(code_size)
        .thread_slots(8)
        .hook(
            "on_request",
            HookSpec::for_context::<Ctx>().default_return(0),
        );
    if let Some(p) = &path {
        b = b.path(p);
    }
    let rt = b.build()?;
    rt.register()?;
    let served = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error>> {
        if serve {
            let hook = rt.hook("on_request")?;
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
        let result = (|| -> Result<(), Box<dyn std::error::Error>> {
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            writeln!(out, "ready {} {}", rt.path().display(), std::process::id())?;
            out.flush()?;
            let hook = rt.hook("on_request")?;
            for line in std::io::stdin().lock().lines() {
                let line = line?;
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["run", value] => {
                        let mut ctx = Ctx {
                            value: value.parse()?,
                            out: 0,
                        };
                        let r0 = hook.run(&mut ctx);
                        writeln!(out, "ret {r0} out {}", ctx.out)?;
                    }
                    ["served"] => writeln!(out, "served {}", served.load(Ordering::Relaxed))?,
                    ["quit"] => break,
                    _ => writeln!(out, "error unknown command {line:?}")?,
                }
                out.flush()?;
            }
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        result
    })?;
    rt.teardown(Duration::from_millis(100))?;
    rt.unlink()?;
    Ok(())
}
