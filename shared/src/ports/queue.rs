//! The durable queue port: SQS in production, SQLite when embedded.
//!
//! Semantics follow SQS FIFO queues, so code written against one behaves on the other: messages in
//! one group are delivered in order and one at a time; a received message is invisible for the
//! visibility timeout and comes back if not acked; after `max_receives` receives it moves to the
//! dead-letter queue; a repeated deduplication id is accepted and dropped.

use std::time::Duration;

use async_trait::async_trait;

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue unavailable: {0}")]
    Unavailable(String),
    /// The receipt is unknown or the message's visibility expired and it was handed to someone else.
    #[error("receipt {0} is no longer valid")]
    StaleReceipt(String),
    #[error("message rejected: {0}")]
    Rejected(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutgoingMessage {
    /// Ordering key: the thread id.
    pub group_id: String,
    /// Idempotency key: the event id or command id.
    pub dedup_id: String,
    pub body: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceivedMessage {
    pub message_id: String,
    /// Pass to `ack` (or `release`); valid until the visibility timeout ends.
    pub receipt: String,
    pub group_id: String,
    pub dedup_id: String,
    pub body: String,
    /// How many times this message has been received, this time included.
    pub receive_count: u32,
}

#[async_trait]
pub trait DurableQueue: Send + Sync {
    /// Send messages; a dedup id already seen is accepted and dropped.
    async fn send(&self, messages: &[OutgoingMessage]) -> Result<(), QueueError>;

    /// Up to `max` messages, each invisible to other receivers for `visibility`.
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<ReceivedMessage>, QueueError>;

    /// Done with a message: delete it.
    async fn ack(&self, receipt: &str) -> Result<(), QueueError>;

    /// Give a message back before its visibility ends (a failed attempt that should be retried soon).
    async fn release(&self, receipt: &str) -> Result<(), QueueError>;

    /// Messages moved to the dead-letter queue, oldest first.
    async fn dead_letters(&self, limit: usize) -> Result<Vec<ReceivedMessage>, QueueError>;
}
