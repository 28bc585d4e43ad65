//! A C host (examples/c-host) linked against the runtime's static library built with the
//! `fabric` feature: `rdx_register` serves its region over the fabric when
//! `RDX_FABRIC_LISTEN` is set, and this test, as a control plane, reads the region through a
//! `fabric://` address and checks it against the region file.

#![cfg(target_arch = "x86_64")]

use rdx_region::layout::SectionId;
use rdx_test_support::c_host::{self, RunningCHost};
use rdx_test_support::{ScratchDir, ShmPath};
use rdx_transport::shm::ShmTransport;
use rdx_transport::Transport;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Compiles the example host (examples/c-host) next to this test binary.
fn build_c_host(test: &str) -> PathBuf {
    // One executable per test: the tests run in parallel, and a binary being written cannot
    // be started.
    let exe = std::env::current_exe()
        .unwrap()
        .with_file_name(format!("c-host-fabric-{test}"));
    c_host::compile(&c_host::repo_root().join("examples/c-host/main.c"), &exe);
    exe
}

/// A minimal C host (its region at `argv[1]`) that reports where `rdx_register` serves it,
/// then waits for stdin to close and tears down.
const ADDRESS_HOST: &str = r#"
#include <stdio.h>
#include <rdx.h>
int main(int argc, char **argv)
{
	rdx_runtime *rt;
	rdx_options opts = { .path = argc > 1 ? argv[1] : NULL, .code_size = 1 << 20,
			     .scratch_size = 1 << 20 };
	if (rdx_init(&opts, &rt) || rdx_register(rt, 0)) {
		fprintf(stderr, "%s\n", rdx_last_error());
		return 1;
	}
	const char *address = rdx_fabric_address(rt);
	printf("region %s\nfabric %s\n", rdx_region_path(rt), address ? address : "none");
	fflush(stdout);
	while (getchar() != EOF)
		;
	return rdx_teardown(rt, 100, 1) == 0 ? 0 : 1;
}
"#;

#[test]
fn rdx_fabric_address_names_the_served_endpoint() {
    let dir = ScratchDir::new("fabric-c-host-address");
    let exe = dir.join("host");
    c_host::compile(&dir.write("host.c", ADDRESS_HOST), &exe);
    let run = |listen: Option<&str>| {
        let region = ShmPath::new("fabric-c-host-address");
        let mut cmd = Command::new(&exe);
        cmd.arg(region.path())
            .env("RDX_FABRIC_TOKEN_FILE", dir.join("token"))
            .env("RDX_FABRIC_PROVIDER", "sockets")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        match listen {
            Some(l) => cmd.env("RDX_FABRIC_LISTEN", l),
            None => cmd.env_remove("RDX_FABRIC_LISTEN"),
        };
        let mut child = cmd.spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (mut reported, mut fabric) = (String::new(), String::new());
        out.read_line(&mut reported).unwrap();
        out.read_line(&mut fabric).unwrap();
        assert_eq!(reported.trim(), format!("region {region}"));
        let fabric = fabric.trim().strip_prefix("fabric ").unwrap().to_string();
        (child, region, fabric)
    };

    // Not asked to: no server, no address.
    let (mut child, _region, fabric) = run(None);
    assert_eq!(fabric, "none");
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());

    // Asked to, on a free port the host picks: the address it reports is the live one.
    let (mut child, region, fabric) = run(Some("127.0.0.1"));
    let address = format!(
        "fabric://{fabric}?token-file={}",
        dir.join("token").display()
    );
    let remote = rdx_fabric::connect_address(&address).expect("connect to the reported address");
    let local = ShmTransport::open(region.path()).unwrap();
    assert_eq!(remote.info().sections, local.info().sections);
    drop(remote);
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success(), "teardown failed");
    assert!(!region.path().exists(), "teardown unlinks the region");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn c_host_region_is_read_over_the_fabric() {
    let exe = build_c_host("serve");
    let dir = ScratchDir::new("fabric-c-host-serve");
    let region = ShmPath::new("fabric-c-host-serve");
    let token_file = dir.join("token");
    let port = free_port();
    let eim_path = c_host::repo_root().join("eim/http.yaml");
    let mut child = Command::new(exe)
        .arg("--path")
        .arg(region.path())
        .arg("--eim")
        .arg(&eim_path)
        .env("RDX_FABRIC_LISTEN", format!("127.0.0.1:{port}"))
        .env("RDX_FABRIC_TOKEN_FILE", &token_file)
        .env("RDX_FABRIC_PROVIDER", "sockets")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(
        line.trim().strip_prefix("region "),
        Some(region.as_str()),
        "c-host did not start: {line:?}"
    );
    let host = RunningCHost { child, region };

    // The host created the token file (owner-only) while registering.
    let address = format!(
        "fabric://127.0.0.1:{port}?token-file={}",
        token_file.display()
    );
    let remote = rdx_fabric::connect_address(&address).expect("connect over the fabric");
    let local = ShmTransport::open(host.region.path()).unwrap();
    assert_eq!(remote.info().sections, local.info().sections);
    assert_eq!(remote.region_len(), local.region_len());

    // The EIM spec the C host published, read one-sidedly across the fabric.
    let eim = std::fs::read(&eim_path).unwrap();
    assert_eq!(remote.info().eim_len as usize, eim.len());
    let mut stored = vec![0u8; eim.len()];
    remote
        .read(remote.info().section(SectionId::Eim).offset, &mut stored)
        .unwrap();
    assert_eq!(stored, eim);

    // A wrong token is refused: the server checks it, not just the address.
    std::fs::write(dir.join("wrong"), format!("{}\n", "ab".repeat(32))).unwrap();
    let wrong = format!(
        "fabric://127.0.0.1:{port}?token-file={}",
        dir.join("wrong").display()
    );
    assert!(rdx_fabric::connect_address(&wrong).is_err());

    drop(remote);
    drop(host);
}

#[test]
fn c_host_reports_a_fabric_error_through_rdx_last_error() {
    let exe = build_c_host("error");
    let dir = ScratchDir::new("fabric-c-host-error");
    let region = dir.join("region");
    let mut child = Command::new(exe)
        .arg("--path")
        .arg(&region)
        .env("RDX_FABRIC_LISTEN", "127.0.0.1:0")
        .env_remove("RDX_FABRIC_TOKEN_FILE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "c-host ran without a token file");
    assert!(
        err.contains("rdx_register") && err.contains("RDX_FABRIC_TOKEN_FILE"),
        "{err}"
    );
}
