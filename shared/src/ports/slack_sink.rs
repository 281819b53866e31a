//! The `SlackSink` port: a stand-in for Slack that keeps what it was sent, so `threadbox dev`
//! without a bot token can show (`GET /v1/slack/sink`, the dashboard) what would have been
//! posted. The SQLite adapter is the one implementation.

use async_trait::async_trait;
use serde::Serialize;

use super::{SlackApi, StoreError};
use crate::domain::Millis;

/// One message the sink holds, as it now reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SinkMessage {
    pub ts: String,
    pub channel: String,
    pub thread_ts: Option<String>,
    pub text: String,
    pub posted_at: Millis,
    pub updated_at: Millis,
    /// How many times `chat.update` replaced the text.
    pub edits: u32,
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

/// Slack's Web API as far as threadbox uses it, keeping every message for reading back.
#[async_trait]
pub trait SlackSink: SlackApi {
    async fn list(&self, query: SinkQuery) -> Result<Vec<SinkMessage>, StoreError>;
}
