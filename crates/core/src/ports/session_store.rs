//! The session store port: where session records and their lifecycle events live.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use crate::domain::{LifecycleEvent, Millis, Session, ThreadId};

/// Which store an error came from, so its message names it: "dedupe store unavailable: …", not
/// every port's failure read as the session store's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Session,
    WarmPool,
    Dedupe,
    /// The window counters budgets and rate limits count in.
    WindowCounter,
    Subscriptions,
    SlackStatus,
    SlackUserThreads,
    SlackSink,
    Checkpoints,
}

impl std::fmt::Display for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StoreKind::Session => "session",
            StoreKind::WarmPool => "warm pool",
            StoreKind::Dedupe => "dedupe",
            StoreKind::WindowCounter => "window counter",
            StoreKind::Subscriptions => "subscription",
            StoreKind::SlackStatus => "Slack status",
            StoreKind::SlackUserThreads => "Slack user threads",
            StoreKind::SlackSink => "Slack sink",
            StoreKind::Checkpoints => "checkpoint",
        })
    }
}

/// What failed, and in which store: the payload of `Unavailable` and `Corrupt`, so both keep
/// one field and `StoreError::Unavailable(_)` matches as it always did.
#[derive(Debug)]
pub struct StoreFailure {
    pub store: StoreKind,
    pub detail: String,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `insert_new` found a record already there: another caller won the race.
    #[error("thread {0} already has a session")]
    AlreadyExists(ThreadId),
    /// `save` found a different version than the one it was read at: someone else wrote first.
    #[error("thread {thread_id} changed since it was read (expected version {expected})")]
    VersionConflict { thread_id: ThreadId, expected: u64 },
    /// The store could not be reached or answered with an error; nothing was written.
    #[error("{} store unavailable: {}", .0.store, .0.detail)]
    Unavailable(StoreFailure),
    /// A stored record could not be read back: the detail names the thread or file.
    #[error("{} store holds a corrupt record: {}", .0.store, .0.detail)]
    Corrupt(StoreFailure),
}

impl StoreError {
    /// `store` could not do what was asked; nothing was written.
    pub fn unavailable(store: StoreKind, detail: impl Into<String>) -> Self {
        StoreError::Unavailable(StoreFailure {
            store,
            detail: detail.into(),
        })
    }

    /// `store` holds a record that cannot be read back.
    pub fn corrupt(store: StoreKind, detail: impl Into<String>) -> Self {
        StoreError::Corrupt(StoreFailure {
            store,
            detail: detail.into(),
        })
    }

    /// A conflict means "re-read and decide again", never "give up".
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            StoreError::AlreadyExists(_) | StoreError::VersionConflict { .. }
        )
    }
}

/// What a session write is conditional on: the thread having no record yet (`insert_new`), or
/// its record still at the version it was read at (`save`, a warm pool claim). Every store
/// writes on one of these (`SessionStore::write_if`), and a condition that did not hold becomes
/// its conflict here, so `AlreadyExists` and `VersionConflict` mean the same whichever store
/// answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteCondition {
    /// No record for the thread yet.
    Absent,
    /// The stored record is at this version.
    Version(u64),
}

impl WriteCondition {
    /// The condition of writing `session` over the record read at `expected_version`, whose
    /// successor it must be.
    pub fn read_at(session: &Session, expected_version: u64) -> Self {
        debug_assert_eq!(
            session.version,
            expected_version + 1,
            "save must bump the version by one"
        );
        WriteCondition::Version(expected_version)
    }

    /// `Ok` when the write of `thread_id`'s session held its condition, else the conflict that
    /// condition failing means.
    pub fn written(self, written: bool, thread_id: &ThreadId) -> Result<(), StoreError> {
        match (written, self) {
            (true, _) => Ok(()),
            (false, WriteCondition::Absent) => Err(StoreError::AlreadyExists(thread_id.clone())),
            (false, WriteCondition::Version(expected)) => Err(StoreError::VersionConflict {
                thread_id: thread_id.clone(),
                expected,
            }),
        }
    }
}

/// One page of results and where the next one starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Opaque; pass back to get the next page. `None` on the last page.
    pub next: Option<String>,
}

/// What one retention pass deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Purged {
    /// Session records of destroyed or expired threads.
    pub threads: u64,
    /// Their lifecycle events.
    pub events: u64,
}

/// Counters a store keeps so benchmarks and tests can show how much work a call cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Round trips that read (gets, queries).
    pub reads: u64,
    /// Round trips that wrote (conditional puts, transactions).
    pub writes: u64,
    /// Records that queries returned or examined.
    pub rows_read: u64,
}

/// The counters behind [`SessionStore::stats`], for the stores that count their work. Shared
/// by a store's clones; counting is relaxed (the figures are for benchmarks and tests).
#[derive(Debug, Default)]
pub struct StatsCounter {
    reads: AtomicU64,
    writes: AtomicU64,
    rows_read: AtomicU64,
}

impl StatsCounter {
    /// One round trip that read, returning `rows` records.
    pub fn read(&self, rows: usize) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.rows_read.fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// One round trip that wrote.
    pub fn write(&self) {
        self.writes.fetch_add(1, Ordering::Relaxed);
    }

    pub fn stats(&self) -> StoreStats {
        StoreStats {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            rows_read: self.rows_read.load(Ordering::Relaxed),
        }
    }
}

#[async_trait]
pub trait SessionStore: Send + Sync {
    async fn load(&self, thread_id: &ThreadId) -> Result<Option<Session>, StoreError>;

    /// Write `session` and `events` in one atomic write, only if `condition` holds of the
    /// thread's stored record and no event's seq or id is taken: `Ok(false)` when it does not,
    /// and nothing is written then. What a store implements; callers use `insert_new` and
    /// `save`, which turn a `false` into its conflict here, the same for every store.
    async fn write_if(
        &self,
        session: &Session,
        events: &[LifecycleEvent],
        condition: WriteCondition,
    ) -> Result<bool, StoreError>;

    /// Write a new session and its first events, only if the thread has no record yet.
    async fn insert_new(
        &self,
        session: &Session,
        events: &[LifecycleEvent],
    ) -> Result<(), StoreError> {
        let condition = WriteCondition::Absent;
        let written = self.write_if(session, events, condition).await?;
        condition.written(written, &session.thread_id)
    }

    /// Write `session` and `events` in one atomic write, only if the stored version is still
    /// `expected_version`. `session.version` must be `expected_version + 1`.
    async fn save(
        &self,
        session: &Session,
        expected_version: u64,
        events: &[LifecycleEvent],
    ) -> Result<(), StoreError> {
        let condition = WriteCondition::read_at(session, expected_version);
        let written = self.write_if(session, events, condition).await?;
        condition.written(written, &session.thread_id)
    }

    /// Sessions in `shard` whose next action is due at or before `due_by`, oldest first.
    /// Reads only due records (an index, never a scan).
    async fn due(
        &self,
        shard: u32,
        due_by: Millis,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<Page<Session>, StoreError>;

    /// The thread's events with `seq > after_seq`, in order.
    async fn events_after(
        &self,
        thread_id: &ThreadId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<LifecycleEvent>, StoreError>;

    /// Events written but not yet handed to the lifecycle queue (the outbox), oldest first.
    async fn unsent_events(
        &self,
        written_before: Millis,
        limit: usize,
    ) -> Result<Vec<LifecycleEvent>, StoreError>;

    /// Record that these events reached the lifecycle queue.
    async fn mark_sent(&self, events: &[LifecycleEvent]) -> Result<(), StoreError>;

    /// All sessions, ordered by thread id, a page at a time (operators and the dashboard): those
    /// after `after`, the thread id a previous page's `next` named. Typed, so a cursor that is
    /// empty or not a thread id is refused where it is read and no backend sees one.
    async fn list(
        &self,
        limit: usize,
        after: Option<&ThreadId>,
    ) -> Result<Page<Session>, StoreError>;

    /// Delete up to `limit` threads that became destroyed or expired at or before
    /// `retired_before`, each with all its events, in one atomic step per batch. A thread that is
    /// live, retired more recently, or has an event not yet handed to the lifecycle queue (the
    /// outbox) is never deleted. A later resolve of a deleted thread starts a brand-new record.
    /// Stores whose database expires items itself (DynamoDB's TTL) delete nothing here.
    async fn purge_retired(
        &self,
        _retired_before: Millis,
        _limit: usize,
    ) -> Result<Purged, StoreError> {
        Ok(Purged::default())
    }

    /// The number of index shards due work is spread over.
    fn shard_count(&self) -> u32;

    /// Work done so far; adapters that cannot count return zeros.
    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_names_the_store_it_came_from() {
        let err = StoreError::unavailable(StoreKind::Dedupe, "DynamoDB GetItem: timed out");
        assert_eq!(
            err.to_string(),
            "dedupe store unavailable: DynamoDB GetItem: timed out"
        );
        assert!(matches!(err, StoreError::Unavailable(_)));
        let err = StoreError::corrupt(StoreKind::SlackStatus, "row of slack:T1:C1:1.2");
        assert_eq!(
            err.to_string(),
            "Slack status store holds a corrupt record: row of slack:T1:C1:1.2"
        );
        assert_eq!(
            StoreError::unavailable(StoreKind::Session, "locked").to_string(),
            "session store unavailable: locked"
        );
    }

    #[test]
    fn a_condition_that_did_not_hold_is_its_conflict() {
        let thread = ThreadId::parse("t1").unwrap();
        assert!(WriteCondition::Absent.written(true, &thread).is_ok());
        assert!(matches!(
            WriteCondition::Absent.written(false, &thread),
            Err(StoreError::AlreadyExists(t)) if t == thread
        ));
        assert!(matches!(
            WriteCondition::Version(4).written(false, &thread),
            Err(StoreError::VersionConflict { thread_id, expected: 4 }) if thread_id == thread
        ));
    }
}
