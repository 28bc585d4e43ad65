//! Every repository path a document names exists, so a newcomer following the docs never
//! looks for a file that moved. The documents are `README.md`, `docs/**/*.md` and the
//! comments of every Rust file under `crates/` and `examples/` (crate and item docs
//! included); the paths are those starting with one of the repository's top-level folders
//! (`crates/...`, `docs/...`, ...) and the targets of relative Markdown links. Patterns
//! (`bpf/**/*.c`, `cmd/<name>.rs`, `bpf/fleet/NAME.c`) are not paths and are skipped.
//!
//! The README's layout table must also name every crate and example.
//!
//! The test lives here because this crate has no dependencies: it is the cheapest place to
//! build a test that only reads the repository.

use std::path::{Path, PathBuf};

/// Folders at the repository's root that documents name paths under.
const TOP_LEVEL: &[&str] = &[
    "crates/",
    "docs/",
    "bpf/",
    "scripts/",
    "include/",
    "examples/",
    "eim/",
    "fuzz/",
    "tools/",
];

/// Paths in other projects that docs name for comparison; they are not ours to find.
const OTHER_PROJECTS: &[&str] = &[
    "include/uapi/linux/bpf.h", // the Linux kernel's, in crates/region's doc
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

/// A path a document names, where it names it.
#[derive(Debug)]
struct Mention {
    doc: PathBuf,
    line: usize,
    path: String,
    /// Where the path is resolved from: the repository root, or the document's folder for
    /// a relative Markdown link.
    base: PathBuf,
}

#[test]
fn every_path_a_doc_names_exists() {
    let root = repo_root();
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in documents(&root) {
        for mention in mentions(&root, &doc) {
            checked += 1;
            if !mention.base.join(&mention.path).exists() {
                missing.push(format!(
                    "{}:{}: {}",
                    mention
                        .doc
                        .strip_prefix(&root)
                        .unwrap_or(&mention.doc)
                        .display(),
                    mention.line,
                    mention.path
                ));
            }
        }
    }
    assert!(
        checked > 100,
        "found only {checked} paths: is the scan broken?"
    );
    assert!(
        missing.is_empty(),
        "paths named in docs that do not exist (doc:line: path):\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_readme_layout_table_lists_every_crate_and_example() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README.md");
    let table: Vec<&str> = readme.lines().filter(|l| l.starts_with('|')).collect();
    let mut unlisted = Vec::new();
    for folder in ["crates", "examples"] {
        for entry in std::fs::read_dir(root.join(folder)).expect("list a top-level folder") {
            let entry = entry.expect("read a folder entry");
            if !entry.path().is_dir() {
                continue;
            }
            let path = format!("{folder}/{}", entry.file_name().to_string_lossy());
            let named = format!("`{path}`");
            if !table.iter().any(|row| row.contains(&named)) {
                unlisted.push(path);
            }
        }
    }
    unlisted.sort();
    assert!(
        unlisted.is_empty(),
        "README.md's layout table does not list: {}",
        unlisted.join(", ")
    );
}

/// `README.md`, every Markdown file under `docs/`, and the Rust files of the crates and
/// examples.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![root.join("README.md")];
    files_under(&root.join("docs"), "md", &mut docs);
    files_under(&root.join("crates"), "rs", &mut docs);
    files_under(&root.join("examples"), "rs", &mut docs);
    docs.sort();
    docs
}

fn files_under(dir: &Path, extension: &str, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("list a folder") {
        let path = entry.expect("read a folder entry").path();
        if path.is_dir() {
            files_under(&path, extension, out);
        } else if path.extension().is_some_and(|e| e == extension) {
            out.push(path);
        }
    }
}

/// The paths a document names: in Markdown every line, in Rust the comments.
fn mentions(root: &Path, doc: &Path) -> Vec<Mention> {
    let text = std::fs::read_to_string(doc).expect("read a document");
    let is_markdown = doc.extension().is_some_and(|e| e == "md");
    let doc_dir = doc.parent().expect("a document's folder").to_path_buf();
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line_text = if is_markdown {
            line
        } else {
            match line.trim_start().strip_prefix("//") {
                Some(comment) => comment,
                None => continue,
            }
        };
        let mut add = |path: String, base: &Path| {
            if is_a_path(&path) {
                found.push(Mention {
                    doc: doc.to_path_buf(),
                    line: index + 1,
                    path,
                    base: base.to_path_buf(),
                });
            }
        };
        for path in repository_paths(line_text) {
            add(path, root);
        }
        if is_markdown {
            for target in link_targets(line_text) {
                add(target, &doc_dir);
            }
        }
    }
    found
}

/// Tokens that start with a top-level folder at a word boundary (`crates/cli/src/main.rs`),
/// without trailing punctuation or a `:line` suffix.
fn repository_paths(line: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for (start, _) in line.char_indices() {
        let rest = &line[start..];
        if !TOP_LEVEL.iter().any(|top| rest.starts_with(top)) {
            continue;
        }
        let before = line[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || "/._-~$".contains(c)) {
            continue; // part of a longer path or word (`../shared/docs/`, `my-crates/`)
        }
        let end = rest
            .find(|c: char| c.is_whitespace() || "`'\"()[],;:|".contains(c))
            .unwrap_or(rest.len());
        let token = rest[..end].trim_end_matches(['.', '!', '?']);
        let token = token.split('#').next().unwrap_or(token);
        paths.push(token.to_string());
    }
    paths
}

/// Targets of inline Markdown links (`[text](target)`) that are files of this repository:
/// not URLs, not anchors within the page.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(open) = rest.find("](") {
        let after = &rest[open + 2..];
        let Some(close) = after.find(')') else { break };
        let target = after[..close].split('#').next().unwrap_or_default().trim();
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            targets.push(target.to_string());
        }
        rest = &after[close..];
    }
    targets
}

/// Patterns and placeholders name no single file.
fn is_a_path(token: &str) -> bool {
    !token.is_empty()
        && !OTHER_PROJECTS.contains(&token)
        && !token.contains(['*', '<', '>', '{', '}', '$'])
        && !token.contains("...")
        && !token.split('/').any(is_placeholder)
}

/// A name in capitals stands for any name (`bpf/fleet/NAME.c`); `README.md` is a file.
fn is_placeholder(segment: &str) -> bool {
    let stem = segment.split('.').next().unwrap_or(segment);
    stem.len() > 1
        && stem.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        && !["README", "LICENSE"].contains(&stem)
}
