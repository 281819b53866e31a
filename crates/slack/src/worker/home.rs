//! The App Home tab: the person's recent threads with their sandboxes' states and buttons,
//! published (`views.publish`) when they open it and again after they act from it.

use serde_json::Value;

use super::controls::{session_blocks, thread_words};
use super::SlackWorker;
use crate::blocks;
use crate::format::escape;
use threadbox_core::ports::RecordOutcome;

/// Threads the Home lists (two blocks each, within a view's 100).
const HOME_LIMIT: usize = 20;

impl SlackWorker {
    /// Publish `user`'s Home, with `note` (the answer to what they just did) at the top.
    pub(super) async fn publish_home(
        &self,
        team: &str,
        user: &str,
        note: Option<String>,
    ) -> RecordOutcome {
        let view = blocks::home(self.home_blocks(team, user, note).await);
        match self.api.publish_view(user, &view).await {
            Ok(()) => RecordOutcome::Delivered,
            Err(error) if error.is_retryable() => RecordOutcome::Retry {
                retry_after: error.retry_after(),
            },
            Err(error) => {
                tracing::warn!(%error, "could not publish the App Home");
                RecordOutcome::Delivered
            }
        }
    }

    async fn home_blocks(&self, team: &str, user: &str, note: Option<String>) -> Vec<Value> {
        let mut home = vec![blocks::header("Your sandboxes")];
        if let Some(note) = note {
            home.push(blocks::section(&note));
        }
        let Some(store) = &self.user_threads else {
            home.push(blocks::section(
                "This deployment does not keep who used which thread, so there is nothing to \
                 list here. Each thread's status card has its buttons.",
            ));
            return home;
        };
        let recent = match store.recent(team, user, HOME_LIMIT).await {
            Ok(recent) => recent,
            Err(error) => {
                home.push(blocks::section(&format!(
                    ":x: Could not list your threads: {}",
                    escape(&error.to_string())
                )));
                return home;
            }
        };
        if recent.is_empty() {
            home.push(blocks::section(
                "No threads yet. Mention me with a code block in a channel (or send me one \
                 here in Messages) and that thread gets its own Linux sandbox, which keeps its \
                 files between messages.",
            ));
            return home;
        }
        home.push(blocks::context(
            "Threads you used most recently first. Each has its own sandbox: paused when \
             quiet, resumed on the next message.",
        ));
        for (n, used) in recent.iter().enumerate() {
            match self.tb.session(&used.thread_id).await {
                Ok(Some(session)) => home.extend(session_blocks(&session, Some(n))),
                Ok(None) => home.push(blocks::section(&format!(
                    ":black_circle: {} · no sandbox any more",
                    thread_words(&used.thread_id)
                ))),
                Err(error) => home.push(blocks::section(&format!(
                    ":x: {} · could not be read: {}",
                    thread_words(&used.thread_id),
                    escape(&error.to_string())
                ))),
            }
        }
        home
    }
}
