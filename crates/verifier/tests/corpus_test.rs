//! Every corpus program gets the outcome its header declares, and every rule is exercised.

mod corpus;

use corpus::{all_cases, Expect};
use rdx_verifier::{verify_insns, Rule};
use std::collections::BTreeSet;

#[test]
fn corpus_outcomes_match_expectations() {
    let cases = all_cases();
    let mut failures = Vec::new();
    for c in &cases {
        let got = verify_insns(&c.insns, &c.maps, &c.options());
        match (&c.expect, &got) {
            (Expect::Accept, Ok(v)) => {
                if let (Some(w), Some(g)) = (c.worst, v.worst_case_insns) {
                    if w != g {
                        failures.push(format!("{}: worst case {g}, expected {w}", c.name));
                    }
                }
            }
            (Expect::Reject(r), Err(e)) if e.rule == *r => {}
            _ => failures.push(format!(
                "{}: expected {:?}, got {}",
                c.name,
                c.expect,
                match &got {
                    Ok(_) => "accept".to_string(),
                    Err(e) => format!("reject: {e}"),
                }
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn corpus_is_broad() {
    let cases = all_cases();
    let c_programs = corpus::c_cases().len();
    assert!(c_programs >= 20, "only {c_programs} C corpus programs");
    assert!(cases.len() >= 60, "only {} corpus programs", cases.len());
    let covered: BTreeSet<Rule> = cases
        .iter()
        .filter_map(|c| match c.expect {
            Expect::Reject(r) => Some(r),
            _ => None,
        })
        .collect();
    let missing: Vec<&str> = Rule::ALL
        .iter()
        .filter(|r| !covered.contains(r))
        .map(|r| r.id())
        .collect();
    assert!(
        missing.is_empty(),
        "rules without a rejected corpus program: {missing:?}"
    );
    assert!(cases.iter().filter(|c| c.expect == Expect::Accept).count() >= 20);
}
