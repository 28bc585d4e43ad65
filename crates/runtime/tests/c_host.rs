//! The C example host (examples/c-host), built with the system C compiler against the C
//! ABI's static library (crate `rdx-runtime-c`), serving HTTP while an extension is deployed into it from this
//! test process (the control plane).

#![cfg(target_arch = "x86_64")]

mod common;

use common::{Deployer, Node};
use rdx_transport::xstate;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn build_c_host() -> PathBuf {
    // target/<profile>: the test binary is in its deps/.
    let out_dir = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .to_path_buf();
    // `cargo test` builds the static library (the dev-dependency `rdx-runtime-c`) into deps/
    // and copies it up only on a plain `cargo build`, so the copy next to the binaries may
    // be stale: take the newest.
    let lib = [
        out_dir.join("deps/librdx_runtime_c.a"),
        out_dir.join("librdx_runtime_c.a"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max()
    .map(|(_, p)| p)
    .unwrap_or_else(|| panic!("librdx_runtime_c.a not built under {}", out_dir.display()));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let exe = out_dir.join("c-host-test");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root.join("include"))
        .arg("-o")
        .arg(&exe)
        .arg(root.join("examples/c-host/main.c"))
        .arg(&lib)
        // libfabric: the library may have been built with the `fabric` feature (it is when
        // the whole workspace is tested, for rdx-fabric's tests); unused otherwise.
        .args(["-lfabric", "-lpthread", "-ldl", "-lm"])
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "c-host failed to compile");
    exe
}

struct CHost {
    child: Child,
    region: String,
    port: u16,
}

impl Drop for CHost {
    fn drop(&mut self) {
        // SAFETY: signalling the child we spawned, by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.region);
    }
}

fn get(port: u16, path: &str) -> (u32, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nUser-Agent: rdx-test\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[test]
fn c_host_serves_and_runs_a_deployed_extension() {
    let exe = build_c_host();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut child = Command::new(exe)
        .arg("--eim")
        .arg(root.join("eim/http.yaml"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let region = line.trim().strip_prefix("region ").unwrap().to_string();
    line.clear();
    out.read_line(&mut line).unwrap();
    let port = line
        .trim()
        .strip_prefix("listening ")
        .unwrap()
        .parse()
        .unwrap();
    let host = CHost {
        child,
        region,
        port,
    };

    assert_eq!(get(host.port, "/"), (200, "hello from c-host\n".into()));
    assert_eq!(get(host.port, "/admin").0, 404);

    let mut node = Node::attach_hook(&host.region, "http_request");
    // The EIM spec the host published is the HTTP one, byte for byte.
    let eim = std::fs::read(root.join("eim/http.yaml")).unwrap();
    let mut stored = vec![0u8; node.t.info().eim_len as usize];
    rdx_transport::Transport::read(
        &node.t,
        node.t
            .info()
            .section(rdx_region::layout::SectionId::Eim)
            .offset,
        &mut stored,
    )
    .unwrap();
    assert_eq!(stored, eim);

    let mut cp = Deployer::new(&node);
    let (v1, maps) = cp.prepare(&mut node, "runtime/http_block", 1, false);
    node.flip(0, v1);
    assert_eq!(get(host.port, "/admin/users").0, 403);
    assert_eq!(get(host.port, "/admin").0, 403);
    assert_eq!(get(host.port, "/").0, 200);
    let mut count = [0u8; 8];
    assert!(xstate::lookup(&node.t, &maps[0], &1u32.to_le_bytes(), &mut count).unwrap());
    assert_eq!(u64::from_le_bytes(count), 2, "two GETs blocked");
    let (_, stats) = get(host.port, "/stats");
    assert!(stats.contains("runs 4 failures 0 errors 0"), "{stats}");
    // Detach: back to normal routing.
    node.flip(v1, 0);
    assert_eq!(get(host.port, "/admin").0, 404);
}
