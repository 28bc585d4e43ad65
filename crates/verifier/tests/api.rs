//! The facts `Verified` reports: worst-case counts, budgets, stack depth, memory facts.

use rdx_bpf::asm::assemble;
use rdx_verifier::{
    format_report, verify_insns, EimSpec, KernelProgType, LogLevel, MemFact, Rule, VerifyOptions,
};

fn http(class: &str) -> VerifyOptions {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../eim/http.yaml");
    let spec = EimSpec::from_yaml(&std::fs::read_to_string(root).unwrap()).unwrap();
    VerifyOptions::eim(&spec, "http_request", class).unwrap()
}

#[test]
fn bounded_loops_get_an_exact_worst_case_and_unbounded_ones_a_budget() {
    let bounded = assemble(
        "mov %r0, 0\nmov %r1, 0\nl:\nadd %r0, 1\nadd %r1, 1\njlt %r1, 100, l\nand %r0, 1\nexit",
    )
    .unwrap();
    let v = verify_insns(&bounded, &[], &http("observer")).unwrap();
    assert_eq!(v.worst_case_insns, Some(2 + 300 + 2));
    assert!(!v.needs_budget);
    // get_time() is unknown: the loop cannot be bounded; the observer class meters it.
    let unbounded = assemble(
        "call 1001\nmov %r1, %r0\nmov %r0, 0\nl:\nadd %r0, 1\njne %r0, %r1, l\nmov %r0, 0\nexit",
    )
    .unwrap();
    let v = verify_insns(&unbounded, &[], &http("observer")).unwrap();
    assert_eq!(
        (v.worst_case_insns, v.needs_budget, v.budget),
        (None, true, Some(99_999))
    );
    // The minimal class has no budget: the same shape of loop must provably end.
    let e = verify_insns(
        &assemble("mov %r1, 0\nl:\nldxw %r0, [%r1+0]\nmov %r1, %r1\nja l").unwrap(),
        &[],
        &http("minimal"),
    )
    .unwrap_err();
    assert!(
        matches!(
            e.rule,
            Rule::UninitRegister | Rule::InvalidMemBase | Rule::InfiniteLoop
        ),
        "{e}"
    );
}

#[test]
fn worst_case_above_the_budget_needs_metering() {
    // responder: instructions < 10000; this loop runs 3 x 5000 instructions.
    // The answer is 0 (and-ed) so the return range holds.
    let p =
        assemble("mov %r0, 0\nl:\nadd %r0, 1\nmov %r2, %r0\njlt %r0, 5000, l\nmov %r0, 0\nexit")
            .unwrap();
    let v = verify_insns(&p, &[], &http("responder")).unwrap();
    assert_eq!((v.worst_case_insns, v.needs_budget), (None, true));
    // Under the observer's larger budget the same loop is counted exactly.
    let v = verify_insns(&p, &[], &http("observer")).unwrap();
    assert_eq!(
        (v.worst_case_insns, v.needs_budget),
        (Some(1 + 15_000 + 2), false)
    );
}

#[test]
fn memory_facts_tell_the_jit_where_each_access_goes() {
    let p =
        assemble("ldxw %r2, [%r1+8]\nstxdw [%r10-8], %r2\nldxb %r0, [%r1+20]\nand %r0, 1\nexit")
            .unwrap();
    let v = verify_insns(&p, &[], &http("observer")).unwrap();
    assert_eq!(v.mem_facts[0], Some(MemFact::Ctx { offset: 8 }));
    assert_eq!(v.mem_facts[1], Some(MemFact::Stack));
    assert_eq!(v.mem_facts[2], Some(MemFact::Ctx { offset: 16 }));
    assert_eq!(v.mem_facts[3], None);
    assert_eq!(v.max_stack_depth, 8);
}

#[test]
fn the_log_shows_every_instruction_with_its_state() {
    let p = assemble("mov %r0, 1\nexit").unwrap();
    let v = verify_insns(
        &p,
        &[],
        &VerifyOptions::kernel(KernelProgType::Xdp).with_log(LogLevel::Verbose),
    )
    .unwrap();
    let log = v.log.clone().unwrap();
    assert!(
        log.starts_with("0: r0 = 1") && log.contains("1: exit") && log.contains("r0=1"),
        "{log}"
    );
    let report = format_report(&Ok(v));
    assert!(report.contains("worst-case instructions: 2"), "{report}");
    let e = verify_insns(
        &assemble("exit").unwrap(),
        &[],
        &VerifyOptions::kernel(KernelProgType::Xdp).with_log(LogLevel::Verbose),
    )
    .unwrap_err();
    assert!(format_report(&Err(e)).contains("rejected: instruction 0 `exit`"));
}
