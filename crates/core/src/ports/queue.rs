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

impl OutgoingMessage {
    /// SQS's limit on a message body; every adapter enforces it so that a message the embedded
    /// queue accepts is one SQS accepts too.
    pub const MAX_BODY_BYTES: usize = 256 * 1024;
    /// SQS's limit on group and deduplication ids (also the longest thread id).
    pub const MAX_ID_LEN: usize = 128;

    /// Check the message against SQS FIFO's rules, with a message that names the broken one.
    /// Adapters call this for a whole batch before writing anything.
    pub fn validate(&self) -> Result<(), QueueError> {
        validate_id("group_id", &self.group_id)?;
        validate_id("dedup_id", &self.dedup_id)?;
        if self.body.is_empty() {
            return Err(QueueError::Rejected(format!(
                "message {:?} has an empty body",
                self.dedup_id
            )));
        }
        if self.body.len() > Self::MAX_BODY_BYTES {
            return Err(QueueError::Rejected(format!(
                "message {:?} has a body of {} bytes; the limit is {} bytes (256 KiB)",
                self.dedup_id,
                self.body.len(),
                Self::MAX_BODY_BYTES
            )));
        }
        // SQS accepts only the characters XML 1.0 allows; Rust strings already exclude surrogates.
        let xml_char = |c: char| {
            matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}')
        };
        if let Some((position, found)) = self.body.char_indices().find(|(_, c)| !xml_char(*c)) {
            return Err(QueueError::Rejected(format!(
                "message {:?} has {found:?} at byte {position} of its body; SQS accepts only XML characters",
                self.dedup_id
            )));
        }
        Ok(())
    }
}

fn validate_id(field: &str, id: &str) -> Result<(), QueueError> {
    if id.is_empty() {
        return Err(QueueError::Rejected(format!("{field} is empty")));
    }
    let len = id.chars().count();
    if len > OutgoingMessage::MAX_ID_LEN {
        return Err(QueueError::Rejected(format!(
            "{field} is {len} characters long; the limit is {}",
            OutgoingMessage::MAX_ID_LEN
        )));
    }
    // SQS allows ASCII letters, digits and punctuation, nothing else (no spaces).
    if let Some((position, found)) = id.chars().enumerate().find(|(_, c)| !c.is_ascii_graphic()) {
        return Err(QueueError::Rejected(format!(
            "{field} {id:?} contains {found:?} at position {position}; allowed are ASCII letters, digits and punctuation"
        )));
    }
    Ok(())
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

/// What the queue should do with one received message: the one answer every handler gives
/// (fan-out, the Slack worker, the pause queue's transitions), which each runtime turns into its
/// queue's verbs (SQS `batchItemFailures`; the embedded queue's ack, leave in flight, release).
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
