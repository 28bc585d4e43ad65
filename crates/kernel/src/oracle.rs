//! The kernel as an oracle for other implementations: inputs, and what the kernel makes of
//! them, in a form any tier of rdx (interpreter, JIT, native hooks) can be compared with.
//!
//! - [`TestInput`]: a frame plus the `__sk_buff` fields a socket filter's `ctx_in` may set;
//!   [`fixed_inputs`] (hand-built frames of every shape the corpus parses, and truncations)
//!   and [`random_inputs`] / [`InputRng`] (seeded, reproducible).
//! - [`KernelOracle`]: one program of an object loaded by libbpf; [`KernelOracle::run`]
//!   returns the [`Outcome`] of one `BPF_PROG_TEST_RUN` — r0's low 32 bits, the packet
//!   afterwards, a socket filter's writable context fields and every map's entries (declared
//!   maps under their names, global data under its section name, as rdx's loader names them).
//!   Map state carries over from run to run, as it does in any implementation.
//! - [`difference`] explains how another implementation's [`Outcome`] differs.
//!
//! The semantics of the context the kernel builds, and what it refuses, are described in
//! `docs/differential.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::error::KernelError;
use crate::object::KernelObject;
use crate::program::ProgType;
use crate::run::TestRunInput;

/// One test input: a frame and, for socket filters, the `__sk_buff` fields given in ctx_in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestInput {
    /// The Ethernet frame (`data_in`), at least 14 bytes.
    pub frame: Vec<u8>,
    /// `__sk_buff.mark`, given through `ctx_in` (socket filters only; XDP ignores these fields).
    pub mark: u32,
    /// `__sk_buff.priority`, given through `ctx_in` (socket filters only).
    pub priority: u32,
    /// `__sk_buff.cb`, the five control-block words, given through `ctx_in` (socket filters only).
    pub cb: [u32; 5],
}

impl TestInput {
    /// A frame with all context fields zero.
    pub fn plain(frame: Vec<u8>) -> Self {
        TestInput {
            frame,
            mark: 0,
            priority: 0,
            cb: [0; 5],
        }
    }
}

const SRC_MAC: [u8; 6] = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
const DST_MAC: [u8; 6] = [0x02, 0x66, 0x77, 0x88, 0x99, 0xaa];

fn eth(dst: [u8; 6], ethertype: u16) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&SRC_MAC);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

fn ipv4_header(protocol: u8, payload_len: usize, options: &[u8], good_checksum: bool) -> Vec<u8> {
    let ihl = 5 + options.len() / 4;
    let total = (ihl * 4 + payload_len) as u16;
    let mut h = vec![(4 << 4) | ihl as u8, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0x1c, 0x46, 0x40, 0x00, 64, protocol, 0, 0]);
    h.extend_from_slice(&[192, 168, 1, 10, 10, 0, 0, 77]);
    h.extend_from_slice(options);
    let mut sum = 0u32;
    for w in h.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let check = if good_checksum { !(sum as u16) } else { 0xbeef };
    h[10..12].copy_from_slice(&check.to_be_bytes());
    h
}

fn l4(protocol: u8, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&dport.to_be_bytes());
    if protocol == 6 {
        h.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x12, 0xff, 0xff, 0, 0, 0, 0]);
    } else {
        h.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        h.extend_from_slice(&[0, 0]);
    }
    h.extend_from_slice(payload);
    h
}

fn ipv4_frame(dst: [u8; 6], vlans: &[u16], protocol: u8, options: &[u8], good: bool) -> Vec<u8> {
    let payload: Vec<u8> = (0..37u8).map(|i| i.wrapping_mul(29) ^ 0x5a).collect();
    let l4 = l4(protocol, 40000 + u16::from(protocol), 53, &payload);
    let outer = match vlans.len() {
        0 => 0x0800,
        1 => 0x8100,
        _ => 0x88a8,
    };
    let mut f = eth(dst, outer);
    for (i, tci) in vlans.iter().enumerate() {
        f.extend_from_slice(&tci.to_be_bytes());
        let next = if i + 1 == vlans.len() { 0x0800 } else { 0x8100 };
        f.extend_from_slice(&(next as u16).to_be_bytes());
    }
    f.extend(ipv4_header(protocol, l4.len(), options, good));
    f.extend(l4);
    f
}

fn ipv6_frame(dst: [u8; 6], ext_headers: &[(u8, u8)], last: u8) -> Vec<u8> {
    let mut exts = Vec::new();
    let first = ext_headers.first().map_or(last, |e| e.0);
    for (i, (_, len_units)) in ext_headers.iter().enumerate() {
        let next = ext_headers.get(i + 1).map_or(last, |e| e.0);
        let size = (usize::from(*len_units) + 1) * 8;
        let mut h = vec![next, *len_units];
        h.resize(size, 0x01);
        exts.extend(h);
    }
    let upper = if last == 58 {
        vec![128, 0, 0x12, 0x34, 0, 1, 0, 1]
    } else {
        l4(last, 5353, 443, b"six")
    };
    let mut f = eth(dst, 0x86dd);
    f.extend_from_slice(&[0x60, 0x0a, 0xbc, 0xde]);
    f.extend_from_slice(&((exts.len() + upper.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[first, 64]);
    f.extend((0..16u8).map(|i| 0x20 + i));
    f.extend((0..16u8).map(|i| 0xf0 ^ i));
    f.extend(exts);
    f.extend(upper);
    f
}

/// Hand-built frames covering every branch the corpus parses, and their truncations.
pub fn fixed_inputs() -> Vec<TestInput> {
    let broadcast = [0xff; 6];
    let multicast = [0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb];
    let host = [0u8; 6];
    let mut frames = vec![
        ipv4_frame(DST_MAC, &[], 17, &[], true),
        ipv4_frame(DST_MAC, &[], 6, &[], true),
        ipv4_frame(broadcast, &[], 17, &[], false),
        ipv4_frame(multicast, &[], 1, &[], true),
        ipv4_frame(host, &[], 17, &[1, 1, 1, 0, 0x94, 4, 0, 0], true),
        ipv4_frame(DST_MAC, &[100], 17, &[], true),
        ipv4_frame(DST_MAC, &[7, 300], 6, &[], true),
        ipv6_frame(DST_MAC, &[], 17),
        ipv6_frame(DST_MAC, &[(0, 0), (43, 1), (60, 0)], 6),
        ipv6_frame(multicast, &[(0, 2)], 58),
        ipv6_frame(DST_MAC, &[(60, 0), (60, 0), (60, 0), (60, 0), (60, 0)], 17),
        eth(DST_MAC, 0x0806),
        eth(host, 0x0042),
        vec![0; 14],
        vec![0xff; 14],
        (0..1400u32).map(|i| (i * 7 + i / 13) as u8).collect(),
    ];
    // Truncations inside every header of a few shapes.
    for base in [
        ipv4_frame(DST_MAC, &[], 17, &[], true),
        ipv4_frame(DST_MAC, &[9, 10], 6, &[0x44, 8, 5, 0], true),
        ipv6_frame(DST_MAC, &[(0, 1)], 17),
    ] {
        for cut in [
            15, 17, 18, 20, 22, 30, 33, 34, 35, 38, 41, 42, 46, 54, 60, 62,
        ] {
            if cut < base.len() {
                frames.push(base[..cut].to_vec());
            }
        }
    }
    let mut inputs: Vec<TestInput> = frames.into_iter().map(TestInput::plain).collect();
    // Context values a socket filter reads and writes.
    inputs.push(TestInput {
        mark: 0xdead_beef,
        priority: 6,
        cb: [1, 2, 3, 4, 0x8000_0001],
        ..TestInput::plain(ipv4_frame(DST_MAC, &[], 17, &[], true))
    });
    inputs
}

/// Seeded pseudo-random inputs (xorshift64*), so a failing seed reproduces exactly.
pub struct InputRng(u64);

impl InputRng {
    /// A generator for `seed` (any value; 0 is mapped to a fixed non-zero state).
    pub fn new(seed: u64) -> Self {
        InputRng(if seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            seed
        })
    }

    /// The next input: a template frame (IPv4/UDP/TCP, VLAN, IPv4 options, IPv6 with an
    /// extension header) or pure noise of 14..613 bytes, with random byte mutations and a
    /// random truncation or extension, and random `mark`, `priority` and `cb` values.
    pub fn next_input(&mut self) -> TestInput {
        random_input(self)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A frame built from one of the templates (or pure noise), mutated and possibly truncated.
fn random_input(rng: &mut InputRng) -> TestInput {
    let dsts = [DST_MAC, [0xff; 6], [0x33, 0x33, 0, 0, 0, 1], [0; 6]];
    let dst = dsts[rng.below(4) as usize];
    let mut frame = match rng.below(8) {
        0 => ipv4_frame(dst, &[], 17, &[], rng.below(2) == 0),
        1 => ipv4_frame(dst, &[], 6, &[], true),
        2 => ipv4_frame(dst, &[rng.below(4096) as u16], 17, &[], true),
        3 => ipv4_frame(dst, &[], 17, &[1, 1, 1, 1, 1, 1, 1, 0], true),
        4 => ipv6_frame(
            dst,
            &[(0, rng.below(3) as u8)],
            [6, 17, 58][rng.below(3) as usize],
        ),
        5 => ipv6_frame(dst, &[], 17),
        _ => {
            let len = 14 + rng.below(600) as usize;
            (0..len).map(|_| rng.next() as u8).collect()
        }
    };
    for _ in 0..rng.below(4) {
        let at = rng.below(frame.len() as u64) as usize;
        frame[at] = rng.next() as u8;
    }
    if rng.below(4) == 0 {
        let len = 14 + rng.below(frame.len() as u64 - 13) as usize;
        frame.truncate(len);
    } else if rng.below(8) == 0 {
        let extra = rng.below(200) as usize;
        frame.extend((0..extra).map(|_| rng.next() as u8));
    }
    let small = |rng: &mut InputRng| {
        if rng.below(2) == 0 {
            rng.below(4) as u32
        } else {
            rng.next() as u32
        }
    };
    TestInput {
        frame,
        mark: small(rng),
        priority: small(rng),
        cb: std::array::from_fn(|_| small(rng)),
    }
}

/// `n` inputs from [`InputRng::new`]`(seed)`.
pub fn random_inputs(seed: u64, n: usize) -> Vec<TestInput> {
    let mut rng = InputRng::new(seed);
    (0..n).map(|_| rng.next_input()).collect()
}

/// What one run produced, in the form every implementation can be compared in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Low 32 bits of r0 (all the kernel reports).
    pub retval: u32,
    /// The packet after the run (for socket filters: after the Ethernet header, which the
    /// kernel pulls before the run and hands back zeroed).
    pub packet: Vec<u8>,
    /// Socket filters: `mark`, `priority`, `cb[0..5]` after the run (see [`SkbFields`]).
    pub skb_fields: Option<SkbFields>,
    /// Every map: name (section name for global data) → entries.
    pub maps: BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>,
}

/// A socket filter's `mark`, `priority` and `cb[0..5]`, in that order.
pub type SkbFields = [u32; 7];

/// Bytes of the Ethernet header the kernel pulls before a socket filter runs.
pub const ETH_HLEN: usize = 14;
/// `sizeof(struct __sk_buff)` and the offsets of the fields `ctx_in` sets.
pub const SKB_SIZE: usize = 192;
const SKB_OFF_MARK: usize = 8;
const SKB_OFF_PRIORITY: usize = 32;
const SKB_OFF_CB: usize = 48;

impl TestInput {
    /// The `struct __sk_buff` to pass as `ctx_in` for a socket filter.
    pub fn skb_ctx_in(&self) -> Vec<u8> {
        let mut ctx = vec![0u8; SKB_SIZE];
        ctx[SKB_OFF_MARK..SKB_OFF_MARK + 4].copy_from_slice(&self.mark.to_le_bytes());
        ctx[SKB_OFF_PRIORITY..SKB_OFF_PRIORITY + 4].copy_from_slice(&self.priority.to_le_bytes());
        for (i, cb) in self.cb.iter().enumerate() {
            let at = SKB_OFF_CB + 4 * i;
            ctx[at..at + 4].copy_from_slice(&cb.to_le_bytes());
        }
        ctx
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// One program of an object, loaded by libbpf, run on [`TestInput`]s.
#[derive(Debug)]
pub struct KernelOracle {
    object: KernelObject,
    program: String,
    prog_type: ProgType,
}

impl KernelOracle {
    /// Loads `path` with libbpf and selects the program called `program`.
    pub fn open(path: impl AsRef<Path>, program: &str) -> Result<Self, KernelError> {
        let object = KernelObject::open(path)?;
        let prog_type = object.program(program)?.prog_type();
        Ok(KernelOracle {
            object,
            program: program.to_string(),
            prog_type,
        })
    }

    /// The type of the selected program (it decides how inputs are passed in).
    pub fn prog_type(&self) -> ProgType {
        self.prog_type
    }

    /// The loaded object, for its maps.
    pub fn object(&self) -> &KernelObject {
        &self.object
    }

    /// Whether the kernel can run this program on `input` at all (see [`kernel_builds_skb`]).
    pub fn accepts(&self, input: &TestInput) -> bool {
        input.frame.len() >= ETH_HLEN
            && (self.prog_type != ProgType::SocketFilter || kernel_builds_skb(&input.frame))
    }

    /// One `BPF_PROG_TEST_RUN`, then every map read back.
    pub fn run(&self, input: &TestInput) -> Result<Outcome, KernelError> {
        let prog = self.object.program(&self.program)?;
        let socket = self.prog_type == ProgType::SocketFilter;
        let ctx = socket.then(|| input.skb_ctx_in());
        let out = prog.test_run(&TestRunInput {
            data_in: &input.frame,
            ctx_in: ctx.as_deref(),
            repeat: 1,
        })?;
        let (packet, skb_fields) = if socket {
            let ctx_out = out.ctx_out.as_deref().unwrap_or_default();
            if ctx_out.len() < SKB_SIZE {
                return Err(KernelError::InvalidInput {
                    what: format!("BPF_PROG_TEST_RUN of {:?}", self.program),
                    reason: format!("the kernel returned a {}-byte ctx_out", ctx_out.len()),
                });
            }
            let mut fields = [0u32; 7];
            fields[0] = u32_at(ctx_out, SKB_OFF_MARK);
            fields[1] = u32_at(ctx_out, SKB_OFF_PRIORITY);
            for (i, field) in fields[2..].iter_mut().enumerate() {
                *field = u32_at(ctx_out, SKB_OFF_CB + 4 * i);
            }
            (
                out.data_out.get(ETH_HLEN..).unwrap_or_default().to_vec(),
                Some(fields),
            )
        } else {
            (out.data_out, None)
        };
        let mut maps = BTreeMap::new();
        for map in self.object.maps() {
            let name = map
                .global_data_section
                .clone()
                .unwrap_or_else(|| map.name.clone());
            maps.insert(name, map.map.snapshot()?.entries);
        }
        Ok(Outcome {
            retval: out.retval,
            packet,
            skb_fields,
            maps,
        })
    }
}

/// Hex of the first 96 bytes (and the length when longer), for messages.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::new();
    for b in bytes.iter().take(96) {
        let _ = write!(s, "{b:02x}");
    }
    if bytes.len() > 96 {
        let _ = write!(s, "...({} bytes)", bytes.len());
    }
    s
}

/// Describes, field by field and map entry by map entry, how `rdx` (any other
/// implementation) differs from `kernel`, or `None` when they agree.
pub fn difference(kernel: &Outcome, rdx: &Outcome) -> Option<String> {
    let mut out = String::new();
    if kernel.retval != rdx.retval {
        let _ = writeln!(
            out,
            "  r0: kernel {:#x}, rdx {:#x}",
            kernel.retval, rdx.retval
        );
    }
    if kernel.packet != rdx.packet {
        let _ = writeln!(
            out,
            "  packet out:\n    kernel {}\n    rdx    {}",
            hex(&kernel.packet),
            hex(&rdx.packet)
        );
    }
    if kernel.skb_fields != rdx.skb_fields {
        let _ = writeln!(
            out,
            "  __sk_buff mark, priority, cb[0..5]: kernel {:x?}, rdx {:x?}",
            kernel.skb_fields, rdx.skb_fields
        );
    }
    let names: std::collections::BTreeSet<_> = kernel.maps.keys().chain(rdx.maps.keys()).collect();
    for name in names {
        match (kernel.maps.get(name), rdx.maps.get(name)) {
            (Some(k), Some(r)) if k == r => {}
            (Some(k), Some(r)) => {
                let keys: std::collections::BTreeSet<_> = k.keys().chain(r.keys()).collect();
                for key in keys {
                    let (kv, rv) = (k.get(key), r.get(key));
                    if kv != rv {
                        let _ = writeln!(
                            out,
                            "  map {name} key {}: kernel {}, rdx {}",
                            hex(key),
                            kv.map_or("absent".into(), |v| hex(v)),
                            rv.map_or("absent".into(), |v| hex(v))
                        );
                    }
                }
            }
            (k, _) => {
                let _ = writeln!(
                    out,
                    "  map {name} exists only in {}",
                    if k.is_some() { "the kernel" } else { "rdx" }
                );
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Whether the kernel builds an skb for `frame` at all: `BPF_PROG_TEST_RUN` of an skb program
/// fails with EINVAL when the frame is IPv4 or IPv6 by its EtherType but shorter than that
/// network header. Such inputs say nothing about a program, so socket filters skip them.
pub fn kernel_builds_skb(frame: &[u8]) -> bool {
    let l3 = frame.len().saturating_sub(ETH_HLEN);
    match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0800 => l3 >= 20,
        0x86dd => l3 >= 40,
        _ => true,
    }
}
