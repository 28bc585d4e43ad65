//! Which providers are truly one-sided: serves a region with no rdx progress thread while
//! the host does nothing, and checks whether a remote write and a compare-and-swap land.
//!
//! `cargo run -p rdx-fabric --example one_sided_probe [PROVIDER...]`

use rdx_fabric::{
    serve, ConnectOptions, FabricTransport, ProgressThread, Provider, ServeConfig, Token,
};
use rdx_region::layout::SectionId;
use rdx_runtime::Runtime;
use rdx_transport::shm::ShmTransport;
use rdx_transport::Transport;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

fn main() {
    let mut providers: Vec<String> = std::env::args().skip(1).collect();
    if providers.is_empty() {
        providers = [
            "sockets",
            "tcp;ofi_rxm",
            "udp;ofi_rxd",
            "shm",
            "verbs;ofi_rxm",
        ]
        .map(String::from)
        .to_vec();
    }
    let rt = Runtime::builder()
        .path(format!("/dev/shm/rdx-fabric-probe-{}", std::process::id()))
        .code_size(1 << 16)
        .scratch_size(1 << 18)
        .build()
        .expect("region");
    let local = ShmTransport::open(rt.path()).unwrap();
    let scratch = local.info().section(SectionId::Scratch).offset;
    let token = Token::generate().unwrap();
    println!(
        "{:<16} {:<10} {:<22} {:<22}",
        "provider", "progress", "write (host idle)", "CAS (host idle)"
    );
    for p in &providers {
        for progress in [ProgressThread::Never, ProgressThread::Always] {
            let label = if progress == ProgressThread::Never {
                "none"
            } else {
                "thread"
            };
            let server = match serve(
                rt.path(),
                ServeConfig {
                    bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
                    bootstrap_port: 0,
                    provider: Provider::from_flag(Some(p)),
                    token: token.clone(),
                    progress,
                    barrier: false,
                },
            ) {
                Ok(s) => s,
                Err(e) => {
                    println!("{p:<16} {label:<10} unavailable: {e}");
                    break;
                }
            };
            let options = ConnectOptions {
                op_timeout: Duration::from_secs(1),
                ..Default::default()
            };
            let t = match FabricTransport::connect(server.bootstrap_addr(), &token, &options) {
                Ok(t) => t,
                Err(e) => {
                    println!("{p:<16} {label:<10} connect failed: {e}");
                    continue;
                }
            };
            local.write_u64(scratch, 0).unwrap();
            let write = match t.write_u64(scratch, 7) {
                Ok(()) if local.read_u64(scratch).unwrap() == 7 => "landed".to_string(),
                Ok(()) => "completed, not visible".into(),
                Err(e) => format!("stalled ({})", short(&e.to_string())),
            };
            local.write_u64(scratch + 8, 5).unwrap();
            let cas = match t.compare_and_swap(scratch + 8, 5, 6) {
                Ok(5) if local.read_u64(scratch + 8).unwrap() == 6 => "landed".to_string(),
                Ok(v) => format!("wrong result {v}"),
                Err(e) => format!("stalled ({})", short(&e.to_string())),
            };
            let started = std::time::Instant::now();
            let mut reads = 0u32;
            while reads < 200 && t.read_u64(scratch).is_ok() {
                reads += 1;
            }
            let per_read = started.elapsed() / reads.max(1);
            println!("{p:<16} {label:<10} {write:<22} {cas:<22} read_u64 {per_read:.1?}");
        }
    }
    let _ = rt.unlink();
}

fn short(s: &str) -> &str {
    if s.contains("no completion") {
        "no completion in 1 s"
    } else {
        s
    }
}
