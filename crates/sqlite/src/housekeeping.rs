//! Rows of the embedded runtime's file that age out on their own, not with a thread: the local
//! Slack sink's messages and dead-lettered queue messages. Session records, their events and
//! their Slack status rows go with their thread (`SqliteSessionStore::purge_retired`); dedupe
//! keys, queue dedup ids, rate-limit windows and expired live-events connections are pruned by
//! their own stores as they are written.
//!
//! Each call deletes at most one bounded batch per table in one short write transaction, so it
//! never holds the file's write lock for long; callers repeat it until it comes back short.

use rusqlite::params;

use super::database::{has_table, Database, DatabaseError};
use threadbox_core::domain::Millis;

/// What one [`delete_aged`] call removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Aged {
    /// Local Slack sink messages last changed before the cutoff.
    pub sink_messages: u64,
    /// Queue messages dead-lettered before the cutoff.
    pub dead_letters: u64,
}

impl Aged {
    pub fn total(&self) -> u64 {
        self.sink_messages + self.dead_letters
    }
}

/// Delete up to `batch` sink messages and `batch` dead letters older than `before`. Tables the
/// file does not have (no Slack sink, no queue yet) are skipped.
pub async fn delete_aged(
    db: &Database,
    before: Millis,
    batch: usize,
) -> Result<Aged, DatabaseError> {
    let batch = i64::try_from(batch.max(1)).unwrap_or(i64::MAX);
    db.call(move |conn| {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let mut aged = Aged::default();
        if has_table(&tx, "slack_sink")? {
            aged.sink_messages = tx.execute(
                "DELETE FROM slack_sink WHERE ts IN
                    (SELECT ts FROM slack_sink WHERE updated_ms < ?1 ORDER BY updated_ms LIMIT ?2)",
                params![before.0, batch],
            )? as u64;
        }
        if has_table(&tx, "queue_messages")? {
            aged.dead_letters = tx.execute(
                "DELETE FROM queue_messages WHERE seq IN
                    (SELECT seq FROM queue_messages
                     WHERE dead_at_ms IS NOT NULL AND dead_at_ms < ?1 LIMIT ?2)",
                params![before.0, batch],
            )? as u64;
        }
        tx.commit()?;
        Ok(aged)
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{QueueConfig, SqliteQueue};
    use threadbox_core::ports::{DurableQueue, OutgoingMessage};

    /// Dead letters and sink messages older than the cutoff go, in batches; newer ones, live
    /// queue messages and files without the tables are left alone.
    #[tokio::test]
    async fn only_rows_older_than_the_cutoff_go_a_batch_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let config = QueueConfig {
            max_receives: 1,
            ..QueueConfig::default()
        };
        let queue = SqliteQueue::open(&path, "q", config).unwrap();
        let db = queue_database(&path);
        assert_eq!(
            delete_aged(&db, Millis(i64::MAX), 10).await.unwrap(),
            Aged::default(),
            "no sink table: skipped"
        );
        let send = |i: u32| {
            let queue = queue.clone();
            async move {
                let message = OutgoingMessage {
                    group_id: format!("g{i}"),
                    dedup_id: format!("d{i}"),
                    body: "x".into(),
                };
                queue.send(&[message]).await.unwrap();
            }
        };
        // Two dead-lettered (received again past max_receives), then one live.
        send(0).await;
        send(1).await;
        for m in queue.receive(10, Duration::ZERO).await.unwrap() {
            queue.release(&m.receipt).await.unwrap();
        }
        assert!(queue.receive(10, Duration::ZERO).await.unwrap().is_empty());
        send(2).await;
        assert_eq!(queue.dead_letters(10).await.unwrap().len(), 2);

        {
            crate::SqliteSlackSink::open(&path).unwrap();
            db.call(|c| {
                c.execute_batch(
                    "INSERT INTO slack_sink (ts, channel, text, posted_ms, updated_ms)
                     VALUES ('1.1', 'C', 'old', 10, 10), ('1.2', 'C', 'new', 10, 5000)",
                )
            })
            .await
            .unwrap();
        }
        assert_eq!(
            delete_aged(&db, Millis(0), 10).await.unwrap(),
            Aged::default()
        );
        let aged = delete_aged(&db, Millis(1_000), 10).await.unwrap();
        assert_eq!(aged.dead_letters, 0, "dead letters are younger");
        assert_eq!(aged.sink_messages, 1, "the old message only");
        let far = Millis(i64::MAX);
        let aged = delete_aged(&db, far, 1).await.unwrap();
        assert_eq!(aged.dead_letters, 1, "one batch");
        assert_eq!(aged.sink_messages, 1);
        assert_eq!(delete_aged(&db, far, 10).await.unwrap().dead_letters, 1);
        assert!(queue.dead_letters(10).await.unwrap().is_empty());
        let live: i64 = db
            .call(|c| c.query_row("SELECT count(*) FROM queue_messages", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(live, 1, "the live message stays");
    }

    fn queue_database(path: &std::path::Path) -> Database {
        Database::open(path, "").unwrap()
    }
}
