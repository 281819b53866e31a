//! The worker: runs what people ask for in a thread and replies there. Transport-free: it reads
//! work-queue bodies and talks to Slack through the `SlackApi` port, so the SQS Lambda,
//! `threadbox dev` and the tests all drive the same code.
//!
//! Each message runs at most once: the worker claims the message (channel and ts) before acting,
//! which also folds the `app_mention` and the `message` event Slack sends for one mention into
//! one run. A reply that meets a rate limit waits out `Retry-After` briefly, and past that goes
//! back on the work queue as a reply of its own, so retrying it never re-runs the command.
//!
//! A worker can die mid-message (a Lambda timeout, an out-of-memory kill), and the queue then
//! hands the message out again. Three markers in the dedupe store make that redelivery's outcome
//! clear, so every message gets its answer exactly once:
//!
//! | key | written | on a redelivery that finds it |
//! |---|---|---|
//! | `slack:msg:{channel}:{ts}` | before anything is done | taken by the twin event (no `owner` marker of this event): a duplicate, even while the twin still runs |
//! | `…:owner:{event_id}` | right after the claim | (without `started`) nothing with effects had started: run the message again |
//! | `…:started` | just before the first effect (a command, a pause, a file copy) | the effect may have happened: reply once that the message was interrupted, and do not re-run it |
//! | `…:done` | after the last reply | a duplicate (a retry, the twin event): nothing to do |
//!
//! Read-only commands (`status`, `files`, `help`) never write `started`, so an interrupted one is
//! simply run again. Two windows are left, each between two writes (milliseconds): a crash
//! between the claim and its `owner` marker makes the redelivery a silent duplicate, and one
//! between Slack accepting the last reply and `done` makes it say "interrupted" for a message
//! that had finished (Slack's `chat.postMessage` has no idempotency key to close that one).
//!
//! [`SlackWorker::handle_body_by`] takes a deadline (the Lambda invocation's): a block whose time
//! limit does not fit in what is left runs as a background process, followed until the deadline
//! and then by later workers, which post its output when it ends (`background`); a block with
//! too little time left to start is not started, and its reply says so.

mod background;
mod controls;
mod files;
mod home;
mod live;
mod refusals;
mod replies;
mod turns;

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::command::{self, CodeBlock, Command, Language};
use super::format::{self, escape, REPLY_BUDGET};
use super::rate_limit::{MessageRates, Verdict};
use super::thread::SlackPlace;
use super::work::{IncomingMessage, WorkItem};
use threadbox_core::domain::{RejectKind, Session, ThreadId};
use threadbox_core::ports::RecordOutcome;
use threadbox_core::ports::{
    DedupeStore, DurableQueue, ExecCommand, ExecRequest, SlackApi, SlackUserThreads,
};
use threadbox_core::usecases::{Threadbox, UseCaseError};

pub use self::files::safe_file_name;
use self::replies::{BlockReply, OutputFile, Replies};
pub use self::replies::{MIN_BLOCK_TIME, REPLY_MARGIN};

/// The sandbox user's home, where relative paths start.
const HOME: &str = "/home/user";

#[derive(Clone, Debug)]
pub struct SlackWorkerConfig {
    /// A code block is stopped after this long.
    pub exec_timeout: Duration,
    /// Shared files larger than this are not copied in.
    pub max_attachment_bytes: u64,
    /// Where shared files land in the sandbox.
    pub attachments_dir: String,
    /// How long a handled message is remembered (Slack retries within minutes; the mention and
    /// message events for one text arrive within seconds).
    pub message_memory: Duration,
    /// Characters per reply.
    pub reply_budget: usize,
    /// Longest `Retry-After` waited out in place before the reply is queued instead.
    pub max_inline_wait: Duration,
    /// Entries shown by `files`.
    pub max_listing: usize,
    /// Most code blocks one message may run; a message with more runs none.
    pub max_blocks_per_message: usize,
    /// Most characters of code (all blocks together) one message may run.
    pub max_code_chars_per_message: usize,
    /// Bytes of each output stream kept from a code block: more than a reply shows, since
    /// longer output is shared as a file.
    pub output_cap: usize,
    /// Take a checkpoint before each code block, and give its reply an Undo button.
    pub checkpoint_turns: bool,
}

impl Default for SlackWorkerConfig {
    fn default() -> Self {
        Self {
            exec_timeout: Duration::from_secs(60),
            max_attachment_bytes: 20 * 1024 * 1024,
            attachments_dir: format!("{HOME}/attachments"),
            message_memory: Duration::from_secs(24 * 3600),
            reply_budget: REPLY_BUDGET,
            max_inline_wait: Duration::from_secs(10),
            max_listing: 50,
            // A 40,000-character message holds thousands of tiny blocks; five is plenty for a
            // person, and an agent can send several messages.
            max_blocks_per_message: 5,
            max_code_chars_per_message: 20_000,
            output_cap: 1024 * 1024,
            checkpoint_turns: true,
        }
    }
}

#[derive(Clone)]
pub struct SlackWorker {
    tb: Threadbox,
    api: Arc<dyn SlackApi>,
    dedupe: Arc<dyn DedupeStore>,
    /// The work queue, for replies that have to wait.
    queue: Arc<dyn DurableQueue>,
    config: SlackWorkerConfig,
    /// Per-thread and per-workspace message limits; none without `with_rates`.
    rates: Option<MessageRates>,
    /// Who used which thread, for `/sandbox list` and the App Home; none without
    /// `with_user_threads` (both then say they cannot list).
    user_threads: Option<Arc<dyn SlackUserThreads>>,
}

impl SlackWorker {
    pub fn new(
        tb: Threadbox,
        api: Arc<dyn SlackApi>,
        dedupe: Arc<dyn DedupeStore>,
        queue: Arc<dyn DurableQueue>,
        config: SlackWorkerConfig,
    ) -> Self {
        Self {
            tb,
            api,
            dedupe,
            queue,
            config,
            rates: None,
            user_threads: None,
        }
    }

    /// Remember who used which thread (see `user_threads`).
    pub fn with_user_threads(mut self, store: Arc<dyn SlackUserThreads>) -> Self {
        self.user_threads = Some(store);
        self
    }

    /// Act on at most so many messages per thread and per workspace a minute (see `rate_limit`).
    pub fn with_rates(mut self, rates: MessageRates) -> Self {
        self.rates = Some(rates);
        self
    }

    /// Handle one work-queue body. Never fails the whole batch: a body that is not work is
    /// poison (dead-lettered), and failures before anything ran ask for a retry.
    pub async fn handle_body(&self, body: &str) -> RecordOutcome {
        self.handle_body_by(body, None).await
    }

    /// [`Self::handle_body`], finishing by `deadline`: each code block's timeout is cut to what
    /// is left of it (less [`REPLY_MARGIN`] for the replies), and a block with less than
    /// [`MIN_BLOCK_TIME`] left is not started.
    pub async fn handle_body_by(&self, body: &str, deadline: Option<Instant>) -> RecordOutcome {
        match serde_json::from_str::<WorkItem>(body) {
            Ok(item) => self.handle_by(item, deadline).await,
            Err(error) => RecordOutcome::Poison {
                reason: format!("the record is not a work item: {error}"),
            },
        }
    }

    pub async fn handle(&self, item: WorkItem) -> RecordOutcome {
        self.handle_by(item, None).await
    }

    async fn handle_by(&self, item: WorkItem, deadline: Option<Instant>) -> RecordOutcome {
        match item {
            WorkItem::Message(message) => {
                let span = tracing::info_span!(
                    "slack_message",
                    thread_id = %message.thread_id,
                    event_id = %message.event_id
                );
                tracing::Instrument::instrument(self.handle_message(message, deadline), span).await
            }
            WorkItem::Reply(reply) => self.post_pending(reply).await,
            WorkItem::Action(request) => {
                let span = tracing::info_span!(
                    "slack_action",
                    thread_id = %request.thread_id,
                    action = request.action.name()
                );
                tracing::Instrument::instrument(self.handle_action(request), span).await
            }
            WorkItem::Slash(command) => self.handle_slash(command).await,
            WorkItem::HomeOpened(opened) => {
                self.publish_home(&opened.team, &opened.user, None).await
            }
            WorkItem::Background(run) => self.handle_background(run, deadline).await,
        }
    }

    async fn handle_message(
        &self,
        message: IncomingMessage,
        deadline: Option<Instant>,
    ) -> RecordOutcome {
        let command = command::parse(&message.text);
        let has_files = !message.files.is_empty();
        if !message.addressed {
            // Chatter in a thread is not for us; commands are, once the thread has a sandbox.
            if !command.is_actionable() && !has_files {
                return RecordOutcome::Delivered;
            }
            match self.tb.session(&message.thread_id).await {
                Ok(Some(_)) => {}
                Ok(None) => return RecordOutcome::Delivered,
                Err(error) => return retry(format!("session store: {error}")),
            }
        }
        let key = format!("slack:msg:{}:{}", message.channel, message.ts);
        let memory = self.config.message_memory;
        // Which event took the claim: its twin (the other event Slack sends for one mention)
        // finding the claim is a duplicate, even while the first still runs; only a redelivery
        // of the same event reads the progress markers.
        let owner = format!("{OWNER}:{}", message.event_id);
        match self.dedupe.claim(&key, memory).await {
            Ok(true) => {
                self.mark(&key, &owner).await;
                self.note_user(&message).await;
            }
            Ok(false) => match self.earlier_run(&key, &owner).await {
                Ok(EarlierRun::Twin) => {
                    tracing::debug!("message claimed by its twin event; nothing to do");
                    return RecordOutcome::Delivered;
                }
                Ok(EarlierRun::Finished) => {
                    tracing::debug!("message already handled (a retry, or its twin mention event)");
                    return RecordOutcome::Delivered;
                }
                // Claimed, but nothing with effects began: running it now runs it once.
                Ok(EarlierRun::NotStarted) => {
                    tracing::info!("an earlier run stopped before doing anything; running it")
                }
                Ok(EarlierRun::Interrupted) => return self.interrupted(&message, &key).await,
                Err(error) => return retry(format!("dedupe store: {error}")),
            },
            Err(error) => return retry(format!("dedupe store: {error}")),
        }
        let mut replies = Replies::new(self, &message, &key, deadline);
        if let Some(rates) = &self.rates {
            match rates.check(&message.thread_id).await {
                Ok(Verdict::Allowed) => {}
                Ok(Verdict::Refused { reply }) => {
                    if let Some(reply) = reply {
                        replies.send(reply).await;
                    }
                    self.mark(&key, DONE).await;
                    return RecordOutcome::Delivered;
                }
                // Nothing has run: the redelivery finds the claim without `started` and runs it.
                Err(error) => return retry(format!("rate counter: {error}")),
            }
        }
        if has_files {
            replies.start().await;
            let text = self.copy_files(&message.thread_id, &message.files).await;
            replies.send(text).await;
        }
        self.run(&message.thread_id, command, has_files, &mut replies)
            .await;
        self.mark(&key, DONE).await;
        RecordOutcome::Delivered
    }

    /// Remember that the message's author used its thread. Only a convenience for listings, so
    /// a failure is logged, never fatal.
    async fn note_user(&self, message: &IncomingMessage) {
        let (Some(store), Some(place)) = (&self.user_threads, SlackPlace::of(&message.thread_id))
        else {
            return;
        };
        let now = self.tb.clock.now();
        if let Err(error) = store
            .touch(&place.team, &message.user, &message.thread_id, now)
            .await
        {
            tracing::warn!(%error, "could not record who used this thread");
        }
    }

    /// What became of the run that claimed this message first.
    async fn earlier_run(
        &self,
        key: &str,
        owner: &str,
    ) -> Result<EarlierRun, threadbox_core::ports::StoreError> {
        if !self.dedupe.contains(&format!("{key}:{owner}")).await? {
            Ok(EarlierRun::Twin)
        } else if self.dedupe.contains(&format!("{key}:{DONE}")).await? {
            Ok(EarlierRun::Finished)
        } else if self.dedupe.contains(&format!("{key}:{STARTED}")).await? {
            Ok(EarlierRun::Interrupted)
        } else {
            Ok(EarlierRun::NotStarted)
        }
    }

    /// The message was being acted on when its worker died: say so in the thread, once, and do
    /// not act again (the command may have run, in part or in full).
    async fn interrupted(&self, message: &IncomingMessage, key: &str) -> RecordOutcome {
        match self
            .dedupe
            .claim(&format!("{key}:{INTERRUPTED}"), self.config.message_memory)
            .await
        {
            Ok(true) => {}
            Ok(false) => return RecordOutcome::Delivered,
            Err(error) => return retry(format!("dedupe store: {error}")),
        }
        tracing::warn!("the worker stopped while acting on this message; it is not run again");
        let mut replies = Replies::new(self, message, key, None);
        replies.send(INTERRUPTED_REPLY.to_owned()).await;
        self.mark(key, DONE).await;
        RecordOutcome::Delivered
    }

    /// Write `{key}:{marker}`. A failure is logged, not fatal: the marker only sharpens what a
    /// redelivery says.
    async fn mark(&self, key: &str, marker: &str) {
        let key = format!("{key}:{marker}");
        if let Err(error) = self.dedupe.claim(&key, self.config.message_memory).await {
            tracing::warn!(%error, marker, "could not record the message's progress");
        }
    }

    async fn run(
        &self,
        thread_id: &ThreadId,
        command: Command,
        has_files: bool,
        replies: &mut Replies<'_>,
    ) {
        match command {
            Command::Run(blocks) => {
                if let Some(refusal) = self.too_much_code(&blocks) {
                    replies.send(refusal).await;
                    return;
                }
                for (nth, block) in blocks.into_iter().enumerate() {
                    let Some(timeout) = replies.time_for_block(self.config.exec_timeout) else {
                        replies.send(OUT_OF_TIME_REPLY.to_owned()).await;
                        continue;
                    };
                    replies.start().await;
                    let runs = matches!(block.language, Language::Runnable(_));
                    let undo = match runs {
                        true => self.turn_checkpoint(thread_id, nth).await,
                        false => None,
                    };
                    let place = live::LivePlace {
                        channel: replies.message.channel.clone(),
                        thread_ts: replies.message.reply_thread_ts.clone(),
                    };
                    // A block whose whole time limit does not fit before the worker's deadline
                    // runs as a background process, which can outlive this worker.
                    let background =
                        replies.deadline.is_some() && timeout < self.config.exec_timeout;
                    let (reply, live_ts) = self
                        .run_block(thread_id, block, timeout, &place, background)
                        .await;
                    let undo_blocks = |text: &str| {
                        undo.as_ref()
                            .map(|cp| turns::with_undo(text, thread_id, cp))
                    };
                    match reply {
                        BlockReply::Text(text) => {
                            let blocks = undo_blocks(&text);
                            replies.finish_with(text, live_ts, blocks).await
                        }
                        BlockReply::WithFile {
                            text,
                            file,
                            fallback,
                        } => {
                            replies.send_with_file(text, file, fallback, live_ts).await;
                            if undo.is_some() {
                                let note = "Undo what that code block did to the files:";
                                replies.send_with(note.to_owned(), undo_blocks(note)).await;
                            }
                        }
                    }
                }
            }
            Command::Status => replies.send(self.status(thread_id).await).await,
            Command::Pause => {
                replies.start().await;
                replies.send(self.pause(thread_id).await.text()).await
            }
            Command::Resume => {
                replies.start().await;
                replies.send(self.resume(thread_id).await.text()).await
            }
            Command::Reset => {
                replies.start().await;
                replies.send(self.reset(thread_id).await.text()).await
            }
            Command::Files(path) => {
                replies
                    .send(self.files(thread_id, path.as_deref()).await)
                    .await
            }
            Command::Help => replies.send(help()).await,
            Command::Unknown(_) => {
                replies
                    .send(
                        "I didn't understand that. Send a code block to run it, or one of: \
                         `status`, `pause`, `resume`, `reset`, `files [path]`, `help`."
                            .to_owned(),
                    )
                    .await
            }
            // A file shared without words: the file reply says it all.
            Command::Empty if has_files => {}
            Command::Empty => replies.send(help()).await,
        }
    }

    /// Why a message's code is over the limits, as the one reply it gets; `None` when it may run.
    fn too_much_code(&self, blocks: &[CodeBlock]) -> Option<String> {
        let (max_blocks, max_chars) = (
            self.config.max_blocks_per_message,
            self.config.max_code_chars_per_message,
        );
        let chars: usize = blocks.iter().map(|b| b.code.chars().count()).sum();
        let what = if blocks.len() > max_blocks {
            format!(
                "{} code blocks; I run at most {max_blocks} per message",
                blocks.len()
            )
        } else if chars > max_chars {
            format!("{chars} characters of code; I run at most {max_chars} per message")
        } else {
            return None;
        };
        tracing::info!(blocks = blocks.len(), chars, "message over the code limits");
        Some(format!(
            ":no_entry: This message has {what}. Nothing was run. Send the code in smaller \
             messages, or put it in a file and run that."
        ))
    }

    /// Run a code block, live in `place` if it runs long; its reply, and the live message to
    /// edit into it, if one was posted.
    async fn run_block(
        &self,
        thread_id: &ThreadId,
        block: CodeBlock,
        timeout: Duration,
        place: &live::LivePlace,
        background: bool,
    ) -> (BlockReply, Option<String>) {
        let interpreter = match block.language {
            Language::Runnable(interpreter) => interpreter,
            Language::Unsupported(language) => {
                return (
                    BlockReply::Text(format!(
                        "I can't run `{}` code. I can run `bash`, `sh`, `python` and `node`: put \
                     the language after the opening fence, like ```python",
                        escape(&language)
                    )),
                    None,
                )
            }
        };
        if background {
            return self
                .run_in_background(thread_id, interpreter, &block.code, timeout, place)
                .await;
        }
        let request = ExecRequest {
            user: Default::default(),
            command: ExecCommand::Argv(interpreter.argv(&block.code)),
            cwd: None,
            env: Default::default(),
            stdin: None,
            timeout,
            output_cap: self.config.output_cap,
        };
        // The exec holds the sandbox for the command's duration, so it is never paused mid-run.
        let language = interpreter.name();
        let refusals_before = self.refusals_before(thread_id).await;
        let streamed = self.run_live(thread_id, request, language, place).await;
        let live_ts = streamed.live_ts;
        let result = match streamed.result {
            Ok(result) => result,
            Err(error) => return (BlockReply::Text(failure(&error)), live_ts),
        };
        // A failure the network may explain ends with what it refused (`refusals`).
        let hint = self
            .refusal_hint(thread_id, refusals_before, &result)
            .await
            .map(|hint| format!("\n{hint}"))
            .unwrap_or_default();
        let budget = self
            .config
            .reply_budget
            .saturating_sub(hint.chars().count());
        if format::fits_inline(language, &result, budget) {
            return (
                BlockReply::Text(format::exec_reply(language, &result, budget) + &hint),
                live_ts,
            );
        }
        // Too long for a message: the first lines inline, the whole output as a file.
        let filename = format!("{language}-output.txt");
        let reply = BlockReply::WithFile {
            text: format::exec_reply_with_file(language, &result, &filename) + &hint,
            fallback: format::exec_reply(language, &result, budget) + &hint,
            file: OutputFile {
                title: format!("{language} output"),
                bytes: format::output_file(&result).into_bytes(),
                filename,
            },
        };
        (reply, live_ts)
    }

    async fn status(&self, thread_id: &ThreadId) -> String {
        match self.tb.session(thread_id).await {
            Ok(Some(session)) => status_line(&session),
            Ok(None) => NO_SANDBOX.to_owned(),
            Err(error) => failure(&error.into()),
        }
    }

    async fn pause(&self, thread_id: &ThreadId) -> Outcome {
        match self.tb.pause(thread_id).await {
            Ok(_) => Outcome::Done(
                "Paused. Files are kept; the next command resumes the sandbox.".to_owned(),
            ),
            Err(UseCaseError::UnknownThread(_)) => Outcome::Refused(NO_SANDBOX.to_owned()),
            Err(UseCaseError::Held(_)) => Outcome::Refused(
                "A command is running, so the sandbox stays awake; try again when it finishes."
                    .to_owned(),
            ),
            Err(error) => Outcome::Refused(failure(&error)),
        }
    }

    async fn resume(&self, thread_id: &ThreadId) -> Outcome {
        match self.tb.resume(thread_id).await {
            Ok(handle) if handle.resumed => {
                Outcome::Done("Resumed: the sandbox is active.".to_owned())
            }
            Ok(_) => Outcome::Done("The sandbox is already active.".to_owned()),
            Err(UseCaseError::UnknownThread(_)) => Outcome::Refused(NO_SANDBOX.to_owned()),
            Err(error) => Outcome::Refused(failure(&error)),
        }
    }

    async fn reset(&self, thread_id: &ThreadId) -> Outcome {
        let result = match self.tb.session(thread_id).await {
            Ok(None) => self.tb.resolve(thread_id).await,
            Ok(Some(_)) => self.tb.reset(thread_id).await,
            Err(error) => Err(error.into()),
        };
        match result {
            Ok(handle) => Outcome::Done(format!(
                ":recycle: Reset: the old sandbox and all its files are gone. A fresh sandbox is \
                 ready (generation {}).",
                handle.generation
            )),
            Err(error) => Outcome::Refused(failure(&error)),
        }
    }
}

/// What a control (pause, resume, reset) came to, in words for the person who asked. A button's
/// success needs no words (the status card changes); a refusal does.
enum Outcome {
    Done(String),
    Refused(String),
}

impl Outcome {
    fn text(self) -> String {
        match self {
            Outcome::Done(text) | Outcome::Refused(text) => text,
        }
    }
}

/// What a redelivered message's earlier run got to.
enum EarlierRun {
    /// Another event for the same message (Slack's twin) took the claim.
    Twin,
    Finished,
    NotStarted,
    Interrupted,
}

/// Progress markers after the message's claim key (see the module docs).
const OWNER: &str = "owner";
const STARTED: &str = "started";
const DONE: &str = "done";
const INTERRUPTED: &str = "interrupted";

const INTERRUPTED_REPLY: &str = ":warning: This message was interrupted: the worker stopped while it was running (a timeout or a crash), so it may have run in part or in full. It is not run again, so nothing runs twice. Check with `files` or `status`, and send it again if needed.";
const OUT_OF_TIME_REPLY: &str = ":hourglass: This code block was not run: the worker ran out of time for this message. Send it again in a new message.";

fn retry(reason: String) -> RecordOutcome {
    tracing::warn!(%reason, "work item will be retried");
    RecordOutcome::Retry { retry_after: None }
}

pub(super) const NO_SANDBOX: &str =
    "This thread has no sandbox yet: send a code block to start one.";

fn help() -> String {
    "I run code in this thread's own sandbox: a Linux machine that keeps its files between \
     messages.\n\
     • A code block runs it: ```python, ```node, ```bash or ```sh (no language means bash).\n\
     • `status`: what the sandbox is doing.\n\
     • `pause` / `resume`: put it to sleep (files kept) or wake it.\n\
     • `reset`: throw it away with all its files and start fresh.\n\
     • `files [path]`: list a directory (default /home/user).\n\
     • Share a file here and it lands in /home/user/attachments."
        .to_owned()
}

pub(super) fn status_line(session: &Session) -> String {
    let sandbox = session
        .sandbox_id
        .as_deref()
        .map(|id| format!(" · `{}`", escape(id)))
        .unwrap_or_default();
    let active = session.last_activity_at.0.div_euclid(1000);
    let mut text = format!(
        "Sandbox *{}* · generation {}{sandbox} · last active <!date^{active}^{{date_short_pretty}} {{time_secs}}|at {active}>",
        session.status, session.generation
    );
    if let Some(error) = &session.last_error {
        text.push_str(&format!("\nLast error: {}", escape(error)));
    }
    text
}

/// A use-case error as a reply: what happened and what the person can do.
fn failure(error: &UseCaseError) -> String {
    match error {
        UseCaseError::Rejected(r) if r.kind == RejectKind::Expired => {
            ":warning: This thread's sandbox expired and was not replaced. Send `reset` to start \
             a fresh one (files from before are gone)."
                .to_owned()
        }
        UseCaseError::Rejected(r) if r.kind == RejectKind::Illegal => format!(
            "That can't be done while the sandbox is {}.",
            r.from.map_or("new", |s| s.as_str())
        ),
        UseCaseError::Busy { status, .. } => {
            format!("The sandbox is still {status}; try again in a moment.")
        }
        UseCaseError::Rejected(_) => {
            "The sandbox is busy changing state; try again in a moment.".to_owned()
        }
        UseCaseError::UnknownThread(_) => NO_SANDBOX.to_owned(),
        UseCaseError::Budget(exceeded) => crate::budget::budget_reply(exceeded),
        UseCaseError::Provider(threadbox_core::ports::ProviderError::LimitReached {
            limit,
            message,
            retry_after,
        }) => format!(
            ":hourglass: Not run: {} (`{}`). Send it again in {} s or so.",
            escape(message),
            limit.code(),
            retry_after.as_secs().max(1)
        ),
        other => format!(":x: {}", escape(&other.public_message())),
    }
}
