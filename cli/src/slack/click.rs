//! `threadbox slack click`: press a button of a thread's status card, or submit its open modal,
//! as a person in Slack would, against `threadbox dev` running without a bot token (its Slack
//! sink holds the messages and modals).
//!
//! - `threadbox slack click --thread slack:T:C:TS pause` finds, through the dev server's
//!   `GET /v1/slack/sink?thread_id=…` (with the API key), the latest message in the thread with
//!   a `pause` button, builds the `block_actions` request Slack would send (`local_click`),
//!   signs it with the signing secret `threadbox dev` uses, and posts it to
//!   `<url>/slack/interactions`.
//! - `threadbox slack click --thread slack:T:C:TS --submit` submits the thread's open modal (the
//!   reset confirmation, say) through `POST /v1/slack/sink/submit`: the dev server builds the
//!   same signed `view_submission` with `local_click` and also marks the modal submitted in its
//!   sink, which a request posted from here could not.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use serde_json::{json, Value};
use threadbox_core::domain::ThreadId;
use threadbox_slack::local_click::{
    self, ClickedMessage, FORM_CONTENT_TYPE, INTERACTIONS_PATH, LOCAL_USER,
};
use threadbox_slack::signature::{SIGNATURE_HEADER, TIMESTAMP_HEADER};
use threadbox_slack::thread::SlackPlace;

use super::secret;
use crate::client::ClientError;

#[derive(clap::Args, Debug)]
pub struct ClickArgs {
    /// The Slack thread: slack:TEAM:CHANNEL:TS (or slack:TEAM:DCHANNEL for a DM).
    #[arg(long)]
    pub thread: String,

    /// The button's action id: pause, resume or reset.
    #[arg(required_unless_present = "submit", conflicts_with = "submit")]
    pub action: Option<String>,

    /// Submit the thread's open modal (the reset confirmation) instead of clicking a button.
    #[arg(long)]
    pub submit: bool,

    /// Base URL of `threadbox dev`.
    #[arg(long, env = "THREADBOX_URL", default_value = crate::client::DEFAULT_URL)]
    pub url: String,

    /// API key, sent as `Authorization: Bearer <key>` (not needed when the API has no keys).
    #[arg(long, env = "THREADBOX_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// The signing secret; prefer the environment variable, flags show in `ps`. Without either,
    /// the secret `threadbox dev` made in its data directory is used.
    #[arg(long, env = "SLACK_SIGNING_SECRET", hide_env_values = true)]
    pub signing_secret: Option<String>,

    /// Where `threadbox dev` keeps its data (for its generated signing secret).
    #[arg(long, env = "THREADBOX_DATA_DIR", default_value = ".threadbox")]
    pub data_dir: PathBuf,
}

/// The button to press, found in the sink's messages.
#[derive(Debug, PartialEq)]
pub struct Target {
    pub message: Value,
    pub button: local_click::Button,
}

/// The newest message (the sink lists oldest first) with a button `action_id` that the local
/// user can see (public, or ephemeral to them).
pub fn find_target(messages: &[Value], action_id: &str) -> Option<Target> {
    messages.iter().rev().find_map(|message| {
        let visible = message["ephemeral_to"]
            .as_str()
            .is_none_or(|user| user == LOCAL_USER);
        let button = local_click::find_button(&message["blocks"], action_id)?;
        visible.then(|| Target {
            message: message.clone(),
            button,
        })
    })
}

/// Every button action id in the thread, for the error when the asked-for one is missing.
fn offered(messages: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for message in messages {
        for id in local_click::action_ids(&message["blocks"]) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
    }
    ids
}

/// The thread id, checked to be a Slack one.
pub fn slack_thread(raw: &str) -> anyhow::Result<(ThreadId, SlackPlace)> {
    let thread = ThreadId::parse(raw).context("--thread")?;
    let Some(place) = SlackPlace::of(&thread) else {
        bail!("--thread must be a Slack thread id (slack:TEAM:CHANNEL[:TS]), not {thread}");
    };
    Ok((thread, place))
}

struct Dev {
    http: reqwest::Client,
    base: String,
    api_key: Option<String>,
}

impl Dev {
    fn request(&self, method: reqwest::Method, path: &str) -> (reqwest::RequestBuilder, String) {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method, &url);
        if let Some(key) = &self.api_key {
            request = request.header(AUTHORIZATION, format!("Bearer {key}"));
        }
        (request, url)
    }

    /// Send and read a JSON answer, with the API's errors made readable.
    async fn json(&self, request: reqwest::RequestBuilder, url: &str) -> anyhow::Result<Value> {
        let response = request
            .send()
            .await
            // Says what failed and asks whether `threadbox dev` is running.
            .map_err(|e| ClientError::unreachable(url, &e))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ClientError::unreachable(url, &e))?;
        if status == reqwest::StatusCode::NOT_FOUND && url.contains("/v1/slack/sink?") {
            bail!(
                "{} has no Slack sink: threadbox dev posts to Slack itself when SLACK_BOT_TOKEN \
                 is set, so click the buttons in Slack",
                self.base
            );
        }
        if !status.is_success() {
            return Err(ClientError::from_response(status.as_u16(), None, &bytes).into());
        }
        serde_json::from_slice(&bytes).with_context(|| format!("{url} did not answer JSON"))
    }
}

pub async fn run(args: ClickArgs) -> anyhow::Result<()> {
    let (thread, place) = slack_thread(&args.thread)?;
    let dev = Dev {
        http: reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(15))
            .build()
            .context("building the HTTP client")?,
        base: args.url.trim().trim_end_matches('/').to_owned(),
        api_key: args
            .api_key
            .as_deref()
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(str::to_owned),
    };
    let query = format!("/v1/slack/sink?thread_id={thread}&limit=1000");
    let (request, url) = dev.request(reqwest::Method::GET, &query);
    let sink = dev.json(request, &url).await?;
    let messages = sink["messages"].as_array().cloned().unwrap_or_default();

    if args.submit {
        let views = sink["views"].as_array().cloned().unwrap_or_default();
        let Some(modal) = views.iter().find(|v| {
            v["kind"] == "modal"
                && v["state"] == "open"
                && local_click::view_is_for_thread(&v["view"], thread.as_str())
        }) else {
            bail!("no open modal for {thread} (a reset button opens one: threadbox slack click --thread {thread} reset)");
        };
        let view_id = modal["id"].as_str().unwrap_or_default();
        let (request, url) = dev.request(reqwest::Method::POST, "/v1/slack/sink/submit");
        let answer = dev
            .json(request.json(&json!({ "view_id": view_id })), &url)
            .await?;
        let callback = modal["view"]["callback_id"].as_str().unwrap_or("modal");
        println!(
            "submitted {callback} ({view_id}) for {thread}: {INTERACTIONS_PATH} answered {}; the modal is {}",
            answer["status"], answer["state"].as_str().unwrap_or("?")
        );
        return Ok(());
    }

    let action = args.action.as_deref().unwrap_or_default();
    let Some(Target { message, button }) = find_target(&messages, action) else {
        let buttons = offered(&messages);
        if messages.is_empty() {
            bail!("the sink has no messages in {thread} yet (start it with threadbox slack send --thread {thread} …)");
        }
        bail!(
            "no message in {thread} has a {action:?} button (buttons there: {})",
            if buttons.is_empty() {
                "none".to_owned()
            } else {
                buttons.join(", ")
            }
        );
    };
    let secret = secret::load(&args.data_dir, args.signing_secret.as_deref())?;
    let channel = message["channel"].as_str().unwrap_or(&place.channel);
    // The team of --thread, or of the button's value (threadbox's buttons carry the thread id).
    let team = local_click::team_for(
        std::iter::once(thread.as_str()).chain(button.value.as_deref()),
        channel,
    );
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("the clock is before 1970")?;
    let clicked = ClickedMessage {
        channel,
        ts: message["ts"].as_str().unwrap_or_default(),
        thread_ts: message["thread_ts"].as_str(),
        text: message["text"].as_str().unwrap_or_default(),
        blocks: &message["blocks"],
        ephemeral: !message["ephemeral_to"].is_null(),
    };
    let payload = local_click::block_actions(&team, &clicked, &button, now.as_micros());
    let signed = local_click::sign(&secret, &payload, now.as_secs() as i64);
    let url = format!("{}{INTERACTIONS_PATH}", dev.base);
    let response = dev
        .http
        .post(&url)
        .header(CONTENT_TYPE, FORM_CONTENT_TYPE)
        .header(TIMESTAMP_HEADER, signed.timestamp.to_string())
        .header(SIGNATURE_HEADER, signed.signature)
        .body(signed.body)
        .send()
        .await
        .map_err(|e| ClientError::unreachable(&url, &e))?;
    let status = response.status();
    let answer = response.text().await.unwrap_or_default();
    if !status.is_success() {
        bail!("{url} answered {status}: {}", answer.trim());
    }
    let label = button.text["text"].as_str().unwrap_or(action);
    println!(
        "clicked {label} ({action}) on message {} in {thread}: {INTERACTIONS_PATH} answered {}",
        clicked.ts,
        status.as_u16()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(ts: &str, actions: &[&str], ephemeral_to: Option<&str>) -> Value {
        let elements: Vec<Value> = actions
            .iter()
            .map(|a| {
                json!({"type": "button", "action_id": a, "value": "slack:T1:C1:1.000001",
                            "text": {"type": "plain_text", "text": a}})
            })
            .collect();
        json!({"ts": ts, "channel": "C1", "thread_ts": "1.000001", "text": "card",
               "ephemeral_to": ephemeral_to,
               "blocks": [{"type": "actions", "elements": elements}]})
    }

    #[test]
    fn the_newest_visible_message_with_the_button_wins() {
        let messages = [
            card("1.000002", &["pause", "reset"], None),
            json!({"ts": "1.000003", "channel": "C1", "text": "plain", "blocks": null}),
            card("1.000004", &["resume", "reset"], None),
            card("1.000005", &["reset"], Some("USOMEONE")),
        ];
        let target = find_target(&messages, "reset").unwrap();
        assert_eq!(target.message["ts"], "1.000004");
        assert_eq!(
            find_target(&messages, "pause").unwrap().message["ts"],
            "1.000002"
        );
        assert_eq!(find_target(&messages, "explode"), None);
        assert_eq!(offered(&messages), ["pause", "reset", "resume"]);
    }

    #[test]
    fn only_slack_thread_ids_are_taken() {
        assert!(slack_thread("slack:T1:C1:1.000001").is_ok());
        assert!(slack_thread("agent-1").is_err());
        assert!(slack_thread("slack:t1:C1").is_err());
    }
}
