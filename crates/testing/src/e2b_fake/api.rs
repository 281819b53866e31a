//! The fake's control plane: E2B's REST API with the status codes and error bodies of the
//! status matrix of docs/e2b.md §3 and the v2 create/connect of §2.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use base64::Engine;
use serde_json::{json, Value};

use threadbox_core::domain::Millis;
use threadbox_e2b::rfc3339;
use threadbox_e2b::wire::parse_metadata_filter;

use super::state::{random_hex, FakeState, IdempotencyRecord, Idempotent, Sandbox, World};
use super::{not_found_message, Fault, RecordedRequest, Route};

/// The envd version every fake sandbox reports.
const ENVD_VERSION: &str = "0.6.6";
/// The SDKs' (and v2's) timeout when a create or connect names none.
const DEFAULT_TIMEOUT_SECS: i64 = 300;
/// How long idempotency keys are remembered.
const KEY_TTL: Duration = Duration::from_secs(24 * 3600);
/// A request that waits for a pause to finish gives up after this long.
const TRANSITION_WAIT: Duration = Duration::from_secs(60);

pub(super) fn router(world: Arc<World>) -> Router {
    Router::new()
        .route("/v2/sandboxes", post(create).get(list))
        .route("/v2/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}", get(info).delete(kill))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/network", put(set_network))
        .route("/health", get(|| async { StatusCode::OK }))
        .layer(middleware::from_fn_with_state(world.clone(), guard))
        .layer(middleware::from_fn_with_state(world.clone(), record))
        .with_state(world)
}

/// Log every request with the status it got (both listeners use this).
pub(super) async fn record(State(world): State<Arc<World>>, req: Request, next: Next) -> Response {
    let at = std::time::Instant::now();
    let method = req.method().to_string();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().map(str::to_owned);
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let response = next.run(req).await;
    world.lock_raw().requests.push(RecordedRequest {
        method,
        path,
        query,
        headers,
        status: response.status().as_u16(),
        at,
    });
    response
}

/// The API key check, then any fault a test injected for this route.
async fn guard(State(world): State<Arc<World>>, req: Request, next: Next) -> Response {
    if req.uri().path() != "/health" {
        let key_ok = req
            .headers()
            .get("x-api-key")
            .is_some_and(|v| v.as_bytes() == world.api_key.lock().unwrap().as_bytes());
        if !key_ok {
            return error(
                401,
                "Invalid API key, please visit https://e2b.dev/docs/api-key to get your API key.",
            );
        }
    }
    if let Some(route) = classify(req.method(), req.uri().path()) {
        if let Some(fault) = world.lock().take_fault(route) {
            return fault_response(fault);
        }
    }
    next.run(req).await
}

fn classify(method: &Method, path: &str) -> Option<Route> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    Some(match (method.as_str(), parts.as_slice()) {
        ("POST", ["v2", "sandboxes"]) => Route::Create,
        ("GET", ["v2", "sandboxes"]) => Route::List,
        ("POST", ["v2", "sandboxes", _, "connect"]) => Route::Connect,
        ("GET", ["sandboxes", _]) => Route::Info,
        ("DELETE", ["sandboxes", _]) => Route::Kill,
        ("POST", ["sandboxes", _, "pause"]) => Route::Pause,
        ("POST", ["sandboxes", _, "timeout"]) => Route::SetTimeout,
        _ => return None,
    })
}

pub(super) fn fault_response(fault: Fault) -> Response {
    let mut response = (
        StatusCode::from_u16(fault.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        fault.body,
    )
        .into_response();
    let headers = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&fault.content_type) {
        headers.insert("content-type", v);
    }
    for (name, value) in fault.headers {
        if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            headers.insert(n, v);
        }
    }
    response
}

pub(super) fn json_response(status: u16, body: Value) -> Response {
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        axum::Json(body),
    )
        .into_response()
}

/// E2B's error body: `{"code": <status>, "message": ...}`.
pub(super) fn error(status: u16, message: impl Into<String>) -> Response {
    json_response(
        status,
        threadbox_e2b::wire::error_body(status, &message.into()),
    )
}

fn coded_error(status: u16, message: &str, error_code: &str) -> Response {
    json_response(
        status,
        json!({"code": status, "message": message, "error_code": error_code}),
    )
}

/// Path ids must match `^[a-z0-9]+$` after a legacy `-clientID` suffix is cut.
/// The `{id}` of a sandbox route, checked as E2B checks it: the id, or E2B's 400.
struct SandboxPath(String);

impl<S: Send + Sync> FromRequestParts<S> for SandboxPath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        sandbox_id(&raw).map(SandboxPath)
    }
}

fn sandbox_id(raw: &str) -> Result<String, Response> {
    let id = raw.split('-').next().unwrap_or_default();
    if id.is_empty()
        || !id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return Err(error(400, "Invalid sandbox ID"));
    }
    Ok(id.to_owned())
}

fn validation(detail: &str) -> Response {
    error(
        400,
        format!("validation error: error in openapi3filter.RequestError: request body has an error: {detail}"),
    )
}

fn timeout_secs(world: &World, value: Option<&Value>) -> Result<i64, Response> {
    let secs = match value {
        None | Some(Value::Null) => DEFAULT_TIMEOUT_SECS,
        Some(v) => v
            .as_i64()
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| {
                validation("doesn't match schema: Error at \"/timeout\": value must be an int32")
            })?,
    };
    if secs <= 0 {
        return Err(error(400, "Timeout must be greater than 0"));
    }
    let max = world.options.max_timeout.as_secs() as i64;
    if secs > max {
        return Err(error(
            400,
            format!("Timeout cannot be greater than {} hours", max / 3600),
        ));
    }
    Ok(secs)
}

fn string_map(body: &Value, field: &str) -> Result<BTreeMap<String, String>, Response> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(validation(&format!(
                    "doesn't match schema: Error at \"/{field}/{k}\": value must be a string"
                ))),
            })
            .collect(),
        Some(_) => Err(validation(&format!(
            "doesn't match schema: Error at \"/{field}\": value must be an object"
        ))),
    }
}

fn flag(body: &Value, field: &str, default: bool) -> Result<bool, Response> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(validation(&format!(
            "doesn't match schema: Error at \"/{field}\": value must be a boolean"
        ))),
    }
}

fn valid_key(key: &str) -> bool {
    (1..=255).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `Sandbox`, as create and connect return it.
fn sandbox_json(s: &Sandbox) -> Value {
    json!({
        "templateID": s.template_id,
        "sandboxID": s.id,
        "clientID": s.client_id,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": s.token,
    })
}

/// `SandboxDetail` (with the token) or `ListedSandbox` (without).
fn detail_json(s: &Sandbox, with_token: bool) -> Value {
    let mut v = json!({
        "templateID": s.template_id,
        "sandboxID": s.id,
        "clientID": s.client_id,
        "startedAt": rfc3339::format(s.started_at),
        "endAt": rfc3339::format(s.end_at),
        "cpuCount": 2,
        "memoryMB": 512,
        "diskSizeMB": 1024,
        "state": s.state.public(),
        "envdVersion": ENVD_VERSION,
        "metadata": s.metadata,
        "allowInternetAccess": s.allow_internet_access,
        "lifecycle": {"autoResume": false, "onTimeout": if s.auto_pause { "pause" } else { "kill" }},
    });
    if with_token {
        v["envdAccessToken"] = json!(s.token);
        // Info reports the egress settings as they were given (the contract strips only an
        // egress proxy's password, which threadbox never sends).
        if let Some(network) = &s.network {
            v["network"] = network.clone();
        }
    }
    if s.state != FakeState::Running {
        v["pauseMode"] = json!("full");
    }
    v
}

/// `POST /v2/sandboxes`.
async fn create(State(world): State<Arc<World>>, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return validation("failed to decode request body"),
    };
    let key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => match v.to_str().ok().filter(|k| valid_key(k)) {
            Some(k) => Some(k.to_owned()),
            None => {
                return error(
                    400,
                    "Idempotency-Key must be 1 to 255 characters from [a-z0-9-]",
                )
            }
        },
    };
    if let Some(key) = &key {
        let now = world.now();
        let mut inner = world.lock();
        match inner.idempotency.get(key) {
            Some(record) if record.body != body => {
                return coded_error(
                    422,
                    "Idempotency-Key was already used with a different request body",
                    "idempotency_request_mismatch",
                )
            }
            Some(IdempotencyRecord {
                outcome: Idempotent::InFlight,
                ..
            }) => {
                return coded_error(
                    409,
                    "A request with this Idempotency-Key is still in progress",
                    "idempotency_in_progress",
                )
            }
            Some(IdempotencyRecord {
                outcome: Idempotent::Done(first),
                ..
            }) => return json_response(201, first.clone()),
            None => {
                inner.idempotency.insert(
                    key.clone(),
                    IdempotencyRecord {
                        body: body.clone(),
                        outcome: Idempotent::InFlight,
                        expires_at: now.plus(KEY_TTL),
                    },
                );
            }
        }
    }
    let result = start_sandbox(&world, &body).await;
    let mut inner = world.lock();
    match result {
        Err(response) => {
            // A failed create forgets its key, so the caller may try again with it.
            if let Some(key) = &key {
                inner.idempotency.remove(key);
            }
            response
        }
        Ok(created) => {
            if let Some(record) = key.as_ref().and_then(|k| inner.idempotency.get_mut(k)) {
                record.outcome = Idempotent::Done(created.clone());
            }
            if std::mem::take(&mut inner.lose_next_create_response) {
                return fault_response(Fault::text(
                    502,
                    "upstream connect error or disconnect/reset before headers. reset reason: connection termination",
                ));
            }
            json_response(201, created)
        }
    }
}

async fn start_sandbox(world: &World, body: &Value) -> Result<Value, Response> {
    let template = body
        .get("templateID")
        .and_then(Value::as_str)
        .ok_or_else(|| validation("doesn't match schema: Error at \"/templateID\": property \"templateID\" is missing"))?
        .to_owned();
    if !world.options.templates.contains(&template) {
        return Err(error(404, format!("template '{template}' not found")));
    }
    let timeout = timeout_secs(world, body.get("timeout"))?;
    let auto_pause = flag(body, "autoPause", false)?;
    let allow_internet_access = flag(body, "allow_internet_access", true)?;
    let metadata = string_map(body, "metadata")?;
    let env_vars = string_map(body, "envVars")?;
    if let Some(network) = body.get("network") {
        check_network(network).map_err(|why| error(400, why))?;
    }

    let delay = world.lock().create_delay;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }

    let mut inner = world.lock();
    let live = inner
        .sandboxes
        .values()
        .filter(|s| matches!(s.state, FakeState::Running | FakeState::Pausing))
        .count();
    let limit = world.options.max_concurrent;
    if live >= limit {
        return Err(error(
            429,
            format!("you have reached the maximum number of concurrent E2B sandboxes ({limit}). If you need more, please contact us at 'https://e2b.dev/docs/getting-help'"),
        ));
    }
    let id = format!("i{}", random_hex(20));
    let dir = world.root.join(&id);
    for sub in [dir.join("home").join("user"), dir.join("tmp")] {
        std::fs::create_dir_all(&sub)
            .map_err(|e| error(500, format!("Failed to create sandbox: {e}")))?;
    }
    let now = world.now();
    let sandbox = Sandbox {
        id: id.clone(),
        template_id: template,
        client_id: random_hex(8),
        metadata,
        env_vars,
        auto_pause,
        allow_internet_access,
        network: body.get("network").cloned(),
        state: FakeState::Running,
        started_at: now,
        end_at: now.plus(Duration::from_secs(timeout as u64)),
        token: random_hex(64),
        dir,
        guest_unresponsive: false,
    };
    let created = sandbox_json(&sandbox);
    inner.sandboxes.insert(id, sandbox);
    inner.started += 1;
    Ok(created)
}

/// Wait while a pause is in flight; `None` when the sandbox is not there (any more).
async fn settled(world: &World, id: &str) -> Option<FakeState> {
    let waited = tokio::time::Instant::now();
    loop {
        let state = world.lock().sandboxes.get(id).map(|s| s.state)?;
        if state != FakeState::Pausing || waited.elapsed() > TRANSITION_WAIT {
            return Some(state);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `POST /v2/sandboxes/{id}/connect`.
async fn connect(
    State(world): State<Arc<World>>,
    SandboxPath(id): SandboxPath,
    body: Bytes,
) -> Response {
    // v2's body is optional: `{}` or nothing means 300 s and a memory resume.
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v @ Value::Object(_)) => v,
            _ => return validation("failed to decode request body"),
        }
    };
    let timeout = match timeout_secs(&world, body.get("timeout")) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let memory = match flag(&body, "memory", true) {
        Ok(m) => m,
        Err(r) => return r,
    };
    if settled(&world, &id).await.is_none() {
        return error(404, not_found_message(&id));
    }
    // A resume takes time (`set_resume_delay`); the sandbox stays paused until it is done, and
    // what happened to it meanwhile is answered below.
    let resume_delay = {
        let inner = world.lock();
        match inner.sandboxes.get(&id) {
            Some(s) if s.state == FakeState::Paused && !(s.guest_unresponsive && memory) => {
                inner.resume_delay
            }
            _ => Duration::ZERO,
        }
    };
    if !resume_delay.is_zero() {
        tokio::time::sleep(resume_delay).await;
    }
    let now = world.now();
    let grant = Duration::from_secs(timeout as u64);
    let max_life = world.options.max_timeout;
    let rotate = world.options.rotate_tokens;
    let mut inner = world.lock();
    let Some(s) = inner.sandboxes.get_mut(&id) else {
        return error(404, not_found_message(&id));
    };
    match s.state {
        FakeState::Killing => error(409, format!("Sandbox \"{id}\" is being killed")),
        FakeState::Pausing => error(409, format!("Sandbox \"{id}\" is being paused")),
        FakeState::Running => {
            // Extend only, within the plan's maximum length counted from the (re)start.
            let cap = s.started_at.plus(max_life);
            s.end_at = s.end_at.max(now.plus(grant)).min(cap);
            json_response(200, sandbox_json(s))
        }
        FakeState::Paused => {
            if s.guest_unresponsive && memory {
                return coded_error(
                    409,
                    "The sandbox's guest agent did not respond in its snapshot; resume it without memory",
                    "sandbox_snapshot_guest_agent_unresponsive",
                );
            }
            s.guest_unresponsive = false;
            s.state = FakeState::Running;
            s.started_at = now;
            s.end_at = now.plus(grant);
            if rotate {
                s.token = random_hex(64);
            }
            json_response(201, sandbox_json(s))
        }
    }
}

/// `POST /sandboxes/{id}/pause`: blocks until the snapshot is taken.
async fn pause(State(world): State<Arc<World>>, SandboxPath(id): SandboxPath) -> Response {
    if settled(&world, &id).await.is_none() {
        return error(404, not_found_message(&id));
    }
    let delay = {
        let mut inner = world.lock();
        let Some(s) = inner.sandboxes.get_mut(&id) else {
            return error(404, not_found_message(&id));
        };
        match s.state {
            FakeState::Paused => {
                return error(
                    409,
                    format!("Error pausing sandbox - sandbox '{id}' is already paused"),
                )
            }
            FakeState::Killing => {
                return error(
                    409,
                    format!("Sandbox '{id}' cannot be paused while in 'killing' state"),
                )
            }
            FakeState::Pausing => return error(409, format!("Sandbox \"{id}\" is being paused")),
            FakeState::Running => s.state = FakeState::Pausing,
        }
        inner.pause_delay
    };
    tokio::time::sleep(delay).await;
    let now = world.now();
    let mut inner = world.lock();
    if let Some(s) = inner.sandboxes.get_mut(&id) {
        if s.state == FakeState::Pausing {
            s.state = FakeState::Paused;
            s.end_at = now;
        }
    }
    StatusCode::NO_CONTENT.into_response()
}

/// `DELETE /sandboxes/{id}`.
async fn kill(State(world): State<Arc<World>>, SandboxPath(id): SandboxPath) -> Response {
    let delay = {
        let mut inner = world.lock();
        let delay = inner.kill_delay;
        let Some(s) = inner.sandboxes.get_mut(&id) else {
            return error(404, not_found_message(&id));
        };
        if s.state == FakeState::Killing {
            return error(409, format!("Sandbox \"{id}\" is being killed"));
        }
        s.state = FakeState::Killing;
        delay
    };
    tokio::time::sleep(delay).await;
    world.lock().remove(&id);
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /sandboxes/{id}/timeout`.
async fn set_timeout(
    State(world): State<Arc<World>>,
    SandboxPath(id): SandboxPath,
    body: Bytes,
) -> Response {
    let secs = match serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("timeout").and_then(Value::as_i64))
    {
        Some(secs) => secs.max(0),
        None => {
            return error(
                400,
                "Error when parsing request: value is required but missing: timeout",
            )
        }
    };
    let now = world.now();
    let max_life = world.options.max_timeout;
    let mut inner = world.lock();
    let Some(s) = inner.sandboxes.get_mut(&id) else {
        return error(404, not_found_message(&id));
    };
    match s.state {
        // Only live sandboxes are in the store the timeout handler reads.
        FakeState::Paused => error(404, not_found_message(&id)),
        FakeState::Pausing => error(409, format!("Sandbox \"{id}\" is being paused")),
        FakeState::Killing => error(409, format!("Sandbox \"{id}\" is being killed")),
        FakeState::Running => {
            let cap = s.started_at.plus(max_life);
            if cap <= now {
                return error(400, "Max instance length exceeded");
            }
            s.end_at = now.plus(Duration::from_secs(secs as u64)).min(cap);
            StatusCode::NO_CONTENT.into_response()
        }
    }
}

/// What the fake checks of a `network` object: its `rules` (domain → a list of transforms,
/// each setting headers), shaped as the contract says, with header names and values that can
/// go on the wire. The message names the rule, never a header's value (they are credentials).
fn check_network(network: &Value) -> Result<(), String> {
    let Some(network) = network.as_object() else {
        return Err("network must be an object".into());
    };
    let Some(rules) = network.get("rules") else {
        return Ok(());
    };
    let Some(rules) = rules.as_object() else {
        return Err("network.rules must be an object of domains".into());
    };
    for (domain, transforms) in rules {
        let bare = domain.strip_prefix("*.").unwrap_or(domain);
        let is_domain = !bare.is_empty()
            && bare.contains('.')
            && bare.parse::<std::net::IpAddr>().is_err()
            && bare
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
        if !is_domain {
            return Err(format!("network.rules: {domain:?} is not a domain"));
        }
        let Some(transforms) = transforms.as_array().filter(|t| !t.is_empty()) else {
            return Err(format!(
                "network.rules[{domain:?}] must be a non-empty list of rules"
            ));
        };
        for rule in transforms {
            let Some(headers) = rule
                .get("transform")
                .and_then(|t| t.get("headers"))
                .and_then(Value::as_object)
            else {
                return Err(format!(
                    "network.rules[{domain:?}]: a rule is {{\"transform\": {{\"headers\": {{..}}}}}}"
                ));
            };
            for (name, value) in headers {
                let token = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                if !token {
                    return Err(format!(
                        "network.rules[{domain:?}]: {name:?} is not a header name"
                    ));
                }
                let ok_value = value
                    .as_str()
                    .is_some_and(|v| v.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)));
                if !ok_value {
                    return Err(format!(
                        "network.rules[{domain:?}]: the value of {name:?} must be a string \
                         without control characters"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `PUT /sandboxes/{id}/network`: replaces the sandbox's egress (omitted fields are cleared);
/// 204, 404 for a sandbox it does not have, 409 while it is being paused or killed.
async fn set_network(
    State(world): State<Arc<World>>,
    SandboxPath(id): SandboxPath,
    body: Bytes,
) -> Response {
    let network = match serde_json::from_slice::<Value>(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            return error(
                400,
                "Error when parsing request: the body must be an object",
            )
        }
    };
    if let Err(why) = check_network(&network) {
        return error(400, why);
    }
    let mut inner = world.lock();
    let Some(s) = inner.sandboxes.get_mut(&id) else {
        return error(404, not_found_message(&id));
    };
    match s.state {
        FakeState::Pausing => error(409, format!("Sandbox \"{id}\" is being paused")),
        FakeState::Killing => error(404, not_found_message(&id)),
        FakeState::Running | FakeState::Paused => {
            s.network = Some(network);
            StatusCode::NO_CONTENT.into_response()
        }
    }
}

/// `GET /sandboxes/{id}`.
async fn info(State(world): State<Arc<World>>, SandboxPath(id): SandboxPath) -> Response {
    let inner = world.lock();
    match inner.sandboxes.get(&id) {
        Some(s) if s.state != FakeState::Killing => json_response(200, detail_json(s, true)),
        _ => error(404, not_found_message(&id)),
    }
}

/// `GET /v2/sandboxes`.
async fn list(
    State(world): State<Arc<World>>,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let mut states: Vec<&str> = Vec::new();
    let mut filter = BTreeMap::new();
    let mut limit = 100usize;
    let mut ascending = false;
    let mut after: Option<(Millis, String)> = None;
    for (name, value) in &params {
        match name.as_str() {
            "state" => {
                for s in value.split(',') {
                    match s {
                        "running" | "paused" => {
                            states.push(if s == "running" { "running" } else { "paused" })
                        }
                        _ => return error(400, format!("invalid state '{s}'")),
                    }
                }
            }
            "metadata" => match parse_metadata_filter(value) {
                Some(f) => filter = f,
                None => return error(400, "error when parsing metadata: invalid key value pair"),
            },
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=100).contains(&n) => limit = n,
                _ => return validation("parameter \"limit\" must be between 1 and 100"),
            },
            "order" => match value.as_str() {
                "asc" => ascending = true,
                "desc" => ascending = false,
                _ => return validation("parameter \"order\" must be asc or desc"),
            },
            "nextToken" => match decode_token(value) {
                Some(t) => after = Some(t),
                None => return error(400, "Invalid next token"),
            },
            _ => {}
        }
    }
    if states.is_empty() {
        states = vec!["running", "paused"];
    }
    let inner = world.lock();
    let mut matching: Vec<&Sandbox> = inner
        .sandboxes
        .values()
        .filter(|s| s.state != FakeState::Killing)
        .filter(|s| states.contains(&s.state.public()))
        .filter(|s| filter.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
        .collect();
    matching.sort_by(|a, b| (a.started_at, &a.id).cmp(&(b.started_at, &b.id)));
    if !ascending {
        matching.reverse();
    }
    let total_running = matching
        .iter()
        .filter(|s| s.state == FakeState::Running)
        .count();
    if let Some((at, id)) = &after {
        let cursor = (*at, id);
        matching.retain(|s| {
            let key = (s.started_at, &s.id);
            if ascending {
                key > cursor
            } else {
                key < cursor
            }
        });
    }
    let more = matching.len() > limit;
    matching.truncate(limit);
    let body: Vec<Value> = matching.iter().map(|s| detail_json(s, false)).collect();
    let mut response = json_response(200, Value::Array(body));
    if more {
        if let Some(last) = matching.last() {
            if let Ok(v) = HeaderValue::from_str(&encode_token(last.started_at, &last.id)) {
                response.headers_mut().insert("x-next-token", v);
            }
        }
    }
    if states.contains(&"running") {
        response
            .headers_mut()
            .insert("x-total-running", HeaderValue::from(total_running));
    }
    response
}

/// The server's token format: base64url of `RFC3339Nano__sandboxID`.
fn encode_token(at: Millis, id: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(format!("{}__{id}", rfc3339::format(at)))
}

fn decode_token(token: &str) -> Option<(Millis, String)> {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let mut parts = text.split("__");
    let at = rfc3339::parse(parts.next()?)?;
    let id = parts.next()?.to_owned();
    Some((at, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_filter_decodes_like_e2b() {
        // What reaches the handler after the query string's own decoding.
        let got =
            parse_metadata_filter("threadbox.thread_id=slack%253AT1%253AC1&a%2520b=x%2526y%253Dz")
                .unwrap();
        assert_eq!(got["threadbox.thread_id"], "slack:T1:C1");
        assert_eq!(got["a b"], "x&y=z");
        assert!(parse_metadata_filter("a=b=c").is_none());
        assert!(parse_metadata_filter("a").is_none());
    }

    #[test]
    fn tokens_round_trip() {
        let t = encode_token(Millis(1_700_000_000_123), "iabc");
        assert_eq!(
            decode_token(&t),
            Some((Millis(1_700_000_000_123), "iabc".into()))
        );
        assert_eq!(decode_token("!!"), None);
    }
}
