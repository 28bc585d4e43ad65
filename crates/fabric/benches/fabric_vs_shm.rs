//! Remote read, write, compare-and-swap and deploy-like (write N KB, then one 8-byte CAS)
//! latency over the fabric on loopback (sockets, and tcp;ofi_rxm with its progress thread)
//! against the shared-memory transport, in one run, printed with ratios.
//!
//! `cargo bench -p rdx-fabric --bench fabric_vs_shm`

use rdx_fabric::{
    serve, ConnectOptions, FabricTransport, ProgressThread, Provider, ServeConfig, Token,
};
use rdx_region::layout::SectionId;
use rdx_runtime::Runtime;
use rdx_transport::shm::ShmTransport;
use rdx_transport::Transport;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// Median and 99th percentile of `iters` timed calls, after a warm-up.
fn measure(iters: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..iters / 10 + 1 {
        f();
    }
    let mut samples: Vec<Duration> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    samples.sort();
    (samples[iters / 2], samples[iters * 99 / 100])
}

/// One timed operation: (transport, code offset, scratch offset).
type Run = Box<dyn Fn(&dyn Transport, u64, u64)>;

struct Case {
    name: String,
    iters: usize,
    run: Run,
}

fn cases() -> Vec<Case> {
    let mut v = vec![
        Case {
            name: "read 8 B".into(),
            iters: 2000,
            run: Box::new(|t, _code, scratch| {
                std::hint::black_box(t.read_u64(scratch).unwrap());
            }),
        },
        Case {
            name: "write 8 B".into(),
            iters: 2000,
            run: Box::new(|t, _code, scratch| t.write_u64(scratch + 8, 1).unwrap()),
        },
        Case {
            name: "compare-and-swap".into(),
            iters: 2000,
            run: Box::new(|t, _code, scratch| {
                let v = t.read_u64(scratch + 16).unwrap();
                let _ = std::hint::black_box(t.compare_and_swap(scratch + 16, v, v + 1).unwrap());
            }),
        },
        Case {
            name: "read 4 KB".into(),
            iters: 1000,
            run: Box::new(|t, code, _scratch| {
                let mut b = vec![0u8; 4096];
                t.read(code, &mut b).unwrap();
                std::hint::black_box(b);
            }),
        },
    ];
    for kb in [10usize, 80, 760] {
        // 1.3K, 10K and 95K eBPF instructions' worth of native code is of this order.
        let data = vec![0x90u8; kb * 1024];
        v.push(Case {
            name: format!("deploy: write {kb} KB + CAS"),
            iters: if kb > 100 { 60 } else { 300 },
            run: Box::new(move |t, code, scratch| {
                t.write(code, &data).unwrap();
                t.fence().unwrap();
                let v = t.read_u64(scratch + 24).unwrap();
                t.compare_and_swap(scratch + 24, v, v + 1).unwrap();
            }),
        });
    }
    v
}

fn main() {
    let rt = Runtime::builder()
        .path(format!("/dev/shm/rdx-fabric-bench-{}", std::process::id()))
        .code_size(1 << 20)
        .scratch_size(1 << 18)
        .build()
        .expect("region");
    rt.register().expect("register");
    let token = Token::generate().unwrap();
    let shm = ShmTransport::open(rt.path()).unwrap();
    let code = shm.info().section(SectionId::Code).offset;
    let scratch = shm.info().section(SectionId::Scratch).offset;

    let mut servers = Vec::new();
    let mut fabrics: Vec<(String, Box<dyn Transport>)> = vec![("shm".into(), Box::new(shm))];
    for provider in ["sockets", "tcp;ofi_rxm"] {
        let server = serve(
            rt.path(),
            ServeConfig {
                bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
                bootstrap_port: 0,
                provider: Provider::from_flag(Some(provider)),
                token: token.clone(),
                progress: ProgressThread::WhenNeeded,
                barrier: false,
            },
        )
        .expect("serve");
        let t =
            FabricTransport::connect(server.bootstrap_addr(), &token, &ConnectOptions::default())
                .expect("connect");
        let label = format!(
            "{provider}{}",
            if server.has_progress_thread() {
                " (+progress thread)"
            } else {
                ""
            }
        );
        fabrics.push((label, Box::new(t)));
        servers.push(server);
    }

    println!("rdx-fabric: transport latency on loopback, median (p99), ratio to shm median");
    println!(
        "{:<28} {:>22} {:>34} {:>34}",
        "operation", fabrics[0].0, fabrics[1].0, fabrics[2].0
    );
    for case in cases() {
        let mut row = format!("{:<28}", case.name);
        let mut base = None;
        for (_, t) in &fabrics {
            let (med, p99) = measure(case.iters, || (case.run)(t.as_ref(), code, scratch));
            let cell = format!("{:.2?} ({:.2?})", med, p99);
            match base {
                None => {
                    base = Some(med);
                    row += &format!(" {cell:>22}");
                }
                Some(b) => {
                    let ratio = med.as_secs_f64() / b.as_secs_f64().max(1e-9);
                    row += &format!(" {:>34}", format!("{cell} {ratio:>8.2}x"));
                }
            }
        }
        println!("{row}");
    }
    drop(fabrics);
    drop(servers);
    let _ = rt.teardown(Duration::from_millis(100));
    let _ = rt.unlink();
}
