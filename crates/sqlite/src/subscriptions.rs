//! `SqliteSubscriptionStore`: the subscription store port on SQLite, for `threadbox dev`.
//!
//! Two tables: connections, and subscriptions that belong to them (deleted with them by a
//! foreign-key cascade). An index by thread serves fan-out; the compare-and-set on `last_seq` is
//! one conditional `UPDATE`, and `advance_many` moves a set of a thread's subscribers in one
//! statement.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, OptionalExtension, Row};

use super::database::{store_error, Database};
use threadbox_core::domain::{Millis, ThreadId, ThreadScope};
use threadbox_core::ports::{Connection, StoreError, StoreKind, Subscription, SubscriptionStore};

/// The store this module's errors name.
const STORE: StoreKind = StoreKind::Subscriptions;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS live_connections (
    connection_id TEXT PRIMARY KEY,
    scope         TEXT NOT NULL,
    expires_at    INTEGER NOT NULL,
    connected_at  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS live_connections_expiry ON live_connections (expires_at);
CREATE TABLE IF NOT EXISTS live_subscriptions (
    connection_id TEXT NOT NULL REFERENCES live_connections (connection_id) ON DELETE CASCADE,
    thread_id     TEXT NOT NULL,
    last_seq      INTEGER NOT NULL,
    PRIMARY KEY (connection_id, thread_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS live_subscriptions_by_thread
    ON live_subscriptions (thread_id, connection_id);
";

/// Connections whose token expired are deleted on every this-many connects, so records of
/// sockets that died without a disconnect (a killed process) do not pile up.
const PRUNE_EVERY: u64 = 64;

#[derive(Clone, Debug)]
pub struct SqliteSubscriptionStore {
    db: Database,
    connects: Arc<AtomicU64>,
}

impl SqliteSubscriptionStore {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let db = Database::open(path, SCHEMA).map_err(store_error(STORE))?;
        Ok(Self::build(db))
    }

    /// The store in an already open database (for instance the one the session store uses).
    pub async fn new(db: Database) -> Result<Self, StoreError> {
        db.call(|conn| conn.execute_batch(SCHEMA))
            .await
            .map_err(store_error(STORE))?;
        Ok(Self::build(db))
    }

    fn build(db: Database) -> Self {
        Self {
            db,
            connects: Arc::default(),
        }
    }
}

/// A row of `subscription_columns` as a subscription. A thread id that does not parse is a
/// corrupt row, reported rather than skipped.
fn subscription(row: &Row<'_>) -> rusqlite::Result<Result<Subscription, StoreError>> {
    let connection_id: String = row.get(0)?;
    let thread: String = row.get(1)?;
    let last_seq: i64 = row.get(2)?;
    let expires_at: i64 = row.get(3)?;
    Ok(ThreadId::parse(&thread)
        .map(|thread_id| Subscription {
            connection_id,
            thread_id,
            last_seq: last_seq as u64,
            expires_at: Millis(expires_at),
        })
        .map_err(|e| {
            StoreError::corrupt(
                STORE,
                format!("subscription row with thread {thread:?}: {e}"),
            )
        }))
}

const SUBSCRIPTION_SELECT: &str = "
    SELECT s.connection_id, s.thread_id, s.last_seq, c.expires_at
    FROM live_subscriptions s JOIN live_connections c USING (connection_id)";

impl SqliteSubscriptionStore {
    /// Run `sql` on one subscription (`?1` the connection, `?2` the thread, `more` from `?3`):
    /// true when it changed that row.
    async fn changes_one(
        &self,
        sql: &'static str,
        connection_id: &str,
        thread_id: &ThreadId,
        more: Vec<Value>,
    ) -> Result<bool, StoreError> {
        let mut args = vec![
            Value::from(connection_id.to_owned()),
            Value::from(thread_id.as_str().to_owned()),
        ];
        args.extend(more);
        self.db
            .call(move |conn| conn.execute(sql, params_from_iter(args)).map(|n| n == 1))
            .await
            .map_err(store_error(STORE))
    }

    /// The subscriptions `filter` (a WHERE and ORDER BY clause on `s`, with `?1`) selects.
    async fn select_subscriptions(
        &self,
        filter: &'static str,
        arg: String,
    ) -> Result<Vec<Subscription>, StoreError> {
        self.db
            .call(move |conn| {
                let mut stmt = conn.prepare_cached(&format!("{SUBSCRIPTION_SELECT} {filter}"))?;
                let rows = stmt.query_map([arg], subscription)?;
                collect(rows)
            })
            .await
            .map_err(store_error(STORE))?
    }
}

fn collect(
    rows: impl Iterator<Item = rusqlite::Result<Result<Subscription, StoreError>>>,
) -> rusqlite::Result<Result<Vec<Subscription>, StoreError>> {
    let mut out = Vec::new();
    for row in rows {
        match row? {
            Ok(s) => out.push(s),
            Err(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(out))
}

#[async_trait]
impl SubscriptionStore for SqliteSubscriptionStore {
    async fn add_connection(&self, connection: &Connection) -> Result<(), StoreError> {
        let scope = serde_json::to_string(&connection.scope)
            .map_err(|e| StoreError::corrupt(STORE, format!("cannot encode scope: {e}")))?;
        let c = connection.clone();
        let prune = self
            .connects
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(PRUNE_EVERY);
        self.db
            .call(move |conn| {
                let tx = conn.transaction()?;
                if prune {
                    tx.execute(
                        "DELETE FROM live_connections WHERE expires_at <= ?1",
                        [c.connected_at.0],
                    )?;
                }
                // Delete first so a reused id's old subscriptions go with it (the cascade).
                tx.execute(
                    "DELETE FROM live_connections WHERE connection_id = ?1",
                    [&c.connection_id],
                )?;
                tx.execute(
                    "INSERT INTO live_connections (connection_id, scope, expires_at, connected_at)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![c.connection_id, scope, c.expires_at.0, c.connected_at.0],
                )?;
                tx.commit()
            })
            .await
            .map_err(store_error(STORE))
    }

    async fn connection(&self, connection_id: &str) -> Result<Option<Connection>, StoreError> {
        let id = connection_id.to_owned();
        let row = self
            .db
            .call(move |conn| {
                conn.query_row(
                    "SELECT scope, expires_at, connected_at FROM live_connections
                     WHERE connection_id = ?1",
                    [&id],
                    |r| Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()
            })
            .await
            .map_err(store_error(STORE))?;
        let Some((scope, expires_at, connected_at)) = row else {
            return Ok(None);
        };
        let scope: ThreadScope = serde_json::from_str(&scope).map_err(|e| {
            StoreError::corrupt(
                STORE,
                format!("connection {connection_id} has scope {scope:?}: {e}"),
            )
        })?;
        Ok(Some(Connection {
            connection_id: connection_id.to_owned(),
            scope,
            expires_at: Millis(expires_at),
            connected_at: Millis(connected_at),
        }))
    }

    async fn remove_connection(&self, connection_id: &str) -> Result<(), StoreError> {
        let id = connection_id.to_owned();
        self.db
            .call(move |conn| {
                conn.execute(
                    "DELETE FROM live_connections WHERE connection_id = ?1",
                    [id],
                )
                .map(|_| ())
            })
            .await
            .map_err(store_error(STORE))
    }

    async fn subscribe(
        &self,
        connection_id: &str,
        thread_id: &ThreadId,
        after_seq: u64,
    ) -> Result<bool, StoreError> {
        let id = connection_id.to_owned();
        let thread = thread_id.as_str().to_owned();
        self.db
            .call(move |conn| {
                // The EXISTS makes subscribe-after-disconnect write nothing, in one statement.
                let changed = conn.execute(
                    "INSERT INTO live_subscriptions (connection_id, thread_id, last_seq)
                     SELECT ?1, ?2, ?3
                     WHERE EXISTS (SELECT 1 FROM live_connections WHERE connection_id = ?1)
                     ON CONFLICT (connection_id, thread_id) DO UPDATE SET last_seq = excluded.last_seq",
                    params![id, thread, after_seq as i64],
                )?;
                Ok(changed == 1)
            })
            .await
            .map_err(store_error(STORE))
    }

    async fn unsubscribe(
        &self,
        connection_id: &str,
        thread_id: &ThreadId,
    ) -> Result<bool, StoreError> {
        let sql = "DELETE FROM live_subscriptions WHERE connection_id = ?1 AND thread_id = ?2";
        self.changes_one(sql, connection_id, thread_id, vec![])
            .await
    }

    async fn subscription(
        &self,
        connection_id: &str,
        thread_id: &ThreadId,
    ) -> Result<Option<Subscription>, StoreError> {
        let id = connection_id.to_owned();
        let thread = thread_id.as_str().to_owned();
        let found = self
            .db
            .call(move |conn| {
                conn.query_row(
                    &format!(
                        "{SUBSCRIPTION_SELECT} WHERE s.connection_id = ?1 AND s.thread_id = ?2"
                    ),
                    params![id, thread],
                    subscription,
                )
                .optional()
            })
            .await
            .map_err(store_error(STORE))?;
        found.transpose()
    }

    async fn subscriptions_of(&self, connection_id: &str) -> Result<Vec<Subscription>, StoreError> {
        self.select_subscriptions(
            "WHERE s.connection_id = ?1 ORDER BY s.thread_id",
            connection_id.to_owned(),
        )
        .await
    }

    async fn subscribers(&self, thread_id: &ThreadId) -> Result<Vec<Subscription>, StoreError> {
        self.select_subscriptions(
            "WHERE s.thread_id = ?1 ORDER BY s.connection_id",
            thread_id.as_str().to_owned(),
        )
        .await
    }

    async fn advance(
        &self,
        connection_id: &str,
        thread_id: &ThreadId,
        from: u64,
        to: u64,
    ) -> Result<bool, StoreError> {
        let sql = "UPDATE live_subscriptions SET last_seq = ?4
                   WHERE connection_id = ?1 AND thread_id = ?2 AND last_seq = ?3";
        let more = vec![Value::from(from as i64), Value::from(to as i64)];
        self.changes_one(sql, connection_id, thread_id, more).await
    }

    async fn advance_many(
        &self,
        thread_id: &ThreadId,
        connection_ids: &[String],
        from: u64,
        to: u64,
    ) -> Result<Vec<String>, StoreError> {
        if connection_ids.is_empty() {
            return Ok(Vec::new());
        }
        let thread = thread_id.as_str().to_owned();
        // The ids travel as one JSON array parameter, so the statement is the same for any count.
        let ids = serde_json::to_string(connection_ids).map_err(|e| {
            StoreError::corrupt(STORE, format!("cannot encode connection ids: {e}"))
        })?;
        let mut moved = self
            .db
            .call(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "UPDATE live_subscriptions SET last_seq = ?3
                     WHERE thread_id = ?1 AND last_seq = ?2
                       AND connection_id IN (SELECT value FROM json_each(?4))
                     RETURNING connection_id",
                )?;
                let ids = stmt
                    .query_map(params![thread, from as i64, to as i64, ids], |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>();
                ids
            })
            .await
            .map_err(store_error(STORE))?;
        moved.sort();
        Ok(moved)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use threadbox_testing::subscription_conformance as suite;

    async fn store(_test: &str) -> Option<(Arc<dyn SubscriptionStore>, tempfile::TempDir)> {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteSubscriptionStore::open(dir.path().join("live.db")).unwrap();
        Some((Arc::new(store), dir))
    }

    threadbox_testing::subscription_conformance_tests!(store);

    #[tokio::test]
    async fn shares_a_database_with_the_session_store() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = crate::SqliteSessionStore::open(dir.path().join("t.db")).unwrap();
        let s = SqliteSubscriptionStore::new(sessions.database().clone())
            .await
            .unwrap();
        suite::subscribers_are_found_by_thread(Arc::new(s)).await;
    }
}
