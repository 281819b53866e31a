//! What travels on the work queue from the ingress to the worker, as JSON.
//!
//! The ingress does only what must happen before Slack's 3-second deadline (verify, dedupe,
//! enqueue); everything the worker needs is in the message, so it never calls Slack to learn
//! what was said.

use serde::{Deserialize, Serialize};

use crate::domain::ThreadId;
use crate::ports::SlackFile;

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
}

impl WorkItem {
    /// The FIFO group: one thread's work runs in order, one item at a time.
    pub fn group_id(&self) -> &str {
        match self {
            WorkItem::Message(m) => m.thread_id.as_str(),
            WorkItem::Reply(r) => r.thread_id.as_str(),
        }
    }
}
