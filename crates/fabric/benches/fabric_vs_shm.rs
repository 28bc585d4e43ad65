//! One run, printed with ratios:
//!
//! 1. Remote read, write and compare-and-swap latency (and deploy-like write N KB + CAS
//!    sequences) over the fabric on loopback — `sockets` (no rdx thread on the node) and
//!    `tcp;ofi_rxm` (with its progress-only thread) — against the shared-memory transport,
//!    and against the kernel agent baseline for state access: `bpf(BPF_MAP_LOOKUP_ELEM)` /
//!    `bpf(BPF_MAP_UPDATE_ELEM)` on an array map (the kernel has no remote compare-and-swap).
//! 2. Full deploy of the same clang-compiled object (`bpf/fabric/deploy_bench.c`): rdx
//!    (load the object, verify, JIT, link, write code and maps, publish with one CAS) over shm
//!    and over both fabric providers, against the kernel agent baseline: libbpf opening the
//!    object and `BPF_PROG_LOAD` (the kernel's verifier and JIT) plus its map creation.
//!
//! `cargo bench -p rdx-fabric --bench fabric_vs_shm` (root for the kernel baseline; without
//! it that column prints why it is missing).

use rdx_control::{AttachOptions, CodeFlow, Extension};
use rdx_fabric::{
    serve, ConnectOptions, FabricTransport, ProgressThread, Provider, ServeConfig, Token,
};
use rdx_region::layout::SectionId;
use rdx_runtime::Runtime;
use rdx_test_support::{eim, LocalHost, ShmPath};
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

const PROVIDERS: [&str; 2] = ["sockets", "tcp;ofi_rxm"];

fn cell(med: Duration, p99: Duration) -> String {
    format!("{med:.2?} ({p99:.2?})")
}

fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64().max(1e-12))
}

/// The kernel agent's state access: one `bpf()` map syscall on an 8-byte array value.
fn kernel_state_access() -> Result<[(Duration, Duration); 2], String> {
    rdx_kernel::probe().map_err(|e| e.to_string())?;
    let map = rdx_kernel::KernelMap::create(&rdx_kernel::MapSpec::array("rdx_fab_bench", 4, 8, 4))
        .map_err(|e| e.to_string())?;
    let key = 1u32.to_ne_bytes();
    let read = measure(2000, || {
        std::hint::black_box(map.lookup(&key).unwrap());
    });
    let write = measure(2000, || map.update(&key, &7u64.to_ne_bytes(), 0).unwrap());
    Ok([read, write])
}

fn primitives(rt: &Runtime, token: &Token) {
    let shm = ShmTransport::open(rt.path()).unwrap();
    let code = shm.info().section(SectionId::Code).offset;
    let scratch = shm.info().section(SectionId::Scratch).offset;

    let mut servers = Vec::new();
    let mut transports: Vec<(String, Box<dyn Transport>)> = vec![("shm".into(), Box::new(shm))];
    for provider in PROVIDERS {
        let server = serve(
            rt.path(),
            ServeConfig {
                provider: Provider::from_flag(Some(provider)),
                progress: ProgressThread::WhenNeeded,
                ..ServeConfig::new(IpAddr::V4(Ipv4Addr::LOCALHOST), token.clone())
            },
        )
        .expect("serve");
        let t =
            FabricTransport::connect(server.bootstrap_addr(), token, &ConnectOptions::default())
                .expect("connect");
        let label = format!(
            "{provider}{}",
            if server.has_progress_thread() {
                " (+progress thread)"
            } else {
                ""
            }
        );
        transports.push((label, Box::new(t)));
        servers.push(server);
    }
    let kernel = kernel_state_access();
    if let Err(e) = &kernel {
        println!("kernel baseline unavailable: {e}");
    }

    println!("1. transport latency on loopback: median (p99); ratios = fabric median / shm median and / kernel bpf() median");
    print!(
        "{:<26} {:>22} {:>22}",
        "operation", "kernel bpf() map call", "shm"
    );
    for (label, _) in &transports[1..] {
        print!(" {label:>30} {:>8} {:>9}", "/shm", "/kernel");
    }
    println!();
    for (index, case) in cases().into_iter().enumerate() {
        let kernel_cell = match (&kernel, index) {
            (Ok(k), 0 | 1) => Some(k[index]),
            _ => None,
        };
        print!(
            "{:<26} {:>22}",
            case.name,
            kernel_cell.map_or("-".into(), |(m, p)| cell(m, p))
        );
        let mut shm_median = Duration::ZERO;
        for (i, (_, t)) in transports.iter().enumerate() {
            let (med, p99) = measure(case.iters, || (case.run)(t.as_ref(), code, scratch));
            if i == 0 {
                shm_median = med;
                print!(" {:>22}", cell(med, p99));
            } else {
                print!(
                    " {:>30} {:>8} {:>9}",
                    cell(med, p99),
                    ratio(med, shm_median),
                    kernel_cell.map_or("-".into(), |(k, _)| ratio(med, k))
                );
            }
        }
        println!();
    }
    drop(transports);
    drop(servers);
}

/// Counts the calls (each one round trip over the fabric) a transport receives.
struct Counting<T> {
    inner: T,
    calls: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<T: Transport> Counting<T> {
    fn count(&self) {
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl<T: Transport> Transport for Counting<T> {
    fn region_len(&self) -> u64 {
        self.inner.region_len()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), rdx_transport::TransportError> {
        self.count();
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), rdx_transport::TransportError> {
        self.count();
        self.inner.write(offset, data)
    }
    fn read_u64(&self, offset: u64) -> Result<u64, rdx_transport::TransportError> {
        self.count();
        self.inner.read_u64(offset)
    }
    fn write_u64(&self, offset: u64, value: u64) -> Result<(), rdx_transport::TransportError> {
        self.count();
        self.inner.write_u64(offset, value)
    }
    fn compare_and_swap(
        &self,
        offset: u64,
        expected: u64,
        new: u64,
    ) -> Result<u64, rdx_transport::TransportError> {
        self.count();
        self.inner.compare_and_swap(offset, expected, new)
    }
    fn fetch_and_add(&self, offset: u64, delta: u64) -> Result<u64, rdx_transport::TransportError> {
        self.count();
        self.inner.fetch_and_add(offset, delta)
    }
    fn fence(&self) -> Result<(), rdx_transport::TransportError> {
        self.inner.fence()
    }
    fn remote_barrier(&self) -> Result<(), rdx_transport::TransportError> {
        self.count();
        self.inner.remote_barrier()
    }
    fn equals(&self, offset: u64, bytes: &[u8]) -> Result<bool, rdx_transport::TransportError> {
        self.count();
        self.inner.equals(offset, bytes)
    }
    fn submit(
        &self,
        ops: &mut [rdx_transport::Op<'_>],
    ) -> Result<(), rdx_transport::TransportError> {
        self.count();
        self.inner.submit(ops)
    }
}

/// Deploys `object` `iters` times through `cf` (object bytes to published), reclaiming the
/// old versions between rounds, untimed.
fn rdx_deploys(
    cf: &mut CodeFlow,
    calls: &std::sync::atomic::AtomicU64,
    object: &std::path::Path,
    iters: usize,
) -> (Duration, Duration, u64) {
    let mut deployed = 0usize;
    let mut samples = Vec::with_capacity(iters);
    let mut per_deploy = Vec::with_capacity(iters);
    for round in 0..iters + 2 {
        let before = calls.load(std::sync::atomic::Ordering::Relaxed);
        let t = Instant::now();
        let bytes = std::fs::read(object).unwrap();
        let obj = rdx_bpf::loader::load(&bytes).unwrap();
        let ext = Extension::from_object(&obj, Some("deploy_bench")).unwrap();
        cf.deploy("on_request", &ext, None, None).unwrap();
        let elapsed = t.elapsed();
        // Two warm-up deploys.
        if round >= 2 {
            samples.push(elapsed);
            per_deploy.push(calls.load(std::sync::atomic::Ordering::Relaxed) - before);
        }
        deployed += 1;
        if deployed.is_multiple_of(8) {
            cf.reclaim(1).unwrap();
        }
    }
    samples.sort();
    per_deploy.sort();
    (
        samples[iters / 2],
        samples[iters * 99 / 100],
        per_deploy[iters / 2],
    )
}

fn kernel_deploys(object: &std::path::Path, iters: usize) -> Result<(Duration, Duration), String> {
    rdx_kernel::probe().map_err(|e| e.to_string())?;
    let mut first = Some(());
    let mut error = None;
    let r = measure(iters, || match rdx_kernel::KernelObject::open(object) {
        Ok(o) => drop(std::hint::black_box(o)),
        Err(e) => {
            if first.take().is_some() {
                error = Some(e.to_string());
            }
        }
    });
    match error {
        Some(e) => Err(e),
        None => Ok(r),
    }
}

fn full_deploys(rt: &Runtime, token: &Token) {
    const ITERS: usize = 40;
    let object = rdx_testdata::object_path("fabric/deploy_bench");
    let insns = rdx_bpf::loader::load(&std::fs::read(&object).unwrap())
        .unwrap()
        .programs[0]
        .insns
        .len();
    let kernel = kernel_deploys(&object, ITERS);
    let mut rows: Vec<(String, (Duration, Duration, u64))> = Vec::new();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counting = |inner| Counting {
        inner,
        calls: calls.clone(),
    };
    let address = format!("shm:{}", rt.path().display());
    let shm = counting(ShmTransport::open(rt.path()).unwrap());
    let mut cf = CodeFlow::attach(Box::new(shm), &address, AttachOptions::default()).unwrap();
    rows.push((
        "rdx over shm".into(),
        rdx_deploys(&mut cf, &calls, &object, ITERS),
    ));
    drop(cf);
    for provider in PROVIDERS {
        let server = serve(
            rt.path(),
            ServeConfig {
                provider: Provider::from_flag(Some(provider)),
                ..ServeConfig::new(IpAddr::V4(Ipv4Addr::LOCALHOST), token.clone())
            },
        )
        .expect("serve");
        let t =
            FabricTransport::connect(server.bootstrap_addr(), token, &ConnectOptions::default())
                .expect("connect");
        let address = format!("fabric://{}", server.bootstrap_addr());
        let t = Counting {
            inner: t,
            calls: calls.clone(),
        };
        let mut cf = CodeFlow::attach(Box::new(t), &address, AttachOptions::default()).unwrap();
        rows.push((
            format!("rdx over fabric, {provider}"),
            rdx_deploys(&mut cf, &calls, &object, ITERS),
        ));
    }
    // The host really runs what was deployed last.
    let (r0, _) = rdx_test_support::host::request(rt, 0);
    assert!(
        r0 == 1 || r0 == 2,
        "deploy_bench returns XDP_DROP or XDP_PASS, got {r0}"
    );

    println!();
    println!(
        "2. full deploy of bpf/fabric/deploy_bench.c ({insns} eBPF instructions), object file to running: median (p99)"
    );
    let shm_median = rows[0].1 .0;
    println!(
        "{:<34} {:>24}   transport calls (round trips over the fabric) per deploy, median",
        "", ""
    );
    match &kernel {
        Ok((m, p)) => println!(
            "{:<34} {:>24}   (libbpf open: BPF_MAP_CREATE + BPF_PROG_LOAD, the kernel agent's path)",
            "kernel agent baseline",
            cell(*m, *p)
        ),
        Err(e) => println!("{:<34} unavailable: {e}", "kernel agent baseline"),
    }
    for (label, (m, p, round_trips)) in &rows {
        println!(
            "{label:<34} {:>24}   {:>8} of shm   {:>8} of kernel   {round_trips} calls",
            cell(*m, *p),
            ratio(*m, shm_median),
            kernel.as_ref().map_or("-".into(), |(k, _)| ratio(*m, *k))
        );
    }
}

fn main() {
    let token = Token::generate().unwrap();
    // Raw bytes are written anywhere in this one's code arena and scratchpad.
    let raw_region = ShmPath::new("fabric-bench-raw");
    let raw = Runtime::builder()
        .path(raw_region.path())
        .code_size(1 << 20)
        .scratch_size(1 << 18)
        .build()
        .expect("region");
    raw.register().expect("register");
    primitives(&raw, &token);
    let _ = raw.teardown(Duration::from_millis(100));
    drop(raw);
    drop(raw_region);

    let region = ShmPath::new("fabric-bench");
    let eim = eim::on_request(&["map_lookup_elem", "map_update_elem"]);
    let builder = LocalHost::builder(&region, &eim).code_size(4 << 20);
    full_deploys(&LocalHost::with(region, builder), &token);
}
