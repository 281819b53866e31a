//! E2B's control plane over threadbox's use cases.
//!
//! | E2B | threadbox |
//! |---|---|
//! | `POST /v2/sandboxes`, `POST /sandboxes` | resolve the thread the create names (created, or resumed if paused) |
//! | `GET /sandboxes/{id}` | the thread's session |
//! | `GET /v2/sandboxes`, `GET /sandboxes` | the sessions, filtered by state and metadata (labels) |
//! | `DELETE /sandboxes/{id}` | destroy the thread's sandbox |
//! | `POST /sandboxes/{id}/pause` | pause |
//! | `POST /v2/sandboxes/{id}/connect`, `/connect`, `/resume` | resume (or touch when running) |
//! | `POST /sandboxes/{id}/timeout`, `/refreshes` | activity on a running thread |
//!
//! The thread a create names: its `Idempotency-Key`, or else its `threadbox_thread` metadata
//! entry, or else a new thread of its own. Concurrent creates of one name make one sandbox
//! (the resolve's lease).

use std::collections::BTreeMap;

use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use threadbox_api::http::Caller;
use threadbox_api::wire::check_env;
use threadbox_core::domain::{
    ImageInfo, ImageName, NetworkProfile, Session, Status, ThreadId, MAX_LABELS, MAX_LABEL_BYTES,
};
use threadbox_core::ports::ExecRequest;
use threadbox_core::usecases::{ResolveOptions, Threadbox};
use threadbox_e2b::rfc3339;
use threadbox_e2b::wire::parse_metadata_filter;

use super::error::E2bError;
use super::ids::{envd_token, new_thread, sandbox_id, thread_of, BadSandboxId};
use super::{read_body, E2bApi, ENVD_VERSION, MAX_JSON_BODY};

/// The metadata entry that names a create's thread, for SDKs that send no idempotency key.
/// The core's thread label, so a fork's copy of the labels names the fork.
pub const THREAD_METADATA_KEY: &str = threadbox_core::domain::THREAD_LABEL;
/// The template a create names for the deployment's default image (E2B's SDKs' own default):
/// the thread gets the operator's default image. Any other template must name a registered
/// image (`GET /v1/images`), which the thread then starts from; threads on `host` answer as
/// this template.
pub const TEMPLATE: &str = "base";

/// The template a thread on `image` answers as: [`TEMPLATE`] for `host`, else the image's name.
fn template_of(image: &ImageName) -> &str {
    if image.is_host() {
        TEMPLATE
    } else {
        image.as_str()
    }
}
/// What `clientID` says (E2B's field is deprecated; the SDKs ignore it).
const CLIENT_ID: &str = "threadbox";
/// E2B's longest timeout (Pro plan): 24 hours.
const MAX_TIMEOUT_SECS: i64 = 24 * 60 * 60;
/// The most sandboxes one list page holds, and its default (E2B's).
const MAX_LIST_LIMIT: usize = 100;
/// Sessions read per store page while listing.
const LIST_SCAN_PAGE: usize = 200;
/// The most sessions one list call reads (5 store pages): a filter that matches few threads
/// answers a short or empty page with `X-Next-Token` rather than read every thread in one call.
const MAX_LIST_SCAN: usize = 1_000;

pub(super) fn routes() -> Router<E2bApi> {
    Router::new()
        .route("/sandboxes", post(create).get(list_v1))
        .route("/v2/sandboxes", post(create).get(list))
        .route("/sandboxes/{id}", get(info).delete(kill))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/sandboxes/{id}/connect", post(connect))
        .route("/v2/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}/resume", post(resume))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/refreshes", post(refresh))
}

/// Paths of E2B features threadbox does not offer, answered with a 501 naming them rather than
/// a plain 404.
pub(super) fn is_unsupported(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        [first, ..] if first.starts_with("templates") => true,
        ["v2" | "v3", second, ..] if second.starts_with("templates") => true,
        ["snapshots", ..] | ["volumes", ..] | ["secrets", ..] => true,
        ["sandboxes", _, "network" | "metrics" | "fork" | "snapshots" | "logs"] => true,
        ["v2", "sandboxes", _, "logs"] | ["sandboxes", "metrics"] => true,
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Shapes

/// E2B's state of a thread; `None` where E2B would answer 404 (being killed, or gone).
fn e2b_state(session: &Session) -> Option<&'static str> {
    match session.status {
        Status::Active | Status::Creating | Status::Resuming => Some("running"),
        Status::Paused | Status::Pausing => Some("paused"),
        // A failed transition left a sandbox the next call will try again: reported running,
        // so the SDK's next call reaches threadbox and gets the error or the fix.
        Status::Error if session.sandbox_id.is_some() => Some("running"),
        _ => None,
    }
}

/// Whether the thread has a sandbox E2B's proxy would route to (running, or paused and resumed
/// by the call, as E2B's auto-resume does).
pub(crate) fn reachable(session: &Session) -> bool {
    e2b_state(session).is_some()
}

impl E2bApi {
    /// `Sandbox`: what create and connect answer.
    fn sandbox_json(&self, thread: &ThreadId, image: &ImageName, caller: &Caller) -> Value {
        let id = sandbox_id(thread);
        let template = template_of(image);
        json!({
            "templateID": template,
            "alias": template,
            "sandboxID": id,
            "clientID": CLIENT_ID,
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": envd_token(&self.key, &id, caller.0.as_ref()),
            "domain": null,
        })
    }

    /// `ListedSandbox`, and with the token and lifecycle `SandboxDetail`.
    fn detail_json(&self, session: &Session, caller: Option<&Caller>) -> Option<Value> {
        let state = e2b_state(session)?;
        let id = sandbox_id(&session.thread_id);
        let started = session.resumed_at.unwrap_or(session.created_at);
        // Running: when the idle pause is due if nothing happens; paused: when it paused.
        let end = match state {
            "running" => session
                .last_activity_at
                .plus(self.tb.config.timers.idle_pause),
            _ => session.paused_at.unwrap_or(session.last_activity_at),
        };
        let size = self.tb.config.pricing.size;
        let template = template_of(&session.image);
        let mut detail = json!({
            "templateID": template,
            "alias": template,
            "sandboxID": id,
            "clientID": CLIENT_ID,
            "startedAt": rfc3339::format(started),
            "endAt": rfc3339::format(end),
            "cpuCount": size.map_or(0, |s| s.vcpus.ceil() as i64),
            "memoryMB": size.map_or(0, |s| (s.memory_gib * 1024.0).round() as i64),
            "diskSizeMB": 0,
            "state": state,
            "envdVersion": ENVD_VERSION,
            "metadata": session.labels,
        });
        if let Some(caller) = caller {
            detail["envdAccessToken"] = json!(envd_token(&self.key, &id, caller.0.as_ref()));
            detail["allowInternetAccess"] = json!(session.network.is_networked());
            // What threadbox does at the end of quiet: pause, and resume on the next call.
            detail["lifecycle"] = json!({ "autoResume": true, "onTimeout": "pause" });
        }
        Some(detail)
    }

    /// The thread a path's sandbox id names, with its session; E2B's 400 for a malformed id and
    /// 404 for one that is unknown, being killed or gone.
    async fn session_of(&self, raw: &str) -> Result<(ThreadId, Session), E2bError> {
        let thread = thread_of(raw).map_err(|bad| match bad {
            BadSandboxId::Malformed => E2bError::bad_request("Invalid sandbox ID"),
            BadSandboxId::Unknown => E2bError::sandbox_not_found(raw),
        })?;
        let session = self
            .tb
            .session(&thread)
            .await
            .map_err(threadbox_core::usecases::UseCaseError::from)?;
        match session {
            Some(session) if e2b_state(&session).is_some() => Ok((thread, session)),
            _ => Err(E2bError::sandbox_not_found(raw)),
        }
    }
}

/// A JSON object body, E2B's 400 (or 413) when it is not one; with `OPTIONAL`, an empty body
/// reads as `{}` ([`Optional`]; [`Required`] otherwise).
pub(crate) struct JsonBody<T, const OPTIONAL: bool>(pub T);
pub(crate) type Required<T> = JsonBody<T, false>;
pub(crate) type Optional<T> = JsonBody<T, true>;

impl<S, T, const OPTIONAL: bool> FromRequest<S> for JsonBody<T, OPTIONAL>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = E2bError;

    async fn from_request(request: Request, _: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(request.into_body(), MAX_JSON_BODY).await?;
        let parsing = |e: &dyn std::fmt::Display| {
            E2bError::bad_request(format!("Error when parsing request: {e}"))
        };
        let value = if OPTIONAL && bytes.iter().all(u8::is_ascii_whitespace) {
            json!({})
        } else {
            serde_json::from_slice::<Value>(&bytes).map_err(|e| parsing(&e))?
        };
        if !value.is_object() {
            return Err(parsing(&"the body must be a JSON object"));
        }
        serde_json::from_value(value)
            .map(JsonBody)
            .map_err(|e| parsing(&e))
    }
}

/// The sandbox a path names, and who asks: what every call on one sandbox starts from.
struct Target {
    api: E2bApi,
    caller: Caller,
    id: String,
}

impl FromRequestParts<E2bApi> for Target {
    type Rejection = E2bError;

    async fn from_request_parts(parts: &mut Parts, api: &E2bApi) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, api)
            .await
            .map_err(|e| E2bError::bad_request(e.body_text()))?;
        // `require_key` put it there; a route outside it is refused, never run for nobody.
        let caller = parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            E2bError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "this route is not behind the API key check",
            )
        })?;
        Ok(Self {
            api: api.clone(),
            caller,
            id,
        })
    }
}

impl Target {
    fn tb(&self) -> Threadbox {
        self.api.for_caller(&self.caller)
    }

    async fn session(&self) -> Result<(ThreadId, Session), E2bError> {
        self.api.session_of(&self.id).await
    }
}

fn check_timeout(timeout: Option<i64>) -> Result<(), E2bError> {
    match timeout {
        Some(t) if t <= 0 => Err(E2bError::bad_request("Timeout must be greater than 0")),
        Some(t) if t > MAX_TIMEOUT_SECS => Err(E2bError::bad_request(
            "Timeout cannot be greater than 24 hours",
        )),
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Create

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewSandbox {
    #[serde(rename = "templateID")]
    template_id: String,
    timeout: Option<i64>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, String>>,
    #[serde(default)]
    env_vars: Option<BTreeMap<String, String>>,
    #[serde(rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    network: Option<Value>,
    mcp: Option<Value>,
    volume_mounts: Option<Value>,
}

fn check_labels(labels: &BTreeMap<String, String>) -> Result<(), E2bError> {
    if labels.len() > MAX_LABELS {
        return Err(E2bError::bad_request(format!(
            "metadata has {} entries; at most {MAX_LABELS} are allowed",
            labels.len()
        )));
    }
    for (key, value) in labels {
        if key.is_empty() || key.len() > MAX_LABEL_BYTES || value.len() > MAX_LABEL_BYTES {
            return Err(E2bError::bad_request(format!(
                "metadata keys must be 1 to {MAX_LABEL_BYTES} bytes and values at most \
                 {MAX_LABEL_BYTES}: {key:?} is not"
            )));
        }
    }
    Ok(())
}

fn parse_thread(raw: &str, from: &str) -> Result<ThreadId, E2bError> {
    ThreadId::parse(raw)
        .map_err(|e| E2bError::bad_request(format!("{from} does not name a thread: {e}")))
}

/// The thread a create names (see the module doc).
fn thread_named(
    headers: &HeaderMap,
    labels: &BTreeMap<String, String>,
) -> Result<ThreadId, E2bError> {
    let by_key = headers
        .get("idempotency-key")
        .map(|k| {
            let k = k
                .to_str()
                .map_err(|_| E2bError::bad_request("the Idempotency-Key is not visible ASCII"))?;
            parse_thread(k, "the Idempotency-Key")
        })
        .transpose()?;
    let by_label = labels
        .get(THREAD_METADATA_KEY)
        .map(|t| parse_thread(t, "metadata threadbox_thread"))
        .transpose()?;
    match (by_key, by_label) {
        (Some(a), Some(b)) if a != b => Err(E2bError::bad_request(format!(
            "the Idempotency-Key names thread {a} and metadata threadbox_thread names {b}; \
             send one, or the same"
        ))),
        (Some(thread), _) | (None, Some(thread)) => Ok(thread),
        (None, None) => Ok(new_thread()),
    }
}

impl NewSandbox {
    /// The resolve options this create asks for, after refusing what threadbox cannot do.
    /// `registered`: the images the deployment has, which a template other than [`TEMPLATE`]
    /// must name.
    fn options(&self, registered: &[ImageInfo]) -> Result<ResolveOptions, E2bError> {
        let image = match self.template_id.as_str() {
            TEMPLATE => None,
            named => match registered.iter().find(|i| i.name.as_str() == named) {
                Some(info) => Some(info.name.clone()),
                None => {
                    let names: Vec<&str> = registered.iter().map(|i| i.name.as_str()).collect();
                    return Err(E2bError::bad_request(format!(
                        "template {named:?}: threadbox's templates are its images: \
                         {TEMPLATE:?} for the deployment's default, or one of {} \
                         (GET /v1/images)",
                        names.join(", ")
                    )));
                }
            },
        };
        check_timeout(self.timeout)?;
        let env = self.env_vars.clone().unwrap_or_default();
        // Held to a command's own rules and limits on its environment.
        check_env(&env).map_err(|e| E2bError::bad_request(format!("envVars: {}", e.message)))?;
        let mut as_exec = ExecRequest::shell("");
        as_exec.env = env.clone();
        as_exec
            .check_sizes()
            .map_err(|e| E2bError::bad_request(format!("envVars: {e}")))?;
        for (field, value) in [
            ("network", &self.network),
            ("mcp", &self.mcp),
            ("volumeMounts", &self.volume_mounts),
        ] {
            if value.as_ref().is_some_and(|v| !v.is_null()) {
                return Err(E2bError::unsupported(&format!(
                    "{field} on create (a thread's network is its threadbox profile: \
                     PUT /v1/threads/{{id}}/network)"
                )));
            }
        }
        let labels = self.metadata.clone().unwrap_or_default();
        check_labels(&labels)?;
        Ok(ResolveOptions {
            // `false` asks for no network; otherwise the thread's configured profile.
            network: (self.allow_internet_access == Some(false))
                .then_some(NetworkProfile::Restricted),
            image,
            labels,
            env,
            ..ResolveOptions::default()
        })
    }
}

/// `POST /v2/sandboxes` and `POST /sandboxes`.
async fn create(
    State(api): State<E2bApi>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    JsonBody(request): Required<NewSandbox>,
) -> Result<Response, E2bError> {
    let tb = api.for_caller(&caller);
    let options = request.options(&tb.images())?;
    let thread = thread_named(&headers, &options.labels)?;
    let asked = options.image.clone();
    tb.resolve_with(&thread, options).await?;
    // The thread's own image: the one asked for (a thread with another is a conflict), else
    // its record's (the default for a new thread, or what an existing one has).
    let image = match asked {
        Some(image) => image,
        None => tb.load(&thread).await?.image,
    };
    Ok((
        StatusCode::CREATED,
        Json(api.sandbox_json(&thread, &image, &caller)),
    )
        .into_response())
}

// ---------------------------------------------------------------------------------------------
// Read

/// `GET /sandboxes/{id}`.
async fn info(target: Target) -> Result<Response, E2bError> {
    let (_, session) = target.session().await?;
    let detail = target
        .api
        .detail_json(&session, Some(&target.caller))
        .ok_or_else(|| E2bError::sandbox_not_found(&target.id))?;
    Ok(Json(detail).into_response())
}

/// What a list asks for.
struct ListQuery {
    running: bool,
    paused: bool,
    metadata: BTreeMap<String, String>,
    limit: usize,
    after: Option<ThreadId>,
}

impl ListQuery {
    fn parse(params: &[(String, String)], v1: bool) -> Result<Self, E2bError> {
        let mut query = ListQuery {
            running: v1,
            paused: false,
            metadata: BTreeMap::new(),
            limit: if v1 { usize::MAX } else { MAX_LIST_LIMIT },
            after: None,
        };
        let mut states_given = v1;
        for (name, value) in params {
            match name.as_str() {
                "state" if !v1 => {
                    states_given = true;
                    for state in value.split(',') {
                        match state {
                            "running" => query.running = true,
                            "paused" => query.paused = true,
                            other => {
                                return Err(E2bError::bad_request(format!(
                                    "state {other:?}: must be running or paused"
                                )))
                            }
                        }
                    }
                }
                "metadata" => {
                    query.metadata = parse_metadata_filter(value).ok_or_else(|| {
                        E2bError::bad_request("metadata: not a valid key=value&... query")
                    })?;
                }
                "limit" if !v1 => {
                    query.limit = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_LIST_LIMIT).contains(n))
                        .ok_or_else(|| {
                            E2bError::bad_request(format!(
                                "limit {value:?}: must be 1 to {MAX_LIST_LIMIT}"
                            ))
                        })?;
                }
                "nextToken" if !v1 => {
                    query.after = Some(
                        thread_of(value)
                            .map_err(|_| E2bError::bad_request("Invalid next token"))?,
                    );
                }
                "order" if !v1 && value != "asc" && value != "desc" => {
                    return Err(E2bError::bad_request(format!(
                        "order {value:?}: must be asc or desc"
                    )))
                }
                _ => {}
            }
        }
        if !states_given {
            (query.running, query.paused) = (true, true);
        }
        Ok(query)
    }

    fn matches(&self, session: &Session) -> bool {
        let wanted = match e2b_state(session) {
            Some("running") => self.running,
            Some(_) => self.paused,
            None => false,
        };
        wanted
            && self
                .metadata
                .iter()
                .all(|(k, v)| session.labels.get(k) == Some(v))
    }
}

/// What one list call found: the matching sessions, and where the next call goes on from when
/// there may be more (the last match of a full page, or the last thread read when the call had
/// read its [`MAX_LIST_SCAN`]).
struct Listed {
    found: Vec<Session>,
    next: Option<ThreadId>,
}

/// The matching sessions after `query.after`, at most `limit`, reading at most
/// [`MAX_LIST_SCAN`] sessions.
async fn matching(tb: &Threadbox, query: &ListQuery) -> Result<Listed, E2bError> {
    let mut found = Vec::new();
    let mut after = query.after.clone();
    let mut read = 0;
    loop {
        let page = tb
            .sessions(LIST_SCAN_PAGE, after.as_ref())
            .await
            .map_err(threadbox_core::usecases::UseCaseError::from)?;
        read += page.items.len();
        let last = page.items.last().map(|s| s.thread_id.clone());
        for session in page.items {
            if query.matches(&session) {
                if found.len() == query.limit {
                    let next = found.last().map(|s: &Session| s.thread_id.clone());
                    return Ok(Listed { found, next });
                }
                found.push(session);
            }
        }
        match (last, page.next) {
            (Some(last), Some(_)) if read >= MAX_LIST_SCAN => {
                return Ok(Listed {
                    found,
                    next: Some(last),
                })
            }
            (Some(last), Some(_)) => after = Some(last),
            _ => return Ok(Listed { found, next: None }),
        }
    }
}

/// `GET /v2/sandboxes`: in thread order (E2B sorts by start time; see docs/e2b-api.md).
async fn list(
    State(api): State<E2bApi>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Response, E2bError> {
    list_sandboxes(&api, &params, false).await
}

/// `GET /sandboxes` (deprecated): running sandboxes only, unpaged.
async fn list_v1(
    State(api): State<E2bApi>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<Response, E2bError> {
    list_sandboxes(&api, &params, true).await
}

async fn list_sandboxes(
    api: &E2bApi,
    params: &[(String, String)],
    v1: bool,
) -> Result<Response, E2bError> {
    let query = ListQuery::parse(params, v1)?;
    let Listed { found, next } = matching(&api.tb, &query).await?;
    if v1 && next.is_some() {
        return Err(E2bError::bad_request(format!(
            "there are more than {MAX_LIST_SCAN} threads to look through, and the deprecated \
             GET /sandboxes has no pages: use GET /v2/sandboxes"
        )));
    }
    let listed: Vec<Value> = found
        .iter()
        .filter_map(|s| api.detail_json(s, None))
        .collect();
    let mut response = Json(listed).into_response();
    if let Some(next) = next {
        response.headers_mut().insert(
            "x-next-token",
            HeaderValue::from_str(&sandbox_id(&next)).expect("hex is a valid header"),
        );
    }
    Ok(response)
}

// ---------------------------------------------------------------------------------------------
// Change

/// `DELETE /sandboxes/{id}`: the thread's sandbox and its files are destroyed; the thread's
/// record and events stay.
async fn kill(target: Target) -> Result<StatusCode, E2bError> {
    let (thread, _) = target.session().await?;
    target
        .tb()
        .destroy(&thread, threadbox_core::domain::Cause::User)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /sandboxes/{id}/pause` (the body, `memory` and `requireHealthyGuest`, changes
/// nothing: threadbox's pause always keeps memory).
async fn pause(target: Target, _: Optional<Value>) -> Result<StatusCode, E2bError> {
    let (thread, session) = target.session().await?;
    if e2b_state(&session) == Some("paused") {
        return Err(E2bError::new(
            StatusCode::CONFLICT,
            format!(
                "Error pausing sandbox - sandbox '{}' is already paused",
                target.id
            ),
        ));
    }
    target.tb().pause(&thread).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct ConnectBody {
    timeout: Option<i64>,
}

/// `POST /v2/sandboxes/{id}/connect` and `/sandboxes/{id}/connect`: 200 when it was running,
/// 201 when this call resumed it.
async fn connect(
    target: Target,
    JsonBody(body): Optional<ConnectBody>,
) -> Result<Response, E2bError> {
    resumed(target, body, false).await
}

/// `POST /sandboxes/{id}/resume` (deprecated): only a paused sandbox, 201.
async fn resume(
    target: Target,
    JsonBody(body): Optional<ConnectBody>,
) -> Result<Response, E2bError> {
    resumed(target, body, true).await
}

async fn resumed(
    target: Target,
    body: ConnectBody,
    deprecated: bool,
) -> Result<Response, E2bError> {
    check_timeout(body.timeout)?;
    let (thread, session) = target.session().await?;
    if deprecated && e2b_state(&session) == Some("running") {
        return Err(E2bError::new(
            StatusCode::CONFLICT,
            format!("Sandbox {} is already running", target.id),
        ));
    }
    let handle = target.tb().resume(&thread).await?;
    let status = if handle.resumed || deprecated {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let sandbox = target
        .api
        .sandbox_json(&thread, &session.image, &target.caller);
    Ok((status, Json(sandbox)).into_response())
}

/// Activity on a running sandbox, which pushes its idle pause out; E2B's 404 for a paused one.
async fn touch_running(target: &Target) -> Result<StatusCode, E2bError> {
    let (thread, session) = target.session().await?;
    if e2b_state(&session) != Some("running") {
        return Err(E2bError::sandbox_not_found(&target.id));
    }
    target.tb().resume(&thread).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct TimeoutBody {
    timeout: i64,
}

/// `POST /sandboxes/{id}/timeout`. threadbox pauses a thread after its idle timer, whatever the
/// timeout says; setting one counts as activity (docs/e2b-api.md).
async fn set_timeout(
    target: Target,
    JsonBody(TimeoutBody { timeout }): Required<TimeoutBody>,
) -> Result<StatusCode, E2bError> {
    check_timeout(Some(timeout.max(1)))?;
    touch_running(&target).await
}

#[derive(Deserialize)]
struct RefreshBody {
    duration: Option<i64>,
}

/// `POST /sandboxes/{id}/refreshes` (legacy keep-alive).
async fn refresh(
    target: Target,
    JsonBody(RefreshBody { duration }): Optional<RefreshBody>,
) -> Result<StatusCode, E2bError> {
    if duration.is_some_and(|d| !(0..=3600).contains(&d)) {
        return Err(E2bError::bad_request("duration must be 0 to 3600 seconds"));
    }
    touch_running(&target).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_features_are_named() {
        for path in [
            "/templates",
            "/v2/templates/x/builds",
            "/v3/templates",
            "/sandboxes/abc/network",
            "/sandboxes/abc/fork",
            "/sandboxes/abc/snapshots",
            "/v2/sandboxes/abc/logs",
        ] {
            assert!(is_unsupported(path), "{path}");
        }
        for path in ["/sandboxes/abc", "/nothing", "/v2/sandboxes"] {
            assert!(!is_unsupported(path), "{path}");
        }
    }

    #[test]
    fn a_create_names_its_thread_once() {
        let mut headers = HeaderMap::new();
        let labels = BTreeMap::from([(THREAD_METADATA_KEY.to_owned(), "t-1".to_owned())]);
        assert_eq!(thread_named(&headers, &labels).unwrap().as_str(), "t-1");
        headers.insert("idempotency-key", HeaderValue::from_static("t-1"));
        assert_eq!(thread_named(&headers, &labels).unwrap().as_str(), "t-1");
        headers.insert("idempotency-key", HeaderValue::from_static("t-2"));
        assert_eq!(
            thread_named(&headers, &labels).unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            thread_named(&headers, &BTreeMap::new()).unwrap().as_str(),
            "t-2"
        );
        headers.insert(
            "idempotency-key",
            HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        );
        assert!(thread_named(&headers, &BTreeMap::new()).is_err());
        let bad = BTreeMap::from([(THREAD_METADATA_KEY.to_owned(), "a b".to_owned())]);
        assert!(thread_named(&HeaderMap::new(), &bad).is_err());
        assert!(thread_named(&HeaderMap::new(), &BTreeMap::new())
            .unwrap()
            .as_str()
            .starts_with("e2b-"));
    }

    #[test]
    fn list_queries_are_checked() {
        let p = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let q = ListQuery::parse(&p(&[("state", "paused"), ("limit", "5")]), false).unwrap();
        assert!(q.paused && !q.running && q.limit == 5);
        let q = ListQuery::parse(&p(&[]), false).unwrap();
        assert!(q.paused && q.running && q.limit == MAX_LIST_LIMIT);
        let q = ListQuery::parse(&p(&[("state", "paused")]), true).unwrap();
        assert!(q.running && !q.paused, "v1 lists running sandboxes only");
        for bad in [
            [("state", "killed")],
            [("limit", "0")],
            [("limit", "101")],
            [("nextToken", "XYZ")],
            [("order", "sideways")],
            [("metadata", "a=b=c")],
        ] {
            assert!(ListQuery::parse(&p(&bad), false).is_err(), "{bad:?}");
        }
    }
}
