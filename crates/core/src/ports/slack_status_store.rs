//! The `SlackStatusStore` port: which Slack message shows each thread's sandbox status, so the
//! fan-out target edits that one message instead of posting a new one per state change.
//!
//! One record per thread, keyed by thread id. A DynamoDB adapter maps it to one item written
//! with `attribute_not_exists(thread_id) OR seq < :seq`, which is exactly `put`'s contract.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::domain::ThreadId;
use crate::ports::StoreError;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusMessage {
    pub channel: String,
    /// The status message's `ts` (its id for `chat.update`).
    pub ts: String,
    /// The sequence number of the lifecycle event the message shows: an older event arriving
    /// late (a re-drive) must not turn the badge back.
    pub seq: u64,
}

#[async_trait]
pub trait SlackStatusStore: Send + Sync {
    async fn get(&self, thread_id: &ThreadId) -> Result<Option<StatusMessage>, StoreError>;

    /// Record the thread's status message, unless the stored one already shows a later event
    /// (`seq` greater than `message.seq`). True when written.
    async fn put(&self, thread_id: &ThreadId, message: &StatusMessage) -> Result<bool, StoreError>;
}
