//! Compiles every `bpf/**/*.c` of the repository with `clang -O2 -g -target bpf` into OUT_DIR,
//! keeping the directory structure (`bpf/tests/collatz.c` → `tests/collatz.o`).

use std::path::{Path, PathBuf};

mod clang;

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

    let mut files = Vec::new();
    sources(&root, &mut files);
    files.sort();
    let mut listing = String::new();
    for src in &files {
        println!("cargo:rerun-if-changed={}", src.display());
        let rel = src.strip_prefix(&root).unwrap().with_extension("o");
        let obj = out_dir.join(&rel);
        std::fs::create_dir_all(obj.parent().unwrap()).unwrap();
        clang::compile_bpf(&root, src, &obj);
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
