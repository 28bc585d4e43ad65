//! `rdx events`: tail a node's ring buffer remotely — the records extensions output (or the
//! host's trace ring, which `bpf_printk` writes to) — consumed through the transport.

use std::time::{Duration, Instant};

use anyhow::bail;
use rdx_region::layout::MapType;
use rdx_transport::xstate::{self, ringbuf};
use serde::Serialize;

use super::map::find_map;
use super::node::{attach, StateArgs};

/// Read records from a node's ring buffer.
#[derive(clap::Args)]
pub struct Args {
    /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`, `fabric://HOST:PORT?...`).
    #[arg(long)]
    node: String,
    /// Ring buffer map name or id (default: the host's trace ring).
    map: Option<String>,
    /// Keep reading until interrupted (or until --limit / --timeout-ms).
    #[arg(long, short)]
    follow: bool,
    /// Stop after this many records.
    #[arg(long)]
    limit: Option<usize>,
    /// With --follow: stop after this long.
    #[arg(long, value_name = "MS")]
    timeout_ms: Option<u64>,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Serialize)]
struct Event {
    seq: u64,
    len: usize,
    /// Text, when the record is printable (trace output).
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// Little-endian u64 words, when the length is a multiple of 8.
    #[serde(skip_serializing_if = "Option::is_none")]
    u64s: Option<Vec<u64>>,
    hex: String,
}

fn decode(seq: u64, b: &[u8]) -> Event {
    let trimmed = b.strip_suffix(&[0]).unwrap_or(b);
    let text = std::str::from_utf8(trimmed)
        .ok()
        .filter(|s| !s.is_empty() && s.chars().all(|c| !c.is_control() || c == '\n' || c == '\t'))
        .map(|s| s.trim_end().to_string());
    let u64s = (text.is_none() && !b.is_empty() && b.len().is_multiple_of(8)).then(|| {
        b.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
            .collect()
    });
    Event {
        seq,
        len: b.len(),
        text,
        u64s,
        hex: b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let registry = args.state.registry()?;
    let (node, cf) = attach(&registry, &args.node)?;
    let info = cf.view().info.clone();
    let m = match &args.map {
        Some(name) => find_map(&cf, name)?,
        None => xstate::open(cf.transport(), &info, info.trace_map_id).map_err(|e| {
            anyhow::anyhow!(
                "node {node} has no trace ring (map {}): {e}",
                info.trace_map_id
            )
        })?,
    };
    if m.map.map_type != MapType::RingBuf {
        bail!(
            "map {:?} is a {:?} map, not a ring buffer (use `rdx map dump`)",
            m.name,
            m.map.map_type
        );
    }
    if !args.json {
        eprintln!(
            "reading {} (id {}) on {node}{}",
            m.name,
            m.id,
            if args.follow { "; Ctrl-C to stop" } else { "" }
        );
    }
    let start = Instant::now();
    let mut seq = 0u64;
    let limit = args.limit.unwrap_or(usize::MAX);
    loop {
        let mut batch = Vec::new();
        ringbuf::consume(cf.transport(), &m.map, |rec| {
            if batch.len() + (seq as usize) < limit {
                batch.push(rec.to_vec());
            }
        })?;
        for rec in batch {
            let e = decode(seq, &rec);
            seq += 1;
            if args.json {
                println!("{}", serde_json::to_string(&e)?);
            } else {
                match (&e.text, &e.u64s) {
                    (Some(t), _) => println!("{:>6} {t}", e.seq),
                    (None, Some(w)) => println!(
                        "{:>6} {}",
                        e.seq,
                        w.iter()
                            .map(|v| v.to_string())
                            .collect::<Vec<_>>()
                            .join(" ")
                    ),
                    _ => println!("{:>6} hex:{}", e.seq, e.hex),
                }
            }
        }
        if seq as usize >= limit || !args.follow {
            break;
        }
        if args
            .timeout_ms
            .is_some_and(|t| start.elapsed() >= Duration::from_millis(t))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let dropped = ringbuf::dropped(cf.transport(), &m.map)?;
    if !args.json && dropped > 0 {
        eprintln!("{dropped} records were dropped by the producer (ring full)");
    }
    Ok(())
}
