//! `SqliteSessionStore`: the session store port on one SQLite file.
//!
//! Each session is one row: key columns the queries need (version, shard, next action) plus the
//! whole record as JSON. Events are rows of their own, written in the same transaction as the
//! session that made them (the outbox); `sent` marks those already handed to the lifecycle queue.
//! The warm pool's members share the file (`pool_members`, written by the `warm_pool` module).

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, OptionalExtension, TransactionBehavior};

use super::database::{has_table, store_error, Database, DatabaseError};
use threadbox_core::domain::{LifecycleEvent, Millis, Session, Status, ThreadId};
use threadbox_core::ports::{
    Page, Purged, SessionStore, StatsCounter, StoreError, StoreKind, StoreStats, WriteCondition,
};

/// The store this module's errors name.
const STORE: StoreKind = StoreKind::Session;

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS sessions (
    thread_id      TEXT PRIMARY KEY,
    version        INTEGER NOT NULL,
    status         TEXT NOT NULL,
    shard          INTEGER NOT NULL,
    next_action_at INTEGER,
    record         TEXT NOT NULL
);
-- The janitor's index of due work: only rows with something to do are in it.
CREATE INDEX IF NOT EXISTS sessions_due ON sessions (shard, next_action_at, thread_id)
    WHERE next_action_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS events (
    thread_id  TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    event_id   TEXT NOT NULL UNIQUE,
    written_at INTEGER NOT NULL,
    sent       INTEGER NOT NULL DEFAULT 0,
    body       TEXT NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
CREATE INDEX IF NOT EXISTS events_unsent ON events (written_at) WHERE sent = 0;
-- The warm pool's members (the `warm_pool` module), beside the sessions they are claimed by so a
-- claim is one transaction over both tables.
CREATE TABLE IF NOT EXISTS pool_members (
    member_id  TEXT PRIMARY KEY,
    pool       TEXT NOT NULL,
    state      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    record     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS pool_members_unclaimed ON pool_members (pool, created_at)
    WHERE state <> 'claimed';
"#;

/// Added after the first release, so an older file gains it when opened: when the thread became
/// destroyed or expired (epoch millis), NULL while it is live. Retention deletes by it.
const RETIRED_AT_MIGRATION: &str = r#"
ALTER TABLE sessions ADD COLUMN retired_at INTEGER;
"#;
const RETIRED_INDEX: &str = r#"
CREATE INDEX IF NOT EXISTS sessions_retired ON sessions (retired_at, thread_id)
    WHERE retired_at IS NOT NULL;
"#;

/// The statuses whose records retention may delete (`Status::is_retired`); `retired_at` is set
/// only for these.
const RETIRED_STATUSES: [Status; 2] = [Status::Destroyed, Status::Expired];

/// Default number of janitor shards; enough to spread work, few enough to query cheaply.
pub const DEFAULT_SHARDS: u32 = 8;

#[derive(Clone)]
pub struct SqliteSessionStore {
    db: Database,
    shards: u32,
    counters: Arc<StatsCounter>,
}

impl SqliteSessionStore {
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with_shards(path, DEFAULT_SHARDS)
    }

    pub fn open_with_shards(path: impl AsRef<Path>, shards: u32) -> Result<Self, StoreError> {
        let db = Database::open(path, SCHEMA).map_err(store_error(STORE))?;
        db.call_blocking(|conn| {
            let has_retired_at = conn
                .prepare("SELECT 1 FROM pragma_table_info('sessions') WHERE name = 'retired_at'")?
                .exists([])?;
            if !has_retired_at {
                conn.execute_batch(RETIRED_AT_MIGRATION)?;
            }
            conn.execute_batch(RETIRED_INDEX)
        })
        .map_err(store_error(STORE))?;
        Ok(Self {
            db,
            shards: shards.max(1),
            counters: Arc::default(),
        })
    }

    pub fn database(&self) -> &Database {
        &self.db
    }

    pub(super) fn count_read(&self, rows: usize) {
        self.counters.read(rows);
    }

    pub(super) fn count_write(&self) {
        self.counters.write();
    }

    /// Insert many sessions in one transaction, bypassing the version checks; for benchmarks
    /// and tests that need a large table quickly.
    pub async fn bulk_insert(&self, sessions: Vec<Session>) -> Result<(), StoreError> {
        let shards = self.shards;
        let rows = sessions
            .into_iter()
            .map(|s| Ok((s.thread_id.shard(shards), encode(STORE, &s)?, s)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        self.db
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                {
                    let mut stmt = tx.prepare(
                        "INSERT INTO sessions (thread_id, version, status, shard, next_action_at, record)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                    )?;
                    for (shard, json, s) in &rows {
                        stmt.execute(params![
                            s.thread_id.as_str(),
                            s.version as i64,
                            s.status.as_str(),
                            shard,
                            s.next_action_at.map(|m| m.0),
                            json
                        ])?;
                    }
                }
                tx.commit()
            })
            .await
            .map_err(store_error(STORE))
    }
}

impl SqliteSessionStore {
    /// The one text column `sql` (with `args`) selects, row by row.
    async fn select_text(
        &self,
        sql: &'static str,
        args: Vec<Value>,
    ) -> Result<Vec<String>, DatabaseError> {
        self.db
            .call(move |conn| {
                let mut stmt = conn.prepare_cached(sql)?;
                let rows = stmt
                    .query_map(params_from_iter(args), |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()?;
                Ok(rows)
            })
            .await
    }

    /// The events whose bodies `sql` (with `args`) selects, in its order: one counted read.
    async fn select_events(
        &self,
        sql: &'static str,
        args: Vec<Value>,
    ) -> Result<Vec<LifecycleEvent>, StoreError> {
        let bodies = self
            .select_text(sql, args)
            .await
            .map_err(store_error(STORE))?;
        self.count_read(bodies.len());
        bodies.iter().map(|b| decode(STORE, "event", b)).collect()
    }

    pub(super) fn shards(&self) -> u32 {
        self.shards
    }
}

/// A session and its events, encoded and ready to be written inside a transaction: alone
/// (`write_if`) or with a warm pool member's claim (the `warm_pool` module).
pub(super) struct SessionWrite {
    session: Session,
    json: String,
    events: Vec<(LifecycleEvent, String)>,
    shard: u32,
    retired_at: Option<i64>,
}

impl SessionWrite {
    pub(super) fn prepare(
        session: &Session,
        events: &[LifecycleEvent],
        shards: u32,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            json: encode(STORE, session)?,
            events: events
                .iter()
                .map(|e| Ok((e.clone(), encode(STORE, e)?)))
                .collect::<Result<Vec<_>, StoreError>>()?,
            shard: session.thread_id.shard(shards),
            retired_at: retired_at(session, events),
            session: session.clone(),
        })
    }

    /// Write inside `tx` on `condition`: no row yet (an insert) or the row still at the
    /// expected version (an update). False when the condition failed or an event id was
    /// already used; the caller must then not commit.
    pub(super) fn apply(
        &self,
        tx: &rusqlite::Transaction<'_>,
        condition: WriteCondition,
    ) -> rusqlite::Result<bool> {
        let s = &self.session;
        let (id, version, status, due) = (
            s.thread_id.as_str(),
            s.version as i64,
            s.status.as_str(),
            s.next_action_at.map(|m| m.0),
        );
        let (shard, json, retired_at) = (self.shard, &self.json, self.retired_at);
        let changed = match condition {
            WriteCondition::Absent => tx.execute(
                "INSERT INTO sessions (thread_id, version, status, shard, next_action_at, record, retired_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (thread_id) DO NOTHING",
                params![id, version, status, shard, due, json, retired_at],
            )?,
            // A record that stays retired keeps the time it first became so; one that comes
            // back to life loses it.
            WriteCondition::Version(expected) => tx.execute(
                "UPDATE sessions SET version = ?2, status = ?3, shard = ?4, next_action_at = ?5, record = ?6,
                     retired_at = CASE WHEN ?8 IS NULL THEN NULL ELSE coalesce(retired_at, ?8) END
                 WHERE thread_id = ?1 AND version = ?7",
                params![id, version, status, shard, due, json, expected as i64, retired_at],
            )?,
        };
        if changed == 0 {
            return Ok(false);
        }
        match insert_events(tx, &self.events) {
            Err(e) if is_constraint(&e) => Ok(false),
            Err(e) => Err(e),
            Ok(()) => Ok(true),
        }
    }
}

/// When a record written now became retired: the time of the change that retired it (its last
/// event), or its destroy time; `None` for a live record.
fn retired_at(session: &Session, events: &[LifecycleEvent]) -> Option<i64> {
    if !session.status.is_retired() {
        return None;
    }
    let at = events
        .last()
        .map(|e| e.at)
        .or(session.destroyed_at)
        .unwrap_or(session.last_activity_at);
    Some(at.0)
}

pub(super) fn encode<T: serde::Serialize>(
    store: StoreKind,
    value: &T,
) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::corrupt(store, format!("cannot encode record: {e}")))
}

pub(super) fn decode<T: serde::de::DeserializeOwned>(
    store: StoreKind,
    what: &str,
    json: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(json).map_err(|e| StoreError::corrupt(store, format!("{what}: {e}")))
}

/// Insert events inside an open transaction. A repeated event id is a conflict, not a duplicate row.
fn insert_events(
    tx: &rusqlite::Transaction<'_>,
    rows: &[(LifecycleEvent, String)],
) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO events (thread_id, seq, event_id, written_at, body) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    for (event, body) in rows {
        stmt.execute(params![
            event.thread_id.as_str(),
            event.seq as i64,
            event.event_id,
            event.at.0,
            body
        ])?;
    }
    Ok(())
}

fn is_constraint(err: &rusqlite::Error) -> bool {
    err.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation)
}

/// Keyset cursor for the due index: "next_action_at:thread_id".
fn parse_due_cursor(cursor: Option<String>) -> Result<(i64, String), StoreError> {
    match cursor {
        None => Ok((i64::MIN, String::new())),
        Some(c) => {
            let (at, id) = c.split_once(':').ok_or_else(|| {
                StoreError::unavailable(STORE, format!("malformed due cursor {c:?}"))
            })?;
            let at = at.parse().map_err(|_| {
                StoreError::unavailable(STORE, format!("malformed due cursor {c:?}"))
            })?;
            Ok((at, id.to_owned()))
        }
    }
}

#[async_trait]
impl SessionStore for SqliteSessionStore {
    async fn load(&self, thread_id: &ThreadId) -> Result<Option<Session>, StoreError> {
        let id = thread_id.to_string();
        let json: Option<String> = self
            .db
            .call(move |conn| {
                conn.prepare_cached("SELECT record FROM sessions WHERE thread_id = ?1")?
                    .query_row([id], |r| r.get(0))
                    .optional()
            })
            .await
            .map_err(store_error(STORE))?;
        self.count_read(usize::from(json.is_some()));
        json.map(|j| decode(STORE, &format!("session {thread_id}"), &j))
            .transpose()
    }

    /// One transaction on `condition`'s statement; false when the condition failed or an event
    /// id was already used, and nothing is written then.
    async fn write_if(
        &self,
        session: &Session,
        events: &[LifecycleEvent],
        condition: WriteCondition,
    ) -> Result<bool, StoreError> {
        let write = SessionWrite::prepare(session, events, self.shards)?;
        self.count_write();
        self.db
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                if !write.apply(&tx, condition)? {
                    return Ok(false);
                }
                tx.commit()?;
                Ok(true)
            })
            .await
            .map_err(store_error(STORE))
    }

    async fn due(
        &self,
        shard: u32,
        due_by: Millis,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<Page<Session>, StoreError> {
        let (after_at, after_id) = parse_due_cursor(cursor)?;
        let limit = limit.max(1);
        let rows: Vec<(i64, String)> = self
            .db
            .call(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT next_action_at, record FROM sessions
                     WHERE shard = ?1 AND next_action_at IS NOT NULL AND next_action_at <= ?2
                       AND (next_action_at, thread_id) > (?3, ?4)
                     ORDER BY next_action_at, thread_id LIMIT ?5",
                )?;
                let rows = stmt
                    .query_map(
                        params![shard, due_by.0, after_at, after_id, limit as i64],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(rows)
            })
            .await
            .map_err(store_error(STORE))?;
        self.count_read(rows.len());
        let full_page = rows.len() == limit;
        let items = rows
            .iter()
            .map(|(_, json)| decode::<Session>(STORE, "due session", json))
            .collect::<Result<Vec<_>, _>>()?;
        let next = match (full_page, rows.last(), items.last()) {
            (true, Some((at, _)), Some(last)) => Some(format!("{at}:{}", last.thread_id)),
            _ => None,
        };
        Ok(Page { items, next })
    }

    async fn events_after(
        &self,
        thread_id: &ThreadId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<LifecycleEvent>, StoreError> {
        let id = thread_id.to_string();
        // Past the largest storable seq there is nothing; a cast would wrap it negative and
        // replay the thread from its first event.
        let Ok(after_seq) = i64::try_from(after_seq) else {
            return Ok(Vec::new());
        };
        let sql = "SELECT body FROM events WHERE thread_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3";
        let args = vec![
            Value::from(id),
            Value::from(after_seq),
            Value::from(limit as i64),
        ];
        self.select_events(sql, args).await
    }

    async fn unsent_events(
        &self,
        written_before: Millis,
        limit: usize,
    ) -> Result<Vec<LifecycleEvent>, StoreError> {
        let sql = "SELECT body FROM events WHERE sent = 0 AND written_at <= ?1
                   ORDER BY written_at, thread_id, seq LIMIT ?2";
        let args = vec![Value::from(written_before.0), Value::from(limit as i64)];
        self.select_events(sql, args).await
    }

    async fn mark_sent(&self, events: &[LifecycleEvent]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = events.iter().map(|e| e.event_id.clone()).collect();
        self.count_write();
        self.db
            .call(move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                {
                    let mut stmt =
                        tx.prepare_cached("UPDATE events SET sent = 1 WHERE event_id = ?1")?;
                    for id in &ids {
                        stmt.execute([id])?;
                    }
                }
                tx.commit()
            })
            .await
            .map_err(store_error(STORE))
    }

    async fn list(
        &self,
        limit: usize,
        after: Option<&ThreadId>,
    ) -> Result<Page<Session>, StoreError> {
        // Every thread id sorts after the empty string.
        let after = after.map(ThreadId::to_string).unwrap_or_default();
        let limit = limit.max(1);
        let sql = "SELECT record FROM sessions WHERE thread_id > ?1 ORDER BY thread_id LIMIT ?2";
        let rows = self
            .select_text(sql, vec![Value::from(after), Value::from(limit as i64)])
            .await
            .map_err(store_error(STORE))?;
        self.count_read(rows.len());
        let items = rows
            .iter()
            .map(|j| decode::<Session>(STORE, "session", j))
            .collect::<Result<Vec<_>, _>>()?;
        let next = (items.len() == limit)
            .then(|| items.last().map(|s| s.thread_id.to_string()))
            .flatten();
        Ok(Page { items, next })
    }

    async fn purge_retired(
        &self,
        retired_before: Millis,
        limit: usize,
    ) -> Result<Purged, StoreError> {
        let limit = limit.max(1) as i64;
        let statuses = RETIRED_STATUSES.map(|s| s.as_str());
        self.count_write();
        self.db
            .call(move |conn| {
                // One write transaction: no writer can revive a thread between the choice and
                // the delete, and its events go with it, so a later record of the same thread
                // starts at seq 1 with nothing to collide with.
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                tx.execute_batch("CREATE TEMP TABLE IF NOT EXISTS purge (thread_id TEXT PRIMARY KEY); DELETE FROM temp.purge;")?;
                tx.execute(
                    "INSERT INTO temp.purge (thread_id)
                     SELECT s.thread_id FROM sessions s
                     WHERE s.retired_at IS NOT NULL AND s.retired_at <= ?1
                       AND s.status IN (?2, ?3)
                       AND NOT EXISTS (SELECT 1 FROM events e WHERE e.thread_id = s.thread_id AND e.sent = 0)
                     ORDER BY s.retired_at, s.thread_id LIMIT ?4",
                    params![retired_before.0, statuses[0], statuses[1], limit],
                )?;
                let events = tx.execute(
                    "DELETE FROM events WHERE thread_id IN (SELECT thread_id FROM temp.purge)",
                    [],
                )?;
                let threads = tx.execute(
                    "DELETE FROM sessions WHERE thread_id IN (SELECT thread_id FROM temp.purge)",
                    [],
                )?;
                // The Slack status row (when this file has the table) remembers the seq its
                // message shows and refuses lower ones: left behind, it would freeze the status
                // of the thread's next record, whose seqs start again at 1.
                if has_table(&tx, "slack_status")? {
                    tx.execute(
                        "DELETE FROM slack_status WHERE thread_id IN (SELECT thread_id FROM temp.purge)",
                        [],
                    )?;
                }
                tx.execute("DELETE FROM temp.purge", [])?;
                tx.commit()?;
                Ok(Purged {
                    threads: threads as u64,
                    events: events as u64,
                })
            })
            .await
            .map_err(store_error(STORE))
    }

    fn shard_count(&self) -> u32 {
        self.shards
    }

    fn stats(&self) -> StoreStats {
        self.counters.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database written before retention existed gains the column and its index on open, and
    /// its retired threads become deletable once saved again.
    #[tokio::test]
    async fn an_older_database_gains_the_retired_at_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        // SCHEMA is the tables as first released, without the column.
        Database::open(&path, SCHEMA).unwrap();
        let store = SqliteSessionStore::open(&path).unwrap();
        // Opening twice runs the migration once.
        let store_again = SqliteSessionStore::open(&path).unwrap();
        let columns: i64 = store
            .database()
            .call(|c| {
                c.query_row(
                    "SELECT count(*) FROM pragma_table_info('sessions') WHERE name = 'retired_at'",
                    [],
                    |r| r.get(0),
                )
            })
            .await
            .unwrap();
        assert_eq!(columns, 1);
        let purged = store_again
            .purge_retired(Millis(i64::MAX), 10)
            .await
            .unwrap();
        assert_eq!(purged, Purged::default());
    }

    /// A purged thread's Slack status row goes with it, or the next record's statuses (seq from
    /// 1 again) would never replace the old message's; other threads' rows stay.
    #[tokio::test]
    async fn a_purged_thread_takes_its_slack_status_row_along() {
        use crate::SqliteSlackStatusStore;
        use threadbox_core::domain::{Cause, Change, Command, Timers};
        use threadbox_core::ports::{SlackStatusStore, StatusMessage};

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.db");
        let store = SqliteSessionStore::open(&path).unwrap();
        let statuses = SqliteSlackStatusStore::open(&path).unwrap();
        let change = |now| Change {
            event_id: uuid::Uuid::new_v4().to_string(),
            now: Millis(now),
            detail: None,
        };
        let timers = Timers::default();
        let gone_id = ThreadId::parse("slack:T1:C1:1.000001").unwrap();
        let live_id = ThreadId::parse("slack:T1:C1:2.000002").unwrap();
        let (mut gone, first) = Session::new_creating(gone_id.clone(), "t", change(1), &timers);
        store
            .insert_new(&gone, std::slice::from_ref(&first))
            .await
            .unwrap();
        let mut events = vec![first];
        for command in [Command::Fail, Command::Destroy, Command::DestroySucceeded] {
            let e = gone
                .apply(command, Cause::User, change(2), &timers)
                .unwrap()
                .unwrap();
            gone.version += 1;
            store
                .save(&gone, gone.version - 1, std::slice::from_ref(&e))
                .await
                .unwrap();
            events.push(e);
        }
        assert_eq!(gone.status, Status::Destroyed);
        store.mark_sent(&events).await.unwrap();
        let message = |seq| StatusMessage {
            channel: "C1".into(),
            ts: "9.1".into(),
            seq,
        };
        statuses.put(&gone_id, &message(4)).await.unwrap();
        statuses.put(&live_id, &message(7)).await.unwrap();

        let purged = store.purge_retired(Millis(i64::MAX), 10).await.unwrap();
        assert_eq!(purged.threads, 1);
        assert_eq!(statuses.get(&gone_id).await.unwrap(), None);
        assert_eq!(statuses.get(&live_id).await.unwrap(), Some(message(7)));
    }
}
