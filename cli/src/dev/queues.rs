//! The one queue loop of `threadbox dev`: it polls a queue, hands each message to that queue's
//! handler, and settles the message by the handler's [`RecordOutcome`]. Every queue `dev` serves
//! runs through it, each with its own handler and [`LoopConfig`]:
//!
//! - the lifecycle queue: [`FanoutHandler`], one message at a time (what the `fanout` function
//!   does on AWS);
//! - the transition queue the janitor hands its claimed pauses and destroys to: [`Transitions`],
//!   a few at once (the `pause` function's queue handler);
//! - the Slack work queue: the Slack worker, a few at once (the `worker` function).
//!
//! Settling is the same for every queue, as SQS would do it: what is delivered is acked; poison
//! is released, so the queue dead-letters it after its last receive; a retry either stays in
//! flight until its visibility timeout (the back-off) or waits here and is given back, as the
//! queue's [`Retry`] says. Each round counts towards the dead-letter limit.
//!
//! The queues hand out one message per group (thread) at a time, so messages running together
//! belong to different threads and each thread's messages stay in order.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use threadbox_core::fanout::Fanout;
use threadbox_core::ports::{DurableQueue, QueueError, ReceivedMessage, RecordOutcome};
use threadbox_core::usecases::Threadbox;
use threadbox_slack::SlackWorker;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

/// What one queue's messages mean: the only part a queue provides.
#[async_trait]
pub trait QueueHandler: Send + Sync + 'static {
    /// The queue's name in logs.
    fn name(&self) -> &'static str;
    /// Handle one message body; never fails the loop.
    async fn handle(&self, body: &str) -> RecordOutcome;
}

/// The lifecycle queue: each event to every fan-out target, each target seeing it once.
pub struct FanoutHandler(pub Fanout);

#[async_trait]
impl QueueHandler for FanoutHandler {
    fn name(&self) -> &'static str {
        "lifecycle"
    }
    async fn handle(&self, body: &str) -> RecordOutcome {
        self.0.deliver_body(body).await
    }
}

/// The transition queue: carry out a handed-off pause or destroy.
pub struct Transitions(pub Threadbox);

#[async_trait]
impl QueueHandler for Transitions {
    fn name(&self) -> &'static str {
        "transitions"
    }
    async fn handle(&self, body: &str) -> RecordOutcome {
        let outcome = self.0.run_transition(body).await;
        tracing::debug!(?outcome, "transition");
        outcome.into()
    }
}

#[async_trait]
impl QueueHandler for SlackWorker {
    fn name(&self) -> &'static str {
        "Slack work"
    }
    async fn handle(&self, body: &str) -> RecordOutcome {
        self.handle_body(body).await
    }
}

/// What a retry does with its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Leave it in flight: the visibility timeout is the wait (the queue has no per-message
    /// visibility change). For handlers whose retries are cheap to delay.
    InFlight,
    /// Wait here, `retry_after` or else `default` but at most `max`, then give it back.
    GiveBack { default: Duration, max: Duration },
}

#[derive(Clone, Debug)]
pub struct LoopConfig {
    /// Messages handled at once.
    pub concurrency: usize,
    /// Messages received beyond the free handling slots, waiting their turn hidden (their
    /// visibility running): only for a queue whose handling is short next to its visibility.
    pub prefetch: usize,
    /// How long a received message stays hidden: longer than its handling takes.
    pub visibility: Duration,
    /// Pause between receives that found nothing; doubled after each failed receive, up to
    /// [`MAX_IDLE_WAIT`], so a stuck store is not kept busier by the loop than by the requests
    /// it serves.
    pub idle_wait: Duration,
    pub retry: Retry,
}

/// The longest pause between receives after failures.
pub const MAX_IDLE_WAIT: Duration = Duration::from_secs(30);

impl LoopConfig {
    /// The lifecycle queue: one event at a time, in order, ten received per poll; a retry stays
    /// in flight for `visibility` (`--fanout-retry`), longer than the Retry-After Slack usually
    /// asks for.
    pub fn lifecycle(visibility: Duration) -> Self {
        Self {
            concurrency: 1,
            prefetch: 9,
            visibility,
            idle_wait: Duration::from_millis(500),
            retry: Retry::InFlight,
        }
    }

    /// The transition queue: each a provider pause or kill, eight at once; a retry comes back
    /// after `visibility` (the lease: longer than a pause or kill takes).
    pub fn transitions(visibility: Duration) -> Self {
        Self {
            concurrency: 8,
            prefetch: 0,
            visibility,
            idle_wait: Duration::from_millis(200),
            retry: Retry::InFlight,
        }
    }

    /// The Slack work queue: four items at once (each may run a command for up to the exec
    /// timeout), hidden for longer than the longest command plus replies; a retry waits here
    /// (1 s unless the item says, at most 30 s) and is given back.
    pub fn slack_work(exec_timeout: Duration) -> Self {
        Self {
            concurrency: 4,
            prefetch: 0,
            visibility: exec_timeout + Duration::from_secs(5 * 60),
            idle_wait: Duration::from_millis(200),
            retry: Retry::GiveBack {
                default: Duration::from_secs(1),
                max: Duration::from_secs(30),
            },
        }
    }
}

/// What one poll did (for tests, which drive the loop a poll at a time).
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollReport {
    pub received: usize,
    /// Acked: handled.
    pub acked: usize,
    /// Left in flight or given back for a retry.
    pub retrying: usize,
    /// Released towards the dead-letter queue.
    pub poison: usize,
}

#[cfg(test)]
impl PollReport {
    fn count(&mut self, outcome: &RecordOutcome) {
        match outcome {
            RecordOutcome::Delivered => self.acked += 1,
            RecordOutcome::Retry { .. } => self.retrying += 1,
            RecordOutcome::Poison { .. } => self.poison += 1,
        }
    }
}

pub struct QueueLoop {
    queue: Arc<dyn DurableQueue>,
    handler: Arc<dyn QueueHandler>,
    config: LoopConfig,
    permits: Arc<Semaphore>,
}

impl QueueLoop {
    pub fn new(
        queue: Arc<dyn DurableQueue>,
        handler: impl QueueHandler,
        config: LoopConfig,
    ) -> Self {
        let permits = Arc::new(Semaphore::new(config.concurrency.max(1)));
        Self {
            queue,
            handler: Arc::new(handler),
            config,
            permits,
        }
    }

    /// Poll until `shutdown` turns true; messages in hand (received or running) finish first.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut running = JoinSet::new();
        let mut failures = 0u32;
        while !*shutdown.borrow() {
            while running.try_join_next().is_some() {}
            let free = self.permits.available_permits();
            if free == 0 {
                tokio::select! {
                    _ = running.join_next() => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            let received = match self.poll(free + self.config.prefetch, &mut running).await {
                Ok(received) => {
                    failures = 0;
                    received
                }
                Err(error) => {
                    tracing::warn!(%error, queue = self.handler.name(), "receiving failed; retrying");
                    failures = failures.saturating_add(1);
                    0
                }
            };
            if received == 0 {
                let wait = self.config.idle_wait * 2u32.saturating_pow(failures.min(6));
                tokio::select! {
                    _ = tokio::time::sleep(wait.min(MAX_IDLE_WAIT)) => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
        while running.join_next().await.is_some() {}
        tracing::debug!(queue = self.handler.name(), "queue loop stopped");
    }

    /// One poll as `run` makes it, waiting for every message it received to be settled.
    #[cfg(test)]
    pub async fn poll_once(&self) -> Result<PollReport, QueueError> {
        let mut running = JoinSet::new();
        let free = self.permits.available_permits();
        let received = self.poll(free + self.config.prefetch, &mut running).await?;
        let mut report = PollReport {
            received,
            ..PollReport::default()
        };
        while let Some(settled) = running.join_next().await {
            if let Ok(outcome) = settled {
                report.count(&outcome);
            }
        }
        Ok(report)
    }

    /// Receive up to `max` messages and start each, in order, as a handling slot frees up.
    async fn poll(
        &self,
        max: usize,
        running: &mut JoinSet<RecordOutcome>,
    ) -> Result<usize, QueueError> {
        let messages = self.queue.receive(max, self.config.visibility).await?;
        let received = messages.len();
        for message in messages {
            let Ok(permit) = self.permits.clone().acquire_owned().await else {
                break;
            };
            let (queue, handler) = (self.queue.clone(), self.handler.clone());
            let retry = self.config.retry;
            running.spawn(async move {
                let outcome = handler.handle(&message.body).await;
                settle(queue.as_ref(), handler.name(), &message, &outcome, retry).await;
                drop(permit);
                outcome
            });
        }
        Ok(received)
    }
}

/// Ack what is handled; leave or give back what should be retried; release poison so the queue
/// dead-letters it after its last receive.
async fn settle(
    queue: &dyn DurableQueue,
    name: &str,
    message: &ReceivedMessage,
    outcome: &RecordOutcome,
    retry: Retry,
) {
    let settled = match (outcome, retry) {
        // A stale receipt means the message was handed out again meanwhile; handlers are
        // idempotent (fan-out skips what each target has, a transition what is no longer
        // claimed, the worker what it already did), so the next delivery is acked then.
        (RecordOutcome::Delivered, _) => queue.ack(&message.receipt).await,
        (RecordOutcome::Retry { retry_after }, Retry::InFlight) => {
            tracing::debug!(
                queue = name,
                message_id = %message.message_id,
                retry_after_ms = retry_after.map(|d| d.as_millis() as u64),
                "left in flight for a retry"
            );
            Ok(())
        }
        (RecordOutcome::Retry { retry_after }, Retry::GiveBack { default, max }) => {
            tokio::time::sleep(retry_after.unwrap_or(default).min(max)).await;
            queue.release(&message.receipt).await
        }
        (RecordOutcome::Poison { reason }, _) => {
            tracing::error!(
                queue = name,
                message_id = %message.message_id,
                receive_count = message.receive_count,
                %reason,
                "message cannot be handled; it will be dead-lettered"
            );
            queue.release(&message.receipt).await
        }
    };
    if let Err(error) = settled {
        tracing::warn!(%error, queue = name, message_id = %message.message_id, "settling a message failed");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    use async_trait::async_trait;
    use threadbox_core::domain::{Change, LifecycleEvent, Millis, Session, ThreadId, Timers};
    use threadbox_core::fanout::{DeliveryError, FanoutTarget};
    use threadbox_core::ports::{DedupeStore, OutgoingMessage};
    use threadbox_sqlite::{QueueConfig, SqliteDedupe, SqliteQueue};

    use super::*;

    /// Records what it was given; fails while `failing` is set (permanently when `broken`).
    #[derive(Default)]
    struct Recorder {
        name: &'static str,
        got: Mutex<Vec<String>>,
        failing: AtomicBool,
        broken: AtomicBool,
    }

    #[async_trait]
    impl FanoutTarget for Recorder {
        fn name(&self) -> &str {
            self.name
        }
        async fn deliver(&self, event: &LifecycleEvent) -> Result<(), DeliveryError> {
            if self.broken.load(Ordering::SeqCst) {
                return Err(DeliveryError::permanent("target refuses this event"));
            }
            if self.failing.load(Ordering::SeqCst) {
                return Err(DeliveryError::retry("target down"));
            }
            self.got.lock().unwrap().push(event.event_id.clone());
            Ok(())
        }
    }

    impl Recorder {
        fn named(name: &'static str) -> Arc<Self> {
            Arc::new(Self {
                name,
                ..Self::default()
            })
        }
        fn got(&self) -> Vec<String> {
            self.got.lock().unwrap().clone()
        }
    }

    /// The event a new thread's first write makes, under the id `id`.
    fn event(id: &str, seq: u64) -> LifecycleEvent {
        let change = Change {
            event_id: id.to_owned(),
            now: Millis(0),
            detail: None,
        };
        let thread = ThreadId::parse("t1").unwrap();
        let (_, event) = Session::new_creating(thread, "test", change, &Timers::default());
        LifecycleEvent { seq, ..event }
    }

    fn message(group: &str, id: &str, body: String) -> OutgoingMessage {
        OutgoingMessage {
            group_id: group.into(),
            dedup_id: id.into(),
            body,
        }
    }

    struct Setup {
        queue: Arc<SqliteQueue>,
        dedupe: Arc<dyn DedupeStore>,
        _dir: tempfile::TempDir,
    }

    impl Setup {
        fn consumer(&self, targets: Vec<Arc<dyn FanoutTarget>>) -> QueueLoop {
            QueueLoop::new(
                self.queue.clone(),
                FanoutHandler(Fanout::new(self.dedupe.clone(), targets)),
                quick(),
            )
        }
    }

    fn setup(max_receives: u32) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("q.db");
        let queue = SqliteQueue::open(
            &db,
            "lifecycle",
            QueueConfig {
                max_receives,
                ..QueueConfig::default()
            },
        )
        .unwrap();
        let dedupe = SqliteDedupe::open(&db).unwrap();
        Setup {
            queue: Arc::new(queue),
            dedupe: Arc::new(dedupe),
            _dir: dir,
        }
    }

    fn quick() -> LoopConfig {
        LoopConfig {
            idle_wait: Duration::from_millis(10),
            ..LoopConfig::lifecycle(Duration::from_millis(100))
        }
    }

    async fn send_events(queue: &SqliteQueue, events: &[LifecycleEvent]) {
        let messages: Vec<_> = events
            .iter()
            .map(|e| {
                message(
                    e.thread_id.as_str(),
                    &e.event_id,
                    serde_json::to_string(e).unwrap(),
                )
            })
            .collect();
        queue.send(&messages).await.unwrap();
    }

    /// Answers each body with the next outcome of its script (then `Delivered`).
    struct Scripted(Mutex<Vec<RecordOutcome>>);

    #[async_trait]
    impl QueueHandler for Scripted {
        fn name(&self) -> &'static str {
            "scripted"
        }
        async fn handle(&self, _body: &str) -> RecordOutcome {
            let mut script = self.0.lock().unwrap();
            if script.is_empty() {
                RecordOutcome::Delivered
            } else {
                script.remove(0)
            }
        }
    }

    /// The Slack work queue's retries: waited out here, then given back at once rather than
    /// left for the visibility timeout; each round counts towards the dead-letter limit.
    #[tokio::test]
    async fn a_give_back_retry_returns_the_message_before_its_visibility_ends() {
        let s = setup(5);
        let retry = || RecordOutcome::Retry {
            retry_after: Some(Duration::from_millis(10)),
        };
        let work = QueueLoop::new(
            s.queue.clone(),
            Scripted(Mutex::new(vec![retry(), retry()])),
            LoopConfig {
                idle_wait: Duration::from_millis(10),
                // Far longer than the test: only a give-back brings the message round again.
                ..LoopConfig::slack_work(Duration::from_secs(600))
            },
        );
        send_events(&s.queue, &[event("e1", 1)]).await;
        assert_eq!(work.poll_once().await.unwrap().retrying, 1);
        assert_eq!(work.poll_once().await.unwrap().retrying, 1, "given back");
        let third = work.poll_once().await.unwrap();
        assert_eq!((third.received, third.acked), (1, 1));
        let received = s.queue.dead_letters(10).await.unwrap();
        assert!(received.is_empty());
        assert_eq!(work.poll_once().await.unwrap().received, 0, "acked");

        // A message that keeps asking is dead-lettered after its last receive.
        let s = setup(2);
        let work = QueueLoop::new(
            s.queue.clone(),
            Scripted(Mutex::new(vec![retry(), retry()])),
            LoopConfig::slack_work(Duration::from_secs(600)),
        );
        send_events(&s.queue, &[event("e1", 1)]).await;
        work.poll_once().await.unwrap();
        work.poll_once().await.unwrap();
        assert_eq!(work.poll_once().await.unwrap().received, 0);
        assert_eq!(s.queue.dead_letters(10).await.unwrap().len(), 1);
    }

    /// The loop starts a handling slot's worth at a time: with two slots and no prefetch, a
    /// poll takes two messages and leaves the rest in the queue.
    #[tokio::test]
    async fn a_poll_takes_no_more_than_its_free_slots_and_prefetch() {
        let s = setup(5);
        let events: Vec<LifecycleEvent> = (0..5)
            .map(|i| LifecycleEvent {
                thread_id: ThreadId::parse(&format!("t{i}")).unwrap(),
                ..event(&format!("e{i}"), 1)
            })
            .collect();
        send_events(&s.queue, &events).await;
        let two = QueueLoop::new(
            s.queue.clone(),
            Scripted(Mutex::new(Vec::new())),
            LoopConfig {
                concurrency: 2,
                ..LoopConfig::transitions(Duration::from_secs(60))
            },
        );
        assert_eq!(two.poll_once().await.unwrap().received, 2);
        let ten = s.consumer(vec![Recorder::named("t")]);
        assert_eq!(ten.poll_once().await.unwrap().received, 3);
    }

    #[tokio::test]
    async fn every_target_gets_each_event_and_the_message_is_acked() {
        let s = setup(5);
        let a = Recorder::named("a");
        let b = Recorder::named("b");
        let consumer = s.consumer(vec![a.clone(), b.clone()]);
        send_events(&s.queue, &[event("e1", 1)]).await;
        send_events(
            &s.queue,
            &[LifecycleEvent {
                thread_id: ThreadId::parse("t2").unwrap(),
                ..event("e2", 1)
            }],
        )
        .await;

        let report = consumer.poll_once().await.unwrap();
        assert_eq!(
            report,
            PollReport {
                received: 2,
                acked: 2,
                ..PollReport::default()
            }
        );
        assert_eq!(a.got(), vec!["e1", "e2"]);
        assert_eq!(b.got(), vec!["e1", "e2"]);
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(consumer.poll_once().await.unwrap().received, 0, "acked");
    }

    #[tokio::test]
    async fn a_failing_target_retries_without_repeating_the_others() {
        let s = setup(5);
        let ok = Recorder::named("ok");
        let flaky = Recorder::named("flaky");
        flaky.failing.store(true, Ordering::SeqCst);
        let consumer = s.consumer(vec![ok.clone(), flaky.clone()]);
        send_events(&s.queue, &[event("e1", 1)]).await;

        let first = consumer.poll_once().await.unwrap();
        assert_eq!((first.acked, first.retrying), (0, 1));
        assert_eq!(ok.got(), vec!["e1"]);

        flaky.failing.store(false, Ordering::SeqCst);
        assert_eq!(
            consumer.poll_once().await.unwrap().received,
            0,
            "the failed message waits out its visibility timeout"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
        let second = consumer.poll_once().await.unwrap();
        assert_eq!((second.received, second.acked), (1, 1));
        assert_eq!(ok.got(), vec!["e1"], "the healthy target saw it once");
        assert_eq!(flaky.got(), vec!["e1"]);
    }

    #[tokio::test]
    async fn a_redelivered_event_is_skipped_even_by_a_restarted_consumer() {
        let s = setup(5);
        let target = Recorder::named("t");
        let e = event("e1", 1);
        send_events(&s.queue, std::slice::from_ref(&e)).await;
        s.consumer(vec![target.clone()]).poll_once().await.unwrap();
        // The same event under a fresh dedup id, as a janitor re-drive after a lost ack would
        // be, reaching a consumer that starts afresh: the durable record still filters it.
        s.queue
            .send(&[message(
                "t1",
                "redrive-e1",
                serde_json::to_string(&e).unwrap(),
            )])
            .await
            .unwrap();
        let report = s.consumer(vec![target.clone()]).poll_once().await.unwrap();
        assert_eq!((report.received, report.acked), (1, 1));
        assert_eq!(target.got(), vec!["e1"]);
    }

    #[tokio::test]
    async fn a_body_that_is_not_an_event_is_dead_lettered_and_others_flow() {
        let s = setup(2);
        let target = Recorder::named("t");
        let consumer = s.consumer(vec![target.clone()]);
        s.queue
            .send(&[message("t9", "junk", "{not json".into())])
            .await
            .unwrap();
        send_events(&s.queue, &[event("e1", 1)]).await;

        let first = consumer.poll_once().await.unwrap();
        assert_eq!((first.poison, first.acked), (1, 1));
        let second = consumer.poll_once().await.unwrap();
        assert_eq!(second.poison, 1, "released, so it came straight back");
        consumer.poll_once().await.unwrap();
        let dead = s.queue.dead_letters(10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].dedup_id, "junk");
        assert_eq!(target.got(), vec!["e1"]);
    }

    #[tokio::test]
    async fn an_event_a_target_refuses_for_good_is_dead_lettered() {
        let s = setup(1);
        let target = Recorder::named("t");
        target.broken.store(true, Ordering::SeqCst);
        let consumer = s.consumer(vec![target.clone()]);
        send_events(&s.queue, &[event("e1", 1)]).await;
        assert_eq!(consumer.poll_once().await.unwrap().poison, 1);
        consumer.poll_once().await.unwrap();
        let dead = s.queue.dead_letters(10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].dedup_id, "e1");
    }

    #[tokio::test]
    async fn run_stops_when_told() {
        let s = setup(5);
        let target = Recorder::named("t");
        let consumer = s.consumer(vec![target.clone()]);
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(consumer.run(stopped));
        send_events(&s.queue, &[event("e1", 1)]).await;
        for _ in 0..200 {
            if !target.got().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(target.got(), vec!["e1"]);
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the consumer stops promptly")
            .unwrap();
    }
}
