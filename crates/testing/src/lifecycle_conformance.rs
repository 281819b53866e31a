//! The lifecycle conformance suite: the design's invariants, proven through the use cases over a
//! real store and queue. Every store/queue pair (SQLite now, DynamoDB/SQS too) runs these.
//!
//! The provider is the in-memory test provider (its failure points are what these tests need);
//! the real providers have their own conformance suite.

use std::sync::Arc;

use super::eventually::eventually;
use std::time::Duration;

use threadbox_core::domain::{
    Cause, GonePolicy, LifecycleEvent, Millis, RejectKind, Session, Status, ThreadId,
};
use threadbox_core::ports::{
    DurableQueue, ExecRequest, Page, ProviderError, Purged, SessionStore, StoreError,
    WriteCondition,
};
use threadbox_core::usecases::{
    Config, HoldRequest, SweepOptions, Threadbox, TransitionOutcome, UseCaseError,
};

use super::{FlakyQueue, InMemoryProvider, ManualClock, Op};

/// A threadbox over the given store and queue, with the test provider and a manual clock.
pub struct Harness {
    pub tb: Threadbox,
    pub provider: Arc<InMemoryProvider>,
    pub clock: Arc<ManualClock>,
    pub queue: Arc<FlakyQueue>,
}

impl Harness {
    pub fn new(store: Arc<dyn SessionStore>, events: Arc<dyn DurableQueue>) -> Self {
        Self::with_config(store, events, test_config())
    }

    pub fn with_config(
        store: Arc<dyn SessionStore>,
        events: Arc<dyn DurableQueue>,
        config: Config,
    ) -> Self {
        let provider = InMemoryProvider::new();
        let clock = Arc::new(ManualClock::default());
        let queue = FlakyQueue::new(events);
        let tb = Threadbox::new(
            store,
            provider.clone(),
            queue.clone(),
            clock.clone(),
            config,
        );
        Self {
            tb,
            provider,
            clock,
            queue,
        }
    }

    /// The same harness, its janitor handing claimed pauses and destroys to `transitions`.
    pub fn with_transitions(mut self, transitions: Arc<dyn DurableQueue>) -> Self {
        self.tb = self.tb.with_transition_queue(transitions);
        self
    }

    /// Wait until the due index shows `n` records due now, over every shard (DynamoDB's
    /// index is eventually consistent).
    pub async fn wait_for_due(&self, n: usize) {
        let now = self.tb.clock.now();
        let due = eventually(
            || async {
                let mut total = 0;
                for shard in 0..self.tb.store.shard_count() {
                    total += self
                        .tb
                        .store
                        .due(shard, now, 1_000, None)
                        .await
                        .unwrap()
                        .items
                        .len();
                }
                total
            },
            |total| *total == n,
        )
        .await;
        assert_eq!(due, n, "the due index shows every due thread");
    }

    /// Receive everything on `transitions` and carry each item out once, acking it; returns
    /// the bodies handled.
    pub async fn run_transitions(&self, transitions: &dyn DurableQueue) -> Vec<String> {
        let mut bodies = Vec::new();
        loop {
            let batch = transitions
                .receive(10, Duration::from_secs(30))
                .await
                .unwrap();
            if batch.is_empty() {
                return bodies;
            }
            for message in batch {
                let outcome = self.tb.run_transition(&message.body).await;
                assert!(
                    matches!(outcome, TransitionOutcome::Done(_)),
                    "{outcome:?} for {}",
                    message.body
                );
                transitions.ack(&message.receipt).await.unwrap();
                bodies.push(message.body);
            }
        }
    }

    /// Every event stored for the thread, in order.
    pub async fn events(&self, thread: &ThreadId) -> Vec<LifecycleEvent> {
        self.tb.store.events_after(thread, 0, 1_000).await.unwrap()
    }

    pub async fn status(&self, thread: &ThreadId) -> Status {
        self.tb.store.load(thread).await.unwrap().unwrap().status
    }

    pub async fn sweep(&self) -> threadbox_core::usecases::SweepReport {
        self.tb
            .sweep(SweepOptions::for_duration(Duration::from_secs(30)))
            .await
    }

    /// Drain the lifecycle queue, acking everything; returns the events in delivery order.
    pub async fn drain_events(&self) -> Vec<LifecycleEvent> {
        let mut out = Vec::new();
        loop {
            let batch = self
                .queue
                .receive(10, Duration::from_secs(30))
                .await
                .unwrap();
            if batch.is_empty() {
                return out;
            }
            for m in batch {
                out.push(serde_json::from_str(&m.body).unwrap());
                self.queue.ack(&m.receipt).await.unwrap();
            }
        }
    }
}

pub fn test_config() -> Config {
    Config {
        settle_poll: Duration::from_millis(5),
        settle_wait: Duration::from_secs(20),
        ..Config::default()
    }
}

fn tid(s: &str) -> ThreadId {
    ThreadId::parse(s).unwrap()
}

/// Invariant 1: any number of concurrent resolves of one new thread create one sandbox.
pub async fn concurrent_resolves_create_exactly_one_sandbox(h: Harness) {
    let thread = tid("race-64");
    h.provider.set_create_delay(Duration::from_millis(50));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let tb = h.tb.clone();
            let thread = thread.clone();
            tokio::spawn(async move { tb.resolve(&thread).await })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        let handle = t.await.unwrap().expect("every caller gets a sandbox");
        assert_eq!(handle.status, Status::Active);
        ids.insert(handle.sandbox_id);
    }
    assert_eq!(h.provider.creates(), 1, "exactly one provider create");
    assert_eq!(ids.len(), 1, "all 64 callers got the same sandbox");
    assert_eq!(h.provider.live_ids().len(), 1);
}

/// A resolve racing the janitor's retention claim: the sandbox lives or a fresh one replaces it,
/// and the record never points at a killed sandbox.
pub async fn resolve_racing_retention_never_points_at_a_killed_sandbox(h: Harness) {
    for round in 0..10 {
        let thread = tid(&format!("retention-race-{round}"));
        let first = h.tb.resolve(&thread).await.unwrap();
        h.tb.pause(&thread).await.unwrap();
        h.clock
            .advance(h.tb.config.timers.retention + Duration::from_secs(1));
        let tb = h.tb.clone();
        let t = thread.clone();
        let resolver = tokio::spawn(async move { tb.resolve(&t).await });
        let report = h.sweep().await;
        let handle = resolver
            .await
            .unwrap()
            .expect("the resolve succeeds either way");
        let record = h.tb.store.load(&thread).await.unwrap().unwrap();
        let live = h.provider.live_ids();
        match &record.sandbox_id {
            Some(id) => assert!(
                live.contains(id),
                "round {round}: record points at killed sandbox {id}"
            ),
            None => assert_ne!(record.status, Status::Active),
        }
        if handle.sandbox_id == first.sandbox_id {
            assert!(
                live.contains(&first.sandbox_id),
                "round {round}: the resolve won, so the sandbox lives"
            );
        } else {
            assert!(
                handle.generation > first.generation,
                "round {round}: a fresh sandbox is a new generation"
            );
            assert!(
                !live.contains(&first.sandbox_id),
                "round {round}: the old sandbox was destroyed"
            );
        }
        // Whoever won, the record now agrees with the handle the resolver got, or moved on.
        assert!(report.failures == 0, "round {round}: {report:?}");
        h.tb.destroy(&thread, Cause::User).await.unwrap();
        h.clock.advance(Duration::from_secs(1));
    }
}

/// A task that dies after the provider created a sandbox but before the record was written
/// leaves an orphan that the next sweep (after the lease) kills.
pub async fn an_aborted_create_leaves_an_orphan_the_next_sweep_kills(h: Harness) {
    let thread = tid("aborted-create");
    h.provider.hang_after_create(true);
    let tb = h.tb.clone();
    let t = thread.clone();
    let task = tokio::spawn(async move { tb.resolve(&t).await });
    while h.provider.creates() == 0 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    task.abort();
    let _ = task.await;
    h.provider.hang_after_create(false);
    assert_eq!(
        h.provider.live_ids().len(),
        1,
        "the provider made a sandbox"
    );
    assert_eq!(h.status(&thread).await, Status::Creating);

    // Within the lease the in-flight create is respected.
    let report = h.sweep().await;
    assert_eq!(report.orphans_killed, 0, "{report:?}");
    assert_eq!(h.provider.live_ids().len(), 1);

    h.clock
        .advance(h.tb.config.timers.lease + Duration::from_secs(1));
    let first = h.sweep().await;
    let second = h.sweep().await;
    assert_eq!(
        first.orphans_killed + second.orphans_killed,
        1,
        "{first:?} {second:?}"
    );
    assert!(h.provider.live_ids().is_empty(), "the orphan is gone");
    assert_eq!(h.status(&thread).await, Status::Error);

    // The thread recovers on the next resolve with a new generation.
    let handle = h.tb.resolve(&thread).await.unwrap();
    assert_eq!(handle.generation, 2);
    assert_eq!(h.provider.live_ids(), vec![handle.sandbox_id]);
}

/// Invariant 2 and 3: one event per state change, gapless sequence numbers, every event reaches
/// the queue once, and a repeated send of an event is recognised by its id.
pub async fn every_change_yields_one_event_with_gapless_sequence(h: Harness) {
    let thread = tid("events-1");
    h.tb.resolve(&thread).await.unwrap();
    h.tb.resolve(&thread).await.unwrap(); // no state change: no event
    h.tb.pause(&thread).await.unwrap();
    h.tb.pause(&thread).await.unwrap(); // repeated: no-op
    h.tb.resolve(&thread).await.unwrap();
    h.tb.destroy(&thread, Cause::User).await.unwrap();

    let events = h.events(&thread).await;
    let path: Vec<_> = events.iter().map(|e| (e.from, e.to)).collect();
    use Status::*;
    assert_eq!(
        path,
        vec![
            (None, Creating),
            (Some(Creating), Active),
            (Some(Active), Pausing),
            (Some(Pausing), Paused),
            (Some(Paused), Resuming),
            (Some(Resuming), Active),
            (Some(Active), Deleting),
            (Some(Deleting), Destroyed),
        ]
    );
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "gapless");
    }
    let record = h.tb.store.load(&thread).await.unwrap().unwrap();
    assert_eq!(record.last_seq, events.len() as u64);

    // A re-drive or a retried send carries the same event id and is dropped as a duplicate.
    // Sent before the drain: moto's SQS forgets an id once its message is deleted (SQS does not),
    // and the queue suite checks the longer memory where the backend has it.
    h.queue
        .send(&[threadbox_core::ports::OutgoingMessage {
            group_id: thread.to_string(),
            dedup_id: events[0].event_id.clone(),
            body: serde_json::to_string(&events[0]).unwrap(),
        }])
        .await
        .unwrap();
    let delivered = h.drain_events().await;
    assert_eq!(
        delivered, events,
        "each event reaches the queue once, in order, the repeated send dropped by its id"
    );
    assert_eq!(
        h.tb.redrive_unsent(100).await.unwrap(),
        0,
        "everything was marked sent"
    );
}

/// No event is lost when the queue is down at write time: the janitor re-drives it.
pub async fn unsent_events_are_redriven_by_the_janitor(h: Harness) {
    let thread = tid("outbox-1");
    h.queue.fail_sends(true);
    h.tb.resolve(&thread).await.unwrap();
    h.queue.fail_sends(false);
    assert!(h.drain_events().await.is_empty());
    h.clock
        .advance(h.tb.config.redrive_after + Duration::from_secs(1));
    let report = h.sweep().await;
    assert_eq!(report.events_redriven, 2, "{report:?}");
    let delivered = h.drain_events().await;
    assert_eq!(delivered, h.events(&thread).await);
}

/// Invariant 5 and the idle rules: a paused thread is not paused again, a live hold protects,
/// an expired hold does not.
pub async fn idle_pause_respects_state_and_holds(h: Harness) {
    let timers = h.tb.config.timers.clone();
    let idle = tid("idle-1");
    let held = tid("held-1");
    h.tb.resolve(&idle).await.unwrap();
    let hold =
        h.tb.acquire_hold(&held, HoldRequest::new("agent", timers.idle_pause * 2))
            .await
            .unwrap();
    assert!(hold.hold_id.is_some());

    h.clock.advance(timers.idle_pause + Duration::from_secs(1));
    let report = h.sweep().await;
    assert_eq!(report.paused, 1, "{report:?}");
    assert_eq!(h.status(&idle).await, Status::Paused);
    assert_eq!(
        h.status(&held).await,
        Status::Active,
        "a live hold protects"
    );

    let pauses = h.provider.pauses();
    let report = h.sweep().await;
    assert_eq!(report.paused, 0, "{report:?}");
    assert_eq!(
        h.provider.pauses(),
        pauses,
        "a paused thread is not paused again"
    );

    h.clock.advance(timers.idle_pause + Duration::from_secs(1));
    let report = h.sweep().await;
    assert_eq!(
        report.paused, 1,
        "the hold expired, so it no longer protects: {report:?}"
    );
    assert_eq!(h.status(&held).await, Status::Paused);
}

/// Invariant 4: the janitor's claim is conditional on what it read; activity after the read wins.
pub async fn the_janitor_never_acts_on_a_stale_read(h: Harness) {
    let thread = tid("stale-1");
    h.tb.resolve(&thread).await.unwrap();
    h.clock
        .advance(h.tb.config.timers.idle_pause + Duration::from_secs(1));
    let shard = thread.shard(h.tb.store.shard_count());
    // `due` reads an index (DynamoDB's `due` GSI): wait for it to show the thread.
    let now = h.tb.clock.now();
    let snapshot = eventually(
        || async { h.tb.store.due(shard, now, 10, None).await.unwrap().items },
        |items| items.len() == 1,
    )
    .await;
    assert_eq!(snapshot.len(), 1);
    // Activity lands between the janitor's read and its claim.
    h.tb.resolve(&thread).await.unwrap();
    let acted = h.tb.act_on_due_for_tests(snapshot[0].clone()).await;
    assert_eq!(acted, "skipped");
    assert_eq!(h.status(&thread).await, Status::Active);
    assert_eq!(h.provider.pauses(), 0);
}

/// A running command holds the sandbox: neither a user pause nor the janitor pauses it.
pub async fn a_running_command_is_never_paused(h: Harness) {
    let thread = tid("busy-1");
    h.tb.resolve(&thread).await.unwrap();
    // Longer than a sweep takes on a loaded machine against moto: a command that ended before
    // the janitor's claim may rightly be paused, which is not what this test is about.
    h.provider.set_exec_delay(Duration::from_secs(2));
    let tb = h.tb.clone();
    let t = thread.clone();
    let exec = tokio::spawn(async move { tb.exec(&t, ExecRequest::shell("sleep 1")).await });
    while h.provider.commands().is_empty() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let err = h.tb.pause(&thread).await.unwrap_err();
    assert!(matches!(err, UseCaseError::Held(_)), "{err:?}");
    h.clock
        .advance(h.tb.config.timers.idle_pause + Duration::from_secs(1));
    let report = h.sweep().await;
    assert_eq!(report.paused, 0, "{report:?}");
    let result = exec.await.unwrap().unwrap();
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(h.status(&thread).await, Status::Active);
    // Released: now the user can pause.
    h.tb.pause(&thread).await.unwrap();
}

/// Resolve resumes a paused sandbox under the same id.
pub async fn resolve_resumes_a_paused_sandbox(h: Harness) {
    let thread = tid("resume-1");
    let first = h.tb.resolve(&thread).await.unwrap();
    h.tb.pause(&thread).await.unwrap();
    let again = h.tb.resolve(&thread).await.unwrap();
    assert_eq!(
        (again.sandbox_id.as_str(), again.resumed, again.created),
        (first.sandbox_id.as_str(), true, false)
    );
    assert_eq!(h.provider.creates(), 1);
    let resumed = h.tb.resume(&thread).await.unwrap();
    assert!(!resumed.resumed, "resuming an active thread is a no-op");
}

/// A command sent to a paused thread wakes it in the same call (one round trip for the caller,
/// whatever the way in: HTTP exec, Slack, MCP): the sandbox is resumed (the provider refuses a
/// command in a paused one), the command runs, and the resume's two events reach the queue
/// once each, in order, although the first is sent while the provider resumes.
pub async fn a_command_to_a_paused_thread_resumes_it_in_the_same_call(h: Harness) {
    let thread = tid("wake-1");
    let first = h.tb.resolve(&thread).await.unwrap();
    h.tb.pause(&thread).await.unwrap();
    h.drain_events().await;
    let out =
        h.tb.exec(&thread, ExecRequest::shell("echo woke"))
            .await
            .expect("a command to a paused thread runs");
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(h.provider.connects(), 1, "resumed once, in the same call");
    let record = h.tb.store.load(&thread).await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.sandbox_id.as_deref()),
        (Status::Active, Some(first.sandbox_id.as_str()))
    );
    let delivered: Vec<_> = h
        .drain_events()
        .await
        .into_iter()
        .map(|e| (e.from, e.to, e.seq))
        .collect();
    use Status::*;
    assert_eq!(
        delivered,
        vec![(Some(Paused), Resuming, 5), (Some(Resuming), Active, 6)],
        "the wake's events, once each and in order"
    );
    assert_eq!(
        h.tb.redrive_unsent(100).await.unwrap(),
        0,
        "both marked sent"
    );
}

/// Invariant 6, recreate policy: the sandbox is replaced in a new generation and the event says so.
pub async fn a_gone_sandbox_is_recreated_and_the_event_says_so(h: Harness) {
    let thread = tid("slack:T1:C1:1700000000.000100");
    let first = h.tb.resolve(&thread).await.unwrap();
    h.tb.pause(&thread).await.unwrap();
    h.provider.forget(&first.sandbox_id);
    let handle = h.tb.resolve(&thread).await.unwrap();
    assert!(handle.recreated);
    assert_eq!(handle.generation, first.generation + 1);
    assert_ne!(handle.sandbox_id, first.sandbox_id);
    let events = h.events(&thread).await;
    let recreated = events
        .iter()
        .find(|e| e.cause == Cause::Recreated)
        .expect("a recreated event");
    assert_eq!(
        recreated.sandbox_id.as_deref(),
        Some(first.sandbox_id.as_str())
    );
    assert!(
        recreated
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("files are lost"),
        "{recreated:?}"
    );
}

/// Invariant 6, expire policy: the thread is expired and new work is refused with a clear message
/// until it is reset.
pub async fn a_gone_sandbox_expires_the_thread_under_the_expire_policy(
    store: Arc<dyn SessionStore>,
    events: Arc<dyn DurableQueue>,
) {
    let config = threadbox_core::usecases::Config {
        gone_policy_api: GonePolicy::Expire,
        ..test_config()
    };
    let h = Harness::with_config(store, events, config);
    let thread = tid("expire-1");
    let first = h.tb.resolve(&thread).await.unwrap();
    h.tb.pause(&thread).await.unwrap();
    h.provider.forget(&first.sandbox_id);
    let err = h.tb.resolve(&thread).await.unwrap_err();
    assert_eq!(err.code(), "thread_expired", "{err}");
    assert!(err.to_string().contains("reset the thread"), "{err}");
    assert_eq!(h.status(&thread).await, Status::Expired);
    let last = h.events(&thread).await.pop().unwrap();
    assert_eq!(
        (last.to, last.cause),
        (Status::Expired, Cause::ProviderGone)
    );

    let seq = h.events(&thread).await.len();
    let err = h.tb.resume(&thread).await.unwrap_err();
    assert!(matches!(err, UseCaseError::Rejected(r) if r.kind == RejectKind::Expired));
    assert_eq!(
        h.events(&thread).await.len(),
        seq,
        "a refused command changes nothing"
    );

    let fresh = h.tb.reset(&thread).await.unwrap();
    assert_eq!(fresh.status, Status::Active);
    assert_eq!(fresh.generation, first.generation + 1);
}

/// Bad input: illegal transitions and unknown threads are typed errors that change nothing.
pub async fn illegal_commands_are_refused_and_change_nothing(h: Harness) {
    let unknown = tid("never-seen");
    assert!(matches!(
        h.tb.pause(&unknown).await,
        Err(UseCaseError::UnknownThread(_))
    ));
    assert!(matches!(
        h.tb.resume(&unknown).await,
        Err(UseCaseError::UnknownThread(_))
    ));
    assert!(
        h.tb.store.load(&unknown).await.unwrap().is_none(),
        "nothing was created"
    );

    let thread = tid("illegal-1");
    h.tb.resolve(&thread).await.unwrap();
    h.tb.destroy(&thread, Cause::User).await.unwrap();
    let before = h.tb.store.load(&thread).await.unwrap().unwrap();
    let err = h.tb.pause(&thread).await.unwrap_err();
    assert_eq!(err.code(), "illegal_transition");
    assert!(err.to_string().contains("destroyed"), "{err}");
    let err = h.tb.resume(&thread).await.unwrap_err();
    assert_eq!(err.code(), "illegal_transition");
    assert_eq!(h.tb.store.load(&thread).await.unwrap().unwrap(), before);
}

/// Retention destroys an idle thread; the next resolve starts a new generation.
pub async fn retention_destroys_and_the_next_resolve_starts_fresh(h: Harness) {
    let thread = tid("retain-1");
    let first = h.tb.resolve(&thread).await.unwrap();
    h.clock
        .advance(h.tb.config.timers.idle_pause + Duration::from_secs(1));
    assert_eq!(h.sweep().await.paused, 1);
    h.clock.advance(h.tb.config.timers.retention);
    let report = h.sweep().await;
    assert_eq!(report.destroyed, 1, "{report:?}");
    let record = h.tb.store.load(&thread).await.unwrap().unwrap();
    assert_eq!(
        (
            record.status,
            record.sandbox_id.as_deref(),
            record.next_action_at
        ),
        (Status::Destroyed, None, None)
    );
    assert!(h.provider.live_ids().is_empty());
    assert_eq!(
        h.events(&thread).await.last().unwrap().cause,
        Cause::Retention
    );
    let next = h.tb.resolve(&thread).await.unwrap();
    assert_eq!(next.generation, first.generation + 1);
    assert!(next.created);
}

/// Stuck transitions are recovered once their lease runs out; reconciliation follows the provider.
pub async fn stuck_transitions_and_drift_are_reconciled(h: Harness) {
    // A pause whose worker died after the provider paused but before the record said so.
    let thread = tid("stuck-1");
    let handle = h.tb.resolve(&thread).await.unwrap();
    h.provider
        .fail_next(Op::Pause, ProviderError::Unavailable("injected".into()));
    assert!(h.tb.pause(&thread).await.is_err());
    assert_eq!(
        h.status(&thread).await,
        Status::Error,
        "a failed pause is an error, with its cause"
    );
    // The resolve finds the sandbox alive and folds that back in.
    h.tb.resolve(&thread).await.unwrap();
    assert_eq!(h.status(&thread).await, Status::Active);

    // The provider paused it on its own (E2B autoPause): the sweep corrects the record.
    h.provider.auto_pause(&handle.sandbox_id);
    let report = h.sweep().await;
    assert_eq!(report.corrected, 1, "{report:?}");
    assert_eq!(h.status(&thread).await, Status::Paused);
    let last = h.events(&thread).await.pop().unwrap();
    assert_eq!((last.to, last.cause), (Status::Paused, Cause::Reconcile));

    // A record whose sandbox vanished is corrected when it comes due (recreate by default).
    let lost = tid("lost-1");
    let lost_handle = h.tb.resolve(&lost).await.unwrap();
    h.provider.forget(&lost_handle.sandbox_id);
    h.clock
        .advance(h.tb.config.timers.idle_pause + Duration::from_secs(1));
    let report = h.sweep().await;
    assert!(report.corrected >= 1, "{report:?}");
    let events = h.events(&lost).await;
    assert!(
        events.iter().any(|e| e.cause == Cause::Recreated),
        "{events:?}"
    );
    let record = h.tb.store.load(&lost).await.unwrap().unwrap();
    assert!(h
        .provider
        .live_ids()
        .contains(record.sandbox_id.as_ref().unwrap()));
}

/// The sweep stops at its deadline and leaves the rest for the next run.
pub async fn the_sweep_stops_at_its_deadline(h: Harness) {
    for i in 0..5 {
        h.tb.resolve(&tid(&format!("deadline-{i}"))).await.unwrap();
    }
    h.clock
        .advance(h.tb.config.timers.idle_pause + Duration::from_secs(1));
    let report =
        h.tb.sweep(SweepOptions::until(tokio::time::Instant::now()))
            .await;
    assert!(!report.completed);
    assert_eq!(report.paused, 0, "{report:?}");
    let report = h.sweep().await;
    assert!(report.completed);
    assert_eq!(report.paused, 5, "{report:?}");
}

/// A provider create failure leaves a clear error event and nothing stuck.
pub async fn a_failed_create_is_an_error_event_not_a_stuck_record(h: Harness) {
    let thread = tid("create-fails");
    h.provider.fail_next(
        Op::Create,
        ProviderError::Unavailable("503 from provider".into()),
    );
    let err = h.tb.resolve(&thread).await.unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    let record = h.tb.store.load(&thread).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Error);
    assert!(
        record.last_error.as_deref().unwrap().contains("503"),
        "{record:?}"
    );
    let handle = h.tb.resolve(&thread).await.unwrap();
    assert_eq!(handle.status, Status::Active);
    assert_eq!(handle.generation, 2);
}

/// A sandbox the provider paused on its own (E2B's autoPause) while the record says active: a
/// command finds out, the record is corrected, the sandbox resumed, and the command runs.
pub async fn a_command_on_a_sandbox_paused_behind_our_back_resumes_it(h: Harness) {
    let thread = tid("auto-paused-exec");
    let handle = h.tb.resolve(&thread).await.unwrap();
    h.provider.auto_pause(&handle.sandbox_id);
    let result =
        h.tb.exec(&thread, ExecRequest::shell("echo hi"))
            .await
            .unwrap();
    assert_eq!(result.exit_code, Some(0));
    assert_eq!(h.status(&thread).await, Status::Active);
    let causes: Vec<_> = h
        .events(&thread)
        .await
        .iter()
        .map(|e| (e.to, e.cause))
        .collect();
    assert!(
        causes.contains(&(Status::Paused, Cause::Reconcile)),
        "{causes:?}"
    );
    assert_eq!(h.provider.creates(), 1, "resumed, not recreated");
}

/// Retention in the store: a thread destroyed longer ago than `record_retention` loses its record
/// and events to the janitor, in batches of `purge_batch`; a live thread and one destroyed
/// recently keep theirs; a deleted thread resolved again starts a clean first generation.
pub async fn retention_deletes_old_destroyed_threads_and_keeps_the_rest(
    store: Arc<dyn SessionStore>,
    events: Arc<dyn DurableQueue>,
) {
    let config = threadbox_core::usecases::Config {
        record_retention: Duration::from_secs(3600),
        purge_batch: 2,
        ..test_config()
    };
    let h = Harness::with_config(store, events, config);
    let old: Vec<ThreadId> = (0..3).map(|i| tid(&format!("purge-old-{i}"))).collect();
    for thread in &old {
        h.tb.resolve(thread).await.unwrap();
        h.tb.destroy(thread, Cause::User).await.unwrap();
    }
    let live = tid("purge-live");
    h.tb.resolve(&live).await.unwrap();
    let live_events = h.events(&live).await;

    h.clock.advance(Duration::from_secs(3601));
    let recent = tid("purge-recent");
    h.tb.resolve(&recent).await.unwrap();
    h.tb.destroy(&recent, Cause::User).await.unwrap();
    let recent_events = h.events(&recent).await;
    h.tb.resolve(&live).await.unwrap();

    let report = h.sweep().await;
    assert_eq!(
        (report.threads_purged, report.failures),
        (3, 0),
        "{report:?}"
    );
    assert!(report.events_purged >= 3 * 4, "{report:?}");
    for thread in &old {
        assert_eq!(h.tb.store.load(thread).await.unwrap(), None, "{thread}");
        assert!(h.events(thread).await.is_empty(), "{thread}");
    }
    assert_eq!(h.status(&live).await, Status::Active);
    assert_eq!(
        h.events(&live).await,
        live_events,
        "a live thread keeps its events"
    );
    assert_eq!(h.status(&recent).await, Status::Destroyed);
    assert_eq!(
        h.events(&recent).await,
        recent_events,
        "retention has not passed"
    );
    assert_eq!(h.sweep().await.threads_purged, 0, "nothing left to delete");

    // Deleted, the thread starts over as brand new: first generation, events from seq 1.
    let again = h.tb.resolve(&old[0]).await.unwrap();
    assert!(again.created);
    assert_eq!(again.generation, 1);
    let fresh = h.events(&old[0]).await;
    assert_eq!(
        fresh.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=fresh.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(fresh[0].from, None, "{fresh:?}");
}

/// A store that, when the janitor reads a page of the due index, first resolves the threads it
/// was told to race (once each): activity lands between the sweep's read and its claim, in
/// whichever shard's query is running, deterministically.
struct RacingStore {
    inner: Arc<dyn SessionStore>,
    racer: std::sync::OnceLock<Threadbox>,
    racing: std::sync::Mutex<std::collections::HashSet<ThreadId>>,
}

#[async_trait::async_trait]
impl SessionStore for RacingStore {
    async fn load(&self, thread_id: &ThreadId) -> Result<Option<Session>, StoreError> {
        self.inner.load(thread_id).await
    }
    async fn write_if(
        &self,
        s: &Session,
        e: &[LifecycleEvent],
        condition: WriteCondition,
    ) -> Result<bool, StoreError> {
        self.inner.write_if(s, e, condition).await
    }
    async fn due(
        &self,
        shard: u32,
        due_by: Millis,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<Page<Session>, StoreError> {
        let page = self.inner.due(shard, due_by, limit, cursor).await?;
        let to_race: Vec<ThreadId> = {
            let mut racing = self.racing.lock().unwrap();
            page.items
                .iter()
                .filter(|s| racing.remove(&s.thread_id))
                .map(|s| s.thread_id.clone())
                .collect()
        };
        if let Some(racer) = self.racer.get() {
            for thread in to_race {
                racer.resolve(&thread).await.expect("the racing resolve");
            }
        }
        Ok(page)
    }
    async fn events_after(
        &self,
        t: &ThreadId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<LifecycleEvent>, StoreError> {
        self.inner.events_after(t, after, limit).await
    }
    async fn unsent_events(
        &self,
        before: Millis,
        limit: usize,
    ) -> Result<Vec<LifecycleEvent>, StoreError> {
        self.inner.unsent_events(before, limit).await
    }
    async fn mark_sent(&self, events: &[LifecycleEvent]) -> Result<(), StoreError> {
        self.inner.mark_sent(events).await
    }
    async fn list(
        &self,
        limit: usize,
        after: Option<&ThreadId>,
    ) -> Result<Page<Session>, StoreError> {
        self.inner.list(limit, after).await
    }
    async fn purge_retired(&self, before: Millis, limit: usize) -> Result<Purged, StoreError> {
        self.inner.purge_retired(before, limit).await
    }
    fn shard_count(&self) -> u32 {
        self.inner.shard_count()
    }
}

/// Invariant 4 with the sweep's shards walked concurrently and its claims handed to the
/// transition queue: a resolve racing the sweep (between its index read and its claim) wins,
/// in every shard at once; only what the sweep read unchanged is claimed, handed off, and paused.
pub async fn a_parallel_sweep_claims_only_what_it_read(
    store: Arc<dyn SessionStore>,
    events: Arc<dyn DurableQueue>,
    transitions: Arc<dyn DurableQueue>,
) {
    let racer = Arc::new(RacingStore {
        inner: store,
        racer: std::sync::OnceLock::new(),
        racing: std::sync::Mutex::default(),
    });
    let h = Harness::new(racer.clone(), events).with_transitions(transitions.clone());
    let _ = racer.racer.set(h.tb.clone());
    let threads: Vec<ThreadId> = (0..24).map(|i| tid(&format!("parallel-{i}"))).collect();
    for thread in &threads {
        h.tb.resolve(thread).await.unwrap();
    }
    h.clock
        .advance(h.tb.config.timers.idle_pause + Duration::from_secs(1));
    h.wait_for_due(threads.len()).await;
    let racing: std::collections::HashSet<ThreadId> = threads.iter().step_by(3).cloned().collect();
    *racer.racing.lock().unwrap() = racing.clone();

    let shards = h.tb.store.shard_count() as usize;
    let mut options = SweepOptions::for_duration(Duration::from_secs(30));
    options.shard_concurrency = shards;
    options.concurrency = 4;
    options.reconcile = false;
    let report = h.tb.sweep(options).await;
    assert!(report.completed, "{report:?}");
    assert_eq!(report.failures, 0, "{report:?}");
    assert_eq!(report.queued, threads.len() - racing.len(), "{report:?}");
    assert_eq!(report.skipped, racing.len(), "{report:?}");
    assert_eq!(h.provider.pauses(), 0, "the sweep only claims");
    for thread in &threads {
        let expected = if racing.contains(thread) {
            Status::Active
        } else {
            Status::Pausing
        };
        assert_eq!(h.status(thread).await, expected, "{thread}");
    }

    let handled = h.run_transitions(transitions.as_ref()).await;
    assert_eq!(handled.len(), threads.len() - racing.len());
    assert_eq!(h.provider.pauses() as usize, threads.len() - racing.len());
    for thread in &threads {
        if racing.contains(thread) {
            assert_eq!(h.status(thread).await, Status::Active, "{thread}");
            let events = h.events(thread).await;
            assert!(
                events.iter().all(|e| e.to != Status::Pausing),
                "a raced thread was never claimed: {events:?}"
            );
        } else {
            assert_eq!(h.status(thread).await, Status::Paused, "{thread}");
        }
    }
}

/// A claimed pause handed through the transition queue runs exactly once: a duplicate
/// delivery finds the claim gone and changes nothing, a body that is not a work item is poison,
/// and a claim whose message was lost is recovered once its lease runs out and paused later.
pub async fn a_handed_off_pause_runs_exactly_once(
    store: Arc<dyn SessionStore>,
    events: Arc<dyn DurableQueue>,
    transitions: Arc<dyn DurableQueue>,
) {
    let h = Harness::new(store, events).with_transitions(transitions.clone());
    let thread = tid("handoff-1");
    h.tb.resolve(&thread).await.unwrap();
    h.clock
        .advance(h.tb.config.timers.idle_pause + Duration::from_secs(1));
    h.wait_for_due(1).await;
    let report = h.sweep().await;
    assert_eq!((report.queued, report.paused), (1, 0), "{report:?}");
    assert_eq!(h.status(&thread).await, Status::Pausing);
    assert_eq!(h.provider.pauses(), 0);

    let messages = transitions
        .receive(10, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(messages.len(), 1, "{messages:?}");
    let body = messages[0].body.clone();
    assert_eq!(messages[0].group_id, thread.as_str());
    assert_eq!(
        h.tb.run_transition(&body).await,
        TransitionOutcome::Done(Status::Paused)
    );
    assert_eq!(h.provider.pauses(), 1);
    let written = h.events(&thread).await;
    // The same message again (SQS delivers at least once): the claim is gone, nothing happens.
    assert_eq!(h.tb.run_transition(&body).await, TransitionOutcome::Stale);
    transitions.ack(&messages[0].receipt).await.unwrap();
    assert_eq!(h.provider.pauses(), 1, "the duplicate did not pause again");
    assert_eq!(h.events(&thread).await, written, "nor wrote anything");
    let pauses: Vec<_> = written.iter().filter(|e| e.to == Status::Paused).collect();
    assert_eq!(pauses.len(), 1, "{written:?}");
    assert_eq!(pauses[0].cause, Cause::Idle);
    assert!(matches!(
        h.tb.run_transition("{\"not\":\"work\"}").await,
        TransitionOutcome::Poison(_)
    ));
    let report = h.sweep().await;
    assert_eq!(
        report.queued, 0,
        "a paused thread is not claimed again: {report:?}"
    );

    // A claim whose message is lost: the lease runs out, a sweep recovers the thread, and a
    // later sweep claims it afresh.
    let lost = tid("handoff-lost");
    h.tb.resolve(&lost).await.unwrap();
    h.clock
        .advance(h.tb.config.timers.idle_pause + Duration::from_secs(1));
    let report = h.sweep().await;
    assert_eq!(report.queued, 1, "{report:?}");
    let dropped = transitions
        .receive(10, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(dropped.len(), 1);
    transitions.ack(&dropped[0].receipt).await.unwrap();
    assert_eq!(h.status(&lost).await, Status::Pausing);
    h.clock
        .advance(h.tb.config.timers.lease + Duration::from_secs(1));
    // Should the message turn up after all, past the lease it is the recovery's, not its own.
    let pauses = h.provider.pauses();
    assert_eq!(
        h.tb.run_transition(&dropped[0].body).await,
        TransitionOutcome::Stale
    );
    assert_eq!(h.provider.pauses(), pauses);
    let report = h.sweep().await;
    assert_eq!(report.recovered, 1, "{report:?}");
    assert_ne!(h.status(&lost).await, Status::Pausing);
    let pauses = h.provider.pauses();
    for _ in 0..3 {
        if h.status(&lost).await == Status::Paused {
            break;
        }
        h.sweep().await;
        h.run_transitions(transitions.as_ref()).await;
    }
    assert_eq!(h.status(&lost).await, Status::Paused);
    assert_eq!(h.provider.pauses(), pauses + 1);
}
