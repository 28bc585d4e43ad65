//! One module per subcommand. Each module exposes `Args` (a `clap::Args` struct whose doc
//! comment is the subcommand's help) and `fn run(args: Args) -> anyhow::Result<()>`.
//!
//! To add a subcommand `foo`: write `src/cmd/foo.rs` with those two items and add one line,
//! `foo => Foo,`, to the list below.

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
