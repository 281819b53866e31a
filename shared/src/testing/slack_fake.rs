//! A fake of Slack's Web API for tests: axum on 127.0.0.1, checking what a real client must get
//! right and answering the way Slack does.
//!
//! Checked on every call: `Authorization: Bearer <the bot token>` (else `not_authed` /
//! `invalid_auth`, with HTTP 200 as Slack does), a JSON body with `application/json` for the
//! write methods, `channel`, `text` or `blocks`, a well-formed `thread_ts` when present, and
//! `ts` naming a message the fake holds for `chat.update`. A call that breaks a rule is recorded
//! as a rejection, so tests can assert their client made none.
//!
//! Faults are queued per method: `Fault::RateLimited` answers HTTP 429 with `Retry-After`,
//! `Fault::Error` answers `{"ok": false, "error": code}`, `Fault::ServerError` HTTP 500.
//! Files added with [`SlackFake::add_file`] are served at their `url_private_download` to the
//! bearer of the token; anyone else gets the sign-in page, as from Slack.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::slack::SlackFile;

/// What the fake answers instead of doing the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// HTTP 429 with `Retry-After: secs`.
    RateLimited { retry_after_secs: u64 },
    /// HTTP 200 `{"ok": false, "error": code}`.
    Error(String),
    /// HTTP 500.
    ServerError,
}

/// A message as the fake holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeMessage {
    pub channel: String,
    pub ts: String,
    pub thread_ts: Option<String>,
    pub text: String,
    /// Earlier texts, oldest first, one per `chat.update`.
    pub history: Vec<String>,
}

/// One request the fake saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeCall {
    pub method: String,
    /// `None` when served; the error code (or `429` / `500`) otherwise.
    pub error: Option<String>,
    /// True when the error is the fake's verdict on a malformed call, not an injected fault.
    pub rejected: bool,
}

#[derive(Default)]
struct World {
    token: String,
    messages: Vec<FakeMessage>,
    calls: Vec<FakeCall>,
    faults: HashMap<String, VecDeque<Fault>>,
    files: HashMap<String, (SlackFile, Vec<u8>)>,
    next_ts: u64,
    base: String,
}

type Shared = Arc<Mutex<World>>;

fn lock(world: &Shared) -> MutexGuard<'_, World> {
    world.lock().unwrap_or_else(|p| p.into_inner())
}

pub struct SlackFake {
    world: Shared,
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl SlackFake {
    /// Start on a free loopback port, accepting `token`.
    pub async fn start(token: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the Slack fake");
        let addr = listener.local_addr().expect("local address");
        let world: Shared = Arc::new(Mutex::new(World {
            token: token.to_owned(),
            next_ts: 1_700_000_000_000_001,
            base: format!("http://{addr}"),
            ..World::default()
        }));
        let app = Router::new()
            .route("/api/chat.postMessage", post(post_message))
            .route("/api/chat.update", post(update_message))
            .route("/api/files.info", get(files_info))
            .route("/files/{id}/{name}", get(download))
            .with_state(world.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { world, addr, task }
    }

    /// The Web API base to configure a client with.
    pub fn api_url(&self) -> String {
        format!("http://{}/api/", self.addr)
    }

    /// Answer the next call to `method` with `fault` (queued in order).
    pub fn fail_next(&self, method: &str, fault: Fault) {
        lock(&self.world)
            .faults
            .entry(method.to_owned())
            .or_default()
            .push_back(fault);
    }

    pub fn messages(&self) -> Vec<FakeMessage> {
        lock(&self.world).messages.clone()
    }

    pub fn calls(&self) -> Vec<FakeCall> {
        lock(&self.world).calls.clone()
    }

    /// Calls the fake refused as malformed (wrong auth, shape or fields).
    pub fn rejections(&self) -> Vec<FakeCall> {
        self.calls().into_iter().filter(|c| c.rejected).collect()
    }

    /// As if a person deleted the message.
    pub fn delete_message(&self, ts: &str) {
        lock(&self.world).messages.retain(|m| m.ts != ts);
    }

    /// Host a file; the returned description is what an event would carry.
    pub fn add_file(&self, name: &str, bytes: Vec<u8>) -> SlackFile {
        let mut world = lock(&self.world);
        let id = format!("F{:06}", world.files.len() + 1);
        let file = SlackFile {
            id: id.clone(),
            name: Some(name.to_owned()),
            size: Some(bytes.len() as u64),
            url_private_download: Some(format!("{}/files/{id}/{name}", world.base)),
            file_access: None,
        };
        world.files.insert(id, (file.clone(), bytes));
        file
    }
}

impl Drop for SlackFake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Slack's error shape: HTTP 200 with `ok: false`.
fn slack_error(code: &str) -> Response {
    Json(json!({ "ok": false, "error": code })).into_response()
}

fn fault_response(fault: &Fault) -> Response {
    match fault {
        Fault::RateLimited { retry_after_secs } => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, retry_after_secs.to_string())],
            Json(json!({ "ok": false, "error": "ratelimited" })),
        )
            .into_response(),
        Fault::Error(code) => slack_error(code),
        Fault::ServerError => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn fault_code(fault: &Fault) -> String {
    match fault {
        Fault::RateLimited { .. } => "429".into(),
        Fault::Error(code) => code.clone(),
        Fault::ServerError => "500".into(),
    }
}

impl World {
    fn record(&mut self, method: &str, error: Option<String>, rejected: bool) {
        self.calls.push(FakeCall {
            method: method.to_owned(),
            error,
            rejected,
        });
    }

    /// The auth check, then an injected fault if one is queued.
    #[allow(clippy::result_large_err)] // the error is the response to send; boxing adds only noise
    fn gate(&mut self, method: &str, headers: &HeaderMap) -> Result<(), Response> {
        let auth = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let verdict = match auth.and_then(|a| a.strip_prefix("Bearer ")) {
            None => Some("not_authed"),
            Some(token) if token != self.token => Some("invalid_auth"),
            Some(_) => None,
        };
        if let Some(code) = verdict {
            self.record(method, Some(code.into()), true);
            return Err(slack_error(code));
        }
        if let Some(fault) = self.faults.get_mut(method).and_then(VecDeque::pop_front) {
            self.record(method, Some(fault_code(&fault)), false);
            return Err(fault_response(&fault));
        }
        Ok(())
    }

    fn reject(&mut self, method: &str, code: &str) -> Response {
        self.record(method, Some(code.into()), true);
        slack_error(code)
    }

    /// A JSON object body sent as JSON.
    #[allow(clippy::result_large_err)] // as for `gate`
    fn json_body(
        &mut self,
        method: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<serde_json::Map<String, Value>, Response> {
        let json_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if !json_type {
            return Err(self.reject(method, "fake_expects_application_json"));
        }
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(self.reject(method, "invalid_json")),
        }
    }

    fn next_ts(&mut self) -> String {
        self.next_ts += 1;
        format!(
            "{}.{:06}",
            self.next_ts / 1_000_000,
            self.next_ts % 1_000_000
        )
    }
}

fn is_ts(value: &str) -> bool {
    value.split_once('.').is_some_and(|(s, m)| {
        !s.is_empty()
            && m.len() == 6
            && s.bytes().all(|b| b.is_ascii_digit())
            && m.bytes().all(|b| b.is_ascii_digit())
    })
}

fn is_channel(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// Fields every message call needs: a channel and some text (or blocks).
fn message_fields(map: &serde_json::Map<String, Value>) -> Result<(String, String), &'static str> {
    let channel = map
        .get("channel")
        .and_then(Value::as_str)
        .filter(|c| is_channel(c))
        .ok_or("channel_not_found")?;
    let text = map.get("text").and_then(Value::as_str).unwrap_or_default();
    let blocks = map.get("blocks").and_then(Value::as_array);
    if text.is_empty() && blocks.is_none_or(|b| b.is_empty()) {
        return Err("no_text");
    }
    Ok((channel.to_owned(), text.to_owned()))
}

async fn post_message(State(world): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    const METHOD: &str = "chat.postMessage";
    let mut world = lock(&world);
    if let Err(response) = world.gate(METHOD, &headers) {
        return response;
    }
    let map = match world.json_body(METHOD, &headers, &body) {
        Ok(map) => map,
        Err(response) => return response,
    };
    let (channel, text) = match message_fields(&map) {
        Ok(fields) => fields,
        Err(code) => return world.reject(METHOD, code),
    };
    let thread_ts = match map.get("thread_ts") {
        None | Some(Value::Null) => None,
        Some(Value::String(ts)) if is_ts(ts) => Some(ts.clone()),
        Some(_) => return world.reject(METHOD, "invalid_thread_ts"),
    };
    let ts = world.next_ts();
    world.messages.push(FakeMessage {
        channel: channel.clone(),
        ts: ts.clone(),
        thread_ts,
        text,
        history: Vec::new(),
    });
    world.record(METHOD, None, false);
    Json(json!({ "ok": true, "channel": channel, "ts": ts, "message": {} })).into_response()
}

async fn update_message(State(world): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    const METHOD: &str = "chat.update";
    let mut world = lock(&world);
    if let Err(response) = world.gate(METHOD, &headers) {
        return response;
    }
    let map = match world.json_body(METHOD, &headers, &body) {
        Ok(map) => map,
        Err(response) => return response,
    };
    let (channel, text) = match message_fields(&map) {
        Ok(fields) => fields,
        Err(code) => return world.reject(METHOD, code),
    };
    let Some(ts) = map
        .get("ts")
        .and_then(Value::as_str)
        .filter(|t| is_ts(t))
        .map(str::to_owned)
    else {
        return world.reject(METHOD, "fake_expects_ts");
    };
    let Some(message) = world
        .messages
        .iter_mut()
        .find(|m| m.ts == ts && m.channel == channel)
    else {
        // Not malformed: the message may have been deleted, as Slack allows.
        world.record(METHOD, Some("message_not_found".into()), false);
        return slack_error("message_not_found");
    };
    let old = std::mem::replace(&mut message.text, text);
    message.history.push(old);
    world.record(METHOD, None, false);
    Json(json!({ "ok": true, "channel": channel, "ts": ts })).into_response()
}

async fn files_info(
    State(world): State<Shared>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    const METHOD: &str = "files.info";
    let mut world = lock(&world);
    if let Err(response) = world.gate(METHOD, &headers) {
        return response;
    }
    let Some(id) = query.get("file") else {
        return world.reject(METHOD, "fake_expects_file_parameter");
    };
    match world.files.get(id).map(|(file, _)| file.clone()) {
        Some(file) => {
            world.record(METHOD, None, false);
            Json(json!({ "ok": true, "file": file })).into_response()
        }
        None => {
            world.record(METHOD, Some("file_not_found".into()), false);
            slack_error("file_not_found")
        }
    }
}

async fn download(
    State(world): State<Shared>,
    headers: HeaderMap,
    Path((id, _name)): Path<(String, String)>,
) -> Response {
    const METHOD: &str = "files.download";
    let mut world = lock(&world);
    let authorised = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.strip_prefix("Bearer "))
        == Some(world.token.as_str());
    if !authorised {
        world.record(METHOD, Some("sign_in_page".into()), true);
        return (
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            "<html><body>Sign in to Slack</body></html>",
        )
            .into_response();
    }
    if let Some(fault) = world.faults.get_mut(METHOD).and_then(VecDeque::pop_front) {
        world.record(METHOD, Some(fault_code(&fault)), false);
        return fault_response(&fault);
    }
    match world.files.get(&id).map(|(_, bytes)| bytes.clone()) {
        Some(bytes) => {
            world.record(METHOD, None, false);
            ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response()
        }
        None => {
            world.record(METHOD, Some("404".into()), false);
            StatusCode::NOT_FOUND.into_response()
        }
    }
}
