//! The control plane's own state: compiled artifacts by content hash (and the compile cache
//! that maps bytecode hash + architecture + class to them), the nodes it knows, and the
//! deployment history per node and hook.
//!
//! A deploy's history entry also records the JIT tier that built it
//! ([`Registry::record_with_tier`], [`Registry::history_with_tiers`]).
//!
//! Stored in SQLite (bundled, so nothing is needed on the machine) in
//! `<state dir>/registry.sqlite`. SQLite rather than a single-process store such as redb
//! because several `rdx` processes use one state directory at once — two control planes
//! contending for a node, a watcher next to a deploy — and SQLite's file locking with a busy
//! timeout lets them share it where redb would refuse the second opener.
//!
//! Nothing here is needed to operate a node: the region itself holds everything another
//! control plane must recover (lease, allocator, versions). The registry is the history
//! and the cache.

use crate::error::{ControlError, Result};
use crate::tier::Tier;
use rusqlite::{params, Connection, OptionalExtension};
use sha2::{Digest, Sha256};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The state directory: `$RDX_STATE_DIR`, else `$XDG_STATE_HOME/rdx`, else
/// `~/.local/state/rdx`.
pub fn default_state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("RDX_STATE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("rdx");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".local/state/rdx")
}

/// A known node. Its address may hold a secret (a fabric `token=`): `Debug` and the
/// serialised form show it redacted ([`crate::node::redact_address`]), and so must anything
/// that prints it ([`NodeEntry::shown_address`]).
#[derive(Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeEntry {
    /// The name the operator gave the node.
    pub name: String,
    /// The node's address (`shm:PATH`, `fabric://...`); may hold a secret.
    #[serde(serialize_with = "serialize_redacted")]
    pub address: String,
    /// When it was added, in ms since the Unix epoch.
    pub added_ms: u64,
}

impl NodeEntry {
    /// The address as it may be shown: any token redacted.
    pub fn shown_address(&self) -> String {
        crate::node::redact_address(&self.address)
    }
}

impl std::fmt::Debug for NodeEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeEntry")
            .field("name", &self.name)
            .field("address", &self.shown_address())
            .field("added_ms", &self.added_ms)
            .finish()
    }
}

fn serialize_redacted<S: serde::Serializer>(
    address: &str,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&crate::node::redact_address(address))
}

/// What a history entry records. Stored (and serialised) as its [`HistoryAction::name`],
/// the strings registries have always held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HistoryAction {
    /// A generic build published.
    Deploy,
    /// An earlier held version published again.
    Rollback,
    /// The hook set to run nothing.
    Detach,
    /// An elite (speculative) build published.
    Optimize,
    /// A scouting build (branch counters) published.
    Profile,
    /// An ACL policy published with the enforcement program (`rdx acl apply`).
    AclApply,
}

impl HistoryAction {
    /// Every action, in declaration order.
    pub const ALL: [HistoryAction; 6] = [
        HistoryAction::Deploy,
        HistoryAction::Rollback,
        HistoryAction::Detach,
        HistoryAction::Optimize,
        HistoryAction::Profile,
        HistoryAction::AclApply,
    ];

    /// The name the registry stores and `rdx history` shows.
    pub fn name(self) -> &'static str {
        match self {
            HistoryAction::Deploy => "deploy",
            HistoryAction::Rollback => "rollback",
            HistoryAction::Detach => "detach",
            HistoryAction::Optimize => "optimize",
            HistoryAction::Profile => "profile",
            HistoryAction::AclApply => "acl apply",
        }
    }
}

impl std::fmt::Display for HistoryAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

impl std::str::FromStr for HistoryAction {
    type Err = ControlError;

    fn from_str(s: &str) -> Result<HistoryAction> {
        HistoryAction::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| ControlError::Registry(format!("unknown history action {s:?}")))
    }
}

impl serde::Serialize for HistoryAction {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// One entry of a hook's deployment history.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HistoryEntry {
    /// Row id, increasing with time.
    pub id: i64,
    /// The node's name.
    pub node: String,
    /// The hook.
    pub hook: String,
    /// Deploy, rollback or detach.
    pub action: HistoryAction,
    /// The version the action left active (0 when detached).
    pub version: u32,
    /// The version active before.
    pub previous_version: u32,
    /// The program's name.
    pub program: String,
    /// The object file it came from.
    pub object: String,
    /// The class it was verified for.
    pub class: String,
    /// The artifact's content hash (hex).
    pub artifact: String,
    /// When it happened, in ms since the Unix epoch.
    pub at_ms: u64,
    /// The region generation after the action.
    pub generation: u64,
}

/// The registry of one state directory. Cloning it shares its one database connection
/// (serialised by a lock), so a [`crate::CodeFlow`] per node can record its history in the
/// same registry from several threads.
#[derive(Clone)]
pub struct Registry {
    conn: Arc<Mutex<Connection>>,
    dir: PathBuf,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("dir", &self.dir).finish()
    }
}

fn db_err(source: rusqlite::Error) -> ControlError {
    ControlError::RegistryDatabase { path: None, source }
}

impl Registry {
    /// Opens (creating if needed) the registry in `dir`.
    ///
    /// Whoever can write the registry chooses the code the next deploy from its cache runs
    /// on every node, and reads any secret a node address holds, so: a directory this
    /// creates is mode 0700, the database files are made 0600, and a directory or database
    /// owned by another user or writable by group or others is refused
    /// (`docs/security.md`, "State directory").
    pub fn open(dir: &Path) -> Result<Registry> {
        prepare_state_dir(dir)?;
        let path = dir.join("registry.sqlite");
        prepare_database_files(&path)?;
        let conn = Connection::open(&path).map_err(|source| ControlError::RegistryDatabase {
            path: Some(path.clone()),
            source,
        })?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(db_err)?;
        // secure_delete: rows deleted (a removed node's address, which may hold a token)
        // are overwritten with zeros instead of lingering in free pages.
        conn.execute_batch(
            "PRAGMA secure_delete=ON;
             PRAGMA journal_mode=WAL;
             PRAGMA synchronous=NORMAL;
             CREATE TABLE IF NOT EXISTS artifacts(hash TEXT PRIMARY KEY, bytes BLOB NOT NULL, created_ms INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS compile_cache(key TEXT PRIMARY KEY, hash TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS nodes(name TEXT PRIMARY KEY, address TEXT NOT NULL, added_ms INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS history(
                 id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL, hook TEXT NOT NULL,
                 action TEXT NOT NULL, version INTEGER NOT NULL, previous INTEGER NOT NULL,
                 program TEXT NOT NULL, object TEXT NOT NULL, class TEXT NOT NULL,
                 artifact TEXT NOT NULL, at_ms INTEGER NOT NULL, generation INTEGER NOT NULL,
                 tier TEXT);
             CREATE INDEX IF NOT EXISTS history_by_hook ON history(node, hook, id);",
        )
        .map_err(db_err)?;
        add_tier_column(&conn)?;
        Ok(Registry {
            conn: Arc::new(Mutex::new(conn)),
            dir: dir.into(),
        })
    }

    /// The connection, for one statement or query at a time. A panic while holding it
    /// leaves nothing half-done that matters (SQLite rolls back an unfinished statement), so
    /// a poisoned lock is taken over.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The directory holding the database and artifacts.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The artifact cached under a compile key, with its content hash. The bytes are
    /// checked against the hash on every load ([`ControlError::ArtifactHashMismatch`]).
    pub fn cached_artifact(&self, key: &str) -> Result<Option<([u8; 32], Vec<u8>)>> {
        let row: Option<(String, Vec<u8>)> = self
            .conn()
            .query_row(
                "SELECT a.hash, a.bytes FROM compile_cache c JOIN artifacts a ON a.hash = c.hash WHERE c.key = ?1",
                params![key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(db_err)?;
        let Some((stored, bytes)) = row else {
            return Ok(None);
        };
        let hash = check_content_hash(&stored, &bytes)?;
        Ok(Some((hash, bytes)))
    }

    /// Stores an artifact by content hash and points a compile key at it.
    pub fn put_artifact(&self, key: &str, hash: &[u8; 32], bytes: &[u8]) -> Result<()> {
        let h = crate::codeflow::hex(hash);
        self.conn()
            .execute(
                "INSERT OR IGNORE INTO artifacts(hash, bytes, created_ms) VALUES (?1, ?2, ?3)",
                params![h, bytes, crate::lease::now_ms() as i64],
            )
            .map_err(db_err)?;
        self.conn()
            .execute(
                "INSERT OR REPLACE INTO compile_cache(key, hash) VALUES (?1, ?2)",
                params![key, h],
            )
            .map_err(db_err)?;
        Ok(())
    }

    /// An artifact by content hash (hex, or a unique prefix of it), checked against its
    /// hash like [`Registry::cached_artifact`].
    pub fn artifact(&self, hash_hex: &str) -> Result<Option<Vec<u8>>> {
        let row: Option<(String, Vec<u8>)> = self
            .conn()
            .query_row(
                "SELECT hash, bytes FROM artifacts WHERE hash LIKE ?1 || '%' LIMIT 1",
                params![hash_hex],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(db_err)?;
        match row {
            None => Ok(None),
            Some((stored, bytes)) => {
                check_content_hash(&stored, &bytes)?;
                Ok(Some(bytes))
            }
        }
    }

    /// Adds node `name` at `address`, or replaces its address; names are non-empty and
    /// without whitespace.
    pub fn add_node(&self, name: &str, address: &str) -> Result<()> {
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(ControlError::Invalid(format!("bad node name {name:?}")));
        }
        self.conn()
            .execute(
                "INSERT OR REPLACE INTO nodes(name, address, added_ms) VALUES (?1, ?2, ?3)",
                params![name, address, crate::lease::now_ms() as i64],
            )
            .map_err(db_err)?;
        Ok(())
    }

    /// Forgets a node. Its row is overwritten in the database (`secure_delete`) and the
    /// write-ahead log, which still holds the pages as they were, is checkpointed and
    /// truncated, so a token in the node's address does not outlive the node in the files.
    pub fn remove_node(&self, name: &str) -> Result<bool> {
        let removed = self
            .conn()
            .execute("DELETE FROM nodes WHERE name = ?1", params![name])
            .map_err(db_err)?
            > 0;
        if removed {
            self.wipe_log()?;
        }
        Ok(removed)
    }

    /// Copies the write-ahead log into the database and truncates it to zero bytes. Another
    /// process reading at the same moment keeps the log from being reset; then the removed
    /// row's old pages stay in the log until a later checkpoint overwrites them, which is
    /// reported instead of being ignored.
    fn wipe_log(&self) -> Result<()> {
        let (busy, _, _): (i64, i64, i64) = self
            .conn()
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(db_err)?;
        if busy != 0 {
            return Err(ControlError::Registry(format!(
                "the node was removed, but another rdx process kept the write-ahead log of {} from being truncated; run `rdx node rm` again when it is done",
                self.dir.join("registry.sqlite").display()
            )));
        }
        Ok(())
    }

    /// Every known node, by name.
    pub fn nodes(&self) -> Result<Vec<NodeEntry>> {
        let conn = self.conn();
        let mut st = conn
            .prepare("SELECT name, address, added_ms FROM nodes ORDER BY name")
            .map_err(db_err)?;
        let rows = st
            .query_map([], |r| {
                Ok(NodeEntry {
                    name: r.get(0)?,
                    address: r.get(1)?,
                    added_ms: r.get::<_, i64>(2)? as u64,
                })
            })
            .map_err(db_err)?;
        rows.collect::<std::result::Result<_, _>>().map_err(db_err)
    }

    /// A node by name; a name that is not registered but looks like an address (`shm:...`,
    /// a path, or `SCHEME://...`) is used as one, under its redacted form as its name (the
    /// name is printed and recorded in the history).
    pub fn node(&self, name: &str) -> Result<NodeEntry> {
        let found = self
            .conn()
            .query_row(
                "SELECT name, address, added_ms FROM nodes WHERE name = ?1",
                params![name],
                |r| {
                    Ok(NodeEntry {
                        name: r.get(0)?,
                        address: r.get(1)?,
                        added_ms: r.get::<_, i64>(2)? as u64,
                    })
                },
            )
            .optional()
            .map_err(db_err)?;
        match found {
            Some(n) => Ok(n),
            None if name.starts_with("shm:") || name.starts_with('/') || name.contains("://") => {
                Ok(NodeEntry {
                    name: crate::node::redact_address(name),
                    address: name.into(),
                    added_ms: 0,
                })
            }
            None => {
                let name = crate::node::redact_address(name);
                Err(ControlError::Invalid(format!(
                    "unknown node {name:?} (add it with `rdx node add {name} shm:/dev/shm/<region>`)"
                )))
            }
        }
    }

    /// Records `e` (an action that published no new code) and returns its row id.
    pub fn record(&self, e: &HistoryEntry) -> Result<i64> {
        self.record_with_tier(e, None)
    }

    /// Records `e` with the JIT tier that built the version it published (a deploy).
    pub fn record_with_tier(&self, e: &HistoryEntry, tier: Option<Tier>) -> Result<i64> {
        // One lock for the insert and its row id: another thread's insert cannot come between.
        let conn = self.conn();
        conn.execute(
                "INSERT INTO history(node, hook, action, version, previous, program, object, class, artifact, at_ms, generation, tier)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    e.node,
                    e.hook,
                    e.action.name(),
                    e.version,
                    e.previous_version,
                    e.program,
                    e.object,
                    e.class,
                    e.artifact,
                    e.at_ms as i64,
                    e.generation as i64,
                    tier.map(Tier::name)
                ],
            )
        .map_err(db_err)?;
        Ok(conn.last_insert_rowid())
    }

    /// History of a node, optionally one hook, oldest first.
    pub fn history(&self, node: &str, hook: Option<&str>) -> Result<Vec<HistoryEntry>> {
        Ok(self
            .history_with_tiers(node, hook)?
            .into_iter()
            .map(|(e, _)| e)
            .collect())
    }

    /// [`Registry::history`] with the tier each entry recorded (`None`: not a deploy, or
    /// recorded before tiers were).
    pub fn history_with_tiers(
        &self,
        node: &str,
        hook: Option<&str>,
    ) -> Result<Vec<(HistoryEntry, Option<Tier>)>> {
        let conn = self.conn();
        let mut st = conn
            .prepare(
                "SELECT id, node, hook, action, version, previous, program, object, class, artifact, at_ms, generation, tier
                 FROM history WHERE node = ?1 AND (?2 IS NULL OR hook = ?2) ORDER BY id",
            )
            .map_err(db_err)?;
        let rows = st
            .query_map(params![node, hook], |r| {
                let tier: Option<String> = r.get(12)?;
                Ok((
                    HistoryEntry {
                        id: r.get(0)?,
                        node: r.get(1)?,
                        hook: r.get(2)?,
                        action: r.get::<_, String>(3)?.parse().map_err(|e| {
                            rusqlite::Error::FromSqlConversionFailure(
                                3,
                                rusqlite::types::Type::Text,
                                Box::new(e),
                            )
                        })?,
                        version: r.get(4)?,
                        previous_version: r.get(5)?,
                        program: r.get(6)?,
                        object: r.get(7)?,
                        class: r.get(8)?,
                        artifact: r.get(9)?,
                        at_ms: r.get::<_, i64>(10)? as u64,
                        generation: r.get::<_, i64>(11)? as u64,
                    },
                    tier.and_then(|t| t.parse().ok()),
                ))
            })
            .map_err(db_err)?;
        rows.collect::<std::result::Result<_, _>>().map_err(db_err)
    }
}

/// Adds the `tier` column to a history table created before it existed. Two processes may
/// open an old registry at once: the one whose `ALTER` loses finds the column there.
fn add_tier_column(conn: &Connection) -> Result<()> {
    let has = |conn: &Connection| -> Result<bool> {
        conn.query_row(
            "SELECT COUNT(*) FROM pragma_table_info('history') WHERE name = 'tier'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n > 0)
        .map_err(db_err)
    };
    if has(conn)? {
        return Ok(());
    }
    match conn.execute("ALTER TABLE history ADD COLUMN tier TEXT", []) {
        Ok(_) => Ok(()),
        Err(_) if has(conn)? => Ok(()),
        Err(e) => Err(db_err(e)),
    }
}

/// Checks that `bytes` hash (SHA-256) to `stored`, the hex key they are stored under.
fn check_content_hash(stored: &str, bytes: &[u8]) -> Result<[u8; 32]> {
    let actual: [u8; 32] = Sha256::digest(bytes).into();
    match unhex32(stored) {
        Some(h) if h == actual => Ok(h),
        _ => Err(ControlError::ArtifactHashMismatch {
            stored: stored.to_string(),
            actual: crate::codeflow::hex(&actual),
        }),
    }
}

/// Creates the state directory (mode 0700) or checks the existing one: owned by this
/// process's user, not writable by group or others.
fn prepare_state_dir(dir: &Path) -> Result<()> {
    let bad = |why: String| {
        ControlError::Registry(format!("refusing state directory {}: {why}", dir.display()))
    };
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) => return Err(bad(format!("cannot create it: {e}"))),
    }
    let meta = std::fs::metadata(dir).map_err(|e| bad(format!("cannot stat it: {e}")))?;
    check_private(&meta, "it").map_err(bad)
}

/// Whether a state file or directory is this user's and writable only by it.
fn check_private(meta: &std::fs::Metadata, what: &str) -> std::result::Result<(), String> {
    let euid = rdx_transport::region_file::effective_uid();
    if meta.uid() != euid {
        return Err(format!(
            "{what} is owned by uid {}, not by this process's user (uid {euid})",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "{what} has mode {mode:04o}: group or others can write it (chmod go-w it)"
        ));
    }
    Ok(())
}

/// Creates `registry.sqlite` with mode 0600 if missing (SQLite would use 0644), refuses one
/// that is a link, another user's or writable by others, and takes group and other read
/// access away from it and its `-wal` and `-shm` files (created with the database's mode).
fn prepare_database_files(db: &Path) -> Result<()> {
    let bad = |path: &Path, why: String| {
        ControlError::Registry(format!("refusing registry file {}: {why}", path.display()))
    };
    let open = |path: &Path, create: bool| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    };
    for (suffix, create) in [("", true), ("-wal", false), ("-shm", false)] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        let path = PathBuf::from(name);
        let file = match open(&path, create) {
            Ok(f) => f,
            Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(bad(&path, "it is a symbolic link".into()))
            }
            Err(e) => return Err(bad(&path, format!("cannot open it: {e}"))),
        };
        let meta = file
            .metadata()
            .map_err(|e| bad(&path, format!("cannot stat it: {e}")))?;
        if !meta.file_type().is_file() {
            return Err(bad(&path, "it is not a regular file".into()));
        }
        check_private(&meta, "it").map_err(|why| bad(&path, why))?;
        if meta.mode() & 0o077 != 0 {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(|e| bad(&path, format!("cannot make it 0600: {e}")))?;
        }
    }
    Ok(())
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_everything() {
        let dir = std::env::temp_dir().join(format!("rdx-reg-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = Registry::open(&dir).unwrap();
        r.add_node("kv", "shm:/dev/shm/rdx-kv").unwrap();
        assert_eq!(r.node("kv").unwrap().address, "shm:/dev/shm/rdx-kv");
        assert!(r.node("nope").is_err());
        assert_eq!(r.node("shm:/x").unwrap().address, "shm:/x");
        let h: [u8; 32] = Sha256::digest(b"bytes").into();
        r.put_artifact("k1", &h, b"bytes").unwrap();
        assert_eq!(
            r.cached_artifact("k1").unwrap(),
            Some((h, b"bytes".to_vec()))
        );
        assert_eq!(
            r.artifact(&crate::codeflow::hex(&h[..4])).unwrap(),
            Some(b"bytes".to_vec())
        );
        assert_eq!(r.cached_artifact("k2").unwrap(), None);
        // Bytes that do not hash to their key are refused on every load.
        let wrong = [5u8; 32];
        r.put_artifact("k3", &wrong, b"bytes").unwrap();
        assert!(matches!(
            r.cached_artifact("k3"),
            Err(ControlError::ArtifactHashMismatch { .. })
        ));
        assert!(matches!(
            r.artifact(&crate::codeflow::hex(&wrong)),
            Err(ControlError::ArtifactHashMismatch { .. })
        ));
        let e = HistoryEntry {
            id: 0,
            node: "kv".into(),
            hook: "on_get".into(),
            action: HistoryAction::Deploy,
            version: 1,
            previous_version: 0,
            program: "p".into(),
            object: "o.o".into(),
            class: "c".into(),
            artifact: "ab".into(),
            at_ms: 1,
            generation: 1,
        };
        r.record(&e).unwrap();
        r.record(&HistoryEntry {
            hook: "other".into(),
            ..e.clone()
        })
        .unwrap();
        assert_eq!(r.history("kv", Some("on_get")).unwrap().len(), 1);
        assert_eq!(r.history("kv", None).unwrap().len(), 2);
        r.record_with_tier(&e, Some(Tier::Baseline)).unwrap();
        let tiers: Vec<Option<Tier>> = r
            .history_with_tiers("kv", Some("on_get"))
            .unwrap()
            .into_iter()
            .map(|(_, t)| t)
            .collect();
        assert_eq!(tiers, [None, Some(Tier::Baseline)]);
        drop(r);
        // A second opener (another rdx process) shares it.
        let a = Registry::open(&dir).unwrap();
        let b = Registry::open(&dir).unwrap();
        a.add_node("n2", "shm:/y").unwrap();
        assert_eq!(b.nodes().unwrap().len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn history_actions_keep_the_names_registries_hold() {
        let names: Vec<&str> = HistoryAction::ALL.iter().map(|a| a.name()).collect();
        assert_eq!(
            names,
            [
                "deploy",
                "rollback",
                "detach",
                "optimize",
                "profile",
                "acl apply"
            ]
        );
        for a in HistoryAction::ALL {
            assert_eq!(a.name().parse::<HistoryAction>().unwrap(), a);
            assert_eq!(serde_json::to_value(a).unwrap(), a.name());
        }
        assert!("deploy2".parse::<HistoryAction>().is_err());
    }

    #[test]
    fn a_removed_node_leaves_no_copy_of_its_address_in_the_files() {
        let dir = std::env::temp_dir().join(format!("rdx-reg-wipe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let secret = "5ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2";
        let r = Registry::open(&dir).unwrap();
        r.add_node("fab", &format!("fabric://h:1?token={secret}"))
            .unwrap();
        r.add_node("other", "shm:/dev/shm/x").unwrap();
        let entry = r.node("fab").unwrap();
        assert!(!format!("{entry:?}").contains(secret));
        assert!(!serde_json::to_string(&entry).unwrap().contains(secret));
        assert!(r.remove_node("fab").unwrap());
        for name in [
            "registry.sqlite",
            "registry.sqlite-wal",
            "registry.sqlite-shm",
        ] {
            if let Ok(bytes) = std::fs::read(dir.join(name)) {
                assert!(
                    !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                    "{name} still holds the removed node's token"
                );
            }
        }
        assert_eq!(r.nodes().unwrap().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_registry_from_before_tiers_gains_the_column_and_keeps_its_history() {
        let dir = std::env::temp_dir().join(format!("rdx-reg-old-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        {
            let conn = Connection::open(dir.join("registry.sqlite")).unwrap();
            conn.execute_batch(
                "CREATE TABLE history(
                     id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL, hook TEXT NOT NULL,
                     action TEXT NOT NULL, version INTEGER NOT NULL, previous INTEGER NOT NULL,
                     program TEXT NOT NULL, object TEXT NOT NULL, class TEXT NOT NULL,
                     artifact TEXT NOT NULL, at_ms INTEGER NOT NULL, generation INTEGER NOT NULL);
                 INSERT INTO history(node, hook, action, version, previous, program, object, class, artifact, at_ms, generation)
                     VALUES ('kv', 'on_get', 'deploy', 1, 0, 'p', 'o.o', 'c', 'ab', 1, 1);",
            )
            .unwrap();
        }
        let a = Registry::open(&dir).unwrap();
        let b = Registry::open(&dir).unwrap();
        let old = a.history_with_tiers("kv", None).unwrap();
        assert_eq!(old.len(), 1);
        assert_eq!(old[0].1, None);
        let mut e = old[0].0.clone();
        e.version = 2;
        b.record_with_tier(&e, Some(Tier::Optimizing)).unwrap();
        assert_eq!(
            a.history_with_tiers("kv", None).unwrap()[1].1,
            Some(Tier::Optimizing)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
