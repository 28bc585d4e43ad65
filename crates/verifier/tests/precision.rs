//! Precision the kernel's verifier has and rdx's must match, each with a hostile counterpart
//! that must still be refused:
//! - register and stack-slot liveness: states that differ only in values no path reads again
//!   meet at prune points (so branchy code does not explode into 2^n paths), while a value
//!   read after the prune point (directly, by a helper, by a callee through an argument or a
//!   stack pointer, or by the caller after a callee returns) keeps its paths apart;
//! - widening only at loop heads (budgeted classes): branches inside a loop's body keep
//!   their exact values, while a loop-carried offset is still widened;
//! - one context access covering adjacent fields that each grant it;
//! - a subprogram may return without setting `r0` (the kernel's rule), which its caller may
//!   not then read.
//!
//! Where a program is expressible as an XDP program, the kernel's verdict (loaded with
//! `bpf(BPF_PROG_LOAD)` as root) is required to be the same.

use rdx_bpf::isa::{ImmKind, Insn};
use rdx_bpf::{MapDef, MapOrigin, Program};
use rdx_region::layout::MapType;
use rdx_verifier::{verify_insns, EimSpec, KernelProgType, Rule, VerifyError, VerifyOptions};
use std::path::Path;

/// `lddw %rN, MAP0` in the texts below: replaced by a reference to map 0.
const MAP0: &str = "0x7ead000000000000";

fn assemble(text: &str) -> Vec<Insn> {
    let text = text.replace("MAP0", MAP0);
    let mut insns = rdx_bpf::asm::assemble(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for i in insns.iter_mut() {
        if let Insn::LoadImm64 {
            kind,
            imm_lo,
            imm_hi,
            ..
        } = i
        {
            if Insn::imm64(*imm_lo, *imm_hi) == 0x7ead_0000_0000_0000 {
                *kind = ImmKind::MapIdx;
                *imm_lo = 0;
                *imm_hi = 0;
            }
        }
    }
    insns
}

/// An array of one 16-byte value.
fn map16() -> Vec<MapDef> {
    vec![MapDef {
        name: "vals".into(),
        map_type: MapType::Array.into(),
        key_size: 4,
        value_size: 16,
        max_entries: 1,
        flags: 0,
        origin: MapOrigin::Btf,
        initial_value: None,
        read_only: false,
    }]
}

fn xdp() -> VerifyOptions {
    VerifyOptions::kernel(KernelProgType::Xdp)
}

fn spec(path: &str) -> EimSpec {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path);
    EimSpec::from_yaml(&std::fs::read_to_string(root).unwrap()).unwrap()
}

/// The kernel's verdict on an XDP program, or `None` without `bpf()`.
fn kernel_accepts(insns: &[Insn], maps: &[MapDef]) -> Option<bool> {
    if let Err(e) = rdx_kernel::probe() {
        eprintln!("no kernel comparison: {e}");
        return None;
    }
    let km = rdx_kernel::create_maps(maps).expect("maps");
    let prog = Program {
        name: "precision".into(),
        section: String::new(),
        insns: insns.to_vec(),
    };
    Some(rdx_kernel::load_linked(&prog, rdx_kernel::ProgType::Xdp, &km, "GPL", 0).is_ok())
}

/// rdx's verdict on an XDP program, checked against the kernel's.
fn xdp_verdict(text: &str, maps: &[MapDef]) -> Result<rdx_verifier::Verified, VerifyError> {
    let insns = assemble(text);
    let ours = verify_insns(&insns, maps, &xdp());
    if let Some(kernel) = kernel_accepts(&insns, maps) {
        assert_eq!(
            ours.is_ok(),
            kernel,
            "rdx {:?} but the kernel {}:\n{text}",
            ours.as_ref().map(|v| v.processed_insns),
            if kernel { "accepts" } else { "rejects" }
        );
    }
    ours
}

fn rejected(r: Result<rdx_verifier::Verified, VerifyError>, rule: Rule) {
    match r {
        Ok(v) => panic!(
            "accepted ({} instructions processed), expected {rule}",
            v.processed_insns
        ),
        Err(e) => assert_eq!(e.rule, rule, "{e}"),
    }
}

/// `r6` = an unknown number.
const UNKNOWN_R6: &str = "call 7\nmov %r6, %r0\n";

/// Two paths that differ only in what follows `far` (taken) or not (explored first): the
/// test is on a scratch copy of `r6`, so `r6` is not refined differently on each.
const SPLIT: &str = "mov %r5, %r6\nand %r5, 1\njne %r5, 0, far\n";

/// `r0` = the map value, or exit.
const LOOKUP: &str = "stw [%r10-4], 0\nmov %r2, %r10\nadd %r2, -4\nlddw %r1, MAP0\ncall 1\njne %r0, 0, +2\nmov %r0, 2\nexit\n";

/// `n` branches on bits of `r6` (tested in a scratch copy, so that `r6` itself is not
/// refined), each arm writing its own constant with `write` (which takes the constant), each
/// block starting with `reset`; the states meet after each block.
fn chain(n: u32, reset: &str, write: impl Fn(u32) -> String) -> String {
    let mut s = String::new();
    for i in 0..n {
        s += reset;
        s += &format!(
            "mov %r5, %r6\nand %r5, {}\njne %r5, 0, b{i}\n{}ja j{i}\nb{i}:\n{}j{i}:\n",
            1u32 << (i % 31),
            write(2 * i + 1),
            write(2 * i + 2)
        );
    }
    s
}

#[test]
fn dead_scratch_registers_do_not_split_paths() {
    // 24 branches, each arm leaving its own constant in r3, which the next block overwrites:
    // 2^24 paths without liveness (refused as too complex), a few hundred instructions with.
    let text = format!(
        "{UNKNOWN_R6}{}mov %r0, 2\nexit\n",
        chain(24, "mov %r3, 0\n", |c| format!("mov %r3, {c}\n"))
    );
    let v = xdp_verdict(&text, &[]).expect("accepted");
    assert!(v.processed_insns < 1000, "{} processed", v.processed_insns);
    assert_eq!(v.worst_case_insns, Some(2 + 24 * 6 + 2));
}

#[test]
fn dead_stack_slots_do_not_split_paths() {
    // The same with a spilled scratch value: each block overwrites fp-8 whole first; the
    // last value is read once at the end, so the slot is live only there.
    let text = format!(
        "{UNKNOWN_R6}{}ldxdw %r0, [%r10-8]\nmov %r0, 2\nexit\n",
        chain(24, "stdw [%r10-8], 0\n", |c| format!(
            "stdw [%r10-8], {c}\n"
        ))
    );
    let v = xdp_verdict(&text, &[]).expect("accepted");
    assert!(v.processed_insns < 1000, "{} processed", v.processed_insns);
}

#[test]
fn a_register_read_after_the_prune_point_is_live() {
    // The first arm explored leaves r3 = 0, the second 4096; both meet, pass more prune
    // points, and r3 is then added to a map-value pointer: the 4096 path must be refused.
    let text = format!(
        "{UNKNOWN_R6}mov %r3, 0\n{SPLIT}ja join\nfar:\nmov %r3, 4096\njoin:\n{}mov %r7, %r3\n{LOOKUP}add %r0, %r7\nldxdw %r0, [%r0+0]\nmov %r0, 2\nexit\n",
        chain(4, "mov %r4, 0\n", |c| format!("mov %r4, {c}\n"))
    );
    rejected(xdp_verdict(&text, &map16()), Rule::OutOfBounds);
}

#[test]
fn an_argument_a_callee_reads_is_live_at_the_call() {
    // r3 is dead in the caller after the call but the callee reads it as its argument.
    let text = format!(
        "{UNKNOWN_R6}mov %r3, 0\n{SPLIT}ja join\nfar:\nmov %r3, 4096\njoin:\n{}call local f\nmov %r0, 2\nexit\nf:\nmov %r7, %r3\n{LOOKUP}add %r0, %r7\nldxdw %r0, [%r0+0]\nexit\n",
        chain(3, "mov %r4, 0\n", |c| format!("mov %r4, {c}\n"))
    );
    rejected(xdp_verdict(&text, &map16()), Rule::OutOfBounds);
}

#[test]
fn a_callers_register_stays_live_inside_the_callee() {
    // r7 differs between the paths, the callee branches (prune points inside it, where r7
    // is in the caller's frame), and the caller reads r7 after the return.
    let text = format!(
        "{UNKNOWN_R6}mov %r7, 0\n{SPLIT}ja join\nfar:\nmov %r7, 4096\njoin:\nmov %r1, %r6\ncall local f\n{LOOKUP}add %r0, %r7\nldxdw %r0, [%r0+0]\nmov %r0, 2\nexit\nf:\nmov %r6, %r1\n{}mov %r0, 0\nexit\n",
        chain(3, "mov %r4, 0\n", |c| format!("mov %r4, {c}\n"))
    );
    rejected(xdp_verdict(&text, &map16()), Rule::OutOfBounds);
}

#[test]
fn a_stack_slot_read_after_the_prune_point_is_live() {
    let text = format!(
        "{UNKNOWN_R6}stdw [%r10-16], 0\n{SPLIT}ja join\nfar:\nstdw [%r10-16], 4096\njoin:\n{}ldxdw %r7, [%r10-16]\n{LOOKUP}add %r0, %r7\nldxdw %r0, [%r0+0]\nmov %r0, 2\nexit\n",
        chain(4, "mov %r4, 0\n", |c| format!("mov %r4, {c}\n"))
    );
    rejected(xdp_verdict(&text, &map16()), Rule::OutOfBounds);
}

#[test]
fn a_stack_slot_a_callee_reads_through_a_pointer_is_live() {
    let text = format!(
        "{UNKNOWN_R6}stdw [%r10-16], 0\n{SPLIT}ja join\nfar:\nstdw [%r10-16], 4096\njoin:\n{}mov %r1, %r10\nadd %r1, -16\ncall local f\nmov %r0, 2\nexit\nf:\nldxdw %r7, [%r1+0]\n{LOOKUP}add %r0, %r7\nldxdw %r0, [%r0+0]\nexit\n",
        chain(3, "mov %r4, 0\n", |c| format!("mov %r4, {c}\n"))
    );
    rejected(xdp_verdict(&text, &map16()), Rule::OutOfBounds);
}

#[test]
fn a_stack_slot_a_helper_reads_is_live() {
    // The first path explored writes the lookup key, the second does not: a helper reading
    // the key must count as a read of its slot, or the second path would be pruned against
    // the first. (The privileged kernel reads unwritten stack, so no kernel comparison.)
    let text = format!(
        "{UNKNOWN_R6}mov %r5, %r6\nand %r5, 1\njne %r5, 0, skip\nstdw [%r10-8], 0\nskip:\n{}mov %r2, %r10\nadd %r2, -8\nlddw %r1, MAP0\ncall 1\nmov %r0, 2\nexit\n",
        chain(3, "mov %r4, 0\n", |c| format!("mov %r4, {c}\n"))
    );
    let mut maps = map16();
    maps[0].key_size = 8;
    rejected(
        verify_insns(&assemble(&text), &maps, &xdp()),
        Rule::UninitStack,
    );
}

fn http_observer() -> VerifyOptions {
    VerifyOptions::eim(&spec("eim/http.yaml"), "http_request", "observer").unwrap()
}

/// A loop of unknown trip count (`get_time`) that the observer class's budget meters, with
/// `body` inside after a null-checked map lookup (`r0` the 16-byte value, `r7` the index).
fn budget_loop(before: &str, body: &str) -> String {
    format!(
        "call 1001\nmov %r6, %r0\nmov %r7, 0\n{before}stw [%r10-4], 0\nloop:\nmov %r2, %r10\nadd %r2, -4\nlddw %r1, MAP0\ncall 1\njeq %r0, 0, next\n{body}next:\nadd %r7, 1\njlt %r7, %r6, loop\nmov %r0, 0\nexit\n"
    )
}

#[test]
fn branches_inside_a_widened_loop_keep_their_exact_values() {
    // Inside the body, r3 is 0 or 8 depending on the index's low bit, then indexes the
    // 16-byte value: widening at the join inside the body would push r3 to its extremes.
    let text = budget_loop(
        "",
        "mov %r3, 0\njset %r7, 1, odd\nja join\nodd:\nmov %r3, 8\njoin:\nadd %r0, %r3\nldxdw %r4, [%r0+0]\n",
    );
    let v = verify_insns(&assemble(&text), &map16(), &http_observer()).expect("accepted");
    assert!(v.needs_budget && v.worst_case_insns.is_none());
}

#[test]
fn a_loop_carried_offset_is_still_widened() {
    // r8 grows by 8 each trip: after enough trips it leaves the value, which widening at the
    // loop head must find.
    let text = budget_loop(
        "mov %r8, 0\n",
        "mov %r4, %r0\nadd %r4, %r8\nldxdw %r4, [%r4+0]\nadd %r8, 8\n",
    );
    rejected(
        verify_insns(&assemble(&text), &map16(), &http_observer()),
        Rule::OutOfBounds,
    );
}

fn acl() -> VerifyOptions {
    VerifyOptions::eim(&spec("bpf/acl/acl.yaml"), "acl_packet", "acl").unwrap()
}

fn ctx_access(insn: &str, opts: &VerifyOptions) -> Result<rdx_verifier::Verified, VerifyError> {
    let text = format!("mov %r2, -1\n{insn}\nmov %r0, 0\nexit\n");
    verify_insns(&assemble(&text), &[], opts)
}

#[test]
fn one_store_may_cover_adjacent_writable_fields() {
    // rule (24) + policy (28), cause (32) + reason (36): both fields writable by the class.
    for insn in ["stxdw [%r1+24], %r2", "stxdw [%r1+32], %r2"] {
        let v = ctx_access(insn, &acl()).unwrap_or_else(|e| panic!("{insn}: {e}"));
        assert!(matches!(
            v.mem_facts[1],
            Some(rdx_verifier::MemFact::Ctx { offset: 24 | 32 })
        ));
    }
    // link (16) + len (20): both readable.
    ctx_access("ldxdw %r2, [%r1+16]", &acl()).expect("a read of two readable fields");
}

#[test]
fn a_wide_access_must_be_granted_on_every_field_it_covers() {
    // link + len are read-only.
    rejected(ctx_access("stxdw [%r1+16], %r2", &acl()), Rule::ReadOnly);
    // len + rule: misaligned, and len is read-only.
    rejected(ctx_access("stxdw [%r1+20], %r2", &acl()), Rule::CtxAccess);
    // reason + half of generation: not whole fields.
    rejected(ctx_access("stxdw [%r1+36], %r2", &acl()), Rule::CtxAccess);
    // data_end is a pointer field.
    rejected(
        ctx_access("ldxdw %r2, [%r1+8]\nldxdw %r2, [%r1+4]", &acl()),
        Rule::CtxAccess,
    );
    // http: method is read-only, status writable.
    let http = VerifyOptions::eim(&spec("eim/http.yaml"), "http_request", "responder").unwrap();
    ctx_access("stxw [%r1+4], %r2", &http).expect("the responder writes status");
    rejected(ctx_access("stxdw [%r1+0], %r2", &http), Rule::ReadOnly);
    // The kernel's contexts keep the kernel's rule: one field per access.
    let text = "ldxdw %r2, [%r1+16]\nmov %r0, 2\nexit\n";
    rejected(xdp_verdict(text, &[]), Rule::CtxAccess);
}

#[test]
fn a_subprogram_may_return_without_setting_r0() {
    let v = xdp_verdict(
        "mov %r1, 1\ncall local f\nmov %r0, 2\nexit\nf:\nmov %r2, %r1\nexit\n",
        &[],
    )
    .expect("a void subprogram");
    assert_eq!(v.worst_case_insns, Some(6));
}

#[test]
fn the_caller_may_not_read_r0_a_subprogram_left_unset() {
    rejected(
        xdp_verdict(
            "call local f\nmov %r1, %r0\nmov %r0, 2\nexit\nf:\nexit\n",
            &[],
        ),
        Rule::UninitRegister,
    );
    rejected(
        xdp_verdict("call local f\nexit\nf:\nexit\n", &[]),
        Rule::ReturnValue,
    );
    // Still: no pointer to the callee's own stack.
    rejected(
        xdp_verdict(
            "call local f\nmov %r0, 2\nexit\nf:\nmov %r0, %r10\nexit\n",
            &[],
        ),
        Rule::PointerLeak,
    );
}

mod random {
    //! Random programs of the shape above: branches that leave safe (0, 8) or unsafe (4096)
    //! offsets in registers and stack slots, overwrites, and uses of them as map-value
    //! offsets. Liveness must not change rdx's verdict (or its rule), and the kernel must
    //! agree with it.
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed, TestRunner};

    /// Registers r7-r9 and slots fp-16, fp-24 (the lookup key lives at fp-4).
    const TARGETS: [&str; 5] = ["r7", "r8", "r9", "fp-16", "fp-24"];
    const VALUES: [i32; 3] = [0, 8, 4096];

    #[derive(Clone, Debug)]
    enum Block {
        Split {
            bit: u8,
            fall: Vec<(usize, usize)>,
            taken: Vec<(usize, usize)>,
        },
        Set(usize, usize),
        Use(usize),
    }

    fn write(t: usize, v: usize) -> String {
        match TARGETS[t] {
            r if r.starts_with('r') => format!("mov %{r}, {}\n", VALUES[v]),
            slot => format!("stdw [%r10{}], {}\n", &slot[2..], VALUES[v]),
        }
    }

    fn lower(blocks: &[Block]) -> String {
        let mut s = String::from(
            "call 7\nmov %r6, %r0\nmov %r7, 0\nmov %r8, 0\nmov %r9, 0\nstdw [%r10-16], 0\nstdw [%r10-24], 0\n",
        );
        for (i, b) in blocks.iter().enumerate() {
            match b {
                Block::Split { bit, fall, taken } => {
                    s += &format!("mov %r5, %r6\nand %r5, {}\njne %r5, 0, b{i}\n", 1u32 << bit);
                    for &(t, v) in fall {
                        s += &write(t, v);
                    }
                    s += &format!("ja j{i}\nb{i}:\n");
                    for &(t, v) in taken {
                        s += &write(t, v);
                    }
                    s += &format!("j{i}:\n");
                }
                Block::Set(t, v) => s += &write(*t, *v),
                Block::Use(t) => {
                    s += LOOKUP;
                    match TARGETS[*t] {
                        r if r.starts_with('r') => s += &format!("add %r0, %{r}\n"),
                        slot => s += &format!("ldxdw %r1, [%r10{}]\nadd %r0, %r1\n", &slot[2..]),
                    }
                    s += "ldxdw %r1, [%r0+0]\n";
                }
            }
        }
        s + "mov %r0, 2\nexit\n"
    }

    fn block() -> impl Strategy<Value = Block> {
        let w = || proptest::collection::vec((0..TARGETS.len(), 0..VALUES.len()), 0..3);
        prop_oneof![
            3 => (0u8..31, w(), w()).prop_map(|(bit, fall, taken)| Block::Split { bit, fall, taken }),
            1 => (0..TARGETS.len(), 0..2usize).prop_map(|(t, v)| Block::Set(t, v)),
            2 => (0..TARGETS.len()).prop_map(Block::Use),
        ]
    }

    #[test]
    fn liveness_keeps_the_verdict_and_the_kernel_agrees() {
        let cases: u32 = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2000);
        let mut runner = TestRunner::new(Config {
            cases,
            rng_seed: RngSeed::Fixed(0x11fe_2026),
            failure_persistence: None,
            ..Config::default()
        });
        let maps = map16();
        let kernel = rdx_kernel::probe().is_ok();
        let km = kernel.then(|| rdx_kernel::create_maps(&maps).expect("maps"));
        let full = VerifyOptions {
            liveness: false,
            ..xdp()
        };
        let (accepted, rejected) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        let result = runner.run(&proptest::collection::vec(block(), 1..12), |blocks| {
            let text = lower(&blocks);
            let insns = assemble(&text);
            let ours = verify_insns(&insns, &maps, &xdp());
            let reference = verify_insns(&insns, &maps, &full);
            prop_assert_eq!(
                ours.as_ref().map(|_| ()).map_err(|e| e.rule),
                reference.as_ref().map(|_| ()).map_err(|e| e.rule),
                "{}",
                text
            );
            if ours.is_ok() {
                accepted.set(accepted.get() + 1);
            } else {
                rejected.set(rejected.get() + 1);
            }
            if let Some(km) = &km {
                let prog = Program {
                    name: "precision".into(),
                    section: String::new(),
                    insns: insns.clone(),
                };
                let theirs =
                    rdx_kernel::load_linked(&prog, rdx_kernel::ProgType::Xdp, km, "GPL", 0);
                prop_assert_eq!(ours.is_ok(), theirs.is_ok(), "{}\n{:?}", text, ours.err());
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
        // Both outcomes must be common for the comparison to mean something.
        assert!(
            accepted.get() * 5 >= cases && rejected.get() * 5 >= cases,
            "{} accepted, {} rejected",
            accepted.get(),
            rejected.get()
        );
    }
}
