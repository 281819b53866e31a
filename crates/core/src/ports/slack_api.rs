//! The `SlackApi` port: the few Web API calls threadbox makes. The reqwest client talks to Slack;
//! the SQLite sink stands in for it in `threadbox dev` without a bot token; tests use a fake.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `chat.postMessage`: a message in a channel, or in a thread when `thread_ts` is set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostMessage {
    pub channel: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_ts: Option<String>,
    /// mrkdwn text; with `blocks`, the fallback shown in notifications and read by screen
    /// readers.
    pub text: String,
    /// Block Kit blocks (`slack::blocks` builds them), shown instead of `text` when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<Vec<Value>>,
}

/// `chat.update`: replace the text (and blocks) of a message the app posted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateMessage {
    pub channel: String,
    pub ts: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<Vec<Value>>,
}

/// `chat.postEphemeral`: a message only `user` sees, in a channel (or thread) they are in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EphemeralMessage {
    pub channel: String,
    pub user: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_ts: Option<String>,
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<Vec<Value>>,
}

/// A file to share in a channel or thread through Slack's external upload flow
/// (`files.getUploadURLExternal`, the bytes to the URL it gives, `files.completeUploadExternal`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileUpload {
    pub channel: String,
    pub thread_ts: Option<String>,
    /// The file's name (`output.txt`); Slack picks the snippet's highlighting from it.
    pub filename: String,
    pub title: String,
    /// mrkdwn posted with the file, as a message of its own.
    pub initial_comment: String,
    pub bytes: Vec<u8>,
}

/// A posted message's address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Posted {
    pub channel: String,
    pub ts: String,
}

/// A file shared in a message, as events and `files.info` describe it (the fields we use).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlackFile {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default)]
    pub url_private_download: Option<String>,
    /// `check_file_info` when the event carries only the id (shared channels): ask `files.info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_access: Option<String>,
}

/// What went wrong talking to Slack, typed so callers choose retry or give up without reading
/// message text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlackError {
    /// HTTP 429, or `ok:false` with `ratelimited`: wait `retry_after` (Slack's `Retry-After`).
    #[error("Slack rate limit on {method}{}", retry_after.map(|d| format!("; retry after {} s", d.as_secs())).unwrap_or_default())]
    RateLimited {
        method: String,
        retry_after: Option<Duration>,
    },
    /// Slack answered `{"ok": false, "error": code}`.
    #[error("Slack {method} failed: {code}")]
    Api { method: String, code: ApiErrorCode },
    /// A download over the caller's size cap; nothing was kept.
    #[error("file is {size} bytes; the limit is {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    /// Network, timeout, 5xx, or a response that is not Slack's JSON: retrying may help.
    #[error("Slack unreachable on {method}: {detail}")]
    Transport { method: String, detail: String },
    /// This setup cannot do it (the local sink has no files to download).
    #[error("{0}")]
    Unsupported(String),
}

impl SlackError {
    /// Whether trying the same call later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            SlackError::RateLimited { .. } | SlackError::Transport { .. } => true,
            SlackError::Api { code, .. } => code.is_transient(),
            SlackError::TooLarge { .. } | SlackError::Unsupported(_) => false,
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            SlackError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub fn code(&self) -> Option<&ApiErrorCode> {
        match self {
            SlackError::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// Slack's `error` strings that threadbox acts on; the rest are kept verbatim in `Other`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiErrorCode {
    /// Our token is wrong, revoked or lacks a scope: nothing works until an operator fixes it.
    InvalidAuth,
    NotAuthed,
    TokenRevoked,
    AccountInactive,
    MissingScope,
    /// The channel is unknown, archived, or the app is not in it.
    ChannelNotFound,
    NotInChannel,
    IsArchived,
    /// The message to update is gone (deleted by a person) or not ours to edit.
    MessageNotFound,
    CantUpdateMessage,
    MsgTooLong,
    NoText,
    FileNotFound,
    /// Slack's own trouble: try again.
    InternalError,
    FatalError,
    ServiceUnavailable,
    RequestTimeout,
    Ratelimited,
    Other(String),
}

impl ApiErrorCode {
    pub fn parse(code: &str) -> Self {
        match code {
            "invalid_auth" => Self::InvalidAuth,
            "not_authed" => Self::NotAuthed,
            "token_revoked" | "token_expired" => Self::TokenRevoked,
            "account_inactive" => Self::AccountInactive,
            "missing_scope" => Self::MissingScope,
            "channel_not_found" => Self::ChannelNotFound,
            "not_in_channel" => Self::NotInChannel,
            "is_archived" => Self::IsArchived,
            "message_not_found" => Self::MessageNotFound,
            "cant_update_message" | "edit_window_closed" => Self::CantUpdateMessage,
            "msg_too_long" => Self::MsgTooLong,
            "no_text" => Self::NoText,
            "file_not_found" | "file_deleted" => Self::FileNotFound,
            "internal_error" => Self::InternalError,
            "fatal_error" => Self::FatalError,
            "service_unavailable" => Self::ServiceUnavailable,
            "request_timeout" => Self::RequestTimeout,
            "ratelimited" | "rate_limited" => Self::Ratelimited,
            other => Self::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::InvalidAuth => "invalid_auth",
            Self::NotAuthed => "not_authed",
            Self::TokenRevoked => "token_revoked",
            Self::AccountInactive => "account_inactive",
            Self::MissingScope => "missing_scope",
            Self::ChannelNotFound => "channel_not_found",
            Self::NotInChannel => "not_in_channel",
            Self::IsArchived => "is_archived",
            Self::MessageNotFound => "message_not_found",
            Self::CantUpdateMessage => "cant_update_message",
            Self::MsgTooLong => "msg_too_long",
            Self::NoText => "no_text",
            Self::FileNotFound => "file_not_found",
            Self::InternalError => "internal_error",
            Self::FatalError => "fatal_error",
            Self::ServiceUnavailable => "service_unavailable",
            Self::RequestTimeout => "request_timeout",
            Self::Ratelimited => "ratelimited",
            Self::Other(code) => code,
        }
    }

    /// Errors on Slack's side that a later attempt may not meet.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::InternalError
                | Self::FatalError
                | Self::ServiceUnavailable
                | Self::RequestTimeout
                | Self::Ratelimited
        )
    }
}

impl std::fmt::Display for ApiErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[async_trait]
pub trait SlackApi: Send + Sync {
    /// `chat.postMessage`.
    async fn post_message(&self, message: &PostMessage) -> Result<Posted, SlackError>;

    /// `chat.update`.
    async fn update_message(&self, update: &UpdateMessage) -> Result<(), SlackError>;

    /// `files.info`: a file's full description, for events that carry only its id.
    async fn file_info(&self, file_id: &str) -> Result<SlackFile, SlackError>;

    /// Download a file's bytes from its `url_private_download` with the bot token, giving up
    /// with `TooLarge` as soon as more than `max_bytes` arrive.
    async fn download_file(&self, url: &str, max_bytes: u64) -> Result<Vec<u8>, SlackError>;

    /// `chat.postEphemeral`.
    async fn post_ephemeral(&self, message: &EphemeralMessage) -> Result<(), SlackError>;

    /// `views.open`: show a modal to the person whose click or command gave `trigger_id`
    /// (valid for 3 seconds after it was issued).
    async fn open_view(&self, trigger_id: &str, view: &Value) -> Result<(), SlackError>;

    /// `views.publish`: set `user`'s App Home tab to `view`.
    async fn publish_view(&self, user: &str, view: &Value) -> Result<(), SlackError>;

    /// Share a file: Slack's external upload flow, three calls. Returns the file's id.
    async fn upload_file(&self, upload: &FileUpload) -> Result<String, SlackError>;

    /// Whether `user` is a member of `channel` (`conversations.members`, every page).
    async fn is_member(&self, channel: &str, user: &str) -> Result<bool, SlackError>;
}

/// Slack's `ts` shape: seconds, a dot, six digits of microseconds (`1767225600.000100`).
pub fn is_ts(value: &str) -> bool {
    value.split_once('.').is_some_and(|(s, m)| {
        !s.is_empty()
            && m.len() == 6
            && s.bytes().all(|b| b.is_ascii_digit())
            && m.bytes().all(|b| b.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_round_trip_and_classify() {
        for code in [
            "invalid_auth",
            "channel_not_found",
            "message_not_found",
            "internal_error",
            "ratelimited",
            "something_new",
        ] {
            assert_eq!(ApiErrorCode::parse(code).as_str(), code);
        }
        let api = |code: &str| SlackError::Api {
            method: "chat.postMessage".into(),
            code: ApiErrorCode::parse(code),
        };
        assert!(!api("channel_not_found").is_retryable());
        assert!(!api("invalid_auth").is_retryable());
        assert!(api("internal_error").is_retryable());
        assert!(SlackError::RateLimited {
            method: "chat.update".into(),
            retry_after: Some(Duration::from_secs(3))
        }
        .is_retryable());
    }
}
