//! Target architectures the JIT emits code for.

use std::fmt;
use std::str::FromStr;

/// A machine architecture, chosen by the control plane per target, not by the machine the
/// compiler runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// Every architecture the JIT supports.
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// The architecture of the machine this code runs on, if the JIT supports it.
    pub fn host() -> Option<Arch> {
        if cfg!(target_arch = "x86_64") {
            Some(Arch::X86_64)
        } else if cfg!(target_arch = "aarch64") {
            Some(Arch::Aarch64)
        } else {
            None
        }
    }

    /// The name used on the command line and in file names.
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// The number stored in artifact headers. Never renumber: stored artifacts carry it.
    pub fn code(self) -> u32 {
        match self {
            Arch::X86_64 => 1,
            Arch::Aarch64 => 2,
        }
    }

    pub fn from_code(code: u32) -> Option<Arch> {
        match code {
            1 => Some(Arch::X86_64),
            2 => Some(Arch::Aarch64),
            _ => None,
        }
    }

    /// The Linux target triple code is generated for.
    pub(crate) fn triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An architecture name that is not one of [`Arch::ALL`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown target architecture `{0}` (supported: x86_64, aarch64)")]
pub struct UnknownArch(pub String);

impl FromStr for Arch {
    type Err = UnknownArch;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "x86_64" | "x86-64" | "amd64" => Ok(Arch::X86_64),
            "aarch64" | "arm64" => Ok(Arch::Aarch64),
            other => Err(UnknownArch(other.to_string())),
        }
    }
}
