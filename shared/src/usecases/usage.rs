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

#[cfg(all(test, feature = "testing", feature = "sqlite"))]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::adapters::sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
    use crate::domain::{Pricing, Status, ThreadId};
    use crate::testing::{InMemoryProvider, ManualClock};
    use crate::usecases::{Config, Threadbox};

    async fn threadbox() -> (Threadbox, Arc<ManualClock>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tb.db");
        let store = Arc::new(SqliteSessionStore::open(&path).unwrap());
        let queue =
            Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap());
        let clock = Arc::new(ManualClock::default());
        let config = Config {
            pricing: Pricing::E2B_DEFAULT,
            settle_poll: Duration::from_millis(5),
            ..Config::default()
        };
        let tb = Threadbox::new(store, InMemoryProvider::new(), queue, clock.clone(), config);
        (tb, clock, dir)
    }

    #[tokio::test]
    async fn usage_follows_a_thread_through_pause_and_resume() {
        let (tb, clock, _dir) = threadbox().await;
        let t1 = ThreadId::parse("t1").unwrap();
        tb.resolve(&t1).await.unwrap();
        clock.advance(Duration::from_secs(3600));
        tb.pause(&t1).await.unwrap();
        clock.advance(Duration::from_secs(7200));
        let usage = tb.usage(&t1, None).await.unwrap();
        assert_eq!(usage.running_ms, 3_600_000);
        assert_eq!(usage.paused_ms, 7_200_000);
        assert_eq!(
            usage.idle_paused_ms, 0,
            "a user's pause is not the idle setting's"
        );
        assert!(usage.complete);
        let cost = usage.cost.unwrap();
        assert!((cost.usd.unwrap() - 0.1089).abs() < 1e-9, "{cost:?}");

        // A second thread, and a page of both, with a window that starts after t1's pause.
        let t2 = ThreadId::parse("t2").unwrap();
        tb.resolve(&t2).await.unwrap();
        clock.advance(Duration::from_secs(60));
        let since = tb.clock.now().minus(Duration::from_secs(120));
        let page = tb.sessions_with_usage(10, None, Some(since)).await.unwrap();
        let rows: Vec<_> = page
            .items
            .iter()
            .map(|(s, u)| {
                (
                    s.thread_id.as_str().to_owned(),
                    s.status,
                    u.running_ms,
                    u.paused_ms,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                ("t1".to_owned(), Status::Paused, 0, 120_000),
                ("t2".to_owned(), Status::Active, 60_000, 0),
            ]
        );
        assert!(tb
            .usage(&ThreadId::parse("nope").unwrap(), None)
            .await
            .is_err());
    }
}
