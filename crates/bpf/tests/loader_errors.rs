//! Bad input: every malformed object yields a typed [`LoadError`] naming what is wrong, and no
//! input — truncated, patched or randomly mutated — makes the loader panic.

use object::write::{Object as ElfWriter, Relocation, Symbol, SymbolSection};
use object::{
    Architecture, BinaryFormat, Endianness, Object as _, ObjectSection as _, RelocationFlags,
    SectionKind, SymbolFlags, SymbolKind, SymbolScope,
};
use proptest::prelude::*;
use rdx_bpf::isa::{self, op, DecodeErrorKind, RawInsn};
use rdx_bpf::loader::{self, BtfError, LoadError};

const EXIT: RawInsn = RawInsn::new(op::CLASS_JMP | op::JMP_EXIT, 0, 0, 0, 0);
const MOV_R0_0: RawInsn = RawInsn::new(op::CLASS_ALU64 | op::ALU_MOV, 0, 0, 0, 0);
const LDDW: u8 = op::CLASS_LD | op::MODE_IMM | op::SIZE_DW;

fn lddw(src: u8, imm: i32) -> [RawInsn; 2] {
    [
        RawInsn::new(LDDW, 1, src, 0, imm),
        RawInsn::new(0, 0, 0, 0, 0),
    ]
}

fn load_err(bytes: &[u8]) -> LoadError {
    match loader::load(bytes) {
        Ok(obj) => panic!("loaded a bad object: {obj:?}"),
        Err(e) => e,
    }
}

/// Builds small eBPF objects by hand for the cases clang never produces.
struct Builder {
    obj: ElfWriter<'static>,
}

impl Builder {
    fn new() -> Self {
        Builder {
            obj: ElfWriter::new(BinaryFormat::Elf, Architecture::Bpf, Endianness::Little),
        }
    }

    fn section(&mut self, name: &str, kind: SectionKind, data: &[u8]) -> object::write::SectionId {
        let id = self
            .obj
            .add_section(Vec::new(), name.as_bytes().to_vec(), kind);
        self.obj.set_section_data(id, data.to_vec(), 8);
        id
    }

    fn symbol(
        &mut self,
        name: &str,
        section: Option<object::write::SectionId>,
        value: u64,
        size: u64,
        kind: SymbolKind,
    ) -> object::write::SymbolId {
        self.obj.add_symbol(Symbol {
            name: name.as_bytes().to_vec(),
            value,
            size,
            kind,
            scope: if section.is_some() {
                SymbolScope::Linkage
            } else {
                SymbolScope::Unknown
            },
            weak: false,
            section: section.map_or(SymbolSection::Undefined, SymbolSection::Section),
            flags: SymbolFlags::None,
        })
    }

    /// A program section holding `code` with one function symbol covering it.
    fn program(&mut self, section: &str, name: &str, code: &[RawInsn]) -> object::write::SectionId {
        let bytes = isa::raw_to_bytes(code);
        let id = self.section(section, SectionKind::Text, &bytes);
        self.symbol(name, Some(id), 0, bytes.len() as u64, SymbolKind::Text);
        id
    }

    fn relocate(
        &mut self,
        section: object::write::SectionId,
        offset: u64,
        symbol: object::write::SymbolId,
        r_type: u32,
    ) {
        self.obj
            .add_relocation(
                section,
                Relocation {
                    offset,
                    symbol,
                    addend: 0,
                    flags: RelocationFlags::Elf {
                        r_type: object::elf::RelocationType(r_type),
                    },
                },
            )
            .unwrap();
    }

    fn bytes(&self) -> Vec<u8> {
        self.obj.write().unwrap()
    }
}

fn section_range(bytes: &[u8], name: &str) -> std::ops::Range<usize> {
    let file = object::File::parse(bytes).unwrap();
    let section = file.section_by_name(name).unwrap();
    let (offset, size) = section.file_range().unwrap();
    offset as usize..(offset + size) as usize
}

fn slot_range(bytes: &[u8], section: &str, slot: usize) -> std::ops::Range<usize> {
    let start = section_range(bytes, section).start + slot * 8;
    start..start + 8
}

fn raw_slots(bytes: &[u8], section: &str) -> Vec<RawInsn> {
    isa::raw_from_bytes(&bytes[section_range(bytes, section)]).unwrap()
}

fn first_conditional_jump(code: &[RawInsn]) -> usize {
    code.iter()
        .position(|i| {
            i.class() == op::CLASS_JMP
                && !matches!(i.code & 0xf0, op::JMP_JA | op::JMP_CALL | op::JMP_EXIT)
        })
        .expect("a conditional jump")
}

#[test]
fn truncated_objects_are_rejected() {
    let bytes = rdx_testdata::object("examples/hello");
    let len = bytes.len();
    assert_eq!(load_err(&bytes[..0]), LoadError::Truncated(0));
    assert_eq!(load_err(&bytes[..3]), LoadError::Truncated(3));
    assert_eq!(load_err(&bytes[..63]), LoadError::Truncated(63));
    for cut in [64, 65, 200, len / 4, len / 2, len - 8, len - 1] {
        let err = load_err(&bytes[..cut]);
        assert!(
            matches!(err, LoadError::MalformedElf { .. }),
            "cut at {cut}: {err}"
        );
    }
}

#[test]
fn non_elf_input_is_rejected() {
    assert_eq!(
        load_err(b"#!/bin/sh\necho this is not an object\n"),
        LoadError::NotElf
    );
}

#[test]
fn wrong_machine_is_named() {
    let mut bytes = rdx_testdata::object("examples/hello");
    bytes[18..20].copy_from_slice(&62u16.to_le_bytes());
    let err = load_err(&bytes);
    assert_eq!(
        err,
        LoadError::WrongMachine {
            machine: 62,
            name: "x86-64"
        }
    );
    assert!(err.to_string().contains("clang -target bpf"), "{err}");

    let native = ElfWriter::new(BinaryFormat::Elf, Architecture::Aarch64, Endianness::Little)
        .write()
        .unwrap();
    assert!(matches!(
        load_err(&native),
        LoadError::WrongMachine { machine: 183, .. }
    ));
}

#[test]
fn big_endian_and_32_bit_objects_are_rejected() {
    let mut big = ElfWriter::new(BinaryFormat::Elf, Architecture::Bpf, Endianness::Big);
    let id = big.add_section(Vec::new(), b"xdp".to_vec(), SectionKind::Text);
    big.set_section_data(id, isa::raw_to_bytes(&[MOV_R0_0, EXIT]), 8);
    assert_eq!(load_err(&big.write().unwrap()), LoadError::WrongEndianness);

    let mut bytes = rdx_testdata::object("examples/hello");
    bytes[4] = 1; // ELFCLASS32
    assert_eq!(load_err(&bytes), LoadError::WrongClass);
}

#[test]
fn relocation_to_missing_symbol_names_section_and_offset() {
    let mut bytes = rdx_testdata::object("examples/hello");
    let rel = section_range(&bytes, ".relsocket");
    // r_info of the first entry: symbol index in the high 32 bits.
    bytes[rel.start + 12..rel.start + 16].copy_from_slice(&0x7777u32.to_le_bytes());
    match load_err(&bytes) {
        LoadError::MissingSymbol { section, index, .. } => {
            assert_eq!(section, "socket");
            assert_eq!(index, 0x7777);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn relocation_to_undefined_symbol_is_an_unresolved_extern() {
    let mut b = Builder::new();
    let code = [lddw(0, 0).as_slice(), &[MOV_R0_0, EXIT]].concat();
    let xdp = b.program("xdp", "prog", &code);
    let ghost = b.symbol("ghost_map", None, 0, 0, SymbolKind::Data);
    b.relocate(xdp, 0, ghost, 1);
    let err = load_err(&b.bytes());
    assert_eq!(
        err,
        LoadError::UndefinedSymbol {
            section: "xdp".into(),
            offset: 0,
            symbol: "ghost_map".into()
        }
    );
    assert!(err.to_string().contains("ghost_map"));
}

#[test]
fn unknown_opcode_names_section_instruction_and_function() {
    let mut bytes = rdx_testdata::object("examples/multi");
    let code = raw_slots(&bytes, "xdp");
    // An instruction past the first few that is not the second half of an lddw.
    let mut slot = 3;
    while code[slot - 1].code == LDDW {
        slot += 1;
    }
    let at = slot_range(&bytes, "xdp", slot).start;
    bytes[at] = 0xff;
    let err = load_err(&bytes);
    assert_eq!(
        err,
        LoadError::BadInstruction {
            section: "xdp".into(),
            function: "xdp_gate".into(),
            insn: slot as u64,
            code: 0xff,
            kind: DecodeErrorKind::UnknownOpcode,
        }
    );
    assert_eq!(
        err.to_string(),
        format!("section xdp: instruction {slot} (function xdp_gate, opcode 0xff): unknown opcode")
    );
}

#[test]
fn bad_instruction_in_a_subprogram_is_reported_in_text_coordinates() {
    let mut bytes = rdx_testdata::object("examples/multi");
    let at = slot_range(&bytes, ".text", 0).start;
    bytes[at] = 0xff;
    match load_err(&bytes) {
        LoadError::BadInstruction {
            section,
            insn,
            code,
            ..
        } => assert_eq!((section.as_str(), insn, code), (".text", 0, 0xff)),
        other => panic!("{other}"),
    }
}

#[test]
fn jump_out_of_range_is_rejected() {
    let mut bytes = rdx_testdata::object("examples/multi");
    let slot = first_conditional_jump(&raw_slots(&bytes, "xdp"));
    let at = slot_range(&bytes, "xdp", slot).start;
    bytes[at + 2..at + 4].copy_from_slice(&0x7fffi16.to_le_bytes());
    match load_err(&bytes) {
        LoadError::BadInstruction {
            section,
            insn,
            kind: DecodeErrorKind::JumpOutOfRange { .. },
            ..
        } => assert_eq!((section.as_str(), insn), ("xdp", slot as u64)),
        other => panic!("{other}"),
    }
}

#[test]
fn jump_into_an_appended_subprogram_is_rejected() {
    let mut bytes = rdx_testdata::object("examples/multi");
    let code = raw_slots(&bytes, "socket");
    let slot = first_conditional_jump(&code);
    // Land exactly on the first appended subprogram: inside the linked program, outside the
    // function the jump belongs to.
    let off = (code.len() - slot - 1) as i16;
    let at = slot_range(&bytes, "socket", slot).start;
    bytes[at + 2..at + 4].copy_from_slice(&off.to_le_bytes());
    match load_err(&bytes) {
        LoadError::JumpOutOfFunction {
            section,
            function,
            insn,
            ..
        } => assert_eq!(
            (section.as_str(), function.as_str(), insn),
            ("socket", "classify", slot as u64)
        ),
        other => panic!("{other}"),
    }
}

#[test]
fn empty_and_partial_program_sections_are_rejected() {
    let mut b = Builder::new();
    b.section("xdp", SectionKind::Text, &[]);
    assert_eq!(
        load_err(&b.bytes()),
        LoadError::EmptyProgramSection {
            section: "xdp".into()
        }
    );

    let mut b = Builder::new();
    b.section(
        "socket",
        SectionKind::Text,
        &[0x95, 0, 0, 0, 0, 0, 0, 0, 0xb7, 0, 0, 0],
    );
    assert_eq!(
        load_err(&b.bytes()),
        LoadError::PartialInstruction {
            section: "socket".into(),
            size: 12
        }
    );

    let mut b = Builder::new();
    b.section(
        "rdx/hook",
        SectionKind::Text,
        &isa::raw_to_bytes(&[MOV_R0_0, EXIT]),
    );
    assert_eq!(
        load_err(&b.bytes()),
        LoadError::NoProgramSymbol {
            section: "rdx/hook".into()
        }
    );
}

#[test]
fn function_symbol_past_the_section_end_is_rejected() {
    let mut b = Builder::new();
    let id = b.section(
        "xdp",
        SectionKind::Text,
        &isa::raw_to_bytes(&[MOV_R0_0, EXIT]),
    );
    b.symbol("prog", Some(id), 0, 64, SymbolKind::Text);
    assert!(matches!(
        load_err(&b.bytes()),
        LoadError::BadFunctionSymbol { section, symbol, size: 64, .. } if section == "xdp" && symbol == "prog"
    ));
}

#[test]
fn call_to_a_non_function_is_rejected() {
    let mut b = Builder::new();
    let call = RawInsn::new(op::CLASS_JMP | op::JMP_CALL, 0, op::PSEUDO_CALL, 0, 5);
    b.program("xdp", "prog", &[call, MOV_R0_0, EXIT]);
    assert!(matches!(
        load_err(&b.bytes()),
        LoadError::CallTargetNotFunction { section, insn: 0, target_insn: 6, .. } if section == "xdp"
    ));
}

#[test]
fn prefilled_map_reference_without_relocation_is_rejected() {
    let mut b = Builder::new();
    let code = [lddw(op::PSEUDO_MAP_FD, 3).as_slice(), &[MOV_R0_0, EXIT]].concat();
    b.program("xdp", "prog", &code);
    assert_eq!(
        load_err(&b.bytes()),
        LoadError::UnrelocatedMapReference {
            section: "xdp".into(),
            insn: 0,
            src: op::PSEUDO_MAP_FD
        }
    );
}

#[test]
fn relocations_that_do_not_fit_their_instruction_are_rejected() {
    // A 64-bit relocation on a mov.
    let mut b = Builder::new();
    let data = b.section(".data", SectionKind::Data, &[0; 8]);
    let var = b.symbol("counter", Some(data), 0, 8, SymbolKind::Data);
    let xdp = b.program("xdp", "prog", &[MOV_R0_0, EXIT]);
    b.relocate(xdp, 0, var, 1);
    assert!(matches!(
        load_err(&b.bytes()),
        LoadError::BadRelocation { section, offset: 0, .. } if section == "xdp"
    ));

    // A global-data reference past the end of its section.
    let mut b = Builder::new();
    let data = b.section(".data", SectionKind::Data, &[0; 8]);
    let var = b.symbol("counter", Some(data), 0, 8, SymbolKind::Data);
    let code = [lddw(0, 100).as_slice(), &[MOV_R0_0, EXIT]].concat();
    let xdp = b.program("xdp", "prog", &code);
    b.relocate(xdp, 0, var, 1);
    let err = load_err(&b.bytes());
    assert!(
        matches!(&err, LoadError::BadRelocation { reason, .. } if reason.contains("outside section .data")),
        "{err}"
    );
}

#[test]
fn hand_built_object_with_global_data_loads() {
    // The positive twin of the cases above, so the builder itself is known to be right.
    let mut b = Builder::new();
    let data = b.section(".data", SectionKind::Data, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let var = b.symbol("counter", Some(data), 4, 4, SymbolKind::Data);
    let code = [lddw(0, 0).as_slice(), &[MOV_R0_0, EXIT]].concat();
    let xdp = b.program("xdp", "prog", &code);
    b.relocate(xdp, 0, var, 1);
    let obj = loader::load(&b.bytes()).unwrap();
    assert_eq!(obj.maps[0].name, ".data");
    assert_eq!(
        obj.programs[0].insns[0],
        isa::Insn::LoadImm64 {
            dst: isa::Reg(1),
            kind: isa::ImmKind::MapIdxValue,
            imm_lo: 0,
            imm_hi: 4
        }
    );
}

#[test]
fn btf_maps_need_btf() {
    let mut b = Builder::new();
    let maps = b.section(".maps", SectionKind::Data, &[0; 32]);
    b.symbol("table", Some(maps), 0, 32, SymbolKind::Data);
    b.program("xdp", "prog", &[MOV_R0_0, EXIT]);
    assert_eq!(load_err(&b.bytes()), LoadError::MissingBtf);
}

#[test]
fn corrupt_btf_is_reported() {
    let mut bytes = rdx_testdata::object("examples/multi");
    let btf = section_range(&bytes, ".BTF");
    bytes[btf.start] = 0;
    assert!(matches!(
        load_err(&bytes),
        LoadError::Btf(BtfError::BadMagic(_))
    ));
    let mut bytes = rdx_testdata::object("examples/multi");
    // Cut the type section short by claiming a longer one than the section holds.
    bytes[btf.start + 12..btf.start + 16].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    assert!(matches!(
        load_err(&bytes),
        LoadError::Btf(BtfError::Truncated(_))
    ));
}

#[test]
fn co_re_relocations_are_refused_not_ignored() {
    let mut bytes = rdx_testdata::object("examples/hello");
    let ext = section_range(&bytes, ".BTF.ext");
    // core_relo_len is the last field of the 32-byte .BTF.ext header.
    bytes[ext.start + 28..ext.start + 32].copy_from_slice(&40u32.to_le_bytes());
    let err = load_err(&bytes);
    assert_eq!(err, LoadError::UnsupportedCoRe { bytes: 40 });
    assert!(err.to_string().contains("CO-RE"), "{err}");
}

#[test]
fn legacy_map_definition_outside_its_section_is_rejected() {
    let mut b = Builder::new();
    let maps = b.section("maps", SectionKind::Data, &[0; 20]);
    b.symbol("counters", Some(maps), 16, 20, SymbolKind::Data);
    b.program("socket", "prog", &[MOV_R0_0, EXIT]);
    assert!(matches!(
        load_err(&b.bytes()),
        LoadError::BadMap { map, .. } if map == "counters"
    ));
}

/// Byte ranges worth mutating: ELF header, section and symbol tables, relocations, code, BTF.
fn structural_ranges(bytes: &[u8]) -> Vec<std::ops::Range<usize>> {
    let file = object::File::parse(bytes).unwrap();
    let header = 0..64;
    let mut ranges = vec![header];
    for s in file.sections() {
        let name = s.name().unwrap_or_default();
        let interesting = !name.starts_with(".debug") && !name.starts_with(".rel.debug");
        if let (true, Some((off, size))) = (interesting, s.file_range()) {
            if size > 0 {
                ranges.push(off as usize..(off + size) as usize);
            }
        }
    }
    // Section headers sit at the end of clang's objects.
    let shoff = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
    ranges.push(shoff..bytes.len());
    ranges
}

fn mutated_object() -> impl Strategy<Value = Vec<u8>> {
    let sources = ["examples/hello", "examples/multi", "examples/legacy_maps"]
        .map(rdx_testdata::object)
        .to_vec();
    (
        0..sources.len(),
        proptest::collection::vec(
            (any::<prop::sample::Index>(), any::<u8>(), any::<bool>()),
            1..12,
        ),
        proptest::option::weighted(0.2, any::<prop::sample::Index>()),
    )
        .prop_map(move |(which, flips, cut)| {
            let mut bytes = sources[which].clone();
            let ranges = structural_ranges(&bytes);
            for (index, value, structural) in flips {
                let pos = if structural {
                    let r = &ranges[index.index(ranges.len())];
                    r.start + index.index(r.len().max(1))
                } else {
                    index.index(bytes.len())
                };
                if let Some(b) = bytes.get_mut(pos) {
                    *b = value;
                }
            }
            if let Some(cut) = cut {
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            bytes
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// Random byte flips (half of them aimed at headers, tables, relocations, code and BTF)
    /// and truncations of real objects: the loader returns, it never panics, and whatever it
    /// accepts is a strictly decodable program.
    #[test]
    fn mutated_objects_never_panic(bytes in mutated_object()) {
        if let Ok(obj) = loader::load(&bytes) {
            for p in &obj.programs {
                let re = isa::raw_to_bytes(&isa::encode(&p.insns));
                prop_assert_eq!(isa::decode_bytes(&re).unwrap(), p.insns.clone());
            }
        }
    }

    #[test]
    fn random_bytes_behind_an_elf_header_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let hello = rdx_testdata::object("examples/hello");
        let mut bytes = hello[..64].to_vec();
        bytes.extend(tail);
        let _ = loader::load(&bytes);
    }
}
