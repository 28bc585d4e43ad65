//! C hosts: programs written against `include/rdx.h` and linked with the runtime's static
//! library (crate `rdx-runtime-c`), as a C or C++ application embeds rdx.

use crate::ShmPath;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// The repository's root (for `include/` and `examples/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The C ABI's `librdx_runtime_c.a` (crate `rdx-runtime-c`) cargo built for this test run,
/// in the test binary's `deps/` (with the features the tested package's dev-dependency on
/// `rdx-runtime-c` asks for, e.g. `fabric`); the copy in
/// the target directory (made by a plain `cargo build`) only when there is none there.
pub fn runtime_static_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir");
    [deps, deps.parent().expect("target dir")]
        .iter()
        .map(|d| d.join("librdx_runtime_c.a"))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("librdx_runtime_c.a not built in {}", deps.display()))
}

/// Compiles the C host `source` into `exe` (warnings are errors) against `include/` and
/// [`runtime_static_lib`]. libfabric is linked too: the library has it when
/// `rdx-runtime-c`'s `fabric` feature is on, and the linker drops it otherwise.
pub fn compile(source: &Path, exe: &Path) {
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(repo_root().join("include"))
        .arg("-o")
        .arg(exe)
        .arg(source)
        .arg(runtime_static_lib())
        .args(["-lfabric", "-lpthread", "-ldl", "-lm"])
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "{} failed to compile", source.display());
}

/// A running C host serving `region`: on drop it gets SIGTERM (which a host built on the C
/// ABI answers with `rdx_teardown`), is waited for, and its region file is removed.
pub struct RunningCHost {
    /// The host process (killed and waited for on drop).
    pub child: Child,
    // After `child`: the file is removed once the host is gone.
    /// The region file it serves.
    pub region: ShmPath,
}

impl Drop for RunningCHost {
    fn drop(&mut self) {
        // SAFETY: signalling the child this guard owns, by its pid (not yet reaped, so the
        // pid is still its own).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}
