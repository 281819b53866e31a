//! The provider failing under the use cases: E2B (through the contract fake) answering 5xx or
//! timing out during create, pause and resume, and a worker dying mid-transition.
//!
//! What every case must show: retries are bounded (counted at the fake), the failure becomes a
//! lifecycle event with cause `error` or `resume_failed` written with the record, the record is
//! never left in a transitional state past its lease, and the next resolve or janitor sweep
//! brings the thread back with nothing left over at the provider.

use std::sync::Arc;
use std::time::{Duration, Instant};

use threadbox_core::config::Env;
use threadbox_core::domain::{Cause, Change, Command, LifecycleEvent, Status, ThreadId};
use threadbox_core::ports::Clock;
use threadbox_core::usecases::{SweepOptions, Threadbox};
use threadbox_e2b::{E2bConfig, E2bProvider};
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::e2b_fake::{E2bFake, FakeState, Fault, Route};
use threadbox_testing::lifecycle_conformance::test_config;
use threadbox_testing::ManualClock;

/// E2B's SDK retries 502/503/504 three times after the first attempt.
const ATTEMPTS: usize = 4;

struct Setup {
    fake: E2bFake,
    tb: Threadbox,
    clock: Arc<ManualClock>,
    thread: ThreadId,
    _dir: tempfile::TempDir,
}

/// A threadbox on SQLite over E2B's fake, with short backoffs and a `request_timeout` short
/// enough that a hung call ends within the test.
async fn setup(request_timeout: Duration) -> Setup {
    let fake = E2bFake::start().await;
    let env = Env::from_map(fake.env_vars());
    let mut config = E2bConfig::from_env(&env).expect("config");
    config.retry.base_delay = Duration::from_millis(10);
    config.retry.max_delay = Duration::from_millis(50);
    config.request_timeout = request_timeout;
    config.retry.budget = request_timeout;
    let provider = Arc::new(E2bProvider::new(config).expect("provider"));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("threadbox.db");
    let clock = Arc::new(ManualClock::default());
    let tb = Threadbox::new(
        Arc::new(SqliteSessionStore::open(&db).unwrap()),
        provider,
        Arc::new(SqliteQueue::open(&db, "lifecycle", QueueConfig::default()).unwrap()),
        clock.clone(),
        test_config(),
    );
    Setup {
        fake,
        tb,
        clock,
        thread: ThreadId::parse("faults-1").unwrap(),
        _dir: dir,
    }
}

impl Setup {
    async fn status(&self) -> Status {
        self.tb
            .session(&self.thread)
            .await
            .unwrap()
            .expect("a record")
            .status
    }

    async fn events(&self) -> Vec<LifecycleEvent> {
        let events = self
            .tb
            .store
            .events_after(&self.thread, 0, 1000)
            .await
            .unwrap();
        // Invariant 2: gapless, and each event starts where the previous one ended.
        for (i, pair) in events.windows(2).enumerate() {
            assert_eq!(pair[1].seq, pair[0].seq + 1, "gap after event {i}");
            assert_eq!(pair[1].from, Some(pair[0].to), "{pair:?}");
        }
        events
    }

    fn creates(&self) -> usize {
        self.fake.requests_to("POST", "/v2/sandboxes").len()
    }

    fn live_sandboxes(&self) -> Vec<String> {
        self.fake
            .sandboxes()
            .into_iter()
            .filter(|s| matches!(s.state, FakeState::Running | FakeState::Paused))
            .map(|s| s.sandbox_id)
            .collect()
    }

    async fn sweep(&self) -> threadbox_core::usecases::SweepReport {
        self.tb
            .sweep(SweepOptions::for_duration(Duration::from_secs(30)))
            .await
    }
}

fn transitions(events: &[LifecycleEvent]) -> Vec<(Option<Status>, Status, Cause)> {
    events.iter().map(|e| (e.from, e.to, e.cause)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_answering_503_is_retried_a_bounded_number_of_times_then_recorded_as_an_error() {
    let s = setup(Duration::from_secs(10)).await;
    for _ in 0..ATTEMPTS {
        s.fake
            .fail_next(Route::Create, Fault::json(503, "no capacity"));
    }
    let error = s.tb.resolve(&s.thread).await.unwrap_err();
    assert_eq!(error.code(), "provider_error", "{error}");
    assert!(error.is_retryable(), "a 503 is worth retrying later");
    assert_eq!(s.creates(), ATTEMPTS, "one attempt and three retries");

    assert_eq!(s.status().await, Status::Error, "not left creating");
    let events = s.events().await;
    assert_eq!(
        transitions(&events),
        [
            (None, Status::Creating, Cause::User),
            (Some(Status::Creating), Status::Error, Cause::Error),
        ]
    );
    let detail = events[1].detail.as_deref().unwrap_or_default();
    assert!(detail.contains("create failed"), "{detail}");
    assert!(s.live_sandboxes().is_empty());

    // A 500 without `Should-Retry` is E2B saying "do not retry": one attempt only.
    s.fake.clear_requests();
    s.fake
        .fail_next(Route::Create, Fault::json(500, "internal error"));
    assert!(s.tb.resolve(&s.thread).await.is_err());
    assert_eq!(s.creates(), 1);
    assert_eq!(s.status().await, Status::Error);

    // With E2B healthy again, the next resolve makes the sandbox under a new generation.
    let handle = s.tb.resolve(&s.thread).await.unwrap();
    assert_eq!(handle.status, Status::Active);
    assert_eq!(handle.generation, 3, "one generation per attempt to create");
    assert_eq!(s.live_sandboxes(), vec![handle.sandbox_id.clone()]);
    s.events().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_times_out_ends_in_bounded_time_and_its_late_sandbox_is_reaped() {
    let timeout = Duration::from_millis(400);
    let s = setup(timeout).await;
    let slow = Duration::from_millis(1500);
    s.fake.set_create_delay(slow);

    let started = Instant::now();
    let error = s.tb.resolve(&s.thread).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(error.code(), "provider_error", "{error}");
    // One request timeout of budget, a last attempt, and slack for a loaded machine; far less
    // than the create itself takes.
    assert!(took < timeout * 3, "resolve took {took:?}");
    assert!(s.creates() <= ATTEMPTS, "{} creates", s.creates());
    assert_eq!(s.status().await, Status::Error);
    assert_eq!(
        transitions(&s.events().await),
        [
            (None, Status::Creating, Cause::User),
            (Some(Status::Creating), Status::Error, Cause::Error),
        ]
    );

    // The fake finishes the create the client gave up on: a sandbox tagged with the thread that
    // no record points to. The janitor's reconciliation kills it.
    s.fake.set_create_delay(Duration::ZERO);
    tokio::time::sleep(slow + Duration::from_millis(300)).await;
    let report = s.sweep().await;
    assert_eq!(report.failures, 0, "{report:?}");
    assert!(
        s.live_sandboxes().is_empty(),
        "orphans left: {:?} ({report:?})",
        s.live_sandboxes()
    );

    let handle = s.tb.resolve(&s.thread).await.unwrap();
    assert_eq!(handle.status, Status::Active);
    assert_eq!(s.live_sandboxes(), vec![handle.sandbox_id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_answering_503_is_an_error_event_and_the_next_resolve_finds_the_sandbox() {
    let s = setup(Duration::from_secs(10)).await;
    let handle = s.tb.resolve(&s.thread).await.unwrap();
    for _ in 0..ATTEMPTS {
        s.fake.fail_next(Route::Pause, Fault::json(503, "busy"));
    }
    let error = s.tb.pause(&s.thread).await.unwrap_err();
    assert_eq!(error.code(), "provider_error", "{error}");
    let pause_path = format!("/sandboxes/{}/pause", handle.sandbox_id);
    assert_eq!(s.fake.requests_to("POST", &pause_path).len(), ATTEMPTS);
    assert_eq!(s.status().await, Status::Error);
    let events = s.events().await;
    let last = events.last().unwrap();
    assert_eq!(
        (last.from, last.to, last.cause),
        (Some(Status::Pausing), Status::Error, Cause::Error)
    );
    assert!(last
        .detail
        .as_deref()
        .unwrap_or_default()
        .contains("pause failed"));

    // The sandbox is fine: the next resolve asks the provider and carries on with it.
    let again = s.tb.resolve(&s.thread).await.unwrap();
    assert_eq!(again.sandbox_id, handle.sandbox_id);
    assert_eq!(again.status, Status::Active);
    assert_eq!(s.live_sandboxes(), vec![handle.sandbox_id]);
    s.events().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_answering_503_is_recorded_as_resume_failed_and_recovers() {
    let s = setup(Duration::from_secs(10)).await;
    let handle = s.tb.resolve(&s.thread).await.unwrap();
    s.tb.pause(&s.thread).await.unwrap();
    for _ in 0..ATTEMPTS {
        s.fake
            .fail_next(Route::Connect, Fault::text(504, "upstream request timeout"));
    }
    let error = s.tb.resume(&s.thread).await.unwrap_err();
    assert_eq!(error.code(), "provider_error", "{error}");
    let connect_path = format!("/v2/sandboxes/{}/connect", handle.sandbox_id);
    assert_eq!(s.fake.requests_to("POST", &connect_path).len(), ATTEMPTS);
    let events = s.events().await;
    let last = events.last().unwrap();
    assert_eq!(
        (last.from, last.to, last.cause),
        (Some(Status::Resuming), Status::Error, Cause::ResumeFailed)
    );

    let again = s.tb.resolve(&s.thread).await.unwrap();
    assert_eq!(
        again.sandbox_id, handle.sandbox_id,
        "same sandbox, files kept"
    );
    assert_eq!(again.status, Status::Active);
    s.events().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_died_mid_pause_is_recovered_by_the_janitor_after_its_lease() {
    let s = setup(Duration::from_secs(10)).await;
    let handle = s.tb.resolve(&s.thread).await.unwrap();

    // A worker claims the pause (the same conditional write the use case makes), has E2B pause
    // the sandbox, and dies before recording that it did.
    let current = s.tb.session(&s.thread).await.unwrap().unwrap();
    let mut claimed = current.clone();
    let change = Change {
        event_id: "dead-worker-pause".into(),
        now: s.clock.now(),
        detail: None,
    };
    let event = claimed
        .apply(Command::Pause, Cause::Idle, change, &s.tb.config.timers)
        .unwrap()
        .expect("active to pausing");
    claimed.version = current.version + 1;
    s.tb.store
        .save(&claimed, current.version, &[event])
        .await
        .unwrap();
    s.tb.provider.pause(&handle.sandbox_id).await.unwrap();
    assert_eq!(
        s.status().await,
        Status::Pausing,
        "stuck, as a dead worker leaves it"
    );

    // Within its lease the janitor leaves it alone: the worker may only be slow.
    let report = s.sweep().await;
    assert_eq!((report.recovered, report.failures), (0, 0), "{report:?}");
    assert_eq!(s.status().await, Status::Pausing);

    // Past the lease it asks E2B and records what it finds.
    s.clock
        .advance(s.tb.config.timers.lease + Duration::from_secs(1));
    let report = s.sweep().await;
    assert_eq!(report.recovered, 1, "{report:?}");
    assert_eq!(report.failures, 0, "{report:?}");
    assert_eq!(s.status().await, Status::Paused);
    let events = s.events().await;
    let last = events.last().unwrap();
    assert_eq!(
        (last.from, last.to, last.cause),
        (Some(Status::Pausing), Status::Paused, Cause::Reconcile)
    );

    // And the thread carries on with the same sandbox.
    let again = s.tb.resolve(&s.thread).await.unwrap();
    assert_eq!(again.sandbox_id, handle.sandbox_id);
    assert!(again.resumed);
    assert_eq!(again.status, Status::Active);
    s.events().await;
}
