//! What threads' sandboxes used, counted from their own lifecycle events (the rules are
//! `domain::usage`; this reads the events): for one thread, and for a page of threads with the
//! store's own listing, so a summary over every thread is bounded page by page.

use futures::{StreamExt, TryStreamExt};

use super::{Threadbox, UseCaseError};
use crate::domain::{Millis, Pricing, Session, ThreadId, Usage, Window};
use crate::ports::{Page, SessionStore, StoreError};

/// The most events read for one thread's usage: its most recent ones. A thread with a longer
/// history is counted from the oldest of these, and its usage says so (`complete: false`).
pub const MAX_USAGE_EVENTS: u64 = 5_000;
/// Events per store read.
const EVENTS_PAGE: usize = 1_000;
/// Threads of one page whose events are read at once.
const CONCURRENT_THREADS: usize = 8;

/// A thread's usage over `window` from its events up to `last_seq` (its most recent
/// [`MAX_USAGE_EVENTS`]), for readers that hold a store but no `Threadbox` (the Slack status
/// card, which is drawn by the fan-out).
pub async fn read_usage(
    store: &dyn SessionStore,
    thread_id: &ThreadId,
    last_seq: u64,
    window: Window,
    pricing: &Pricing,
) -> Result<Usage, StoreError> {
    let mut after = last_seq.saturating_sub(MAX_USAGE_EVENTS);
    let mut events = Vec::new();
    while after < last_seq {
        let page = store.events_after(thread_id, after, EVENTS_PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        let full = page.len() == EVENTS_PAGE;
        events.extend(page.into_iter().filter(|e| e.seq <= last_seq));
        if !full {
            break;
        }
    }
    Ok(Usage::from_events(&events, window, pricing))
}

impl Threadbox {
    /// The thread's usage from `since` (its whole history when `None`) until now.
    pub async fn usage(
        &self,
        thread_id: &ThreadId,
        since: Option<Millis>,
    ) -> Result<Usage, UseCaseError> {
        let session = self.load(thread_id).await?;
        Ok(self.usage_of(&session, since, self.clock.now()).await?)
    }

    /// The usage of a session already read, until `now`: its events up to the one the session
    /// names last (a later write belongs to a later read).
    pub async fn usage_of(
        &self,
        session: &Session,
        since: Option<Millis>,
        now: Millis,
    ) -> Result<Usage, StoreError> {
        read_usage(
            self.store.as_ref(),
            &session.thread_id,
            session.last_seq,
            Window { since, now },
            &self.config.pricing,
        )
        .await
    }

    /// One page of sessions (in thread-id order after `after`, as [`Threadbox::sessions`]) with
    /// each one's usage from `since`, all until the same moment.
    pub async fn sessions_with_usage(
        &self,
        limit: usize,
        after: Option<&ThreadId>,
        since: Option<Millis>,
    ) -> Result<Page<(Session, Usage)>, StoreError> {
        let page = self.store.list(limit, after).await?;
        let now = self.clock.now();
        // Futures made first, then run a few at a time (a closure over borrowed sessions inside
        // the stream would not be `Send` for every lifetime axum asks of a handler).
        let reads: Vec<_> = page
            .items
            .iter()
            .map(|session| self.usage_of(session, since, now))
            .collect();
        let usages: Vec<Usage> = futures::stream::iter(reads)
            .buffered(CONCURRENT_THREADS)
            .try_collect()
            .await?;
        Ok(Page {
            items: page.items.into_iter().zip(usages).collect(),
            next: page.next,
        })
    }
}
