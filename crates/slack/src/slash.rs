//! `/sandbox`: the slash command. Slack posts it form-encoded to `POST /slack/commands`, signed
//! like events; the route checks the signature, answers `help` at once, and queues the rest to
//! the worker, which answers with a message only the caller sees.
//!
//! - `/sandbox list`: the caller's threads in this channel, with their states and buttons;
//! - `/sandbox status|pause|resume|reset [thread]`: one thread, named by a link to its first
//!   message or by its `ts`, or by default the caller's most recently used thread in this
//!   channel (in a DM, the DM's own sandbox). `reset` answers with a Reset button, which asks
//!   for confirmation in a modal like the status card's;
//! - `/sandbox fork [thread]`: a new thread in the channel whose sandbox starts with a copy of
//!   that thread's files (`worker::turns`), each linking the other.
//!
//! A slash command carries no thread (Slack does not say where in a channel it was typed),
//! which is why the default is the caller's latest thread.

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::ingress::SlackIngress;
use super::thread::is_ts;
use super::work::{SlashCommand, WorkItem};
use threadbox_api::http::ApiError;

/// The command's name, as the manifest declares it.
pub const COMMAND: &str = "/sandbox";

/// The fields of Slack's slash command form that threadbox reads.
#[derive(Deserialize)]
struct CommandForm {
    team_id: String,
    channel_id: String,
    user_id: String,
    #[serde(default)]
    text: String,
    trigger_id: String,
}

/// What a `/sandbox` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlashRequest {
    List,
    Status(Option<String>),
    Pause(Option<String>),
    Resume(Option<String>),
    Reset(Option<String>),
    /// Start a new thread in the channel with a copy of this one's files.
    Fork(Option<String>),
    Help,
    Unknown(String),
}

/// Read the words after `/sandbox`.
pub fn parse(text: &str) -> SlashRequest {
    let mut words = text.split_whitespace();
    let verb = words.next().unwrap_or("").to_ascii_lowercase();
    let target = words.next().map(str::to_owned);
    let extra = words.next().is_some();
    if extra {
        return SlashRequest::Unknown(text.trim().to_owned());
    }
    match (verb.as_str(), target) {
        ("list" | "ls", None) => SlashRequest::List,
        ("status", target) => SlashRequest::Status(target),
        ("pause", target) => SlashRequest::Pause(target),
        ("resume", target) => SlashRequest::Resume(target),
        ("reset", target) => SlashRequest::Reset(target),
        ("fork", target) => SlashRequest::Fork(target),
        ("" | "help", None) => SlashRequest::Help,
        _ => SlashRequest::Unknown(text.trim().to_owned()),
    }
}

/// A thread's root `ts` from what a person pastes: a `ts` (`1700000000.000100`), or a message
/// link (`https://team.slack.com/archives/C123/p1700000000000100`, where the `ts` is written
/// without its dot; a reply's link names its thread in `thread_ts=`).
pub fn thread_ts_of(target: &str) -> Option<String> {
    let target = target.trim().trim_start_matches('<').trim_end_matches('>');
    let target = target.split('|').next().unwrap_or(target);
    if is_ts(target) {
        return Some(target.to_owned());
    }
    if let Some((_, query)) = target.split_once('?') {
        for pair in query.split('&') {
            if let Some(ts) = pair.strip_prefix("thread_ts=") {
                return is_ts(ts).then(|| ts.to_owned());
            }
        }
    }
    let path = target.split('?').next().unwrap_or(target);
    let last = path.rsplit('/').next()?;
    let digits = last.strip_prefix('p')?;
    if digits.len() <= 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (secs, micros) = digits.split_at(digits.len() - 6);
    Some(format!("{secs}.{micros}"))
}

pub fn usage() -> String {
    "`/sandbox list`: your threads in this channel and their sandboxes\n\
     `/sandbox status [thread]`: a thread's sandbox\n\
     `/sandbox pause [thread]` / `/sandbox resume [thread]`: put it to sleep (files kept) or wake it\n\
     `/sandbox reset [thread]`: throw it away with its files and start fresh (asks first)\n\
     `/sandbox fork [thread]`: start a new thread here whose sandbox has a copy of its files\n\
     _[thread]_ is a link to the thread's first message; without one, your latest thread in this channel."
        .to_owned()
}

impl SlackIngress {
    /// Handle one slash command request from its headers and raw body.
    pub async fn handle_command(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Response, ApiError> {
        self.verify(headers, body)?;
        let form: CommandForm = serde_urlencoded::from_bytes(body).map_err(|error| {
            ApiError::bad_request(
                "invalid_form",
                format!("not a Slack slash command: {error}"),
            )
        })?;
        if parse(&form.text) == SlashRequest::Help {
            return Ok(ephemeral(&usage()));
        }
        let command = SlashCommand {
            id: form.trigger_id.clone(),
            team: form.team_id,
            channel: form.channel_id,
            user: form.user_id,
            text: form.text,
        };
        let item = WorkItem::Slash(command);
        let queued = self
            .queue_once(
                &format!("slack:slash:{}", form.trigger_id),
                &item,
                &form.trigger_id,
            )
            .await?;
        tracing::info!(queued, "Slack slash command");
        // Empty: the worker's answer is the reply, and the command is not echoed to the channel.
        Ok(StatusCode::OK.into_response())
    }
}

/// An answer in the command's HTTP response: shown only to the caller.
fn ephemeral(text: &str) -> Response {
    (
        StatusCode::OK,
        Json(json!({ "response_type": "ephemeral", "text": text })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_after_the_command_name_the_request() {
        assert_eq!(parse(""), SlashRequest::Help);
        assert_eq!(parse("  LIST "), SlashRequest::List);
        assert_eq!(parse("status"), SlashRequest::Status(None));
        assert_eq!(
            parse("pause 1700000000.000100"),
            SlashRequest::Pause(Some("1700000000.000100".into()))
        );
        assert!(matches!(parse("list everything"), SlashRequest::Unknown(_)));
        assert!(matches!(parse("launch"), SlashRequest::Unknown(_)));
        assert!(matches!(parse("reset a b"), SlashRequest::Unknown(_)));
    }

    #[test]
    fn a_thread_is_named_by_its_ts_or_a_link() {
        assert_eq!(
            thread_ts_of("1700000000.000100").as_deref(),
            Some("1700000000.000100")
        );
        assert_eq!(
            thread_ts_of("<https://acme.slack.com/archives/C123/p1700000000000100>").as_deref(),
            Some("1700000000.000100")
        );
        assert_eq!(
            thread_ts_of(
                "https://acme.slack.com/archives/C123/p1700000001000200?thread_ts=1700000000.000100&cid=C123"
            )
            .as_deref(),
            Some("1700000000.000100")
        );
        assert_eq!(thread_ts_of("yesterday"), None);
        assert_eq!(
            thread_ts_of("https://acme.slack.com/archives/C123/p12"),
            None
        );
    }
}
