//! The dedupe port: remembers keys for a while, so work that arrives more than once runs once.
//!
//! Used for Slack's retried events (key: the Slack `event_id`) and for fan-out, where each target
//! records the event ids it has delivered (key: `{target}:{event_id}`). Keys expire: a record is
//! garbage after the window in which duplicates can arrive.

use std::time::Duration;

use async_trait::async_trait;

use super::StoreError;

#[async_trait]
pub trait DedupeStore: Send + Sync {
    /// Record `key` for `ttl` if it is not already recorded. True when this call recorded it
    /// (first sighting), false when it was already there (a duplicate). One conditional write.
    async fn claim(&self, key: &str, ttl: Duration) -> Result<bool, StoreError>;

    /// Whether `key` is recorded and not expired.
    async fn contains(&self, key: &str) -> Result<bool, StoreError>;

    /// Forget `key`, so the work it guarded can be tried again (after a failure).
    async fn release(&self, key: &str) -> Result<(), StoreError>;
}
