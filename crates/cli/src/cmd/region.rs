//! `rdx region ls|gc`: the region files in a directory (`/dev/shm` by default) and their
//! host processes, and removing those whose host is gone. A host killed without the chance to
//! clean up (SIGKILL, a crash) leaves its region behind: nothing else removes it.
//!
//! A region is stale only when its header names a host pid and no process of that pid exists
//! on this machine, and no process this user can inspect maps the file. Anything else (a
//! live or unknown host, a file that is not an rdx region) is never removed.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rdx_region::geometry::check_header;
use rdx_region::layout::{Arch, RegionHeader};
use serde::Serialize;

/// List region files and remove those whose host process is gone.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: RegionCommand,
}

#[derive(clap::Subcommand)]
enum RegionCommand {
    /// List the region files in a directory, each with its host pid and whether it runs.
    Ls {
        #[command(flatten)]
        scan: Scan,
    },
    /// Remove the region files whose host process is gone (never one a live process serves
    /// or maps).
    Gc {
        #[command(flatten)]
        scan: Scan,
        /// List what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(clap::Args)]
struct Scan {
    /// Directory to scan (not recursively); every file in it with an rdx region header counts.
    #[arg(long, value_name = "DIR", default_value = "/dev/shm")]
    dir: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// One region file found in the directory.
#[derive(Serialize)]
struct Found {
    path: PathBuf,
    host_pid: u32,
    bytes: u64,
    /// `live`: the host process exists; `mapped`: the host is gone but another process maps
    /// the file; `stale`: neither.
    status: Status,
    /// `gc` only: whether the file was removed (`false` with `--dry-run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    removed: Option<bool>,
    /// `gc` only: why removing it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Live,
    Mapped,
    Stale,
}

/// Runs `rdx region ls` or `rdx region gc`; `gc` fails if a stale file could not be removed.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        RegionCommand::Ls { scan } => {
            let found = scan_dir(&scan.dir)?;
            if scan.json {
                println!("{}", serde_json::to_string_pretty(&found)?);
            } else if found.is_empty() {
                println!("no region files in {}", scan.dir.display());
            } else {
                println!("{:<8} {:>8} {:>10}  PATH", "STATUS", "HOST PID", "KIB");
                for f in &found {
                    println!(
                        "{:<8} {:>8} {:>10}  {}",
                        status_name(f.status),
                        f.host_pid,
                        f.bytes / 1024,
                        f.path.display()
                    );
                }
            }
        }
        RegionCommand::Gc { scan, dry_run } => {
            let mut found = scan_dir(&scan.dir)?;
            let mut failed = 0;
            for f in found.iter_mut().filter(|f| f.status == Status::Stale) {
                if dry_run {
                    f.removed = Some(false);
                    continue;
                }
                match std::fs::remove_file(&f.path) {
                    Ok(()) => f.removed = Some(true),
                    Err(e) => {
                        failed += 1;
                        f.removed = Some(false);
                        f.error = Some(e.to_string());
                    }
                }
            }
            if scan.json {
                println!("{}", serde_json::to_string_pretty(&found)?);
            } else {
                print_gc(&found, dry_run);
            }
            if failed > 0 {
                anyhow::bail!("{failed} stale region file(s) could not be removed");
            }
        }
    }
    Ok(())
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Live => "live",
        Status::Mapped => "mapped",
        Status::Stale => "stale",
    }
}

fn print_gc(found: &[Found], dry_run: bool) {
    let mut stale = 0;
    for f in found.iter().filter(|f| f.status == Status::Stale) {
        stale += 1;
        let what = match (&f.error, dry_run) {
            (Some(e), _) => format!("cannot remove ({e})"),
            (None, true) => "would remove".into(),
            (None, false) => "removed".into(),
        };
        println!(
            "{what} {} (host pid {} gone, {} KiB)",
            f.path.display(),
            f.host_pid,
            f.bytes / 1024
        );
    }
    let kept = found.len() - stale;
    println!(
        "{stale} stale region file(s){}, {kept} kept (host running or file mapped)",
        if dry_run { " (dry run)" } else { "" }
    );
}

/// Every region file directly in `dir`, sorted by path.
fn scan_dir(dir: &Path) -> anyhow::Result<Vec<Found>> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    let mapped = mapped_files();
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let Some(host_pid) = region_host_pid(&path, meta.len()) else {
            continue;
        };
        let status = if host_pid == 0 || pid_exists(host_pid) {
            // A region whose header names no host is attributed to nobody: kept as live.
            Status::Live
        } else if mapped.iter().any(|m| m == &path) {
            Status::Mapped
        } else {
            Status::Stale
        };
        found.push(Found {
            path,
            host_pid,
            bytes: meta.len(),
            status,
            removed: None,
            error: None,
        });
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// The host pid in the header of `path`, if the file is an rdx region of this machine's
/// architecture (a file that is not is never touched).
fn region_host_pid(path: &Path, len: u64) -> Option<u32> {
    use std::io::Read as _;
    let mut head = vec![0u8; std::mem::size_of::<RegionHeader>()];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    let arch = Arch::HOST?;
    check_header(&head, len, arch).ok().map(|info| info.host_pid)
}

/// Whether a process `pid` exists on this machine (one of another user counts too).
fn pid_exists(pid: u32) -> bool {
    // SAFETY: kill with signal 0 sends nothing; it only checks existence and permission.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The files mapped by every process whose `/proc/PID/maps` this user can read: a region a
/// process still maps (a control plane, a host whose pid the header does not name) is in use.
fn mapped_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return files;
    };
    for p in procs.flatten() {
        if !p.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(maps) = std::fs::read_to_string(p.path().join("maps")) else {
            continue;
        };
        for line in maps.lines() {
            // address perms offset dev inode path: the path is the sixth field, and may
            // contain spaces.
            if let Some(path) = line.splitn(6, ' ').nth(5).map(str::trim_start) {
                if path.starts_with('/') {
                    files.push(PathBuf::from(path.trim_end_matches(" (deleted)")));
                }
            }
        }
    }
    files.sort();
    files.dedup();
    files
}
