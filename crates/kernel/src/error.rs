use std::io;
use std::path::PathBuf;

/// Everything that can go wrong talking to the kernel's BPF subsystem.
#[derive(Clone, Debug, thiserror::Error)]
pub enum KernelError {
    /// The `bpf()` system call cannot be used here. Tests skip on this error (and print it);
    /// every other error is a failure.
    #[error("the bpf() system call is unavailable: {operation} failed with {errno}: {hint}")]
    Unavailable {
        /// The first `bpf()` command that failed.
        operation: &'static str,
        /// What the kernel returned for it.
        errno: Errno,
        /// What usually causes that errno here (missing capability, locked-down kernel, ...).
        hint: &'static str,
    },
    /// libbpf could not open or parse the object file.
    #[error("cannot open eBPF object {path}: {message}")]
    ObjectOpen {
        /// The object file.
        path: PathBuf,
        /// libbpf's error text.
        message: String,
    },
    /// libbpf opened the object but loading it into the kernel failed; `log` holds the verifier
    /// log of the first program the kernel rejected, if any.
    #[error(
        "cannot load eBPF object {path} into the kernel: {message}{}",
        log_suffix(log)
    )]
    ObjectLoad {
        /// The object file.
        path: PathBuf,
        /// libbpf's error text.
        message: String,
        /// The kernel verifier's log for the first rejected program; empty if there was none.
        log: String,
    },
    /// The object has no program of that name.
    #[error("eBPF object {path} has no program named {name:?} (it has {available:?})")]
    NoSuchProgram {
        /// The object file.
        path: PathBuf,
        /// The program name asked for.
        name: String,
        /// The names of the programs the object has.
        available: Vec<String>,
    },
    /// The object has no map of that name.
    #[error("eBPF object {path} has no map named {name:?} (it has {available:?})")]
    NoSuchMap {
        /// The object file.
        path: PathBuf,
        /// The map name asked for.
        name: String,
        /// The names of the maps the object has (libbpf's names, global-data maps included).
        available: Vec<String>,
    },
    /// `BPF_PROG_LOAD` of a raw instruction array failed (usually the verifier said no).
    #[error(
        "the kernel rejected program {name:?} ({insns} instructions): {errno}{}",
        log_suffix(log)
    )]
    ProgramRejected {
        /// The name the program was loaded under.
        name: String,
        /// Its length in instructions.
        insns: usize,
        /// What `BPF_PROG_LOAD` returned.
        errno: Errno,
        /// The kernel verifier's log (retried with logging on when the first attempt had none).
        log: String,
    },
    /// The caller's input cannot be passed to the kernel at all.
    #[error("invalid input for {what}: {reason}")]
    InvalidInput {
        /// What the input was for.
        what: String,
        /// Why the kernel could not take it.
        reason: String,
    },
    /// A map operation failed.
    #[error("map {map:?}: {operation} failed with {errno}")]
    Map {
        /// The map's name.
        map: String,
        /// The `bpf()` command that failed (`BPF_MAP_LOOKUP_ELEM`, ...).
        operation: &'static str,
        /// What the kernel returned for it.
        errno: Errno,
    },
    /// `BPF_PROG_TEST_RUN` failed.
    #[error("BPF_PROG_TEST_RUN of program {program:?} failed with {errno}")]
    TestRun {
        /// The program's name.
        program: String,
        /// What the kernel returned.
        errno: Errno,
    },
}

fn log_suffix(log: &str) -> String {
    if log.trim().is_empty() {
        String::new()
    } else {
        format!("\n--- verifier log ---\n{}", log.trim_end())
    }
}

/// An `errno` value with its name, for messages that can be acted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// The errno of a libbpf/syscall return value (`-errno`), or of `errno` itself.
    pub(crate) fn from_ret(ret: i32) -> Self {
        if ret < 0 {
            Errno(-ret)
        } else {
            Errno(io::Error::last_os_error().raw_os_error().unwrap_or(0))
        }
    }

    /// True for the errors that mean "this process may not use bpf() at all".
    pub fn means_unavailable(self) -> bool {
        matches!(self.0, libc::EPERM | libc::EACCES | libc::ENOSYS)
    }

    fn hint(self) -> &'static str {
        match self.0 {
            libc::EPERM | libc::EACCES => {
                "the process lacks CAP_BPF/CAP_SYS_ADMIN (run as root) or a seccomp/LSM policy forbids bpf()"
            }
            libc::ENOSYS => "the kernel was built without CONFIG_BPF_SYSCALL",
            libc::EINVAL => "the kernel does not support this request",
            _ => "unexpected error from the bpf() system call",
        }
    }
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "errno {} ({})",
            self.0,
            io::Error::from_raw_os_error(self.0)
        )
    }
}

impl KernelError {
    /// Turns a failure of the availability probe into [`KernelError::Unavailable`].
    pub(crate) fn into_unavailable(self, operation: &'static str) -> KernelError {
        let errno = match &self {
            KernelError::ProgramRejected { errno, .. }
            | KernelError::TestRun { errno, .. }
            | KernelError::Map { errno, .. } => *errno,
            _ => Errno(libc::EINVAL),
        };
        KernelError::Unavailable {
            operation,
            errno,
            hint: errno.hint(),
        }
    }

    /// True if this error means the kernel side cannot be used in this process (skip, do not
    /// fail).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, KernelError::Unavailable { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejection_message_carries_the_verifier_log() {
        let e = KernelError::ProgramRejected {
            name: "p".into(),
            insns: 2,
            errno: Errno(libc::EACCES),
            log: "0: R1=ctx() R10=fp0\nR2 !read_ok\n".into(),
        };
        let text = e.to_string();
        assert!(text.contains("errno 13"), "{text}");
        assert!(text.contains("--- verifier log ---\n0: R1=ctx()"), "{text}");
        assert!(text.ends_with("R2 !read_ok"), "{text}");
        assert!(!e.is_unavailable());
    }

    #[test]
    fn empty_log_adds_nothing() {
        let e = KernelError::ProgramRejected {
            name: "p".into(),
            insns: 2,
            errno: Errno(libc::EINVAL),
            log: " \n".into(),
        };
        assert!(!e.to_string().contains("verifier log"));
    }

    #[test]
    fn permission_errors_mean_unavailable() {
        let e = KernelError::Map {
            map: "m".into(),
            operation: "BPF_MAP_CREATE",
            errno: Errno(libc::EPERM),
        }
        .into_unavailable("BPF_MAP_CREATE");
        assert!(e.is_unavailable());
        assert!(e.to_string().contains("CAP_BPF"), "{e}");
        assert!(Errno(libc::ENOSYS).means_unavailable());
        assert!(!Errno(libc::EINVAL).means_unavailable());
    }
}
