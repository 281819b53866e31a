//! `SqliteCheckpointStore`: the checkpoint store port on SQLite, for `threadbox dev`.
//!
//! One row per checkpoint, keyed by thread and id. `add` inserts and applies the retention in
//! one immediate transaction, so concurrent adds (other processes sharing the file included)
//! each see the others' rows and drop exactly what the limits say.

use std::path::Path;

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension, Row, TransactionBehavior};

use super::database::{store_error, Database};
use threadbox_core::domain::{
    Checkpoint, CheckpointCause, CheckpointId, CheckpointRetention, Millis, ThreadId,
};
use threadbox_core::ports::{CheckpointStore, StoreError, StoreKind};

const STORE: StoreKind = StoreKind::Checkpoints;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id  TEXT NOT NULL,
    id         TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    bytes      INTEGER NOT NULL,
    files      INTEGER NOT NULL,
    label      TEXT,
    cause      TEXT NOT NULL,
    PRIMARY KEY (thread_id, id)
) WITHOUT ROWID;
";

const COLUMNS: &str = "thread_id, id, created_at, bytes, files, label, cause";

#[derive(Clone, Debug)]
pub struct SqliteCheckpointStore {
    db: Database,
}

impl SqliteCheckpointStore {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let db = Database::open(path, SCHEMA).map_err(store_error(STORE))?;
        Ok(Self { db })
    }

    /// The store in an already open database (for instance the one the session store uses).
    pub async fn new(db: Database) -> Result<Self, StoreError> {
        db.call(|conn| conn.execute_batch(SCHEMA))
            .await
            .map_err(store_error(STORE))?;
        Ok(Self { db })
    }
}

fn cause_text(cause: CheckpointCause) -> &'static str {
    match cause {
        CheckpointCause::User => "user",
        CheckpointCause::Turn => "turn",
    }
}

/// A row of [`COLUMNS`]; a row that does not decode is reported, never skipped.
fn row(r: &Row<'_>) -> rusqlite::Result<Result<Checkpoint, StoreError>> {
    let thread: String = r.get(0)?;
    let id: String = r.get(1)?;
    let created_at: i64 = r.get(2)?;
    let bytes: i64 = r.get(3)?;
    let files: i64 = r.get(4)?;
    let label: Option<String> = r.get(5)?;
    let cause: String = r.get(6)?;
    let corrupt = |e: String| StoreError::corrupt(STORE, format!("checkpoint row {id:?}: {e}"));
    let decoded = (|| {
        Ok(Checkpoint {
            id: CheckpointId::parse(&id)?,
            thread_id: ThreadId::parse(&thread).map_err(|e| e.to_string())?,
            created_at: Millis(created_at),
            bytes: bytes as u64,
            files: files as u64,
            label,
            cause: match cause.as_str() {
                "user" => CheckpointCause::User,
                "turn" => CheckpointCause::Turn,
                other => return Err(format!("unknown cause {other:?}")),
            },
        })
    })();
    Ok(decoded.map_err(corrupt))
}

fn thread_rows(
    conn: &rusqlite::Connection,
    thread: &str,
) -> rusqlite::Result<Result<Vec<Checkpoint>, StoreError>> {
    let mut stmt = conn.prepare_cached(&format!(
        // Newest first, as `newest_first` orders them (TEXT compares bytewise, as Rust's str).
        "SELECT {COLUMNS} FROM checkpoints WHERE thread_id = ?1 ORDER BY created_at DESC, id DESC"
    ))?;
    let rows = stmt.query_map([thread], row)?;
    let mut out = Vec::new();
    for r in rows {
        match r? {
            Ok(c) => out.push(c),
            Err(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(out))
}

#[async_trait]
impl CheckpointStore for SqliteCheckpointStore {
    async fn add(
        &self,
        checkpoint: &Checkpoint,
        retention: &CheckpointRetention,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        let c = checkpoint.clone();
        let retention = *retention;
        self.db
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                tx.execute(
                    &format!("INSERT OR REPLACE INTO checkpoints ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
                    params![
                        c.thread_id.as_str(),
                        c.id.as_str(),
                        c.created_at.0,
                        c.bytes as i64,
                        c.files as i64,
                        c.label,
                        cause_text(c.cause)
                    ],
                )?;
                let all = match thread_rows(&tx, c.thread_id.as_str())? {
                    Ok(all) => all,
                    Err(e) => return Ok(Err(e)),
                };
                let dropped: Vec<Checkpoint> = retention
                    .to_drop(&all, Some(&c.id))
                    .into_iter()
                    .cloned()
                    .collect();
                for gone in &dropped {
                    tx.execute(
                        "DELETE FROM checkpoints WHERE thread_id = ?1 AND id = ?2",
                        params![gone.thread_id.as_str(), gone.id.as_str()],
                    )?;
                }
                tx.commit()?;
                Ok(Ok(dropped))
            })
            .await
            .map_err(store_error(STORE))?
    }

    async fn get(
        &self,
        thread_id: &ThreadId,
        id: &CheckpointId,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let (thread, id) = (thread_id.to_string(), id.to_string());
        let found = self
            .db
            .call(move |conn| {
                conn.query_row(
                    &format!("SELECT {COLUMNS} FROM checkpoints WHERE thread_id = ?1 AND id = ?2"),
                    [thread, id],
                    row,
                )
                .optional()
            })
            .await
            .map_err(store_error(STORE))?;
        found.transpose()
    }

    async fn list(&self, thread_id: &ThreadId) -> Result<Vec<Checkpoint>, StoreError> {
        let thread = thread_id.to_string();
        self.db
            .call(move |conn| thread_rows(conn, &thread))
            .await
            .map_err(store_error(STORE))?
    }

    async fn remove(
        &self,
        thread_id: &ThreadId,
        id: &CheckpointId,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let (thread, id) = (thread_id.to_string(), id.to_string());
        let removed = self
            .db
            .call(move |conn| {
                conn.query_row(
                    &format!(
                        "DELETE FROM checkpoints WHERE thread_id = ?1 AND id = ?2 RETURNING {COLUMNS}"
                    ),
                    [thread, id],
                    row,
                )
                .optional()
            })
            .await
            .map_err(store_error(STORE))?;
        removed.transpose()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    async fn store(_test: &str) -> Option<(Arc<dyn CheckpointStore>, tempfile::TempDir)> {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteCheckpointStore::open(dir.path().join("checkpoints.db")).unwrap();
        Some((Arc::new(store), dir))
    }

    threadbox_testing::checkpoint_conformance_tests!(store);
}
