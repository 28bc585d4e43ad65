//! `rdx`: the command line of the control plane.
//!
//! It owns argument parsing, reading files and presenting results; every piece of real work
//! (loading, interpreting, later verifying, compiling and deploying) lives in the library
//! crates it calls. Each subcommand is one module in `src/cmd/`; see `cmd/mod.rs` for how to
//! add one. Errors are reported as `rdx: <what failed>: <why>` with a non-zero exit status.

mod cmd;
mod object_file;

use std::process::ExitCode;

use clap::Parser;

/// rdx: agentless eBPF runtime extensions.
#[derive(Parser)]
#[command(name = "rdx", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: cmd::Command,
}

fn main() -> ExitCode {
    // Node addresses `fabric://HOST:PORT?token-file=...` (docs/fabric.md).
    rdx_fabric::register_scheme();
    let cli = Cli::parse();
    match cli.command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the whole context chain on one line: "cannot load x.o: section ...".
            eprintln!("rdx: {e:#}");
            ExitCode::FAILURE
        }
    }
}
