//! The lifecycle-queue consumer of `threadbox dev`: receive events, hand each to every fan-out
//! target, ack when all have it.
//!
//! Delivery is at least once (a crash between delivering and acking redelivers), so each target
//! is shielded from repeats by the event id (invariant 3). A message is acked only when every
//! target has the event; a target that fails leaves the message in flight, and the queue's
//! visibility timeout is the back-off before it comes round again. A body that is not an event
//! can never succeed: it is released at once so the queue dead-letters it after its last receive.
//!
//! Today the only target logs each event; Slack and WebSocket subscribers are further targets.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use threadbox_shared::domain::LifecycleEvent;
use threadbox_shared::ports::{DurableQueue, QueueError, ReceivedMessage};
use tokio::sync::watch;

/// Somewhere lifecycle events go: a log, a Slack thread, WebSocket subscribers.
#[async_trait]
pub trait FanoutTarget: Send + Sync {
    /// For logs.
    fn name(&self) -> &str;
    /// Deliver one event; an error means "try again later".
    async fn deliver(&self, event: &LifecycleEvent) -> anyhow::Result<()>;
}

/// Logs each event: what `threadbox dev` shows while no other target is configured.
pub struct LogTarget;

#[async_trait]
impl FanoutTarget for LogTarget {
    fn name(&self) -> &str {
        "log"
    }

    async fn deliver(&self, event: &LifecycleEvent) -> anyhow::Result<()> {
        let from = event.from.map_or("none", |s| s.as_str());
        tracing::info!(
            thread_id = %event.thread_id,
            seq = event.seq,
            generation = event.generation,
            sandbox_id = event.sandbox_id.as_deref().unwrap_or("-"),
            detail = event.detail.as_deref().unwrap_or(""),
            "lifecycle {from} -> {} ({})",
            event.to,
            cause_name(event),
        );
        Ok(())
    }
}

/// The cause as the API spells it (`provider_gone`, not `ProviderGone`).
fn cause_name(event: &LifecycleEvent) -> String {
    serde_json::to_value(event.cause)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{:?}", event.cause))
}

/// Event ids a target already has, bounded so a long-running process does not grow forever.
/// Redeliveries come within minutes, so remembering the recent past is enough.
struct RecentIds {
    order: VecDeque<String>,
    set: HashSet<String>,
    capacity: usize,
}

impl RecentIds {
    fn new(capacity: usize) -> Self {
        Self {
            order: VecDeque::new(),
            set: HashSet::new(),
            capacity: capacity.max(1),
        }
    }

    fn contains(&self, id: &str) -> bool {
        self.set.contains(id)
    }

    fn insert(&mut self, id: &str) {
        if self.set.insert(id.to_owned()) {
            self.order.push_back(id.to_owned());
            if self.order.len() > self.capacity {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    /// Messages taken per receive.
    pub batch: usize,
    /// How long a received message stays hidden: the back-off after a failed delivery.
    pub visibility: Duration,
    /// Pause between receives that found nothing.
    pub idle_wait: Duration,
    /// Event ids remembered per target.
    pub remember: usize,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            batch: 10,
            visibility: Duration::from_secs(30),
            idle_wait: Duration::from_millis(500),
            remember: 10_000,
        }
    }
}

/// What one poll did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollReport {
    pub received: usize,
    /// Acked: every target has the event.
    pub acked: usize,
    /// Left in flight: at least one target failed.
    pub retrying: usize,
    /// Not an event: released towards the dead-letter queue.
    pub malformed: usize,
}

struct Target {
    target: Arc<dyn FanoutTarget>,
    delivered: RecentIds,
}

pub struct LifecycleConsumer {
    queue: Arc<dyn DurableQueue>,
    targets: Vec<Target>,
    config: ConsumerConfig,
}

enum Handled {
    Delivered,
    Failed,
    Malformed,
}

impl LifecycleConsumer {
    pub fn new(
        queue: Arc<dyn DurableQueue>,
        targets: Vec<Arc<dyn FanoutTarget>>,
        config: ConsumerConfig,
    ) -> Self {
        let targets = targets
            .into_iter()
            .map(|target| Target {
                target,
                delivered: RecentIds::new(config.remember),
            })
            .collect();
        Self {
            queue,
            targets,
            config,
        }
    }

    /// Poll until `shutdown` turns true, finishing the batch in hand before stopping.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
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

    /// Receive one batch and deal with every message in it.
    pub async fn poll_once(&mut self) -> Result<PollReport, QueueError> {
        let messages = self
            .queue
            .receive(self.config.batch, self.config.visibility)
            .await?;
        let mut report = PollReport {
            received: messages.len(),
            ..PollReport::default()
        };
        for message in messages {
            match self.handle(&message).await {
                Handled::Delivered => {
                    // A stale receipt means the message was redelivered meanwhile; the next
                    // delivery finds every target done and acks it then.
                    if let Err(error) = self.queue.ack(&message.receipt).await {
                        tracing::warn!(%error, message_id = %message.message_id, "ack failed; the event will come again and be skipped");
                    }
                    report.acked += 1;
                }
                Handled::Failed => report.retrying += 1,
                Handled::Malformed => {
                    if let Err(error) = self.queue.release(&message.receipt).await {
                        tracing::warn!(%error, message_id = %message.message_id, "release failed");
                    }
                    report.malformed += 1;
                }
            }
        }
        Ok(report)
    }

    async fn handle(&mut self, message: &ReceivedMessage) -> Handled {
        let event: LifecycleEvent = match serde_json::from_str(&message.body) {
            Ok(event) => event,
            Err(error) => {
                tracing::error!(
                    %error,
                    message_id = %message.message_id,
                    receive_count = message.receive_count,
                    "lifecycle message is not an event; it will be dead-lettered"
                );
                return Handled::Malformed;
            }
        };
        let mut all_delivered = true;
        for target in &mut self.targets {
            if target.delivered.contains(&event.event_id) {
                continue;
            }
            match target.target.deliver(&event).await {
                Ok(()) => target.delivered.insert(&event.event_id),
                Err(error) => {
                    tracing::warn!(
                        target = target.target.name(),
                        thread_id = %event.thread_id,
                        seq = event.seq,
                        error = %format!("{error:#}"),
                        "delivery failed; retrying after the visibility timeout"
                    );
                    all_delivered = false;
                }
            }
        }
        if all_delivered {
            Handled::Delivered
        } else {
            Handled::Failed
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;

    use threadbox_shared::adapters::sqlite::{QueueConfig, SqliteQueue};
    use threadbox_shared::domain::{Cause, Millis, Status, ThreadId};
    use threadbox_shared::ports::OutgoingMessage;

    use super::*;

    /// Records what it was given; fails while `failing` is set.
    #[derive(Default)]
    struct Recorder {
        got: Mutex<Vec<String>>,
        failing: AtomicBool,
    }

    #[async_trait]
    impl FanoutTarget for Recorder {
        fn name(&self) -> &str {
            "recorder"
        }
        async fn deliver(&self, event: &LifecycleEvent) -> anyhow::Result<()> {
            if self.failing.load(Ordering::SeqCst) {
                anyhow::bail!("target down");
            }
            self.got.lock().unwrap().push(event.event_id.clone());
            Ok(())
        }
    }

    impl Recorder {
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
        _dir: tempfile::TempDir,
    }

    fn setup(max_receives: u32) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let queue = SqliteQueue::open(
            dir.path().join("q.db"),
            "lifecycle",
            QueueConfig {
                max_receives,
                ..QueueConfig::default()
            },
        )
        .unwrap();
        Setup {
            queue: Arc::new(queue),
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
        let a = Arc::new(Recorder::default());
        let b = Arc::new(Recorder::default());
        let mut consumer =
            LifecycleConsumer::new(s.queue.clone(), vec![a.clone(), b.clone()], quick());
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
        let ok = Arc::new(Recorder::default());
        let flaky = Arc::new(Recorder::default());
        flaky.failing.store(true, Ordering::SeqCst);
        let mut consumer =
            LifecycleConsumer::new(s.queue.clone(), vec![ok.clone(), flaky.clone()], quick());
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
    async fn a_redelivered_event_is_skipped_by_targets_that_have_it() {
        let s = setup(5);
        let target = Arc::new(Recorder::default());
        let mut consumer = LifecycleConsumer::new(s.queue.clone(), vec![target.clone()], quick());
        let e = event("e1", 1);
        send_events(&s.queue, std::slice::from_ref(&e)).await;
        consumer.poll_once().await.unwrap();
        // The same event under a fresh dedup id, as a janitor re-drive after a lost ack would be.
        s.queue
            .send(&[message(
                "t1",
                "redrive-e1",
                serde_json::to_string(&e).unwrap(),
            )])
            .await
            .unwrap();
        let report = consumer.poll_once().await.unwrap();
        assert_eq!((report.received, report.acked), (1, 1));
        assert_eq!(target.got(), vec!["e1"]);
    }

    #[tokio::test]
    async fn a_body_that_is_not_an_event_is_dead_lettered_and_others_flow() {
        let s = setup(2);
        let target = Arc::new(Recorder::default());
        let mut consumer = LifecycleConsumer::new(s.queue.clone(), vec![target.clone()], quick());
        s.queue
            .send(&[message("t9", "junk", "{not json".into())])
            .await
            .unwrap();
        send_events(&s.queue, &[event("e1", 1)]).await;

        let first = consumer.poll_once().await.unwrap();
        assert_eq!((first.malformed, first.acked), (1, 1));
        let second = consumer.poll_once().await.unwrap();
        assert_eq!(second.malformed, 1, "released, so it came straight back");
        consumer.poll_once().await.unwrap();
        let dead = s.queue.dead_letters(10).await.unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].dedup_id, "junk");
        assert_eq!(target.got(), vec!["e1"]);
    }

    #[tokio::test]
    async fn run_stops_when_told() {
        let s = setup(5);
        let target = Arc::new(Recorder::default());
        let consumer = LifecycleConsumer::new(s.queue.clone(), vec![target.clone()], quick());
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

    #[test]
    fn recent_ids_forget_the_oldest() {
        let mut ids = RecentIds::new(2);
        ids.insert("a");
        ids.insert("b");
        ids.insert("a");
        ids.insert("c");
        assert!(!ids.contains("a"));
        assert!(ids.contains("b") && ids.contains("c"));
    }
}
