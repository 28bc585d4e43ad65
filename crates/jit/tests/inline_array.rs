//! Inlined `bpf_map_lookup_elem` on array maps: the inline code returns exactly what the
//! lookup helper returns (the value's address, or NULL out of range), and only calls through
//! a known array map in `r1` are inlined.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use rdx_bpf::isa::{AluOp, CallTarget, ImmKind, Insn, Operand, Reg, Width};
use rdx_jit::{
    Arch, Build, CompileOptions, Compiler, EntryAbi, ExecutableCode, InlineArray, Symbol,
};
use rdx_region::abi::RunState;

const MAX_ENTRIES: u32 = 5;
/// Rounded up to a 16-byte stride, as rdx lays out array values.
const VALUE_SIZE: u32 = 12;
const STRIDE: u64 = 16;

static VALUES_BASE: AtomicU64 = AtomicU64::new(0);
static HELPER_CALLS: AtomicU64 = AtomicU64::new(0);
/// Held by every test that sets [`VALUES_BASE`] or counts [`HELPER_CALLS`]: tests run on
/// parallel threads and the helper's state is global.
static HELPER_STATE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The lookup helper's contract for the test's one array.
unsafe extern "C" fn lookup_helper(_map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    HELPER_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the programs pass a pointer to 4 readable bytes.
    let k = unsafe { (key as *const u32).read_unaligned() };
    if k < MAX_ENTRIES {
        VALUES_BASE.load(Ordering::Relaxed) + k as u64 * STRIDE
    } else {
        0
    }
}

fn mov64_reg(dst: u8, src: u8) -> Insn {
    Insn::Alu {
        width: Width::W64,
        op: AluOp::Mov,
        dst: Reg(dst),
        src: Operand::Reg(Reg(src)),
    }
}

fn lddw_map(dst: u8, index: i32) -> [Insn; 2] {
    [
        Insn::LoadImm64 {
            dst: Reg(dst),
            kind: ImmKind::MapIdx,
            imm_lo: index,
            imm_hi: 0,
        },
        Insn::LoadImm64Hi,
    ]
}

/// `return bpf_map_lookup_elem(map, ctx)`: the key is the first 4 bytes of the context.
fn lookup_program(map_then_clobber: bool) -> Vec<Insn> {
    let mut p = vec![mov64_reg(2, 1)];
    p.extend(lddw_map(1, 0));
    if map_then_clobber {
        // r1 no longer holds the map reference the compiler saw: the helper must be called.
        p.extend(lddw_map(3, 0));
        p.push(mov64_reg(1, 3));
    }
    p.push(Insn::Call(CallTarget::Helper(1)));
    p.push(Insn::Exit);
    p
}

fn options(inline: bool) -> CompileOptions {
    let mut opts = CompileOptions::new(Arch::host().expect("supported host"), Build::Generic);
    opts.entry_abi = EntryAbi::WithLength;
    if inline {
        opts.inline_arrays.insert(
            0,
            InlineArray {
                max_entries: MAX_ENTRIES,
                value_size: VALUE_SIZE,
            },
        );
    }
    opts
}

fn run(code: &ExecutableCode, key: u32) -> u64 {
    let mut ctx = [0u8; 8];
    ctx[..4].copy_from_slice(&key.to_le_bytes());
    let mut run = RunState::new(0);
    // SAFETY: the program reads 4 bytes of `ctx` and calls only `lookup_helper`.
    unsafe { code.call_with_len(ctx.as_mut_ptr(), &mut run, ctx.len() as u64) }
}

#[test]
fn inline_lookup_returns_what_the_helper_returns() {
    let _serial = HELPER_STATE.lock().unwrap_or_else(|e| e.into_inner());
    let values = vec![0u8; (MAX_ENTRIES as u64 * STRIDE) as usize];
    VALUES_BASE.store(values.as_ptr() as u64, Ordering::Relaxed);
    let map_object = [0u64; 4];
    let mut syms = HashMap::new();
    syms.insert(Symbol::Helper(1), lookup_helper as *const () as u64);
    syms.insert(Symbol::Map(0), map_object.as_ptr() as u64);
    syms.insert(Symbol::MapValue(0), values.as_ptr() as u64);

    let compiler = Compiler::new(options(false).arch).unwrap();
    let prog = lookup_program(false);
    let (inline_artifact, _) = compiler.compile(&prog, &options(true)).unwrap();
    let (call_artifact, _) = compiler.compile(&prog, &options(false)).unwrap();
    assert!(!inline_artifact.symbols.contains(&Symbol::Helper(1)));
    assert!(inline_artifact.symbols.contains(&Symbol::MapValue(0)));
    assert!(call_artifact.symbols.contains(&Symbol::Helper(1)));
    assert_ne!(
        inline_artifact.meta.options_hash,
        call_artifact.meta.options_hash
    );

    let inline = ExecutableCode::load_bytes(&inline_artifact.to_bytes(), &syms).unwrap();
    let call = ExecutableCode::load_bytes(&call_artifact.to_bytes(), &syms).unwrap();
    for key in [0, 1, 4, 5, 6, 0x7fff_ffff, 0x8000_0000, u32::MAX] {
        let expected = run(&call, key);
        let before = HELPER_CALLS.load(Ordering::Relaxed);
        assert_eq!(run(&inline, key), expected, "key {key}");
        assert_eq!(
            HELPER_CALLS.load(Ordering::Relaxed),
            before,
            "inlined, key {key}"
        );
        let want = if key < MAX_ENTRIES {
            values.as_ptr() as u64 + key as u64 * STRIDE
        } else {
            0
        };
        assert_eq!(expected, want, "key {key}");
    }
}

#[test]
fn unknown_map_argument_keeps_the_helper_call() {
    let compiler = Compiler::new(options(true).arch).unwrap();
    let (artifact, _) = compiler
        .compile(&lookup_program(true), &options(true))
        .unwrap();
    assert!(artifact.symbols.contains(&Symbol::Helper(1)));
    // A map that is not listed as an inlinable array keeps the call too.
    let mut opts = options(false);
    opts.inline_arrays.insert(
        1,
        InlineArray {
            max_entries: 1,
            value_size: 8,
        },
    );
    let (artifact, _) = compiler.compile(&lookup_program(false), &opts).unwrap();
    assert!(artifact.symbols.contains(&Symbol::Helper(1)));
}

#[test]
fn only_plain_arrays_are_inlined_from_an_object() {
    let object = rdx_bpf::loader::load(&rdx_testdata::object("jit/bench")).unwrap();
    let mut opts = options(false);
    opts.inline_array_lookups(&object.maps);
    for (i, m) in object.maps.iter().enumerate() {
        let listed = opts.inline_arrays.get(&(i as u32));
        if m.map_type == rdx_bpf::program::MapType::Array {
            assert_eq!(
                listed,
                Some(&InlineArray {
                    max_entries: m.max_entries,
                    value_size: m.value_size
                })
            );
        } else {
            assert_eq!(listed, None, "map {} ({:?})", m.name, m.map_type);
        }
    }
    assert!(!opts.inline_arrays.is_empty());
}

#[test]
fn clang_array_lookups_are_inlined() {
    // `plus_one` looks up the array `hits` (inlined) and the hash `seen` (a helper call).
    let object = rdx_bpf::loader::load(&rdx_testdata::object("control/plus_one")).unwrap();
    let prog = object.program("plus_one").unwrap();
    let hits = object.maps.iter().position(|m| m.name == "hits").unwrap() as u32;
    let mut opts = options(false);
    opts.entry_abi = EntryAbi::Standard;
    opts.inline_array_lookups(&object.maps);
    assert!(opts.inline_arrays.contains_key(&hits));
    let compiler = Compiler::new(opts.arch).unwrap();
    let (artifact, _) = compiler.compile(&prog.insns, &opts).unwrap();
    assert!(artifact.symbols.contains(&Symbol::MapValue(hits)));
    assert!(artifact.symbols.contains(&Symbol::Helper(1)));
}

/// `key = ctx[0] & mask` through a stack slot, as clang writes it; `v = lookup(&key)`;
/// `return v ? v : 7`.
fn masked_key_program(mask: i32) -> Vec<Insn> {
    let mut p = vec![
        Insn::Load {
            size: rdx_bpf::isa::Size::W,
            sign_extend: false,
            dst: Reg(3),
            base: Reg(1),
            off: 0,
        },
        Insn::Alu {
            width: Width::W64,
            op: AluOp::And,
            dst: Reg(3),
            src: Operand::Imm(mask),
        },
        Insn::Store {
            size: rdx_bpf::isa::Size::W,
            base: Reg(10),
            off: -4,
            src: Operand::Reg(Reg(3)),
        },
        mov64_reg(2, 10),
        Insn::Alu {
            width: Width::W64,
            op: AluOp::Add,
            dst: Reg(2),
            src: Operand::Imm(-4),
        },
    ];
    p.extend(lddw_map(1, 0));
    p.push(Insn::Call(CallTarget::Helper(1)));
    p.push(Insn::Jmp {
        width: Width::W64,
        cond: rdx_bpf::isa::JmpCond::Ne,
        dst: Reg(0),
        src: Operand::Imm(0),
        off: 1,
    });
    p.push(Insn::Alu {
        width: Width::W64,
        op: AluOp::Mov,
        dst: Reg(0),
        src: Operand::Imm(7),
    });
    p.push(Insn::Exit);
    p
}

#[test]
fn masked_keys_in_a_promoted_stack_slot() {
    let _serial = HELPER_STATE.lock().unwrap_or_else(|e| e.into_inner());
    let values = vec![0u8; (MAX_ENTRIES as u64 * STRIDE) as usize];
    VALUES_BASE.store(values.as_ptr() as u64, Ordering::Relaxed);
    let map_object = [0u64; 4];
    let mut syms = HashMap::new();
    syms.insert(Symbol::Helper(1), lookup_helper as *const () as u64);
    syms.insert(Symbol::Map(0), map_object.as_ptr() as u64);
    syms.insert(Symbol::MapValue(0), values.as_ptr() as u64);
    let compiler = Compiler::new(options(false).arch).unwrap();
    // Mask 3: every key is in range, so the compiler drops the range check and the NULL
    // test. Mask 7: keys 5..7 are out of range and must still give NULL (then 7).
    for mask in [3, 7] {
        let prog = masked_key_program(mask);
        let (inline_artifact, _) = compiler.compile(&prog, &options(true)).unwrap();
        let (call_artifact, _) = compiler.compile(&prog, &options(false)).unwrap();
        assert!(!inline_artifact.symbols.contains(&Symbol::Helper(1)));
        let inline = ExecutableCode::load(&inline_artifact, &syms).unwrap();
        let call = ExecutableCode::load(&call_artifact, &syms).unwrap();
        for key in 0..20u32 {
            let expected = run(&call, key);
            assert_eq!(run(&inline, key), expected, "mask {mask} key {key}");
            let k = key & mask as u32;
            let want = if k < MAX_ENTRIES {
                values.as_ptr() as u64 + k as u64 * STRIDE
            } else {
                7
            };
            assert_eq!(expected, want, "mask {mask} key {key}");
        }
    }
}
