//! Compiles every `bpf/**/*.c` of the repository with `clang -O2 -g -target bpf` into OUT_DIR,
//! keeping the directory structure (`bpf/tests/collatz.c` → `tests/collatz.o`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "c") {
            out.push(path);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../bpf");
    let root = root.canonicalize().expect("bpf/ directory next to crates/");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed={}", root.display());
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = format!("/usr/include/{arch}-linux-gnu");

    let mut files = Vec::new();
    sources(&root, &mut files);
    files.sort();
    let mut listing = String::new();
    for src in &files {
        println!("cargo:rerun-if-changed={}", src.display());
        let rel = src.strip_prefix(&root).unwrap().with_extension("o");
        let obj = out_dir.join(&rel);
        std::fs::create_dir_all(obj.parent().unwrap()).unwrap();
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
            .arg(format!("-I{}", root.join("include").display()))
            .arg("-c")
            .arg(src)
            .arg("-o")
            .arg(&obj)
            .status()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {clang} to compile {}: {e} (install clang: scripts/setup.sh)",
                    src.display()
                )
            });
        assert!(status.success(), "clang failed on {}", src.display());
        listing.push_str(&format!(
            "    ({:?}, {:?}),\n",
            rel.to_string_lossy(),
            obj.to_string_lossy()
        ));
    }
    std::fs::write(
        out_dir.join("objects.rs"),
        format!("/// (path relative to bpf/ with .o, absolute path of the object)\npub const OBJECTS: &[(&str, &str)] = &[\n{listing}];\n"),
    )
    .unwrap();
}
