//! The `rdx` binary: parses the arguments, runs the subcommand and reports a failure as one
//! line on standard error. The commands themselves live in the library half (`src/lib.rs`).

mod fabric_scheme;

use std::process::ExitCode;

use clap::Parser;
use rdx_cli::Cli;

fn main() -> ExitCode {
    exit_quietly_on_broken_pipe();
    // Node addresses `fabric://HOST:PORT?token-file=...` (docs/fabric.md).
    fabric_scheme::register();
    let cli = Cli::parse();
    match cli.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdx: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// Output piped into a reader that stops early (`rdx inspect x.o | head`) ends the command
/// quietly with the status a SIGPIPE death gives (141), as any Unix tool does. Rust ignores
/// SIGPIPE so that sockets report a closed peer as an error (the fabric's connections rely on
/// that), and printing to a closed stdout then panics; every command prints with `println!`,
/// so the one place to turn that panic into an exit is here.
fn exit_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

/// The whole context chain on one line ("cannot load x.o: section ..."). Library errors often
/// both show their source in their message and return it as `source()`, so a cause whose text
/// the line already holds is not repeated.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::one_line;

    /// Shaped like the libraries' errors: the source in the message and as `source()`.
    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "transport: {}", self.0)
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let e = anyhow::Error::new(Outer(io)).context("node show n2");
        assert_eq!(one_line(&e), "node show n2: transport: Connection refused");
    }

    #[test]
    fn distinct_causes_are_all_shown() {
        let e = anyhow::anyhow!("section .text truncated").context("cannot load x.o");
        assert_eq!(one_line(&e), "cannot load x.o: section .text truncated");
    }
}
