//! Fixtures shared by rdx's integration tests and benchmarks, so that each test says what it
//! checks instead of how to start a host:
//!
//! - [`scratch`]: unique `/dev/shm` region names and temporary directories per test, removed
//!   on drop (also when the test panics), so a run leaves nothing behind.
//! - [`eim`]: EIM specs for hooks whose context is `struct { u64 value; u64 out; }`, as text
//!   or written to a file.
//! - [`host`]: an in-process host (the test process links the runtime) for that context.
//! - [`process`]: host processes started and awaited until their region is registered,
//!   driven by stdin/stdout lines with a timeout on every reply; killed and their region
//!   file removed on drop. [`process::test_host`] builds and finds `rdx-test-host` (crate
//!   `rdx-test-hosts`), the host binary every crate's tests start; [`process::example_bin`]
//!   finds a built example.
//! - [`rdx`]: the `rdx` binary run with arguments, with a panic message that shows its
//!   stderr when it does not do what the test expects.
//! - [`netns`]: network namespaces joined by veth pairs, deleted on drop.
//! - [`c_host`]: C hosts compiled against `include/rdx.h` and the runtime's static library.
//! - [`programs`]: generated eBPF programs for the verifier and deploy benches.
//! - [`stranger`]: another, unprivileged local user, for the attack tests.
//!
//! **For tests and benches only.** This crate is a `[dev-dependencies]` entry and must never
//! be a normal dependency of a library or binary: it panics instead of returning errors, and
//! a data-plane host must link nothing but the runtime (the agentless tests check that the
//! host binaries carry no control-plane code).

pub mod c_host;
pub mod eim;
pub mod host;
pub mod netns;
pub mod process;
pub mod programs;
pub mod rdx;
pub mod scratch;
pub mod stranger;

pub use eim::EimSpec;
pub use host::{LocalHost, ValueOut};
pub use netns::NetnsStar;
pub use process::{example_bin, test_host, HostProcess, LineProcess};
pub use rdx::Rdx;
pub use scratch::{ScratchDir, ShmPath};
pub use stranger::Stranger;
