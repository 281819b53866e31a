//! The session store and lifecycle conformance suites against the embedded SQLite backend.

use threadbox_testing::lifecycle_conformance as lifecycle;
use threadbox_tests::SqliteBackend;

/// A fresh SQLite backend; never skipped.
async fn sqlite(_test: &str) -> Option<SqliteBackend> {
    Some(SqliteBackend::new())
}

mod store_conformance {
    use super::sqlite;
    threadbox_testing::store_conformance_tests!(sqlite);
}

mod store_purge {
    use super::sqlite;
    threadbox_testing::store_purge_tests!(sqlite);
}

mod lifecycle_conformance {
    use super::sqlite;
    threadbox_testing::lifecycle_conformance_tests!(sqlite);
}

/// Two store handles on one file behave like two processes sharing it: still one sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_handles_on_one_file_still_create_one_sandbox() {
    use std::sync::Arc;
    use threadbox_core::domain::ThreadId;
    use threadbox_core::usecases::Threadbox;
    use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
    use threadbox_testing::{InMemoryProvider, ManualClock};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let provider = InMemoryProvider::new();
    provider.set_create_delay(std::time::Duration::from_millis(30));
    let clock = Arc::new(ManualClock::default());
    let instances: Vec<Threadbox> = (0..2)
        .map(|_| {
            Threadbox::new(
                Arc::new(SqliteSessionStore::open(&path).unwrap()),
                provider.clone(),
                Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap()),
                clock.clone(),
                lifecycle::test_config(),
            )
        })
        .collect();
    let thread = ThreadId::parse("shared-file").unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let tb = instances[i % 2].clone();
            let thread = thread.clone();
            tokio::spawn(async move { tb.resolve(&thread).await.unwrap().sandbox_id })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        ids.insert(t.await.unwrap());
    }
    assert_eq!(provider.creates(), 1);
    assert_eq!(ids.len(), 1);
}

/// A file that is not a SQLite database is refused with an error naming it, never a panic.
#[test]
fn a_corrupt_database_file_is_named_in_the_error() {
    use threadbox_core::ports::StoreError;
    use threadbox_sqlite::SqliteSessionStore;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a-database.db");
    std::fs::write(
        &path,
        b"this is not sqlite, just some text that is long enough to have a header".repeat(100),
    )
    .unwrap();
    let err = SqliteSessionStore::open(&path)
        .err()
        .expect("a corrupt file is refused");
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    assert!(err.to_string().contains("not-a-database.db"), "{err}");

    let err = SqliteSessionStore::open(dir.path().join("missing-dir/threadbox.db"))
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("missing-dir/threadbox.db"),
        "{err}"
    );
}

mod window_counter_conformance {
    use std::sync::Arc;
    use threadbox_core::ports::WindowCounter;
    use threadbox_sqlite::{Database, SqliteWindowCounter};

    /// Counters on a fresh database file, and its directory for the test to keep.
    async fn counter(_test: &str) -> Option<(Arc<dyn WindowCounter>, tempfile::TempDir)> {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(dir.path().join("counts.db"), "").unwrap();
        Some((Arc::new(SqliteWindowCounter::new(db).await.unwrap()), dir))
    }

    threadbox_testing::window_counter_conformance_tests!(counter);
}

mod budget_conformance {
    use std::sync::Arc;
    use threadbox_core::ports::{DurableQueue, SessionStore, WindowCounter};
    use threadbox_sqlite::{Database, SqliteWindowCounter};
    use threadbox_tests::SqliteBackend;

    /// A fresh backend and counters on a database file of their own, kept for the test.
    #[allow(clippy::type_complexity)]
    async fn backend(
        _test: &str,
    ) -> Option<(
        Arc<dyn SessionStore>,
        Arc<dyn DurableQueue>,
        Arc<dyn WindowCounter>,
        (SqliteBackend, tempfile::TempDir),
    )> {
        let backend = SqliteBackend::new();
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(dir.path().join("counts.db"), "").unwrap();
        let counter = Arc::new(SqliteWindowCounter::new(db).await.unwrap());
        Some((
            backend.store.clone(),
            backend.events.clone(),
            counter,
            (backend, dir),
        ))
    }

    threadbox_testing::budget_conformance_tests!(backend);
}

mod warm_pool_conformance {
    use std::sync::Arc;
    use threadbox_core::ports::{DurableQueue, SessionStore, WarmPoolStore};
    use threadbox_tests::SqliteBackend;

    #[allow(clippy::type_complexity)]
    async fn backend(
        _test: &str,
    ) -> Option<(
        Arc<dyn SessionStore>,
        Arc<dyn WarmPoolStore>,
        Arc<dyn DurableQueue>,
        SqliteBackend,
    )> {
        let backend = SqliteBackend::new();
        Some((
            backend.store.clone(),
            backend.pool.clone(),
            backend.events.clone(),
            backend,
        ))
    }

    threadbox_testing::warm_pool_conformance_tests!(backend);
}

mod dedupe_conformance {
    use std::sync::Arc;
    use threadbox_sqlite::SqliteDedupe;
    use threadbox_testing::dedupe_conformance as dedupe;

    macro_rules! dedupe_suite {
        ($($name:ident),* $(,)?) => {$(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let dir = tempfile::tempdir().unwrap();
                let store = SqliteDedupe::open(dir.path().join("dedupe.db")).unwrap();
                dedupe::$name(Arc::new(store)).await;
            }
        )*};
    }

    dedupe_suite!(
        the_first_claim_wins_and_repeats_are_duplicates,
        released_and_expired_keys_can_be_claimed_again,
        concurrent_claims_have_exactly_one_winner,
    );
}

#[cfg(feature = "slack")]
mod slack_status_conformance {
    use std::sync::Arc;
    use threadbox_sqlite::SqliteSlackStatusStore;
    use threadbox_testing::slack_status_conformance as suite;

    macro_rules! slack_status_suite {
        ($($name:ident),* $(,)?) => {$(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let dir = tempfile::tempdir().unwrap();
                let store = SqliteSlackStatusStore::open(dir.path().join("status.db")).unwrap();
                suite::$name(Arc::new(store)).await;
            }
        )*};
    }

    slack_status_suite!(
        a_later_event_replaces_an_earlier_one_never_the_reverse,
        racing_writers_leave_the_latest_event,
    );
}
