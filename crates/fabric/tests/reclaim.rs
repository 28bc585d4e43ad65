//! Reclamation of old code over the fabric: the control plane rings the node's barrier
//! service (`remote_barrier`), reads the thread epochs remotely and frees what no thread can
//! run; a node serving without the service refuses, and nothing is freed.

use rdx_control::{AttachOptions, CodeFlow, Extension};
use rdx_fabric::{serve, ConnectOptions, FabricTransport, ProgressThread, Provider, ServeConfig};
use rdx_fabric::{FabricServer, Token};
use rdx_test_support::eim::{self, MAP_AND_RINGBUF_HELPERS};
use rdx_test_support::LocalHost;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

fn extension(name: &str) -> Extension {
    let obj = rdx_bpf::loader::load(&rdx_testdata::object(&format!("control/{name}"))).unwrap();
    Extension::from_object(&obj, None).unwrap()
}

fn node(name: &str, barrier: bool) -> (LocalHost, FabricServer, Token) {
    let eim = eim::on_request(&MAP_AND_RINGBUF_HELPERS);
    let rt = LocalHost::start(&format!("fabric-reclaim-{name}"), &eim);
    let token = Token::generate().unwrap();
    let server = serve(
        rt.path(),
        ServeConfig {
            provider: Provider::from_flag(Some("tcp;ofi_rxm")),
            progress: ProgressThread::WhenNeeded,
            barrier,
            ..ServeConfig::new(IpAddr::V4(Ipv4Addr::LOCALHOST), token.clone())
        },
    )
    .unwrap();
    (rt, server, token)
}

fn attach(server: &FabricServer, token: &Token) -> CodeFlow {
    let options = ConnectOptions {
        op_timeout: Duration::from_secs(2),
        barrier_timeout: Duration::from_secs(5),
        ..ConnectOptions::default()
    };
    let t = FabricTransport::connect(server.bootstrap_addr(), token, &options).unwrap();
    let address = format!("fabric://{}", server.bootstrap_addr());
    CodeFlow::attach(Box::new(t), &address, AttachOptions::default()).unwrap()
}

#[test]
fn old_code_is_reclaimed_over_the_fabric() {
    let (rt, server, token) = node("with", true);
    assert!(server.has_barrier_service());
    let mut cf = attach(&server, &token);
    assert_eq!(
        cf.deploy("on_request", &extension("plus_one"), None, None)
            .unwrap()
            .version,
        1
    );
    // A host thread takes a thread slot and runs v1, so reclamation has an epoch to read.
    assert_eq!(rt.request(4), (1, 5));
    assert_eq!(
        cf.deploy("on_request", &extension("times_two"), None, None)
            .unwrap()
            .version,
        2
    );
    assert_eq!(rt.request(4), (2, 8));
    let [(code_free_before, _), _] = cf.arena_usage().unwrap();

    let started = Instant::now();
    let freed = cf.reclaim(0).unwrap();
    eprintln!("reclaim over the fabric took {:?}", started.elapsed());
    assert_eq!(freed.code_versions, 1, "{freed:?}");
    assert!(freed.code_bytes > 0);
    let [(code_free_after, _), _] = cf.arena_usage().unwrap();
    assert_eq!(code_free_after, code_free_before + freed.code_bytes);
    // The active version is untouched and keeps running.
    assert_eq!(rt.request(6), (2, 12));
    // Rings are counted: several barriers in a row each wait for their own.
    for _ in 0..3 {
        cf.transport().remote_barrier().unwrap();
    }
    drop(cf);
    drop(server);
}

#[test]
fn without_the_barrier_service_reclamation_is_refused_and_frees_nothing() {
    let (rt, server, token) = node("without", false);
    assert!(!server.has_barrier_service());
    let mut cf = attach(&server, &token);
    cf.deploy("on_request", &extension("plus_one"), None, None)
        .unwrap();
    cf.deploy("on_request", &extension("times_two"), None, None)
        .unwrap();
    let [(code_free_before, _), _] = cf.arena_usage().unwrap();
    let e = cf.reclaim(0).unwrap_err().to_string();
    assert!(
        e.contains("barrier service") && e.contains("fabric://"),
        "{e}"
    );
    let [(code_free_after, _), _] = cf.arena_usage().unwrap();
    assert_eq!(code_free_after, code_free_before);
    assert_eq!(rt.request(3), (2, 6));
    drop(cf);
    drop(server);
}
