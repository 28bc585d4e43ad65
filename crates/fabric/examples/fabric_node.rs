//! A data plane that serves its region over the fabric: one hook, `on_request`, with context
//! `struct { u64 value; u64 out; }`. Used by the multi-host tests and the benchmark.
//!
//! It links `rdx-runtime` and `rdx-fabric` only: nothing in it loads, verifies or compiles
//! programs, and no rdx thread in it reads region requests.
//!
//! ```text
//! fabric_node --path /dev/shm/rdx-x --bind 10.0.0.2 --token-file FILE [--provider NAME] [--port N]
//! stdout: "ready <bootstrap addr> <provider> <pid>" once serving
//! stdin:  run VALUE -> "ret R0 out OUT";
//!         rotate -> "rotated" (re-reads the token file, revokes every key handed out);  quit
//! ```

use rdx_fabric::{read_token_file, serve, ProgressThread, Provider, ServeConfig};
use rdx_runtime::{HookSpec, Runtime};
use std::io::{BufRead, Write};
use std::time::Duration;

#[repr(C)]
struct Ctx {
    value: u64,
    out: u64,
}

const EIM: &str = include_str!("../../../eim/on_request.yaml");

fn main() {
    if let Err(e) = run() {
        eprintln!("fabric_node: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut path, mut bind, mut token_file, mut provider, mut port) =
        (None, None, None, None, 0u16);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--path" => path = Some(value()?),
            "--bind" => bind = Some(value()?.parse()?),
            "--token-file" => token_file = Some(value()?),
            "--provider" => provider = Some(value()?),
            "--port" => port = value()?.parse()?,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let path = path.ok_or("--path is required")?;
    let token_file = std::path::PathBuf::from(token_file.ok_or("--token-file is required")?);
    // A token file others can read is refused: whoever reads it owns this node.
    let token = read_token_file(&token_file)?;
    let rt = Runtime::builder()
        .path(&path)
        .eim_spec(EIM)
        .scratch_size(4 << 20)
        .code_size(4 << 20)
        .thread_slots(8)
        .hook(
            "on_request",
            HookSpec::for_context::<Ctx>().default_return(0),
        )
        .build()?;
    rt.register()?;
    let mut server = serve(
        rt.path(),
        ServeConfig {
            bind: bind.ok_or("--bind is required")?,
            bootstrap_port: port,
            provider: Provider::from_flag(provider.as_deref()),
            token,
            progress: ProgressThread::WhenNeeded,
            barrier: true,
        },
    )?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(
        out,
        "ready {} {} {}",
        server.bootstrap_addr(),
        server.provider(),
        std::process::id()
    )?;
    out.flush()?;
    let hook = rt.hook("on_request")?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["run", value] => {
                let mut ctx = Ctx {
                    value: value.parse()?,
                    out: 0,
                };
                let r0 = hook.run(&mut ctx);
                writeln!(out, "ret {r0} out {}", ctx.out)?;
            }
            // The operator replaced the token file (a leak is suspected): serve the new
            // token and revoke every key handed out under the old one.
            ["rotate"] => match read_token_file(&token_file).map(|t| server.rotate(t)) {
                Ok(Ok(())) => writeln!(out, "rotated")?,
                Ok(Err(e)) | Err(e) => writeln!(out, "error {e}")?,
            },
            ["quit"] => break,
            _ => writeln!(out, "error unknown command {line:?}")?,
        }
        out.flush()?;
    }
    drop(server);
    rt.teardown(Duration::from_millis(100))?;
    rt.unlink()?;
    Ok(())
}
