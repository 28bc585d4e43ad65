//! Names and directories that belong to one test: unique across the tests of a run (which
//! share a process) and across concurrent runs (which do not share a pid), and removed when
//! the guard drops, whether the test passed or panicked.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// `{tag}-{pid}-{n}`: `n` counts the names this process handed out.
fn unique(tag: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A region file path `/dev/shm/rdx-{tag}-{pid}-{n}` of its own; the file, if something
/// created it, is removed on drop.
///
/// Hand it to whatever creates the region (a [`LocalHost`](crate::LocalHost), a
/// [`HostProcess`](crate::HostProcess), `Runtime::builder().path(..)`) and keep the guard for
/// as long as the region is used.
#[derive(Debug)]
pub struct ShmPath {
    path: PathBuf,
}

impl ShmPath {
    /// A fresh name for the test `tag`; a leftover file at that path is removed first.
    pub fn new(tag: &str) -> ShmPath {
        let path = PathBuf::from(format!("/dev/shm/rdx-{}", unique(tag)));
        // A name is never handed out twice by a process; a file there is a leftover of an
        // earlier run whose pid was reused.
        let _ = std::fs::remove_file(&path);
        ShmPath { path }
    }

    /// The region file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path as text, for command lines.
    pub fn as_str(&self) -> &str {
        self.path.to_str().expect("an ASCII path")
    }

    /// The control plane's address of the region: `shm:PATH`.
    pub fn address(&self) -> String {
        format!("shm:{}", self.path.display())
    }
}

impl AsRef<Path> for ShmPath {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl fmt::Display for ShmPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.path.display().fmt(f)
    }
}

impl Drop for ShmPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// An empty directory `$TMPDIR/rdx-{tag}-{pid}-{n}`, removed with its contents on drop.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Creates a fresh, empty directory for the test `tag`.
    pub fn new(tag: &str) -> ScratchDir {
        let path = std::env::temp_dir().join(format!("rdx-{}", unique(tag)));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        ScratchDir { path }
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` inside the directory.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    /// Writes `bytes` to `name` in this directory and returns its path.
    pub fn write(&self, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let p = self.join(name);
        std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
        p
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_removed_on_drop() {
        let (a, b) = (ShmPath::new("ts-unique"), ShmPath::new("ts-unique"));
        assert_ne!(a.path(), b.path());
        assert!(a.as_str().starts_with("/dev/shm/rdx-ts-unique-"));
        assert_eq!(a.address(), format!("shm:{a}"));
        std::fs::write(a.path(), b"x").unwrap();
        let kept = a.path().to_path_buf();
        drop(a);
        assert!(!kept.exists(), "the region file is removed on drop");

        let dir = ScratchDir::new("ts-dir");
        let file = dir.write("f", "y");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "y");
        let kept = dir.path().to_path_buf();
        drop(dir);
        assert!(!kept.exists(), "the directory is removed on drop");
    }

    #[test]
    fn a_panicking_test_still_removes_its_region_file() {
        let seen = std::panic::catch_unwind(|| {
            let p = ShmPath::new("ts-panic");
            std::fs::write(p.path(), b"x").unwrap();
            let kept = p.path().to_path_buf();
            std::panic::panic_any(kept)
        })
        .unwrap_err();
        let kept = seen.downcast::<PathBuf>().unwrap();
        assert!(!kept.exists());
    }
}
