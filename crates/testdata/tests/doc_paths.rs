//! Every repository path a document names exists, so a newcomer following the docs never
//! looks for a file that moved. The documents are the Markdown files (`README.md`,
//! `docs/**`, the READMEs of crates, examples and tools) and the comments of every Rust file
//! under `crates/` and `examples/` (crate and item docs included); the paths are those
//! starting with one of the repository's top-level folders (`crates/...`, `docs/...`, ...)
//! and the targets of relative Markdown links. Patterns (`bpf/**/*.c`, `cmd/<name>.rs`,
//! `bpf/fleet/NAME.c`) are not paths and are skipped.
//!
//! The anchor of a Markdown link (`jit.md#counted-loops`) must name a heading of its target,
//! and the README's layout table must name every crate and example.
//!
//! The test lives here because this crate has no dependencies: it is the cheapest place to
//! build a test that only reads the repository.

use std::collections::{HashMap, HashSet};
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
fn every_markdown_link_anchor_names_a_heading() {
    let root = repo_root();
    let mut anchors_of: HashMap<PathBuf, HashSet<String>> = HashMap::new();
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents(&root) {
        if doc.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&doc).expect("read a document");
        for (index, line) in text.lines().enumerate() {
            for (target, anchor) in anchored_links(line) {
                let file = if target.is_empty() {
                    doc.clone()
                } else {
                    doc.parent().expect("a document's folder").join(&target)
                };
                if file.extension().is_none_or(|e| e != "md") || !file.exists() {
                    continue; // a missing file is every_path_a_doc_names_exists's to report
                }
                let file = file.canonicalize().expect("a linked document");
                let anchors = anchors_of.entry(file.clone()).or_insert_with(|| {
                    heading_anchors(&std::fs::read_to_string(&file).expect("read a document"))
                });
                checked += 1;
                if !anchors.contains(&anchor) {
                    broken.push(format!(
                        "{}:{}: {target}#{anchor}",
                        doc.strip_prefix(&root).unwrap_or(&doc).display(),
                        index + 1
                    ));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "found only {checked} anchored links: is the scan broken?"
    );
    assert!(
        broken.is_empty(),
        "links whose anchor names no heading of their target (doc:line: link):\n{}",
        broken.join("\n")
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

/// `README.md`, every Markdown file under `docs/`, `crates/`, `examples/` and `tools/`, and
/// the Rust files of the crates and examples.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![root.join("README.md")];
    for folder in ["docs", "crates", "examples", "tools"] {
        files_under(&root.join(folder), "md", &mut docs);
    }
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

/// Inline Markdown links with an anchor, as (file, anchor); the file is empty for an anchor in
/// the same document.
fn anchored_links(line: &str) -> Vec<(String, String)> {
    let mut links = Vec::new();
    let mut rest = line;
    while let Some(open) = rest.find("](") {
        let after = &rest[open + 2..];
        let Some(close) = after.find(')') else { break };
        let target = after[..close].trim();
        if let Some((file, anchor)) = target.split_once('#') {
            if !file.contains("://") && !anchor.is_empty() {
                links.push((file.to_string(), anchor.to_string()));
            }
        }
        rest = &after[close..];
    }
    links
}

/// The anchors GitHub gives a document's headings: lower case, punctuation other than `-`
/// and `_` dropped, spaces turned into `-`, a repeated heading suffixed `-1`, `-2`, ...
/// Lines inside fenced code blocks are not headings.
fn heading_anchors(text: &str) -> HashSet<String> {
    let mut anchors = HashSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes..]
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                '-' | '_' => Some(c),
                c if c.is_alphanumeric() => Some(c),
                _ => None,
            })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        let anchor = if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        };
        *count += 1;
        anchors.insert(anchor);
    }
    anchors
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
