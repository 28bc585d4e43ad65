use super::*;
use crate::asm::assemble;
use crate::isa::{Insn, Size};
use crate::program::{MapDef, MapOrigin};
use rdx_region::layout::MapType;

fn vm(src: &str) -> Vm {
    vm_with(src, &MapSet::default())
}

fn vm_with(src: &str, maps: &MapSet) -> Vm {
    let insns = assemble(src).unwrap();
    Vm::new(
        &insns,
        maps,
        &Helpers::standard(),
        Config {
            max_steps: 10_000,
            ..Config::default()
        },
    )
    .unwrap()
}

fn kind(r: Result<u64, RunError>) -> RunErrorKind {
    r.unwrap_err().kind
}

#[test]
fn may_goto_falls_through_until_the_frame_counter_runs_out() {
    use rdx_exec::machine::MAY_GOTO_LOOPS;
    // Counts the fall-throughs of the caller's loop and of one in a callee, which has its
    // own counter; the caller's count goes on after the call.
    let src = "mov %r6, 0
        mov %r7, 0
        top:
        may_goto done
        add %r6, 1
        jne %r6, 10, top
        call local count
        mov %r7, %r0
        ja top
        done:
        mov %r0, %r6
        lsh %r0, 32
        or %r0, %r7
        exit
        count:
        mov %r0, 0
        again:
        may_goto out
        add %r0, 1
        ja again
        out:
        exit";
    let insns = assemble(src).unwrap();
    let v = Vm::new(
        &insns,
        &MapSet::default(),
        &Helpers::standard(),
        Config {
            max_steps: 1 << 28,
            ..Config::default()
        },
    )
    .unwrap();
    let r0 = v.run_checked(Input::Empty).unwrap();
    let loops = MAY_GOTO_LOOPS as u64;
    assert_eq!(r0 >> 32, loops, "the caller's loop");
    assert_eq!(
        r0 & 0xffff_ffff,
        loops,
        "the callee's loop, from a fresh counter"
    );
}

#[test]
fn out_of_bounds_is_an_error_naming_pc_and_address() {
    let v = vm("mov %r0, 0\nldxb %r0, [%r1+8]\nexit");
    let mut mem = [0u8; 8];
    let base = mem.as_ptr() as u64;
    let e = v.run_checked(Input::Bytes(&mut mem)).unwrap_err();
    assert_eq!(e.pc, 1);
    assert_eq!(
        e.kind,
        RunErrorKind::OutOfBounds {
            addr: base + 8,
            size: 1,
            write: false
        }
    );
    // Below the current frame is not the program's stack.
    let v = vm("stdw [%r10-520], 1\nmov %r0, 0\nexit");
    assert!(matches!(
        kind(v.run_checked(Input::Empty)),
        RunErrorKind::OutOfBounds { write: true, .. }
    ));
    // A null pointer.
    let v = vm("ldxdw %r0, [%r1]\nexit");
    assert!(matches!(
        kind(v.run_checked(Input::Empty)),
        RunErrorKind::OutOfBounds { addr: 0, .. }
    ));
}

#[test]
fn uninitialised_registers_are_errors() {
    let v = vm("mov %r0, %r3\nexit");
    assert_eq!(
        kind(v.run_checked(Input::Empty)),
        RunErrorKind::UninitRegister(Reg(3))
    );
    // r1-r5 are clobbered by a helper call.
    let v = vm("call 7\nmov %r0, %r1\nexit");
    assert_eq!(
        kind(v.run_checked(Input::Empty)),
        RunErrorKind::UninitRegister(Reg(1))
    );
    // r6 is not an argument: a callee cannot read the caller's r6.
    let v = vm("mov %r6, 1\ncall local f\nexit\nf:\nmov %r0, %r6\nexit");
    assert_eq!(
        kind(v.run_checked(Input::Empty)),
        RunErrorKind::UninitRegister(Reg(6))
    );
    assert_eq!(
        kind(vm("exit").run_checked(Input::Empty)),
        RunErrorKind::UninitRegister(Reg(0))
    );
}

#[test]
fn semantics_of_division_shifts_and_width() {
    let cases: &[(&str, u64)] = &[
        ("mov %r0, 7\ndiv %r0, 0\nexit", 0),
        ("mov %r0, 7\nmod %r0, 0\nexit", 7),
        ("lddw %r0, 0x100000007\nmod32 %r0, 0\nexit", 7),
        ("mov %r0, -7\nsdiv %r0, 2\nexit", (-3i64) as u64),
        ("mov %r0, -7\nsmod %r0, 2\nexit", (-1i64) as u64),
        ("lddw %r0, 0x8000000000000000\nsdiv %r0, -1\nexit", 1 << 63),
        ("mov %r0, 1\nlsh %r0, 65\nexit", 2),
        ("mov32 %r0, 1\nlsh32 %r0, 33\nexit", 2),
        ("mov %r0, -1\nadd32 %r0, 0\nexit", 0xffff_ffff),
        ("mov %r0, -1\nmov32 %r0, %r0\nexit", 0xffff_ffff),
        ("mov %r0, -8\narsh32 %r0, 1\nexit", 0xffff_fffc),
    ];
    for (src, want) in cases {
        assert_eq!(vm(src).run_checked(Input::Empty).unwrap(), *want, "{src}");
    }
}

#[test]
fn nested_calls_get_fresh_frames_up_to_the_limit() {
    // Seven nested calls (eight frames) each store to their own frame and add up.
    let mut src = String::from("mov %r1, 0\ncall local f1\nexit\n");
    for i in 1..=7 {
        src.push_str(&format!(
            "f{i}:\nstdw [%r10-8], {i}\nadd %r1, 1\n{}ldxdw %r0, [%r10-8]\nadd %r0, %r1\nexit\n",
            if i < 7 {
                format!("mov %r6, %r1\ncall local f{}\nmov %r1, %r6\n", i + 1)
            } else {
                String::new()
            }
        ));
    }
    // Frame i returns its own slot value plus the depth counter, proving frames don't alias.
    assert_eq!(vm(&src).run_checked(Input::Empty).unwrap(), 1 + 1);
    // Recursion without end stops at the frame limit.
    let v = vm("call local f\nexit\nf:\ncall local f\nexit");
    assert_eq!(kind(v.run_checked(Input::Empty)), RunErrorKind::CallDepth);
}

#[test]
fn step_limit_stops_infinite_loops() {
    let v = vm("ja -1");
    assert_eq!(
        kind(v.run_checked(Input::Empty)),
        RunErrorKind::StepLimit(10_000)
    );
    // SAFETY: the loop touches no memory.
    assert!(unsafe { v.run_unchecked(Input::Empty) }.is_err());
}

fn map_def(name: &str, map_type: MapType, key: u32, value: u32, max: u32) -> MapDef {
    MapDef {
        name: name.into(),
        map_type: map_type.into(),
        key_size: key,
        value_size: value,
        max_entries: max,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    }
}

fn with_map_ref(src: &str, map: i32) -> Vec<Insn> {
    // Turn every `lddw` into a reference to `map`.
    let mut insns = assemble(src).unwrap();
    for i in insns.iter_mut() {
        if let Insn::LoadImm64 { kind, imm_lo, .. } = i {
            *kind = crate::isa::ImmKind::MapIdx;
            *imm_lo = map;
        }
    }
    insns
}

#[test]
fn map_helpers_and_value_regions() {
    let maps = MapSet::new(&[map_def("h", MapType::Hash, 4, 8, 4)]).unwrap();
    // key = 3; update(map, &key, &value=40, 0); p = lookup(map, &key); *p += 2; return *p.
    let src = "
        stw [%r10-4], 3
        stdw [%r10-16], 40
        lddw %r1, 0
        mov %r2, %r10
        add %r2, -4
        mov %r3, %r10
        add %r3, -16
        mov %r4, 0
        call 2
        lddw %r1, 0
        mov %r2, %r10
        add %r2, -4
        call 1
        jeq %r0, 0, +4
        mov %r1, 2
        lock add [%r0], %r1
        ldxdw %r0, [%r0]
        exit
        mov %r0, -1
        exit";
    let insns = with_map_ref(src, 0);
    let v = Vm::new(&insns, &maps, &Helpers::standard(), Config::default()).unwrap();
    assert_eq!(v.run_checked(Input::Empty).unwrap(), 42);
    assert_eq!(
        maps.get(0).unwrap().lookup(&3u32.to_le_bytes()).unwrap(),
        42u64.to_le_bytes()
    );
    // SAFETY: the same program just ran in checked mode on the same (empty) input.
    assert_eq!(unsafe { v.run_unchecked(Input::Empty) }.unwrap(), 42);

    // Reading past the value through the lookup result is out of bounds.
    let src = "
        stw [%r10-4], 3
        lddw %r1, 0
        mov %r2, %r10
        add %r2, -4
        call 1
        jeq %r0, 0, +2
        ldxdw %r0, [%r0+8]
        exit
        exit";
    let v = Vm::new(
        &with_map_ref(src, 0),
        &maps,
        &Helpers::standard(),
        Config::default(),
    )
    .unwrap();
    assert!(matches!(
        kind(v.run_checked(Input::Empty)),
        RunErrorKind::OutOfBounds { size: 8, .. }
    ));
    // A map helper given something that is not a map fails.
    let v = vm("mov %r1, 1234\nmov %r2, %r10\ncall 1\nexit");
    assert!(matches!(
        kind(v.run_checked(Input::Empty)),
        RunErrorKind::Helper {
            id: 1,
            error: crate::helpers::HelperError::NotAMap(1234)
        }
    ));
}

#[test]
fn global_data_and_read_only_sections() {
    let mut rodata = map_def(".rodata", MapType::Array, 4, 8, 1);
    rodata.origin = MapOrigin::GlobalData;
    rodata.read_only = true;
    rodata.initial_value = Some(vec![5, 0, 0, 0, 6, 0, 0, 0]);
    let maps = MapSet::new(&[rodata]).unwrap();
    let mut insns = assemble("lddw %r1, 0\nldxw %r0, [%r1]\nstw [%r1], 1\nexit").unwrap();
    insns[0] = Insn::LoadImm64 {
        dst: Reg(1),
        kind: crate::isa::ImmKind::MapIdxValue,
        imm_lo: 0,
        imm_hi: 4,
    };
    let v = Vm::new(&insns, &maps, &Helpers::standard(), Config::default()).unwrap();
    let e = v.run_checked(Input::Empty).unwrap_err();
    assert_eq!(e.pc, 3);
    assert!(matches!(e.kind, RunErrorKind::ReadOnly { size: 4, .. }));
    insns[3] = Insn::Exit;
    let v = Vm::new(&insns, &maps, &Helpers::standard(), Config::default()).unwrap();
    assert_eq!(v.run_checked(Input::Empty).unwrap(), 6);
}

#[test]
fn context_models_serve_loads() {
    // r0 = data_end - data + len + protocol, then read the first packet byte.
    let src = "
        ldxw %r2, [%r1+76]
        ldxw %r3, [%r1+80]
        mov %r0, %r3
        sub %r0, %r2
        ldxw %r4, [%r1+0]
        add %r0, %r4
        ldxw %r4, [%r1+16]
        add %r0, %r4
        ldxb %r4, [%r2]
        add %r0, %r4
        stw [%r1+48], 9
        ldxw %r4, [%r1+48]
        add %r0, %r4
        exit";
    let mut frame = vec![0u8; 14];
    frame[12] = 0x08;
    frame.extend_from_slice(&[100, 1, 2, 3]);
    let mut skb = SkBuff::socket_filter_test_run(&frame).unwrap();
    assert_eq!(
        vm(src).run_checked(Input::Context(&mut skb)).unwrap(),
        4 + 4 + 8 + 100 + 9
    );
    assert_eq!(skb.cb[0], 9);
    // SAFETY: the same program just ran in checked mode on the same context.
    let unchecked = unsafe { vm(src).run_unchecked(Input::Context(&mut skb)) };
    assert_eq!(unchecked.unwrap(), 4 + 4 + 8 + 100 + 9);
    // Reading past data_end is out of bounds; writing `len` is refused by the model.
    let v = vm("ldxw %r2, [%r1+76]\nldxb %r0, [%r2+4]\nexit");
    assert!(matches!(
        kind(v.run_checked(Input::Context(&mut skb))),
        RunErrorKind::OutOfBounds { .. }
    ));
    let v = vm("stw [%r1], 1\nmov %r0, 0\nexit");
    assert!(matches!(
        kind(v.run_checked(Input::Context(&mut skb))),
        RunErrorKind::Context(_)
    ));

    let mut xdp = XdpMd::new(vec![7; 60]);
    let v = vm("ldxw %r2, [%r1+0]\nldxw %r3, [%r1+4]\nmov %r0, %r3\nsub %r0, %r2\nldxw %r4, [%r1+12]\nadd %r0, %r4\nexit");
    assert_eq!(v.run_checked(Input::Context(&mut xdp)).unwrap(), 61);
    assert!(xdp.load(0, Size::W).is_ok());
}

#[test]
fn helpers_copy_packet_bytes_and_trace() {
    let src = "
        mov %r6, %r1
        mov %r2, 1
        mov %r3, %r10
        add %r3, -8
        mov %r4, 2
        call 26
        ldxh %r0, [%r10-8]
        stdw [%r10-16], 0
        stw [%r10-16], 0x64253d78
        mov %r1, %r10
        add %r1, -16
        mov %r2, 5
        mov %r3, %r0
        call 6
        ldxh %r0, [%r10-8]
        exit";
    let mut skb = SkBuff::new(vec![1, 0x34, 0x12, 4]);
    let v = vm(src);
    assert_eq!(v.run_checked(Input::Context(&mut skb)).unwrap(), 0x1234);
    assert_eq!(v.take_trace(), vec!["x=4660".to_string()]);
}

#[test]
fn preparation_rejects_what_cannot_run() {
    let insns = assemble("call 999\nexit").unwrap();
    let e = Vm::new(
        &insns,
        &MapSet::default(),
        &Helpers::standard(),
        Config::default(),
    )
    .unwrap_err();
    assert_eq!(e.kind, PrepareErrorKind::UnknownHelper(999));
    let bad = [Insn::Ja { off: 5 }, Insn::Exit];
    let e = Vm::new(
        &bad,
        &MapSet::default(),
        &Helpers::standard(),
        Config::default(),
    )
    .unwrap_err();
    assert_eq!(e.kind, PrepareErrorKind::BadTarget(6));
    let mut insns = with_map_ref("lddw %r1, 0\nmov %r0, 0\nexit", 3);
    let e = Vm::new(
        &insns,
        &MapSet::default(),
        &Helpers::standard(),
        Config::default(),
    )
    .unwrap_err();
    assert!(matches!(e.kind, PrepareErrorKind::Map(_)));
    insns.truncate(1);
    assert!(Vm::new(
        &insns,
        &MapSet::default(),
        &Helpers::standard(),
        Config::default()
    )
    .is_err());
    // Falling off the end is a run-time error.
    let v = vm("mov %r0, 0");
    assert_eq!(kind(v.run_checked(Input::Empty)), RunErrorKind::FellOff);
}

#[test]
fn atomics_need_alignment() {
    let v = vm("mov %r1, 1\nlock add [%r10-12], %r1\nmov %r0, 0\nexit");
    assert!(matches!(
        kind(v.run_checked(Input::Empty)),
        RunErrorKind::MisalignedAtomic { size: 8, .. }
    ));
}

#[test]
fn ring_buffer_records_in_checked_mode() {
    let maps = MapSet::new(&[map_def("events", MapType::RingBuf, 0, 0, 4096)]).unwrap();
    // p = reserve(rb, 8); if p { *(u64 *)p = 77; submit(p) }; output(rb, &stack, 4)
    let src = "
        lddw %r1, 0
        mov %r2, 8
        mov %r3, 0
        call 131
        jeq %r0, 0, +5
        stdw [%r0], 77
        mov %r1, %r0
        mov %r2, 0
        call 132
        stw [%r10-4], 5
        lddw %r1, 0
        mov %r2, %r10
        add %r2, -4
        mov %r3, 4
        mov %r4, 0
        call 130
        exit";
    let v = Vm::new(
        &with_map_ref(src, 0),
        &maps,
        &Helpers::standard(),
        Config::default(),
    )
    .unwrap();
    assert_eq!(v.run_checked(Input::Empty).unwrap(), 0);
    let rb = maps.get(0).unwrap().ringbuf().unwrap();
    assert_eq!(
        rb.consume(),
        vec![77u64.to_le_bytes().to_vec(), 5u32.to_le_bytes().to_vec()]
    );
    // Writing past the reservation, or submitting what was not reserved, is an error.
    let src = "
        lddw %r1, 0
        mov %r2, 8
        mov %r3, 0
        call 131
        jeq %r0, 0, +1
        stdw [%r0+8], 1
        mov %r0, 0
        exit";
    let v = Vm::new(
        &with_map_ref(src, 0),
        &maps,
        &Helpers::standard(),
        Config::default(),
    )
    .unwrap();
    assert!(matches!(
        kind(v.run_checked(Input::Empty)),
        RunErrorKind::OutOfBounds { write: true, .. }
    ));
    let v = vm_with("mov %r1, %r10\nmov %r2, 0\ncall 132\nexit", &maps);
    assert!(matches!(
        kind(v.run_checked(Input::Empty)),
        RunErrorKind::Helper { id: 132, .. }
    ));
}

#[test]
fn vm_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Vm>();
    assert_send_sync::<MapSet>();
    let v = std::sync::Arc::new(vm("mov %r0, 3\nexit"));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let v = v.clone();
            std::thread::spawn(move || v.run_checked(Input::Empty).unwrap())
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 3);
    }
}

#[test]
fn conformance_unwind_stops_on_zero() {
    let insns = assemble("mov %r1, 0\ncall 5\nmov %r0, 2\nexit").unwrap();
    let v = Vm::new(
        &insns,
        &MapSet::default(),
        &Helpers::conformance(),
        Config::default(),
    )
    .unwrap();
    assert_eq!(v.run_checked(Input::Empty).unwrap(), 0);
}
