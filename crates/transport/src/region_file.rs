//! Who may have made a region file: the checks both planes run on a region file before they
//! trust its bytes.
//!
//! A region holds the code a host executes, so whoever can write the file runs native code in
//! the host. A file someone else created at the region's path (`/dev/shm` is writable by
//! every local user), a symbolic link planted there, or a file other users can write must
//! therefore never be adopted as a region, by the host creating it or by a control plane
//! attaching to it. `docs/security.md` ("Shared-memory transport") gives the threat model.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Why a region file is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UntrustedRegion {
    /// The path's last component is a symbolic link.
    #[error("it is a symbolic link (region files are never followed through links)")]
    Symlink,
    /// The path names a directory, device, FIFO or socket.
    #[error("it is not a regular file")]
    NotRegular,
    /// The file belongs to a user this process does not trust.
    #[error("it is owned by uid {owner}; this process (uid {euid}) trusts only region files of its own user, root, and users it was told to trust")]
    Owner {
        /// The file's owner.
        owner: u32,
        /// This process's effective user.
        euid: u32,
    },
    /// Group or others may write the file.
    #[error("its mode {mode:04o} lets group or others write it (regions must be 0600)")]
    Writable {
        /// The file's permission bits.
        mode: u32,
    },
    /// The file has more than one name.
    #[error("it has {links} hard links: it may be another host's live region under a second name")]
    HardLinked {
        /// Its hard-link count.
        links: u64,
    },
}

/// Refuses a file with more than one name. A host reusing a leftover at its chosen path
/// truncates and rewrites it; if another user hard-linked a live region of another host of
/// the same user there (possible wherever `fs.protected_hardlinks` is off), that would wipe
/// the other host's region under it.
pub fn check_single_link(file: &File) -> std::io::Result<Result<(), UntrustedRegion>> {
    let links = file.metadata()?.nlink();
    Ok(if links == 1 {
        Ok(())
    } else {
        Err(UntrustedRegion::HardLinked { links })
    })
}

/// The users whose region files a process accepts: its own effective user, by default root
/// (who can write any file anyway), and any the caller names explicitly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedOwners {
    root: bool,
    extra: Vec<u32>,
}

impl TrustedOwners {
    /// This process's effective user and root (a control plane's default).
    pub fn own_user() -> Self {
        Self {
            root: true,
            extra: Vec::new(),
        }
    }

    /// This process's effective user alone (a host reusing its region file: a host trusts
    /// no other user with the code it runs).
    pub fn only_own_user() -> Self {
        Self {
            root: false,
            extra: Vec::new(),
        }
    }

    /// Also accepts files owned by `uid` (a root control plane attaching to a host that runs
    /// as a service user).
    pub fn and(mut self, uid: u32) -> Self {
        self.extra.push(uid);
        self
    }

    /// Whether files owned by `uid` are trusted.
    pub fn accepts(&self, uid: u32) -> bool {
        uid == effective_uid() || (self.root && uid == 0) || self.extra.contains(&uid)
    }
}

/// This process's effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Opens an existing region file without following a symbolic link at its last component,
/// read+write or read-only. The caller runs [`check_open_file`] on the result before using
/// any byte of it.
pub fn open_existing(path: &Path, writable: bool) -> Result<File, OpenRefusal> {
    OpenOptions::new()
        .read(true)
        .write(writable)
        // O_NONBLOCK: a FIFO planted at the path must not block the open; it is then refused
        // as not a regular file.
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| classify_open_error(path, e))
}

/// An open that failed: either the path is a link (refused by policy) or an I/O error.
#[derive(Debug)]
pub enum OpenRefusal {
    /// The path is a symbolic link (refused by policy).
    Untrusted(UntrustedRegion),
    /// The open failed for another reason.
    Io(std::io::Error),
}

/// `ELOOP` from an `O_NOFOLLOW` open means the last component is a symbolic link.
pub fn classify_open_error(path: &Path, e: std::io::Error) -> OpenRefusal {
    if e.raw_os_error() == Some(libc::ELOOP)
        && std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
    {
        OpenRefusal::Untrusted(UntrustedRegion::Symlink)
    } else {
        OpenRefusal::Io(e)
    }
}

/// Checks an open region file (by its descriptor, so the file checked is the file used): a
/// regular file, owned by a user of `trusted`, writable by nobody but its owner.
pub fn check_open_file(
    file: &File,
    trusted: &TrustedOwners,
) -> std::io::Result<Result<(), UntrustedRegion>> {
    let meta = file.metadata()?;
    Ok(check_metadata(&meta, trusted))
}

/// [`check_open_file`] on a raw descriptor the caller keeps owning, and the same refusal of
/// a symbolic link for an `O_NOFOLLOW` open that failed (`open_errno`): for code that opens
/// shared files with `libc::open` (the xcall address plan and the regions it lists).
pub fn check_fd(
    fd: std::os::fd::BorrowedFd<'_>,
    trusted: &TrustedOwners,
) -> std::io::Result<Result<(), UntrustedRegion>> {
    let file = File::from(fd.try_clone_to_owned()?);
    check_open_file(&file, trusted)
}

fn check_metadata(
    meta: &std::fs::Metadata,
    trusted: &TrustedOwners,
) -> Result<(), UntrustedRegion> {
    if !meta.file_type().is_file() {
        return Err(UntrustedRegion::NotRegular);
    }
    if !trusted.accepts(meta.uid()) {
        return Err(UntrustedRegion::Owner {
            owner: meta.uid(),
            euid: effective_uid(),
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(UntrustedRegion::Writable { mode });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("rdx-region-file-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn a_private_file_of_ours_passes_and_a_group_writable_one_does_not() {
        let p = scratch("mode");
        std::fs::write(&p, b"x").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let f = open_existing(&p, false).unwrap_or_else(|_| panic!("open"));
        assert_eq!(
            check_open_file(&f, &TrustedOwners::own_user()).unwrap(),
            Ok(())
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o620)).unwrap();
        assert_eq!(
            check_open_file(&f, &TrustedOwners::own_user()).unwrap(),
            Err(UntrustedRegion::Writable { mode: 0o620 })
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o606)).unwrap();
        assert!(matches!(
            check_open_file(&f, &TrustedOwners::own_user()).unwrap(),
            Err(UntrustedRegion::Writable { .. })
        ));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn a_symbolic_link_is_never_opened() {
        let target = scratch("target");
        let link = scratch("link");
        std::fs::write(&target, b"precious").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(matches!(
            open_existing(&link, true),
            Err(OpenRefusal::Untrusted(UntrustedRegion::Symlink))
        ));
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_file(&target);
    }

    #[test]
    fn owners_other_than_us_and_root_need_naming() {
        let me = effective_uid();
        assert!(TrustedOwners::own_user().accepts(me));
        assert!(TrustedOwners::own_user().accepts(0));
        let other = if me == 61_001 { 61_002 } else { 61_001 };
        assert!(!TrustedOwners::own_user().accepts(other));
        assert!(TrustedOwners::own_user().and(other).accepts(other));
        assert_eq!(TrustedOwners::only_own_user().accepts(0), me == 0);
    }
}
