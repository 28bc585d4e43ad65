//! The durable intent log of a broadcast: one JSON record per line, each appended and
//! fsync'd before the phase it announces starts, so that `rdx recover` can finish or undo a
//! broadcast whose control plane died at any point.
//!
//! The log is the coordinator's own account and recovery's fast path: it names the nodes
//! (so `rdx recover` on this machine needs no addresses) and frees what an update prepared
//! before any node held its record. The decision is not here: it lives in the nodes'
//! update records ([`crate::record`]), so that any control plane can read it.

use crate::error::{FleetError, Result};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// One record of the intent log.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "entry", rename_all = "snake_case")]
pub enum Entry {
    /// The broadcast starts: its lease holder id on every node, and the nodes.
    Begin {
        /// The broadcast's id.
        id: String,
        /// Its lease holder id on every node.
        holder: u32,
        /// The control plane's pid: recovery leaves a live broadcast alone.
        pid: u32,
        /// The nodes, as (name, address).
        nodes: Vec<(String, String)>,
    },
    /// One hook of one node is written, not visible: the word it replaces and the word
    /// that publishes it.
    Prepared {
        /// The node.
        node: String,
        /// The hook.
        hook: String,
        /// Region offset of the hook's slot.
        slot_offset: u64,
        /// The active word the flip replaces.
        expected: u64,
        /// The active word that publishes the new version.
        new_word: u64,
        /// The class budget the slot must carry.
        budget: u64,
        /// The version prepared.
        version: u32,
    },
    /// Holds are about to be taken.
    Hold,
    /// Every hold is released: nothing left to do.
    Done,
    /// Nothing was made visible; every hold released.
    Aborted {
        /// Why the broadcast stopped.
        reason: String,
    },
}

/// What a record must survive once [`IntentLog::append`] returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// The death of the control plane (kill -9): the record is in the kernel's page cache
    /// (`write` returned). Enough when every node shares the control plane's machine (shared
    /// memory): a machine crash takes the nodes' regions with it, leaving nothing to recover.
    Process,
    /// The crash of the control plane's machine: every record is `fdatasync`ed (and the new
    /// file's directory synced). Needed when a node lives on another machine (the fabric):
    /// it outlives a crash of ours and must be recovered from the log.
    Machine,
}

impl Durability {
    /// [`Durability::Process`] when every address is shared memory on this machine,
    /// [`Durability::Machine`] otherwise.
    pub fn for_addresses<'a>(mut addresses: impl Iterator<Item = &'a str>) -> Durability {
        if addresses.all(|a| a.starts_with("shm:")) {
            Durability::Process
        } else {
            Durability::Machine
        }
    }
}

/// An open intent log.
pub struct IntentLog {
    path: PathBuf,
    file: File,
    durability: Durability,
}

/// Directory of intent logs under a control plane's state directory.
pub fn intent_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("fleet")
}

fn ierr(path: &Path) -> impl FnOnce(std::io::Error) -> FleetError + '_ {
    move |e| FleetError::Intent {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

impl IntentLog {
    /// Creates `<state_dir>/fleet/<id>.intent`; with [`Durability::Machine`] syncs its
    /// directory, so the file itself survives a crash of the machine.
    pub fn create(state_dir: &Path, id: &str, durability: Durability) -> Result<IntentLog> {
        let dir = intent_dir(state_dir);
        std::fs::create_dir_all(&dir).map_err(ierr(&dir))?;
        let path = dir.join(format!("{id}.intent"));
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(ierr(&path))?;
        if durability == Durability::Machine {
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(ierr(&dir))?;
        }
        Ok(IntentLog {
            path,
            file,
            durability,
        })
    }

    /// Reopens a log for appending (recovery). A torn last line is closed first so that
    /// what follows stays readable.
    pub fn reopen(path: &Path) -> Result<IntentLog> {
        let bytes = std::fs::read(path).map_err(ierr(path))?;
        let mut file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(ierr(path))?;
        if bytes.last().is_some_and(|&b| b != b'\n') {
            file.write_all(b"\n").map_err(ierr(path))?;
        }
        Ok(IntentLog {
            path: path.to_path_buf(),
            file,
            durability: Durability::Machine,
        })
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends records in one `write`; with [`Durability::Machine`] also `fdatasync`s (the
    /// file's size is part of the data synced).
    pub fn append(&mut self, entries: &[Entry]) -> Result<()> {
        let mut buf = Vec::new();
        for e in entries {
            serde_json::to_writer(&mut buf, e).map_err(|e| FleetError::Intent {
                path: self.path.clone(),
                reason: e.to_string(),
            })?;
            buf.push(b'\n');
        }
        self.file.write_all(&buf).map_err(ierr(&self.path))?;
        if self.durability == Durability::Machine {
            self.file.sync_data().map_err(ierr(&self.path))?;
        }
        Ok(())
    }

    /// Marks the log finished: renamed to `.done` (kept for the record).
    pub fn finish(self) -> Result<PathBuf> {
        let done = self.path.with_extension("done");
        std::fs::rename(&self.path, &done).map_err(ierr(&self.path))?;
        Ok(done)
    }
}

/// Reads a log. A torn last line (the control plane died while appending) is ignored: the
/// phase it announced had not started.
pub fn read(path: &Path) -> Result<Vec<Entry>> {
    let f = File::open(path).map_err(ierr(path))?;
    let lines: Vec<String> = BufReader::new(f)
        .lines()
        .collect::<std::io::Result<_>>()
        .map_err(ierr(path))?;
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str(line) {
            Ok(e) => out.push(e),
            Err(_) if i + 1 == lines.len() => break,
            Err(e) => {
                return Err(FleetError::Intent {
                    path: path.to_path_buf(),
                    reason: format!("line {}: {e}", i + 1),
                })
            }
        }
    }
    Ok(out)
}

/// Unfinished logs (`*.intent`) under a state directory, oldest first.
pub fn pending(state_dir: &Path) -> Result<Vec<PathBuf>> {
    let dir = intent_dir(state_dir);
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(ierr(&dir)(e)),
    };
    let mut out: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "intent"))
        .collect();
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_torn_tail() {
        let dir = std::env::temp_dir().join(format!("rdx-fleet-intent-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut log = IntentLog::create(&dir, "b1", Durability::Machine).unwrap();
        let entries = vec![
            Entry::Begin {
                id: "b1".into(),
                holder: 7,
                pid: 1,
                nodes: vec![("a".into(), "shm:/x".into())],
            },
            Entry::Hold,
        ];
        log.append(&entries).unwrap();
        let path = log.path().to_path_buf();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"entry\":\"do")
            .unwrap();
        assert_eq!(read(&path).unwrap(), entries);
        assert_eq!(pending(&dir).unwrap(), vec![path.clone()]);
        let done = IntentLog::reopen(&path).unwrap().finish().unwrap();
        assert!(done.exists());
        assert!(pending(&dir).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_shared_memory_nodes_make_process_durability_enough() {
        let d = |a: &[&str]| Durability::for_addresses(a.iter().copied());
        assert_eq!(
            d(&["shm:/dev/shm/a", "shm:/dev/shm/b"]),
            Durability::Process
        );
        assert_eq!(
            d(&["shm:/dev/shm/a", "fabric://10.0.0.2:7000"]),
            Durability::Machine
        );
    }
}
