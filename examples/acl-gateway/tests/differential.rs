//! Differential test of both engines against a reference written from `docs/acl.md` alone.
//!
//! The reference below shares no code with `rdx-acl`: it has its own policy model (rendered
//! to policy text for the engines, evaluated directly here), its own frame builder (from the
//! wire formats the document names), its own connection table (the document's CM section)
//! and its own idea of which traffic is RDMA, uninspected or not RDMA. Random policies
//! (partly in the JANUS paper's notation: `match(f = any)`, `[lo, inf]`, `in PREFIX`, integer
//! GIDs) and traffic — RoCEv2 over IPv4 and IPv6 with tags (legacy TPIDs included) and extension
//! headers (AH included), every header layout the generated opcodes carry, UC writes, CM
//! exchanges with forged senders and third parties, native InfiniBand with and without a
//! GRH (GIDs that spell a LID included), RoCE v1, VXLAN, IPsec and unwalked IPv6 extension
//! headers, non-RDMA frames — are decided by the reference, the native engine and the
//! enforcement program deployed into a gateway; every verdict and deciding policy must
//! agree. Fixed seed, bounded to a few seconds of frames.

#![cfg(target_arch = "x86_64")]

mod support;

use std::collections::BTreeMap;

use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use rdx_acl::compile::compile;
use rdx_acl::enforce::{Outcome, OutcomeCause};
use rdx_acl::engine::Engine;
use rdx_acl::packet::LinkType;
use rdx_acl::policy::{parse, Action};
use rdx_acl_gateway::Gateway;
use support::Applier;

// ---------------------------------------------------------------------------------------
// The reference: fields and policies (docs/acl.md, "The policy language").

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum F {
    Sip,
    Dip,
    Sport,
    Dport,
    Slid,
    Dlid,
    Sgid,
    Dgid,
    Type,
    Lqpn,
    Dqpn,
    Opcode,
    Va,
    CmForged,
}

impl F {
    fn name(self) -> &'static str {
        match self {
            F::Sip => "sip",
            F::Dip => "dip",
            F::Sport => "sport",
            F::Dport => "dport",
            F::Slid => "sLID",
            F::Dlid => "dLID",
            F::Sgid => "sGID",
            F::Dgid => "dGID",
            F::Type => "type",
            F::Lqpn => "lQPN",
            F::Dqpn => "dQPN",
            F::Opcode => "opcode",
            F::Va => "VA",
            F::CmForged => "cmForged",
        }
    }
}

/// A packet's fields as the document defines them (absent: not in the map). Addresses live
/// in one 128-bit space, IPv4 as `::ffff:a.b.c.d`; `type` is the CM attribute ID.
type Fields = BTreeMap<F, u128>;

/// `match(f ...)`: the values as inclusive ranges, and how the policy text says it.
#[derive(Clone, Debug)]
struct Match {
    field: F,
    ranges: Vec<(u128, u128)>,
    text: String,
}

#[derive(Clone, Debug)]
enum Expr {
    Any,
    Match(Match),
    /// `match(f = any)`, the paper's wildcard.
    Wildcard(F),
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
}

impl Expr {
    /// "`match(f ...)` is false on a packet that does not carry `f`."
    fn holds(&self, p: &Fields) -> bool {
        match self {
            Expr::Any => true,
            Expr::Match(m) => p
                .get(&m.field)
                .is_some_and(|v| m.ranges.iter().any(|(lo, hi)| lo <= v && v <= hi)),
            // "`match(f = any)` holds on every packet, whether or not it carries `f`."
            Expr::Wildcard(_) => true,
            Expr::Not(e) => !e.holds(p),
            Expr::And(es) => es.iter().all(|e| e.holds(p)),
            Expr::Or(es) => es.iter().any(|e| e.holds(p)),
        }
    }

    fn text(&self) -> String {
        match self {
            Expr::Any => "any".into(),
            Expr::Match(m) => m.text.clone(),
            Expr::Wildcard(f) => format!("match({} = any)", f.name()),
            Expr::Not(e) => format!("!({})", e.text()),
            Expr::And(es) => {
                let parts: Vec<String> = es.iter().map(|e| format!("({})", e.text())).collect();
                parts.join(" & ")
            }
            Expr::Or(es) => {
                let parts: Vec<String> = es.iter().map(|e| format!("({})", e.text())).collect();
                parts.join(" | ")
            }
        }
    }
}

struct Policy {
    predicate: Expr,
    allow: bool,
}

struct PolicySet {
    policies: Vec<Policy>,
    default_allow: bool,
}

impl PolicySet {
    fn text(&self) -> String {
        let mut t = String::new();
        for (i, p) in self.policies.iter().enumerate() {
            t.push_str(&format!(
                "policy p{i} {{\n  predicate = {}\n  action = {}\n}}\n",
                p.predicate.text(),
                if p.allow { "allow" } else { "deny" }
            ));
        }
        let names: Vec<String> = (0..self.policies.len()).map(|i| format!("p{i}")).collect();
        t.push_str(&format!("apply({})\n", names.join(", ")));
        if !self.default_allow {
            t.push_str("default deny\n");
        }
        t
    }

    /// "the first whose predicate holds decides; if none holds, the default action".
    fn decide(&self, p: &Fields) -> (bool, Option<u32>) {
        for (i, pol) in self.policies.iter().enumerate() {
            if pol.predicate.holds(p) {
                return (pol.allow, Some(i as u32));
            }
        }
        (self.default_allow, None)
    }
}

fn v4(a: [u8; 4]) -> u128 {
    (0xffff << 32) | u32::from_be_bytes(a) as u128
}

// Opcodes and groups by their document names (groups: SEND and WRITE include UC).
const SEND: &[u8] = &[
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x16, 0x17, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25,
];
const WRITE: &[u8] = &[
    0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b,
];
const READ: &[u8] = &[0x0c, 0x0d, 0x0e, 0x0f, 0x10];
const ATOMIC: &[u8] = &[0x13, 0x14];
const ACK: &[u8] = &[0x11, 0x12];

// ---------------------------------------------------------------------------------------
// The reference: frames (docs/acl.md, "Packet parsing"), built from the wire formats.

/// Extension headers after the BTH, in wire order, by opcode: (DETH, RETH, AtomicETH,
/// AETH, ImmDt) — the opcodes the generator uses.
fn layout(op: u8) -> (bool, bool, bool, bool, bool) {
    match op {
        0x04 | 0x24 | 0x81 => (false, false, false, false, false),
        0x0a | 0x0c | 0x2a | 0x06 => (false, true, false, false, false),
        0x0b | 0x2b => (false, true, false, false, true),
        0x10 | 0x11 => (false, false, false, true, false),
        0x13 | 0x14 => (false, false, true, false, false),
        0x64 => (true, false, false, false, false),
        0x65 => (true, false, false, false, true),
        _ => unreachable!("opcode {op:#x} not generated"),
    }
}

/// BTH and what follows it (without the ICRC).
fn transport(op: u8, dest_qp: u32, src_qp: u32, va: u64, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![op, 0, 0xff, 0xff];
    b.extend_from_slice(&(dest_qp & 0xff_ffff).to_be_bytes());
    b.extend_from_slice(&7u32.to_be_bytes()); // PSN
    let (deth, reth, atomic, aeth, imm) = layout(op);
    if deth {
        b.extend_from_slice(&0x8001_0000u32.to_be_bytes());
        b.extend_from_slice(&(src_qp & 0xff_ffff).to_be_bytes());
    }
    if reth {
        b.extend_from_slice(&va.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 5, 0, 0, 0, 64]);
    }
    if atomic {
        b.extend_from_slice(&va.to_be_bytes());
        b.extend_from_slice(&[0; 20]);
    }
    if aeth {
        b.extend_from_slice(&[0, 0, 0, 1]);
    }
    if imm {
        b.extend_from_slice(&[0, 0, 0, 9]);
    }
    b.extend_from_slice(payload);
    b
}

/// A 256-byte CM MAD: base version 1, class 0x07, the attribute ID, local and remote comm
/// IDs, and the QPN where the message carries one (REQ byte 32, REP byte 12, DREQ byte 8 of
/// the data).
fn mad(attr: u16, local: u32, remote: u32, qpn: u32) -> Vec<u8> {
    let mut m = vec![0u8; 256];
    m[0] = 1;
    m[1] = 0x07;
    m[2] = 2;
    m[3] = 3;
    m[16..18].copy_from_slice(&attr.to_be_bytes());
    let d = &mut m[24..];
    d[0..4].copy_from_slice(&local.to_be_bytes());
    if attr != 0x10 {
        d[4..8].copy_from_slice(&remote.to_be_bytes());
    }
    let q = (qpn & 0xff_ffff).to_be_bytes();
    match attr {
        0x10 => d[32..35].copy_from_slice(&q[1..]),
        0x13 => d[12..15].copy_from_slice(&q[1..]),
        0x15 => d[8..11].copy_from_slice(&q[1..]),
        _ => {}
    }
    m
}

/// IP version of a RoCEv2 frame, with the IPv6 extension header (if any) before UDP.
#[derive(Clone, Copy, Debug)]
enum Ip {
    V4,
    V6 { ext: Option<u8> },
}

/// Ethernet (with tags), IP, UDP to `dport`, then `l4` and a 4-byte ICRC.
fn ethernet(
    tags: &[u16],
    ip: Ip,
    sip: u128,
    dip: u128,
    sport: u16,
    dport: u16,
    l4: &[u8],
) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    for t in tags {
        f.extend_from_slice(&t.to_be_bytes());
        f.extend_from_slice(&[0, 7]);
    }
    let udp_len = 8 + l4.len() + 4;
    let mut udp = sport.to_be_bytes().to_vec();
    udp.extend_from_slice(&dport.to_be_bytes());
    udp.extend_from_slice(&(udp_len as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(l4);
    udp.extend_from_slice(&[0; 4]);
    match ip {
        Ip::V4 => {
            f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
            f.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
            f.extend_from_slice(&[0, 1, 0x40, 0, 64, 17, 0, 0]);
            f.extend_from_slice(&(sip as u32).to_be_bytes());
            f.extend_from_slice(&(dip as u32).to_be_bytes());
        }
        Ip::V6 { ext } => {
            let ext_bytes: Vec<u8> = match ext {
                None => Vec::new(),
                // Hop-by-hop options: 8 bytes (length in 8-byte units, less 1).
                Some(0) => vec![17, 0, 1, 4, 0, 0, 0, 0],
                // AH: 16 bytes (length in 4-byte units, less 2).
                Some(51) => {
                    let mut h = vec![0u8; 16];
                    h[0] = 17;
                    h[1] = 2;
                    h
                }
                // Anything else: 8 bytes, next header UDP.
                Some(_) => vec![17, 0, 0, 0, 0, 0, 0, 0],
            };
            f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
            f.extend_from_slice(&((ext_bytes.len() + udp_len) as u16).to_be_bytes());
            f.push(ext.unwrap_or(17));
            f.push(64);
            f.extend_from_slice(&sip.to_be_bytes());
            f.extend_from_slice(&dip.to_be_bytes());
            f.extend_from_slice(&ext_bytes);
        }
    }
    f.extend_from_slice(&udp);
    f
}

/// Native InfiniBand: LRH (PktLen in 4-byte words, LRH to ICRC), optional GRH (next
/// header 0x1B), `l4`, ICRC, VCRC.
fn infiniband(slid: u16, dlid: u16, gids: Option<(u128, u128)>, l4: &[u8]) -> Vec<u8> {
    let grh = if gids.is_some() { 40 } else { 0 };
    let words = (8 + grh + l4.len() + 4).div_ceil(4);
    let mut f = vec![0, if gids.is_some() { 3 } else { 2 }];
    f.extend_from_slice(&dlid.to_be_bytes());
    f.extend_from_slice(&(words as u16).to_be_bytes());
    f.extend_from_slice(&slid.to_be_bytes());
    if let Some((s, d)) = gids {
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&((l4.len() + 4) as u16).to_be_bytes());
        f.extend_from_slice(&[0x1b, 64]);
        f.extend_from_slice(&s.to_be_bytes());
        f.extend_from_slice(&d.to_be_bytes());
    }
    f.extend_from_slice(l4);
    f.resize(words * 4 - 4, 0);
    f.extend_from_slice(&[0; 4 + 2]);
    f
}

/// What a generated frame is, as the reference sees it.
enum Kind {
    /// RDMA: the fields, and the CM message if it is one.
    Rdma(Fields, Option<Cm>),
    /// RDMA the parser does not inspect: the default decides.
    Uninspected,
    /// Not RDMA: passed through.
    NotRdma,
}

#[derive(Clone, Copy, Debug)]
struct Cm {
    attr: u16,
    local: u32,
    remote: u32,
    qpn: u32,
    /// The sender's and receiver's endpoints: (kind, value); kind 1 an address or GID,
    /// 2 a LID ("the IP address, else the source GID, else the LID").
    src: (u8, u128),
    dst: (u8, u128),
}

// ---------------------------------------------------------------------------------------
// The reference: the connection table (docs/acl.md, "CM state").

#[derive(Clone, Copy, Debug)]
struct Conn {
    passive: (u8, u128),
    active_qpn: u32,
    passive_comm: Option<u32>,
    passive_qpn: Option<u32>,
}

/// A side's endpoint: (kind, value); kind 1 an address or GID, 2 a LID.
type Endpoint = (u8, u128);
/// A connection's key: the active side's endpoint and comm ID.
type ConnKey = (Endpoint, u32);

#[derive(Default)]
struct Table {
    conns: BTreeMap<ConnKey, Conn>,
}

enum Side {
    Active,
    Passive,
}

impl Table {
    /// The connection a message belongs to, and which side sent it.
    fn find(&self, m: &Cm) -> Option<(ConnKey, Side)> {
        const REP: u16 = 0x13;
        const REJ: u16 = 0x12;
        if m.attr != REP {
            if let Some(c) = self.conns.get(&(m.src, m.local)) {
                let remote_ok = match c.passive_comm {
                    Some(pc) => pc == m.remote,
                    None => m.remote == 0,
                };
                if c.passive == m.dst && remote_ok {
                    return Some(((m.src, m.local), Side::Active));
                }
            }
        }
        if let Some(c) = self.conns.get(&(m.dst, m.remote)) {
            let local_ok = match c.passive_comm {
                Some(pc) => pc == m.local,
                None => m.attr == REP || m.attr == REJ,
            };
            if c.passive == m.src && local_ok {
                return Some(((m.dst, m.remote), Side::Passive));
            }
        }
        None
    }

    /// Fills lQPN and dQPN (the document's table) and returns what an allowed message
    /// would change.
    fn resolve(&self, m: &Cm, f: &mut Fields) -> Option<ConnKey> {
        match m.attr {
            0x10 => {
                f.insert(F::Lqpn, m.qpn as u128);
                Some((m.src, m.local))
            }
            0x12..=0x16 => {
                let found = self.find(m);
                let (mine, theirs) = match &found {
                    Some((k, Side::Active)) => {
                        let c = self.conns[k];
                        (Some(c.active_qpn), c.passive_qpn)
                    }
                    Some((k, Side::Passive)) => {
                        let c = self.conns[k];
                        (c.passive_qpn, Some(c.active_qpn))
                    }
                    None => (None, None),
                };
                let (l, d) = match m.attr {
                    0x13 => (Some(m.qpn), theirs),
                    0x15 => (mine, Some(m.qpn)),
                    _ => (mine, theirs),
                };
                if let Some(q) = l {
                    f.insert(F::Lqpn, q as u128);
                }
                if let Some(q) = d {
                    f.insert(F::Dqpn, q as u128);
                }
                found.map(|(k, _)| k)
            }
            _ => None,
        }
    }

    /// "The table changes only for allowed messages (REQ creates, REP completes, RTU
    /// establishes, REJ and DREP remove)"; a REQ for a connection held changes nothing.
    fn commit(&mut self, m: &Cm, key: ConnKey) {
        match m.attr {
            0x10 => {
                self.conns.entry(key).or_insert(Conn {
                    passive: m.dst,
                    active_qpn: m.qpn,
                    passive_comm: None,
                    passive_qpn: None,
                });
            }
            0x13 => {
                if let Some(c) = self.conns.get_mut(&key) {
                    c.passive_comm = Some(m.local);
                    c.passive_qpn = Some(m.qpn);
                }
            }
            0x12 | 0x16 => {
                self.conns.remove(&key);
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------
// Random policies and traffic.

/// A small deterministic generator (the case's seed comes from proptest's fixed-seed RNG).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }
}

const HOSTS4: [[u8; 4]; 4] = [[10, 0, 1, 1], [10, 0, 1, 2], [10, 0, 1, 3], [10, 0, 2, 9]];
const HOSTS6: [u128; 3] = [
    0xfe80_0000_0000_0000_0000_0000_0000_0001,
    0xfe80_0000_0000_0000_0000_0000_0000_0002,
    0x2001_0db8_0000_0000_0000_0000_0000_0005,
];
const LIDS: [u16; 3] = [1, 2, 3];
const QPNS: [u32; 4] = [0x10, 0x11, 0x12, 0x300];
const VAS: [u64; 3] = [0x1000, 0x2000, 0x8000];
const SPORTS: [u16; 2] = [1000, 50000];
const DATA_OPS: [u8; 12] = [
    0x04, 0x0a, 0x0b, 0x0c, 0x10, 0x11, 0x13, 0x14, 0x24, 0x2a, 0x2b, 0x81,
];

fn gid_of_lid(l: u16) -> u128 {
    (1 << 127) | l as u128
}

fn random_field(g: &mut Gen) -> F {
    g.pick(&[
        F::Sip,
        F::Dip,
        F::Sgid,
        F::Dgid,
        F::Sport,
        F::Dport,
        F::Slid,
        F::Dlid,
        F::Type,
        F::Lqpn,
        F::Dqpn,
        F::Opcode,
        F::Opcode,
        F::Va,
        F::CmForged,
    ])
}

/// The largest value of a numeric field, what `inf` stands for as a range's upper bound.
fn max_of(field: F) -> u128 {
    match field {
        F::Lqpn | F::Dqpn => 0xff_ffff,
        F::Va => u64::MAX as u128,
        _ => 0xffff,
    }
}

fn random_match(g: &mut Gen) -> Match {
    let num = |g: &mut Gen, field: F, pool: &[u128]| {
        let a = g.pick(pool);
        match g.below(3) {
            0 => Match {
                field,
                ranges: vec![(a, a)],
                text: format!("match({} = {a:#x})", field.name()),
            },
            1 => {
                let b = g.pick(pool);
                Match {
                    field,
                    ranges: vec![(a, a), (b, b)],
                    text: format!("match({} in {{{a}, {b}}})", field.name()),
                }
            }
            _ if g.chance(30) => Match {
                // The paper's open range.
                field,
                ranges: vec![(a, max_of(field))],
                text: format!("match({} in [{a}, inf])", field.name()),
            },
            _ => {
                let b = g.pick(pool);
                let (lo, hi) = (a.min(b), a.max(b));
                Match {
                    field,
                    ranges: vec![(lo, hi)],
                    text: format!("match({} in [{lo}, {hi}])", field.name()),
                }
            }
        }
    };
    let field = random_field(g);
    match field {
        F::Sip | F::Dip | F::Sgid | F::Dgid => {
            let n = field.name();
            let gid = matches!(field, F::Sgid | F::Dgid);
            // A prefix as `= P` or as the paper's membership `in P`.
            let op = if g.chance(50) { "=" } else { "in" };
            match g.below(6) {
                0 => {
                    let h = g.pick(&HOSTS4);
                    Match {
                        field,
                        ranges: vec![(v4(h), v4(h))],
                        text: format!("match({n} = {}.{}.{}.{})", h[0], h[1], h[2], h[3]),
                    }
                }
                1 => Match {
                    field,
                    ranges: vec![(v4([10, 0, 1, 0]), v4([10, 0, 1, 255]))],
                    text: format!("match({n} {op} 10.0.1.0/24)"),
                },
                2 => Match {
                    field,
                    ranges: vec![(v4([10, 0, 0, 0]), v4([10, 255, 255, 255]))],
                    text: format!("match({n} {op} 10.0.0.0/8)"),
                },
                3 => Match {
                    field,
                    ranges: vec![(0xfe80 << 112, (0xfe80 << 112) | u64::MAX as u128)],
                    text: format!("match({n} {op} fe80::/64)"),
                },
                4 => {
                    let (a, b) = (g.pick(&LIDS), g.pick(&LIDS));
                    let (ga, gb) = (gid_of_lid(a), gid_of_lid(b));
                    match gid && g.chance(50) {
                        // The paper's integer GIDs: the GID's big-endian value.
                        true => Match {
                            field,
                            ranges: vec![(ga, ga), (gb, gb)],
                            text: format!("match({n} in {{{ga}, {gb}}})"),
                        },
                        false => Match {
                            field,
                            ranges: vec![(ga, ga)],
                            text: format!("match({n} = 8000::{a})"),
                        },
                    }
                }
                _ => {
                    let h = g.pick(&HOSTS6);
                    Match {
                        field,
                        ranges: vec![(h, h)],
                        text: match gid && g.chance(50) {
                            true => format!("match({n} = {h})"),
                            false => format!("match({n} = {})", std::net::Ipv6Addr::from(h)),
                        },
                    }
                }
            }
        }
        F::Sport => num(g, field, &[1000, 50000, 0, 65535]),
        F::Dport => num(g, field, &[4791, 4790]),
        F::Slid | F::Dlid => num(g, field, &[1, 2, 3, 9]),
        F::Lqpn | F::Dqpn => {
            if g.chance(30) {
                // "a CM message of no known connection" and friends.
                Match {
                    field,
                    ranges: vec![(0, 0xff_ffff)],
                    text: match g.chance(50) {
                        true => format!("match({} in [0, 0xffffff])", field.name()),
                        false => format!("match({} in [0, inf])", field.name()),
                    },
                }
            } else {
                num(g, field, &[0x10, 0x11, 0x12, 0x300, 1])
            }
        }
        F::Va => num(g, field, &[0x1000, 0x2000, 0x8000, 0]),
        F::Type => {
            let names = [
                ("REQ", 0x10u128),
                ("REJ", 0x12),
                ("REP", 0x13),
                ("RTU", 0x14),
                ("DREQ", 0x15),
                ("DREP", 0x16),
                ("MRA", 0x11),
            ];
            let (a, av) = g.pick(&names);
            let (b, bv) = g.pick(&names);
            Match {
                field,
                ranges: vec![(av, av), (bv, bv)],
                text: format!("match(type in {{{a}, {b}}})"),
            }
        }
        F::Opcode => {
            let groups: [(&str, &[u8]); 9] = [
                ("SEND", SEND),
                ("WRITE", WRITE),
                ("READ", READ),
                ("ATOMIC", ATOMIC),
                ("ACK", ACK),
                ("UC_RDMA_WRITE_ONLY", &[0x2a]),
                ("CNP", &[0x81]),
                ("UD_SEND_ONLY", &[0x64]),
                ("RDMA_READ_REQUEST", &[0x0c]),
            ];
            let (name, ops) = g.pick(&groups);
            let mut ranges: Vec<(u128, u128)> =
                ops.iter().map(|&o| (o as u128, o as u128)).collect();
            let mut text = name.to_string();
            if g.chance(30) {
                let extra = g.pick(&DATA_OPS);
                ranges.push((extra as u128, extra as u128));
                text.push_str(&format!(", {extra}"));
            }
            Match {
                field,
                ranges,
                text: format!("match(opcode in {{{text}}})"),
            }
        }
        F::CmForged => {
            let v = g.chance(50);
            Match {
                field,
                ranges: vec![(v as u128, v as u128)],
                text: format!("match(cmForged = {v})"),
            }
        }
    }
}

fn random_expr(g: &mut Gen, depth: u32) -> Expr {
    if depth == 0 || g.chance(45) {
        return match g.below(14) {
            0 => Expr::Any,
            1 | 2 => Expr::Not(Box::new(Expr::Match(random_match(g)))),
            3 => Expr::Wildcard(random_field(g)),
            _ => Expr::Match(random_match(g)),
        };
    }
    let n = 2 + g.below(2);
    let parts = (0..n).map(|_| random_expr(g, depth - 1)).collect();
    match g.below(5) {
        0 => Expr::Not(Box::new(Expr::And(parts))),
        1 | 2 => Expr::Or(parts),
        _ => Expr::And(parts),
    }
}

fn random_policy(g: &mut Gen) -> PolicySet {
    let n = 1 + g.below(6);
    PolicySet {
        policies: (0..n)
            .map(|_| Policy {
                predicate: random_expr(g, 2),
                allow: g.chance(50),
            })
            .collect(),
        default_allow: g.chance(40),
    }
}

/// Where a CM message travels: RoCEv2 between two IPv4 hosts, or native InfiniBand
/// between LIDs, with a GRH (`gids`) or without.
#[derive(Clone, Copy, Debug)]
enum Path {
    Roce {
        sip: [u8; 4],
        dip: [u8; 4],
    },
    Ib {
        slid: u16,
        dlid: u16,
        gids: Option<(u128, u128)>,
    },
}

/// A CM message's frame and the reference's view of it.
fn cm_frame(
    path: Path,
    attr: u16,
    local: u32,
    remote: u32,
    qpn: u32,
    src_qp: u32,
) -> (LinkType, Vec<u8>, Kind) {
    let l4 = transport(0x64, 1, src_qp, 0, &mad(attr, local, remote, qpn));
    let mut f = Fields::new();
    f.insert(F::Opcode, 0x64);
    f.insert(F::Type, attr as u128);
    f.insert(F::CmForged, (src_qp != 1) as u128);
    let (link, frame, src, dst) = match path {
        Path::Roce { sip, dip } => {
            let (s, d) = (v4(sip), v4(dip));
            for (k, v) in [(F::Sip, s), (F::Dip, d), (F::Sgid, s), (F::Dgid, d)] {
                f.insert(k, v);
            }
            f.insert(F::Sport, 4791);
            f.insert(F::Dport, 4791);
            let frame = ethernet(&[], Ip::V4, s, d, 4791, 4791, &l4);
            (LinkType::Ethernet, frame, (1, s), (1, d))
        }
        Path::Ib { slid, dlid, gids } => {
            f.insert(F::Slid, slid as u128);
            f.insert(F::Dlid, dlid as u128);
            let (src, dst) = match gids {
                Some((s, d)) => {
                    f.insert(F::Sgid, s);
                    f.insert(F::Dgid, d);
                    ((1, s), (1, d))
                }
                None => ((2, slid as u128), (2, dlid as u128)),
            };
            (
                LinkType::InfiniBand,
                infiniband(slid, dlid, gids, &l4),
                src,
                dst,
            )
        }
    };
    let cm = Cm {
        attr,
        local,
        remote,
        qpn,
        src,
        dst,
    };
    (link, frame, Kind::Rdma(f, Some(cm)))
}

/// A connection's exchange, as scripted frames: REQ, REP, RTU, then a disconnect from
/// either side, with the shapes that must not pass for the connection mixed in — a
/// retransmitted REQ, a third party's RTU or DREQ (on InfiniBand, from the GID that
/// spells the peer's LID), a forged sender, a REJ instead of the REP.
fn conversation(g: &mut Gen, comm: u32) -> Vec<(LinkType, Vec<u8>, Kind)> {
    let ib = g.chance(40);
    let (fwd, back, third) = if ib {
        let (a, b) = (1u16, 2u16);
        (
            Path::Ib {
                slid: a,
                dlid: b,
                gids: None,
            },
            Path::Ib {
                slid: b,
                dlid: a,
                gids: None,
            },
            Path::Ib {
                slid: 3,
                dlid: b,
                gids: Some((gid_of_lid(a), gid_of_lid(b))),
            },
        )
    } else {
        let (a, b) = (g.pick(&HOSTS4), g.pick(&HOSTS4));
        (
            Path::Roce { sip: a, dip: b },
            Path::Roce { sip: b, dip: a },
            Path::Roce {
                sip: [10, 9, 9, 9],
                dip: b,
            },
        )
    };
    let (ca, cb) = (comm + 8 + g.below(4) as u32, comm + 12 + g.below(4) as u32);
    let (qa, qb) = (g.pick(&QPNS), g.pick(&QPNS));
    let forged = |g: &mut Gen| if g.chance(10) { 0x66 } else { 1 };
    let mut out = vec![cm_frame(fwd, 0x10, ca, 0, qa, forged(g))];
    if g.chance(15) {
        out.push(cm_frame(back, 0x12, cb, ca, 0, forged(g))); // REJ
        return out;
    }
    out.push(cm_frame(back, 0x13, cb, ca, qb, forged(g)));
    if g.chance(25) {
        out.push(cm_frame(fwd, 0x10, ca, 0, qa, 1)); // retransmitted REQ
    }
    if g.chance(30) {
        out.push(cm_frame(third, 0x14, ca, cb, 0, 1));
    }
    out.push(cm_frame(fwd, 0x14, ca, cb, 0, forged(g)));
    if g.chance(30) {
        out.push(cm_frame(third, 0x15, ca, cb, qb, 1));
    }
    if g.chance(50) {
        out.push(cm_frame(fwd, 0x15, ca, cb, qb, forged(g)));
        out.push(cm_frame(back, 0x16, cb, ca, 0, forged(g)));
    } else {
        out.push(cm_frame(back, 0x15, cb, ca, qa, forged(g)));
        out.push(cm_frame(fwd, 0x16, ca, cb, 0, forged(g)));
    }
    out
}

/// One frame: its link, bytes and what the reference says it is. `comm` is this case's
/// range of communication IDs (so that connections of earlier cases, which the program's
/// table keeps across policy updates, are never found).
fn random_frame(g: &mut Gen, comm: u32) -> (LinkType, Vec<u8>, Kind) {
    let op = g.pick(&DATA_OPS);
    let dqp = g.pick(&QPNS);
    let va = g.pick(&VAS);
    let payload = [0u8; 8];
    let cm_attr = g.pick(&[0x10u16, 0x13, 0x14, 0x12, 0x15, 0x16, 0x11, 0x14, 0x15]);
    let cm_local = comm + g.below(3) as u32;
    let cm_remote = if g.chance(15) {
        0
    } else {
        comm + g.below(3) as u32
    };
    let cm_qpn = g.pick(&QPNS);
    let src_qp = if g.chance(85) { 1 } else { 0x55 };
    let cm_l4 = || {
        transport(
            0x64,
            1,
            src_qp,
            0,
            &mad(cm_attr, cm_local, cm_remote, cm_qpn),
        )
    };
    let data_fields = |f: &mut Fields| {
        f.insert(F::Opcode, op as u128);
        f.insert(F::Dqpn, dqp as u128);
        if matches!(op, 0x0a | 0x0b | 0x0c | 0x2a | 0x2b | 0x13 | 0x14 | 0x06) {
            f.insert(F::Va, va as u128);
        }
    };
    let cm_fields = |f: &mut Fields, src: (u8, u128), dst: (u8, u128)| {
        f.insert(F::Opcode, 0x64);
        f.insert(F::Type, cm_attr as u128);
        f.insert(F::CmForged, (src_qp != 1) as u128);
        Cm {
            attr: cm_attr,
            local: cm_local,
            remote: cm_remote,
            qpn: cm_qpn,
            src,
            dst,
        }
    };
    match g.below(20) {
        // RoCEv2 (data or CM) over IPv4 or IPv6, with tags and extension headers.
        0..=11 => {
            let is_cm = g.chance(45);
            let v6 = g.chance(30);
            let (ip, sip, dip) = if v6 {
                let ext = g.pick(&[None, None, Some(0u8), Some(51)]);
                let s = if g.chance(20) {
                    v4(g.pick(&HOSTS4)) // an IPv4-mapped source in an IPv6 header
                } else {
                    g.pick(&HOSTS6)
                };
                (Ip::V6 { ext }, s, g.pick(&HOSTS6))
            } else {
                (Ip::V4, v4(g.pick(&HOSTS4)), v4(g.pick(&HOSTS4)))
            };
            let tags: Vec<u16> = match g.below(6) {
                0 => vec![0x8100],
                1 => vec![0x88a8, 0x8100],
                2 => vec![0x9100],
                3 => vec![0x9200, 0x8100],
                _ => vec![],
            };
            let sport = g.pick(&SPORTS);
            let mut f = Fields::new();
            f.insert(F::Sip, sip);
            f.insert(F::Dip, dip);
            f.insert(F::Sgid, sip);
            f.insert(F::Dgid, dip);
            f.insert(F::Sport, sport as u128);
            f.insert(F::Dport, 4791);
            let (l4, cm) = if is_cm {
                let cm = cm_fields(&mut f, (1, sip), (1, dip));
                (cm_l4(), Some(cm))
            } else {
                data_fields(&mut f);
                (transport(op, dqp, 0, va, &payload), None)
            };
            let frame = ethernet(&tags, ip, sip, dip, sport, 4791, &l4);
            (LinkType::Ethernet, frame, Kind::Rdma(f, cm))
        }
        // Native InfiniBand: LIDs only, or a GRH (whose GIDs may spell a LID).
        12..=15 => {
            let is_cm = g.chance(60);
            let (slid, dlid) = (g.pick(&LIDS), g.pick(&LIDS));
            let gids = if g.chance(40) {
                let s = if g.chance(50) {
                    gid_of_lid(g.pick(&LIDS))
                } else {
                    g.pick(&HOSTS6)
                };
                let d = if g.chance(50) {
                    gid_of_lid(g.pick(&LIDS))
                } else {
                    g.pick(&HOSTS6)
                };
                Some((s, d))
            } else {
                None
            };
            let mut f = Fields::new();
            f.insert(F::Slid, slid as u128);
            f.insert(F::Dlid, dlid as u128);
            if let Some((s, d)) = gids {
                f.insert(F::Sgid, s);
                f.insert(F::Dgid, d);
            }
            let (src, dst) = match gids {
                Some((s, d)) => ((1, s), (1, d)),
                None => ((2, slid as u128), (2, dlid as u128)),
            };
            let (l4, cm) = if is_cm {
                let cm = cm_fields(&mut f, src, dst);
                (cm_l4(), Some(cm))
            } else {
                data_fields(&mut f);
                (transport(op, dqp, 0, va, &payload), None)
            };
            let frame = infiniband(slid, dlid, gids, &l4);
            (LinkType::InfiniBand, frame, Kind::Rdma(f, cm))
        }
        // Uninspected: RoCE v1, VXLAN, IPsec, IPv6 extension headers not walked.
        16 | 17 => {
            let l4 = transport(op, dqp, 0, va, &payload);
            let (s, d) = (v4(g.pick(&HOSTS4)), v4(g.pick(&HOSTS4)));
            let frame = match g.below(5) {
                0 => {
                    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x89, 0x15];
                    let mut grh = vec![0x60, 0, 0, 0];
                    grh.extend_from_slice(&((l4.len() + 4) as u16).to_be_bytes());
                    grh.extend_from_slice(&[0x1b, 64]);
                    grh.extend_from_slice(&s.to_be_bytes());
                    grh.extend_from_slice(&d.to_be_bytes());
                    f.extend_from_slice(&grh);
                    f.extend_from_slice(&l4);
                    f.extend_from_slice(&[0; 4]);
                    f
                }
                1 => {
                    let inner = ethernet(&[], Ip::V4, s, d, 1000, 4791, &l4);
                    let mut vx = vec![0x08, 0, 0, 0, 0, 0, 42, 0];
                    vx.extend_from_slice(&inner);
                    // The outer UDP's last 4 bytes are taken as the inner frame's tail.
                    ethernet(&[], Ip::V4, s, d, 50000, 4789, &vx)
                }
                2 => {
                    let mut f = ethernet(&[], Ip::V4, s, d, 1000, 4791, &l4);
                    f[23] = g.pick(&[50, 51]); // ESP or AH over IPv4
                    f
                }
                _ => {
                    let ext = g.pick(&[50u8, 135, 139, 140, 253, 254]);
                    ethernet(
                        &[],
                        Ip::V6 { ext: Some(ext) },
                        HOSTS6[0],
                        HOSTS6[1],
                        1000,
                        4791,
                        &l4,
                    )
                }
            };
            (LinkType::Ethernet, frame, Kind::Uninspected)
        }
        // Not RDMA: another UDP port, or ARP.
        _ => {
            if g.chance(50) {
                let (s, d) = (v4(g.pick(&HOSTS4)), v4(g.pick(&HOSTS4)));
                let l4 = transport(op, dqp, 0, va, &payload);
                (
                    LinkType::Ethernet,
                    ethernet(&[], Ip::V4, s, d, 1000, 53, &l4),
                    Kind::NotRdma,
                )
            } else {
                let mut arp = vec![0u8; 60];
                arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
                (LinkType::Ethernet, arp, Kind::NotRdma)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------

/// What the reference decides, as the engines report it (the deciding policy, not its
/// rule: the reference has no rules).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    Policy { policy: u32, allow: bool },
    Default { allow: bool },
    NotRdma,
}

fn seen(o: &Outcome) -> Expect {
    let allow = o.action == Action::Allow;
    match o.cause {
        OutcomeCause::Policy { policy, .. } => Expect::Policy { policy, allow },
        OutcomeCause::Default => Expect::Default { allow },
        OutcomeCause::NotRdma if allow => Expect::NotRdma,
        other => panic!("unexpected outcome {other:?} ({:?})", o.action),
    }
}

#[test]
fn reference_native_engine_and_program_agree_on_random_policies_and_traffic() {
    let gw = Gateway::new(Some(std::path::Path::new(&format!(
        "/dev/shm/rdx-acl-differential-{}",
        std::process::id()
    ))))
    .unwrap();
    let applier = std::cell::RefCell::new(Applier::attach(gw.region_path()));
    let hook = gw.hook().unwrap();
    let config = Config {
        cases: 40,
        failure_persistence: None,
        // A failing case names its seed, policy and frame; shrinking a seed means nothing.
        max_shrink_iters: 0,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let case = std::cell::Cell::new(0u32);
    let frames_checked = std::cell::Cell::new(0usize);
    // Coverage: frames decided by a policy, by the default, passed as not RDMA; CM
    // messages that found their connection.
    let tally = std::cell::Cell::new([0usize; 4]);
    runner
        .run(&proptest::prelude::any::<u64>(), |seed| {
            let k = case.get();
            case.set(k + 1);
            let mut g = Gen(seed | 1);
            let policy = random_policy(&mut g);
            let text = policy.text();
            let rules = compile(&parse(&text).unwrap()).unwrap();
            let generation = 0x1000 + k as u64;
            applier.borrow_mut().apply(&rules, generation);
            let mut engine = Engine::new(rules);
            let mut table = Table::default();
            let mut script = std::collections::VecDeque::new();
            for i in 0..160 {
                let comm = 1000 + 32 * k;
                if script.is_empty() && g.chance(10) {
                    script.extend(conversation(&mut g, comm));
                }
                let (link, frame, kind) = match script.is_empty() || g.chance(30) {
                    true => random_frame(&mut g, comm),
                    false => script.pop_front().unwrap(),
                };
                let want = match kind {
                    Kind::NotRdma => Expect::NotRdma,
                    Kind::Uninspected => Expect::Default {
                        allow: policy.default_allow,
                    },
                    Kind::Rdma(mut fields, cm) => {
                        let key = cm.and_then(|m| table.resolve(&m, &mut fields));
                        if cm.is_some_and(|m| m.attr != 0x10) && key.is_some() {
                            let mut t = tally.get();
                            t[3] += 1;
                            tally.set(t);
                        }
                        let (allow, by) = policy.decide(&fields);
                        if let (true, Some(m), Some(key)) = (allow, cm, key) {
                            table.commit(&m, key);
                        }
                        match by {
                            Some(p) => Expect::Policy { policy: p, allow },
                            None => Expect::Default { allow },
                        }
                    }
                };
                let native = seen(&Outcome::from(&engine.process(link, &frame)));
                let d = Gateway::decide(&hook, link, &frame);
                assert_eq!(d.generation, generation);
                let program = seen(&d.outcome);
                assert_eq!(
                    native, want,
                    "case {k} frame {i}: native engine vs reference\npolicy:\n{text}frame: {frame:02x?}"
                );
                assert_eq!(
                    program, want,
                    "case {k} frame {i}: program vs reference\npolicy:\n{text}frame: {frame:02x?}"
                );
                frames_checked.set(frames_checked.get() + 1);
                let mut t = tally.get();
                t[match want {
                    Expect::Policy { .. } => 0,
                    Expect::Default { .. } => 1,
                    Expect::NotRdma => 2,
                }] += 1;
                tally.set(t);
            }
            Ok(())
        })
        .unwrap();
    let [by_policy, by_default, not_rdma, cm_found] = tally.get();
    eprintln!(
        "{} random policies, {} frames: reference, native engine and program agree \
         ({by_policy} decided by a policy, {by_default} by the default, {not_rdma} not RDMA; \
         {cm_found} CM messages found their connection)",
        case.get(),
        frames_checked.get()
    );
    assert!(by_policy > 1000 && by_default > 1000 && not_rdma > 100 && cm_found > 20);
}
