//! The live-events wire protocol: JSON text frames, the same over API Gateway and `threadbox dev`.
//!
//! Client to server, one object per frame, `action` first:
//! - `{"action":"subscribe","thread_id":"t1","after_seq":12}`: watch a thread; replay its events
//!   with `seq > after_seq` from the event log, then stream live ones. Without `after_seq`, start
//!   at the thread's current position (live events only).
//! - `{"action":"unsubscribe","thread_id":"t1"}`
//! - `{"action":"ping"}`: answered with `{"type":"pong"}` (keeps API Gateway's idle timer from
//!   closing a quiet connection; browsers cannot send WebSocket pings themselves).
//! - `{"action":"exec","request_id":"r1","thread_id":"t1","cmd":"…"}`: run a command in the
//!   thread's sandbox and stream its output (a token with the `exec` capability only). The other
//!   fields are those of `POST /v1/threads/{id}/exec`'s body: `cmd` or `argv`, `cwd`, `env`,
//!   `stdin`, `timeout_ms`, `kill_on_disconnect`. `request_id` (1 to 64 characters of
//!   `A-Za-z0-9._:-`) names the command in the frames that answer it.
//!
//! - `{"action":"pty","request_id":"p1","thread_id":"t1","cols":80,"rows":24}`: open a terminal
//!   session (a background process on a PTY; `cmd` or `argv`, default `bash -l`, and `cwd`,
//!   `env`, `idle_timeout_ms` as `POST /v1/threads/{id}/processes` takes them) and attach to it;
//!   with `"session":"<id>","after":N` instead, re-attach to a session that is still running,
//!   its output from offset `N`. `exec` tokens only. `{"action":"pty_input", "request_id",
//!   "thread_id", "session", "text"|"base64"}` types into it, `{"action":"pty_resize", …,
//!   "cols", "rows"}` resizes it, and `{"action":"pty_detach","request_id","thread_id"}` stops
//!   the attachment (the session runs on; closing the connection does the same).
//!
//! Server to client, `type` first:
//! - `{"type":"subscribed","thread_id":…,"after_seq":N,"last_seq":M,"status":"active"|null}`:
//!   replay of `N+1..=M` follows; `status` is the thread's state now (null: no session yet).
//! - `{"type":"event","event":{event_id, thread_id, seq, generation, from, to, cause, at, …}}`
//! - `{"type":"unsubscribed","thread_id":…}`, `{"type":"pong"}`
//! - `{"type":"exec_output","request_id":…,"stream":"stdout"|"stderr","text":…}` (or `"base64"`
//!   for bytes that are not UTF-8, as the HTTP exec's server-sent events), each frame under
//!   [`MAX_EXEC_FRAME`] bytes; then `{"type":"exec_exit","request_id":…,"exit_code":0|null,
//!   "duration_ms","timed_out","truncated","out_of_memory"}`, or an error frame with the
//!   `request_id` (and, for a command that could not run, the HTTP `status` and `retry_after`).
//! - `{"type":"pty_attached","request_id","thread_id","session","offset"}`, then
//!   `{"type":"pty_output","request_id","session","offset","text"|"base64"}` as the terminal
//!   writes, and `{"type":"pty_exit","request_id","session","exit_code","next"}` when it ends.
//! - `{"type":"error","code":…,"message":…,"thread_id":…?,"request_id":…?}`: the connection stays
//!   open unless the code is `token_expired`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::http::ApiError;
use crate::wire::{ExitFrame, Payload};
use threadbox_core::domain::{LifecycleEvent, Status, ThreadId, MAX_SEQ};
use threadbox_core::ports::{ExecRequest, Frame};

/// Largest client frame other than `exec`. Real ones are under 200 bytes.
pub const MAX_CLIENT_MESSAGE: usize = 4096;
/// Largest `exec` frame (its `stdin` and `env` ride along): API Gateway's frame limit, 32 KiB.
/// Bigger input goes in a file (`PUT /v1/threads/{id}/files/…`) or over HTTP exec.
pub const MAX_EXEC_MESSAGE: usize = 32 * 1024;
/// Largest frame the server sends for a command's output: under API Gateway's 32 KiB, with
/// room to spare; a bigger piece of output is split over several frames.
pub const MAX_EXEC_FRAME: usize = 30 * 1024;
/// Longest `request_id`.
pub const MAX_REQUEST_ID: usize = 64;

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
    Exec(ExecFrame),
    Pty(PtyFrame),
}

/// A `pty*` frame, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtyFrame {
    pub request_id: String,
    pub thread_id: ThreadId,
    pub action: PtyAction,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PtyAction {
    /// Start a terminal session and attach to it.
    Open(threadbox_core::usecases::ProcessRequest),
    /// Attach to a running session, its output from `after`.
    Attach {
        session: String,
        after: u64,
    },
    Input {
        session: String,
        data: Vec<u8>,
    },
    Resize {
        session: String,
        size: threadbox_core::ports::PtySize,
    },
    /// Stop the attachment named by `request_id`.
    Detach,
}

/// An `exec` frame, checked: what to run, where, and under which name to answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecFrame {
    pub request_id: String,
    pub thread_id: ThreadId,
    pub request: ExecRequest,
    /// Kill the command when the connection closes before it ends (by default it runs on to its
    /// end, its output dropped).
    pub kill_on_disconnect: bool,
}

/// A frame the server could not act on, as the error frame that answers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError {
    pub code: &'static str,
    pub message: String,
    /// The thread the message was about, when it could be read.
    pub thread_id: Option<String>,
    /// The `exec` request it answers, when it could be read.
    pub request_id: Option<String>,
}

impl ProtocolError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            thread_id: None,
            request_id: None,
        }
    }

    pub fn for_request(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into());
        self
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
            request_id: self.request_id.as_deref(),
            status: None,
            retry_after: None,
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
    let too_large = |limit: usize| {
        ProtocolError::new(
            "message_too_large",
            format!("the message is {} bytes; the limit is {limit}", text.len()),
        )
    };
    if text.len() > MAX_EXEC_MESSAGE {
        return Err(too_large(MAX_EXEC_MESSAGE));
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
                "the message needs an \"action\": subscribe, unsubscribe, ping or exec",
            )
        })?
        .to_owned();
    if action != "exec" && action != "pty_input" && text.len() > MAX_CLIENT_MESSAGE {
        return Err(too_large(MAX_CLIENT_MESSAGE));
    }
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
        "exec" => parse_exec(value).map(ClientMessage::Exec),
        "pty" | "pty_input" | "pty_resize" | "pty_detach" => {
            parse_pty(&action, value).map(ClientMessage::Pty)
        }
        other => Err(ProtocolError::new(
            "unknown_action",
            format!(
                "unknown action {other:?}; expected subscribe, unsubscribe, ping, exec, pty, \
                 pty_input, pty_resize or pty_detach"
            ),
        )),
    }
}

/// An `exec` frame: `action`, `request_id` and `thread_id`, and the rest is an HTTP exec body,
/// read by the same type with the same checks. Errors name the request once it is known.
/// `request_id` and `thread_id` taken out of a frame that names a request (`exec`, `pty*`).
fn request_and_thread(
    action: &str,
    value: Value,
) -> Result<(String, ThreadId, serde_json::Map<String, Value>), ProtocolError> {
    let Value::Object(mut fields) = value else {
        return Err(ProtocolError::new(
            "bad_message",
            "the message must be a JSON object",
        ));
    };
    fields.remove("action");
    let request_id = match fields.remove("request_id") {
        Some(Value::String(id)) => request_id(id)?,
        Some(_) => {
            return Err(ProtocolError::new(
                "bad_message",
                format!("bad {action} message: request_id must be a string"),
            ))
        }
        None => {
            return Err(ProtocolError::new(
                "bad_message",
                format!(
                    "bad {action} message: missing field `request_id` (a name for the frames \
                     that answer it)"
                ),
            ))
        }
    };
    let for_request = |e: ProtocolError| e.for_request(&request_id);
    let thread_id = match fields.remove("thread_id") {
        Some(Value::String(raw)) => thread_id(&raw).map_err(for_request)?,
        Some(_) => {
            return Err(for_request(ProtocolError::new(
                "bad_message",
                format!("bad {action} message: thread_id must be a string"),
            )))
        }
        None => {
            return Err(for_request(ProtocolError::new(
                "bad_message",
                format!("bad {action} message: missing field `thread_id`"),
            )))
        }
    };
    Ok((request_id, thread_id, fields))
}

/// An `exec` frame: `action`, `request_id` and `thread_id`, and the rest is an HTTP exec body,
/// read by the same type with the same checks. Errors name the request once it is known.
fn parse_exec(value: Value) -> Result<ExecFrame, ProtocolError> {
    let (request_id, thread_id, fields) = request_and_thread("exec", value)?;
    let about = |e: ProtocolError| e.for_request(&request_id).about(thread_id.as_str());
    let body: crate::wire::ExecBody =
        serde_json::from_value(Value::Object(fields)).map_err(|e| {
            about(ProtocolError::new(
                "bad_message",
                format!("bad exec message: {e}"),
            ))
        })?;
    let kill_on_disconnect = body.kill_on_disconnect;
    if body.checkpoint {
        // Refused rather than ignored: a caller who asked for one must not believe it has one.
        return Err(about(ProtocolError::new(
            "invalid_request",
            "an exec frame cannot take a checkpoint; POST /v1/threads/{id}/checkpoints first,              or exec over HTTP with \"checkpoint\": true",
        )));
    }
    let request = body
        .into_request()
        .map_err(|e| about(ProtocolError::new(e.code, e.message)))?;
    Ok(ExecFrame {
        request_id,
        thread_id,
        request,
        kill_on_disconnect,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PtyTarget {
    session: String,
    #[serde(default)]
    after: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PtyInputBody {
    session: String,
    text: Option<String>,
    base64: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PtyResizeBody {
    session: String,
    cols: u16,
    rows: u16,
}

/// A `pty`, `pty_input`, `pty_resize` or `pty_detach` frame. A `pty` frame without `session`
/// opens a session: its fields are those of `POST /v1/threads/{id}/processes`, with `cols` and
/// `rows` for the terminal.
fn parse_pty(action: &str, value: Value) -> Result<PtyFrame, ProtocolError> {
    use crate::wire::PayloadError;
    use threadbox_core::ports::{valid_process_id, PtySize, MAX_INPUT_BYTES};
    let (request_id, thread_id, mut fields) = request_and_thread(action, value)?;
    let about = |e: ProtocolError| e.for_request(&request_id).about(thread_id.as_str());
    let bad = |message: String| about(ProtocolError::new("bad_message", message));
    let read = |fields: serde_json::Map<String, Value>| Value::Object(fields);
    let session_ok = |session: &str| {
        if valid_process_id(session) {
            Ok(())
        } else {
            Err(bad(format!(
                "bad {action} message: session must be a session id (1 to 32 letters and digits)"
            )))
        }
    };
    let action = match action {
        "pty" if fields.contains_key("session") => {
            let target: PtyTarget = serde_json::from_value(read(fields))
                .map_err(|e| bad(format!("bad pty message: {e}")))?;
            session_ok(&target.session)?;
            PtyAction::Attach {
                session: target.session,
                after: target.after,
            }
        }
        "pty" => {
            let size = |name: &str, fields: &mut serde_json::Map<String, Value>| {
                fields
                    .remove(name)
                    .and_then(|v| v.as_u64())
                    .and_then(|v| u16::try_from(v).ok())
                    .ok_or_else(|| {
                        bad(format!(
                            "bad pty message: `{name}` (the terminal's size) must be a number"
                        ))
                    })
            };
            let (cols, rows) = (size("cols", &mut fields)?, size("rows", &mut fields)?);
            if !fields.contains_key("cmd") && !fields.contains_key("argv") {
                fields.insert("argv".into(), serde_json::json!(["/bin/bash", "-l"]));
            }
            fields.insert(
                "pty".into(),
                serde_json::json!({ "cols": cols, "rows": rows }),
            );
            let body: crate::wire::ProcessBody = serde_json::from_value(read(fields))
                .map_err(|e| bad(format!("bad pty message: {e}")))?;
            PtyAction::Open(
                body.into_request()
                    .map_err(|e| about(ProtocolError::new(e.code, e.message)))?,
            )
        }
        "pty_input" => {
            let body: PtyInputBody = serde_json::from_value(read(fields))
                .map_err(|e| bad(format!("bad pty_input message: {e}")))?;
            session_ok(&body.session)?;
            let payload = crate::wire::Payload {
                text: body.text,
                base64: body.base64,
            };
            let data = payload.decode().map_err(|e| match e {
                PayloadError::Base64(e) => bad(format!("bad pty_input message: base64: {e}")),
                PayloadError::Neither | PayloadError::Both => {
                    bad("bad pty_input message: give text or base64".into())
                }
            })?;
            if data.len() > MAX_INPUT_BYTES {
                return Err(bad(format!(
                    "bad pty_input message: at most {MAX_INPUT_BYTES} bytes at a time"
                )));
            }
            PtyAction::Input {
                session: body.session,
                data,
            }
        }
        "pty_resize" => {
            let body: PtyResizeBody = serde_json::from_value(read(fields))
                .map_err(|e| bad(format!("bad pty_resize message: {e}")))?;
            session_ok(&body.session)?;
            let size = PtySize {
                cols: body.cols,
                rows: body.rows,
            }
            .check()
            .map_err(|e| bad(format!("bad pty_resize message: {e}")))?;
            PtyAction::Resize {
                session: body.session,
                size,
            }
        }
        _ => {
            if !fields.is_empty() {
                return Err(bad(
                    "bad pty_detach message: it takes only request_id and thread_id".into(),
                ));
            }
            PtyAction::Detach
        }
    };
    Ok(PtyFrame {
        request_id,
        thread_id,
        action,
    })
}

fn request_id(id: String) -> Result<String, ProtocolError> {
    let fine = |b: u8| b.is_ascii_alphanumeric() || b"._:-".contains(&b);
    if id.is_empty() || id.len() > MAX_REQUEST_ID || !id.bytes().all(fine) {
        return Err(ProtocolError::new(
            "bad_message",
            format!(
                "bad exec message: request_id must be 1 to {MAX_REQUEST_ID} characters of \
                 A-Z, a-z, 0-9, '.', '_', ':' and '-'"
            ),
        ));
    }
    Ok(id)
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
    /// A piece of a running command's output: `text`, or `base64` for bytes that are not UTF-8.
    ExecOutput {
        request_id: &'a str,
        stream: &'a str,
        #[serde(flatten)]
        data: Payload,
    },
    /// The command ended (`exit_code`, `duration_ms`, ... as the HTTP exec's `exit` event); the
    /// last frame of its request.
    ExecExit {
        request_id: &'a str,
        #[serde(flatten)]
        exit: ExitFrame,
    },
    /// A terminal session attached: its output from `offset` follows.
    PtyAttached {
        request_id: &'a str,
        thread_id: &'a str,
        session: &'a str,
        offset: u64,
    },
    /// What the terminal wrote, from `offset` in its output.
    PtyOutput {
        request_id: &'a str,
        session: &'a str,
        offset: u64,
        #[serde(flatten)]
        data: Payload,
    },
    /// The session ended; the last frame of its attachment.
    PtyExit {
        request_id: &'a str,
        session: &'a str,
        exit_code: Option<i32>,
        next: u64,
    },
    Error {
        code: &'a str,
        message: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        thread_id: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        request_id: Option<&'a str>,
        /// For a command that could not run: the status `POST …/exec` would have answered.
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        /// For a limit: seconds to wait before trying again.
        #[serde(skip_serializing_if = "Option::is_none")]
        retry_after: Option<u64>,
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

/// The error frame that ends request `request_id` about `thread_id`: the API's error, with the
/// HTTP status a plain call would have answered and, for a limit, `retry_after`.
pub fn request_error(request_id: &str, thread_id: &ThreadId, error: ApiError) -> Frame {
    ServerFrame::Error {
        code: error.code,
        message: &error.message,
        thread_id: Some(thread_id.as_str()),
        request_id: Some(request_id),
        status: Some(error.status.as_u16()),
        retry_after: error.retry_after,
    }
    .to_frame()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use threadbox_core::domain::{Cause, Millis};

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
        let huger = format!(
            r#"{{"action":"exec","pad":"{}"}}"#,
            "x".repeat(MAX_EXEC_MESSAGE)
        );
        assert_eq!(parse(&huger).unwrap_err().code, "message_too_large");
    }

    #[test]
    fn exec_frames_parse_into_the_http_exec_request() {
        use threadbox_core::ports::{ExecCommand, DEFAULT_EXEC_TIMEOUT};
        let ClientMessage::Exec(frame) = parse(
            r#"{"action":"exec","request_id":"r1","thread_id":"t1","cmd":"echo hi",
                "env":{"A":"b"},"stdin":"in","timeout_ms":5000,"cwd":"/home/user",
                "kill_on_disconnect":true}"#,
        )
        .unwrap() else {
            panic!("not an exec frame")
        };
        assert_eq!(frame.request_id, "r1");
        assert_eq!(frame.thread_id, t("t1"));
        assert!(frame.kill_on_disconnect);
        assert_eq!(frame.request.command, ExecCommand::Shell("echo hi".into()));
        assert_eq!(frame.request.env.get("A").map(String::as_str), Some("b"));
        assert_eq!(frame.request.stdin.as_deref(), Some(b"in".as_slice()));
        assert_eq!(frame.request.timeout, std::time::Duration::from_secs(5));
        assert_eq!(frame.request.cwd.as_deref(), Some("/home/user"));

        let ClientMessage::Exec(frame) = parse(
            r#"{"action":"exec","request_id":"a.b:c-1_2","thread_id":"t1","argv":["ls","-l"]}"#,
        )
        .unwrap() else {
            panic!("not an exec frame")
        };
        assert!(!frame.kill_on_disconnect, "off by default");
        assert_eq!(
            frame.request.command,
            ExecCommand::Argv(vec!["ls".into(), "-l".into()])
        );
        assert_eq!(frame.request.timeout, DEFAULT_EXEC_TIMEOUT);
    }

    #[test]
    fn pty_frames_open_attach_type_resize_and_detach() {
        use threadbox_core::ports::{ExecCommand, PtySize};
        let ClientMessage::Pty(open) =
            parse(r#"{"action":"pty","request_id":"p1","thread_id":"t1","cols":90,"rows":20}"#)
                .unwrap()
        else {
            panic!("not a pty frame")
        };
        let PtyAction::Open(request) = open.action else {
            panic!("not an open")
        };
        assert_eq!(
            request.command,
            ExecCommand::Argv(vec!["/bin/bash".into(), "-l".into()])
        );
        assert_eq!(request.pty, Some(PtySize { cols: 90, rows: 20 }));
        let ClientMessage::Pty(attach) = parse(
            r#"{"action":"pty","request_id":"p2","thread_id":"t1","session":"abc123","after":7}"#,
        )
        .unwrap() else {
            panic!("not a pty frame")
        };
        assert_eq!(
            attach.action,
            PtyAction::Attach {
                session: "abc123".into(),
                after: 7
            }
        );
        let ClientMessage::Pty(typed) = parse(
            r#"{"action":"pty_input","request_id":"i","thread_id":"t1","session":"abc","base64":"aGk="}"#,
        )
        .unwrap() else {
            panic!("not a pty frame")
        };
        assert_eq!(
            typed.action,
            PtyAction::Input {
                session: "abc".into(),
                data: b"hi".to_vec()
            }
        );
        // Bad frames name what is wrong and the request.
        for (frame, wanted) in [
            (
                r#"{"action":"pty","request_id":"p","thread_id":"t1","cols":90}"#,
                "rows",
            ),
            (
                r#"{"action":"pty","request_id":"p","thread_id":"t1","session":"../x"}"#,
                "session",
            ),
            (
                r#"{"action":"pty_resize","request_id":"p","thread_id":"t1","session":"a","cols":0,"rows":5}"#,
                "1 to 1000",
            ),
            (
                r#"{"action":"pty_input","request_id":"p","thread_id":"t1","session":"a"}"#,
                "text or base64",
            ),
            (
                r#"{"action":"pty_detach","request_id":"p","thread_id":"t1","session":"a"}"#,
                "only request_id",
            ),
        ] {
            let error = parse(frame).unwrap_err();
            assert_eq!(error.request_id.as_deref(), Some("p"), "{frame}");
            assert!(error.message.contains(wanted), "{frame}: {}", error.message);
        }
    }

    #[test]
    fn bad_exec_frames_get_a_code_a_reason_and_the_request_id() {
        for (text, code, why, request_id, thread_id) in [
            (
                r#"{"action":"exec","thread_id":"t1","cmd":"ls"}"#,
                "bad_message",
                "missing field `request_id`",
                None,
                None,
            ),
            (
                r#"{"action":"exec","request_id":7,"thread_id":"t1","cmd":"ls"}"#,
                "bad_message",
                "request_id must be a string",
                None,
                None,
            ),
            (
                r#"{"action":"exec","request_id":"","thread_id":"t1","cmd":"ls"}"#,
                "bad_message",
                "1 to 64 characters",
                None,
                None,
            ),
            (
                r#"{"action":"exec","request_id":"a b","thread_id":"t1","cmd":"ls"}"#,
                "bad_message",
                "1 to 64 characters",
                None,
                None,
            ),
            (
                r#"{"action":"exec","request_id":"r1","cmd":"ls"}"#,
                "bad_message",
                "missing field `thread_id`",
                Some("r1"),
                None,
            ),
            (
                r#"{"action":"exec","request_id":"r1","thread_id":"../etc","cmd":"ls"}"#,
                "invalid_thread_id",
                "'/'",
                Some("r1"),
                Some("../etc"),
            ),
            (
                r#"{"action":"exec","request_id":"r1","thread_id":"t1"}"#,
                "invalid_request",
                "give cmd",
                Some("r1"),
                Some("t1"),
            ),
            (
                r#"{"action":"exec","request_id":"r1","thread_id":"t1","cmd":"ls","argv":["ls"]}"#,
                "invalid_request",
                "not both",
                Some("r1"),
                Some("t1"),
            ),
            (
                r#"{"action":"exec","request_id":"r1","thread_id":"t1","cmd":"ls","shell":"bash"}"#,
                "bad_message",
                "unknown field `shell`",
                Some("r1"),
                Some("t1"),
            ),
            (
                r#"{"action":"exec","request_id":"r1","thread_id":"t1","cmd":"ls","timeout_ms":0}"#,
                "invalid_request",
                "timeout_ms must be between",
                Some("r1"),
                Some("t1"),
            ),
            (
                r#"{"action":"exec","request_id":"r1","thread_id":"t1","cmd":"ls","cwd":"../x"}"#,
                "invalid_path",
                "",
                Some("r1"),
                Some("t1"),
            ),
            (
                r#"{"action":"exec","request_id":"r1","thread_id":"t1","cmd":"ls","kill_on_disconnect":"yes"}"#,
                "bad_message",
                "invalid type",
                Some("r1"),
                Some("t1"),
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert_eq!(err.code, code, "{text}: {}", err.message);
            assert!(err.message.contains(why), "{text}: {}", err.message);
            assert_eq!(err.request_id.as_deref(), request_id, "{text}");
            assert_eq!(err.thread_id.as_deref(), thread_id, "{text}");
        }
        // stdin makes exec frames bigger than the others: up to 32 KiB, then refused.
        let big = |n: usize| {
            format!(
                r#"{{"action":"exec","request_id":"r1","thread_id":"t1","cmd":"cat","stdin":"{}"}}"#,
                "x".repeat(n)
            )
        };
        assert!(parse(&big(MAX_EXEC_MESSAGE - 200)).is_ok());
        let err = parse(&big(MAX_EXEC_MESSAGE)).unwrap_err();
        assert_eq!(err.code, "message_too_large");
        assert!(err.message.contains("32768"), "{}", err.message);
        let frame = ProtocolError::new("too_many_commands", "wait")
            .for_request("r1")
            .about("t1")
            .frame();
        assert_eq!(
            serde_json::from_str::<Value>(&frame).unwrap(),
            json!({"type":"error","code":"too_many_commands","message":"wait","thread_id":"t1","request_id":"r1"})
        );
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
        let exit = ServerFrame::ExecExit {
            request_id: "r1",
            exit: ExitFrame {
                exit_code: Some(3),
                duration_ms: 12,
                timed_out: false,
                truncated: false,
                out_of_memory: false,
            },
        };
        assert_eq!(
            serde_json::from_str::<Value>(&exit.to_frame()).unwrap(),
            json!({"type":"exec_exit","request_id":"r1","exit_code":3,"duration_ms":12,
                   "timed_out":false,"truncated":false,"out_of_memory":false})
        );
        let output = ServerFrame::ExecOutput {
            request_id: "r1",
            stream: "stderr",
            data: Payload {
                text: None,
                base64: Some("/w==".into()),
            },
        };
        assert_eq!(
            serde_json::from_str::<Value>(&output.to_frame()).unwrap(),
            json!({"type":"exec_output","request_id":"r1","stream":"stderr","base64":"/w=="})
        );
    }
}
