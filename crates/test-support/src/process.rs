//! Child processes driven by lines: a command on stdin, its reply on stdout, every reply
//! awaited with a timeout (a stuck child fails the test with its name instead of hanging
//! it), and the child asked to quit, then killed, on drop.

use crate::ShmPath;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::OnceLock;
use std::time::Duration;

/// Longest wait for one reply line.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for a child to exit after `quit` before it is killed.
const QUIT_GRACE: Duration = Duration::from_secs(2);

/// The path of a built example of the package under test (`target/<profile>/examples/NAME`).
/// `cargo test` builds a package's examples before its integration tests; another
/// package's examples need `cargo build -p <package> --examples` first.
pub fn example_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // Test binaries live in target/<profile>/deps, benches too.
    let p = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        p.exists(),
        "{} not built (cargo test builds the package's own examples; for another package's, \
         run `cargo build -p <package> --examples`)",
        p.display()
    );
    p
}

/// The `rdx-test-host` binary (crate `rdx-test-hosts`, `crates/test-hosts`) for this test
/// run's profile, built the first time a test process asks for it.
///
/// Cargo hands a test the binaries of its own package only (`CARGO_BIN_EXE_*`), and a host
/// must be a binary of its own that links nothing but the runtime, so this runs
/// `cargo build -p rdx-test-hosts` into the test's target directory once per test process:
/// a no-op when the binary is current, and never a stale host when its source changed.
pub fn test_host() -> &'static Path {
    static HOST: OnceLock<PathBuf> = OnceLock::new();
    HOST.get_or_init(build_test_host)
}

fn build_test_host() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // Test and bench binaries live in target/<profile>/deps.
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile> of the test binary");
    let target_dir = profile_dir.parent().expect("target dir");
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(dir) => dir,
        None => panic!("no profile directory above {}", exe.display()),
    };
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../test-hosts/Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        // Not `--offline`: a first `cargo test -p <crate>` may not have fetched every crate
        // the host needs; with everything fetched, cargo does not go to the network.
        .args(["build", "--quiet", "--bin", "rdx-test-host"])
        .args([
            "--profile",
            profile,
            "--manifest-path",
            manifest,
            "--target-dir",
        ])
        .arg(target_dir)
        .output()
        .expect("run cargo to build rdx-test-host");
    assert!(
        out.status.success(),
        "building rdx-test-host failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    profile_dir.join("rdx-test-host")
}

/// Which stdout lines are replies: a child that is itself a test binary also prints
/// libtest's own lines.
pub type LineFilter = fn(&str) -> bool;

/// A child process with piped stdin and stdout, read by a thread of its own.
pub struct LineProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    what: String,
}

impl LineProcess {
    /// Starts `cmd` (stdin and stdout piped); `what` names it in panic messages.
    pub fn spawn(cmd: &mut Command, what: &str) -> LineProcess {
        LineProcess::spawn_filtered(cmd, what, |_| true)
    }

    /// Like [`LineProcess::spawn`], keeping only the stdout lines `keep` accepts.
    pub fn spawn_filtered(cmd: &mut Command, what: &str, keep: LineFilter) -> LineProcess {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what} ({cmd:?}): {e}"));
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in stdout.lines().map_while(Result::ok) {
                if keep(&l) && tx.send(l).is_err() {
                    break;
                }
            }
        });
        LineProcess {
            child,
            stdin,
            lines,
            what: what.to_string(),
        }
    }

    /// The name given at spawn, used in every panic message about the process.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The next line; panics naming the process if none comes within 30 s or it exited.
    pub fn line(&self) -> String {
        self.lines
            .recv_timeout(REPLY_TIMEOUT)
            .unwrap_or_else(|e| panic!("{}: no reply ({e})", self.what))
    }

    /// Writes one line to the child's stdin.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}")
            .and_then(|_| stdin.flush())
            .unwrap_or_else(|e| panic!("{}: writing {line:?}: {e}", self.what));
    }

    /// Sends `line` and returns the reply (both logged to stderr, which libtest shows for a
    /// failed test).
    pub fn cmd(&mut self, line: &str) -> String {
        self.send(line);
        let reply = self.line();
        eprintln!("{}: {line} -> {reply}", self.what);
        reply
    }

    /// SIGKILL, and wait for it: the test's way of crashing a node.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LineProcess {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "quit");
            let _ = stdin.flush();
        }
        let step = Duration::from_millis(5);
        for _ in 0..QUIT_GRACE.as_millis() / step.as_millis() {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(step);
        }
        self.kill();
    }
}

/// A host process serving a region: started and awaited until it says `ready ...`, which
/// every rdx test host prints once its region is registered. On drop it is asked to quit,
/// killed if it does not, and its region file is removed (it is still there if the host was
/// killed or the test panicked).
///
/// It speaks the hosts' line protocol: `run ...` -> `ret R0 out OUT`, `quit`.
pub struct HostProcess {
    process: LineProcess,
    ready: String,
    // Dropped after the process: the file is removed once nothing serves it.
    region: ShmPath,
}

impl HostProcess {
    /// Runs `rdx-test-host MODE --path REGION args...` ([`test_host`]; `mode` is `runtime`,
    /// `fleet` or `control`, see `crates/test-hosts`).
    pub fn start(mode: &str, region: ShmPath, args: &[&str]) -> HostProcess {
        let mut cmd = Command::new(test_host());
        cmd.arg(mode).arg("--path").arg(region.path()).args(args);
        HostProcess::spawn(&mut cmd, region, &format!("rdx-test-host {mode}"), |_| true)
    }

    /// Starts `cmd`, a host that creates `region` (however it is told to), keeping only the
    /// stdout lines `keep` accepts, and waits for its `ready` line.
    pub fn spawn(cmd: &mut Command, region: ShmPath, what: &str, keep: LineFilter) -> HostProcess {
        let process = LineProcess::spawn_filtered(cmd, what, keep);
        let ready = process.line();
        assert!(ready.starts_with("ready"), "{what} said {ready:?}");
        assert!(
            region.path().exists(),
            "{what} is ready but {region} does not exist"
        );
        HostProcess {
            process,
            ready,
            region,
        }
    }

    /// The words after `ready` (what the host reports about itself, e.g. its bootstrap
    /// address).
    pub fn ready_words(&self) -> Vec<&str> {
        self.ready.split_whitespace().skip(1).collect()
    }

    /// The region file the host created.
    pub fn path(&self) -> &Path {
        self.region.path()
    }

    /// `shm:PATH`, what a control plane attaches to.
    pub fn address(&self) -> String {
        self.region.address()
    }

    /// Sends `line` and returns the reply.
    pub fn cmd(&mut self, line: &str) -> String {
        self.process.cmd(line)
    }

    /// Sends `run ARGS` and parses the reply `ret R0 out OUT` as `(r0, out)`.
    pub fn run(&mut self, args: &str) -> (u64, u64) {
        let l = self.process.cmd(&format!("run {args}"));
        match l.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["ret", r0, "out", out] => (r0.parse().unwrap(), out.parse().unwrap()),
            _ => panic!("{}: run {args} -> {l:?}", self.process.what()),
        }
    }

    /// Kills the host at once (SIGKILL) and waits for it, as a crash would end it.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// The host's line protocol, for commands [`HostProcess::cmd`] does not cover.
    pub fn process(&mut self) -> &mut LineProcess {
        &mut self.process
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host in the shell: creates its region file, says `ready`, answers `run V` with
    /// `ret 1 out V+1`, exits on `quit`.
    const SH_HOST: &str = r#"touch "$0"; echo "ready $0 $$"; while read cmd v; do
        case "$cmd" in run) echo "ret 1 out $((v + 1))";; quit) exit 0;; esac; done"#;

    #[test]
    fn a_host_is_awaited_driven_and_its_region_removed_even_when_killed() {
        let region = ShmPath::new("ts-host");
        let path = region.path().to_path_buf();
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", SH_HOST]).arg(&path);
        let mut host = HostProcess::spawn(&mut cmd, region, "sh host", |_| true);
        assert_eq!(host.ready_words()[0], path.to_str().unwrap());
        assert_eq!(host.run("41"), (1, 42));
        host.kill();
        assert!(path.exists(), "a killed host leaves its region file");
        drop(host);
        assert!(!path.exists());
    }

    #[test]
    fn a_silent_child_fails_the_test_with_its_name() {
        let mut quiet = LineProcess::spawn(Command::new("/bin/sh").args(["-c", "exit 0"]), "quiet");
        let message = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| quiet.cmd("run 1")))
            .unwrap_err()
            .downcast::<String>()
            .unwrap();
        assert!(message.starts_with("quiet: "), "{message}");
    }
}
