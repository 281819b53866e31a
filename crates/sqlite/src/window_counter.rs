//! `SqliteWindowCounter`: the window counter port on a SQLite table, shared by every process
//! using the file. An increment, an add and a capped take are each one upsert that returns the
//! new count, so concurrent callers (threads or processes) each see their own number; a raise
//! reads and writes in one immediate transaction, so it knows the count it rose from.

use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, OptionalExtension, TransactionBehavior};

use super::database::{store_error, Database};
use threadbox_core::domain::Millis;
use threadbox_core::ports::{StoreError, StoreKind, WindowCounter};

/// The store this module's errors name.
const STORE: StoreKind = StoreKind::WindowCounter;

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

impl SqliteWindowCounter {
    /// Counters in `db` (the process's one database file), creating their table if needed.
    pub async fn new(db: Database) -> Result<Self, StoreError> {
        db.call(|conn| conn.execute_batch(SCHEMA))
            .await
            .map_err(store_error(STORE))?;
        Ok(Self { db })
    }
}

impl SqliteWindowCounter {
    /// Prune, then one upsert (`sql` with `args`) answering the new count; `None` when its
    /// WHERE refused the update.
    async fn upsert(
        &self,
        now: Millis,
        sql: &'static str,
        args: Vec<Value>,
    ) -> Result<Option<u64>, StoreError> {
        self.db
            .call(move |conn| {
                prune(conn, now)?;
                conn.query_row(sql, params_from_iter(args), |row| row.get::<_, i64>(0))
                    .optional()
            })
            .await
            .map(|count| count.map(|c| c as u64))
            .map_err(store_error(STORE))
    }
}

/// An unconditional upsert answered no count (it always returns one).
fn no_count() -> StoreError {
    StoreError::unavailable(STORE, "the upsert returned no count")
}

#[async_trait]
impl WindowCounter for SqliteWindowCounter {
    async fn increment(
        &self,
        key: &str,
        expires_at: Millis,
        now: Millis,
    ) -> Result<u64, StoreError> {
        let sql = "INSERT INTO window_counts (key, count, expires_at_ms) VALUES (?1, 1, ?2) \
                   ON CONFLICT (key) DO UPDATE SET count = count + 1 RETURNING count";
        let args = vec![Value::from(key.to_owned()), Value::from(expires_at.0)];
        self.upsert(now, sql, args).await?.ok_or_else(no_count)
    }

    async fn add(
        &self,
        key: &str,
        amount: i64,
        expires_at: Millis,
        now: Millis,
    ) -> Result<u64, StoreError> {
        let sql =
            "INSERT INTO window_counts (key, count, expires_at_ms) VALUES (?1, MAX(?2, 0), ?3) \
                   ON CONFLICT (key) DO UPDATE SET count = CASE WHEN count + ?2 < 0 \
                   THEN count ELSE count + ?2 END RETURNING count";
        let args = vec![
            Value::from(key.to_owned()),
            Value::from(amount),
            Value::from(expires_at.0),
        ];
        self.upsert(now, sql, args).await?.ok_or_else(no_count)
    }

    async fn take_below(
        &self,
        key: &str,
        cap: u64,
        expires_at: Millis,
        now: Millis,
    ) -> Result<Option<u64>, StoreError> {
        if cap == 0 {
            return Ok(None);
        }
        // The update's WHERE refuses at the cap: no row changes, none is returned.
        let sql = "INSERT INTO window_counts (key, count, expires_at_ms) VALUES (?1, 1, ?2) \
                   ON CONFLICT (key) DO UPDATE SET count = count + 1 WHERE count < ?3 \
                   RETURNING count";
        let args = vec![
            Value::from(key.to_owned()),
            Value::from(expires_at.0),
            Value::from(i64::try_from(cap).unwrap_or(i64::MAX)),
        ];
        self.upsert(now, sql, args).await
    }

    async fn raise(
        &self,
        key: &str,
        to: u64,
        expires_at: Millis,
        now: Millis,
    ) -> Result<u64, StoreError> {
        let key = key.to_owned();
        let to = i64::try_from(to).unwrap_or(i64::MAX);
        self.db
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                prune(&tx, now)?;
                let before: i64 = tx
                    .query_row(
                        "SELECT count FROM window_counts WHERE key = ?1",
                        params![key],
                        |row| row.get(0),
                    )
                    .optional()?
                    .unwrap_or(0);
                if before >= to {
                    return Ok(0);
                }
                tx.execute(
                    "INSERT INTO window_counts (key, count, expires_at_ms) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (key) DO UPDATE SET count = ?2",
                    params![key, to, expires_at.0],
                )?;
                tx.commit()?;
                Ok((to - before) as u64)
            })
            .await
            .map_err(store_error(STORE))
    }
}

/// Delete a bounded batch of expired counts.
fn prune(conn: &rusqlite::Connection, now: Millis) -> Result<usize, rusqlite::Error> {
    conn.execute(
        "DELETE FROM window_counts WHERE key IN (SELECT key FROM window_counts \
         WHERE expires_at_ms < ?1 LIMIT ?2)",
        params![now.0, PRUNE_BATCH],
    )
}
