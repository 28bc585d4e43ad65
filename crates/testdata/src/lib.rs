//! `rdx-testdata`: the repository's eBPF C sources (`bpf/**/*.c`), compiled by the build script
//! with `clang -O2 -g -target bpf`, for tests, examples and benchmarks of every crate.
//!
//! It owns nothing but the build of those objects and the location of the ISA test vectors
//! ([`vectors`]): no loading, no running. A missing clang is a build error that says how to
//! install it. The clang command line is `clang.rs`, which `rdx-cli`'s build script includes
//! too for the one program the `rdx` binary carries; this crate itself is only ever a
//! `[dev-dependencies]` entry (the layering test in `rdx-test-support` checks it).
//!
//! Its one test, `tests/doc_paths.rs`, checks the repository's documents instead: every path
//! they name exists, link anchors name headings, and the README's layout table lists every
//! crate. It lives here because this crate has no dependencies, so the check costs nothing
//! to build.

use std::path::{Path, PathBuf};

pub mod vectors;

include!(concat!(env!("OUT_DIR"), "/objects.rs"));

/// Absolute path of the object compiled from `bpf/<name>.c` (`name` like `"tests/collatz"`).
///
/// Panics with the list of known objects if there is none of that name: a test that names a
/// missing program is a broken test.
pub fn object_path(name: &str) -> PathBuf {
    let want = format!("{name}.o");
    match OBJECTS.iter().find(|(rel, _)| *rel == want) {
        Some((_, abs)) => PathBuf::from(abs),
        None => panic!(
            "no compiled object bpf/{name}.c; known: {:?}",
            OBJECTS.iter().map(|(r, _)| *r).collect::<Vec<_>>()
        ),
    }
}

/// Bytes of the object compiled from `bpf/<name>.c`.
pub fn object(name: &str) -> Vec<u8> {
    std::fs::read(object_path(name)).expect("compiled object is readable")
}

/// Names (without `.o`) of every compiled object under `bpf/<dir>/`.
pub fn objects_in(dir: &str) -> Vec<String> {
    let prefix = format!("{dir}/");
    OBJECTS
        .iter()
        .filter_map(|(rel, _)| {
            rel.strip_prefix(&prefix)
                .map(|_| rel.trim_end_matches(".o").to_string())
        })
        .collect()
}

/// The repository's `bpf/` directory.
pub fn source_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../bpf"))
}
