//! The examples' READMEs, run: each README marks two fenced shell blocks with an HTML comment,
//! `<!-- tested: host ... -->` (the command that starts the example host) and
//! `<!-- tested: deploy -->` (the commands that deploy into it). This test starts the host
//! with the README's own command, runs the README's deploy block with `sh -e` (the real `rdx`
//! binary, so every program goes through the verifier), checks that the host now behaves as
//! the README says, then stops it with SIGTERM and checks its region file is gone. A README
//! whose commands stop working fails here.
//!
//! How the blocks are run, as a reader would from the repository's root: in a scratch
//! directory holding links to the repository's `bpf/`, `eim/`, `include/`, `tools/` and to
//! the target directory (`target/`), so nothing is written into the checkout. In the host
//! block, `cargo build` and `make` lines are what this test does itself (it builds kv-host
//! and acl-gateway with `rdx_test_support::workspace_bin`, and compiles c-host against the
//! runtime's static library), `cd` changes directory, a fixed `--port N` becomes
//! `--port 0`, and the one remaining line starts the host. The deploy block gets `REGION`, the path the host printed, and a state directory
//! of its own.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use rdx_test_support::{c_host, workspace_bin, Rdx, ScratchDir};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// `target/debug`: where `rdx` and the example binaries are.
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_rdx"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The lines of the fenced block after each `<!-- tested: KIND ... -->` line.
fn tested_blocks(readme: &str, kind: &str) -> Vec<Vec<String>> {
    let marker = format!("<!-- tested: {kind}");
    let mut blocks = Vec::new();
    let mut lines = readme.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with(&marker) {
            continue;
        }
        let fence = lines.next().unwrap_or_default();
        assert!(fence.starts_with("```"), "no fenced block after {line:?}");
        blocks.push(
            lines
                .by_ref()
                .take_while(|l| !l.starts_with("```"))
                .map(str::to_string)
                .collect(),
        );
    }
    blocks
}

/// The one block of `kind` in the README of `examples/<example>`.
fn block(example: &str, kind: &str) -> Vec<String> {
    let path = repo_root().join("examples").join(example).join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let mut blocks = tested_blocks(&readme, kind);
    assert_eq!(
        blocks.len(),
        1,
        "{}: one `tested: {kind}` block",
        path.display()
    );
    blocks.remove(0)
}

/// A scratch directory laid out like the repository's root for the READMEs' commands.
fn workspace(tag: &str) -> ScratchDir {
    let dir = ScratchDir::new(tag);
    let root = repo_root();
    for name in ["bpf", "eim", "include", "tools"] {
        std::os::unix::fs::symlink(root.join(name), dir.join(name)).unwrap();
    }
    std::os::unix::fs::symlink(bin_dir().parent().unwrap(), dir.join("target")).unwrap();
    dir
}

/// An example host started by its README's command; SIGTERM on drop.
struct Host {
    child: Child,
    /// Open while the host runs: acl-gateway stops at the end of its stdin (and
    /// `Child::wait` would close it first).
    _stdin: ChildStdin,
    lines: Receiver<String>,
    region: PathBuf,
    port: Option<u16>,
}

impl Host {
    /// Runs the host block of `example` in `dir` and waits for the region (and port) it
    /// prints.
    fn start(example: &str, dir: &Path) -> Host {
        let mut cwd = dir.to_path_buf();
        let mut command = None;
        for line in block(example, "host") {
            let line = line.split(" #").next().unwrap().trim().to_string();
            if line.is_empty()
                || line.starts_with('#')
                || line.starts_with("cargo build")
                || line == "make"
            {
                continue;
            }
            if let Some(to) = line.strip_prefix("cd ") {
                cwd = cwd.join(to);
                continue;
            }
            assert!(
                command.is_none(),
                "{example}: two host commands in its README"
            );
            command = Some(line);
        }
        let command = command.unwrap_or_else(|| panic!("{example}: no host command"));
        let words: Vec<&str> = command.split_whitespace().collect();
        let command = match words.iter().position(|w| *w == "--port") {
            Some(i) => {
                let mut w = words.clone();
                w[i + 1] = "0";
                w.join(" ")
            }
            None => command.clone(),
        };
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec {command}"))
            .current_dir(&cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{example}: starting {command:?}: {e}"));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in stdout.lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let next = |what: &str| {
            lines
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("{example}: no `{what}` line from {command:?}: {e}"))
        };
        let first = next("region");
        let region = PathBuf::from(
            first
                .strip_prefix("region ")
                .unwrap_or_else(|| panic!("{example} said {first:?}")),
        );
        let port = command.contains("--port").then(|| {
            let l = next("listening");
            l.strip_prefix("listening ").unwrap().parse().unwrap()
        });
        Host {
            child,
            _stdin: stdin,
            lines,
            region,
            port,
        }
    }

    /// SIGTERM, then the host must exit and its region file be gone. Returns what it printed
    /// after its region and port.
    fn terminate(mut self) -> Vec<String> {
        // SAFETY: signalling the child this guard owns and has not reaped, by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "exit status {status} after SIGTERM");
        assert!(
            !self.region.exists(),
            "{} left behind after SIGTERM",
            self.region.display()
        );
        // The reader thread ends with the host's stdout.
        std::iter::from_fn(|| self.lines.recv_timeout(Duration::from_secs(5)).ok()).collect()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = std::fs::remove_file(&self.region);
        }
    }
}

/// Runs the deploy block of `example` in `dir` against `host`; returns its output.
fn deploy(example: &str, dir: &Path, host: &Host) -> String {
    let script = block(example, "deploy").join("\n");
    let state = dir.join("state");
    let out = Command::new("sh")
        .args(["-e", "-x", "-c", &script])
        .current_dir(dir)
        .env("REGION", &host.region)
        .env("RDX_STATE_DIR", &state)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{example}'s README deploy block failed ({}):\n{text}",
        out.status
    );
    text
}

/// The version each hook of the node runs (`rdx node show --json`).
fn hook_versions(region: &Path) -> Vec<(String, u64)> {
    let shown = Rdx::new(env!("CARGO_BIN_EXE_rdx")).json(&[
        "node",
        "show",
        &format!("shm:{}", region.display()),
    ]);
    shown["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap().to_string(),
                h["version"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Builds `bin` of the example package in `examples/<example>` next to `rdx`, where the
/// README's `target/debug/<bin>` finds it.
fn build_example(example: &str, bin: &str) {
    let exe = workspace_bin(&format!("examples/{example}"), bin);
    assert_eq!(exe.parent(), Some(bin_dir().as_path()));
}

#[test]
fn kv_host_readme() {
    build_example("kv-host", "kv-host");
    let dir = workspace("cli-readme-kv");
    let host = Host::start("kv-host", dir.path());
    let log = deploy("kv-host", dir.path(), &host);
    assert!(log.contains("ok, class get_guard"), "{log}");
    assert!(log.contains("ok, class set_guard"), "{log}");
    assert_eq!(
        hook_versions(&host.region),
        [("kv_get".to_string(), 1), ("kv_set".to_string(), 1)]
    );
    let stream = TcpStream::connect(("127.0.0.1", host.port.unwrap())).unwrap();
    let mut inp = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    let mut ask = |cmd: &str| {
        out.write_all(format!("{cmd}\n").as_bytes()).unwrap();
        let mut l = String::new();
        inp.read_line(&mut l).unwrap();
        l.trim().to_string()
    };
    assert_eq!(ask("SET city paris"), "OK");
    assert_eq!(ask("GET city"), "VALUE Paris");
    assert_eq!(ask("GET magic"), "VALUE 42");
    assert_eq!(ask("SET ro_x 1"), "DENIED");
    host.terminate();
}

fn http_get(port: u16, path: &str) -> u32 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn c_host_readme() {
    let dir = workspace("cli-readme-c-host");
    let host_dir = dir.join("examples/c-host");
    std::fs::create_dir_all(&host_dir).unwrap();
    c_host::compile(
        &repo_root().join("examples/c-host/main.c"),
        &host_dir.join("c-host"),
    );
    let host = Host::start("c-host", dir.path());
    let port = host.port.unwrap();
    assert_eq!(http_get(port, "/admin"), 404);
    let log = deploy("c-host", dir.path(), &host);
    assert!(log.contains("block_admin: accepted"), "{log}");
    assert_eq!(hook_versions(&host.region), [("http_request".into(), 1)]);
    assert_eq!(http_get(port, "/admin"), 403);
    assert_eq!(http_get(port, "/"), 200);
    host.terminate();
}

#[test]
fn acl_gateway_readme() {
    build_example("acl-gateway", "acl-gateway");
    let dir = workspace("cli-readme-acl");
    let host = Host::start("acl-gateway", dir.path());
    deploy("acl-gateway", dir.path(), &host);
    let versions = hook_versions(&host.region);
    assert!(
        versions
            .iter()
            .any(|(hook, v)| hook == "acl_packet" && *v >= 1),
        "{versions:?}"
    );
    let said = host.terminate();
    assert!(
        said.iter().any(|l| l.starts_with("stopped SIGTERM")),
        "{said:?}"
    );
}
