//! The lifecycle-queue consumer of `threadbox dev`: receive events and hand each to the shared
//! fan-out core, then turn its outcome into the queue's verbs.
//!
//! Delivery is at least once (a crash between delivering and acking redelivers); the fan-out core
//! filters repeats per target on the durable dedupe store (invariant 3). A message is acked when
//! every target has the event; one a target wants retried stays in flight, and the queue's
//! visibility timeout is the back-off before it comes round again; one that can never succeed
//! (not an event, or a target refused it for good) is released at once so the queue
//! dead-letters it after its last receive.

use std::sync::Arc;
use std::time::Duration;

use threadbox_core::fanout::{Fanout, RecordOutcome};
use threadbox_core::ports::{DurableQueue, QueueError, ReceivedMessage};
use tokio::sync::watch;

#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    /// Messages taken per receive.
    pub batch: usize,
    /// How long a received message stays hidden: the back-off after a failed delivery.
    pub visibility: Duration,
    /// Pause between receives that found nothing.
    pub idle_wait: Duration,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            batch: 10,
            visibility: Duration::from_secs(30),
            idle_wait: Duration::from_millis(500),
        }
    }
}

/// What one poll did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollReport {
    pub received: usize,
    /// Acked: every target has the event.
    pub acked: usize,
    /// Left in flight: at least one target asked to retry.
    pub retrying: usize,
    /// Released towards the dead-letter queue: not an event, or refused for good.
    pub poison: usize,
}

pub struct LifecycleConsumer {
    queue: Arc<dyn DurableQueue>,
    fanout: Fanout,
    config: ConsumerConfig,
}

impl LifecycleConsumer {
    pub fn new(queue: Arc<dyn DurableQueue>, fanout: Fanout, config: ConsumerConfig) -> Self {
        Self {
            queue,
            fanout,
            config,
        }
    }

    /// Poll until `shutdown` turns true, finishing the batch in hand before stopping.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        while !*shutdown.borrow() {
            let idle = match self.poll_once().await {
                Ok(report) => report.received == 0,
                Err(error) => {
                    tracing::warn!(%error, "receiving lifecycle events failed; retrying");
                    true
                }
            };
            if idle {
                tokio::select! {
                    _ = tokio::time::sleep(self.config.idle_wait) => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
        tracing::debug!("lifecycle consumer stopped");
    }

    /// Receive one batch and deal with every message in it. The SQLite queue hands out at most
    /// one message per group per receive, so messages are independent and order holds.
    pub async fn poll_once(&self) -> Result<PollReport, QueueError> {
        let messages = self
            .queue
            .receive(self.config.batch, self.config.visibility)
            .await?;
        let mut report = PollReport {
            received: messages.len(),
            ..PollReport::default()
        };
        for message in messages {
            match self.fanout.deliver_body(&message.body).await {
                RecordOutcome::Delivered => {
                    // A stale receipt means the message was redelivered meanwhile; the next
                    // delivery finds every target done and acks it then.
                    if let Err(error) = self.queue.ack(&message.receipt).await {
                        tracing::warn!(%error, message_id = %message.message_id, "ack failed; the event will come again and be skipped");
                    }
                    report.acked += 1;
                }
                RecordOutcome::Retry { retry_after } => {
                    // The queue has no per-message visibility change, so the visibility timeout
                    // is the wait; it is longer than the Retry-After Slack usually asks for.
                    tracing::debug!(
                        message_id = %message.message_id,
                        retry_after_ms = retry_after.map(|d| d.as_millis() as u64),
                        "left in flight for a retry"
                    );
                    report.retrying += 1;
                }
                RecordOutcome::Poison { reason } => {
                    release_poison(self.queue.as_ref(), &message, &reason).await;
                    report.poison += 1;
                }
            }
        }
        Ok(report)
    }
}

async fn release_poison(queue: &dyn DurableQueue, message: &ReceivedMessage, reason: &str) {
    tracing::error!(
        message_id = %message.message_id,
        receive_count = message.receive_count,
        reason,
        "lifecycle message cannot be delivered; it will be dead-lettered"
    );
    if let Err(error) = queue.release(&message.receipt).await {
        tracing::warn!(%error, message_id = %message.message_id, "release failed");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    use async_trait::async_trait;
    use threadbox_core::domain::{Cause, LifecycleEvent, Millis, Status, ThreadId};
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

    fn event(id: &str, seq: u64) -> LifecycleEvent {
        LifecycleEvent {
            event_id: id.to_owned(),
            thread_id: ThreadId::parse("t1").unwrap(),
            seq,
            generation: 1,
            from: Some(Status::Creating),
            to: Status::Active,
            cause: Cause::User,
            at: Millis(0),
            sandbox_id: Some("sb-1".into()),
            detail: None,
        }
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
        fn consumer(&self, targets: Vec<Arc<dyn FanoutTarget>>) -> LifecycleConsumer {
            LifecycleConsumer::new(
                self.queue.clone(),
                Fanout::new(self.dedupe.clone(), targets),
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

    fn quick() -> ConsumerConfig {
        ConsumerConfig {
            visibility: Duration::from_millis(100),
            idle_wait: Duration::from_millis(10),
            ..ConsumerConfig::default()
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
