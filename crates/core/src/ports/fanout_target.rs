//! Where lifecycle events go: the `FanoutTarget` port and how a delivery can fail.

use std::time::Duration;

use async_trait::async_trait;

use crate::domain::LifecycleEvent;

/// Somewhere lifecycle events go: a log, a Slack thread, WebSocket subscribers.
///
/// A target is called at most once per event id in the normal course (the fan-out filters
/// repeats on the durable dedupe store), but a crash between delivering and recording can repeat
/// one, so a target that can be idempotent cheaply (editing a message in place) should be.
#[async_trait]
pub trait FanoutTarget: Send + Sync {
    /// Stable and short: it is part of the dedupe key (`{name}:{event_id}`), so renaming a target
    /// makes it see recent events again.
    fn name(&self) -> &str;

    /// Deliver one event.
    async fn deliver(&self, event: &LifecycleEvent) -> Result<(), DeliveryError>;
}

/// Why a target did not take an event, and therefore what the queue should do with the record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// Transient (rate limit, timeout, 5xx): try the record again later, after `retry_after`
    /// when the target knows how long (Slack's `Retry-After`).
    #[error("{reason} (retry later{})", retry_after.map(|d| format!(", after {} ms", d.as_millis())).unwrap_or_default())]
    RetryLater {
        reason: String,
        retry_after: Option<Duration>,
    },
    /// Will never succeed as things are (bad credentials, a channel that does not exist): the
    /// record goes to the dead-letter queue, where an operator can re-drive it after a fix.
    #[error("{0} (permanent)")]
    Permanent(String),
}

impl DeliveryError {
    pub fn retry(reason: impl Into<String>) -> Self {
        Self::RetryLater {
            reason: reason.into(),
            retry_after: None,
        }
    }

    pub fn retry_after(reason: impl Into<String>, after: Duration) -> Self {
        Self::RetryLater {
            reason: reason.into(),
            retry_after: Some(after),
        }
    }

    pub fn permanent(reason: impl Into<String>) -> Self {
        Self::Permanent(reason.into())
    }

    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Permanent(_))
    }
}
