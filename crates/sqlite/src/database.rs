//! One SQLite file, opened once per process and used from async code.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use threadbox_core::ports::{StoreError, StoreKind};
use tokio::sync::Mutex;

/// How long one call may wait in all before giving up: for its turn at this process's
/// connection, then for another process's write lock. One budget for both, so that when the file
/// is locked a request does not wait out the busy timeout of every background loop queued ahead
/// of it (dev's janitor, pollers and queue consumers share this connection).
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    #[error("cannot create SQLite database {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open SQLite database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("SQLite database {path} is corrupt or not a database: {source}")]
    Corrupt {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("SQLite error on {path}: {source}")]
    Sql {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("SQLite worker for {path} stopped: {reason}")]
    Worker { path: PathBuf, reason: String },
    /// The connection stayed in use by other callers for the whole budget; in practice because
    /// each of them is waiting for a write lock another process holds.
    #[error("SQLite database {path} is busy: database is locked (no turn at the connection within {waited:?})")]
    Busy { path: PathBuf, waited: Duration },
}

impl DatabaseError {
    /// This failure as `store`'s: a file that is not a database holds corrupt records; anything
    /// else (locked, busy, gone) leaves the store unavailable, worth another try.
    pub fn in_store(self, store: StoreKind) -> StoreError {
        match self {
            DatabaseError::Corrupt { .. } => StoreError::corrupt(store, self.to_string()),
            other => StoreError::unavailable(store, other.to_string()),
        }
    }
}

/// [`DatabaseError::in_store`] for `map_err`: every SQLite store maps its errors through this.
pub(crate) fn store_error(store: StoreKind) -> impl Fn(DatabaseError) -> StoreError {
    move |err| err.in_store(store)
}

/// A handle to one database file. Cheap to clone; calls run on Tokio's blocking pool so they
/// never stall the async runtime.
#[derive(Clone)]
pub struct Database {
    path: Arc<PathBuf>,
    conn: Arc<Mutex<Connection>>,
    budget: Duration,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("path", &self.path)
            .finish()
    }
}

impl Database {
    /// Open (creating if needed) the database at `path` and run `schema`, idempotent DDL.
    /// A file that is not a SQLite database gives `DatabaseError::Corrupt` naming the path.
    pub fn open(path: impl AsRef<Path>, schema: &str) -> Result<Self, DatabaseError> {
        let path = path.as_ref().to_path_buf();
        create_private(&path).map_err(|source| DatabaseError::Create {
            path: path.clone(),
            source,
        })?;
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn =
            Connection::open_with_flags(&path, flags).map_err(|source| DatabaseError::Open {
                path: path.clone(),
                source,
            })?;
        let classify = |source: rusqlite::Error| classify(&path, source);
        conn.busy_timeout(BUSY_TIMEOUT).map_err(classify)?;
        // journal_mode is the first statement that reads the file, so a corrupt file fails here.
        conn.pragma_update_and_check(None, "journal_mode", "wal", |_| Ok(()))
            .map_err(classify)?;
        conn.pragma_update(None, "synchronous", "normal")
            .map_err(classify)?;
        conn.pragma_update(None, "foreign_keys", "on")
            .map_err(classify)?;
        conn.execute_batch(schema).map_err(classify)?;
        Ok(Self {
            path: Arc::new(path),
            conn: Arc::new(Mutex::new(conn)),
            budget: BUSY_TIMEOUT,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `f` with the connection on this thread; for set-up right after `open`, before the
    /// handle is shared, so the connection is free (a busy one is an error, never a wait).
    pub fn call_blocking<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, rusqlite::Error>,
    ) -> Result<T, DatabaseError> {
        let mut guard = self.conn.try_lock().map_err(|_| DatabaseError::Busy {
            path: self.path.to_path_buf(),
            waited: Duration::ZERO,
        })?;
        f(&mut guard).map_err(|source| classify(&self.path, source))
    }

    /// Run `f` with the connection on the blocking pool, within one budget (`BUSY_TIMEOUT`) in
    /// all.
    pub async fn call<T, F>(&self, f: F) -> Result<T, DatabaseError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, rusqlite::Error> + Send + 'static,
    {
        let started = Instant::now();
        let budget = self.budget;
        let mut guard = tokio::time::timeout(budget, self.conn.clone().lock_owned())
            .await
            .map_err(|_| DatabaseError::Busy {
                path: self.path.to_path_buf(),
                waited: started.elapsed(),
            })?;
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            // What is left of the budget is what SQLite may wait for another process's lock.
            let left = budget
                .saturating_sub(started.elapsed())
                .max(Duration::from_millis(1));
            guard
                .busy_timeout(left)
                .map_err(|source| classify(&path, source))?;
            f(&mut guard).map_err(|source| classify(&path, source))
        })
        .await
        .map_err(|join| DatabaseError::Worker {
            path: self.path.to_path_buf(),
            reason: join.to_string(),
        })?
    }
}

/// Make a missing database file owner-only before SQLite opens it: it holds sessions, queued
/// Slack text and command output, and SQLite gives its `-wal` and `-shm` files the database
/// file's mode. An existing file is left as it is (`threadbox dev` checks its data directory).
fn create_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other.map(drop),
    }
}

/// Whether this file has `table`. Stores share one file but each creates only its own tables, so
/// housekeeping that spans them (purging a thread's Slack status with the thread) checks first.
pub(crate) fn has_table(conn: &Connection, table: &str) -> Result<bool, rusqlite::Error> {
    conn.prepare_cached("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1")?
        .exists([table])
}

fn classify(path: &Path, source: rusqlite::Error) -> DatabaseError {
    use rusqlite::ErrorCode;
    let corrupt = matches!(
        source.sqlite_error_code(),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
    );
    if corrupt {
        DatabaseError::Corrupt {
            path: path.to_path_buf(),
            source,
        }
    } else {
        DatabaseError::Sql {
            path: path.to_path_buf(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_that_is_not_a_database_names_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("garbage.db");
        std::fs::write(&path, vec![0x42u8; 8192]).unwrap();
        let err = Database::open(&path, "CREATE TABLE IF NOT EXISTS t (x)").unwrap_err();
        assert!(matches!(err, DatabaseError::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains("garbage.db"), "{err}");
    }

    /// Each store's errors name that store, not "session store" for all of them.
    #[tokio::test]
    async fn every_store_names_itself_in_its_errors() {
        use crate::{
            SqliteDedupe, SqliteSessionStore, SqliteSlackSink, SqliteSlackStatusStore,
            SqliteSlackUserThreads, SqliteSubscriptionStore,
        };
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.db");
        std::fs::write(&garbage, vec![0x42u8; 8192]).unwrap();
        let missing = dir.path().join("missing-dir/threadbox.db");
        type Open = fn(&Path) -> Option<StoreError>;
        let opens: [(&str, Open); 6] = [
            ("session", |p| SqliteSessionStore::open(p).err()),
            ("dedupe", |p| SqliteDedupe::open(p).err()),
            ("subscription", |p| SqliteSubscriptionStore::open(p).err()),
            ("Slack status", |p| SqliteSlackStatusStore::open(p).err()),
            ("Slack user threads", |p| {
                SqliteSlackUserThreads::open(p).err()
            }),
            ("Slack sink", |p| SqliteSlackSink::open(p).err()),
        ];
        for (store, open) in opens {
            let err = open(&garbage).expect("a corrupt file is refused");
            assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
            assert!(
                err.to_string()
                    .starts_with(&format!("{store} store holds a corrupt record: ")),
                "{err}"
            );
            let err = open(&missing).expect("a missing directory is refused");
            assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
            assert!(
                err.to_string()
                    .starts_with(&format!("{store} store unavailable: ")),
                "{err}"
            );
        }
    }

    #[tokio::test]
    async fn a_missing_directory_names_its_path() {
        let err = Database::open("/nonexistent-dir/threadbox.db", "").unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent-dir/threadbox.db"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_new_database_and_its_wal_and_shm_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("private.db");
        let db = Database::open(&path, "CREATE TABLE IF NOT EXISTS t (x)").unwrap();
        db.call(|c| c.execute("INSERT INTO t VALUES (1)", []))
            .await
            .unwrap();
        for name in ["private.db", "private.db-wal", "private.db-shm"] {
            let mode = std::fs::metadata(dir.path().join(name))
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{name} is {:o}", mode & 0o777);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_locked_file_fails_each_queued_call_within_one_budget_not_one_each() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("locked.db");
        let mut db = Database::open(&path, "CREATE TABLE IF NOT EXISTS t (x)").unwrap();
        db.budget = Duration::from_secs(2);
        let locker = Connection::open(&path).unwrap();
        locker.execute_batch("BEGIN EXCLUSIVE").unwrap();

        // Five writers queue for the one connection; each used to wait out the busy timeout in
        // turn (10 s here), so the last one answered after all of them.
        let started = Instant::now();
        let calls = (0..5).map(|_| {
            let db = db.clone();
            tokio::spawn(
                async move { db.call(|c| c.execute("INSERT INTO t VALUES (1)", [])).await },
            )
        });
        for call in futures::future::join_all(calls).await {
            let err = call.unwrap().unwrap_err();
            assert!(err.to_string().contains("database is locked"), "{err}");
            assert!(err.to_string().contains("locked.db"), "{err}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "each call kept to one 2 s budget: {:?}",
            started.elapsed()
        );

        locker.execute_batch("ROLLBACK").unwrap();
        db.call(|c| c.execute("INSERT INTO t VALUES (1)", []))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn calls_run_and_errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let db =
            Database::open(dir.path().join("a.db"), "CREATE TABLE IF NOT EXISTS t (x)").unwrap();
        let n: i64 = db
            .call(|c| c.query_row("SELECT count(*) FROM t", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(n, 0);
        let err = db
            .call(|c| c.execute("SELECT * FROM missing", []))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("a.db"), "{err}");
    }
}
