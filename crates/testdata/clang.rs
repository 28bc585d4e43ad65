//! The one clang command line for the repository's eBPF C sources, shared by the build
//! scripts that compile them (`rdx-testdata`'s, every `bpf/**/*.c`; `rdx-cli`'s, the ACL
//! enforcement program it ships), so that a shipped object is built exactly like the one
//! the tests load.

use std::path::Path;
use std::process::Command;

/// Compiles `src` (under the repository's `bpf/` directory `bpf_root`) with
/// `clang -O2 -g -target bpf` into `obj`. `CLANG` names another compiler. Panics with how to
/// install clang when there is none, and when the source does not compile.
pub fn compile_bpf(bpf_root: &Path, src: &Path, obj: &Path) {
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    let status = Command::new(&clang)
        .args([
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-Wall",
            "-Werror",
            "-Wno-unused-function",
        ])
        .arg(format!("-I{multiarch}"))
        .arg(format!("-I{}", bpf_root.join("include").display()))
        .arg("-c")
        .arg(src)
        .arg("-o")
        .arg(obj)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {clang} to compile {}: {e} (install clang: scripts/setup.sh)",
                src.display()
            )
        });
    assert!(status.success(), "clang failed on {}", src.display());
}
