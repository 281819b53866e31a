//! `SqliteWindowCounter`: the window counter port on a SQLite table, shared by every process
//! using the file. An increment is one upsert that returns the new count, so concurrent
//! increments (threads or processes) each see their own number.

use async_trait::async_trait;
use rusqlite::params;

use super::database::{Database, DatabaseError};
use crate::domain::Millis;
use crate::ports::{StoreError, WindowCounter};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS window_counts (
    key           TEXT PRIMARY KEY,
    count         INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS window_counts_expiry ON window_counts (expires_at_ms);
";

/// Expired counts deleted per increment at most: enough to keep up with the rate rows are made
/// (one per key per window), bounded so one call never does much.
const PRUNE_BATCH: i64 = 16;

#[derive(Clone, Debug)]
pub struct SqliteWindowCounter {
    db: Database,
}

fn unavailable(err: DatabaseError) -> StoreError {
    match err {
        DatabaseError::Corrupt { .. } => StoreError::Corrupt(err.to_string()),
        other => StoreError::Unavailable(other.to_string()),
    }
}

impl SqliteWindowCounter {
    /// Counters in `db` (the process's one database file), creating their table if needed.
    pub async fn new(db: Database) -> Result<Self, StoreError> {
        db.call(|conn| conn.execute_batch(SCHEMA))
            .await
            .map_err(unavailable)?;
        Ok(Self { db })
    }
}

#[async_trait]
impl WindowCounter for SqliteWindowCounter {
    async fn increment(
        &self,
        key: &str,
        expires_at: Millis,
        now: Millis,
    ) -> Result<u64, StoreError> {
        let key = key.to_owned();
        self.db
            .call(move |conn| {
                conn.execute(
                    "DELETE FROM window_counts WHERE key IN (SELECT key FROM window_counts \
                     WHERE expires_at_ms < ?1 LIMIT ?2)",
                    params![now.0, PRUNE_BATCH],
                )?;
                conn.query_row(
                    "INSERT INTO window_counts (key, count, expires_at_ms) VALUES (?1, 1, ?2) \
                     ON CONFLICT (key) DO UPDATE SET count = count + 1 RETURNING count",
                    params![key, expires_at.0],
                    |row| row.get::<_, i64>(0),
                )
            })
            .await
            .map(|count| count as u64)
            .map_err(unavailable)
    }
}
