//! kv-host: a TCP key-value server on 127.0.0.1 whose `kv_get` and `kv_set` hooks are
//! extensible through rdx. It never loads extensions: a control plane deploys them into the
//! region whose path it prints.
//!
//! Protocol, one command per line:
//! ```text
//! GET <key>          -> VALUE <value> | NOTFOUND
//! SET <key> <value>  -> OK | DENIED
//! STATS              -> STATS get <runs> <failures> set <runs> <failures>
//! ```
//! Hooks (context [`KvContext`], returns):
//! - `kv_get`: runs before the lookup, with the stored value (if any) in the context;
//!   returning 1 answers with the context's value instead (the extension may rewrite it),
//!   2 answers NOTFOUND; 0 continues normally.
//! - `kv_set`: runs before the store; returning 1 refuses it (DENIED); the extension may
//!   rewrite the value first.
//!
//! `kv-host [--port N] [--path REGION]` prints `region <path>` and `listening <port>`.

use anyhow::{bail, Context, Result};
use rdx_runtime::{Hook, HookSpec, Runtime};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// The context both hooks receive (64-bit-friendly, no padding: 336 bytes).
#[repr(C)]
pub struct KvContext {
    /// 1 = get, 2 = set.
    pub op: u32,
    /// Bytes used in `key`.
    pub key_len: u32,
    /// Bytes used in `value`; writable by extensions.
    pub value_len: u32,
    /// Get: 1 if the key exists. Set: unused.
    pub found: u32,
    /// The request's key, zero-padded after `key_len` bytes.
    pub key: [u8; 64],
    /// Writable by extensions.
    pub value: [u8; 256],
}

const _: () = assert!(std::mem::size_of::<KvContext>() == 336);

struct Server {
    rt: Runtime,
    store: Mutex<HashMap<Vec<u8>, Vec<u8>>>,
}

fn context(op: u32, key: &[u8], value: Option<&[u8]>) -> Result<KvContext> {
    if key.len() > 64 || value.is_some_and(|v| v.len() > 256) {
        bail!("key longer than 64 bytes or value longer than 256");
    }
    let mut c = KvContext {
        op,
        key_len: key.len() as u32,
        value_len: 0,
        found: 0,
        key: [0; 64],
        value: [0; 256],
    };
    c.key[..key.len()].copy_from_slice(key);
    if let Some(v) = value {
        c.value[..v.len()].copy_from_slice(v);
        c.value_len = v.len() as u32;
        c.found = 1;
    }
    Ok(c)
}

fn value_of(c: &KvContext) -> &[u8] {
    &c.value[..(c.value_len as usize).min(256)]
}

impl Server {
    fn handle(&self, get: &Hook<'_>, set: &Hook<'_>, line: &str) -> String {
        let mut words = line.split_whitespace();
        let reply = match (words.next(), words.next(), words.next(), words.next()) {
            (Some("GET"), Some(key), None, None) => self.get(get, key.as_bytes()),
            (Some("SET"), Some(key), Some(value), None) => {
                self.set(set, key.as_bytes(), value.as_bytes())
            }
            (Some("STATS"), None, ..) => {
                let (g, s) = (get.stats(), set.stats());
                Ok(format!(
                    "STATS get {} {} set {} {}",
                    g.runs, g.failures, s.runs, s.failures
                ))
            }
            _ => Ok("ERROR unknown command".into()),
        };
        reply.unwrap_or_else(|e| format!("ERROR {e}"))
    }

    fn get(&self, hook: &Hook<'_>, key: &[u8]) -> Result<String> {
        let stored = self
            .store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned();
        let mut c = context(1, key, stored.as_deref())?;
        let value = match hook.run(&mut c) {
            1 => Some(value_of(&c).to_vec()),
            2 => None,
            _ => stored,
        };
        Ok(match value {
            Some(v) => format!("VALUE {}", String::from_utf8_lossy(&v)),
            None => "NOTFOUND".into(),
        })
    }

    fn set(&self, hook: &Hook<'_>, key: &[u8], value: &[u8]) -> Result<String> {
        let mut c = context(2, key, Some(value))?;
        if hook.run(&mut c) == 1 {
            return Ok("DENIED".into());
        }
        self.store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_vec(), value_of(&c).to_vec());
        Ok("OK".into())
    }

    fn serve(&self, stream: TcpStream) -> Result<()> {
        let get = self.rt.hook("kv_get")?;
        let set = self.rt.hook("kv_set")?;
        let mut out = stream.try_clone()?;
        for line in BufReader::new(stream).lines() {
            let reply = self.handle(&get, &set, &line?);
            writeln!(out, "{reply}")?;
        }
        Ok(())
    }
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut port = 0u16;
    let mut builder = Runtime::builder().code_size(1 << 20).scratch_size(1 << 20);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--port" => {
                port = args
                    .next()
                    .context("--port needs a value")?
                    .parse()
                    .context("--port")?
            }
            "--path" => builder = builder.path(args.next().context("--path needs a value")?),
            other => {
                bail!("unknown argument {other:?} (usage: kv-host [--port N] [--path REGION])")
            }
        }
    }
    let spec = HookSpec::for_context::<KvContext>();
    let rt = builder
        .hook("kv_get", spec)
        .hook("kv_set", spec)
        .build()
        .context("creating the region")?;
    rt.register().context("exposing the region")?;
    let listener = TcpListener::bind(("127.0.0.1", port)).context("binding")?;
    println!("region {}", rt.path().display());
    println!("listening {}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    let server = Arc::new(Server {
        rt,
        store: Mutex::new(HashMap::new()),
    });
    for stream in listener.incoming() {
        let stream = stream?;
        let server = server.clone();
        std::thread::spawn(move || {
            if let Err(e) = server.serve(stream) {
                eprintln!("kv-host: connection: {e:#}");
            }
        });
    }
    Ok(())
}
