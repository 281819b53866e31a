//! `SqliteDedupe`: the dedupe port on a SQLite table, shared by every process using the file.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::params;

use super::database::{store_error, Database};
use threadbox_core::ports::{DedupeStore, StoreError, StoreKind};

/// The store this module's errors name.
const STORE: StoreKind = StoreKind::Dedupe;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS dedupe (
    key           TEXT PRIMARY KEY,
    expires_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dedupe_expiry ON dedupe (expires_at_ms);
";

/// Expired keys are deleted on every this-many claims, so the table stays small without a timer.
const PRUNE_EVERY: u64 = 256;

#[derive(Clone, Debug)]
pub struct SqliteDedupe {
    db: Database,
    claims: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64
}

impl SqliteDedupe {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let db = Database::open(path, SCHEMA).map_err(store_error(STORE))?;
        Ok(Self {
            db,
            claims: Default::default(),
        })
    }
}

#[async_trait]
impl DedupeStore for SqliteDedupe {
    async fn claim(&self, key: &str, ttl: Duration) -> Result<bool, StoreError> {
        let key = key.to_owned();
        let now = now_ms();
        let expires = now.saturating_add(ttl.as_millis() as i64);
        let prune = self
            .claims
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(PRUNE_EVERY);
        self.db
            .call(move |conn| {
                if prune {
                    conn.execute("DELETE FROM dedupe WHERE expires_at_ms <= ?1", [now])?;
                }
                // Insert, or take over a key whose record expired; a live record stays untouched.
                let changed = conn.execute(
                    "INSERT INTO dedupe (key, expires_at_ms) VALUES (?1, ?2)
                     ON CONFLICT (key) DO UPDATE SET expires_at_ms = excluded.expires_at_ms
                     WHERE dedupe.expires_at_ms <= ?3",
                    params![key, expires, now],
                )?;
                Ok(changed == 1)
            })
            .await
            .map_err(store_error(STORE))
    }

    async fn contains(&self, key: &str) -> Result<bool, StoreError> {
        let key = key.to_owned();
        let now = now_ms();
        self.db
            .call(move |conn| {
                conn.query_row(
                    "SELECT EXISTS (SELECT 1 FROM dedupe WHERE key = ?1 AND expires_at_ms > ?2)",
                    params![key, now],
                    |r| r.get(0),
                )
            })
            .await
            .map_err(store_error(STORE))
    }

    async fn release(&self, key: &str) -> Result<(), StoreError> {
        let key = key.to_owned();
        self.db
            .call(move |conn| {
                conn.execute("DELETE FROM dedupe WHERE key = ?1", [key])
                    .map(|_| ())
            })
            .await
            .map_err(store_error(STORE))
    }
}
