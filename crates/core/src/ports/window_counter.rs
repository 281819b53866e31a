//! The window counter port: counts in fixed time windows, shared by every process, for rate
//! limits that must hold across Lambda invocations and `threadbox dev`'s loops alike (Slack
//! messages per thread and per team; budgets: new sandboxes per scope and hour, compute per
//! scope and day).
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

    /// Add `amount` (which may be negative: giving back) to the count under `key` and return the
    /// count after this call, atomically. One write. A count never goes below zero: a give-back
    /// larger than the count is not applied, and the count is returned as it is.
    async fn add(
        &self,
        key: &str,
        amount: i64,
        expires_at: Millis,
        now: Millis,
    ) -> Result<u64, StoreError>;

    /// Take one of `cap` slots: add one to the count under `key` only if it is below `cap`, and
    /// return the count after, or `None` (and write nothing) when the cap is reached. N
    /// concurrent calls on a new key get exactly `min(N, cap)` slots. A slot taken and not used
    /// is given back with `add(key, -1, …)`.
    async fn take_below(
        &self,
        key: &str,
        cap: u64,
        expires_at: Millis,
        now: Millis,
    ) -> Result<Option<u64>, StoreError>;

    /// Raise the count under `key` to `to` if it is lower, and return how much it rose (zero
    /// when it was already at or above `to`), atomically: concurrent raises of one key rise by
    /// the highest `to` minus the count before, in total, so a caller that charges the rise
    /// elsewhere charges each unit once.
    async fn raise(
        &self,
        key: &str,
        to: u64,
        expires_at: Millis,
        now: Millis,
    ) -> Result<u64, StoreError>;
}
