//! The live-events wire protocol: JSON text frames, the same over API Gateway and `threadbox dev`.
//!
//! Client to server, one object per frame, `action` first:
//! - `{"action":"subscribe","thread_id":"t1","after_seq":12}`: watch a thread; replay its events
//!   with `seq > after_seq` from the event log, then stream live ones. Without `after_seq`, start
//!   at the thread's current position (live events only).
//! - `{"action":"unsubscribe","thread_id":"t1"}`
//! - `{"action":"ping"}`: answered with `{"type":"pong"}` (keeps API Gateway's idle timer from
//!   closing a quiet connection; browsers cannot send WebSocket pings themselves).
//!
//! Server to client, `type` first:
//! - `{"type":"subscribed","thread_id":…,"after_seq":N,"last_seq":M,"status":"active"|null}`:
//!   replay of `N+1..=M` follows; `status` is the thread's state now (null: no session yet).
//! - `{"type":"event","event":{event_id, thread_id, seq, generation, from, to, cause, at, …}}`
//! - `{"type":"unsubscribed","thread_id":…}`, `{"type":"pong"}`
//! - `{"type":"error","code":…,"message":…,"thread_id":…?}`: the connection stays open unless
//!   the code is `token_expired`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::{LifecycleEvent, Status, ThreadId, MAX_SEQ};
use crate::ports::Frame;

/// Largest client frame read. Real ones are under 200 bytes; API Gateway caps frames at 32 KiB.
pub const MAX_CLIENT_MESSAGE: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMessage {
    Subscribe {
        thread_id: ThreadId,
        after_seq: Option<u64>,
    },
    Unsubscribe {
        thread_id: ThreadId,
    },
    Ping,
}

/// A frame the server could not act on, as the error frame that answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError {
    pub code: &'static str,
    pub message: String,
    /// The thread the message was about, when it could be read.
    pub thread_id: Option<String>,
}

impl ProtocolError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            thread_id: None,
        }
    }

    pub fn about(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    pub fn frame(&self) -> Frame {
        ServerFrame::Error {
            code: self.code,
            message: &self.message,
            thread_id: self.thread_id.as_deref(),
        }
        .to_frame()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubscribeBody {
    #[allow(dead_code)] // read by the dispatch; listed so deny_unknown_fields accepts it
    action: String,
    thread_id: String,
    after_seq: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UnsubscribeBody {
    #[allow(dead_code)]
    action: String,
    thread_id: String,
}

/// Read one client frame. Every failure names what was wrong, as an error frame's code and text.
pub fn parse(text: &str) -> Result<ClientMessage, ProtocolError> {
    if text.len() > MAX_CLIENT_MESSAGE {
        return Err(ProtocolError::new(
            "message_too_large",
            format!(
                "the message is {} bytes; the limit is {MAX_CLIENT_MESSAGE}",
                text.len()
            ),
        ));
    }
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ProtocolError::new("bad_json", format!("the message is not JSON: {e}")))?;
    let action = value
        .as_object()
        .ok_or_else(|| ProtocolError::new("bad_message", "the message must be a JSON object"))?
        .get("action")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ProtocolError::new(
                "bad_message",
                "the message needs an \"action\": subscribe, unsubscribe or ping",
            )
        })?
        .to_owned();
    let bad = |e: serde_json::Error| {
        ProtocolError::new("bad_message", format!("bad {action} message: {e}"))
    };
    match action.as_str() {
        "subscribe" => {
            let body: SubscribeBody = serde_json::from_value(value.clone()).map_err(bad)?;
            if let Some(seq) = body.after_seq.filter(|&seq| seq > MAX_SEQ) {
                return Err(ProtocolError::new(
                    "bad_message",
                    format!("after_seq must be at most {MAX_SEQ}; got {seq}"),
                ));
            }
            Ok(ClientMessage::Subscribe {
                thread_id: thread_id(&body.thread_id)?,
                after_seq: body.after_seq,
            })
        }
        "unsubscribe" => {
            let body: UnsubscribeBody = serde_json::from_value(value.clone()).map_err(bad)?;
            Ok(ClientMessage::Unsubscribe {
                thread_id: thread_id(&body.thread_id)?,
            })
        }
        "ping" => Ok(ClientMessage::Ping),
        other => Err(ProtocolError::new(
            "unknown_action",
            format!("unknown action {other:?}; expected subscribe, unsubscribe or ping"),
        )),
    }
}

fn thread_id(raw: &str) -> Result<ThreadId, ProtocolError> {
    ThreadId::parse(raw)
        .map_err(|e| ProtocolError::new("invalid_thread_id", e.to_string()).about(raw))
}

/// Everything the server sends.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame<'a> {
    Subscribed {
        thread_id: &'a ThreadId,
        after_seq: u64,
        last_seq: u64,
        status: Option<Status>,
    },
    Event {
        event: &'a LifecycleEvent,
    },
    Unsubscribed {
        thread_id: &'a ThreadId,
    },
    Pong,
    Error {
        code: &'a str,
        message: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        thread_id: Option<&'a str>,
    },
}

impl ServerFrame<'_> {
    /// Serialize once; the result is shared by every connection it goes to.
    pub fn to_frame(&self) -> Frame {
        serde_json::to_string(self)
            .expect("server frames always serialize")
            .into()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::{Cause, Millis};

    fn t(s: &str) -> ThreadId {
        ThreadId::parse(s).unwrap()
    }

    #[test]
    fn good_messages_parse() {
        assert_eq!(
            parse(r#"{"action":"subscribe","thread_id":"t1","after_seq":12}"#).unwrap(),
            ClientMessage::Subscribe {
                thread_id: t("t1"),
                after_seq: Some(12)
            }
        );
        assert_eq!(
            parse(r#"{"thread_id":"slack:T1:C1:1.2","action":"subscribe"}"#).unwrap(),
            ClientMessage::Subscribe {
                thread_id: t("slack:T1:C1:1.2"),
                after_seq: None
            }
        );
        assert_eq!(
            parse(r#"{"action":"unsubscribe","thread_id":"t1"}"#).unwrap(),
            ClientMessage::Unsubscribe { thread_id: t("t1") }
        );
        assert_eq!(parse(r#"{"action":"ping"}"#).unwrap(), ClientMessage::Ping);
    }

    #[test]
    fn bad_messages_get_a_code_and_a_reason() {
        for (text, code, why) in [
            ("{not json", "bad_json", "not JSON"),
            ("[1,2]", "bad_message", "JSON object"),
            (
                r#"{"thread_id":"t1"}"#,
                "bad_message",
                "needs an \"action\"",
            ),
            (r#"{"action":"dance"}"#, "unknown_action", "\"dance\""),
            (
                r#"{"action":"subscribe"}"#,
                "bad_message",
                "missing field `thread_id`",
            ),
            (
                r#"{"action":"subscribe","thread_id":"t1","after_seq":-1}"#,
                "bad_message",
                "invalid value",
            ),
            (
                r#"{"action":"subscribe","thread_id":"t1","after_seq":9223372036854775808}"#,
                "bad_message",
                "at most 9223372036854775807",
            ),
            (
                r#"{"action":"subscribe","thread_id":"t1","since":3}"#,
                "bad_message",
                "unknown field `since`",
            ),
            (
                r#"{"action":"subscribe","thread_id":"../etc"}"#,
                "invalid_thread_id",
                "'/'",
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert_eq!(err.code, code, "{text}");
            assert!(err.message.contains(why), "{text}: {}", err.message);
        }
        let huge = format!(
            r#"{{"action":"ping","pad":"{}"}}"#,
            "x".repeat(MAX_CLIENT_MESSAGE)
        );
        assert_eq!(parse(&huge).unwrap_err().code, "message_too_large");
    }

    #[test]
    fn frames_have_the_documented_shapes() {
        let event = LifecycleEvent {
            event_id: "e1".into(),
            thread_id: t("t1"),
            seq: 3,
            generation: 1,
            from: Some(Status::Active),
            to: Status::Paused,
            cause: Cause::User,
            at: Millis(5),
            sandbox_id: Some("sb".into()),
            detail: None,
        };
        let frame: Value =
            serde_json::from_str(&ServerFrame::Event { event: &event }.to_frame()).unwrap();
        assert_eq!(frame["type"], "event");
        assert_eq!(frame["event"]["seq"], 3);
        assert_eq!(frame["event"]["to"], "paused");

        let subscribed = ServerFrame::Subscribed {
            thread_id: &t("t1"),
            after_seq: 1,
            last_seq: 3,
            status: Some(Status::Paused),
        };
        assert_eq!(
            serde_json::from_str::<Value>(&subscribed.to_frame()).unwrap(),
            json!({"type":"subscribed","thread_id":"t1","after_seq":1,"last_seq":3,"status":"paused"})
        );
        let error = ProtocolError::new("bad_json", "nope").about("t1").frame();
        assert_eq!(
            serde_json::from_str::<Value>(&error).unwrap(),
            json!({"type":"error","code":"bad_json","message":"nope","thread_id":"t1"})
        );
        assert_eq!(&*ServerFrame::Pong.to_frame(), r#"{"type":"pong"}"#);
    }
}
