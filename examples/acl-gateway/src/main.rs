//! `acl-gateway [--path REGION] [--udp ADDR] [--udp-link eth|ib]`
//!
//! Prints `region <path>` (and `udp <addr>` with `--udp`), then serves until stdin closes.
//! Every frame goes through the `acl_packet` hook; a control plane deploys the policy
//! (`rdx acl apply POLICY --node <region> --hook acl_packet`).
//!
//! Frames come from:
//! - pcap files, one command per stdin line: `pcap FILE` prints the counters of that file's
//!   frames as `done packets N allowed A denied D ...`; `pcap -v FILE` also prints one line per
//!   frame (`<index> allow|deny <cause> gen <generation>`);
//! - a UDP socket (`--udp 127.0.0.1:0`): each datagram's payload is one frame (Ethernet
//!   unless `--udp-link ib`), as a packet mirror would forward them.
//!
//! `stats` prints the counters of every frame so far (`stats packets N allowed A ...`).

use std::io::{BufRead, Write};
use std::net::UdpSocket;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use rdx_acl::packet::LinkType;
use rdx_acl_gateway::{describe, Gateway, Tally};

struct Options {
    path: Option<PathBuf>,
    udp: Option<String>,
    udp_link: LinkType,
}

fn options() -> Result<Options> {
    let mut o = Options {
        path: None,
        udp: None,
        udp_link: LinkType::Ethernet,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--path" => o.path = Some(value()?.into()),
            "--udp" => o.udp = Some(value()?),
            "--udp-link" => {
                o.udp_link = match value()?.as_str() {
                    "eth" => LinkType::Ethernet,
                    "ib" => LinkType::InfiniBand,
                    other => bail!("--udp-link: {other:?} is neither eth nor ib"),
                }
            }
            other => bail!(
                "unknown argument {other:?} (usage: acl-gateway [--path REGION] [--udp ADDR] [--udp-link eth|ib])"
            ),
        }
    }
    Ok(o)
}

fn serve_udp(gw: Arc<Gateway>, socket: UdpSocket, link: LinkType, tally: Arc<Mutex<Tally>>) {
    let Ok(hook) = gw.hook() else {
        return;
    };
    let mut buf = vec![0u8; 65536];
    while let Ok(n) = socket.recv(&mut buf) {
        let d = Gateway::decide(&hook, link, &buf[..n]);
        tally.lock().unwrap_or_else(|e| e.into_inner()).count(&d);
    }
}

fn run_pcap(gw: &Gateway, file: &str, verbose: bool, total: &Mutex<Tally>) -> Result<String> {
    let trace = rdx_acl::pcap::read(file.as_ref()).with_context(|| format!("reading {file}"))?;
    let hook = gw.hook()?;
    let mut tally = Tally::default();
    let mut out = String::new();
    for (i, frame) in trace.packets.iter().enumerate() {
        let d = Gateway::decide(&hook, trace.link, frame);
        tally.count(&d);
        if verbose {
            out.push_str(&format!("{} {}\n", i + 1, describe(&d)));
        }
    }
    total
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .merge(&tally);
    out.push_str(&format!("done {tally}"));
    Ok(out)
}

fn main() -> Result<()> {
    let o = options()?;
    let gw = Arc::new(Gateway::new(o.path.as_deref())?);
    let tally = Arc::new(Mutex::new(Tally::default()));
    let stdout = std::io::stdout();
    writeln!(stdout.lock(), "region {}", gw.region_path().display())?;
    if let Some(addr) = &o.udp {
        let socket = UdpSocket::bind(addr).with_context(|| format!("binding {addr}"))?;
        writeln!(stdout.lock(), "udp {}", socket.local_addr()?)?;
        let (gw, tally) = (gw.clone(), tally.clone());
        let link = o.udp_link;
        std::thread::spawn(move || serve_udp(gw, socket, link, tally));
    }
    stdout.lock().flush()?;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["pcap", file] => run_pcap(&gw, file, false, &tally),
            ["pcap", "-v", file] => run_pcap(&gw, file, true, &tally),
            ["stats"] => Ok(format!(
                "stats {}",
                tally.lock().unwrap_or_else(|e| e.into_inner())
            )),
            ["quit"] => break,
            [] => continue,
            _ => Ok(format!(
                "error unknown command {line:?} (pcap [-v] FILE | stats | quit)"
            )),
        };
        let reply = reply.unwrap_or_else(|e| format!("error {e:#}"));
        let mut out = stdout.lock();
        writeln!(out, "{reply}")?;
        out.flush()?;
    }
    // The UDP thread holds the gateway too, so its drop would not run at exit.
    let _ = gw.runtime().teardown(std::time::Duration::from_millis(200));
    let _ = gw.runtime().unlink();
    Ok(())
}
