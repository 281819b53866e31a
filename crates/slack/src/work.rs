//! What travels on the work queue from the ingress to the worker, as JSON.
//!
//! The ingress does only what must happen before Slack's 3-second deadline (verify, dedupe,
//! enqueue); everything the worker needs is in the message, so it never calls Slack to learn
//! what was said.

use serde::{Deserialize, Serialize};

use super::blocks::Action;
use threadbox_core::domain::{CheckpointId, ThreadId};
use threadbox_core::ports::SlackFile;

/// The work queue's name (the SQLite queue's name in `threadbox dev`; the SQS queue is named
/// after it).
pub const WORK_QUEUE: &str = "work";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WorkItem {
    /// A person's message: a command, code to run, or files to copy in.
    Message(IncomingMessage),
    /// A reply the worker could not post at once (Slack rate limit): posted by a later attempt,
    /// so the command that produced it never runs twice.
    Reply(PendingReply),
    /// A button clicked (on a status card, an ephemeral answer or the App Home), or a reset
    /// confirmed in its modal.
    Action(ActionRequest),
    /// A `/sandbox …` slash command.
    Slash(SlashCommand),
    /// Someone opened the app's Home tab: publish their view.
    HomeOpened(HomeOpened),
    /// A code block that outlived its worker's time, running on as a background process: a
    /// later worker follows it and posts its output when it ends.
    Background(BackgroundRun),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackgroundRun {
    pub thread_id: ThreadId,
    pub process_id: String,
    /// The code block's language, for the reply.
    pub language: String,
    pub channel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_ts: Option<String>,
    /// When the block started (ms since the epoch) and how long it may run in all.
    pub started_at_ms: i64,
    pub limit_ms: u64,
    /// How many workers have followed it so far: part of the next hand-over's dedup id.
    pub round: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRequest {
    /// The click's identity (`{team}:{user}:{action_ts}`, or `view:{view_id}` for a modal): its
    /// dedupe key and queue dedup id, so a redelivered click acts once.
    pub id: String,
    pub thread_id: ThreadId,
    pub action: Action,
    /// The checkpoint an Undo restores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointId>,
    pub team: String,
    pub user: String,
    /// Where an answer only the clicker sees goes: the channel (and thread) the clicked message
    /// is in; `None` for the App Home, whose answer is the refreshed Home itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_in: Option<AnswerPlace>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerPlace {
    pub channel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_ts: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlashCommand {
    /// The command's `trigger_id`: unique per invocation, its dedupe key.
    pub id: String,
    pub team: String,
    pub channel: String,
    pub user: String,
    /// What followed `/sandbox`.
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HomeOpened {
    pub event_id: String,
    pub team: String,
    pub user: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncomingMessage {
    /// Slack's `event_id` (the queue's deduplication id).
    pub event_id: String,
    pub thread_id: ThreadId,
    pub channel: String,
    /// The message's own ts: with the channel, the identity of the message (an `app_mention`
    /// and a `message` event for the same words share it).
    pub ts: String,
    /// Where replies go: the thread, or `None` for a DM's top level.
    pub reply_thread_ts: Option<String>,
    pub user: String,
    /// The text with leading mentions of the app removed, still in Slack's escaped form.
    pub text: String,
    #[serde(default)]
    pub files: Vec<SlackFile>,
    /// Said to the app: an @mention or a DM. Other messages in a thread only count when the
    /// thread already has a sandbox and they are a command or code.
    pub addressed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingReply {
    pub thread_id: ThreadId,
    pub channel: String,
    pub thread_ts: Option<String>,
    pub text: String,
    /// The reply's identity (`{event_id}:reply:{n}`, also its queue dedup id): once posted it is
    /// recorded, so a redelivery after a crash does not post it again. Absent in replies queued
    /// before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_id: Option<String>,
    /// The reply's Block Kit blocks (a code block's result with its Undo button), posted with
    /// `text` as their fallback, so a reply a rate limit held back keeps its buttons. Absent in
    /// replies of text alone, and in those queued before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<Vec<serde_json::Value>>,
}

impl WorkItem {
    /// The FIFO group: one thread's work runs in order, one item at a time.
    /// A button shares its thread's group, so a click never races a command in that thread.
    /// A slash command or a Home view names no thread until the worker resolves it: they go
    /// in order per conversation, and per person.
    pub fn group_id(&self) -> String {
        match self {
            WorkItem::Message(m) => m.thread_id.to_string(),
            WorkItem::Reply(r) => r.thread_id.to_string(),
            WorkItem::Action(a) => a.thread_id.to_string(),
            WorkItem::Slash(s) => format!("slack:{}:{}", s.team, s.channel),
            WorkItem::HomeOpened(h) => format!("slack-home:{}:{}", h.team, h.user),
            // Not the thread's own group: following it must not hold up the thread's messages.
            WorkItem::Background(b) => format!("slack-background:{}", b.thread_id),
        }
    }
}
