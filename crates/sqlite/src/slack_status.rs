//! `SqliteSlackStatusStore`: which Slack message shows each thread's status, in the shared file.

use std::path::Path;

use async_trait::async_trait;
use rusqlite::{params, OptionalExtension};

use super::database::{store_error, Database};
use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{SlackStatusStore, StatusMessage};
use threadbox_core::ports::{StoreError, StoreKind};

/// The store this module's errors name.
const STORE: StoreKind = StoreKind::SlackStatus;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS slack_status (
    thread_id TEXT PRIMARY KEY,
    channel   TEXT NOT NULL,
    ts        TEXT NOT NULL,
    seq       INTEGER NOT NULL
) WITHOUT ROWID;
";

#[derive(Clone, Debug)]
pub struct SqliteSlackStatusStore {
    db: Database,
}

impl SqliteSlackStatusStore {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Ok(Self {
            db: Database::open(path, SCHEMA).map_err(store_error(STORE))?,
        })
    }
}

#[async_trait]
impl SlackStatusStore for SqliteSlackStatusStore {
    async fn get(&self, thread_id: &ThreadId) -> Result<Option<StatusMessage>, StoreError> {
        let id = thread_id.to_string();
        self.db
            .call(move |conn| {
                conn.query_row(
                    "SELECT channel, ts, seq FROM slack_status WHERE thread_id = ?1",
                    [id],
                    |row| {
                        Ok(StatusMessage {
                            channel: row.get(0)?,
                            ts: row.get(1)?,
                            seq: row.get::<_, i64>(2)? as u64,
                        })
                    },
                )
                .optional()
            })
            .await
            .map_err(store_error(STORE))
    }

    async fn put(&self, thread_id: &ThreadId, message: &StatusMessage) -> Result<bool, StoreError> {
        let id = thread_id.to_string();
        let message = message.clone();
        self.db
            .call(move |conn| {
                // Equal seqs may overwrite: a re-posted message (the old one was deleted) shows
                // the same event under a new ts.
                let changed = conn.execute(
                    "INSERT INTO slack_status (thread_id, channel, ts, seq) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (thread_id) DO UPDATE
                     SET channel = excluded.channel, ts = excluded.ts, seq = excluded.seq
                     WHERE slack_status.seq <= excluded.seq",
                    params![id, message.channel, message.ts, message.seq as i64],
                )?;
                Ok(changed == 1)
            })
            .await
            .map_err(store_error(STORE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_later_event_replaces_an_earlier_one_never_the_reverse() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteSlackStatusStore::open(dir.path().join("s.db")).unwrap();
        let thread = ThreadId::parse("slack:T1:C1:1.000001").unwrap();
        assert_eq!(store.get(&thread).await.unwrap(), None);
        let at = |seq, ts: &str| StatusMessage {
            channel: "C1".into(),
            ts: ts.into(),
            seq,
        };
        assert!(store.put(&thread, &at(2, "9.1")).await.unwrap());
        assert!(!store.put(&thread, &at(1, "9.2")).await.unwrap(), "older");
        assert_eq!(store.get(&thread).await.unwrap(), Some(at(2, "9.1")));
        assert!(
            store.put(&thread, &at(2, "9.3")).await.unwrap(),
            "re-posted"
        );
        assert!(store.put(&thread, &at(5, "9.3")).await.unwrap());
        assert_eq!(store.get(&thread).await.unwrap(), Some(at(5, "9.3")));
    }
}
