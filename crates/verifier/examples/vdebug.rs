//! Verifies one assembly file from the corpus format's body (no maps), printing the report:
//! `cargo run --example vdebug -- FILE.s xdp|socket_filter [SPEC HOOK CLASS]`.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let src = std::fs::read_to_string(&args[1]).expect("readable file");
    let insns = rdx_bpf::asm::assemble(&src).expect("valid assembly");
    let opts = match args[2].as_str() {
        "xdp" => rdx_verifier::VerifyOptions::kernel(rdx_verifier::KernelProgType::Xdp),
        "socket_filter" => {
            rdx_verifier::VerifyOptions::kernel(rdx_verifier::KernelProgType::SocketFilter)
        }
        spec => {
            let spec =
                rdx_verifier::EimSpec::from_yaml(&std::fs::read_to_string(spec).expect("spec"))
                    .expect("valid spec");
            rdx_verifier::VerifyOptions::eim(&spec, &args[3], &args[4]).expect("hook and class")
        }
    };
    let t = std::time::Instant::now();
    let r = rdx_verifier::verify_insns(&insns, &[], &opts);
    print!("{}", rdx_verifier::format_report(&r));
    println!("({:?})", t.elapsed());
}
