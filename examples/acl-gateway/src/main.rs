//! `acl-gateway [--path REGION] [--udp ADDR] [--udp-link eth|ib] [--iface NAME]`
//!
//! Prints `region <path>` (then `udp <addr>` with `--udp`, `iface <name> index <i>` with
//! `--iface`), then serves until stdin closes, `quit`, SIGINT or SIGTERM; on the way out it
//! prints the final counters (`stopped <why> <counters>`) and removes its region. Every frame
//! goes through the `acl_packet` hook; a control plane deploys the policy
//! (`rdx acl apply POLICY --node <region> --hook acl_packet`). See `usage()` for the rest.

use std::io::{BufRead, Write};
use std::net::UdpSocket;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rdx_acl::packet::LinkType;
use rdx_acl_gateway::capture::{BlockCounts, Capture};
use rdx_acl_gateway::{describe, Gateway, Tally};

fn usage() -> &'static str {
    "usage: acl-gateway [--path REGION] [--udp ADDR] [--udp-link eth|ib] [--iface NAME]

A packet gateway: every frame runs the acl_packet hook, i.e. the ACL enforcement program a
control plane deployed (rdx acl apply POLICY --node shm:REGION); with nothing deployed every
frame is denied.

Options:
  --path REGION      the region file (default: a fresh file under /dev/shm)
  --udp ADDR         decide the payload of each datagram received on ADDR as one frame, as a
                     port mirror forwards them (127.0.0.1:0 picks a port)
  --udp-link eth|ib  link type of those frames (default eth)
  --iface NAME       decide every Ethernet frame arriving on interface NAME, read from an
                     AF_PACKET socket (SOCK_RAW, ETH_P_ALL, TPACKET_V3 ring) bound to it in
                     this network namespace; needs root or CAP_NET_RAW. Frames the host
                     sends out of NAME are not decided; a VLAN tag the kernel stripped is
                     put back before the hook sees the frame.
  -h, --help         this text

Prints `region PATH`, then `udp ADDR` and `iface NAME index I` for those sources, then
answers commands on stdin, one per line:
  pcap [-v] FILE     decide every frame of a pcap file: `done packets N allowed A denied D ...`
                     (-v: one line per frame first)
  stats              counters of every frame so far (pcap, UDP and interface)
  iface              counters of the interface's frames, plus what the capture saw:
                     `iface packets N allowed A denied D ... outgoing O truncated T drops K`
  quit               stop
Stops on quit, end of stdin, SIGINT or SIGTERM: prints `stopped REASON packets N ...` (all
frames) and removes the region."
}

struct Options {
    path: Option<PathBuf>,
    udp: Option<String>,
    udp_link: LinkType,
    iface: Option<String>,
}

fn options() -> Result<Options> {
    let mut o = Options {
        path: None,
        udp: None,
        udp_link: LinkType::Ethernet,
        iface: None,
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
            "--iface" => o.iface = Some(value()?),
            "-h" | "--help" => {
                println!("{}", usage());
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n{}", usage()),
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
        lock(&tally).count(&d);
    }
}

/// Counters of the interface's frames.
#[derive(Default)]
struct IfaceStats {
    tally: Tally,
    capture: BlockCounts,
    drops: u64,
}

/// Decides every frame arriving on the interface until `stop`; the counters are published
/// once per ring block (at least every few milliseconds while frames arrive).
fn serve_iface(
    gw: Arc<Gateway>,
    mut capture: Capture,
    stop: Arc<AtomicBool>,
    total: Arc<Mutex<Tally>>,
    stats: Arc<Mutex<IfaceStats>>,
) -> Result<()> {
    let hook = gw.hook()?;
    while !stop.load(Ordering::Acquire) {
        let mut tally = Tally::default();
        let counts = capture.next_block(Duration::from_millis(100), |frame| {
            tally.count(&Gateway::decide(&hook, LinkType::Ethernet, frame));
        })?;
        let (_, drops) = capture.kernel_stats()?;
        if counts == BlockCounts::default() && drops == 0 {
            continue;
        }
        lock(&total).merge(&tally);
        let mut s = lock(&stats);
        s.tally.merge(&tally);
        s.capture.frames += counts.frames;
        s.capture.outgoing += counts.outgoing;
        s.capture.truncated += counts.truncated;
        s.drops += drops;
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
    lock(total).merge(&tally);
    out.push_str(&format!("done {tally}"));
    Ok(out)
}

/// Everything the way out needs: whichever of stdin's end and a signal comes first stops
/// the capture, prints the final counters and removes the region, once.
struct Shutdown {
    gw: Arc<Gateway>,
    tally: Arc<Mutex<Tally>>,
    stop: Arc<AtomicBool>,
    capture: Mutex<Option<JoinHandle<Result<()>>>>,
    done: Mutex<bool>,
}

impl Shutdown {
    fn finish(&self, why: &str) -> ! {
        let mut done = lock(&self.done);
        if !*done {
            *done = true;
            self.stop.store(true, Ordering::Release);
            let mut code = 0;
            if let Some(h) = lock(&self.capture).take() {
                match h.join() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        eprintln!("acl-gateway: capture failed: {e:#}");
                        code = 1;
                    }
                    Err(_) => code = 1,
                }
            }
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "stopped {why} {}", lock(&self.tally));
            let _ = out.flush();
            // The serving threads hold the gateway too, so its drop would not run at exit.
            let _ = self.gw.runtime().teardown(Duration::from_millis(200));
            let _ = self.gw.runtime().unlink();
            std::process::exit(code);
        }
        // The other path is finishing and will exit the process.
        loop {
            std::thread::park();
        }
    }
}

/// SIGINT and SIGTERM, blocked in every thread (threads inherit the mask) and taken by
/// [`wait_for_signal`] instead.
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

fn wait_for_signal() -> &'static str {
    let set = termination_signals();
    let mut sig = 0;
    // SAFETY: `set` is initialised and `sig` writable; the signals are blocked in every
    // thread, so sigwait is the only taker.
    unsafe { libc::sigwait(&set, &mut sig) };
    if sig == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    }
}

fn main() -> Result<()> {
    let o = options()?;
    // Before any thread starts, so that every thread inherits the mask.
    block_termination_signals()?;
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
    let stop = Arc::new(AtomicBool::new(false));
    let iface_stats = Arc::new(Mutex::new(IfaceStats::default()));
    let mut capture_thread = None;
    if let Some(name) = &o.iface {
        let capture = match Capture::open(name) {
            Ok(c) => c,
            Err(e) => {
                // Nothing else owns the region yet: remove it before failing.
                let _ = gw.runtime().teardown(Duration::from_millis(200));
                let _ = gw.runtime().unlink();
                return Err(e).with_context(|| format!("capturing on {name}"));
            }
        };
        writeln!(stdout.lock(), "iface {name} index {}", capture.ifindex())?;
        let (gw, tally, stop, stats) =
            (gw.clone(), tally.clone(), stop.clone(), iface_stats.clone());
        capture_thread = Some(std::thread::spawn(move || {
            serve_iface(gw, capture, stop, tally, stats)
        }));
    }
    let shutdown = Arc::new(Shutdown {
        gw: gw.clone(),
        tally: tally.clone(),
        stop,
        capture: Mutex::new(capture_thread),
        done: Mutex::new(false),
    });
    {
        let shutdown = shutdown.clone();
        std::thread::spawn(move || shutdown.finish(wait_for_signal()));
    }
    stdout.lock().flush()?;
    let mut why = "stdin closed";
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["pcap", file] => run_pcap(&gw, file, false, &tally),
            ["pcap", "-v", file] => run_pcap(&gw, file, true, &tally),
            ["stats"] => Ok(format!("stats {}", lock(&tally))),
            ["iface"] if o.iface.is_some() => {
                let s = lock(&iface_stats);
                Ok(format!(
                    "iface {} outgoing {} truncated {} drops {}",
                    s.tally, s.capture.outgoing, s.capture.truncated, s.drops
                ))
            }
            ["quit"] => {
                why = "quit";
                break;
            }
            [] => continue,
            _ => Ok(format!(
                "error unknown command {line:?} (pcap [-v] FILE | stats | iface | quit)"
            )),
        };
        let reply = reply.unwrap_or_else(|e| format!("error {e:#}"));
        let mut out = stdout.lock();
        writeln!(out, "{reply}")?;
        out.flush()?;
    }
    shutdown.finish(why)
}
