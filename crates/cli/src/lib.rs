//! `rdx`: the command line of the control plane.
//!
//! It owns argument parsing, reading files and presenting results; every piece of real work
//! (loading, interpreting, verifying, compiling and deploying) lives in the library crates it
//! calls. Each subcommand is one module in `src/cmd/`; see `cmd/mod.rs` for how to add one.
//! Errors are reported as `rdx: <what failed>: <why>` with a non-zero exit status.
//!
//! The library half holds the command definition ([`Cli`]) so that tests can render it:
//! `docs/cli.md` and `docs/man/*.1` are generated from it (`tests/reference.rs`) and cannot
//! drift from what `rdx --help` prints. The binary (`src/main.rs`) parses, runs and reports.

mod cmd;
mod object_file;

use clap::Parser;

/// rdx: agentless eBPF runtime extensions.
///
/// The control plane's command line: look at, run, verify and compile eBPF objects; register
/// nodes (host processes that link the rdx runtime) and deploy, roll back, profile, optimise,
/// watch and migrate the programs at their hooks; read and write their maps remotely.
#[derive(Parser)]
#[command(name = "rdx", version, propagate_version = true, after_long_help = ERRORS)]
pub struct Cli {
    #[command(subcommand)]
    command: cmd::Command,
}

/// The end of `rdx --help`: how every command reports failure.
const ERRORS: &str = "\
Errors go to standard error as one line, `rdx: <what failed>: <why>`, and the exit status is
1, for example:

    rdx: cannot load prog.o: section xdp: instruction 3 (function xdp_gate, opcode 0xff): unknown opcode
    rdx: multi.o has several programs; choose one with --prog NAME: classify (socket), xdp_gate (xdp), on_request (rdx/request)
    rdx: program on_request failed: instruction 5: 8-byte read at 0x0 is outside the program's memory

The loader's messages are listed in docs/loader.md. Output piped into a reader that stops
early (`rdx inspect x.o | head`) ends the command quietly with status 141, as a SIGPIPE would.";

impl Cli {
    /// Runs the subcommand the arguments named.
    pub fn run(self) -> anyhow::Result<()> {
        self.command.run()
    }
}
