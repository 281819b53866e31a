//! The `SlackSink` port: a stand-in for Slack that keeps what it was sent, so `threadbox dev`
//! without a bot token can show (`GET /v1/slack/sink`, the dashboard) what would have been
//! posted: messages with their Block Kit blocks, ephemeral messages, shared files, modals opened
//! with `views.open` and App Home views. The SQLite adapter is the one implementation.

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use super::{SlackApi, StoreError};
use crate::domain::Millis;

/// One message the sink holds, as it now reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SinkMessage {
    pub ts: String,
    pub channel: String,
    pub thread_ts: Option<String>,
    /// mrkdwn; with `blocks`, the fallback Slack shows in notifications.
    pub text: String,
    /// The Block Kit blocks (a JSON array) as last posted or updated; `None` for a plain message.
    pub blocks: Option<Value>,
    /// Set for `chat.postEphemeral`: the one user who sees the message.
    pub ephemeral_to: Option<String>,
    /// Set for a shared file: the message is its initial comment.
    pub file: Option<SinkFile>,
    pub posted_at: Millis,
    pub updated_at: Millis,
    /// How many times `chat.update` replaced the text.
    pub edits: u32,
}

/// A file shared through the sink (the external upload flow), as a message shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SinkFile {
    /// `F…`, as `upload_file` returned it.
    pub id: String,
    pub name: String,
    pub title: String,
    /// Bytes.
    pub size: u64,
    /// The first [`FILE_PREVIEW_BYTES`] as text (invalid UTF-8 replaced).
    pub preview: String,
}

/// How much of a file its preview shows.
pub const FILE_PREVIEW_BYTES: usize = 4096;

/// Which kind of view the sink holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkViewKind {
    /// `views.open`.
    Modal,
    /// `views.publish`: a user's App Home tab.
    Home,
}

/// Where a modal is: shown, or gone (submitted, or closed with Cancel or the ×). A home view is
/// always `Open`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkViewState {
    Open,
    Submitted,
    Closed,
}

impl SinkViewState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Submitted => "submitted",
            Self::Closed => "closed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "open" => Some(Self::Open),
            "submitted" => Some(Self::Submitted),
            "closed" => Some(Self::Closed),
            _ => None,
        }
    }
}

/// A modal or App Home view the sink holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SinkView {
    /// `V…`, like Slack's view ids.
    pub id: String,
    pub kind: SinkViewKind,
    /// The modal's `trigger_id`; `None` for a home view.
    pub trigger_id: Option<String>,
    /// The home view's user; `None` for a modal.
    pub user: Option<String>,
    /// The view as the app sent it (`type`, `title`, `blocks`, `callback_id`,
    /// `private_metadata`, `submit`, `close`, ...).
    pub view: Value,
    pub state: SinkViewState,
    /// When it was opened (or last published).
    pub opened_at: Millis,
    pub updated_at: Millis,
}

/// Which messages to list.
#[derive(Clone, Debug, Default)]
pub struct SinkQuery {
    pub channel: Option<String>,
    /// Messages in this thread (replies and status messages).
    pub thread_ts: Option<String>,
    /// The most recent this many (1 to 1000), returned oldest first.
    pub limit: usize,
}

/// Slack's Web API as far as threadbox uses it, keeping every message and view for reading back.
#[async_trait]
pub trait SlackSink: SlackApi {
    async fn list(&self, query: SinkQuery) -> Result<Vec<SinkMessage>, StoreError>;

    /// One message by its `ts` (ts values are unique in the sink, across channels).
    async fn message(&self, ts: &str) -> Result<Option<SinkMessage>, StoreError>;

    /// Every home view (the latest per user) and the most recent `limit` modals (1 to 1000),
    /// open or not, newest first.
    async fn views(&self, limit: usize) -> Result<Vec<SinkView>, StoreError>;

    async fn view(&self, id: &str) -> Result<Option<SinkView>, StoreError>;

    /// Move a modal from `Open` to `to`. Returns false when the view is unknown or was not open
    /// (a modal is submitted or closed once).
    async fn finish_view(&self, id: &str, to: SinkViewState) -> Result<bool, StoreError>;

    /// Replace an open modal's view (a `response_action: update` answer to a submission).
    async fn replace_view(&self, id: &str, view: &Value) -> Result<bool, StoreError>;
}
