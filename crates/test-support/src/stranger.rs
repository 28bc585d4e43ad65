//! Another local user, for the attack tests: commands run as a uid and gid that no account
//! uses and that is in no group, through `setpriv` (util-linux). An unassigned uid is a
//! local user like any other to the kernel's permission checks, and using one changes
//! nothing on the machine (no `/etc/passwd` entry to create and clean up).
//!
//! Needs root (to switch to that user). Without it, [`Stranger::new`] returns `None` after
//! saying on stderr why the test is skipped.

use std::path::Path;
use std::process::{Command, Output};

/// An unprivileged local user that is not this process's user.
#[derive(Debug, Clone, Copy)]
pub struct Stranger {
    uid: u32,
}

/// First uid tried: above the range distributions hand to accounts.
const FIRST_UID: u32 = 61_000;

impl Stranger {
    /// A uid with no account, or `None` (the test skips) when this process cannot switch to
    /// it: `why` names the test in the message.
    pub fn new(why: &str) -> Option<Stranger> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipping {why}: acting as another local user needs root");
            return None;
        }
        if Command::new("setpriv").arg("--version").output().is_err() {
            eprintln!("skipping {why}: setpriv (util-linux) is not installed");
            return None;
        }
        let uid = (FIRST_UID..FIRST_UID + 1000)
            // SAFETY: getpwuid returns a pointer into static storage or null; we only test
            // it for null.
            .find(|&uid| unsafe { libc::getpwuid(uid) }.is_null())?;
        let stranger = Stranger { uid };
        let probe = stranger.sh("id -u");
        if !probe.status.success() {
            eprintln!(
                "skipping {why}: setpriv cannot switch to uid {uid}: {}",
                String::from_utf8_lossy(&probe.stderr)
            );
            return None;
        }
        Some(stranger)
    }

    /// The stranger's uid (also its gid).
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Runs `sh -c script` as the stranger: its uid and gid, no supplementary groups, no
    /// capabilities.
    pub fn sh(&self, script: &str) -> Output {
        self.command("sh", &["-c", script])
    }

    /// Runs `program args...` as the stranger.
    pub fn command(&self, program: impl AsRef<Path>, args: &[&str]) -> Output {
        Command::new("setpriv")
            .arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.uid))
            .arg("--clear-groups")
            .arg("--inh-caps=-all")
            .arg(program.as_ref())
            .args(args)
            .output()
            .expect("running setpriv")
    }

    /// [`Stranger::sh`], which must succeed.
    pub fn must(&self, script: &str) {
        let out = self.sh(script);
        assert!(
            out.status.success(),
            "as uid {}: {script}: {}",
            self.uid,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
