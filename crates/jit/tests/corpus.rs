//! Every program of the corpus (`bpf/tests/*.c`, compiled by clang) in the JIT (both code
//! generators: the optimizing tier and `Pipeline::Baseline`, which also runs every other
//! program with array lookups inlined) and in the interpreter, on the same sequence of inputs: r0, the packet after the run, the writable
//! socket-filter context fields and every map entry must match after every run.
//!
//! The JIT side gets the context as real memory, laid out as the kernel exposes it to
//! programs (`struct xdp_md`, `struct __sk_buff`), with the packet mapped below 4 GiB so that
//! the 32-bit `data`/`data_end` fields hold real pointers, exactly what a program loads
//! before any context rewriting. Map helpers are the interpreter crate's native twins,
//! running against the JIT side's own map instances.

use std::collections::{BTreeMap, HashMap};

use rdx_bpf::helpers::{native_helper, Helpers};
use rdx_bpf::interp::{Config, ContextModel, Input, SkBuff, Vm, XdpMd};
use rdx_bpf::isa::Size;
use rdx_bpf::maps::MapSet;
use rdx_jit::{Arch, Build, CompileOptions, Compiler, ExecutableCode, Pipeline, Symbol};
use rdx_region::abi::RunState;

const SKB_SIZE: usize = 192;
const SKB_LOAD_BYTES: u32 = 26;

/// Memory mapped below 4 GiB, holding the packet.
struct LowMem {
    ptr: *mut u8,
    len: usize,
}

impl LowMem {
    fn new(len: usize) -> LowMem {
        // SAFETY: fresh anonymous mapping; MAP_32BIT places it in the low 2 GiB.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_32BIT,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap MAP_32BIT");
        assert!((p as u64) < (1 << 32));
        LowMem { ptr: p.cast(), len }
    }

    fn bytes(&mut self, n: usize) -> &mut [u8] {
        assert!(n <= self.len);
        // SAFETY: inside our mapping.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, n) }
    }
}

impl Drop for LowMem {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Native `bpf_skb_load_bytes` over the native `__sk_buff` (data/data_end at 76/80).
unsafe extern "C" fn skb_load_bytes(ctx: u64, offset: u64, to: u64, len: u64, _: u64) -> u64 {
    // SAFETY: ctx is the test's __sk_buff; data/data_end bound the test's packet; the program
    // passes a stack buffer of `len` bytes, as the verifier would require.
    unsafe {
        let data = *((ctx + 76) as *const u32) as u64;
        let end = *((ctx + 80) as *const u32) as u64;
        let (offset, len) = (offset as u32 as u64, len as u32 as u64);
        let dst = std::slice::from_raw_parts_mut(to as *mut u8, len as usize);
        if offset + len <= end - data {
            dst.copy_from_slice(std::slice::from_raw_parts(
                (data + offset) as *const u8,
                len as usize,
            ));
            0
        } else {
            dst.fill(0);
            (-14i64) as u64
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    r0: u64,
    packet: Vec<u8>,
    skb_fields: Option<Vec<u32>>,
    maps: BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>,
}

fn dump(maps: &MapSet) -> BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>> {
    maps.iter()
        .map(|m| {
            let entries = m
                .keys()
                .into_iter()
                .filter_map(|k| m.lookup(&k).map(|v| (k, v)))
                .collect();
            (m.name().to_string(), entries)
        })
        .collect()
}

/// Writable `__sk_buff` words: mark, priority, cb[0..5].
fn skb_words(read: impl Fn(usize) -> u32) -> Vec<u32> {
    let mut offs = vec![SkBuff::OFF_MARK, SkBuff::OFF_PRIORITY];
    offs.extend((0..5).map(|i| SkBuff::OFF_CB + 4 * i));
    offs.into_iter().map(read).collect()
}

fn frames() -> Vec<Vec<u8>> {
    fn eth(ethertype: u16, dst: [u8; 6]) -> Vec<u8> {
        let mut f = dst.to_vec();
        f.extend_from_slice(&[2, 0x11, 0x22, 0x33, 0x44, 0x55]);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f
    }
    fn ipv4(proto: u8, vlan: bool) -> Vec<u8> {
        let mut f = eth(
            if vlan { 0x8100 } else { 0x0800 },
            [2, 0x66, 0x77, 0x88, 0x99, 0xaa],
        );
        if vlan {
            f.extend_from_slice(&[0, 100, 8, 0]);
        }
        let payload: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(29) ^ 0x5a).collect();
        let mut l4 = vec![0x9c, 0x40, 0, 53];
        if proto == 6 {
            l4.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x12, 0xff, 0xff, 0, 0, 0, 0]);
        } else {
            l4.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
            l4.extend_from_slice(&[0, 0]);
        }
        l4.extend(payload);
        let total = (20 + l4.len()) as u16;
        let mut h = vec![0x45, 0];
        h.extend_from_slice(&total.to_be_bytes());
        h.extend_from_slice(&[
            0x1c, 0x46, 0x40, 0, 64, proto, 0, 0, 192, 168, 1, 10, 10, 0, 0, 77,
        ]);
        let mut sum = 0u32;
        for w in h.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        f.extend(h);
        f.extend(l4);
        f
    }
    fn ipv6(next: u8) -> Vec<u8> {
        let mut f = eth(0x86dd, [0x33, 0x33, 0, 0, 0, 1]);
        let upper = vec![0x14, 0xe9, 0x01, 0xbb, 0, 11, 0, 0, b's', b'i', b'x'];
        f.extend_from_slice(&[0x60, 0x0a, 0xbc, 0xde]);
        f.extend_from_slice(&((upper.len() + 8) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 64]);
        f.extend((0..32u8).map(|i| 0x20 + i));
        f.extend_from_slice(&[next, 0, 1, 1, 1, 1, 1, 1]);
        f.extend(upper);
        f
    }
    let mut out = vec![
        ipv4(17, false),
        ipv4(6, false),
        ipv4(1, false),
        ipv4(17, true),
        ipv6(17),
        ipv6(6),
        eth(0x0806, [0xff; 6]),
        vec![0; 14],
        (0..1400u32).map(|i| (i * 7 + i / 13) as u8).collect(),
    ];
    let base = ipv4(6, true);
    for cut in [15, 18, 22, 30, 34, 38, 42, 46, 54, 60] {
        out.push(base[..cut].to_vec());
    }
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..12 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut f = if x.is_multiple_of(2) {
            ipv4(17, x.is_multiple_of(3))
        } else {
            ipv6(17)
        };
        let at = (x >> 8) as usize % f.len();
        f[at] ^= (x >> 16) as u8;
        if x.is_multiple_of(5) {
            f.truncate(14 + (x >> 24) as usize % (f.len() - 13));
        }
        out.push(f);
    }
    out
}

#[test]
fn every_corpus_program_matches_the_interpreter() {
    every_corpus_program_matches(Pipeline::Optimizing);
}

#[test]
fn baseline_every_corpus_program_matches_the_interpreter() {
    every_corpus_program_matches(Pipeline::Baseline);
}

fn every_corpus_program_matches(pipeline: Pipeline) {
    let host = Arch::host().expect("supported host");
    let compiler = Compiler::new(host).unwrap();
    let names = rdx_testdata::objects_in("tests");
    assert!(names.len() >= 15, "corpus has only {} objects", names.len());
    let inputs = frames();
    let mut failures = Vec::new();
    let mut compared = 0;
    let mut skipped = 0;
    let mut low = LowMem::new(1 << 16);
    for name in &names {
        let object = rdx_bpf::loader::load(&rdx_testdata::object(name)).unwrap();
        for (pi, prog) in object.programs.iter().enumerate() {
            let socket = prog.section.starts_with("socket");
            assert!(
                socket || prog.section.starts_with("xdp"),
                "{name}: section {}",
                prog.section
            );
            let interp_maps = MapSet::new(&object.maps).unwrap();
            let vm = Vm::new(
                &prog.insns,
                &interp_maps,
                &Helpers::standard(),
                Config::default(),
            )
            .unwrap();

            let jit_maps = MapSet::new(&object.maps).unwrap();
            let mut syms: HashMap<Symbol, u64> = HashMap::new();
            for (i, m) in jit_maps.iter().enumerate() {
                syms.insert(Symbol::Map(i as u32), m.address());
                if let Some(v) = m.value_address(0) {
                    syms.insert(Symbol::MapValue(i as u32), v);
                }
            }
            for id in 0..64 {
                if let Some(f) = native_helper(id) {
                    syms.insert(Symbol::Helper(id as u32), f as *const () as u64);
                }
            }
            syms.insert(
                Symbol::Helper(SKB_LOAD_BYTES),
                skb_load_bytes as *const () as u64,
            );
            let mut opts = CompileOptions::new(host, Build::Generic);
            opts.needs_budget = true;
            opts.pipeline = pipeline;
            // The baseline tier inlines array lookups in every other program, so both of its
            // forms run.
            if pipeline == Pipeline::Baseline && (pi + name.len()) % 2 == 0 {
                opts.inline_array_lookups(&object.maps);
            }
            let (artifact, _) = match compiler.compile(&prog.insns, &opts) {
                Ok(a) => a,
                Err(e) => {
                    failures.push(format!("{name}/{}: compile: {e}", prog.name));
                    continue;
                }
            };
            let code = ExecutableCode::load_bytes(&artifact.to_bytes(), &syms).unwrap();

            for (n, frame) in inputs.iter().enumerate() {
                // Interpreter.
                let (r0, packet, skb_fields) = if socket {
                    let Some(mut skb) = SkBuff::socket_filter_test_run(frame) else {
                        continue;
                    };
                    skb.mark = n as u32;
                    skb.cb = [n as u32, 1, 2, 3, 0x8000_0001];
                    let r0 = vm.run_checked(Input::Context(&mut skb));
                    let words = skb_words(|o| skb.load(o, Size::W).unwrap() as u32);
                    (r0, skb.packet_data().to_vec(), Some(words))
                } else {
                    let mut xdp = XdpMd::new(frame.clone());
                    let r0 = vm.run_checked(Input::Context(&mut xdp));
                    (r0, xdp.packet_data().to_vec(), None)
                };
                let r0 = match r0 {
                    Ok(r) => r,
                    Err(e) => {
                        // The reference refused the run, so there is nothing to compare it
                        // with, and the two tiers' maps would diverge from here on.
                        eprintln!(
                            "SKIPPED {name}/{} from input {n}: the interpreter refused: {e}",
                            prog.name
                        );
                        skipped += 1;
                        break;
                    }
                };
                let want = Outcome {
                    r0,
                    packet,
                    skb_fields,
                    maps: dump(&interp_maps),
                };

                // JIT, with the context as real memory.
                let mut ctx = vec![0u8; SKB_SIZE];
                let put = |ctx: &mut Vec<u8>, off: usize, v: u32| {
                    ctx[off..off + 4].copy_from_slice(&v.to_le_bytes())
                };
                let pkt_len;
                if socket {
                    let mut skb = SkBuff::socket_filter_test_run(frame).unwrap();
                    skb.mark = n as u32;
                    skb.cb = [n as u32, 1, 2, 3, 0x8000_0001];
                    for off in (0..SKB_SIZE).step_by(4) {
                        if let Ok(v) = skb.load(off, Size::W) {
                            put(&mut ctx, off, v as u32);
                        }
                    }
                    let pkt = skb.packet_data().to_vec();
                    pkt_len = pkt.len();
                    low.bytes(pkt_len).copy_from_slice(&pkt);
                    let data = low.ptr as u64 as u32;
                    put(&mut ctx, SkBuff::OFF_DATA, data);
                    put(&mut ctx, SkBuff::OFF_DATA_META, data);
                    put(&mut ctx, SkBuff::OFF_DATA_END, data + pkt_len as u32);
                } else {
                    pkt_len = frame.len();
                    low.bytes(pkt_len).copy_from_slice(frame);
                    let data = low.ptr as u64 as u32;
                    put(&mut ctx, XdpMd::OFF_DATA, data);
                    put(&mut ctx, XdpMd::OFF_DATA_META, data);
                    put(&mut ctx, XdpMd::OFF_DATA_END, data + pkt_len as u32);
                    put(&mut ctx, XdpMd::OFF_INGRESS_IFINDEX, 1);
                }
                let mut run = RunState::new(1 << 30);
                // SAFETY: the program ran to completion in the checked interpreter on the same
                // input; its context and packet are laid out as the kernel exposes them.
                let r0 = unsafe { code.call(ctx.as_mut_ptr(), &mut run) };
                assert_eq!(run.status, 0, "{name}: status");
                let got = Outcome {
                    r0,
                    packet: low.bytes(pkt_len).to_vec(),
                    skb_fields: socket.then(|| {
                        skb_words(|o| u32::from_le_bytes(ctx[o..o + 4].try_into().unwrap()))
                    }),
                    maps: dump(&jit_maps),
                };
                compared += 1;
                if got != want {
                    failures.push(format!(
                        "{name}/{} input {n}: JIT {got:?}\ninterpreter {want:?}",
                        prog.name
                    ));
                }
            }
        }
    }
    eprintln!("{compared} runs of {} objects compared", names.len());
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(skipped <= 2, "the interpreter refused {skipped} programs");
    assert!(compared > 200, "only {compared} runs compared");
}
