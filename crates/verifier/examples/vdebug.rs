//! Verifies one program and prints the report and the time. Either an assembly file in the
//! corpus format's body (no maps) or a compiled object (its first program, with its maps):
//! `cargo run --example vdebug -- FILE.s|FILE.o xdp|socket_filter|SPEC HOOK CLASS`.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: vdebug FILE.s|FILE.o xdp|socket_filter|SPEC HOOK CLASS");
        std::process::exit(2);
    }
    let (insns, maps) = if args[1].ends_with(".o") {
        let bytes = std::fs::read(&args[1]).expect("readable object");
        let obj = rdx_bpf::loader::load(&bytes).expect("loadable object");
        let prog = obj.programs.first().expect("a program").clone();
        (prog.insns, obj.maps)
    } else {
        let src = std::fs::read_to_string(&args[1]).expect("readable file");
        (
            rdx_bpf::asm::assemble(&src).expect("valid assembly"),
            Vec::new(),
        )
    };
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
    let r = rdx_verifier::verify_insns(&insns, &maps, &opts);
    print!("{}", rdx_verifier::format_report(&r));
    println!("({:?})", t.elapsed());
}
