//! The window counter port: counts in fixed time windows, shared by every process, for rate
//! limits that must hold across Lambda invocations and `threadbox dev`'s loops alike (Slack
//! messages per thread and per team).
//!
//! A caller names the window in the key (`…:{window start}`), so a new window is a new count;
//! `expires_at` only tells the store when the count may be dropped.

use async_trait::async_trait;

use super::StoreError;
use crate::domain::Millis;

#[async_trait]
pub trait WindowCounter: Send + Sync {
    /// Add one to the count under `key` and return the count after this call, atomically: N
    /// concurrent calls on a new key return 1 to N, each once. One write. `now` is the caller's
    /// clock: counts whose `expires_at` is before it may be dropped on the way.
    async fn increment(
        &self,
        key: &str,
        expires_at: Millis,
        now: Millis,
    ) -> Result<u64, StoreError>;
}
