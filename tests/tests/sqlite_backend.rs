//! The session store and lifecycle conformance suites against the embedded SQLite backend.

use threadbox_shared::testing::lifecycle_conformance as lifecycle;
use threadbox_shared::testing::lifecycle_conformance::Harness;
use threadbox_shared::testing::store_conformance as store;
use threadbox_tests::SqliteBackend;

macro_rules! store_suite {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let backend = SqliteBackend::new();
            store::$name(backend.store.clone()).await;
        }
    )*};
}

macro_rules! lifecycle_suite {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            let backend = SqliteBackend::new();
            lifecycle::$name(Harness::new(backend.store.clone(), backend.events.clone())).await;
        }
    )*};
}

mod store_conformance {
    use super::*;
    store_suite!(
        insert_then_load_round_trips,
        second_insert_conflicts_and_changes_nothing,
        save_writes_session_and_events_together,
        stale_save_conflicts_and_writes_nothing,
        a_duplicate_event_id_fails_the_whole_write,
        exactly_one_of_many_concurrent_saves_wins,
        due_reads_only_due_rows_of_a_shard_in_pages,
        events_after_and_outbox,
        list_pages_through_every_session,
    );
}

mod lifecycle_conformance {
    use super::*;
    lifecycle_suite!(
        concurrent_resolves_create_exactly_one_sandbox,
        resolve_racing_retention_never_points_at_a_killed_sandbox,
        an_aborted_create_leaves_an_orphan_the_next_sweep_kills,
        every_change_yields_one_event_with_gapless_sequence,
        unsent_events_are_redriven_by_the_janitor,
        idle_pause_respects_state_and_holds,
        the_janitor_never_acts_on_a_stale_read,
        a_running_command_is_never_paused,
        resolve_resumes_a_paused_sandbox,
        a_gone_sandbox_is_recreated_and_the_event_says_so,
        illegal_commands_are_refused_and_change_nothing,
        retention_destroys_and_the_next_resolve_starts_fresh,
        stuck_transitions_and_drift_are_reconciled,
        the_sweep_stops_at_its_deadline,
        a_failed_create_is_an_error_event_not_a_stuck_record,
        a_command_on_a_sandbox_paused_behind_our_back_resumes_it,
    );

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_gone_sandbox_expires_the_thread_under_the_expire_policy() {
        let backend = SqliteBackend::new();
        lifecycle::a_gone_sandbox_expires_the_thread_under_the_expire_policy(
            backend.store.clone(),
            backend.events.clone(),
        )
        .await;
    }
}

/// Two store handles on one file behave like two processes sharing it: still one sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_handles_on_one_file_still_create_one_sandbox() {
    use std::sync::Arc;
    use threadbox_shared::adapters::sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
    use threadbox_shared::domain::ThreadId;
    use threadbox_shared::testing::{InMemoryProvider, ManualClock};
    use threadbox_shared::usecases::Threadbox;

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
    use threadbox_shared::adapters::sqlite::SqliteSessionStore;
    use threadbox_shared::ports::StoreError;

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

mod dedupe_conformance {
    use std::sync::Arc;
    use threadbox_shared::adapters::sqlite::SqliteDedupe;
    use threadbox_shared::testing::dedupe_conformance as dedupe;

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
