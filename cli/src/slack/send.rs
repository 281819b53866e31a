//! `threadbox slack send`: post a correctly signed Slack event to a local ingress, as Slack
//! would, so the whole Slack flow (ingress, queue, worker, sandbox, replies in the sink) can be
//! tried without Slack.
//!
//! The thread id says what to send:
//! - `slack:T:C:TS`: an @mention inside the thread rooted at TS;
//! - `slack:T:D…` (a DM channel id starts with `D`): a direct message to the app;
//! - `slack:T:C`: a new top-level @mention in channel C, which starts a thread at its own ts
//!   (the command prints that thread's id, for follow-ups).

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use threadbox_core::domain::ThreadId;
use threadbox_slack::signature::{SIGNATURE_HEADER, TIMESTAMP_HEADER};
// The events come from the local workspace's one developer (who also clicks), and mention the
// app's own user at the start of channel messages.
use threadbox_slack::local_click::{APP_USER, LOCAL_USER};
use threadbox_slack::thread::SlackPlace;
use threadbox_slack::{SigningSecret, EVENTS_PATH};

use super::secret;

#[derive(clap::Args, Debug)]
pub struct SendArgs {
    /// The Slack thread id to write in: slack:TEAM:CHANNEL:TS, slack:TEAM:DCHANNEL (a DM), or
    /// slack:TEAM:CHANNEL (a new thread).
    #[arg(long)]
    pub thread: String,

    /// The message text, as a person would type it (code in ``` fences runs).
    pub text: String,

    /// Base URL of `threadbox dev` (or the full `/slack/events` URL).
    #[arg(long, env = "THREADBOX_URL", default_value = crate::client::DEFAULT_URL)]
    pub url: String,

    /// The signing secret; prefer the environment variable, flags show in `ps`. Without either,
    /// the secret `threadbox dev` made in its data directory is used.
    #[arg(long, env = "SLACK_SIGNING_SECRET", hide_env_values = true)]
    pub signing_secret: Option<String>,

    /// Where `threadbox dev` keeps its data (for its generated signing secret).
    #[arg(long, env = "THREADBOX_DATA_DIR", default_value = ".threadbox")]
    pub data_dir: PathBuf,
}

/// What to post, derived from the thread id.
#[derive(Debug, PartialEq)]
pub struct Outgoing {
    pub body: String,
    /// The thread the message lands in.
    pub thread_id: String,
    pub event_id: String,
}

/// Build the Events API body for `text` in `thread`, at `now_micros`.
pub fn event_for(thread: &str, text: &str, now_micros: u128) -> anyhow::Result<Outgoing> {
    let thread_id = ThreadId::parse(thread).context("--thread")?;
    let Some(place) = SlackPlace::of(&thread_id) else {
        bail!("--thread must be a Slack thread id (slack:TEAM:CHANNEL[:TS]), not {thread_id}");
    };
    let ts = format!("{}.{:06}", now_micros / 1_000_000, now_micros % 1_000_000);
    let event_id = format!("Ev{}", uuid::Uuid::new_v4().simple()).to_uppercase();
    let direct = place.thread_ts.is_none() && place.channel.starts_with('D');
    let mut event = if direct {
        json!({
            "type": "message", "channel_type": "im", "channel": place.channel,
            "user": LOCAL_USER, "text": text, "ts": ts, "event_ts": ts,
        })
    } else {
        json!({
            "type": "app_mention", "channel": place.channel, "user": LOCAL_USER,
            "text": format!("<@{APP_USER}> {text}"), "ts": ts, "event_ts": ts,
        })
    };
    if let Some(root) = &place.thread_ts {
        event["thread_ts"] = Value::String(root.clone());
    }
    let landing = match (&place.thread_ts, direct) {
        (Some(root), _) => format!("slack:{}:{}:{root}", place.team, place.channel),
        (None, true) => thread_id.to_string(),
        (None, false) => format!("slack:{}:{}:{ts}", place.team, place.channel),
    };
    let body = json!({
        "token": "local",
        "team_id": place.team,
        "api_app_id": "ALOCAL",
        "type": "event_callback",
        "event_id": event_id,
        "event_time": now_micros / 1_000_000,
        "event": event,
    });
    Ok(Outgoing {
        body: body.to_string(),
        thread_id: landing,
        event_id,
    })
}

fn events_url(base: &str) -> String {
    let base = base.trim().trim_end_matches('/');
    if base.ends_with(EVENTS_PATH) {
        base.to_owned()
    } else {
        format!("{base}{EVENTS_PATH}")
    }
}

pub async fn run(args: SendArgs) -> anyhow::Result<()> {
    let secret: SigningSecret = secret::load(&args.data_dir, args.signing_secret.as_deref())?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("the clock is before 1970")?;
    let outgoing = event_for(&args.thread, &args.text, now.as_micros())?;
    let timestamp = now.as_secs() as i64;
    let url = events_url(&args.url);
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .build()
        .context("building the HTTP client")?;
    let response = http
        .post(&url)
        .header("content-type", "application/json")
        .header(TIMESTAMP_HEADER, timestamp.to_string())
        .header(
            SIGNATURE_HEADER,
            secret.sign(timestamp, outgoing.body.as_bytes()),
        )
        .body(outgoing.body.clone())
        .send()
        .await
        .with_context(|| format!("posting to {url} (is threadbox dev running?)"))?;
    let status = response.status();
    let answer = response.text().await.unwrap_or_default();
    if !status.is_success() {
        bail!("{url} answered {status}: {answer}");
    }
    println!("sent {} to {}", outgoing.event_id, outgoing.thread_id);
    println!("{answer}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u128 = 1_767_225_600_000_123;

    fn parsed(out: &Outgoing) -> Value {
        serde_json::from_str(&out.body).unwrap()
    }

    #[test]
    fn a_thread_id_becomes_a_mention_in_that_thread() {
        let out = event_for("slack:T1:C1:1767225000.000100", "status", NOW).unwrap();
        let body = parsed(&out);
        assert_eq!(body["type"], "event_callback");
        assert_eq!(body["team_id"], "T1");
        assert_eq!(body["event"]["type"], "app_mention");
        assert_eq!(body["event"]["thread_ts"], "1767225000.000100");
        assert_eq!(body["event"]["ts"], "1767225600.000123");
        assert_eq!(body["event"]["text"], "<@UTHREADBOX> status");
        assert_eq!(out.thread_id, "slack:T1:C1:1767225000.000100");
        assert!(out.event_id.starts_with("EV"));
    }

    #[test]
    fn a_channel_starts_a_thread_and_a_dm_is_a_direct_message() {
        let out = event_for("slack:T1:C1", "help", NOW).unwrap();
        assert_eq!(out.thread_id, "slack:T1:C1:1767225600.000123");
        assert!(parsed(&out)["event"].get("thread_ts").is_none());

        let dm = event_for("slack:T1:D1", "help", NOW).unwrap();
        let body = parsed(&dm);
        assert_eq!(body["event"]["type"], "message");
        assert_eq!(body["event"]["channel_type"], "im");
        assert_eq!(body["event"]["text"], "help");
        assert_eq!(dm.thread_id, "slack:T1:D1");
    }

    #[test]
    fn only_slack_thread_ids_are_accepted_and_urls_get_the_events_path() {
        assert!(event_for("agent-1", "x", NOW).is_err());
        assert!(event_for("slack:t1:C1", "x", NOW).is_err());
        assert_eq!(
            events_url("http://127.0.0.1:8787/"),
            "http://127.0.0.1:8787/slack/events"
        );
        assert_eq!(
            events_url("http://127.0.0.1:8787/slack/events"),
            "http://127.0.0.1:8787/slack/events"
        );
    }
}
