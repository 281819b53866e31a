//! Reading threads and their history, for the API, the CLI and the dashboard: never a write.

use super::{Threadbox, UseCaseError};
use crate::domain::{LifecycleEvent, Session, ThreadId};
use crate::ports::{Page, StoreError};

impl Threadbox {
    /// The session, if the thread has one.
    pub async fn session(&self, thread_id: &ThreadId) -> Result<Option<Session>, StoreError> {
        self.store.load(thread_id).await
    }

    /// One page of every thread's session, in thread-id order, after `after` (keyset paging).
    pub async fn sessions(
        &self,
        limit: usize,
        after: Option<&ThreadId>,
    ) -> Result<Page<Session>, StoreError> {
        self.store.list(limit, after).await
    }

    /// The session with its last `recent` events, oldest first.
    pub async fn session_with_recent_events(
        &self,
        thread_id: &ThreadId,
        recent: usize,
    ) -> Result<(Session, Vec<LifecycleEvent>), UseCaseError> {
        let session = self.load(thread_id).await?;
        let after = session.last_seq.saturating_sub(recent as u64);
        let events = self.store.events_after(thread_id, after, recent).await?;
        Ok((session, events))
    }

    /// Up to `limit` events after `after_seq`, oldest first. An unknown thread is an error, not
    /// an empty list: the caller most likely has the id wrong.
    pub async fn events(
        &self,
        thread_id: &ThreadId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<LifecycleEvent>, UseCaseError> {
        self.load(thread_id).await?;
        Ok(self.store.events_after(thread_id, after_seq, limit).await?)
    }
}
