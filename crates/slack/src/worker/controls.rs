//! Controls that do not come as messages in the thread: button clicks and confirmed resets
//! (queued by `interactions`) and the `/sandbox` slash command (queued by `slash`). Both are
//! answered with messages only the person who asked sees; a button's success needs no answer,
//! since the status card shows it.
//!
//! Each runs at most once: the worker claims its id before acting, after the checks that may
//! ask for a retry (Slack unreachable), so a redelivery either finds the claim or acts for the
//! first time.

use serde_json::Value;

use super::{retry, Outcome, SlackWorker, NO_SANDBOX};
use crate::blocks::{self, Action};
use crate::format::escape;
use crate::slash::{self, SlashRequest};
use crate::status::{buttons_for, state_words};
use crate::thread::SlackPlace;
use crate::work::{ActionRequest, SlashCommand};
use threadbox_core::domain::{Session, Status, ThreadId};
use threadbox_core::ports::EphemeralMessage;
use threadbox_core::ports::RecordOutcome;

/// Threads `/sandbox list` shows (two blocks each, within a message's 50).
const LIST_LIMIT: usize = 10;

impl SlackWorker {
    pub(super) async fn handle_action(&self, request: ActionRequest) -> RecordOutcome {
        let Some(place) = SlackPlace::of(&request.thread_id) else {
            return RecordOutcome::Poison {
                reason: format!("{} is not a Slack thread", request.thread_id),
            };
        };
        // Only the thread's channel members may act on its sandbox: a button in an ephemeral
        // answer or the App Home must not reach further than the channel itself does.
        match self.api.is_member(&place.channel, &request.user).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(user = %request.user, "click from someone outside the channel refused");
                self.answer_action(
                    &request,
                    format!(
                        ":no_entry: Only members of <#{}> can control this thread's sandbox.",
                        place.channel
                    ),
                )
                .await;
                return RecordOutcome::Delivered;
            }
            Err(error) if error.is_retryable() => {
                tracing::warn!(%error, "could not check channel membership; retrying");
                return RecordOutcome::Retry {
                    retry_after: error.retry_after(),
                };
            }
            Err(error) => {
                tracing::warn!(%error, "could not check channel membership");
                self.answer_action(
                    &request,
                    format!(
                        ":x: Could not check who may act in <#{}>: {error}",
                        place.channel
                    ),
                )
                .await;
                return RecordOutcome::Delivered;
            }
        }
        let session = match self.tb.session(&request.thread_id).await {
            Ok(session) => session,
            Err(error) => return retry(format!("session store: {error}")),
        };
        match self
            .dedupe
            .claim(
                &format!("slack:action-run:{}", request.id),
                self.config.message_memory,
            )
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!("click already acted on (a redelivery)");
                return RecordOutcome::Delivered;
            }
            Err(error) => return retry(format!("dedupe store: {error}")),
        }
        let thread = &request.thread_id;
        let outcome = match (request.action, gone(session.as_ref())) {
            // Reset is how a gone thread starts again; the others have nothing to act on.
            (Action::Pause | Action::Resume | Action::Undo, Some(why)) => Outcome::Refused(why),
            (Action::Pause, None) => self.pause(thread).await,
            (Action::Resume, None) => self.resume(thread).await,
            (Action::Reset, _) => self.reset(thread).await,
            (Action::Undo, None) => match &request.checkpoint {
                Some(checkpoint) => self.undo(thread, checkpoint).await,
                None => Outcome::Refused(":x: This Undo names no checkpoint.".to_owned()),
            },
        };
        // An undo's success is not on the status card: say it.
        let outcome = match (request.action, outcome) {
            (Action::Undo, Outcome::Done(text)) => Outcome::Refused(text),
            (_, outcome) => outcome,
        };
        let note = match outcome {
            Outcome::Done(_) => None,
            Outcome::Refused(text) => Some(text),
        };
        match &request.answer_in {
            Some(_) => {
                if let Some(text) = note {
                    self.answer_action(&request, text).await;
                }
                RecordOutcome::Delivered
            }
            // From the App Home: the refreshed Home is the answer.
            None => self.publish_home(&request.team, &request.user, note).await,
        }
    }

    /// Tell the person who clicked, and only them: in the channel the click came from, or in
    /// their App Home.
    async fn answer_action(&self, request: &ActionRequest, text: String) {
        match &request.answer_in {
            Some(place) => {
                self.ephemeral(
                    &place.channel,
                    &request.user,
                    place.thread_ts.clone(),
                    text,
                    None,
                )
                .await
            }
            None => {
                self.publish_home(&request.team, &request.user, Some(text))
                    .await;
            }
        }
    }

    pub(super) async fn handle_slash(&self, command: SlashCommand) -> RecordOutcome {
        match self
            .dedupe
            .claim(
                &format!("slack:slash-run:{}", command.id),
                self.config.message_memory,
            )
            .await
        {
            Ok(true) => {}
            Ok(false) => return RecordOutcome::Delivered,
            Err(error) => return retry(format!("dedupe store: {error}")),
        }
        let (text, blocks) = self.slash_answer(&command).await;
        self.ephemeral(&command.channel, &command.user, None, text, blocks)
            .await;
        RecordOutcome::Delivered
    }

    async fn slash_answer(&self, command: &SlashCommand) -> (String, Option<Vec<Value>>) {
        let request = slash::parse(&command.text);
        let target = match &request {
            SlashRequest::List => return self.list(command).await,
            SlashRequest::Help => return (slash::usage(), None),
            SlashRequest::Unknown(words) => {
                return (
                    format!(
                        "I don't know `/sandbox {}`. Try:\n{}",
                        escape(words),
                        slash::usage()
                    ),
                    None,
                )
            }
            SlashRequest::Status(t)
            | SlashRequest::Pause(t)
            | SlashRequest::Resume(t)
            | SlashRequest::Reset(t)
            | SlashRequest::Fork(t) => t.as_deref(),
        };
        let thread = match self.slash_thread(command, target).await {
            Ok(thread) => thread,
            Err(text) => return (text, None),
        };
        let session = match self.tb.session(&thread).await {
            Ok(Some(session)) => session,
            Ok(None) => return (NO_SANDBOX.to_owned(), None),
            Err(error) => return (format!(":x: Could not read the thread: {error}"), None),
        };
        match request {
            SlashRequest::Status(_) => {
                let card = session_blocks(&session, None);
                (super::status_line(&session), Some(card))
            }
            SlashRequest::Pause(_) => (self.pause(&thread).await.text(), None),
            SlashRequest::Fork(_) => (self.fork_in_channel(command, &thread).await, None),
            SlashRequest::Resume(_) => (self.resume(&thread).await.text(), None),
            SlashRequest::Reset(_) => {
                let question = "Reset this thread's sandbox? Its files and running processes \
                                will be deleted; you will be asked to confirm.";
                let mut blocks = vec![blocks::section(question)];
                blocks.extend(blocks::actions(
                    "reset",
                    vec![blocks::button(Action::Reset, thread.as_str(), None)],
                ));
                (question.to_owned(), Some(blocks))
            }
            SlashRequest::List | SlashRequest::Help | SlashRequest::Unknown(_) => {
                unreachable!("answered above")
            }
        }
    }

    /// The thread a slash command is about: in a DM, the DM's sandbox; else the one named, or
    /// the caller's latest thread in this channel. `Err` is the answer saying why there is none.
    async fn slash_thread(
        &self,
        command: &SlashCommand,
        target: Option<&str>,
    ) -> Result<ThreadId, String> {
        let invalid = |e: threadbox_core::domain::InvalidThreadId| format!(":x: {e}");
        if command.channel.starts_with('D') {
            return ThreadId::slack(&command.team, &command.channel, None).map_err(invalid);
        }
        if let Some(target) = target {
            let ts = slash::thread_ts_of(target).ok_or_else(|| {
                format!(
                    "`{}` is not a thread: give a link to the thread's first message, or its ts.",
                    escape(target)
                )
            })?;
            return ThreadId::slack(&command.team, &command.channel, Some(&ts)).map_err(invalid);
        }
        let mine = self.threads_in_channel(command).await?;
        mine.into_iter().next().ok_or_else(|| {
            "You have no threads with a sandbox in this channel yet: mention me with a code \
             block to start one, or name a thread (`/sandbox status <link>`)."
                .to_owned()
        })
    }

    /// The caller's threads in the command's channel, most recently used first.
    async fn threads_in_channel(&self, command: &SlashCommand) -> Result<Vec<ThreadId>, String> {
        let Some(store) = &self.user_threads else {
            return Err(
                "This deployment does not keep who used which thread; name the thread \
                        (`/sandbox status <link>`)."
                    .to_owned(),
            );
        };
        let recent = store
            .recent(
                &command.team,
                &command.user,
                threadbox_core::ports::MAX_USER_THREADS,
            )
            .await
            .map_err(|error| format!(":x: Could not list your threads: {error}"))?;
        Ok(recent
            .into_iter()
            .map(|used| used.thread_id)
            .filter(|thread| {
                SlackPlace::of(thread).is_some_and(|place| place.channel == command.channel)
            })
            .collect())
    }

    async fn list(&self, command: &SlashCommand) -> (String, Option<Vec<Value>>) {
        let threads = match self.threads_in_channel(command).await {
            Ok(threads) => threads,
            Err(text) => return (text, None),
        };
        if threads.is_empty() {
            return (
                "You have no threads with a sandbox in this channel yet: mention me with a code \
                 block to start one."
                    .to_owned(),
                None,
            );
        }
        let total = threads.len();
        let mut blocks = vec![blocks::section(&format!(
            "*Your threads in <#{}>* ({total})",
            command.channel
        ))];
        for (n, thread) in threads.iter().take(LIST_LIMIT).enumerate() {
            match self.tb.session(thread).await {
                Ok(Some(session)) => blocks.extend(session_blocks(&session, Some(n))),
                Ok(None) => blocks.push(blocks::section(&format!(
                    ":black_circle: {} · no sandbox any more",
                    thread_words(thread)
                ))),
                Err(error) => blocks.push(blocks::section(&format!(
                    ":x: {} · could not be read: {}",
                    thread_words(thread),
                    escape(&error.to_string())
                ))),
            }
        }
        if total > LIST_LIMIT {
            blocks.push(blocks::context(&format!(
                "… and {} older ones.",
                total - LIST_LIMIT
            )));
        }
        (
            format!("Your {total} threads in this channel"),
            Some(blocks),
        )
    }

    /// A message only `user` sees. A failure is logged: there is nobody else to tell.
    pub(super) async fn ephemeral(
        &self,
        channel: &str,
        user: &str,
        thread_ts: Option<String>,
        text: String,
        blocks: Option<Vec<Value>>,
    ) {
        let message = EphemeralMessage {
            channel: channel.to_owned(),
            user: user.to_owned(),
            thread_ts,
            text,
            blocks,
        };
        if let Err(error) = self.api.post_ephemeral(&message).await {
            tracing::warn!(%error, "could not answer the person who asked");
        }
    }
}

/// Why a thread has nothing to pause or resume, or `None` when it has.
fn gone(session: Option<&Session>) -> Option<String> {
    match session.map(|s| s.status) {
        None => Some(NO_SANDBOX.to_owned()),
        Some(Status::Destroyed) => Some(
            ":black_circle: This thread's sandbox is gone: it was destroyed after a long quiet \
             spell, with its files. Send a code block in the thread to start a fresh one."
                .to_owned(),
        ),
        Some(Status::Expired) => Some(
            ":warning: This thread's sandbox is gone and was not replaced. Press Reset (or send \
             `reset`) to start a fresh one."
                .to_owned(),
        ),
        Some(_) => None,
    }
}

/// A thread in words: its channel and when it started (from its root `ts`).
pub(super) fn thread_words(thread: &ThreadId) -> String {
    match SlackPlace::of(thread) {
        Some(SlackPlace {
            channel,
            thread_ts: Some(ts),
            ..
        }) => {
            let secs = ts.split('.').next().unwrap_or("0");
            format!(
                "thread in <#{channel}> from <!date^{secs}^{{date_short_pretty}} {{time}}|{ts}>"
            )
        }
        Some(SlackPlace { channel, .. }) => format!("<#{channel}>"),
        None => format!("`{}`", escape(thread.as_str())),
    }
}

/// A thread's sandbox as blocks: its state and the buttons for it. `nth` numbers the buttons'
/// action ids when one message or view lists several threads.
pub(super) fn session_blocks(session: &Session, nth: Option<usize>) -> Vec<Value> {
    let (icon, words) = state_words(session.status);
    let active = session.last_activity_at.0.div_euclid(1000);
    let mut blocks = vec![blocks::section(&format!(
        "{icon} Sandbox *{words}* · {}\nGeneration {} · last active <!date^{active}^{{ago}}|at {active}>",
        thread_words(&session.thread_id),
        session.generation,
    ))];
    let buttons = buttons_for(session.status)
        .iter()
        .map(|action| blocks::button(*action, session.thread_id.as_str(), nth))
        .collect();
    let block_id = format!("thread-{}", nth.unwrap_or(0));
    blocks.extend(blocks::actions(&block_id, buttons));
    blocks
}
