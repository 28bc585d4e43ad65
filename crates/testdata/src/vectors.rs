//! Where the eBPF ISA test vectors (`.data` files, read by `rdx_bpf::asm::TestVector::parse`)
//! live, for every test that runs them.
//!
//! Two sets share one layout (`tests/*.data` must run and produce their `-- result`,
//! `negative/*.data` must be rejected):
//!
//! - **rdx's own vectors**, `crates/testdata/isa-vectors/`, written for this project from
//!   RFC 9669. They are part of the repository, so they always run.
//! - **the external bpf_conformance suite**, which is not part of the repository: it is read
//!   from `RDX_CONFORMANCE_DIR`, or else from `../shared/conformance` beside the checkout. When
//!   it is absent the tests run without it and say so on stderr, so a fresh clone passes;
//!   `RDX_REQUIRE_CONFORMANCE=1` turns its absence into a failure for a CI that must run it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Once;

/// One directory of vectors with the `tests/` and `negative/` layout.
#[derive(Clone, Debug)]
pub struct VectorSet {
    /// Short name used in test output and as the prefix of [`VectorFile::id`].
    pub name: &'static str,
    /// The directory holding `tests/` and `negative/`.
    pub root: PathBuf,
    /// The set is incomplete if `tests/` holds fewer vectors than this: a half-copied
    /// directory must fail rather than pass with less coverage.
    pub min_positive: usize,
}

/// One `.data` file of a [`VectorSet`].
#[derive(Clone, Debug)]
pub struct VectorFile {
    /// `set/stem`, e.g. `rdx/alu64-add-reg`: unique across the sets and free of spaces.
    pub id: String,
    /// The file name, e.g. `alu64-add-reg.data`.
    pub file_name: String,
    /// The file's absolute path in the source tree.
    pub path: PathBuf,
    /// The file's text; a stray non-UTF-8 byte is replaced rather than aborting the suite.
    pub text: String,
}

impl VectorSet {
    /// The vectors that must run and produce their result, sorted by file name.
    ///
    /// Panics if the set holds fewer than [`VectorSet::min_positive`] of them.
    pub fn positive(&self) -> Vec<VectorFile> {
        let files = self.read("tests");
        assert!(
            files.len() >= self.min_positive,
            "{} vectors: expected at least {} in {}, found {}",
            self.name,
            self.min_positive,
            self.root.join("tests").display(),
            files.len()
        );
        files
    }

    /// The vectors that must be rejected, sorted by file name. Panics if there are none.
    pub fn negative(&self) -> Vec<VectorFile> {
        let files = self.read("negative");
        assert!(
            !files.is_empty(),
            "{} vectors: no negative vectors in {}",
            self.name,
            self.root.join("negative").display()
        );
        files
    }

    /// The text of one file of the set, `sub` being `tests` or `negative`.
    pub fn file(&self, sub: &str, file_name: &str) -> String {
        let path = self.root.join(sub).join(file_name);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read vector {}: {e}", path.display()))
    }

    fn read(&self, sub: &str) -> Vec<VectorFile> {
        let dir = self.root.join(sub);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot read vector directory {}: {e}", dir.display()));
        let mut paths: Vec<PathBuf> = entries
            .map(|e| e.expect("directory entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "data"))
            .collect();
        paths.sort();
        paths
            .into_iter()
            .map(|path| {
                let bytes = std::fs::read(&path)
                    .unwrap_or_else(|e| panic!("cannot read vector {}: {e}", path.display()));
                let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
                VectorFile {
                    id: format!("{}/{stem}", self.name),
                    file_name: path.file_name().unwrap().to_string_lossy().into_owned(),
                    text: String::from_utf8_lossy(&bytes).into_owned(),
                    path,
                }
            })
            .collect()
    }
}

/// rdx's own vectors, written from RFC 9669 (`crates/testdata/isa-vectors/`).
pub fn own() -> VectorSet {
    VectorSet {
        name: "rdx",
        root: Path::new(env!("CARGO_MANIFEST_DIR")).join("isa-vectors"),
        // All of them: a vector removed on purpose lowers this number in the same change.
        min_positive: 161,
    }
}

/// Where the external bpf_conformance vectors are looked for: `RDX_CONFORMANCE_DIR`, else
/// `../shared/conformance` beside the repository.
pub fn external_location() -> PathBuf {
    if let Some(dir) = std::env::var_os("RDX_CONFORMANCE_DIR") {
        return PathBuf::from(dir);
    }
    // The directory holding the checkout, resolved so that messages show a plain path.
    let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    beside
        .canonicalize()
        .unwrap_or(beside)
        .join("shared/conformance")
}

/// The external bpf_conformance vectors, if present (see the module documentation).
///
/// When they are absent this prints one line per test process saying where they were looked
/// for, or panics if `RDX_REQUIRE_CONFORMANCE=1`.
pub fn external() -> Option<VectorSet> {
    let root = external_location();
    if root.join("tests").is_dir() {
        return Some(VectorSet {
            name: "bpf_conformance",
            root,
            // The suite's size when it was adopted: all of it must be there.
            min_positive: 313,
        });
    }
    let missing = format!(
        "external bpf_conformance vectors not found at {}",
        root.display()
    );
    if std::env::var_os("RDX_REQUIRE_CONFORMANCE").is_some_and(|v| v == "1") {
        panic!("{missing}, and RDX_REQUIRE_CONFORMANCE=1 requires them");
    }
    static SKIP_NOTICE: Once = Once::new();
    SKIP_NOTICE.call_once(|| {
        // Straight to the process's stderr: the test harness captures `eprintln!` of passing
        // tests, and a skip nobody sees would look like coverage.
        let _ = writeln!(
            std::io::stderr(),
            "{missing}: skipped (set RDX_CONFORMANCE_DIR)"
        );
    });
    None
}

/// Every set to run: rdx's own, then the external suite when it is present.
pub fn all() -> Vec<VectorSet> {
    let mut sets = vec![own()];
    sets.extend(external());
    sets
}
