//! The test process as the host: it links the runtime, registers a region and runs requests
//! itself, while control planes (the test, or `rdx` processes) write into the region.

use crate::ShmPath;
use rdx_runtime::{HookSpec, Runtime, RuntimeBuilder};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The context of every test hook: `struct { u64 value; u64 out; }`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ValueOut {
    /// The hook's input, set by the caller of a run.
    pub value: u64,
    /// Where a program writes its result for the caller to read.
    pub out: u64,
}

/// A registered region with the hook `on_request` ([`ValueOut`], default return 0), torn
/// down and its file removed on drop (also when the test panics).
///
/// It dereferences to the [`Runtime`]; [`LocalHost::runtime`] hands out the `Arc` for
/// threads that run requests.
pub struct LocalHost {
    rt: Arc<Runtime>,
    // Dropped after the runtime is torn down: the file goes last.
    region: ShmPath,
}

impl LocalHost {
    /// The usual test region: `eim`, 1 MiB of code and of scratchpad, 4 thread slots and
    /// `on_request`. Add to it and pass it to [`LocalHost::with`].
    pub fn builder(region: impl AsRef<Path>, eim: &str) -> RuntimeBuilder {
        Runtime::builder()
            .path(region)
            .eim_spec(eim)
            .code_size(1 << 20)
            .scratch_size(1 << 20)
            .thread_slots(4)
            .hook(
                "on_request",
                HookSpec::for_context::<ValueOut>().default_return(0),
            )
    }

    /// The usual test region at a fresh `/dev/shm/rdx-{tag}-...`, registered.
    pub fn start(tag: &str, eim: &str) -> LocalHost {
        let region = ShmPath::new(tag);
        let builder = LocalHost::builder(&region, eim);
        LocalHost::with(region, builder)
    }

    /// Builds `builder` (whose path must be `region`) and registers the region.
    pub fn with(region: ShmPath, builder: RuntimeBuilder) -> LocalHost {
        let rt = builder
            .build()
            .unwrap_or_else(|e| panic!("creating the region {region}: {e}"));
        assert_eq!(
            rt.path(),
            region.path(),
            "the builder's path is the region's"
        );
        rt.register()
            .unwrap_or_else(|e| panic!("registering {region}: {e}"));
        LocalHost {
            rt: Arc::new(rt),
            region,
        }
    }

    /// The runtime, registered: run hooks through it.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    /// The region file (`/dev/shm/rdx-{tag}-...`).
    pub fn path(&self) -> &Path {
        self.region.path()
    }

    /// `shm:PATH`, what a control plane attaches to.
    pub fn address(&self) -> String {
        self.region.address()
    }

    /// Runs one `on_request` with `value`: `(r0, out)`.
    pub fn request(&self, value: u64) -> (u64, u64) {
        request(&self.rt, value)
    }
}

/// Runs one `on_request` of `rt` with `value`: `(r0, out)`.
pub fn request(rt: &Runtime, value: u64) -> (u64, u64) {
    let mut c = ValueOut { value, out: 0 };
    let r0 = rt.hook("on_request").expect("on_request").run(&mut c);
    (r0, c.out)
}

impl std::ops::Deref for LocalHost {
    type Target = Runtime;

    fn deref(&self) -> &Runtime {
        &self.rt
    }
}

impl Drop for LocalHost {
    fn drop(&mut self) {
        let _ = self.rt.teardown(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_host_runs_requests_and_leaves_no_region_file() {
        let host = LocalHost::start(
            "ts-local",
            &crate::eim::on_request(&crate::eim::MAP_HELPERS),
        );
        assert!(host.path().exists());
        assert!(host.address().starts_with("shm:/dev/shm/rdx-ts-local-"));
        // Nothing deployed: the hook's default.
        assert_eq!(host.request(5), (0, 0));
        assert_eq!(host.hooks(), ["on_request"]);
        let path = host.path().to_path_buf();
        drop(host);
        assert!(!path.exists());
    }
}
