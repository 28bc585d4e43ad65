//! A control plane driving several nodes over the fabric through the CodeFlow API, one
//! command per stdin line (the multi-host tests run it inside its own network namespace).
//!
//! ```text
//! connect NAME HOST:PORT TOKENHEX -> "ok PROVIDER" | "err MESSAGE"
//! deploy NAME PROGRAM             -> "ok VERSION"  (bpf/control/PROGRAM.c on on_request)
//! runs NAME                       -> "ok N"        (hook runs, summed over threads)
//! hits NAME                       -> "ok N"        (the program's `hits` array, key 0)
//! seen NAME KEY                   -> "ok N" | "ok none"   (the `seen` hash)
//! set-hits NAME VALUE             -> "ok"          (remote array update)
//! quit
//! ```

use rdx_control::{AttachOptions, CodeFlow, Extension};
use rdx_fabric::{ConnectOptions, FabricTransport, Token};
use rdx_transport::xstate::{self, Copies};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::time::Duration;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn extension(name: &str) -> Result<Extension> {
    let obj = rdx_bpf::loader::load(&rdx_testdata::object(&format!("control/{name}")))?;
    Ok(Extension::from_object(&obj, None)?)
}

fn command(nodes: &mut HashMap<String, CodeFlow>, words: &[&str]) -> Result<String> {
    fn node<'a>(nodes: &'a mut HashMap<String, CodeFlow>, name: &str) -> Result<&'a mut CodeFlow> {
        nodes
            .get_mut(name)
            .ok_or_else(|| format!("no node {name:?}").into())
    }
    Ok(match words {
        ["connect", name, addr, token] => {
            let options = ConnectOptions {
                op_timeout: Duration::from_secs(2),
                ..ConnectOptions::default()
            };
            let t = FabricTransport::connect(addr.parse()?, &Token::from_hex(token)?, &options)?;
            let provider = t.provider().to_string();
            let address = format!("fabric://{addr}");
            let cf = CodeFlow::attach(Box::new(t), &address, AttachOptions::default())?;
            nodes.insert(name.to_string(), cf);
            format!("ok {provider}")
        }
        ["deploy", name, program] => {
            let ext = extension(program)?;
            let cf = node(nodes, name)?;
            format!("ok {}", cf.deploy("on_request", &ext, None, None)?.version)
        }
        ["runs", name] => {
            let cf = node(nodes, name)?;
            let hook = cf.view().hook("on_request")?;
            let status =
                rdx_control::node::hook_status(cf.transport(), &cf.view().info, hook.index)?;
            format!("ok {}", status.runs)
        }
        ["hits", name] | ["seen", name, _] | ["set-hits", name, _] => {
            let cf = node(nodes, name)?;
            let t = cf.transport();
            let info = &cf.view().info;
            let map_name = if words[0] == "seen" { "seen" } else { "hits" };
            let m = xstate::find(t, info, map_name)?;
            let mut val = vec![0u8; m.map.lookup_len()];
            match words {
                ["seen", _, key] => {
                    let key: u64 = key.parse()?;
                    if xstate::lookup(t, &m.map, &key.to_le_bytes(), &mut val)? {
                        format!("ok {}", u64::from_le_bytes(val[..8].try_into()?))
                    } else {
                        "ok none".into()
                    }
                }
                ["set-hits", _, value] => {
                    let v: u64 = value.parse()?;
                    let token = (1 << 63) | std::process::id() as u64;
                    xstate::update(
                        t,
                        &m.map,
                        &0u32.to_le_bytes(),
                        &v.to_le_bytes(),
                        0,
                        Copies::All,
                        token,
                    )?;
                    "ok".into()
                }
                _ => {
                    xstate::lookup(t, &m.map, &0u32.to_le_bytes(), &mut val)?;
                    format!("ok {}", u64::from_le_bytes(val[..8].try_into()?))
                }
            }
        }
        _ => return Err(format!("unknown command {words:?}").into()),
    })
}

fn main() -> Result<()> {
    let mut nodes = HashMap::new();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "ready")?;
    out.flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        if words == ["quit"] {
            break;
        }
        let reply = match command(&mut nodes, &words) {
            Ok(r) => r,
            Err(e) => format!("err {}", e.to_string().replace('\n', " ")),
        };
        writeln!(out, "{reply}")?;
        out.flush()?;
    }
    Ok(())
}
