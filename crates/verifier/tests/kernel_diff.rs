//! Differential test against the kernel verifier: every corpus program expressible as a
//! socket filter or XDP program is loaded with `bpf(BPF_PROG_LOAD)` (as root, so with the
//! kernel's privileged rules) and must get the same accept/reject verdict as from rdx.
//! Cases marked `kernel: skip` are the intentional differences listed in docs/verifier.md.
//! Where the bpf() system call is unavailable the test says so and passes without comparing.

mod corpus;

use corpus::{all_cases, Expect};
use rdx_bpf::Program;
use rdx_kernel::{create_maps, load_linked, ProgType};
use rdx_verifier::KernelProgType;

#[test]
fn kernel_agrees_on_the_corpus() {
    if let Err(e) = rdx_kernel::probe() {
        eprintln!("skipping the kernel differential test: {e}");
        return;
    }
    let mut compared = 0;
    let mut disagreements = Vec::new();
    for case in all_cases() {
        let Some(ty) = case.kernel_type() else {
            continue;
        };
        // rdx's verdict is the case's expectation (corpus_test checks that rdx meets it).
        let ours_accepts = case.expect == Expect::Accept;
        let maps =
            create_maps(&case.maps).unwrap_or_else(|e| panic!("{}: creating maps: {e}", case.name));
        let prog = Program {
            name: "corpus".into(),
            section: String::new(),
            insns: case.insns.clone(),
        };
        let pt = match ty {
            KernelProgType::SocketFilter => ProgType::SocketFilter,
            KernelProgType::Xdp => ProgType::Xdp,
        };
        let theirs = load_linked(&prog, pt, &maps, "GPL", 0);
        compared += 1;
        if ours_accepts != theirs.is_ok() {
            disagreements.push(format!(
                "{}: rdx {}, kernel {}",
                case.name,
                match &case.expect {
                    Expect::Accept => "accepts".to_string(),
                    Expect::Reject(rule) => format!("rejects ({rule})"),
                },
                match &theirs {
                    Ok(_) => "accepts".to_string(),
                    Err(e) => format!(
                        "rejects ({})",
                        e.to_string().lines().last().unwrap_or_default()
                    ),
                }
            ));
        }
    }
    assert!(
        compared >= 40,
        "only {compared} corpus programs compared with the kernel"
    );
    assert!(
        disagreements.is_empty(),
        "{} disagreements with the kernel:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}
