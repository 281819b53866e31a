//! `Fanout`: one event to every target, at least once, each target seeing it once.
//!
//! Per target: skip when `{target}:{event_id}` is recorded in the dedupe store, else deliver and
//! then record it (with a TTL well past any redelivery window). A crash between delivering and
//! recording repeats that one delivery; everything else is filtered, across processes and
//! restarts, because the record is durable. The check and the record are not one atomic step:
//! claiming first would lose the event for good when the delivery then fails and the release
//! fails too, and a repeat is the smaller harm (targets edit in place where they can).
//!
//! A record's outcome is the worst of its targets': any retry-later makes the record retry (the
//! targets that have it skip it next time), otherwise any permanent failure makes it poison.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;

use crate::domain::LifecycleEvent;
use crate::ports::DedupeStore;
use crate::ports::{DeliveryError, FanoutTarget};

/// How long a delivery is remembered. Redeliveries (visibility timeouts, janitor re-drives, DLQ
/// re-drives by an operator) come within hours; a week leaves a wide margin.
pub const DEFAULT_DEDUPE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// What the queue should do with one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordOutcome {
    /// Every target has the event (now or from an earlier delivery): ack / drop from the batch.
    Delivered,
    /// A target asked to try again later: leave the record in flight (report it in
    /// `batchItemFailures`). `retry_after` is the longest wait a target asked for.
    Retry { retry_after: Option<Duration> },
    /// The record can never be delivered as it stands (not an event, or a target refused it for
    /// good): send it towards the dead-letter queue.
    Poison { reason: String },
}

impl RecordOutcome {
    /// Whether an SQS handler reports this record in `batchItemFailures`. Poison records are
    /// failures too: SQS moves a record to the DLQ only after it failed `maxReceiveCount` times.
    pub fn is_failure(&self) -> bool {
        !matches!(self, RecordOutcome::Delivered)
    }
}

#[derive(Clone)]
pub struct Fanout {
    targets: Vec<Arc<dyn FanoutTarget>>,
    dedupe: Arc<dyn DedupeStore>,
    ttl: Duration,
}

impl Fanout {
    pub fn new(dedupe: Arc<dyn DedupeStore>, targets: Vec<Arc<dyn FanoutTarget>>) -> Self {
        Self {
            targets,
            dedupe,
            ttl: DEFAULT_DEDUPE_TTL,
        }
    }

    /// Remember deliveries for `ttl` instead of [`DEFAULT_DEDUPE_TTL`].
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    pub fn add_target(&mut self, target: Arc<dyn FanoutTarget>) {
        self.targets.push(target);
    }

    pub fn target_names(&self) -> Vec<&str> {
        self.targets.iter().map(|t| t.name()).collect()
    }

    /// The dedupe key of one target's delivery of one event.
    pub fn dedupe_key(target: &str, event_id: &str) -> String {
        format!("{target}:{event_id}")
    }

    /// Parse a queue body and deliver it. A body that is not an event is poison.
    pub async fn deliver_body(&self, body: &str) -> RecordOutcome {
        match serde_json::from_str::<LifecycleEvent>(body) {
            Ok(event) => self.deliver(&event).await,
            Err(error) => RecordOutcome::Poison {
                reason: format!("the record is not a lifecycle event: {error}"),
            },
        }
    }

    /// Deliver one event to every target that does not have it yet. Targets run concurrently:
    /// a slow Slack does not hold up WebSocket subscribers. Everything logged on the way names
    /// the thread, the sandbox and the event (the span's fields).
    #[tracing::instrument(skip_all, fields(
        thread_id = %event.thread_id,
        sandbox_id = event.sandbox_id.as_deref().unwrap_or(""),
        event_id = %event.event_id,
        seq = event.seq,
    ))]
    pub async fn deliver(&self, event: &LifecycleEvent) -> RecordOutcome {
        let results = join_all(
            self.targets
                .iter()
                .map(|t| self.deliver_to(t.as_ref(), event)),
        )
        .await;
        let mut retry: Option<Option<Duration>> = None;
        let mut poison = Vec::new();
        for result in results {
            match result {
                Ok(()) => {}
                Err(DeliveryError::RetryLater { retry_after, .. }) => {
                    let longest = retry.flatten().max(retry_after);
                    retry = Some(longest);
                }
                Err(DeliveryError::Permanent(reason)) => poison.push(reason),
            }
        }
        match (retry, poison.is_empty()) {
            (Some(retry_after), _) => RecordOutcome::Retry { retry_after },
            (None, false) => RecordOutcome::Poison {
                reason: poison.join("; "),
            },
            (None, true) => RecordOutcome::Delivered,
        }
    }

    async fn deliver_to(
        &self,
        target: &dyn FanoutTarget,
        event: &LifecycleEvent,
    ) -> Result<(), DeliveryError> {
        let key = Self::dedupe_key(target.name(), &event.event_id);
        match self.dedupe.contains(&key).await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            // Without knowing, delivering could repeat: wait for the store instead.
            Err(error) => {
                return Err(DeliveryError::retry(format!(
                    "dedupe store unavailable: {error}"
                )))
            }
        }
        if let Err(error) = target.deliver(event).await {
            tracing::warn!(
                target = target.name(),
                thread_id = %event.thread_id,
                event_id = %event.event_id,
                seq = event.seq,
                %error,
                "lifecycle delivery failed"
            );
            return Err(error);
        }
        crate::fault::point_for("after-deliver", target.name());
        // The target has it. Failing to record that only risks one repeat later, which is
        // better than failing the record and repeating it for certain.
        if let Err(error) = self.dedupe.claim(&key, self.ttl).await {
            tracing::warn!(
                target = target.name(),
                event_id = %event.event_id,
                %error,
                "delivered but not recorded; a redelivery may repeat it"
            );
        }
        Ok(())
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::adapters::sqlite::SqliteDedupe;
    use crate::domain::{Cause, Millis, Status, ThreadId};

    /// Records what it was given and answers with the queued results (then `Ok`).
    #[derive(Default)]
    struct Scripted {
        name: &'static str,
        got: Mutex<Vec<String>>,
        answers: Mutex<Vec<Result<(), DeliveryError>>>,
    }

    impl Scripted {
        fn named(name: &'static str) -> Arc<Self> {
            Arc::new(Self {
                name,
                ..Self::default()
            })
        }
        fn answer(&self, result: Result<(), DeliveryError>) {
            self.answers.lock().unwrap().push(result);
        }
        fn got(&self) -> Vec<String> {
            self.got.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl FanoutTarget for Scripted {
        fn name(&self) -> &str {
            self.name
        }
        async fn deliver(&self, event: &LifecycleEvent) -> Result<(), DeliveryError> {
            let answer = {
                let mut answers = self.answers.lock().unwrap();
                if answers.is_empty() {
                    Ok(())
                } else {
                    answers.remove(0)
                }
            };
            if answer.is_ok() {
                self.got.lock().unwrap().push(event.event_id.clone());
            }
            answer
        }
    }

    fn event(id: &str, thread: &str) -> LifecycleEvent {
        LifecycleEvent {
            event_id: id.to_owned(),
            thread_id: ThreadId::parse(thread).unwrap(),
            seq: 1,
            generation: 1,
            from: Some(Status::Creating),
            to: Status::Active,
            cause: Cause::User,
            at: Millis(0),
            sandbox_id: Some("sb-1".into()),
            detail: None,
        }
    }

    fn dedupe() -> (Arc<dyn DedupeStore>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteDedupe::open(dir.path().join("d.db")).unwrap();
        (Arc::new(store), dir)
    }

    #[tokio::test]
    async fn each_target_sees_each_event_once_across_fanouts() {
        let (store, _dir) = dedupe();
        let a = Scripted::named("a");
        let b = Scripted::named("b");
        let fanout = Fanout::new(store.clone(), vec![a.clone(), b.clone()]);
        let e = event("e1", "t1");
        assert_eq!(fanout.deliver(&e).await, RecordOutcome::Delivered);
        assert_eq!(fanout.deliver(&e).await, RecordOutcome::Delivered);
        // A second process (or a restart) shares the durable record.
        let again = Fanout::new(store, vec![a.clone(), b.clone()]);
        assert_eq!(again.deliver(&e).await, RecordOutcome::Delivered);
        assert_eq!(a.got(), vec!["e1"]);
        assert_eq!(b.got(), vec!["e1"]);
    }

    #[tokio::test]
    async fn a_retrying_target_does_not_repeat_the_others() {
        let (store, _dir) = dedupe();
        let ok = Scripted::named("ok");
        let slow = Scripted::named("slow");
        slow.answer(Err(DeliveryError::retry_after(
            "rate limited",
            Duration::from_secs(3),
        )));
        let fanout = Fanout::new(store, vec![ok.clone(), slow.clone()]);
        let e = event("e1", "t1");
        assert_eq!(
            fanout.deliver(&e).await,
            RecordOutcome::Retry {
                retry_after: Some(Duration::from_secs(3))
            }
        );
        assert_eq!(fanout.deliver(&e).await, RecordOutcome::Delivered);
        assert_eq!(ok.got(), vec!["e1"]);
        assert_eq!(slow.got(), vec!["e1"]);
    }

    #[tokio::test]
    async fn retry_wins_over_permanent_and_permanent_alone_is_poison() {
        let (store, _dir) = dedupe();
        let broken = Scripted::named("broken");
        let busy = Scripted::named("busy");
        broken.answer(Err(DeliveryError::permanent("channel_not_found")));
        busy.answer(Err(DeliveryError::retry("timeout")));
        let fanout = Fanout::new(store, vec![broken.clone(), busy.clone()]);
        let e = event("e1", "t1");
        assert_eq!(
            fanout.deliver(&e).await,
            RecordOutcome::Retry { retry_after: None }
        );
        broken.answer(Err(DeliveryError::permanent("channel_not_found")));
        let outcome = fanout.deliver(&e).await;
        assert!(
            matches!(&outcome, RecordOutcome::Poison { reason } if reason.contains("channel_not_found")),
            "{outcome:?}"
        );
        assert!(outcome.is_failure());
        assert_eq!(busy.got(), vec!["e1"]);
    }

    #[tokio::test]
    async fn a_body_that_is_not_an_event_is_poison() {
        let (store, _dir) = dedupe();
        let fanout = Fanout::new(store, vec![Scripted::named("a")]);
        let outcome = fanout.deliver_body("{not json").await;
        assert!(
            matches!(outcome, RecordOutcome::Poison { .. }),
            "{outcome:?}"
        );
    }
}
