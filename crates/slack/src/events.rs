//! Slack's Events API payloads, and which of them become work.
//!
//! Work: `app_mention` events, and `message` events written by a person (no subtype, or
//! `file_share` / `thread_broadcast`, which carry a person's words or files) in a DM or in a
//! thread. Not work: anything from a bot (the app's own replies included, or it would answer
//! itself), edits, deletions, joins and other housekeeping subtypes, and top-level channel
//! messages that do not mention the app (the `app_mention` for those arrives separately).

use serde::Deserialize;

use super::thread::{is_direct, thread_of};
use super::work::{HomeOpened, IncomingMessage};
use threadbox_core::ports::SlackFile;

/// The outer JSON of every Events API request.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Envelope {
    /// Sent once when the request URL is configured; answer with the challenge.
    UrlVerification {
        challenge: String,
    },
    // Boxed: it is far larger than the other variants.
    EventCallback(Box<Callback>),
    /// Slack is dropping events for us (over 30,000 an hour); nothing to do but log it.
    AppRateLimited {
        #[serde(default)]
        minute_rate_limited: Option<i64>,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
pub struct Callback {
    pub team_id: String,
    pub event_id: String,
    #[serde(default)]
    pub event_time: Option<i64>,
    pub event: Event,
}

/// The inner event: the fields of `message` and `app_mention` we read (others ignored).
#[derive(Debug, Deserialize)]
pub struct Event {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub subtype: Option<String>,
    #[serde(default)]
    pub channel: Option<String>,
    #[serde(default)]
    pub channel_type: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub bot_id: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub ts: Option<String>,
    #[serde(default)]
    pub thread_ts: Option<String>,
    #[serde(default)]
    pub files: Vec<SlackFile>,
    /// `app_home_opened`: which tab (`home` or `messages`).
    #[serde(default)]
    pub tab: Option<String>,
}

/// Why an event is acknowledged without work. Reported in logs and the ack body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ignored {
    EventType(String),
    FromBot,
    Subtype(String),
    TopLevelChannelMessage,
    /// Required fields are missing or do not form a thread id; retrying will not fix it.
    Malformed(String),
}

impl Ignored {
    pub fn reason(&self) -> String {
        match self {
            Ignored::EventType(kind) => format!("event type {kind} is not handled"),
            Ignored::FromBot => "message from a bot".into(),
            Ignored::Subtype(subtype) => format!("message subtype {subtype} is not user content"),
            Ignored::TopLevelChannelMessage => "top-level channel message without a mention".into(),
            Ignored::Malformed(why) => format!("malformed event: {why}"),
        }
    }
}

/// Subtypes that carry a person's words or files.
fn is_user_content(subtype: Option<&str>) -> bool {
    matches!(subtype, None | Some("file_share" | "thread_broadcast"))
}

/// `app_home_opened` on the Home tab: the person's Home view is to be (re)published. The
/// Messages tab is the DM with the app, whose messages arrive as `message.im`.
pub fn home_opened(callback: &Callback) -> Option<HomeOpened> {
    let event = &callback.event;
    (event.kind == "app_home_opened" && event.tab.as_deref() == Some("home")).then(|| {
        event.user.as_ref().map(|user| HomeOpened {
            event_id: callback.event_id.clone(),
            team: callback.team_id.clone(),
            user: user.clone(),
        })
    })?
}

/// Decide whether a callback is work, and shape it for the queue.
pub fn to_work(callback: &Callback) -> Result<IncomingMessage, Ignored> {
    let event = &callback.event;
    let mention = match event.kind.as_str() {
        "app_mention" => true,
        "message" => false,
        other => return Err(Ignored::EventType(other.to_owned())),
    };
    if event.bot_id.is_some() || event.subtype.as_deref() == Some("bot_message") {
        return Err(Ignored::FromBot);
    }
    if !is_user_content(event.subtype.as_deref()) {
        return Err(Ignored::Subtype(event.subtype.clone().unwrap_or_default()));
    }
    let missing = |field: &str| Ignored::Malformed(format!("no {field}"));
    let channel = event.channel.as_deref().ok_or_else(|| missing("channel"))?;
    let ts = event.ts.as_deref().ok_or_else(|| missing("ts"))?;
    let user = event.user.as_deref().ok_or_else(|| missing("user"))?;
    let direct = !mention && is_direct(event.channel_type.as_deref());
    if !mention && !direct && event.thread_ts.is_none() {
        return Err(Ignored::TopLevelChannelMessage);
    }
    let channel_type = if mention {
        None
    } else {
        event.channel_type.as_deref()
    };
    let thread_id = thread_of(
        &callback.team_id,
        channel,
        channel_type,
        ts,
        event.thread_ts.as_deref(),
    )
    .map_err(|e| Ignored::Malformed(e.to_string()))?;
    let reply_thread_ts = if direct {
        event.thread_ts.clone()
    } else {
        Some(event.thread_ts.clone().unwrap_or_else(|| ts.to_owned()))
    };
    Ok(IncomingMessage {
        event_id: callback.event_id.clone(),
        thread_id,
        channel: channel.to_owned(),
        ts: ts.to_owned(),
        reply_thread_ts,
        user: user.to_owned(),
        text: strip_leading_mentions(event.text.as_deref().unwrap_or_default()).to_owned(),
        files: event.files.clone(),
        addressed: mention || direct,
    })
}

/// Drop the `<@U123>` (or `<@U123|name>`) mentions a message starts with: "@threadbox status"
/// is the command `status`.
pub fn strip_leading_mentions(text: &str) -> &str {
    let mut rest = text.trim_start();
    while let Some(after) = rest.strip_prefix("<@") {
        match after.find('>') {
            Some(end) => rest = after[end + 1..].trim_start(),
            None => break,
        }
    }
    rest.trim_end()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn callback(event: serde_json::Value) -> Callback {
        let envelope = json!({
            "type": "event_callback",
            "team_id": "T1",
            "api_app_id": "A1",
            "event_id": "Ev1",
            "event_time": 1_700_000_000,
            "event": event,
        });
        match serde_json::from_value(envelope).unwrap() {
            Envelope::EventCallback(cb) => *cb,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn envelopes_parse_by_type() {
        let v: Envelope = serde_json::from_value(
            json!({"type": "url_verification", "challenge": "abc", "token": "x"}),
        )
        .unwrap();
        assert!(matches!(v, Envelope::UrlVerification { challenge } if challenge == "abc"));
        let v: Envelope =
            serde_json::from_value(json!({"type": "app_rate_limited", "minute_rate_limited": 1}))
                .unwrap();
        assert!(matches!(v, Envelope::AppRateLimited { .. }));
        let v: Envelope = serde_json::from_value(json!({"type": "something_new"})).unwrap();
        assert!(matches!(v, Envelope::Other));
    }

    #[test]
    fn a_mention_becomes_addressed_work_in_its_own_thread() {
        let work = to_work(&callback(json!({
            "type": "app_mention", "user": "U1", "channel": "C1",
            "text": "<@UBOT> status", "ts": "100.000001", "event_ts": "100.000001"
        })))
        .unwrap();
        assert_eq!(work.thread_id.as_str(), "slack:T1:C1:100.000001");
        assert_eq!(work.reply_thread_ts.as_deref(), Some("100.000001"));
        assert_eq!(work.text, "status");
        assert!(work.addressed);
        assert_eq!(work.event_id, "Ev1");
    }

    #[test]
    fn dms_are_one_conversation_and_replies_follow_the_user() {
        let top = to_work(&callback(json!({
            "type": "message", "channel_type": "im", "user": "U1", "channel": "D1",
            "text": "help", "ts": "5.000001"
        })))
        .unwrap();
        assert_eq!(top.thread_id.as_str(), "slack:T1:D1");
        assert_eq!(top.reply_thread_ts, None);
        assert!(top.addressed);
        let threaded = to_work(&callback(json!({
            "type": "message", "channel_type": "im", "user": "U1", "channel": "D1",
            "text": "help", "ts": "6.000001", "thread_ts": "5.000001"
        })))
        .unwrap();
        assert_eq!(threaded.thread_id.as_str(), "slack:T1:D1");
        assert_eq!(threaded.reply_thread_ts.as_deref(), Some("5.000001"));
    }

    #[test]
    fn thread_replies_without_a_mention_are_work_but_not_addressed() {
        let work = to_work(&callback(json!({
            "type": "message", "channel_type": "channel", "user": "U1", "channel": "C1",
            "text": "files", "ts": "101.000001", "thread_ts": "100.000001"
        })))
        .unwrap();
        assert_eq!(work.thread_id.as_str(), "slack:T1:C1:100.000001");
        assert!(!work.addressed);
    }

    #[test]
    fn what_is_not_work_says_why() {
        let cases = [
            (
                json!({"type": "reaction_added", "user": "U1"}),
                Ignored::EventType("reaction_added".into()),
            ),
            (
                json!({"type": "message", "channel_type": "channel", "bot_id": "B1",
                       "channel": "C1", "ts": "1.1", "thread_ts": "1.0", "text": "hi"}),
                Ignored::FromBot,
            ),
            (
                json!({"type": "message", "subtype": "bot_message", "channel": "C1", "ts": "1.1"}),
                Ignored::FromBot,
            ),
            (
                json!({"type": "message", "subtype": "message_changed", "channel": "C1",
                       "ts": "1.1", "channel_type": "channel"}),
                Ignored::Subtype("message_changed".into()),
            ),
            (
                json!({"type": "message", "subtype": "channel_join", "user": "U1",
                       "channel": "C1", "ts": "1.1"}),
                Ignored::Subtype("channel_join".into()),
            ),
            (
                json!({"type": "message", "channel_type": "channel", "user": "U1",
                       "channel": "C1", "ts": "1.1", "text": "hello all"}),
                Ignored::TopLevelChannelMessage,
            ),
            (
                json!({"type": "app_mention", "user": "U1", "ts": "1.1"}),
                Ignored::Malformed("no channel".into()),
            ),
        ];
        for (event, expected) in cases {
            assert_eq!(to_work(&callback(event.clone())), Err(expected), "{event}");
        }
    }

    #[test]
    fn file_shares_and_broadcasts_are_user_content() {
        let work = to_work(&callback(json!({
            "type": "message", "subtype": "file_share", "channel_type": "im", "user": "U1",
            "channel": "D1", "ts": "1.000001", "text": "",
            "files": [{"id": "F1", "name": "a.csv", "size": 10,
                       "url_private_download": "https://files.slack.com/files-pri/T1-F1/download/a.csv"}]
        })))
        .unwrap();
        assert_eq!(work.files.len(), 1);
        assert_eq!(work.files[0].name.as_deref(), Some("a.csv"));
        assert!(to_work(&callback(json!({
            "type": "message", "subtype": "thread_broadcast", "channel_type": "channel",
            "user": "U1", "channel": "C1", "ts": "2.000001", "thread_ts": "1.000001", "text": "x"
        })))
        .is_ok());
    }

    #[test]
    fn leading_mentions_are_stripped() {
        assert_eq!(strip_leading_mentions("<@U1> status"), "status");
        assert_eq!(
            strip_leading_mentions("  <@U1|bot>  <@U2> files /tmp "),
            "files /tmp"
        );
        assert_eq!(strip_leading_mentions("status <@U1>"), "status <@U1>");
        assert_eq!(strip_leading_mentions("<@U1"), "<@U1");
    }
}
