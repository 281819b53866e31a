//! `SqliteQueue`: the embedded durable queue, with SQS FIFO semantics on one SQLite file.
//!
//! Several named queues (say "lifecycle" and "work") share one file and its two tables; every row
//! carries its queue's name. Several processes may open the same file: every read-modify-write runs
//! in a `BEGIN IMMEDIATE` transaction, so two receivers never both take one message.
//!
//! How SQS FIFO maps onto rows:
//! - A message is *in flight* while `visible_at_ms` is in the future; receive and release move it.
//! - A group's *head* is its oldest live (not dead-lettered) message. Only a visible head can be
//!   received, so a group delivers one message at a time, in order.
//! - Choice: one receive returns at most one message per group (SQS may return several of one
//!   group in order; the port allows both). The group then stays blocked until that message is
//!   acked, released or its visibility expires, which is what the trait documents.
//! - Each receive issues a fresh receipt and overwrites the old one, so older receipts are stale.
//!   A receipt stays valid after its visibility ends until someone else receives the message:
//!   acking then is still correct (nobody else is working on it) and saves a duplicate delivery.
//! - A head that comes back visible having been received `max_receives` times is moved to the
//!   dead-letter list (a flag on its row) instead of being delivered, which unblocks its group.
//! - Deduplication ids live in their own table with an expiry, so an id stays remembered for the
//!   window even after its message is acked, as in SQS.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use rusqlite::{params, Connection, TransactionBehavior};

use super::database::{Database, DatabaseError};
use threadbox_core::ports::{DurableQueue, OutgoingMessage, QueueError, ReceivedMessage};

/// Idempotent DDL, shared by every queue in the file.
const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS queue_messages (
    seq           INTEGER PRIMARY KEY,  -- send order: oldest first
    queue         TEXT    NOT NULL,
    message_id    TEXT    NOT NULL UNIQUE,
    group_id      TEXT    NOT NULL,
    dedup_id      TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    sent_at_ms    INTEGER NOT NULL,
    receive_count INTEGER NOT NULL DEFAULT 0,
    visible_at_ms INTEGER NOT NULL,     -- in flight while this is in the future
    receipt       TEXT    UNIQUE,       -- the latest receive's receipt; NULL when none is valid
    dead_at_ms    INTEGER               -- set when moved to the dead-letter list
);
-- Finding each group's head: the oldest live message per (queue, group).
CREATE INDEX IF NOT EXISTS queue_messages_live
    ON queue_messages (queue, group_id, seq) WHERE dead_at_ms IS NULL;
CREATE INDEX IF NOT EXISTS queue_messages_dead
    ON queue_messages (queue, dead_at_ms, seq) WHERE dead_at_ms IS NOT NULL;
CREATE TABLE IF NOT EXISTS queue_dedup (
    queue         TEXT    NOT NULL,
    dedup_id      TEXT    NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    PRIMARY KEY (queue, dedup_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS queue_dedup_expiry ON queue_dedup (queue, expires_at_ms);
";

/// How one named queue behaves; the defaults are SQS FIFO's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// Receives after which a message that comes back is dead-lettered (SQS `maxReceiveCount`).
    pub max_receives: u32,
    /// How long a deduplication id is remembered after the first send that used it.
    pub dedup_window: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            max_receives: 5,
            dedup_window: Duration::from_secs(5 * 60),
        }
    }
}

/// One named queue in a SQLite file. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SqliteQueue {
    db: Database,
    name: Arc<str>,
    config: QueueConfig,
}

impl SqliteQueue {
    /// Open (creating if needed) the database at `path` and the queue `name` in it.
    /// A file that cannot be opened or is not a database gives `Unavailable` naming the path.
    pub fn open(
        path: impl AsRef<Path>,
        name: &str,
        config: QueueConfig,
    ) -> Result<Self, QueueError> {
        check_settings(name, &config)?;
        let db = Database::open(path, SCHEMA).map_err(unavailable)?;
        Ok(Self::build(db, name, config))
    }

    /// The queue `name` in an already open database (for instance the one the session store uses).
    pub async fn new(db: Database, name: &str, config: QueueConfig) -> Result<Self, QueueError> {
        check_settings(name, &config)?;
        db.call(|conn| conn.execute_batch(SCHEMA))
            .await
            .map_err(unavailable)?;
        Ok(Self::build(db, name, config))
    }

    fn build(db: Database, name: &str, config: QueueConfig) -> Self {
        Self {
            db,
            name: Arc::from(name),
            config,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn config(&self) -> QueueConfig {
        self.config
    }
}

fn check_settings(name: &str, config: &QueueConfig) -> Result<(), QueueError> {
    if name.is_empty() {
        return Err(QueueError::Rejected("queue name is empty".into()));
    }
    if config.max_receives == 0 {
        return Err(QueueError::Rejected(format!(
            "queue {name:?}: max_receives must be at least 1"
        )));
    }
    Ok(())
}

fn unavailable(err: DatabaseError) -> QueueError {
    QueueError::Unavailable(err.to_string())
}

/// Wall-clock milliseconds: visibility must mean the same thing in every process sharing the file.
fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    millis(since)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[async_trait]
impl DurableQueue for SqliteQueue {
    async fn send(&self, messages: &[OutgoingMessage]) -> Result<(), QueueError> {
        // Validate the whole batch first so bad input writes nothing.
        for message in messages {
            message.validate()?;
        }
        if messages.is_empty() {
            return Ok(());
        }
        let queue = self.name.clone();
        let messages = messages.to_vec();
        let window = millis(self.config.dedup_window);
        let dropped = self
            .db
            .call(move |conn| send_tx(conn, &queue, &messages, window))
            .await
            .map_err(unavailable)?;
        if dropped > 0 {
            tracing::debug!(queue = %self.name, dropped, "dropped messages with a repeated dedup id");
        }
        Ok(())
    }

    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let queue = self.name.clone();
        let max_receives = self.config.max_receives;
        let visibility = millis(visibility);
        let outcome = self
            .db
            .call(move |conn| receive_tx(conn, &queue, max, visibility, max_receives))
            .await
            .map_err(unavailable)?;
        for dead in &outcome.dead_lettered {
            tracing::warn!(
                queue = %self.name,
                message_id = %dead.message_id,
                group_id = %dead.group_id,
                receive_count = dead.receive_count,
                "message moved to the dead-letter list after its last allowed receive"
            );
        }
        Ok(outcome.delivered)
    }

    async fn ack(&self, receipt: &str) -> Result<(), QueueError> {
        let queue = self.name.clone();
        let owned = receipt.to_owned();
        let deleted = self
            .db
            .call(move |conn| {
                conn.execute(
                    "DELETE FROM queue_messages WHERE queue = ?1 AND receipt = ?2",
                    params![&*queue, owned],
                )
            })
            .await
            .map_err(unavailable)?;
        if deleted == 0 {
            return Err(QueueError::StaleReceipt(receipt.to_owned()));
        }
        Ok(())
    }

    async fn release(&self, receipt: &str) -> Result<(), QueueError> {
        let queue = self.name.clone();
        let owned = receipt.to_owned();
        // Visible at once, receive count kept; the receipt is spent, as the holder gave it back.
        let updated = self
            .db
            .call(move |conn| {
                conn.execute(
                    "UPDATE queue_messages SET visible_at_ms = ?3, receipt = NULL
                     WHERE queue = ?1 AND receipt = ?2",
                    params![&*queue, owned, now_ms()],
                )
            })
            .await
            .map_err(unavailable)?;
        if updated == 0 {
            return Err(QueueError::StaleReceipt(receipt.to_owned()));
        }
        Ok(())
    }

    /// Dead letters in the order they were moved. They are listed, not received: their `receipt`
    /// is empty and their `receive_count` is the count they died with.
    async fn dead_letters(&self, limit: usize) -> Result<Vec<ReceivedMessage>, QueueError> {
        let queue = self.name.clone();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.db
            .call(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT message_id, group_id, dedup_id, body, receive_count
                     FROM queue_messages
                     WHERE queue = ?1 AND dead_at_ms IS NOT NULL
                     ORDER BY dead_at_ms, seq
                     LIMIT ?2",
                )?;
                let rows = stmt.query_map(params![&*queue, limit], |row| {
                    Ok(ReceivedMessage {
                        message_id: row.get(0)?,
                        receipt: String::new(),
                        group_id: row.get(1)?,
                        dedup_id: row.get(2)?,
                        body: row.get(3)?,
                        receive_count: row.get(4)?,
                    })
                })?;
                rows.collect()
            })
            .await
            .map_err(unavailable)
    }
}

/// Insert the batch in one transaction; returns how many were dropped as duplicates.
fn send_tx(
    conn: &mut Connection,
    queue: &str,
    messages: &[OutgoingMessage],
    window_ms: i64,
) -> rusqlite::Result<usize> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let now = now_ms();
    // Forget ids whose window has passed, so the insert below can tell "seen recently" by conflict.
    tx.execute(
        "DELETE FROM queue_dedup WHERE queue = ?1 AND expires_at_ms <= ?2",
        params![queue, now],
    )?;
    let mut dropped = 0;
    {
        let mut remember = tx.prepare_cached(
            "INSERT INTO queue_dedup (queue, dedup_id, expires_at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (queue, dedup_id) DO NOTHING",
        )?;
        let mut insert = tx.prepare_cached(
            "INSERT INTO queue_messages
                 (queue, message_id, group_id, dedup_id, body, sent_at_ms, visible_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)",
        )?;
        for m in messages {
            let first_time =
                remember.execute(params![queue, m.dedup_id, now.saturating_add(window_ms)])? == 1;
            if !first_time {
                dropped += 1;
                continue;
            }
            let message_id = uuid::Uuid::new_v4().to_string();
            insert.execute(params![
                queue, message_id, m.group_id, m.dedup_id, m.body, now
            ])?;
        }
    }
    tx.commit()?;
    Ok(dropped)
}

struct ReceiveOutcome {
    delivered: Vec<ReceivedMessage>,
    dead_lettered: Vec<ReceivedMessage>,
}

/// One receive, atomically: take visible group heads oldest first, dead-lettering those out of
/// receives, until `max` are taken or no visible head is left.
fn receive_tx(
    conn: &mut Connection,
    queue: &str,
    max: usize,
    visibility_ms: i64,
    max_receives: u32,
) -> rusqlite::Result<ReceiveOutcome> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    // Read the clock once the write lock is held, so waiting for it does not shorten visibility.
    let now = now_ms();
    let invisible_until = now.saturating_add(visibility_ms);
    let mut delivered: Vec<ReceivedMessage> = Vec::new();
    let mut dead_lettered = Vec::new();
    {
        let mut heads = tx.prepare_cached(
            "WITH heads AS (
                 SELECT min(seq) AS seq FROM queue_messages
                 WHERE queue = ?1 AND dead_at_ms IS NULL
                 GROUP BY group_id
             )
             SELECT m.seq, m.message_id, m.group_id, m.dedup_id, m.body, m.receive_count
             FROM heads JOIN queue_messages m ON m.seq = heads.seq
             WHERE m.visible_at_ms <= ?2
             ORDER BY m.seq
             LIMIT ?3",
        )?;
        let mut take = tx.prepare_cached(
            "UPDATE queue_messages
             SET receive_count = receive_count + 1, receipt = ?2, visible_at_ms = ?3
             WHERE seq = ?1",
        )?;
        let mut bury = tx.prepare_cached(
            "UPDATE queue_messages SET dead_at_ms = ?2, receipt = NULL WHERE seq = ?1",
        )?;
        loop {
            // With a zero visibility a taken head is still visible, so groups already taken in
            // this call are skipped below. A page of `max` heads still holds enough others: at
            // most `delivered.len()` of its rows are skipped, and `max - delivered.len()` are wanted.
            let limit = i64::try_from(max).unwrap_or(i64::MAX);
            let page = heads
                .query_map(params![queue, now, limit], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        ReceivedMessage {
                            message_id: row.get(1)?,
                            receipt: String::new(),
                            group_id: row.get(2)?,
                            dedup_id: row.get(3)?,
                            body: row.get(4)?,
                            receive_count: row.get(5)?,
                        },
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut buried_any = false;
            for (seq, mut message) in page {
                if delivered.len() == max {
                    break;
                }
                if delivered.iter().any(|d| d.group_id == message.group_id) {
                    continue;
                }
                if message.receive_count >= max_receives {
                    bury.execute(params![seq, now])?;
                    dead_lettered.push(message);
                    buried_any = true;
                    continue;
                }
                message.receipt = uuid::Uuid::new_v4().to_string();
                message.receive_count += 1;
                take.execute(params![seq, message.receipt, invisible_until])?;
                delivered.push(message);
            }
            // Burying a head exposes the next message of its group; look again. Otherwise every
            // visible head in the page was taken or skipped, and the page was not full.
            if !buried_any || delivered.len() == max {
                break;
            }
        }
    }
    tx.commit()?;
    Ok(ReceiveOutcome {
        delivered,
        dead_lettered,
    })
}
