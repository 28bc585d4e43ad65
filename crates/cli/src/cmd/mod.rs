//! One module per subcommand. Each module exposes `Args` (a `clap::Args` struct whose doc
//! comment is the subcommand's help) and `fn run(args: Args) -> anyhow::Result<()>`.
//!
//! To add a subcommand `foo`: write `src/cmd/foo.rs` with those two items and add one line,
//! `foo => Foo,`, to the list below. Give every argument a doc comment (short, concrete, with
//! its default when that is not a literal clap shows); explanations longer than a paragraph go
//! in `#[command(after_long_help = ...)]`. Then regenerate the reference and man pages with
//! `RDX_BLESS=1 cargo test -p rdx-cli --test reference` (`docs/cli.md`, `docs/man/`).
//!
//! Report failures with `anyhow` context that names the file, node or program involved;
//! `main` prints the chain as one line.

macro_rules! subcommands {
    ($($module:ident => $variant:ident,)*) => {
        $(pub mod $module;)*

        #[derive(clap::Subcommand)]
        pub enum Command {
            $($variant($module::Args),)*
        }

        impl Command {
            pub fn run(self) -> anyhow::Result<()> {
                match self {
                    $(Command::$variant(args) => $module::run(args),)*
                }
            }
        }
    };
}

subcommands! {
    acl => Acl,
    inspect => Inspect,
    run => Run,
    compile => Compile,
    verify => Verify,
    node => Node,
    deploy => Deploy,
    detach => Detach,
    rollback => Rollback,
    history => History,
    map => Map,
    events => Events,
    broadcast => Broadcast,
    recover => Recover,
    profile => Profile,
    optimize => Optimize,
    watch => Watch,
    migrate => Migrate,
    xcall => Xcall,
}
