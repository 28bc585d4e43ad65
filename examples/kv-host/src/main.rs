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
//! The region publishes the EIM spec `eim/kv.yaml` (one extension class per hook), so
//! `rdx deploy` verifies a program for a hook before it writes it.
//!
//! `kv-host [--port N] [--path REGION]` prints `region <path>` and `listening <port>`, then
//! serves until SIGINT or SIGTERM, on which it removes its region file and exits.

use anyhow::{bail, Context, Result};
use rdx_runtime::{Hook, HookSpec, Runtime};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The interface this host publishes in its region: the hooks' context fields and the
/// classes a control plane verifies programs against.
const EIM_SPEC: &str = include_str!("../../../eim/kv.yaml");

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

    /// Answers one connection's commands in order. Replies are buffered and sent when no
    /// further complete command has arrived, so a reply (or the replies to commands that came
    /// together) leaves in one segment: written as two sends, the second small segment waited
    /// under Nagle's algorithm for the client's delayed ACK of the first, about 40 ms per
    /// request. TCP_NODELAY covers what remains, a reply sent while an earlier one is still
    /// unacknowledged (a client that pipelines commands in separate segments).
    fn serve(&self, stream: TcpStream) -> Result<()> {
        let get = self.rt.hook("kv_get")?;
        let set = self.rt.hook("kv_set")?;
        stream.set_nodelay(true)?;
        let mut out = BufWriter::new(stream.try_clone()?);
        let mut input = BufReader::new(stream);
        let mut line = String::new();
        while input.read_line(&mut line)? > 0 {
            let reply = self.handle(&get, &set, line.trim_end_matches(['\r', '\n']));
            writeln!(out, "{reply}")?;
            line.clear();
            // Another complete command already here: its reply joins this one.
            if !input.buffer().contains(&b'\n') {
                out.flush()?;
            }
        }
        out.flush()?;
        Ok(())
    }
}

/// SIGINT and SIGTERM, blocked in every thread (threads inherit the mask of the thread that
/// starts them) and taken by [`wait_for_termination`] instead.
fn termination_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill the set they are given.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        set
    }
}

fn block_termination_signals() -> Result<()> {
    let set = termination_signals();
    // SAFETY: `set` is an initialised signal set; the old mask is not wanted.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        bail!(
            "blocking SIGINT/SIGTERM: {}",
            std::io::Error::from_raw_os_error(rc)
        );
    }
    Ok(())
}

/// Waits for SIGINT or SIGTERM, then stops running extensions and removes the region file
/// (nothing else would: a region outlives its host) before exiting.
fn wait_for_termination(server: &Server) -> ! {
    let set = termination_signals();
    let mut sig = 0;
    // SAFETY: `set` is initialised and `sig` writable; the signals are blocked in every
    // thread, so sigwait is their only taker.
    unsafe { libc::sigwait(&set, &mut sig) };
    let _ = server.rt.teardown(Duration::from_millis(200));
    if let Err(e) = server.rt.unlink() {
        eprintln!("kv-host: {e}");
        std::process::exit(1);
    }
    std::process::exit(0);
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
    // Before any thread starts, so that every thread inherits the mask.
    block_termination_signals()?;
    // Before the region exists, so that a port in use leaves no region behind.
    let listener = TcpListener::bind(("127.0.0.1", port)).context("binding")?;
    let spec = HookSpec::for_context::<KvContext>();
    let rt = builder
        .eim_spec(EIM_SPEC)
        .hook("kv_get", spec)
        .hook("kv_set", spec)
        .build()
        .context("creating the region")?;
    if let Err(e) = rt.register() {
        let _ = rt.unlink();
        return Err(e).context("exposing the region");
    }
    println!("region {}", rt.path().display());
    println!("listening {}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    let server = Arc::new(Server {
        rt,
        store: Mutex::new(HashMap::new()),
    });
    {
        let server = server.clone();
        std::thread::spawn(move || wait_for_termination(&server));
    }
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
