//! The gateway capturing from a network interface: `acl-gateway --iface veth1` runs in one
//! network namespace, a policy is deployed into it the normal way (verified, JIT-compiled,
//! written and published by a control plane), and crafted RoCEv2 frames are sent from the
//! other end of the veth pair through a raw socket. The gateway's counters must equal the
//! native engine's verdicts on the same frames; SIGTERM must stop it cleanly. Needs root (for
//! the namespaces); without it the namespace test prints `SKIPPED` and passes.

#![cfg(target_arch = "x86_64")]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use rdx_acl::compile::RuleSet;
use rdx_acl::engine::Engine;
use rdx_acl::packet::LinkType;
use rdx_acl::policy::Action;
use rdx_acl::{craft, synth};
use rdx_test_support::netns::{exec_in, NetnsStar};
use support::Applier;

struct Gateway {
    child: Child,
    out: BufReader<ChildStdout>,
    region: PathBuf,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.region);
    }
}

impl Gateway {
    fn start(mut cmd: Command) -> Gateway {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut g = Gateway {
            child,
            out,
            region: PathBuf::new(),
        };
        let first = g.line();
        g.region =
            PathBuf::from(first.strip_prefix("region ").unwrap_or_else(|| {
                panic!("gateway did not start: {first:?}; stderr: {}", g.stderr())
            }));
        g
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        l.trim().to_string()
    }

    fn stderr(&mut self) -> String {
        let _ = self.child.kill();
        let mut s = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut s);
        }
        s
    }

    fn ask(&mut self, cmd: &str) -> String {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
        self.line()
    }
}

/// `name value` pairs of a counter line (`iface packets 3 allowed 2 ...`).
fn counter(line: &str, name: &str) -> u64 {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[0] == name)
        .and_then(|w| w[1].parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {line:?}"))
}

/// A raw socket on interface `dev` of namespace `ns` (made on a thread that enters the
/// namespace; the socket stays in it), sending `frames` as they are.
fn send_from_namespace(ns: &str, dev: &str, frames: &[Vec<u8>]) {
    let ns_path = format!("/var/run/netns/{ns}");
    let dev = std::ffi::CString::new(dev).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            let nsf = std::fs::File::open(&ns_path).unwrap();
            // SAFETY: `nsf` is an open namespace file; setns changes only this thread's
            // network namespace (the thread ends with the scope).
            let entered = unsafe { libc::setns(nsf.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(
                entered,
                0,
                "setns {ns_path}: {}",
                std::io::Error::last_os_error()
            );
            // SAFETY: plain socket creation, checked below.
            let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
            assert!(raw >= 0, "socket: {}", std::io::Error::last_os_error());
            // SAFETY: `raw` is a fresh descriptor nothing else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(raw) };
            // SAFETY: `dev` is NUL-terminated and outlives the call.
            let ifindex = unsafe { libc::if_nametoindex(dev.as_ptr()) };
            assert_ne!(ifindex, 0, "{dev:?} in {ns}");
            // SAFETY: all-zero is a valid sockaddr_ll; the fields used are set below.
            let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            to.sll_family = libc::AF_PACKET as u16;
            to.sll_ifindex = ifindex as i32;
            to.sll_halen = 6;
            for (i, f) in frames.iter().enumerate() {
                to.sll_addr[..6].copy_from_slice(&f[..6]);
                // SAFETY: `f` and `to` are valid for the lengths passed.
                let n = unsafe {
                    libc::sendto(
                        fd.as_raw_fd(),
                        f.as_ptr().cast(),
                        f.len(),
                        0,
                        (&to as *const libc::sockaddr_ll).cast(),
                        std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
                    )
                };
                assert_eq!(
                    n,
                    f.len() as isize,
                    "frame {i}: {}",
                    std::io::Error::last_os_error()
                );
                // Paced, so the receive backlog of the veth never overflows.
                if i % 32 == 31 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
    });
}

/// `frame` with a VLAN tag (`tpid` 0x8100 or 0x88a8, VLAN `vid`) after the MAC addresses.
fn tagged(frame: &[u8], tpid: u16, vid: u16) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&tpid.to_be_bytes());
    f.extend_from_slice(&vid.to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

#[test]
fn frames_on_a_veth_are_decided_by_the_deployed_program_as_by_the_native_engine() {
    let Some(ns) = NetnsStar::create_or_skip("rdxag", 234, 1) else {
        return;
    };
    let mut cmd = exec_in(ns.hub(), env!("CARGO_BIN_EXE_acl-gateway"));
    cmd.args(["--iface", "veth1"]);
    let mut gw = Gateway::start(cmd);
    let iface = gw.line();
    assert!(iface.starts_with("iface veth1 index "), "{iface}");

    // A policy deployed as `rdx acl apply` does it.
    let synthetic = synth::rules(300, 21);
    let rules = RuleSet {
        policy_names: (0..synthetic.len()).map(|i| format!("r{i}")).collect(),
        rules: synthetic,
        default: Action::Deny,
    };
    let mut applier = Applier::attach(&gw.region);
    applier.apply(&rules, 21);

    let mut frames: Vec<Vec<u8>> = synth::traffic(&rules.rules, 600, synth::Mix::Uniform, 22)
        .iter()
        .map(|k| craft::roce_frame(k).unwrap())
        .collect();
    let mut rng = synth::Rng::new(23);
    for i in 0..120 {
        let mut f = frames[i].clone();
        let vid = 100 + i as u16;
        match i % 4 {
            // Near no rule: the default decides.
            0 => f[30] ^= (rng.next_u64() as u8) | 1,
            // Cut short: malformed.
            1 => f.truncate(40 + rng.below(20) as usize),
            // Behind VLAN tags. The receiving kernel strips the outer one into the frame's
            // metadata and the gateway must put it back: one or two tags are parsed through,
            // a third makes the frame malformed (so a lost tag would show in the counters).
            2 => f = tagged(&f, 0x8100, vid),
            _ if i % 8 == 3 => f = tagged(&tagged(&f, 0x8100, vid), 0x88a8, 7),
            _ => f = tagged(&tagged(&tagged(&f, 0x8100, vid), 0x8100, 5), 0x88a8, 7),
        }
        frames.push(f);
    }
    let mut engine = Engine::new(rules.clone()).with_cm_capacity(4096);
    for f in &frames {
        engine.process(LinkType::Ethernet, f);
    }
    let want = engine.counters().clone();
    assert!(
        want.allowed > 50 && want.denied > 50 && want.default_hits > 10,
        "the traffic should exercise both verdicts and the default: {want:?}"
    );
    assert!(want.malformed_total() >= 40, "{want:?}");

    // Frames other than ours (IPv6 neighbour discovery and the like on a fresh link) may
    // arrive at any time: before the policy was deployed they were denied as `failed_closed`,
    // after it they are not RDMA and only add to `not_rdma` (and so to `allowed`). So compare
    // what changed from here on.
    let before = gw.ask("iface");
    let program_before = applier.stats();
    send_from_namespace(ns.spoke(1), "veth0", &frames);
    let delta = |line: &str, name: &str| counter(line, name) - counter(&before, name);
    let start = Instant::now();
    let line = loop {
        let line = gw.ask("iface");
        let rdma = delta(&line, "rule") + delta(&line, "default") + delta(&line, "malformed");
        if rdma >= frames.len() as u64 {
            break line;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not every frame was decided: {line} (before: {before})"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let not_rdma = delta(&line, "not_rdma");
    let context = format!("{line} (before: {before}); engine: {want:?}");
    assert_eq!(delta(&line, "denied"), want.denied, "{context}");
    assert_eq!(
        delta(&line, "allowed") - not_rdma,
        want.allowed - want.not_rdma,
        "{context}"
    );
    assert_eq!(delta(&line, "default"), want.default_hits, "{context}");
    assert_eq!(
        delta(&line, "malformed"),
        want.malformed_total(),
        "{context}"
    );
    assert_eq!(
        delta(&line, "rule"),
        want.per_policy.iter().sum::<u64>(),
        "{context}"
    );
    assert_eq!(delta(&line, "failed_closed"), 0, "{context}");
    assert_eq!(counter(&line, "drops"), 0, "{context}");
    // The program ran on every one of them (its own counters agree).
    let program = applier.stats();
    assert_eq!(program.denied - program_before.denied, want.denied);
    assert_eq!(
        program.packets - program_before.packets,
        delta(&line, "packets")
    );

    // SIGTERM: the capture stops, the final counters are printed, the region is removed.
    // SAFETY: kill with a valid pid and signal; `ip netns exec` exec'd the gateway in place.
    let signalled = unsafe { libc::kill(gw.child.id() as i32, libc::SIGTERM) };
    assert_eq!(signalled, 0);
    let stopped = gw.line();
    assert!(stopped.starts_with("stopped SIGTERM packets "), "{stopped}");
    assert!(counter(&stopped, "denied") >= want.denied, "{stopped}");
    let status = gw.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        !gw.region.exists(),
        "region {} left behind",
        gw.region.display()
    );
}

#[test]
fn a_missing_interface_or_a_missing_capability_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_acl-gateway"))
        .args(["--iface", "rdx-no-such-if0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("capturing on rdx-no-such-if0")
            && err.contains("no such interface \"rdx-no-such-if0\""),
        "{err}"
    );

    // Without CAP_NET_RAW (root with the capability dropped from every set).
    let out = Command::new("setpriv")
        .args([
            "--inh-caps=-net_raw",
            "--bounding-set=-net_raw",
            "--",
            env!("CARGO_BIN_EXE_acl-gateway"),
            "--iface",
            "lo",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "capture without CAP_NET_RAW: {err}");
    assert!(
        err.contains("permission denied: AF_PACKET sockets need root or CAP_NET_RAW"),
        "{err}"
    );

    let help = Command::new(env!("CARGO_BIN_EXE_acl-gateway"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("--iface NAME"));
}
