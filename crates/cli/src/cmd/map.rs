//! `rdx map ls|dump|get|set|del`: a node's XState maps, read and written remotely through the
//! transport — the node's CPU does nothing.
//!
//! Keys and values are integers (decimal or `0x...`, stored little-endian in the map's key or
//! value size, which must then be at most 8 bytes) or raw bytes written `hex:0a0b...`.

use anyhow::{bail, Context as _};
use rdx_control::CodeFlow;
use rdx_transport::xstate::{self, Copies, MapInfo, UPDATE_ANY, UPDATE_EXIST, UPDATE_NOEXIST};
use serde::Serialize;

use super::node::{attach, attach_read_only, StateArgs};

/// Read and write a node's maps remotely.
///
/// The node's CPU does nothing: entries are read and written through the transport. Keys and
/// values are integers (decimal or `0x...`, stored little-endian in the map's key or value
/// size, which must then be at most 8 bytes) or raw bytes written `hex:0a0b...`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: MapCommand,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(clap::Subcommand)]
enum MapCommand {
    /// List the node's maps.
    Ls {
        /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`, `fabric://HOST:PORT?...`).
        #[arg(long)]
        node: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Every key and value of a map.
    Dump {
        /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`, `fabric://HOST:PORT?...`).
        #[arg(long)]
        node: String,
        /// Map name or id.
        map: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// One value.
    Get {
        /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`, `fabric://HOST:PORT?...`).
        #[arg(long)]
        node: String,
        /// Map name or id.
        map: String,
        /// Key: an integer (decimal or `0x...`) or `hex:<bytes>`.
        key: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write one value (every per-thread copy gets it).
    Set {
        /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`, `fabric://HOST:PORT?...`).
        #[arg(long)]
        node: String,
        /// Map name or id.
        map: String,
        /// Key: an integer (decimal or `0x...`) or `hex:<bytes>`.
        key: String,
        /// Value: an integer (decimal or `0x...`) or `hex:<bytes>`.
        value: String,
        /// `any` (create or update), `noexist` (create only) or `exist` (update only).
        #[arg(long, default_value = "any")]
        flags: String,
    },
    /// Delete one key.
    Del {
        /// Node name (see `rdx node add`) or address (`shm:/dev/shm/...`, `fabric://HOST:PORT?...`).
        #[arg(long)]
        node: String,
        /// Map name or id.
        map: String,
        /// Key: an integer (decimal or `0x...`) or `hex:<bytes>`.
        key: String,
    },
}

/// Lock token for map writers: marks the lock as a control plane's (pid and stamp), so another
/// control plane can break it if this process dies mid-write.
fn token() -> u64 {
    xstate::control_plane_token(std::process::id())
}

/// Parses a key or value of `size` bytes.
pub fn parse_bytes(text: &str, size: u32, what: &str) -> anyhow::Result<Vec<u8>> {
    if let Some(hex) = text.strip_prefix("hex:") {
        if hex.len() != 2 * size as usize {
            bail!(
                "{what} {text:?}: {} hex digits for a {size}-byte {what}",
                hex.len()
            );
        }
        return (0..size as usize)
            .map(|i| {
                u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                    .with_context(|| format!("{what} {text:?}: bad hex"))
            })
            .collect();
    }
    let v: u64 = match text.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => text.parse(),
    }
    .with_context(|| format!("{what} {text:?} is neither an integer nor hex:<bytes>"))?;
    if size > 8 {
        bail!(
            "{what} is {size} bytes: write it as hex:<{} hex digits>",
            2 * size
        );
    }
    if size < 8 && v >> (8 * size) != 0 {
        bail!("{what} {v} does not fit in {size} bytes");
    }
    Ok(v.to_le_bytes()[..size as usize].to_vec())
}

/// Bytes as an integer when they are 1, 2, 4 or 8 long, else hex.
pub fn show_bytes(b: &[u8]) -> String {
    match b.len() {
        1 | 2 | 4 | 8 => {
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(w).to_string()
        }
        _ => format!(
            "hex:{}",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        ),
    }
}

pub fn find_map(cf: &CodeFlow, map: &str) -> anyhow::Result<MapInfo> {
    let t = cf.transport();
    let info = &cf.view().info;
    let found = match map.parse::<u32>() {
        Ok(id) => xstate::open(t, info, id),
        Err(_) => xstate::find(t, info, map),
    };
    found.map_err(|e| match e {
        xstate::MapError::NotFound => {
            let names: Vec<String> = xstate::list(t, info)
                .map(|l| l.into_iter().map(|m| m.name).collect())
                .unwrap_or_default();
            anyhow::anyhow!(
                "no map {map:?} on the node (maps: {})",
                if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                }
            )
        }
        e => anyhow::Error::new(e).context(format!("map {map:?}")),
    })
}

#[derive(Serialize)]
struct Entry {
    key: String,
    value: String,
    /// Per-thread maps: each thread slot's copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    copies: Option<Vec<String>>,
}

fn read_entry(cf: &CodeFlow, m: &MapInfo, key: &[u8]) -> anyhow::Result<Option<Entry>> {
    let mut out = vec![0u8; m.map.lookup_len()];
    if !xstate::lookup(cf.transport(), &m.map, key, &mut out)? {
        return Ok(None);
    }
    let vs = m.map.value_size as usize;
    if m.map.copies > 1 {
        let stride = m.map.value_stride as usize;
        let copies: Vec<&[u8]> = (0..m.map.copies as usize)
            .map(|c| &out[c * stride..c * stride + vs])
            .collect();
        let sum = if matches!(vs, 1 | 2 | 4 | 8) {
            copies
                .iter()
                .map(|c| show_bytes(c).parse::<u64>().unwrap_or(0))
                .fold(0u64, |a, b| a.wrapping_add(b))
                .to_string()
        } else {
            show_bytes(copies[0])
        };
        return Ok(Some(Entry {
            key: show_bytes(key),
            value: sum,
            copies: Some(copies.iter().map(|c| show_bytes(c)).collect()),
        }));
    }
    Ok(Some(Entry {
        key: show_bytes(key),
        value: show_bytes(&out[..vs]),
        copies: None,
    }))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let registry = args.state.registry()?;
    match args.command {
        MapCommand::Ls { node, json } => {
            let (_, cf) = attach_read_only(&registry, &node)?;
            let maps = xstate::list(cf.transport(), &cf.view().info)?;
            #[derive(Serialize)]
            struct Row {
                id: u32,
                name: String,
                #[serde(rename = "type")]
                map_type: String,
                key_size: u32,
                value_size: u32,
                max_entries: u32,
                bytes: u64,
            }
            let rows: Vec<Row> = maps
                .into_iter()
                .map(|m| Row {
                    id: m.id,
                    name: m.name,
                    map_type: format!("{:?}", m.map.map_type).to_lowercase(),
                    key_size: m.map.key_size,
                    value_size: m.map.value_size,
                    max_entries: m.map.max_entries,
                    bytes: m.size,
                })
                .collect();
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                println!(
                    "{:>3} {:<24} {:<14} {:>4} {:>6} {:>8} {:>9}",
                    "ID", "NAME", "TYPE", "KEY", "VALUE", "MAX", "BYTES"
                );
                for r in rows {
                    println!(
                        "{:>3} {:<24} {:<14} {:>4} {:>6} {:>8} {:>9}",
                        r.id, r.name, r.map_type, r.key_size, r.value_size, r.max_entries, r.bytes
                    );
                }
            }
        }
        MapCommand::Dump { node, map, json } => {
            let (_, cf) = attach_read_only(&registry, &node)?;
            let m = find_map(&cf, &map)?;
            if m.map.map_type == rdx_region::layout::MapType::RingBuf {
                bail!(
                    "map {:?} is a ring buffer: read it with `rdx events --node {node} {}`",
                    m.name,
                    m.name
                );
            }
            let keys = xstate::keys(cf.transport(), &m.map)?;
            let mut entries = Vec::new();
            for k in keys {
                if let Some(e) = read_entry(&cf, &m, &k)? {
                    entries.push(e);
                }
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&entries)?);
            } else {
                println!("map {} (id {}), {} entries", m.name, m.id, entries.len());
                for e in entries {
                    match e.copies {
                        Some(c) => {
                            println!("  {} = {} (per thread: {})", e.key, e.value, c.join(" "))
                        }
                        None => println!("  {} = {}", e.key, e.value),
                    }
                }
            }
        }
        MapCommand::Get {
            node,
            map,
            key,
            json,
        } => {
            let (_, cf) = attach_read_only(&registry, &node)?;
            let m = find_map(&cf, &map)?;
            let k = parse_bytes(&key, m.map.key_size, "key")?;
            match read_entry(&cf, &m, &k)? {
                Some(e) if json => println!("{}", serde_json::to_string_pretty(&e)?),
                Some(e) => println!("{}", e.value),
                None => bail!("map {}: no key {key}", m.name),
            }
        }
        MapCommand::Set {
            node,
            map,
            key,
            value,
            flags,
        } => {
            let (_, cf) = attach(&registry, &node)?;
            let m = find_map(&cf, &map)?;
            let k = parse_bytes(&key, m.map.key_size, "key")?;
            let v = parse_bytes(&value, m.map.value_size, "value")?;
            let f = match flags.as_str() {
                "any" => UPDATE_ANY,
                "noexist" => UPDATE_NOEXIST,
                "exist" => UPDATE_EXIST,
                other => bail!("--flags {other:?}: expected any, noexist or exist"),
            };
            xstate::update(cf.transport(), &m.map, &k, &v, f, Copies::All, token())
                .with_context(|| format!("map {}", m.name))?;
            println!("{}[{key}] = {value}", m.name);
        }
        MapCommand::Del { node, map, key } => {
            let (_, cf) = attach(&registry, &node)?;
            let m = find_map(&cf, &map)?;
            let k = parse_bytes(&key, m.map.key_size, "key")?;
            xstate::delete(cf.transport(), &m.map, &k, token())
                .with_context(|| format!("map {}: key {key}", m.name))?;
            println!("{}[{key}] deleted", m.name);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_parse_and_show() {
        assert_eq!(parse_bytes("7", 4, "key").unwrap(), vec![7, 0, 0, 0]);
        assert_eq!(parse_bytes("0x0102", 2, "key").unwrap(), vec![2, 1]);
        assert_eq!(
            parse_bytes("hex:0a0b0c", 3, "key").unwrap(),
            vec![10, 11, 12]
        );
        assert!(parse_bytes("256", 1, "key").is_err());
        assert!(parse_bytes("hex:0a", 3, "key").is_err());
        assert!(parse_bytes("nope", 4, "key").is_err());
        assert!(parse_bytes("1", 16, "value").is_err());
        assert_eq!(show_bytes(&[7, 0, 0, 0]), "7");
        assert_eq!(show_bytes(&[1, 2, 3]), "hex:010203");
    }
}
