//! The machine's SQLite store: the journal (session history) and the tasks index (sessions
//! and their projects), token usage ([`usage`]), and the hub's paired devices and audit trail
//! ([`devices`]). This module tree is the only place in the
//! workspace with SQL in it.
//!
//! One file per machine (`<data dir>/zcode-acp.sqlite3`), WAL mode, `busy_timeout` 5 s, every
//! write in `BEGIN IMMEDIATE`, so several bridges write at once without "database is locked".
//! Reads ([`Store::read`]) are deferred transactions: in WAL mode they never wait for a writer.
//! The schema is versioned by `PRAGMA user_version` and migrated forward on open; an open of a
//! file already at the current schema takes no write lock.

pub mod devices;
mod journal;
mod stream;
mod tasks;
mod turns;
pub mod usage;

pub use journal::{MessageRow, NewMessage, SessionCounters, SessionMeta};
pub use stream::MessageRef;
pub use tasks::{IndexView, ProjectRow, SessionRow};
pub use turns::{RecentTurn, TurnRecord};

use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `PRAGMA application_id` of our files ("zcod"), to tell them from foreign SQLite files.
const APPLICATION_ID: i64 = 0x7a63_6f64;

/// The file name under the data directory.
pub const FILE_NAME: &str = "zcode-acp.sqlite3";

/// Migrations, in order; `user_version` is the number applied.
const MIGRATIONS: &[&str] = &[
    // 1: sessions (tasks index + journal counters), messages, latest session state.
    "CREATE TABLE sessions (
        session_id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL DEFAULT '',
        cwd TEXT NOT NULL DEFAULT '',
        title TEXT,
        title_overridden INTEGER NOT NULL DEFAULT 0,
        origin TEXT NOT NULL DEFAULT 'editor',
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        archived INTEGER NOT NULL DEFAULT 0,
        deleted INTEGER NOT NULL DEFAULT 0,
        epoch INTEGER NOT NULL DEFAULT 0,
        first_seq INTEGER NOT NULL DEFAULT 1,
        next_seq INTEGER NOT NULL DEFAULT 1,
        turns INTEGER NOT NULL DEFAULT 0
     );
     CREATE INDEX sessions_by_workspace ON sessions(workspace, updated_at);
     CREATE TABLE messages (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        msg_id TEXT NOT NULL,
        turn INTEGER NOT NULL,
        kind TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
     ) WITHOUT ROWID;
     CREATE INDEX messages_by_turn ON messages(session_id, turn, seq);
     CREATE INDEX messages_by_id ON messages(session_id, msg_id);
     CREATE TABLE session_state (
        session_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session_id, kind)
     ) WITHOUT ROWID;",
    // 2: how each finished turn ended (turns::TurnRecord).
    "CREATE TABLE turns (
        session_id TEXT NOT NULL,
        turn INTEGER NOT NULL,
        stop_reason TEXT NOT NULL,
        error TEXT,
        started_at INTEGER NOT NULL,
        ended_at INTEGER NOT NULL,
        prompted_by TEXT NOT NULL,
        PRIMARY KEY (session_id, turn)
     ) WITHOUT ROWID;
     CREATE INDEX turns_by_end ON turns(ended_at);",
    // 3: token usage recorded by the bridges (see `usage`): one row per turn's usage and per
    // usage_update that adds cost; per session its usage turn count, the highest cumulative
    // cost seen and its latest context window.
    "CREATE TABLE usage_events (
        id INTEGER PRIMARY KEY,
        at INTEGER NOT NULL,
        session_id TEXT NOT NULL,
        turn INTEGER NOT NULL,
        model TEXT NOT NULL,
        source TEXT NOT NULL,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        reasoning_tokens INTEGER NOT NULL DEFAULT 0,
        cache_read_tokens INTEGER NOT NULL DEFAULT 0,
        cache_write_tokens INTEGER NOT NULL DEFAULT 0,
        total_tokens INTEGER NOT NULL DEFAULT 0,
        tool_calls INTEGER NOT NULL DEFAULT 0,
        context_used INTEGER,
        context_size INTEGER,
        cost REAL,
        currency TEXT
     );
     CREATE INDEX usage_events_by_time ON usage_events(at);
     CREATE TABLE usage_sessions (
        session_id TEXT PRIMARY KEY,
        turns INTEGER NOT NULL DEFAULT 0,
        cost_seen REAL,
        currency TEXT,
        context_used INTEGER,
        context_size INTEGER,
        context_at INTEGER
     ) WITHOUT ROWID;",
    // 4: the agent that made (last ran) each session: its config name, else its command line.
    "ALTER TABLE sessions ADD COLUMN agent TEXT;",
    // 5: paired devices (their credential's SHA-256 only), the push endpoints each registered,
    // and the audit trail (see `devices`).
    "CREATE TABLE devices (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        scope TEXT NOT NULL,
        token_sha256 BLOB NOT NULL UNIQUE,
        created_at INTEGER NOT NULL,
        last_seen_at INTEGER
     ) WITHOUT ROWID;
     CREATE TABLE device_push (
        endpoint TEXT PRIMARY KEY,
        device_id TEXT NOT NULL
     ) WITHOUT ROWID;
     CREATE TABLE audit (
        id INTEGER PRIMARY KEY,
        at INTEGER NOT NULL,
        device_id TEXT NOT NULL,
        device_name TEXT NOT NULL,
        action TEXT NOT NULL,
        target TEXT NOT NULL DEFAULT '',
        status INTEGER
     );",
    // 6: a device's public key (an uncompressed P-256 point), when it signs challenges instead
    // of presenting a stored credential (the web client's non-extractable key; see `devices`).
    "ALTER TABLE devices ADD COLUMN public_key BLOB;",
];

/// What went wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file could not be opened, is corrupt, or is not ours.
    #[error("journal {}: {reason}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// What is wrong, for a person.
        reason: String,
    },
    /// A query failed.
    #[error("journal query failed: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// A connection to the store.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl Store {
    /// Opens (creating if needed) the store in `data_dir`.
    pub fn open_in(data_dir: &Path) -> Result<Store, StoreError> {
        let _ = crate::paths::Paths::ensure_private_dir(data_dir);
        Store::open(&data_dir.join(FILE_NAME))
    }

    /// Opens (creating if needed) the store at `path`, migrating it to the current schema.
    /// A corrupt or foreign file is an error naming the file; it is never overwritten.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let fail = |reason: String| StoreError::Open { path: path.to_owned(), reason };
        // Files an older version left readable by others are made private, by their names only
        // (`make_private_by_path`: a descriptor opened and closed here would drop the locks of
        // this process's other connections). A new file is made private in `prepare`, before
        // its `-wal` and `-shm` exist (SQLite gives them the database's mode). Best effort:
        // where this fails, SQLite's open says why.
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let _ = crate::paths::make_private_by_path(&crate::paths::sibling(path, suffix));
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| fail(e.to_string()))?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(|e| fail(e.to_string()))?;
        let mut store = Store { conn, path: path.to_owned() };
        store.prepare().map_err(|e| fail(describe(&e)))?;
        Ok(store)
    }

    /// Caps this connection's page cache at `kib` KiB (SQLite's default is 2 MiB). A cap only
    /// bounds what stays resident: pages beyond it are read again from the OS's file cache.
    pub fn cap_cache(&self, kib: u32) -> Result<(), StoreError> {
        self.conn.pragma_update(None, "cache_size", -i64::from(kib)).map_err(StoreError::from)
    }

    /// How long a statement waits for another connection's lock before `SQLITE_BUSY` (5 s
    /// from [`Store::open`]).
    pub fn set_busy_timeout(&self, wait: Duration) -> Result<(), StoreError> {
        self.conn.busy_timeout(wait).map_err(StoreError::from)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn prepare(&mut self) -> Result<(), rusqlite::Error> {
        // Reading the header first turns "file is not a database" into an error here.
        let (app, version) = self.header()?;
        // Per connection: cheap, and no lock.
        self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        self.conn.pragma_update(None, "foreign_keys", "ON")?;
        let known = MIGRATIONS.len() as i64;
        if app == APPLICATION_ID && version == known {
            // Ours and current (so already in WAL mode, which the file remembers): nothing to
            // write, so no write lock to wait for behind the other writers.
            return Ok(());
        }
        // Creating or migrating the file: one process at a time. A hub and a bridge starting
        // together on a new home both did it at once, and one of them failed ("database is
        // locked" switching to WAL, or the file taken for another program's).
        let _one = crate::paths::FileLock::take(&self.path)
            .map_err(|e| rusqlite::Error::InvalidParameterName(e.to_string()))?;
        // SQLite made a new file with the umask's mode: private before switching to WAL makes
        // the `-wal` and `-shm` (every process switches under this lock).
        let _ = crate::paths::make_private_by_path(&self.path);
        let (app, version) = self.header()?;
        if app == APPLICATION_ID && version == known {
            return Ok(());
        }
        self.conn.pragma_update(None, "journal_mode", "WAL")?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Read again under the lock: another process may have migrated meanwhile.
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version > known {
            return Err(rusqlite::Error::InvalidParameterName(format!(
                "schema version {version} is newer than this zcode-acp knows ({known}): upgrade zcode-acp"
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", i as i64 + 1)?;
        }
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
        tx.commit()
    }

    /// The file's application id and schema version, refusing another program's file. One
    /// statement, so one snapshot: read apart, a new file's id could come from before another
    /// process's migration and its tables from after (a file with tables and no id: "another
    /// program's").
    fn header(&self) -> Result<(i64, i64), rusqlite::Error> {
        let (app, version, tables): (i64, i64, i64) = self.conn.query_row(
            "SELECT (SELECT application_id FROM pragma_application_id), \
                    (SELECT user_version FROM pragma_user_version), \
                    (SELECT count(*) FROM sqlite_master WHERE type = 'table')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        if app != APPLICATION_ID && (app != 0 || tables > 0) {
            return Err(rusqlite::Error::InvalidParameterName(
                "this SQLite file belongs to another program (not a zcode-acp journal)".into(),
            ));
        }
        Ok((app, version))
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction, committed if it returns `Ok`.
    pub fn write<T>(
        &mut self,
        f: impl FnOnce(&Writer<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = f(&Writer { tx: &tx })?;
        tx.commit()?;
        Ok(out)
    }

    /// Runs `f` in one read transaction (deferred: a consistent snapshot that never takes the
    /// write lock, so in WAL mode it never waits for the journal's writers).
    pub fn read<T>(&self, f: impl FnOnce(&Store) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let tx = self.conn.unchecked_transaction()?;
        let out = f(self)?;
        // Nothing was written: ending the transaction only releases the snapshot.
        tx.rollback()?;
        Ok(out)
    }

    /// The connection, for the read queries of the submodules.
    fn conn(&self) -> &Connection {
        &self.conn
    }
}

/// A write transaction in progress.
pub struct Writer<'a> {
    tx: &'a rusqlite::Transaction<'a>,
}

fn describe(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::NotADatabase => {
            "not a SQLite database (corrupt, or another kind of file)".to_owned()
        }
        rusqlite::Error::InvalidParameterName(reason) => reason.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
