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
use crate::ports::{DedupeStore, RecordOutcome};
use crate::ports::{DeliveryError, FanoutTarget};

/// How long a delivery is remembered. Redeliveries (visibility timeouts, janitor re-drives, DLQ
/// re-drives by an operator) come within hours; a week leaves a wide margin.
pub const DEFAULT_DEDUPE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

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
            // Without knowing, delivering could repeat: wait for the store instead. The error
            // names the dedupe store itself.
            Err(error) => return Err(DeliveryError::retry(error.to_string())),
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
