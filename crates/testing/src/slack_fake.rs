//! A fake of Slack's Web API for tests: axum on 127.0.0.1, checking what a real client must get
//! right and answering the way Slack does.
//!
//! Checked on every call: `Authorization: Bearer <the bot token>` (else `not_authed` /
//! `invalid_auth`, with HTTP 200 as Slack does), a JSON body with `application/json` for the
//! write methods, `channel`, `text` or `blocks`, a well-formed `thread_ts` when present, and
//! `ts` naming a message the fake holds for `chat.update`. A call that breaks a rule is recorded
//! as a rejection, so tests can assert their client made none.
//!
//! Block Kit payloads are held to Slack's documented limits ([`block_kit_limits`]): a message
//! breaking one is refused with `invalid_blocks`, a view with `invalid_arguments` (what Slack
//! answers for each), both with Slack's `response_metadata.messages` naming the place.
//!
//! Faults are queued per method: `Fault::RateLimited` answers HTTP 429 with `Retry-After`,
//! `Fault::Error` answers `{"ok": false, "error": code}`, `Fault::ServerError` HTTP 500.
//! Files added with [`SlackFake::add_file`] are served at their `url_private_download` to the
//! bearer of the token; anyone else gets the sign-in page, as from Slack.
//!
//! The external upload flow is served whole: `files.getUploadURLExternal` hands out an upload
//! URL on the fake's own address (or on the host [`SlackFake::set_upload_host`] names), which
//! takes the raw bytes (faults under [`UPLOAD_STEP`]), and `files.completeUploadExternal`
//! shares them. `conversations.members` pages through what [`SlackFake::set_members`] set, a
//! few members a page (see [`SlackFake::set_members_page_size`]) so clients must follow cursors.
//!
//! [`block_kit_limits`]: crate::block_kit_limits

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::block_kit_limits::{self, BlockKitError, ViewKind};
use threadbox_core::ports::{is_ts, SlackFile};

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

/// Where `views.open` trigger ids the fake accepts start: [`SlackFake::issue_trigger`] hands
/// them out, and a test may also make its own (`format!("{TRIGGER_PREFIX}mine")`). Each is good
/// for one `views.open`, as Slack's are.
pub const TRIGGER_PREFIX: &str = "1700000000.42.";

/// The fault key (for [`SlackFake::fail_next`]) and call name of the upload URL step, which is
/// no Web API method. An injected `Fault::Error` there answers HTTP 400 with the code as the
/// body, since the upload service speaks plain HTTP, not the Web API's JSON.
pub const UPLOAD_STEP: &str = "file upload";

/// Members per `conversations.members` page unless [`SlackFake::set_members_page_size`] says
/// otherwise: small, so a client that ignores `next_cursor` misses people.
pub const DEFAULT_MEMBERS_PAGE_SIZE: usize = 2;

/// A message as the fake holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeMessage {
    pub channel: String,
    pub ts: String,
    pub thread_ts: Option<String>,
    pub text: String,
    /// The current blocks, if the message has any.
    pub blocks: Option<Vec<Value>>,
    /// Earlier texts, oldest first, one per `chat.update`.
    pub history: Vec<String>,
    /// Earlier blocks, oldest first, one per `chat.update` (alongside `history`).
    pub blocks_history: Vec<Option<Vec<Value>>>,
}

/// A `chat.postEphemeral` the fake accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeEphemeral {
    pub channel: String,
    pub user: String,
    pub thread_ts: Option<String>,
    pub text: String,
    pub blocks: Option<Vec<Value>>,
}

/// A modal opened with `views.open`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenedView {
    pub trigger_id: String,
    pub view: Value,
}

/// A file going through the external upload flow, from `files.getUploadURLExternal` on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeUpload {
    pub id: String,
    pub filename: String,
    /// The `length` the client announced.
    pub declared_length: u64,
    /// What reached the upload URL; `None` until then.
    pub bytes: Option<Vec<u8>>,
    /// Whether the upload URL was sent an `Authorization` header (the bot token belongs only
    /// on Slack's hosts).
    pub authorization_sent: bool,
    /// From `files.completeUploadExternal`.
    pub title: Option<String>,
    pub channel: Option<String>,
    pub thread_ts: Option<String>,
    pub initial_comment: Option<String>,
    pub completed: bool,
}

/// One request the fake saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeCall {
    pub method: String,
    /// `None` when served; the error code (or `429` / `500`) otherwise.
    pub error: Option<String>,
    /// True when the error is the fake's verdict on a malformed call, not an injected fault.
    pub rejected: bool,
    /// Why a call was refused, when there is more to say than the code (which Block Kit limit).
    pub detail: Option<String>,
}

#[derive(Default)]
struct World {
    token: String,
    messages: Vec<FakeMessage>,
    ephemerals: Vec<FakeEphemeral>,
    opened_views: Vec<OpenedView>,
    /// Every view published, per user, oldest first.
    published: HashMap<String, Vec<Value>>,
    uploads: Vec<FakeUpload>,
    /// Upload URL key to the index of its file in `uploads`.
    upload_keys: HashMap<String, usize>,
    /// The host upload URLs name; the fake's own address when `None`.
    upload_host: Option<String>,
    members: HashMap<String, Vec<String>>,
    members_page_size: usize,
    issued_triggers: HashSet<String>,
    exchanged_triggers: HashSet<String>,
    next_id: u64,
    calls: Vec<FakeCall>,
    faults: HashMap<String, VecDeque<Fault>>,
    files: HashMap<String, (SlackFile, Vec<u8>)>,
    next_ts: u64,
    addr: Option<SocketAddr>,
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
            members_page_size: DEFAULT_MEMBERS_PAGE_SIZE,
            addr: Some(addr),
            base: format!("http://{addr}"),
            ..World::default()
        }));
        let app = Router::new()
            .route("/api/chat.postMessage", post(post_message))
            .route("/api/chat.update", post(update_message))
            .route("/api/chat.postEphemeral", post(post_ephemeral))
            .route("/api/views.open", post(views_open))
            .route("/api/views.publish", post(views_publish))
            .route("/api/files.info", get(files_info))
            .route(
                "/api/files.getUploadURLExternal",
                get(get_upload_url).post(get_upload_url),
            )
            .route("/api/files.completeUploadExternal", post(complete_upload))
            .route("/api/conversations.members", get(conversations_members))
            .route("/files/{id}/{name}", get(download))
            .route("/upload/v1/{key}", post(upload_bytes))
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

    /// `chat.postEphemeral` messages accepted, oldest first.
    pub fn ephemerals(&self) -> Vec<FakeEphemeral> {
        lock(&self.world).ephemerals.clone()
    }

    /// A trigger id for one `views.open`, as a person's click or command would give the app.
    pub fn issue_trigger(&self) -> String {
        let mut world = lock(&self.world);
        let trigger = format!("{TRIGGER_PREFIX}{:06}", world.next_id());
        world.issued_triggers.insert(trigger.clone());
        trigger
    }

    /// Modals opened with `views.open`, oldest first.
    pub fn opened_views(&self) -> Vec<OpenedView> {
        lock(&self.world).opened_views.clone()
    }

    /// The App Home view last published for `user`.
    pub fn published_view(&self, user: &str) -> Option<Value> {
        lock(&self.world)
            .published
            .get(user)
            .and_then(|views| views.last().cloned())
    }

    /// How many times a view was published for `user`.
    pub fn publish_count(&self, user: &str) -> usize {
        lock(&self.world).published.get(user).map_or(0, Vec::len)
    }

    /// Every file the upload flow started, in order, whatever step it reached.
    pub fn uploads(&self) -> Vec<FakeUpload> {
        lock(&self.world).uploads.clone()
    }

    /// The upload of file `id`.
    pub fn upload(&self, id: &str) -> Option<FakeUpload> {
        lock(&self.world)
            .uploads
            .iter()
            .find(|u| u.id == id)
            .cloned()
    }

    /// Hand out upload URLs on `host` (same port) instead of the API's own `127.0.0.1`: with
    /// `localhost`, a URL that reaches the fake but is not the configured API host, as Slack's
    /// `files.slack.com` upload URLs are not `slack.com/api`.
    pub fn set_upload_host(&self, host: &str) {
        lock(&self.world).upload_host = Some(host.to_owned());
    }

    /// Make the bot see `channel` with these members (in this order); `conversations.members`
    /// on a channel never set answers `channel_not_found`, and `chat.postEphemeral` to a user
    /// not among a set channel's members answers `user_not_in_channel`.
    pub fn set_members(&self, channel: &str, users: &[&str]) {
        lock(&self.world).members.insert(
            channel.to_owned(),
            users.iter().map(|u| (*u).to_owned()).collect(),
        );
    }

    /// At most `size` members per `conversations.members` page (at least 1), whatever `limit`
    /// asks: Slack may return fewer than asked too.
    pub fn set_members_page_size(&self, size: usize) {
        lock(&self.world).members_page_size = size.max(1);
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
            detail: None,
        });
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
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

    /// A rejection with Slack's explanation: `errors` (as `chat.postMessage` gives for
    /// `invalid_blocks`) and `response_metadata.messages` (as every method does).
    fn reject_because(&mut self, method: &str, code: &str, detail: String) -> Response {
        self.calls.push(FakeCall {
            method: method.to_owned(),
            error: Some(code.to_owned()),
            rejected: true,
            detail: Some(detail.clone()),
        });
        Json(json!({
            "ok": false,
            "error": code,
            "errors": [detail],
            "response_metadata": { "messages": [detail] },
        }))
        .into_response()
    }

    /// Refuse a message whose blocks break a Block Kit limit.
    fn reject_blocks(&mut self, method: &str, error: BlockKitError) -> Response {
        self.reject_because(method, "invalid_blocks", error.to_string())
    }

    /// The prelude of every JSON method: the auth check and faults, then the body.
    #[allow(clippy::result_large_err)] // as for `gate`
    fn json_call(
        &mut self,
        method: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<serde_json::Map<String, Value>, Response> {
        self.gate(method, headers)?;
        self.json_body(method, headers, body)
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

/// A message's `blocks`: none when absent or null; otherwise an array (or, as form-encoded calls
/// send it, a JSON string of one) within Block Kit's limits.
fn message_blocks(
    map: &serde_json::Map<String, Value>,
) -> Result<Option<Vec<Value>>, BlockKitError> {
    let blocks = match map.get("blocks") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(encoded)) => {
            serde_json::from_str::<Value>(encoded).map_err(|e| BlockKitError {
                pointer: "/blocks".into(),
                reason: format!("is not JSON: {e}"),
            })?
        }
        Some(blocks) => blocks.clone(),
    };
    block_kit_limits::check_message_blocks(&blocks)?;
    match blocks {
        Value::Array(blocks) => Ok(Some(blocks)),
        // `check_message_blocks` refuses anything else already; this keeps the types honest.
        _ => Err(BlockKitError {
            pointer: "/blocks".into(),
            reason: "must be an array of blocks".into(),
        }),
    }
}

/// A well-formed `thread_ts`, if any.
fn thread_ts(map: &serde_json::Map<String, Value>) -> Result<Option<String>, &'static str> {
    match map.get("thread_ts") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(ts)) if is_ts(ts) => Ok(Some(ts.clone())),
        Some(_) => Err("invalid_thread_ts"),
    }
}

/// A user id as Slack writes them (`U…`, or `W…` on Enterprise Grid).
fn is_user(value: &str) -> bool {
    value.len() > 1
        && (value.starts_with('U') || value.starts_with('W'))
        && value
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

async fn post_message(State(world): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    const METHOD: &str = "chat.postMessage";
    let mut world = lock(&world);
    let map = match world.json_call(METHOD, &headers, &body) {
        Ok(map) => map,
        Err(response) => return response,
    };
    let (channel, text) = match message_fields(&map) {
        Ok(fields) => fields,
        Err(code) => return world.reject(METHOD, code),
    };
    let thread_ts = match thread_ts(&map) {
        Ok(ts) => ts,
        Err(code) => return world.reject(METHOD, code),
    };
    let blocks = match message_blocks(&map) {
        Ok(blocks) => blocks,
        Err(error) => return world.reject_blocks(METHOD, error),
    };
    let ts = world.next_ts();
    world.messages.push(FakeMessage {
        channel: channel.clone(),
        ts: ts.clone(),
        thread_ts,
        text,
        blocks,
        history: Vec::new(),
        blocks_history: Vec::new(),
    });
    world.record(METHOD, None, false);
    Json(json!({ "ok": true, "channel": channel, "ts": ts, "message": {} })).into_response()
}

async fn update_message(State(world): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    const METHOD: &str = "chat.update";
    let mut world = lock(&world);
    let map = match world.json_call(METHOD, &headers, &body) {
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
    let blocks = match message_blocks(&map) {
        Ok(blocks) => blocks,
        Err(error) => return world.reject_blocks(METHOD, error),
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
    // Slack replaces the blocks too: an update without them leaves a text-only message.
    let old_blocks = std::mem::replace(&mut message.blocks, blocks);
    message.blocks_history.push(old_blocks);
    world.record(METHOD, None, false);
    Json(json!({ "ok": true, "channel": channel, "ts": ts })).into_response()
}

async fn post_ephemeral(State(world): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    const METHOD: &str = "chat.postEphemeral";
    let mut world = lock(&world);
    let map = match world.json_call(METHOD, &headers, &body) {
        Ok(map) => map,
        Err(response) => return response,
    };
    let (channel, text) = match message_fields(&map) {
        Ok(fields) => fields,
        Err(code) => return world.reject(METHOD, code),
    };
    let Some(user) = map
        .get("user")
        .and_then(Value::as_str)
        .filter(|u| is_user(u))
        .map(str::to_owned)
    else {
        return world.reject(METHOD, "user_not_found");
    };
    let thread_ts = match thread_ts(&map) {
        Ok(ts) => ts,
        Err(code) => return world.reject(METHOD, code),
    };
    let blocks = match message_blocks(&map) {
        Ok(blocks) => blocks,
        Err(error) => return world.reject_blocks(METHOD, error),
    };
    // Only checked where a test said who is in the channel.
    let outsider = world
        .members
        .get(&channel)
        .is_some_and(|members| !members.contains(&user));
    if outsider {
        world.record(METHOD, Some("user_not_in_channel".into()), false);
        return slack_error("user_not_in_channel");
    }
    let message_ts = world.next_ts();
    world.ephemerals.push(FakeEphemeral {
        channel,
        user,
        thread_ts,
        text,
        blocks,
    });
    world.record(METHOD, None, false);
    Json(json!({ "ok": true, "message_ts": message_ts })).into_response()
}

/// A view argument: an object, or (as Slack's docs describe it) a JSON-encoded string of one.
/// `Err` carries the reason for `invalid_arguments`.
fn view_argument(map: &serde_json::Map<String, Value>) -> Result<Value, BlockKitError> {
    let view = match map.get("view") {
        None | Some(Value::Null) => {
            return Err(BlockKitError {
                pointer: "/view".into(),
                reason: "is required".into(),
            })
        }
        Some(Value::String(encoded)) => {
            serde_json::from_str(encoded).map_err(|e| BlockKitError {
                pointer: "/view".into(),
                reason: format!("is not JSON: {e}"),
            })?
        }
        Some(view) => view.clone(),
    };
    Ok(view)
}

/// Check a view for a method that takes `expected` views; Slack answers `invalid_arguments`
/// for every view problem, with the reasons in `response_metadata.messages`.
fn checked_view(
    map: &serde_json::Map<String, Value>,
    expected: ViewKind,
) -> Result<Value, BlockKitError> {
    let view = view_argument(map)?;
    let kind = block_kit_limits::check_view(&view)?;
    if kind != expected {
        return Err(BlockKitError {
            pointer: "/view/type".into(),
            reason: match expected {
                ViewKind::Modal => "views.open takes a modal".into(),
                ViewKind::Home => "views.publish takes a home view".into(),
            },
        });
    }
    Ok(view)
}

/// What Slack answers for a view: the view with the id it gave it.
fn view_answer(world: &mut World, mut view: Value) -> Response {
    let id = format!("V{:08}", world.next_id());
    if let Value::Object(object) = &mut view {
        object.insert("id".into(), Value::String(id));
    }
    Json(json!({ "ok": true, "view": view })).into_response()
}

async fn views_open(State(world): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    const METHOD: &str = "views.open";
    let mut world = lock(&world);
    let map = match world.json_call(METHOD, &headers, &body) {
        Ok(map) => map,
        Err(response) => return response,
    };
    let trigger_id = map
        .get("trigger_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let known = world.issued_triggers.contains(&trigger_id)
        || (trigger_id.starts_with(TRIGGER_PREFIX) && trigger_id.len() > TRIGGER_PREFIX.len());
    if !known {
        return world.reject(METHOD, "invalid_trigger_id");
    }
    if world.exchanged_triggers.contains(&trigger_id) {
        // Not malformed, but a trigger opens one view only.
        world.record(METHOD, Some("exchanged_trigger_id".into()), false);
        return slack_error("exchanged_trigger_id");
    }
    let view = match checked_view(&map, ViewKind::Modal) {
        Ok(view) => view,
        Err(error) => return world.reject_because(METHOD, "invalid_arguments", error.to_string()),
    };
    world.exchanged_triggers.insert(trigger_id.clone());
    world.opened_views.push(OpenedView {
        trigger_id,
        view: view.clone(),
    });
    world.record(METHOD, None, false);
    view_answer(&mut world, view)
}

async fn views_publish(State(world): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    const METHOD: &str = "views.publish";
    let mut world = lock(&world);
    let map = match world.json_call(METHOD, &headers, &body) {
        Ok(map) => map,
        Err(response) => return response,
    };
    let Some(user) = map
        .get("user_id")
        .and_then(Value::as_str)
        .filter(|u| is_user(u))
        .map(str::to_owned)
    else {
        return world.reject(METHOD, "user_not_found");
    };
    let view = match checked_view(&map, ViewKind::Home) {
        Ok(view) => view,
        Err(error) => return world.reject_because(METHOD, "invalid_arguments", error.to_string()),
    };
    world.published.entry(user).or_default().push(view.clone());
    world.record(METHOD, None, false);
    view_answer(&mut world, view)
}

/// The arguments of a method Slack takes in any encoding: the query string, then a
/// form-encoded or JSON body (scalars only, as strings).
fn loose_arguments(uri: &Uri, headers: &HeaderMap, body: &[u8]) -> HashMap<String, String> {
    let mut arguments = Query::<HashMap<String, String>>::try_from_uri(uri)
        .map(|Query(q)| q)
        .unwrap_or_default();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if content_type.starts_with("application/json") {
        if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) {
            for (key, value) in map {
                let value = match value {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                arguments.insert(key, value);
            }
        }
    } else if !body.is_empty() {
        // A form body parses as a query string would.
        let form = Uri::try_from(format!("/?{}", String::from_utf8_lossy(body)))
            .ok()
            .and_then(|uri| Query::<HashMap<String, String>>::try_from_uri(&uri).ok());
        if let Some(Query(form)) = form {
            arguments.extend(form);
        }
    }
    arguments
}

async fn get_upload_url(
    State(world): State<Shared>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    const METHOD: &str = "files.getUploadURLExternal";
    let mut world = lock(&world);
    if let Err(response) = world.gate(METHOD, &headers) {
        return response;
    }
    let arguments = loose_arguments(&uri, &headers, &body);
    let Some(filename) = arguments.get("filename").filter(|f| !f.is_empty()) else {
        return world.reject(METHOD, "invalid_arguments");
    };
    let Some(length) = arguments
        .get("length")
        .and_then(|l| l.parse::<u64>().ok())
        .filter(|l| *l > 0)
    else {
        return world.reject(METHOD, "invalid_arguments");
    };
    let id = format!("FUP{:06}", world.next_id());
    let key = uuid::Uuid::new_v4().simple().to_string();
    let port = world.addr.map_or(0, |a| a.port());
    let upload_url = match &world.upload_host {
        Some(host) => format!("http://{host}:{port}/upload/v1/{key}"),
        None => format!("{}/upload/v1/{key}", world.base),
    };
    world.uploads.push(FakeUpload {
        id: id.clone(),
        filename: filename.clone(),
        declared_length: length,
        bytes: None,
        authorization_sent: false,
        title: None,
        channel: None,
        thread_ts: None,
        initial_comment: None,
        completed: false,
    });
    let index = world.uploads.len() - 1;
    world.upload_keys.insert(key, index);
    world.record(METHOD, None, false);
    Json(json!({ "ok": true, "upload_url": upload_url, "file_id": id })).into_response()
}

/// The upload URL: the raw bytes of the file, announced `length` and all. Slack's upload
/// service needs no token (the URL is the permission), so none is checked; whether one came is
/// recorded.
async fn upload_bytes(
    State(world): State<Shared>,
    Path(key): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut world = lock(&world);
    let Some(index) = world.upload_keys.get(&key).copied() else {
        world.record(UPLOAD_STEP, Some("404".into()), true);
        return StatusCode::NOT_FOUND.into_response();
    };
    if let Some(fault) = world
        .faults
        .get_mut(UPLOAD_STEP)
        .and_then(VecDeque::pop_front)
    {
        world.record(UPLOAD_STEP, Some(fault_code(&fault)), false);
        return match fault {
            Fault::Error(code) => (StatusCode::BAD_REQUEST, code).into_response(),
            other => fault_response(&other),
        };
    }
    let multipart = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/"));
    let refuse = |world: &mut World, code: &str, detail: String| {
        world.calls.push(FakeCall {
            method: UPLOAD_STEP.to_owned(),
            error: Some(code.to_owned()),
            rejected: true,
            detail: Some(detail),
        });
        (StatusCode::BAD_REQUEST, code.to_owned()).into_response()
    };
    if multipart {
        // Slack takes multipart too; the fake keeps to raw bodies, which is what ours sends.
        return refuse(&mut world, "fake_expects_raw_body", "multipart body".into());
    }
    let declared = world.uploads[index].declared_length;
    if body.len() as u64 != declared {
        return refuse(
            &mut world,
            "length_mismatch",
            format!("announced {declared} bytes, sent {}", body.len()),
        );
    }
    let upload = &mut world.uploads[index];
    upload.bytes = Some(body.to_vec());
    upload.authorization_sent = headers.contains_key(header::AUTHORIZATION);
    world.record(UPLOAD_STEP, None, false);
    (StatusCode::OK, format!("OK - {}", body.len())).into_response()
}

async fn complete_upload(State(world): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    const METHOD: &str = "files.completeUploadExternal";
    let mut world = lock(&world);
    let map = match world.json_call(METHOD, &headers, &body) {
        Ok(map) => map,
        Err(response) => return response,
    };
    let files: Vec<(String, Option<String>)> = match map.get("files").and_then(Value::as_array) {
        Some(files) if !files.is_empty() => {
            let parsed: Option<Vec<_>> = files
                .iter()
                .map(|f| {
                    let id = f.get("id").and_then(Value::as_str)?.to_owned();
                    let title = f.get("title").and_then(Value::as_str).map(str::to_owned);
                    Some((id, title))
                })
                .collect();
            match parsed {
                Some(parsed) => parsed,
                None => return world.reject(METHOD, "invalid_arguments"),
            }
        }
        _ => return world.reject(METHOD, "invalid_arguments"),
    };
    let channel = match map.get("channel_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) if is_channel(c) => Some(c.clone()),
        Some(_) => return world.reject(METHOD, "channel_not_found"),
    };
    let thread_ts = match thread_ts(&map) {
        Ok(ts) => ts,
        Err(code) => return world.reject(METHOD, code),
    };
    if thread_ts.is_some() && channel.is_none() {
        // Slack: a reply needs the one channel it is in.
        return world.reject_because(
            METHOD,
            "invalid_arguments",
            "thread_ts without channel_id".into(),
        );
    }
    let initial_comment = map
        .get("initial_comment")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut indices = Vec::with_capacity(files.len());
    for (id, _) in &files {
        match world.uploads.iter().position(|u| &u.id == id) {
            Some(i) if world.uploads[i].bytes.is_some() => indices.push(i),
            Some(_) => {
                return world.reject_because(
                    METHOD,
                    "file_not_found",
                    format!("{id}: no bytes reached the upload URL"),
                )
            }
            None => return world.reject(METHOD, "file_not_found"),
        }
    }
    let mut answer = Vec::with_capacity(files.len());
    for ((id, title), index) in files.into_iter().zip(indices) {
        let upload = &mut world.uploads[index];
        upload.title = title.clone();
        upload.channel = channel.clone();
        upload.thread_ts = thread_ts.clone();
        upload.initial_comment = initial_comment.clone();
        upload.completed = true;
        answer.push(json!({ "id": id, "title": title.unwrap_or_default() }));
    }
    world.record(METHOD, None, false);
    Json(json!({ "ok": true, "files": answer })).into_response()
}

/// `conversations.members` cursors: where the next page starts.
const CURSOR_PREFIX: &str = "fake-members:";

async fn conversations_members(
    State(world): State<Shared>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    const METHOD: &str = "conversations.members";
    let mut world = lock(&world);
    if let Err(response) = world.gate(METHOD, &headers) {
        return response;
    }
    let Some(channel) = query.get("channel").filter(|c| is_channel(c)) else {
        return world.reject(METHOD, "channel_not_found");
    };
    // Slack's default page is 100; its maximum 1000.
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None => 100,
        Some(Ok(limit)) if (1..=1000).contains(&limit) => limit,
        Some(_) => return world.reject(METHOD, "invalid_limit"),
    };
    let start = match query.get("cursor").map(String::as_str) {
        None | Some("") => 0,
        Some(cursor) => match cursor
            .strip_prefix(CURSOR_PREFIX)
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(start) => start,
            None => return world.reject(METHOD, "invalid_cursor"),
        },
    };
    let Some(members) = world.members.get(channel) else {
        // What Slack says of a channel the bot cannot see: not malformed, just not there.
        world.record(METHOD, Some("channel_not_found".into()), false);
        return slack_error("channel_not_found");
    };
    if start > members.len() {
        return world.reject(METHOD, "invalid_cursor");
    }
    let end = members
        .len()
        .min(start + limit.min(world.members_page_size));
    let page = members[start..end].to_vec();
    let next_cursor = if end < members.len() {
        format!("{CURSOR_PREFIX}{end}")
    } else {
        String::new()
    };
    world.record(METHOD, None, false);
    Json(json!({
        "ok": true,
        "members": page,
        "response_metadata": { "next_cursor": next_cursor },
    }))
    .into_response()
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
