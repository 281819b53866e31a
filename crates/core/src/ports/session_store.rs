//! The session store port: where session records and their lifecycle events live.

use async_trait::async_trait;

use crate::domain::{LifecycleEvent, Millis, Session, ThreadId};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `insert_new` found a record already there: another caller won the race.
    #[error("thread {0} already has a session")]
    AlreadyExists(ThreadId),
    /// `save` found a different version than the one it was read at: someone else wrote first.
    #[error("thread {thread_id} changed since it was read (expected version {expected})")]
    VersionConflict { thread_id: ThreadId, expected: u64 },
    /// The store could not be reached or answered with an error; nothing was written.
    #[error("session store unavailable: {0}")]
    Unavailable(String),
    /// A stored record could not be read back: the message names the thread or file.
    #[error("session store holds a corrupt record: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// A conflict means "re-read and decide again", never "give up".
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            StoreError::AlreadyExists(_) | StoreError::VersionConflict { .. }
        )
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

#[async_trait]
pub trait SessionStore: Send + Sync {
    async fn load(&self, thread_id: &ThreadId) -> Result<Option<Session>, StoreError>;

    /// Write a new session and its first events, only if the thread has no record yet.
    async fn insert_new(
        &self,
        session: &Session,
        events: &[LifecycleEvent],
    ) -> Result<(), StoreError>;

    /// Write `session` and `events` in one atomic write, only if the stored version is still
    /// `expected_version`. `session.version` must be `expected_version + 1`.
    async fn save(
        &self,
        session: &Session,
        expected_version: u64,
        events: &[LifecycleEvent],
    ) -> Result<(), StoreError>;

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
