//! Compiles the one eBPF program the `rdx` binary ships, the ACL enforcement program
//! `bpf/acl/enforce.c` (`rdx acl apply` deploys it), into OUT_DIR, where `src/cmd/acl.rs`
//! embeds it: the binary then runs from anywhere, without the build tree. The command line
//! is the one `rdx-testdata` compiles every test object with.

use std::path::PathBuf;

#[path = "../testdata/clang.rs"]
mod clang;

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../bpf");
    let root = root.canonicalize().expect("bpf/ directory next to crates/");
    let src = root.join("acl/enforce.c");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed={}", root.join("include").display());
    println!("cargo:rerun-if-env-changed=CLANG");
    let obj = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("acl_enforce.o");
    clang::compile_bpf(&root, &src, &obj);
}
