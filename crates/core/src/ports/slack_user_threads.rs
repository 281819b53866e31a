//! The `SlackUserThreads` port: which threads each Slack user has used recently, so
//! `/sandbox list` can show the caller's threads in a channel and the App Home tab the user's
//! recent threads, without scanning every session.
//!
//! One bounded record per user: at most [`MAX_USER_THREADS`] threads, the least recently used
//! dropped first. Ties in `last_used` are broken by thread id (ascending), in both the listing
//! order and the choice of what to drop, so every adapter keeps and returns the same threads.

use async_trait::async_trait;

use crate::domain::{Millis, ThreadId};
use crate::ports::{StoreError, StoreKind};

/// How many threads a user's record keeps; also the largest `limit` `recent` honours.
pub const MAX_USER_THREADS: usize = 100;

/// One of a user's threads and when the user last used it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserThread {
    pub thread_id: ThreadId,
    pub last_used: Millis,
}

#[async_trait]
pub trait SlackUserThreads: Send + Sync {
    /// Note that `user` (Slack user id, in workspace `team`) used `thread_id` at `at`.
    /// Idempotent; a later `at` replaces an earlier one, an earlier never replaces a later.
    /// Keeps at most [`MAX_USER_THREADS`] per user, dropping the least recently used.
    async fn touch(
        &self,
        team: &str,
        user: &str,
        thread_id: &ThreadId,
        at: Millis,
    ) -> Result<(), StoreError>;

    /// The user's threads, most recently used first, at most `limit` (1..=100; a larger limit
    /// returns at most [`MAX_USER_THREADS`], since no more are kept, and 0 returns none).
    async fn recent(
        &self,
        team: &str,
        user: &str,
        limit: usize,
    ) -> Result<Vec<UserThread>, StoreError>;
}

/// Check that `team` and `user` look like Slack ids (upper-case letters and digits, as
/// `ThreadId` requires of a Slack team). Adapters key a user's record by both, so a separator
/// inside either could make two users share one record.
pub fn check_slack_user(team: &str, user: &str) -> Result<(), StoreError> {
    for (what, id) in [("team", team), ("user", user)] {
        let valid = !id.is_empty()
            && id.len() <= 64
            && id
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
        if !valid {
            return Err(StoreError::unavailable(
                StoreKind::SlackUserThreads,
                format!(
                    "Slack {what} id {id:?} is not a Slack id (1 to 64 upper-case letters and digits)"
                ),
            ));
        }
    }
    Ok(())
}
