//! `rdx acl`: RDMA access-control policies — check, compile to the rule table, and test
//! against pcap traces. All the work is in `rdx-acl`; this module parses arguments and prints.

use std::path::PathBuf;

use anyhow::Context;

/// Check, compile and test RDMA ACL policy files.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: AclCommand,
}

#[derive(clap::Subcommand)]
enum AclCommand {
    /// Parse and check a policy file; print warnings (shadowed, empty or unapplied policies).
    Check {
        /// Policy file.
        file: PathBuf,
    },
    /// Compile a policy file into its rule table; optionally write the table image.
    Compile {
        /// Policy file.
        file: PathBuf,
        /// Write the rule image (the bytes placed in XState) to this file.
        #[arg(short, long, value_name = "IMAGE")]
        output: Option<PathBuf>,
    },
    /// Run every packet of a pcap trace through a policy file: verdict per packet, counters.
    Test {
        /// Policy file.
        file: PathBuf,
        /// pcap trace (link type Ethernet for RoCEv2 or 247 for InfiniBand).
        trace: PathBuf,
        /// Print only the counters.
        #[arg(long)]
        summary: bool,
    },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        AclCommand::Check { file } => {
            print!("{}", rdx_acl::api::check(&file)?);
        }
        AclCommand::Compile { file, output } => {
            let report = rdx_acl::api::compile_file(&file)?;
            print!("{report}");
            if let Some(out) = output {
                std::fs::write(&out, &report.image)
                    .with_context(|| format!("cannot write {}", out.display()))?;
                println!("wrote {} bytes to {}", report.image.len(), out.display());
            }
        }
        AclCommand::Test {
            file,
            trace,
            summary,
        } => {
            let mut report = rdx_acl::api::test(&file, &trace)?;
            if summary {
                report.verdicts.clear();
            }
            print!("{report}");
        }
    }
    Ok(())
}
