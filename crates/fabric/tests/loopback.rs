//! The fabric transport against a real region on loopback: every operation is checked
//! through an independent shared-memory view of the same file.

use rdx_fabric::{
    serve, ConnectOptions, FabricError, FabricServer, FabricTransport, ProgressThread, Provider,
    ServeConfig, Token,
};
use rdx_region::layout::SectionId;
use rdx_runtime::Runtime;
use rdx_test_support::ShmPath;
use rdx_transport::shm::ShmTransport;
use rdx_transport::{Op, Transport, TransportError};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// A region (not registered: serving needs no host threads) at `region`.
fn runtime(region: &ShmPath) -> Runtime {
    Runtime::builder()
        .path(region.path())
        .code_size(1 << 20)
        .scratch_size(1 << 18)
        .build()
        .unwrap()
}

fn config(provider: &str, token: &Token, progress: ProgressThread) -> ServeConfig {
    ServeConfig {
        bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
        bootstrap_port: 0,
        provider: Provider::from_flag(Some(provider)),
        token: token.clone(),
        progress,
        barrier: true,
    }
}

fn options() -> ConnectOptions {
    ConnectOptions {
        op_timeout: Duration::from_secs(2),
        ..ConnectOptions::default()
    }
}

fn exercise(t: &FabricTransport, local: &ShmTransport) {
    let info = local.info();
    assert_eq!(t.info().sections, info.sections);
    assert_eq!(t.region_len(), local.region_len());

    // A write larger than one chunk and the staging buffer's queue, into the code arena
    // (which the host maps read+execute only).
    let code = info.section(SectionId::Code);
    let data: Vec<u8> = (0..code.size.min(300_000) as usize)
        .map(|i| (i * 7 + 3) as u8)
        .collect();
    t.write(code.offset + 5, &data).unwrap();
    let mut seen = vec![0u8; data.len()];
    local.read(code.offset + 5, &mut seen).unwrap();
    assert!(seen == data, "remote write landed differently");
    let mut back = vec![0u8; data.len()];
    t.read(code.offset + 5, &mut back).unwrap();
    assert!(back == data, "remote read differs");

    let scratch = info.section(SectionId::Scratch).offset;
    t.write_u64(scratch, 41).unwrap();
    assert_eq!(local.read_u64(scratch).unwrap(), 41);
    assert_eq!(
        t.compare_and_swap(scratch, 40, 1).unwrap(),
        41,
        "failed CAS"
    );
    assert_eq!(local.read_u64(scratch).unwrap(), 41);
    assert_eq!(t.compare_and_swap(scratch, 41, 42).unwrap(), 41);
    assert_eq!(local.read_u64(scratch).unwrap(), 42);
    assert_eq!(t.fetch_and_add(scratch, 8).unwrap(), 42);
    assert_eq!(t.read_u64(scratch).unwrap(), 50);
    local.write_u64(scratch + 8, 7).unwrap();
    assert_eq!(t.read_u64(scratch + 8).unwrap(), 7);

    // A batch: a write then a dependent publication-like CAS in the next batch.
    let mut buf = [0u8; 16];
    let mut ops = [
        Op::Write {
            offset: scratch + 64,
            data: &[9u8; 24],
        },
        Op::FetchAndAdd {
            offset: scratch + 8,
            delta: 1,
            previous: 0,
        },
        Op::Read {
            offset: scratch,
            buf: &mut buf,
        },
    ];
    t.submit(&mut ops).unwrap();
    assert!(matches!(ops[1], Op::FetchAndAdd { previous: 7, .. }));
    assert_eq!(u64::from_ne_bytes(buf[..8].try_into().unwrap()), 50);
    t.fence().unwrap();
    let mut ops = [Op::CompareAndSwap {
        offset: scratch + 64,
        expected: 0x0909090909090909,
        new: 1,
        previous: 0,
    }];
    t.submit(&mut ops).unwrap();
    assert!(matches!(
        ops[0],
        Op::CompareAndSwap {
            previous: 0x0909090909090909,
            ..
        }
    ));
    assert_eq!(local.read_u64(scratch + 64).unwrap(), 1);

    // Bad input.
    let len = t.region_len();
    assert!(matches!(
        t.read(len - 4, &mut [0u8; 8]),
        Err(TransportError::OutOfBounds { .. })
    ));
    assert!(matches!(
        t.write(u64::MAX, &[1]),
        Err(TransportError::OutOfBounds { .. })
    ));
    assert!(matches!(
        t.compare_and_swap(scratch + 4, 0, 0),
        Err(TransportError::Misaligned { .. })
    ));
    assert!(matches!(
        t.fetch_and_add(len, 1),
        Err(TransportError::OutOfBounds { .. })
    ));
    // The transport still works after refusing bad input.
    assert_eq!(t.read_u64(scratch).unwrap(), 50);
}

fn serve_and_connect(
    rt: &Runtime,
    provider: &str,
    progress: ProgressThread,
) -> (FabricServer, FabricTransport) {
    let token = Token::generate().unwrap();
    let server = serve(rt.path(), config(provider, &token, progress)).unwrap();
    let t = FabricTransport::connect(server.bootstrap_addr(), &token, &options()).unwrap();
    assert_eq!(t.provider(), server.provider());
    (server, t)
}

#[test]
fn sockets_provider_serves_every_operation_with_the_host_idle() {
    let region = ShmPath::new("fabric-test-sockets");
    let rt = runtime(&region);
    // No progress thread: the sockets provider's own thread must complete everything.
    let (server, t) = serve_and_connect(&rt, "sockets", ProgressThread::Never);
    assert!(!server.has_progress_thread());
    let local = ShmTransport::open(rt.path()).unwrap();
    exercise(&t, &local);
    drop((t, server));
    rt.unlink().unwrap();
}

#[test]
fn tcp_rxm_provider_serves_with_a_progress_thread() {
    let region = ShmPath::new("fabric-test-tcp");
    let rt = runtime(&region);
    let (server, t) = serve_and_connect(&rt, "tcp;ofi_rxm", ProgressThread::WhenNeeded);
    assert!(
        server.manual_progress() && server.has_progress_thread(),
        "{server:?}"
    );
    let local = ShmTransport::open(rt.path()).unwrap();
    exercise(&t, &local);
    drop((t, server));
    rt.unlink().unwrap();
}

#[test]
fn wrong_token_is_refused_and_keys_change_on_restart() {
    let region = ShmPath::new("fabric-test-auth");
    let rt = runtime(&region);
    let token = Token::generate().unwrap();
    let server = serve(
        rt.path(),
        config("sockets", &token, ProgressThread::WhenNeeded),
    )
    .unwrap();
    let wrong = Token::generate().unwrap();
    let r = FabricTransport::connect(server.bootstrap_addr(), &wrong, &options());
    assert!(matches!(r, Err(FabricError::Refused { .. })), "{r:?}");
    let mut truncated = token.as_bytes().to_vec();
    truncated.pop();
    let r = FabricTransport::connect(
        server.bootstrap_addr(),
        &Token::from_hex(
            &truncated
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        )
        .unwrap(),
        &options(),
    );
    assert!(matches!(r, Err(FabricError::Refused { .. })), "{r:?}");
    assert_eq!(
        server
            .stats()
            .refused
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    let t = FabricTransport::connect(server.bootstrap_addr(), &token, &options()).unwrap();
    let (key, session) = (server.key(), server.session());
    assert_eq!(t.session(), session);
    drop((t, server));

    let server = serve(
        rt.path(),
        config("sockets", &token, ProgressThread::WhenNeeded),
    )
    .unwrap();
    assert_ne!(server.key(), key, "the MR key survived a restart");
    assert_ne!(server.session(), session);
    drop(server);
    rt.unlink().unwrap();
}

#[test]
fn rotation_revokes_the_old_token_and_every_key_handed_out_while_the_node_keeps_serving() {
    let region = ShmPath::new("fabric-test-rotate");
    let rt = runtime(&region);
    let old = Token::generate().unwrap();
    let mut server = serve(
        rt.path(),
        config("sockets", &old, ProgressThread::WhenNeeded),
    )
    .unwrap();
    let holder = FabricTransport::connect(server.bootstrap_addr(), &old, &options()).unwrap();
    let scratch = holder.info().section(SectionId::Scratch).offset;
    holder.write_u64(scratch, 7).unwrap();
    let (key, session) = (server.key(), server.session());

    let new = Token::generate().unwrap();
    server.rotate(new.clone()).unwrap();
    assert_ne!(server.key(), key);
    assert_ne!(server.session(), session);
    // The old key no longer reaches the region, for reads or writes.
    let started = Instant::now();
    assert!(holder.read_u64(scratch).is_err(), "the old key still reads");
    assert!(
        holder.write_u64(scratch, 666).is_err(),
        "the old key still writes"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // The old token is refused; the new one gets the new key and sees the region intact.
    let r = FabricTransport::connect(server.bootstrap_addr(), &old, &options());
    assert!(matches!(r, Err(FabricError::Refused { .. })), "{r:?}");
    let fresh = FabricTransport::connect(server.bootstrap_addr(), &new, &options()).unwrap();
    assert_eq!(fresh.session(), server.session());
    assert_eq!(fresh.read_u64(scratch).unwrap(), 7);
    fresh.write_u64(scratch, 8).unwrap();
    let local = ShmTransport::open(rt.path()).unwrap();
    assert_eq!(local.read_u64(scratch).unwrap(), 8);
    drop((holder, fresh, server));
    rt.unlink().unwrap();
}

#[test]
fn a_node_that_stops_serving_gives_a_clear_error_quickly() {
    let region = ShmPath::new("fabric-test-dead");
    let rt = runtime(&region);
    let (server, t) = serve_and_connect(&rt, "sockets", ProgressThread::WhenNeeded);
    let scratch = t.info().section(SectionId::Scratch).offset;
    t.write_u64(scratch, 1).unwrap();
    drop(server);
    let started = Instant::now();
    let e = t.read_u64(scratch).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert!(matches!(e, TransportError::Io { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("fabric://"), "{msg}");
    // Later operations fail at once with the same cause.
    let started = Instant::now();
    assert!(t.write_u64(scratch, 2).is_err());
    assert!(started.elapsed() < Duration::from_millis(100));
    rt.unlink().unwrap();
}

#[test]
fn a_missing_or_corrupt_region_is_refused_by_serve() {
    let token = Token::generate().unwrap();
    let r = serve(
        "/dev/shm/rdx-fabric-no-such-region",
        config("sockets", &token, ProgressThread::Never),
    );
    assert!(matches!(r, Err(FabricError::Region { .. })), "{r:?}");
    let junk = ShmPath::new("fabric-test-junk");
    std::fs::write(junk.path(), vec![0xa5u8; 8192]).unwrap();
    let r = serve(
        junk.path(),
        config("sockets", &token, ProgressThread::Never),
    );
    assert!(matches!(r, Err(FabricError::Region { .. })), "{r:?}");
}

#[test]
fn unknown_provider_is_named_in_the_error() {
    let region = ShmPath::new("fabric-test-noprov");
    let rt = runtime(&region);
    let token = Token::generate().unwrap();
    let r = serve(
        rt.path(),
        config("no-such-provider", &token, ProgressThread::Never),
    );
    let e = r.unwrap_err();
    assert!(matches!(e, FabricError::NoProvider { .. }), "{e}");
    assert!(e.to_string().contains("no-such-provider"), "{e}");
    rt.unlink().unwrap();
}
