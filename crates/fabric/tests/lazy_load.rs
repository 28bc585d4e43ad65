//! libfabric is loaded on first use, not at process start: its providers' constructors
//! sleep for a fraction of a second, which every `rdx` command and every host linking the
//! runtime would otherwise pay. One test in its own binary, so that no other test has loaded
//! libfabric into the process first.

use rdx_fabric::{serve, Provider, ServeConfig, Token};
use std::net::{IpAddr, Ipv4Addr};

fn libfabric_mapped() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps is readable")
        .lines()
        .any(|l| l.contains("libfabric.so"))
}

#[test]
fn libfabric_is_loaded_only_when_an_endpoint_is_opened() {
    assert!(
        !libfabric_mapped(),
        "libfabric is mapped before any fabric operation: it is linked, not loaded on use"
    );
    // Serving a region that does not exist opens no endpoint: still not loaded.
    let token = Token::generate().unwrap();
    let config = ServeConfig {
        bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
        bootstrap_port: 0,
        provider: Provider::from_flag(Some("no-such-provider")),
        token,
        progress: rdx_fabric::ProgressThread::Never,
        barrier: true,
    };
    let missing = std::path::Path::new("/dev/shm/rdx-lazy-load-test-missing-region");
    assert!(serve(missing, config.clone()).is_err());
    assert!(!libfabric_mapped(), "a refused region loaded libfabric");
    // Asking for a provider opens an endpoint: now it is loaded, and the unknown provider is
    // still reported by name (the loaded library answered).
    let region = rdx_test_support::ShmPath::new("fabric-lazy-load");
    let rt = rdx_runtime::Runtime::builder()
        .path(region.path())
        .code_size(1 << 20)
        .scratch_size(1 << 18)
        .build()
        .unwrap();
    let e = serve(rt.path(), config).unwrap_err();
    assert!(e.to_string().contains("no-such-provider"), "{e}");
    assert!(
        libfabric_mapped(),
        "opening an endpoint did not load libfabric"
    );
    rt.unlink().unwrap();
}
