//! The command-line reference, `docs/cli.md`, and the man pages, `docs/man/*.1`, are rendered
//! from the clap definition of `rdx`, so every subcommand, flag and help text in them is what
//! `rdx --help` prints. These tests fail when the committed files differ from a fresh
//! rendering; `RDX_BLESS=1 cargo test -p rdx-cli --test reference` rewrites them.
//!
//! The Markdown renderer is ours (a page of code over clap's public `Command` API) so that the
//! reference reads as a document: one section per command, its long help as prose, arguments
//! and options as lists with their defaults and values. The man pages come from clap's own
//! `clap_mangen`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Command, CommandFactory};
use rdx_cli::Cli;

const BLESS: &str = "RDX_BLESS";
const REGENERATE: &str = "RDX_BLESS=1 cargo test -p rdx-cli --test reference";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn blessing() -> bool {
    std::env::var_os(BLESS).is_some_and(|v| v == "1")
}

/// The root command, built: subcommands carry their full names (`rdx node add`) and the
/// arguments clap adds itself (`--help`, `--version`) are present, as when `rdx` parses.
fn built_command() -> Command {
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    command
}

#[test]
fn docs_cli_md_is_rendered_from_the_clap_definition() {
    let path = repo_root().join("docs/cli.md");
    let rendered = render_markdown(&built_command());
    if blessing() {
        std::fs::write(&path, &rendered).expect("write docs/cli.md");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != rendered {
        panic!(
            "docs/cli.md differs from the clap definition in crates/cli (first difference at \
             line {}); regenerate it with `{REGENERATE}`",
            first_differing_line(&committed, &rendered)
        );
    }
}

#[test]
fn docs_man_pages_are_rendered_from_the_clap_definition() {
    let dir = repo_root().join("docs/man");
    let pages = render_man_pages(&built_command());
    if blessing() {
        std::fs::create_dir_all(&dir).expect("create docs/man");
        for stale in man_pages_in(&dir) {
            std::fs::remove_file(dir.join(stale)).expect("remove a stale man page");
        }
        for (name, text) in &pages {
            std::fs::write(dir.join(name), text).expect("write a man page");
        }
        return;
    }
    let committed = man_pages_in(&dir);
    let expected: Vec<String> = pages.iter().map(|(name, _)| name.clone()).collect();
    assert_eq!(
        committed, expected,
        "docs/man/ holds other pages than the commands of rdx; regenerate with `{REGENERATE}`"
    );
    for (name, text) in &pages {
        let on_disk = std::fs::read(dir.join(name)).expect("read a man page");
        assert!(
            on_disk == *text,
            "docs/man/{name} differs from the clap definition; regenerate with `{REGENERATE}`"
        );
    }
}

/// The reference must document every subcommand the binary accepts.
#[test]
fn every_subcommand_has_a_section_and_a_man_page() {
    let command = built_command();
    let markdown = render_markdown(&command);
    let pages: Vec<String> = render_man_pages(&command)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    for (path, _) in commands_in_order(&command) {
        let heading = format!("`{path}`\n");
        assert!(markdown.contains(&heading), "no section for {path}");
        let page = format!("{}.1", path.replace(' ', "-"));
        assert!(pages.contains(&page), "no man page {page}");
    }
    assert!(
        pages.len() > 19,
        "the 19 subcommands and their own subcommands"
    );
}

fn man_pages_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| {
                    e.expect("list docs/man")
                        .file_name()
                        .to_string_lossy()
                        .into_owned()
                })
                .filter(|name| name.ends_with(".1"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn first_differing_line(a: &str, b: &str) -> usize {
    let mut a_lines = a.lines();
    let mut b_lines = b.lines();
    let mut line = 1;
    while a_lines.next() == b_lines.next() {
        line += 1;
    }
    line
}

/// One page per command, named as man expects (`rdx-node-add.1`), sorted by name; every
/// page's footer names the program and version (`rdx 0.1.0`), not the subcommand.
fn render_man_pages(root: &Command) -> Vec<(String, Vec<u8>)> {
    let source = format!("rdx {}", root.get_version().unwrap_or_default());
    let mut pages: Vec<(String, Vec<u8>)> = commands_in_order(root)
        .into_iter()
        .map(|(_, command)| {
            let man = clap_mangen::Man::new(command.clone()).source(source.clone());
            let mut text = Vec::new();
            man.render(&mut text).expect("render a man page");
            (man.get_filename(), text)
        })
        .collect();
    pages.sort_by(|a, b| a.0.cmp(&b.0));
    pages
}

/// Every command with its full name (`rdx node add`), depth first in definition order.
fn commands_in_order(root: &Command) -> Vec<(String, &Command)> {
    fn walk<'a>(command: &'a Command, path: String, out: &mut Vec<(String, &'a Command)>) {
        out.push((path.clone(), command));
        for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, format!("{path} {}", sub.get_name()), out);
        }
    }
    let mut out = Vec::new();
    walk(root, root.get_name().to_string(), &mut out);
    out
}

fn render_markdown(root: &Command) -> String {
    let mut out = String::new();
    out.push_str("# The `rdx` command line\n\n");
    writeln!(
        out,
        "<!-- Generated from the clap definitions in crates/cli/src by `{REGENERATE}`: \
         edit the doc comments there, not this file. -->\n"
    )
    .unwrap();
    out.push_str(
        "`rdx` is the control plane's command line (crate `crates/cli`, package `rdx-cli`). \
         Build it with `cargo build --release -p rdx-cli`; the binary is \
         `target/release/rdx`. `scripts/demo.sh` runs the main commands end to end.\n\n\
         This reference is what `rdx <command> --help` prints, one section per command. \
         It is generated, with the man pages in [`man/`](man/) (`man -l docs/man/rdx.1`), \
         by `",
    );
    out.push_str(REGENERATE);
    out.push_str(
        "`, and a test fails when either is out of date. To add a subcommand, see \
         `crates/cli/src/cmd/mod.rs`.\n\n",
    );
    for (path, command) in commands_in_order(root) {
        render_command(&mut out, &path, command);
    }
    out
}

fn render_command(out: &mut String, path: &str, command: &Command) {
    let depth = path.split(' ').count();
    let hashes = "#".repeat(depth.clamp(2, 4));
    writeln!(out, "{hashes} `{path}`\n").unwrap();
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        writeln!(out, "{}\n", about.to_string().trim_end()).unwrap();
    }
    let usage = command.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage: ");
    writeln!(out, "```text\n{usage}\n```\n").unwrap();

    let subcommands: Vec<&Command> = command
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .collect();
    if !subcommands.is_empty() {
        out.push_str("Commands:\n\n");
        for sub in subcommands {
            let sub_path = format!("{path} {}", sub.get_name());
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            writeln!(
                out,
                "- [`{}`](#{}): {about}",
                sub.get_name(),
                anchor(&sub_path)
            )
            .unwrap();
        }
        out.push('\n');
    }

    let (positionals, options): (Vec<&Arg>, Vec<&Arg>) = command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set() && (depth == 1 || !is_help_or_version(arg)))
        .partition(|arg| arg.is_positional());
    if !positionals.is_empty() {
        out.push_str("Arguments:\n\n");
        for arg in positionals {
            render_arg(out, arg);
        }
        out.push('\n');
    }
    if !options.is_empty() {
        out.push_str("Options:\n\n");
        for arg in options {
            render_arg(out, arg);
        }
        out.push('\n');
    }

    if let Some(after) = command.get_after_long_help().or(command.get_after_help()) {
        writeln!(out, "{}\n", after.to_string().trim_end()).unwrap();
    }
}

/// `--help` and `--version` are on every command; only the root's section lists them.
fn is_help_or_version(arg: &Arg) -> bool {
    matches!(
        arg.get_action(),
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
    )
}

fn render_arg(out: &mut String, arg: &Arg) {
    let value_names: Vec<String> = match arg.get_value_names() {
        Some(names) => names.iter().map(|n| n.to_string()).collect(),
        None => vec![arg.get_id().as_str().to_uppercase()],
    };
    let value = value_names
        .iter()
        .map(|n| format!("<{n}>"))
        .collect::<Vec<_>>()
        .join(" ");
    let many = if matches!(arg.get_action(), ArgAction::Append) {
        "..."
    } else {
        ""
    };
    let name = if arg.is_positional() {
        if arg.is_required_set() {
            format!("{value}{many}")
        } else {
            format!("[{value}]{many}")
        }
    } else {
        let mut flag = match (arg.get_short(), arg.get_long()) {
            (Some(s), Some(l)) => format!("-{s}, --{l}"),
            (Some(s), None) => format!("-{s}"),
            (None, Some(l)) => format!("--{l}"),
            (None, None) => unreachable!("an option without a name"),
        };
        if arg.get_action().takes_values() {
            write!(flag, " {value}{many}").unwrap();
        }
        flag
    };

    let mut text = String::new();
    if let Some(help) = arg.get_long_help().or(arg.get_help()) {
        text.push_str(help.to_string().trim());
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| format!("`{}`", v.to_string_lossy()))
        .collect();
    if arg.get_action().takes_values() && !defaults.is_empty() && !arg.is_hide_default_value_set() {
        write!(text, " [default: {}]", defaults.join(", ")).unwrap();
    }
    write!(out, "- `{name}`").unwrap();
    if arg.is_required_set() && !arg.is_positional() {
        out.push_str(" (required)");
    }
    if !text.is_empty() {
        out.push_str(": ");
        out.push_str(&indent_continuation(text.trim_start()));
    }
    out.push('\n');
    let values: Vec<_> = arg
        .get_possible_values()
        .into_iter()
        .filter(|v| !v.is_hide_set())
        .collect();
    if arg.get_action().takes_values() && !values.is_empty() {
        for value in values {
            write!(out, "  - `{}`", value.get_name()).unwrap();
            if let Some(help) = value.get_help() {
                write!(out, ": {help}").unwrap();
            }
            out.push('\n');
        }
    }
}

/// Later paragraphs of a list item's text stay inside the item.
fn indent_continuation(text: &str) -> String {
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        if i > 0 {
            out.push('\n');
            if !line.is_empty() {
                out.push_str("  ");
            }
        }
        out.push_str(line);
    }
    out
}

/// The anchor GitHub gives a heading such as `` `rdx node add` ``.
fn anchor(path: &str) -> String {
    path.replace(' ', "-")
}
