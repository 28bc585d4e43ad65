//! Fixtures shared by rdx's integration tests and benchmarks, so that each test says what it
//! checks instead of how to start a host:
//!
//! - [`scratch`]: unique `/dev/shm` region names and temporary directories per test, removed
//!   on drop (also when the test panics), so a run leaves nothing behind.
//! - [`eim`]: EIM specs for hooks whose context is `struct { u64 value; u64 out; }`, as text
//!   or written to a file.
//! - [`host`]: an in-process host (the test process links the runtime) for that context.
//! - [`process`]: host processes started and awaited until their region is registered,
//!   driven by stdin/stdout lines with a timeout on every reply; killed and their region
//!   file removed on drop. [`process::example_bin`] finds a built example.
//! - [`rdx`]: the `rdx` binary run with arguments, with a panic message that shows its
//!   stderr when it does not do what the test expects.
//! - [`netns`]: network namespaces joined by veth pairs, deleted on drop.
//! - [`c_host`]: C hosts compiled against `include/rdx.h` and the runtime's static library.
//! - [`programs`]: generated eBPF programs for the verifier and deploy benches.
//! - [`stranger`]: another, unprivileged local user, for the attack tests.
//!
//! **For tests and benches only.** This crate is a `[dev-dependencies]` entry and must never
//! be a normal dependency of a library or binary: it panics instead of returning errors, and
//! a data-plane host must link nothing but the runtime (the agentless tests check that the
//! host binaries carry no control-plane code).

pub mod c_host;
pub mod eim;
pub mod host;
pub mod netns;
pub mod process;
pub mod programs;
pub mod rdx;
pub mod scratch;
pub mod stranger;

pub use eim::EimSpec;
pub use host::{LocalHost, ValueOut};
pub use netns::NetnsStar;
pub use process::{example_bin, HostProcess, LineProcess};
pub use rdx::Rdx;
pub use scratch::{ScratchDir, ShmPath};
pub use stranger::Stranger;

#[cfg(test)]
mod tests {
    /// The sections of a manifest that `rdx-test-support` is named in, other than
    /// `[dev-dependencies]` ones: a line-level reading of TOML, enough for `name = ...` and
    /// `[dependencies.name]` entries.
    fn normal_uses(manifest: &str) -> Vec<String> {
        let mut section = String::new();
        let mut found = Vec::new();
        for line in manifest.lines().map(str::trim) {
            if line.starts_with('[') {
                section = line.trim_matches(['[', ']']).to_string();
                if section.ends_with("dependencies.rdx-test-support")
                    && !section.contains("dev-dependencies")
                {
                    found.push(section.clone());
                }
            } else if line.starts_with("rdx-test-support")
                && section.ends_with("dependencies")
                && !section.ends_with("dev-dependencies")
            {
                found.push(section.clone());
            }
        }
        found
    }

    #[test]
    fn no_manifest_makes_this_crate_a_normal_dependency() {
        assert_eq!(
            normal_uses("[dependencies]\nrdx-test-support = { path = \"x\" }\n"),
            ["dependencies"]
        );
        assert_eq!(
            normal_uses("[target.'cfg(unix)'.dependencies.rdx-test-support]\npath = \"x\"\n"),
            ["target.'cfg(unix)'.dependencies.rdx-test-support"]
        );
        assert!(
            normal_uses("[dev-dependencies]\nrdx-test-support = { path = \"x\" }\n").is_empty()
        );

        let root = crate::c_host::repo_root();
        let mut checked = 0;
        for dir in ["crates", "examples"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let manifest = entry.unwrap().path().join("Cargo.toml");
                let Ok(text) = std::fs::read_to_string(&manifest) else {
                    continue;
                };
                let uses = normal_uses(&text);
                assert!(
                    uses.is_empty(),
                    "{} uses rdx-test-support in {uses:?}: it belongs in [dev-dependencies] only",
                    manifest.display()
                );
                checked += 1;
            }
        }
        assert!(
            checked > 10,
            "read {checked} manifests under {}",
            root.display()
        );
    }
}
