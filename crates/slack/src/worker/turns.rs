//! Turns: a checkpoint of the thread's home before each code block runs (on unless the worker's
//! `checkpoint_turns` is off), whose reply gets an **Undo** button; the confirmed Undo (queued
//! by `interactions` like Reset) restores it; and `/sandbox fork`, which starts a new thread in
//! the channel from the current one's files and links the two.
//!
//! A checkpoint that cannot be taken (the provider has none, the home is over the thread's
//! checkpoint cap) never stops the block: it runs, and its reply has no Undo.

use serde_json::Value;

use super::{failure, Outcome, SlackWorker};
use crate::blocks;
use crate::format::escape;
use crate::thread::SlackPlace;
use crate::work::SlashCommand;
use threadbox_core::domain::{CheckpointCause, CheckpointId, ThreadId};
use threadbox_core::ports::{PostMessage, ProviderError};
use threadbox_core::usecases::{ForkRequest, UseCaseError};

impl SlackWorker {
    /// Take the checkpoint a code block's Undo restores; `None` when turns are not
    /// checkpointed, or this one could not be (logged).
    pub(super) async fn turn_checkpoint(
        &self,
        thread_id: &ThreadId,
        nth: usize,
    ) -> Option<CheckpointId> {
        // Without a checkpoint store, or with a provider that has no checkpoints (E2B), there
        // is nothing to take, and no reason to make the thread first.
        if !self.config.checkpoint_turns
            || self.tb.checkpoints.is_none()
            || self.tb.provider.checkpoint_support().is_err()
        {
            return None;
        }
        // The block would make the thread's sandbox anyway; its checkpoint is then an empty home.
        if let Err(error) = self.tb.resolve(thread_id).await {
            tracing::warn!(%error, "no checkpoint before the block: the thread did not resolve");
            return None;
        }
        let label = format!("before code block {}", nth + 1);
        match self
            .tb
            .checkpoint(thread_id, Some(&label), CheckpointCause::Turn)
            .await
        {
            Ok(checkpoint) => Some(checkpoint.id),
            Err(UseCaseError::Provider(ProviderError::Unsupported(why))) => {
                tracing::debug!(%why, "no checkpoints here; the block runs without an Undo");
                None
            }
            Err(error) => {
                tracing::warn!(%error, "no checkpoint before the block; it runs without an Undo");
                None
            }
        }
    }

    /// Put the thread's files back to `checkpoint` (a confirmed Undo).
    pub(super) async fn undo(&self, thread_id: &ThreadId, checkpoint: &CheckpointId) -> Outcome {
        match self.tb.restore(thread_id, checkpoint).await {
            Ok(restored) => {
                let stopped = match restored.stopped.len() {
                    0 => String::new(),
                    n => format!(
                        " Stopped {n} running process{}: {}.",
                        if n == 1 { "" } else { "es" },
                        restored
                            .stopped
                            .iter()
                            .take(5)
                            .map(|p| format!(
                                "`{}`",
                                escape(&p.command.chars().take(60).collect::<String>())
                            ))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                Outcome::Done(format!(
                    ":rewind: Undone: the files are back as they were before that code block.{stopped}"
                ))
            }
            Err(UseCaseError::UnknownCheckpoint { .. }) => Outcome::Refused(
                ":warning: That checkpoint is no longer kept (only the newest ones are), so this \
                 block cannot be undone."
                    .to_owned(),
            ),
            Err(error) => Outcome::Refused(failure(&error)),
        }
    }

    /// `/sandbox fork`: a new top-level message in the channel starts the new thread, whose
    /// sandbox is a fork of `source`'s; each thread gets a line linking the other.
    pub(super) async fn fork_in_channel(
        &self,
        command: &SlashCommand,
        source: &ThreadId,
    ) -> String {
        let Some(place) = SlackPlace::of(source) else {
            return ":x: Only a Slack thread can be forked here.".to_owned();
        };
        // Said before a message is posted for a thread that could not be made.
        if let Err(error) = self.tb.provider.checkpoint_support() {
            return fork_failed(&error.into());
        }
        let intro = PostMessage {
            channel: command.channel.clone(),
            thread_ts: None,
            text: format!(
                ":twisted_rightwards_arrows: <@{}> forked a sandbox here: a copy of the files of \
                 {}, to try something else side by side. Reply in this thread to use it.",
                command.user,
                super::controls::thread_words(source)
            ),
            blocks: None,
        };
        let posted = match self.api.post_message(&intro).await {
            Ok(posted) => posted,
            Err(error) => return format!(":x: Could not start the new thread: {error}"),
        };
        let new_thread = match ThreadId::slack(&command.team, &posted.channel, Some(&posted.ts)) {
            Ok(thread) => thread,
            Err(error) => return format!(":x: {error}"),
        };
        let forked = self
            .tb
            .fork(ForkRequest {
                source: source.clone(),
                thread: new_thread.clone(),
                checkpoint: None,
                network: None,
            })
            .await;
        let reply_in = |thread_ts: Option<String>, text: String| PostMessage {
            channel: command.channel.clone(),
            thread_ts,
            text,
            blocks: None,
        };
        if let Err(error) = forked {
            let text = fork_failed(&error);
            let _ = self
                .api
                .post_message(&reply_in(Some(posted.ts.clone()), text.clone()))
                .await;
            return text;
        }
        let to_new = reply_in(
            place.thread_ts.clone(),
            format!(
                ":twisted_rightwards_arrows: Forked into {}: its sandbox starts with this one's files.",
                super::controls::thread_words(&new_thread)
            ),
        );
        if let Err(error) = self.api.post_message(&to_new).await {
            tracing::warn!(%error, "could not link the fork from its source thread");
        }
        format!(
            "Forked: {} has a copy of this thread's files.",
            super::controls::thread_words(&new_thread)
        )
    }
}

/// Why a fork failed, with one `:x:`.
fn fork_failed(error: &UseCaseError) -> String {
    let why = failure(error);
    format!(
        ":x: The fork failed: {}",
        why.strip_prefix(":x: ").unwrap_or(&why)
    )
}

/// A code block's reply with its Undo button under it.
pub(super) fn with_undo(text: &str, thread_id: &ThreadId, checkpoint: &CheckpointId) -> Vec<Value> {
    let mut reply = vec![blocks::section(text)];
    reply.extend(blocks::actions(
        "undo",
        vec![blocks::undo_button(thread_id.as_str(), checkpoint.as_str())],
    ));
    reply
}
