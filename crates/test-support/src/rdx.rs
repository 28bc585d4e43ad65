//! The `rdx` binary as a test runs it: a separate control-plane process per command.

use crate::ScratchDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

/// Runs the `rdx` binary (`env!("CARGO_BIN_EXE_rdx")` in the CLI's tests), optionally with a
/// `--state-dir` of its own (removed on drop) and inside a network namespace.
///
/// Every command is logged to stderr with its exit status and duration (shown by libtest
/// when a test fails, or with `--nocapture`).
pub struct Rdx {
    bin: PathBuf,
    state: Option<ScratchDir>,
    netns: Option<String>,
}

impl Rdx {
    /// `rdx` without a state directory (the commands that only read files).
    pub fn new(bin: impl Into<PathBuf>) -> Rdx {
        Rdx {
            bin: bin.into(),
            state: None,
            netns: None,
        }
    }

    /// `rdx ... --state-dir DIR` with a fresh `DIR` named after `tag`.
    pub fn with_state(bin: impl Into<PathBuf>, tag: &str) -> Rdx {
        Rdx {
            state: Some(ScratchDir::new(tag)),
            ..Rdx::new(bin)
        }
    }

    /// Every command runs as `ip netns exec NS rdx ...`.
    pub fn in_netns(mut self, ns: &str) -> Rdx {
        self.netns = Some(ns.to_string());
        self
    }

    /// The state directory (panics if this `Rdx` has none).
    pub fn state_dir(&self) -> &Path {
        self.state
            .as_ref()
            .expect("Rdx::with_state gives a state directory")
            .path()
    }

    /// The command line for `args`, to spawn it yourself (e.g. a long-running `rdx watch`).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        c.args(args);
        if let Some(state) = &self.state {
            c.arg("--state-dir").arg(state.path());
        }
        c
    }

    /// Runs `rdx ARGS` to completion, whatever its exit status.
    pub fn output(&self, args: &[&str]) -> Output {
        let started = Instant::now();
        let out = self
            .command(args)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()));
        eprintln!(
            "rdx {} -> {} in {:?}",
            args.join(" "),
            out.status,
            started.elapsed()
        );
        out
    }

    /// Runs `rdx ARGS`, which must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.output(args);
        assert!(
            out.status.success(),
            "rdx {} failed ({}):\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("UTF-8 output")
    }

    /// Runs `rdx ARGS`, which must fail; returns its stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.output(args);
        assert!(
            !out.status.success(),
            "rdx {} should have failed; its output:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stderr).expect("UTF-8 output")
    }

    /// Runs `rdx ARGS --json`, which must succeed; returns the parsed output.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = args.to_vec();
        a.push("--json");
        let text = self.ok(&a);
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("rdx {}: not JSON ({e}):\n{text}", a.join(" ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_shows_the_command_and_its_stderr() {
        // `sh -c SCRIPT` stands in for the binary: the first argument is the script.
        let sh = Rdx::new("/bin/sh");
        assert_eq!(sh.ok(&["-c", "echo out"]), "out\n");
        assert_eq!(sh.fails(&["-c", "echo why >&2; exit 3"]), "why\n");
        let message = std::panic::catch_unwind(|| sh.ok(&["-c", "echo the reason >&2; exit 1"]))
            .unwrap_err()
            .downcast::<String>()
            .unwrap();
        assert!(message.contains("-c echo the reason"), "{message}");
        assert!(message.contains("the reason\n"), "{message}");
        assert_eq!(sh.json(&["-c", "echo '{\"a\": 1}'; true"])["a"], 1);
    }

    #[test]
    fn the_state_directory_is_passed_and_removed() {
        let sh = Rdx::with_state("/bin/sh", "ts-rdx-state");
        let dir = sh.state_dir().to_path_buf();
        // `sh -c SCRIPT NAME ARG`: --state-dir and DIR become $0 and $1.
        assert_eq!(
            sh.ok(&["-c", "echo $0 $1"]).trim(),
            format!("--state-dir {}", dir.display())
        );
        drop(sh);
        assert!(!dir.exists());
    }
}
