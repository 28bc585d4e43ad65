//! The baseline tier (`Pipeline::Baseline`) against the interpreter and the Cranelift tier:
//! every conformance vector (on this host, and for aarch64 under qemu through the C harness of
//! `aarch64_qemu.rs`),
//! every corpus program (`bpf/tests`), random verified programs (the differential generator
//! of `differential.rs`), metering, local calls, `callx` and the typed refusals.
//!
//! The conformance, corpus and differential modules are the Cranelift tier's tests with the
//! pipeline switched, so that both tiers are held to the same checks.

mod conformance {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};

    use rdx_bpf::asm::TestVector;
    use rdx_bpf::helpers::Helpers;
    use rdx_bpf::interp::{Config, Input, Vm};
    use rdx_bpf::maps::MapSet;
    use rdx_jit::{Arch, CompileOptions, EntryAbi, ExecutableCode, HelperCalls, Pipeline, Symbol};
    use rdx_region::abi::RunState;

    /// Helper 5 of the conformance suite ("unwind"): returns its first argument.
    unsafe extern "C" fn unwind(a: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
        a
    }

    const TABLE_LEN: u32 = 16;

    pub(crate) fn conformance_dir() -> PathBuf {
        let dir = std::env::var_os("RDX_CONFORMANCE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance")
            });
        assert!(
            dir.join("tests").is_dir(),
            "conformance vectors not found at {}",
            dir.display()
        );
        dir
    }

    fn vectors() -> Vec<(String, TestVector)> {
        let mut files: Vec<_> = std::fs::read_dir(conformance_dir().join("tests"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "data"))
            .collect();
        files.sort();
        files
            .into_iter()
            .map(|p| {
                let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                let v = TestVector::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
                (name, v)
            })
            .collect()
    }

    fn interpret(v: &TestVector) -> Result<u64, String> {
        let insns = v.program()?;
        let vm = Vm::new(
            &insns,
            &MapSet::default(),
            &Helpers::conformance(),
            Config::default(),
        )
        .map_err(|e| e.to_string())?;
        let mut mem = v.mem.clone().unwrap_or_default();
        let input = if v.mem.is_some() {
            Input::Bytes(&mut mem)
        } else {
            Input::Empty
        };
        vm.run_checked(input).map_err(|e| e.to_string())
    }

    fn jit(
        arch: Arch,
        v: &TestVector,
        helper_calls: HelperCalls,
        table: &[u64],
    ) -> Result<u64, String> {
        let insns = v.program()?;
        let mut opts = CompileOptions::new(arch);
        opts.entry_abi = EntryAbi::WithLength;
        opts.helper_calls = helper_calls;
        opts.pipeline = Pipeline::Baseline;
        let artifact = rdx_jit::compile(&insns, &opts).map_err(|e| e.to_string())?;
        let mut syms = HashMap::new();
        syms.insert(Symbol::Helper(5), unwind as *const () as u64);
        syms.insert(
            Symbol::Var("rdx_helper_table".into()),
            table.as_ptr() as u64,
        );
        let code =
            ExecutableCode::load_bytes(&artifact.to_bytes(), &syms).map_err(|e| e.to_string())?;
        let mut mem = v.mem.clone().unwrap_or_default();
        let (ptr, len) = if v.mem.is_some() {
            (mem.as_mut_ptr(), mem.len() as u64)
        } else {
            (std::ptr::null_mut(), 0)
        };
        let mut run = RunState::new(0);
        // SAFETY: the vectors are conformance programs that touch only their memory and stack;
        // each has just run to completion in the checked interpreter.
        let r0 = unsafe { code.call_with_len(ptr, &mut run, len) };
        if run.status != 0 {
            return Err(format!("stopped with status {}", run.status));
        }
        Ok(r0)
    }

    #[test]
    fn baseline_every_vector_matches_the_interpreter_and_the_expected_result() {
        let host = Arch::host().expect("supported host");
        let mut table = vec![0u64; TABLE_LEN as usize];
        table[5] = unwind as *const () as u64;
        let all = vectors();
        assert!(
            all.len() >= 313,
            "expected at least 313 vectors, found {}",
            all.len()
        );
        let mut failures = Vec::new();
        for (name, v) in &all {
            let want = v.result.expect("positive vectors carry a result");
            match interpret(v) {
                Ok(r) if r == want => {}
                other => failures.push(format!(
                    "{name}: interpreter gave {other:?}, expected {want:#x}"
                )),
            }
            let uses_callx = v.program().unwrap().iter().any(|i| {
                matches!(
                    i,
                    rdx_bpf::isa::Insn::Call(rdx_bpf::isa::CallTarget::Reg(_))
                )
            });
            let mut modes = vec![HelperCalls::Table {
                table_len: TABLE_LEN,
            }];
            if !uses_callx {
                modes.push(HelperCalls::Direct);
            }
            for mode in modes {
                match jit(host, v, mode, &table) {
                    Ok(r) if r == want => {}
                    other => failures.push(format!(
                        "{name} ({mode:?}): baseline gave {other:?}, expected {want:#x}"
                    )),
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} failures:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
}

mod corpus {
    use std::collections::{BTreeMap, HashMap};

    use rdx_bpf::helpers::{native_helper, Helpers};
    use rdx_bpf::interp::{Config, ContextModel, Input, SkBuff, Vm, XdpMd};
    use rdx_bpf::isa::Size;
    use rdx_bpf::maps::MapSet;
    use rdx_jit::{Arch, CompileOptions, ExecutableCode, Pipeline, Symbol};
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
    fn baseline_every_corpus_program_matches_the_interpreter() {
        let host = Arch::host().expect("supported host");
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
                let mut opts = CompileOptions::new(host);
                opts.needs_budget = true;
                opts.pipeline = Pipeline::Baseline;
                // Array lookups inlined in every other program, so both forms run.
                if (pi + name.len()) % 2 == 0 {
                    opts.inline_array_lookups(&object.maps);
                }
                let artifact = match rdx_jit::compile(&prog.insns, &opts) {
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
}

mod differential {
    use std::collections::HashMap;

    use proptest::prelude::*;
    use rdx_bpf::helpers::Helpers;
    use rdx_bpf::interp::{Config, Input, Vm};
    use rdx_bpf::isa::{
        AluOp, AtomicOp, ByteOrder, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width,
    };
    use rdx_bpf::maps::MapSet;
    use rdx_jit::{Arch, CompileOptions, Compiler, EntryAbi, ExecutableCode, Pipeline};
    use rdx_region::abi::RunState;

    pub(super) const MEM: usize = 64;
    /// Stack slots used: fp-8 .. fp-64.
    const SLOTS: i16 = 8;

    pub(super) type Raw = (u8, u8, u8, i32, u16);

    /// A second pointer into the frame, `r10 - 32`, set once: stack accesses through it reach
    /// the frame the way compiled C does (a pointer derived from r10), which the JIT's stack
    /// promotion must follow.
    const FRAME_PTR: Reg = Reg(6);
    const FRAME_PTR_OFF: i16 = -32;

    fn reg_w(n: u8) -> Reg {
        // Writable registers: r0, r2..r5 and r7..r9 (r1 keeps the memory pointer, r6 the derived
        // frame pointer).
        Reg([0, 2, 3, 4, 5, 7, 8, 9][(n % 8) as usize])
    }

    /// Readable registers as data: the same set, since values derived from the memory and frame
    /// pointers depend on where each tier placed that memory.
    fn reg_r(n: u8) -> Reg {
        reg_w(n)
    }

    fn size(n: u8) -> Size {
        [Size::B, Size::H, Size::W, Size::DW][(n % 4) as usize]
    }

    pub(super) fn build(raw: &[Raw]) -> Vec<Insn> {
        let mut p = Vec::new();
        // Initialise every register but r1 and every stack slot.
        p.push(Insn::Alu {
            width: Width::W64,
            op: AluOp::Mov,
            dst: FRAME_PTR,
            src: Operand::Reg(Reg(10)),
        });
        p.push(Insn::Alu {
            width: Width::W64,
            op: AluOp::Add,
            dst: FRAME_PTR,
            src: Operand::Imm(FRAME_PTR_OFF as i32),
        });
        for r in [0u8, 2, 3, 4, 5, 7, 8, 9] {
            p.push(Insn::Alu {
                width: Width::W64,
                op: AluOp::Mov,
                dst: Reg(r),
                src: Operand::Imm((r as i32) * 0x0123_4567 - 3),
            });
        }
        for s in 1..=SLOTS {
            p.push(Insn::Store {
                size: Size::DW,
                base: Reg(10),
                off: -8 * s,
                src: Operand::Reg(reg_w(s as u8)),
            });
        }
        let body_len = raw.len();
        for (i, &(kind, a, b, imm, extra)) in raw.iter().enumerate() {
            let width = if extra & 1 == 0 {
                Width::W64
            } else {
                Width::W32
            };
            let src = if extra & 2 == 0 {
                Operand::Reg(reg_r(b))
            } else {
                Operand::Imm(imm)
            };
            let insn = match kind % 12 {
                0..=3 => {
                    let ops = [
                        AluOp::Add,
                        AluOp::Sub,
                        AluOp::Mul,
                        AluOp::Div,
                        AluOp::SDiv,
                        AluOp::Or,
                        AluOp::And,
                        AluOp::Lsh,
                        AluOp::Rsh,
                        AluOp::Neg,
                        AluOp::Mod,
                        AluOp::SMod,
                        AluOp::Xor,
                        AluOp::Mov,
                        AluOp::Arsh,
                    ];
                    let op = ops[(extra >> 2) as usize % ops.len()];
                    let src = if op == AluOp::Neg {
                        Operand::Imm(0)
                    } else {
                        src
                    };
                    // Small divisors (including 0 and -1) are the interesting ones.
                    let src = match (op, src) {
                        (AluOp::Div | AluOp::SDiv | AluOp::Mod | AluOp::SMod, Operand::Imm(k)) => {
                            Operand::Imm(k % 4 - 1)
                        }
                        (_, s) => s,
                    };
                    Insn::Alu {
                        width,
                        op,
                        dst: reg_w(a),
                        src,
                    }
                }
                4 => {
                    let bits = [8u8, 16, 32][(extra >> 2) as usize % 3];
                    let width = if bits == 32 { Width::W64 } else { width };
                    Insn::Alu {
                        width,
                        op: AluOp::MovSx(bits),
                        dst: reg_w(a),
                        src: Operand::Reg(reg_r(b)),
                    }
                }
                5 => {
                    let order = [ByteOrder::ToLe, ByteOrder::ToBe, ByteOrder::Swap]
                        [(extra >> 2) as usize % 3];
                    Insn::Endian {
                        order,
                        bits: [16, 32, 64][(imm as u32 % 3) as usize],
                        dst: reg_w(a),
                    }
                }
                6 | 7 => {
                    let conds = [
                        JmpCond::Eq,
                        JmpCond::Gt,
                        JmpCond::Ge,
                        JmpCond::Set,
                        JmpCond::Ne,
                        JmpCond::Sgt,
                        JmpCond::Sge,
                        JmpCond::Lt,
                        JmpCond::Le,
                        JmpCond::Slt,
                        JmpCond::Sle,
                    ];
                    let left = (body_len - i - 1) as i16;
                    let off = if left == 0 {
                        0
                    } else {
                        (extra >> 4) as i16 % (left + 1)
                    };
                    let src = match src {
                        Operand::Imm(k) => Operand::Imm(k % 8),
                        s => s,
                    };
                    Insn::Jmp {
                        width,
                        cond: conds[(extra >> 2) as usize % conds.len()],
                        dst: reg_r(a),
                        src,
                        off,
                    }
                }
                8 => {
                    let sz = size(b);
                    let (base, off) = mem_slot(extra, sz);
                    Insn::Load {
                        size: sz,
                        sign_extend: sz != Size::DW && imm & 1 == 1,
                        dst: reg_w(a),
                        base,
                        off,
                    }
                }
                9 => {
                    let sz = size(b);
                    let (base, off) = mem_slot(extra, sz);
                    let src = if imm & 1 == 0 {
                        Operand::Reg(reg_r(a))
                    } else {
                        Operand::Imm(imm)
                    };
                    Insn::Store {
                        size: sz,
                        base,
                        off,
                        src,
                    }
                }
                10 => {
                    let sz = if b & 1 == 0 { Size::W } else { Size::DW };
                    let (base, off) = mem_slot(extra, sz);
                    let ops = [
                        AtomicOp::Add,
                        AtomicOp::Or,
                        AtomicOp::And,
                        AtomicOp::Xor,
                        AtomicOp::Xchg,
                        AtomicOp::CmpXchg,
                    ];
                    let op = ops[(imm as u32 % 6) as usize];
                    let fetch = matches!(op, AtomicOp::Xchg | AtomicOp::CmpXchg) || imm & 8 != 0;
                    Insn::Atomic {
                        size: sz,
                        op,
                        fetch,
                        base,
                        off,
                        src: reg_w(a),
                    }
                }
                _ => {
                    p.push(Insn::LoadImm64 {
                        dst: reg_w(a),
                        kind: ImmKind::Imm,
                        imm_lo: imm,
                        imm_hi: (extra as i32).wrapping_mul(0x10001),
                    });
                    Insn::LoadImm64Hi
                }
            };
            p.push(insn);
        }
        // Fold the stack into r0 so that stack contents are compared too.
        for s in 1..=SLOTS {
            p.push(Insn::Load {
                size: Size::DW,
                sign_extend: false,
                dst: Reg(2),
                base: Reg(10),
                off: -8 * s,
            });
            p.push(Insn::Alu {
                width: Width::W64,
                op: AluOp::Mul,
                dst: Reg(0),
                src: Operand::Imm(31),
            });
            p.push(Insn::Alu {
                width: Width::W64,
                op: AluOp::Xor,
                dst: Reg(0),
                src: Operand::Reg(Reg(2)),
            });
        }
        p.push(Insn::Exit);
        fix_jumps(p)
    }

    /// An aligned, in-bounds slot in the memory buffer (via r1) or the stack (via r10, or via
    /// the derived frame pointer r6 = r10 - 32).
    fn mem_slot(extra: u16, sz: Size) -> (Reg, i16) {
        let n = sz.bytes() as i16;
        if extra & 0x100 == 0 {
            (Reg(1), ((extra >> 9) as i16 % (MEM as i16 / n)) * n)
        } else {
            let off = -(((extra >> 9) as i16 % (SLOTS * 8 / n)) + 1) * n;
            if extra & 0x8000 == 0 {
                (Reg(10), off)
            } else {
                (FRAME_PTR, off - FRAME_PTR_OFF)
            }
        }
    }

    /// A jump offset counted in generated instructions must not land on an lddw's second slot;
    /// move such targets one slot on.
    fn fix_jumps(mut p: Vec<Insn>) -> Vec<Insn> {
        for pc in 0..p.len() {
            if let Insn::Jmp { off, .. } = p[pc] {
                let t = pc as i64 + 1 + off as i64;
                if p.get(t as usize) == Some(&Insn::LoadImm64Hi) {
                    if let Insn::Jmp { off, .. } = &mut p[pc] {
                        *off += 1;
                    }
                }
            }
        }
        p
    }

    pub(super) fn interpret(insns: &[Insn], mem: &mut [u8]) -> u64 {
        let vm = Vm::new(
            insns,
            &MapSet::default(),
            &Helpers::empty(),
            Config::default(),
        )
        .expect("prepare");
        vm.run_checked(Input::Bytes(mem))
            .expect("generated programs run cleanly")
    }

    /// Runs `insns` through `pipeline`; returns r0 and the budget left.
    fn jit(
        compiler: &Compiler,
        pipeline: Pipeline,
        insns: &[Insn],
        mem: &mut [u8],
        needs_budget: bool,
    ) -> (u64, u64) {
        let mut opts = CompileOptions::new(compiler.arch());
        opts.entry_abi = EntryAbi::WithLength;
        opts.needs_budget = needs_budget;
        opts.pipeline = pipeline;
        let (artifact, _) = compiler.compile(insns, &opts).expect("compile");
        let code =
            ExecutableCode::load(&artifact, &HashMap::<rdx_jit::Symbol, u64>::new()).expect("load");
        let mut run = RunState::new(1 << 20);
        // SAFETY: generated programs only touch `mem` (via r1) and their stack, in bounds.
        let r0 = unsafe { code.call_with_len(mem.as_mut_ptr(), &mut run, mem.len() as u64) };
        assert_eq!(run.status, 0);
        (r0, run.budget)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// The baseline tier against the interpreter (r0, memory, stack), and against the
        /// optimizing tier for the budget left.
        #[test]
        fn baseline_matches_interpreter(raw in proptest::collection::vec(any::<Raw>(), 1..48), seed in any::<u64>(), budget in any::<bool>()) {
            let insns = build(&raw);
            let compiler = Compiler::new(Arch::host().unwrap()).unwrap();
            let init: Vec<u8> = (0..MEM as u64).map(|i| (seed.rotate_left(i as u32 * 7) ^ i) as u8).collect();
            let mut a = init.clone();
            let mut b = init.clone();
            let mut c = init;
            let want = interpret(&insns, &mut a);
            let (got, left) = jit(&compiler, Pipeline::Baseline, &insns, &mut b, budget);
            prop_assert_eq!(got, want, "r0 differs for {:?}", insns);
            prop_assert_eq!(b, a, "memory differs for {:?}", insns);
            let (_, optimizing_left) = jit(&compiler, Pipeline::Optimizing, &insns, &mut c, budget);
            prop_assert_eq!(left, optimizing_left, "budget left differs for {:?}", insns);
        }
    }
}

mod behaviour {
    use std::collections::HashMap;

    use rdx_bpf::asm::assemble;
    use rdx_jit::{
        Arch, CompileError, CompileOptions, ExecutableCode, HelperCalls, Pipeline, Speculation,
        Symbol,
    };
    use rdx_region::abi::{RunState, RunStatus};

    fn opts(pipeline: Pipeline) -> CompileOptions {
        let mut o = CompileOptions::new(Arch::host().unwrap());
        o.pipeline = pipeline;
        o
    }

    /// Runs `src` in `pipeline` with `budget`; returns r0, the status and the budget left.
    fn run(src: &str, o: &CompileOptions, budget: u64, table: &[u64]) -> (u64, u32, u64) {
        let prog = assemble(src).unwrap();
        let artifact = rdx_jit::compile(&prog, o).unwrap();
        let mut syms = HashMap::new();
        syms.insert(
            Symbol::Var("rdx_helper_table".into()),
            table.as_ptr() as u64,
        );
        syms.insert(Symbol::Helper(9), add5 as *const () as u64);
        let code = ExecutableCode::load(&artifact, &syms).unwrap();
        let mut run = RunState::new(budget);
        // SAFETY: the test programs touch only their own stack.
        let r0 = unsafe { code.call(std::ptr::null_mut(), &mut run) };
        (r0, run.status, run.budget)
    }

    unsafe extern "C" fn add5(a: u64, b: u64, c: u64, d: u64, e: u64) -> u64 {
        a * 10000 + b * 1000 + c * 100 + d * 10 + e
    }

    const LOOP: &str = "mov %r0, 0\nmov %r1, 1000\nadd %r0, 2\nsub %r1, 1\njne %r1, 0, -3\nexit";
    /// A loop in a subprogram, called twice, with callee-saved registers live across.
    const CALLS: &str = "mov %r6, 3\nmov %r1, 1\nmov %r2, 2\nmov %r3, 3\nmov %r4, 4\nmov %r5, 5\n\
        call 9\nmov %r7, %r0\nmov %r1, 40\ncall local sub\nadd %r7, %r0\nmov %r1, 2\n\
        call local sub\nadd %r0, %r7\nadd %r0, %r6\nexit\n\
        sub:\nmov %r6, 0\nstdw [%r10-8], 5\nldxdw %r0, [%r10-8]\nadd %r0, 1\nsub %r1, 1\n\
        jne %r1, 0, -3\nexit";

    #[test]
    fn metering_matches_the_optimizing_tier() {
        for src in [LOOP, CALLS] {
            for budget in [0, 1, 5, 6, 7, 100, 2999, 3000, 3006, 1 << 20] {
                let mut base = opts(Pipeline::Baseline);
                base.needs_budget = true;
                let mut opt = opts(Pipeline::Optimizing);
                opt.needs_budget = true;
                let b = run(src, &base, budget, &[]);
                let o = run(src, &opt, budget, &[]);
                // r0 is meaningless once the run stopped.
                assert_eq!(b.1, o.1, "status, budget {budget}: {src}");
                assert_eq!(b.2, o.2, "budget left, budget {budget}: {src}");
                if b.1 == RunStatus::Ok as u32 {
                    assert_eq!(b.0, o.0, "r0, budget {budget}: {src}");
                }
            }
        }
        let mut base = opts(Pipeline::Baseline);
        base.needs_budget = true;
        assert_eq!(
            run(LOOP, &base, 100, &[]).1,
            RunStatus::BudgetExhausted as u32
        );
        assert_eq!(run(LOOP, &base, 1 << 20, &[]), (2000, 0, (1 << 20) - 3003));
    }

    #[test]
    fn helpers_and_local_calls_in_both_helper_modes() {
        let mut table = vec![0u64; 16];
        table[9] = add5 as *const () as u64;
        // helper 12345, sub(40) = 45, sub(2) = 7, r6 = 3 (kept across both calls).
        let want = 12345 + 45 + 7 + 3;
        for mode in [HelperCalls::Direct, HelperCalls::Table { table_len: 16 }] {
            let mut o = opts(Pipeline::Baseline);
            o.helper_calls = mode;
            assert_eq!(run(CALLS, &o, 0, &table), (want, 0, 0), "{mode:?}");
        }
    }

    #[test]
    fn callx_outside_the_table_stops_the_run_from_a_subprogram() {
        let table = vec![0u64; 4];
        let src =
            "mov %r6, 11\ncall local sub\nadd %r0, %r6\nexit\nsub:\nmov %r1, 4\ncallx %r1\nexit";
        for pipeline in [Pipeline::Baseline, Pipeline::Optimizing] {
            let mut o = opts(pipeline);
            o.helper_calls = HelperCalls::Table { table_len: 4 };
            let (_, status, _) = run(src, &o, 0, &table);
            assert_eq!(status, RunStatus::BadHelper as u32, "{pipeline:?}");
        }
    }

    #[test]
    fn elite_and_scouting_builds_are_refused_with_a_typed_error() {
        let prog = assemble("mov %r0, 1\njeq %r0, 1, +1\nmov %r0, 2\nexit").unwrap();
        let mut o = opts(Pipeline::Baseline);
        o.speculation = Some(Speculation::default());
        assert!(matches!(
            rdx_jit::compile(&prog, &o),
            Err(CompileError::NotInBaseline { .. })
        ));
        let mut o = opts(Pipeline::Baseline);
        o.branch_counters = Some(rdx_jit::BranchCounters {
            symbol: Symbol::MapValue(0),
        });
        assert!(matches!(
            rdx_jit::compile(&prog, &o),
            Err(CompileError::NotInBaseline { .. })
        ));
    }

    #[test]
    fn bad_programs_are_refused_like_the_optimizing_tier() {
        for src in [
            "mov %r0, 1",                                 // falls off the end
            "mov %r0, 1\njeq %r0, 1, -3\nexit",           // jumps out of the function
            "call local f\nexit\nf:\ncall local f\nexit", // recursion
        ] {
            let prog = assemble(src).unwrap();
            let b = rdx_jit::compile(&prog, &opts(Pipeline::Baseline));
            let o = rdx_jit::compile(&prog, &opts(Pipeline::Optimizing));
            assert!(b.is_err() && o.is_err(), "{src}: {b:?} / {o:?}");
            assert_eq!(
                std::mem::discriminant(&b.unwrap_err()),
                std::mem::discriminant(&o.unwrap_err()),
                "{src}"
            );
        }
        assert!(matches!(
            rdx_jit::compile(&[], &opts(Pipeline::Baseline)),
            Err(CompileError::Empty)
        ));
    }

    #[test]
    fn artifacts_differ_from_cranelift_ones_only_in_code_and_options() {
        let prog = assemble(CALLS).unwrap();
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let mut b = CompileOptions::new(arch);
            b.pipeline = Pipeline::Baseline;
            let base = rdx_jit::compile(&prog, &b).unwrap();
            let opt = rdx_jit::compile(&prog, &CompileOptions::new(arch)).unwrap();
            assert_eq!(base.meta.arch, arch);
            assert_eq!(base.meta.flags, opt.meta.flags);
            assert_eq!(base.meta.stack_bytes, opt.meta.stack_bytes);
            assert_eq!(base.meta.functions, opt.meta.functions);
            assert_eq!(base.meta.source_hash, opt.meta.source_hash);
            assert_ne!(base.meta.options_hash, opt.meta.options_hash);
            assert_eq!(base.symbols, opt.symbols);
            let back = rdx_jit::Artifact::from_bytes(&base.to_bytes()).unwrap();
            assert_eq!(back, base);
        }
    }
}

mod aarch64_qemu {
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use rdx_bpf::asm::{assemble, TestVector};
    use rdx_bpf::isa::{CallTarget, Insn};
    use rdx_jit::link::{link_bytes, LinkTarget};
    use rdx_jit::{Arch, CompileOptions, EntryAbi, HelperCalls, Pipeline, Symbol};

    const CODE_BASE: u64 = 0x5000_0000;

    fn find_tool(names: &[&str]) -> Option<PathBuf> {
        let path = std::env::var_os("PATH")?;
        names
            .iter()
            .flat_map(|n| std::env::split_paths(&path).map(move |d| d.join(n)))
            .find(|p| p.is_file())
    }

    fn conformance_dir() -> PathBuf {
        std::env::var_os("RDX_CONFORMANCE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance")
            })
    }

    struct Job {
        name: String,
        code: Vec<u8>,
        entry: u32,
        mem: Option<Vec<u8>>,
        budget: u64,
        want_r0: u64,
        want_status: u32,
        /// The deoptimisation slot an elite job must report (status 3).
        want_pc: u32,
    }

    fn write_jobs(jobs: &[Job], path: &Path) {
        let mut b = b"RDXH".to_vec();
        b.extend_from_slice(&(jobs.len() as u32).to_le_bytes());
        for j in jobs {
            b.extend_from_slice(&(j.name.len() as u16).to_le_bytes());
            b.extend_from_slice(j.name.as_bytes());
            b.extend_from_slice(&CODE_BASE.to_le_bytes());
            b.extend_from_slice(&(j.code.len() as u32).to_le_bytes());
            b.extend_from_slice(&j.entry.to_le_bytes());
            b.extend_from_slice(&j.code);
            match &j.mem {
                Some(m) => {
                    b.extend_from_slice(&(m.len() as u32).to_le_bytes());
                    b.extend_from_slice(m);
                }
                None => b.extend_from_slice(&u32::MAX.to_le_bytes()),
            }
            b.extend_from_slice(&j.budget.to_le_bytes());
        }
        std::fs::write(path, b).unwrap();
    }

    #[test]
    fn baseline_conformance_vectors_pass_on_aarch64_under_qemu() {
        let Some(gcc) = find_tool(&["aarch64-linux-gnu-gcc"]) else {
            eprintln!("SKIPPED: aarch64-linux-gnu-gcc not found (apt install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)");
            return;
        };
        let Some(qemu) = find_tool(&["qemu-aarch64", "qemu-aarch64-static"]) else {
            eprintln!("SKIPPED: qemu-aarch64 not found (apt install qemu-user-static)");
            return;
        };
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let harness = dir.join("rdx_harness_aarch64_baseline");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("harness/rdx_harness.c");
        let st = Command::new(&gcc)
            .args(["-O2", "-static", "-Wall", "-Werror", "-o"])
            .arg(&harness)
            .arg(&src)
            .status()
            .expect("run the cross compiler");
        assert!(st.success(), "building the harness failed");

        let out = Command::new(&qemu)
            .arg(&harness)
            .arg("symbols")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "harness symbols: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut syms: HashMap<Symbol, u64> = HashMap::new();
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let (name, addr) = line.split_once(' ').unwrap();
            let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16).unwrap();
            syms.insert(name.parse().unwrap(), addr);
        }

        let mut jobs = Vec::new();
        let mut add = |name: String,
                       insns: &[Insn],
                       opts: &CompileOptions,
                       mem: Option<Vec<u8>>,
                       budget: u64,
                       want_r0: u64,
                       want_status: u32| {
            let mut opts = opts.clone();
            opts.pipeline = Pipeline::Baseline;
            let artifact = rdx_jit::compile(insns, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            // Through the serialised form, as the control plane ships it.
            let linked = link_bytes(
                &artifact.to_bytes(),
                LinkTarget::new(Arch::Aarch64),
                &syms,
                CODE_BASE,
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            jobs.push(Job {
                name,
                code: linked.code,
                entry: linked.entry_offset,
                mem,
                budget,
                want_r0,
                want_status,
                want_pc: 0,
            });
        };

        let mut files: Vec<_> = std::fs::read_dir(conformance_dir().join("tests"))
            .expect("conformance vectors")
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "data"))
            .collect();
        files.sort();
        assert!(files.len() >= 313);
        for p in &files {
            let text = String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
            let v = TestVector::parse(&text).unwrap();
            let insns = v.program().unwrap();
            let mut opts = CompileOptions::new(Arch::Aarch64);
            opts.entry_abi = EntryAbi::WithLength;
            let callx = insns
                .iter()
                .any(|i| matches!(i, Insn::Call(CallTarget::Reg(_))));
            if callx {
                opts.helper_calls = HelperCalls::Table { table_len: 16 };
            }
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            add(name, &insns, &opts, v.mem.clone(), 0, v.result.unwrap(), 0);
        }

        // Random programs of the differential generator, with the interpreter's r0 (which folds
        // in the stack) as the expected result: every ALU, jump, memory and atomic form with
        // random operands, immediates and offsets, metered and not.
        {
            use super::differential::{build, interpret, Raw, MEM};
            use proptest::prelude::any;
            use proptest::strategy::{Strategy, ValueTree};
            let mut runner = proptest::test_runner::TestRunner::deterministic();
            let strategy = (proptest::collection::vec(any::<Raw>(), 1..48), any::<u64>());
            for n in 0..400 {
                let (raw, seed) = strategy.new_tree(&mut runner).unwrap().current();
                let insns = build(&raw);
                let init: Vec<u8> = (0..MEM as u64)
                    .map(|i| (seed.rotate_left(i as u32 * 7) ^ i) as u8)
                    .collect();
                let want = interpret(&insns, &mut init.clone());
                let mut opts = CompileOptions::new(Arch::Aarch64);
                opts.entry_abi = EntryAbi::WithLength;
                opts.needs_budget = n % 2 == 0;
                add(
                    format!("random-{n}"),
                    &insns,
                    &opts,
                    Some(init),
                    1 << 20,
                    want,
                    0,
                );
            }
        }

        // Metering, helper arguments and local calls on aarch64.
        let lp =
            assemble("mov %r0, 0\nmov %r1, 1000\nadd %r0, 2\nsub %r1, 1\njne %r1, 0, -3\nexit")
                .unwrap();
        let mut metered = CompileOptions::new(Arch::Aarch64);
        metered.needs_budget = true;
        add("budget-exhausted".into(), &lp, &metered, None, 100, 0, 1);
        add(
            "budget-enough".into(),
            &lp,
            &metered,
            None,
            1 << 20,
            2000,
            0,
        );
        let calls = assemble(
            "mov %r1, 1\nmov %r2, 2\nmov %r3, 3\nmov %r4, 4\nmov %r5, 5\ncall 9\nmov %r6, %r0\nmov %r1, 7\ncall local sub\nadd %r0, %r6\nexit\nsub:\nmov %r0, %r1\nmul %r0, 100000\nexit",
        )
        .unwrap();
        {
            for (mode, name) in [
                (HelperCalls::Direct, "helpers-direct"),
                (HelperCalls::Table { table_len: 16 }, "helpers-table"),
            ] {
                let mut o = metered.clone();
                o.helper_calls = mode;
                add(name.into(), &calls, &o, None, 1 << 20, 712345, 0);
            }
        }

        // Inlined array lookups (the harness's map 0: 8 values, value i = 3 * i + 1): a hit, a miss
        // (NULL, then 99), and a masked key whose range check and NULL test the compiler drops.
        let mut inline_opts = CompileOptions::new(Arch::Aarch64);
        inline_opts.entry_abi = EntryAbi::WithLength;
        inline_opts.pipeline = Pipeline::Baseline;
        inline_opts.inline_arrays.insert(
            0,
            rdx_jit::InlineArray {
                max_entries: 8,
                value_size: 8,
            },
        );
        for (name, mask, key, want) in [
            ("inline-array-hit", None, 3u32, 10u64),
            ("inline-array-miss", None, 8, 99),
            ("inline-array-masked", Some(7), 13, 16),
        ] {
            let artifact = rdx_jit::compile(&array_lookup_program(mask), &inline_opts).unwrap();
            assert!(!artifact.symbols.contains(&Symbol::Helper(1)), "{name}");
            let linked = link_bytes(
                &artifact.to_bytes(),
                LinkTarget::new(Arch::Aarch64),
                &syms,
                CODE_BASE,
            )
            .unwrap();
            jobs.push(Job {
                name: name.into(),
                code: linked.code,
                entry: linked.entry_offset,
                mem: Some(key.to_le_bytes().to_vec()),
                budget: 0,
                want_r0: want,
                want_status: 0,
                want_pc: 0,
            });
        }

        let job_file = dir.join("aarch64_baseline_jobs.bin");
        write_jobs(&jobs, &job_file);
        let out = Command::new(&qemu)
            .arg(&harness)
            .arg("run")
            .arg(&job_file)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "harness failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let results: HashMap<&str, (u64, u32, u32)> = stdout
            .lines()
            .map(|l| {
                let mut it = l.split(' ');
                let name = it.next().unwrap();
                let r0 =
                    u64::from_str_radix(it.next().unwrap().trim_start_matches("0x"), 16).unwrap();
                let status = it.next().unwrap().parse().unwrap();
                let pc = it.next().unwrap().parse().unwrap();
                (name, (r0, status, pc))
            })
            .collect();
        let mut failures = Vec::new();
        for j in &jobs {
            match results.get(j.name.as_str()) {
                Some(&(r0, status, pc))
                    if status == j.want_status
                        && (status != 0 || r0 == j.want_r0)
                        && (status != 3 || pc == j.want_pc) => {}
                other => failures.push(format!(
                    "{}: got {other:?}, want r0 {:#x} status {} pc {}",
                    j.name, j.want_r0, j.want_status, j.want_pc
                )),
            }
        }
        eprintln!(
            "{} baseline-tier jobs ran on aarch64 under qemu",
            jobs.len()
        );
        assert!(
            failures.is_empty(),
            "{} failures:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }

    /// `key = *(u32 *)r1 [& mask]`, passed through the stack; `v = bpf_map_lookup_elem(map 0,
    /// &key)`; `return v ? *v : 99`.
    fn array_lookup_program(mask: Option<i32>) -> Vec<Insn> {
        use rdx_bpf::isa::{AluOp, ImmKind, JmpCond, Operand, Reg, Size, Width};
        let alu = |op, dst, src| Insn::Alu {
            width: Width::W64,
            op,
            dst: Reg(dst),
            src,
        };
        let mut p = vec![Insn::Load {
            size: Size::W,
            sign_extend: false,
            dst: Reg(3),
            base: Reg(1),
            off: 0,
        }];
        if let Some(m) = mask {
            p.push(alu(AluOp::And, 3, Operand::Imm(m)));
        }
        p.extend([
            Insn::Store {
                size: Size::W,
                base: Reg(10),
                off: -4,
                src: Operand::Reg(Reg(3)),
            },
            alu(AluOp::Mov, 2, Operand::Reg(Reg(10))),
            alu(AluOp::Add, 2, Operand::Imm(-4)),
            Insn::LoadImm64 {
                dst: Reg(1),
                kind: ImmKind::MapIdx,
                imm_lo: 0,
                imm_hi: 0,
            },
            Insn::LoadImm64Hi,
            Insn::Call(CallTarget::Helper(1)),
            Insn::Jmp {
                width: Width::W64,
                cond: JmpCond::Ne,
                dst: Reg(0),
                src: Operand::Imm(0),
                off: 2,
            },
            alu(AluOp::Mov, 0, Operand::Imm(99)),
            Insn::Exit,
            Insn::Load {
                size: Size::DW,
                sign_extend: false,
                dst: Reg(0),
                base: Reg(0),
                off: 0,
            },
            Insn::Exit,
        ]);
        p
    }
}

mod hostile {
    use proptest::prelude::*;
    use rdx_bpf::isa::{
        AluOp, AtomicOp, ByteOrder, CallTarget, ImmKind, Insn, JmpCond, Operand, Reg, Size, Width,
    };
    use rdx_jit::{Arch, Artifact, CompileOptions, EntryAbi, HelperCalls, Pipeline};

    /// Any instruction with any register, immediate and offset (jumps and local calls kept
    /// inside the program by [`fix`], so that most programs reach code generation).
    fn insn() -> impl Strategy<Value = Insn> {
        let reg = (0u8..11).prop_map(Reg);
        let width = prop_oneof![Just(Width::W32), Just(Width::W64)];
        let operand = prop_oneof![
            reg.clone().prop_map(Operand::Reg),
            any::<i32>().prop_map(Operand::Imm)
        ];
        let size = prop_oneof![Just(Size::B), Just(Size::H), Just(Size::W), Just(Size::DW)];
        let alu_op = prop_oneof![
            Just(AluOp::Add),
            Just(AluOp::Sub),
            Just(AluOp::Mul),
            Just(AluOp::Div),
            Just(AluOp::SDiv),
            Just(AluOp::Or),
            Just(AluOp::And),
            Just(AluOp::Lsh),
            Just(AluOp::Rsh),
            Just(AluOp::Neg),
            Just(AluOp::Mod),
            Just(AluOp::SMod),
            Just(AluOp::Xor),
            Just(AluOp::Mov),
            Just(AluOp::MovSx(8)),
            Just(AluOp::MovSx(16)),
            Just(AluOp::MovSx(32)),
            Just(AluOp::Arsh),
        ];
        let cond = prop_oneof![
            Just(JmpCond::Eq),
            Just(JmpCond::Gt),
            Just(JmpCond::Ge),
            Just(JmpCond::Set),
            Just(JmpCond::Ne),
            Just(JmpCond::Sgt),
            Just(JmpCond::Sge),
            Just(JmpCond::Lt),
            Just(JmpCond::Le),
            Just(JmpCond::Slt),
            Just(JmpCond::Sle),
        ];
        let atomic = prop_oneof![
            Just(AtomicOp::Add),
            Just(AtomicOp::Or),
            Just(AtomicOp::And),
            Just(AtomicOp::Xor),
            Just(AtomicOp::Xchg),
            Just(AtomicOp::CmpXchg),
        ];
        prop_oneof![
            (width.clone(), alu_op, reg.clone(), operand.clone()).prop_map(
                |(width, op, dst, src)| Insn::Alu {
                    width,
                    op,
                    dst,
                    src
                }
            ),
            (
                0u8..3,
                prop_oneof![Just(16u8), Just(32), Just(64)],
                reg.clone()
            )
                .prop_map(|(o, bits, dst)| Insn::Endian {
                    order: [ByteOrder::ToLe, ByteOrder::ToBe, ByteOrder::Swap][o as usize],
                    bits,
                    dst
                }),
            any::<i32>().prop_map(|off| Insn::Ja { off }),
            (width, cond, reg.clone(), operand.clone(), any::<i16>()).prop_map(
                |(width, cond, dst, src, off)| Insn::Jmp {
                    width,
                    cond,
                    dst,
                    src,
                    off
                }
            ),
            (
                size.clone(),
                any::<bool>(),
                reg.clone(),
                reg.clone(),
                any::<i16>()
            )
                .prop_map(|(size, sign_extend, dst, base, off)| Insn::Load {
                    size,
                    sign_extend,
                    dst,
                    base,
                    off
                }),
            (size, reg.clone(), any::<i16>(), operand).prop_map(|(size, base, off, src)| {
                Insn::Store {
                    size,
                    base,
                    off,
                    src,
                }
            }),
            (
                any::<bool>(),
                atomic,
                any::<bool>(),
                reg.clone(),
                any::<i16>(),
                reg.clone()
            )
                .prop_map(|(dw, op, fetch, base, off, src)| Insn::Atomic {
                    size: if dw { Size::DW } else { Size::W },
                    op,
                    fetch,
                    base,
                    off,
                    src
                }),
            (reg.clone(), 0u8..3, any::<i32>(), any::<i32>()).prop_map(
                |(dst, k, imm_lo, imm_hi)| {
                    Insn::LoadImm64 {
                        dst,
                        kind: [ImmKind::Imm, ImmKind::MapIdx, ImmKind::MapIdxValue][k as usize],
                        imm_lo,
                        imm_hi,
                    }
                }
            ),
            (any::<i32>(), 0u8..3, reg).prop_map(|(id, k, r)| Insn::Call(match k {
                0 => CallTarget::Helper(id),
                1 => CallTarget::Local(id),
                _ => CallTarget::Reg(r),
            })),
            Just(Insn::Exit),
        ]
    }

    /// Keeps jumps and local calls inside the program, gives every `lddw` its second slot and
    /// ends the program with `exit`.
    fn fix(raw: Vec<Insn>) -> Vec<Insn> {
        let mut p = Vec::new();
        for i in raw {
            p.push(i);
            if matches!(i, Insn::LoadImm64 { .. }) {
                p.push(Insn::LoadImm64Hi);
            }
        }
        p.push(Insn::Exit);
        let n = p.len() as i64;
        for (pc, insn) in p.iter_mut().enumerate() {
            let left = n - pc as i64 - 1;
            let wrap = |off: i64| if left == 0 { 0 } else { off.rem_euclid(left) };
            match insn {
                Insn::Ja { off } => *off = wrap(*off as i64) as i32,
                Insn::Jmp { off, .. } => *off = wrap(*off as i64) as i16,
                Insn::Call(CallTarget::Local(off)) => *off = wrap(*off as i64) as i32,
                _ => {}
            }
        }
        p
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Unverified programs with arbitrary operands: compiled or refused with a typed
        /// error for both architectures, never a panic (the aarch64 assembler panics on an
        /// unencodable immediate); what compiles has its relocations inside the code and
        /// reads back.
        #[test]
        fn any_instructions_compile_or_are_refused(raw in proptest::collection::vec(insn(), 1..40), budget in any::<bool>(), table in any::<bool>()) {
            let insns = fix(raw);
            for arch in [Arch::X86_64, Arch::Aarch64] {
                let mut o = CompileOptions::new(arch);
                o.pipeline = Pipeline::Baseline;
                o.needs_budget = budget;
                o.entry_abi = EntryAbi::WithLength;
                if table {
                    // Every id fits: table offsets beyond 2 GiB too.
                    o.helper_calls = HelperCalls::Table { table_len: u32::MAX };
                }
                if let Ok(a) = rdx_jit::compile(&insns, &o) {
                    for r in &a.relocations {
                        prop_assert!(r.offset as usize + 8 <= a.code.len());
                    }
                    prop_assert_eq!(Artifact::from_bytes(&a.to_bytes()).unwrap(), a);
                }
            }
        }
    }
}
