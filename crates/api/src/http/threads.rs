//! Session routes: resolve, pause, resume, reset, and reading sessions and their events.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::auth::ForCaller;
use super::error::ApiError;
use super::extract::{image_name, optional_body, ApiQuery, Thread};
use threadbox_core::domain::{
    LifecycleEvent, Millis, NetworkProfile, Session, ThreadId, Usage, MAX_SEQ,
};
use threadbox_core::usecases::{
    NetworkApplied, ResolveOptions, SandboxHandle, SandboxStatus, Threadbox,
};

/// Events shown with a session.
const RECENT_EVENTS: usize = 20;
const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 500;
const DEFAULT_EVENTS_PAGE: usize = 100;
const MAX_EVENTS_PAGE: usize = 1000;

/// Bringing a thread's sandbox up: resolve, and reset (a fresh one); and the thread's network
/// profile, which the sandboxes it brings up are made with.
pub(crate) fn resolve_routes() -> Router<Threadbox> {
    Router::new()
        .route("/v1/threads/{thread_id}/resolve", post(resolve))
        .route("/v1/threads/{thread_id}/reset", post(reset))
        .route("/v1/threads/{thread_id}/network", put(set_network))
}

/// Reading sessions and their events.
pub(crate) fn read_routes() -> Router<Threadbox> {
    Router::new()
        .route("/v1/threads", get(list))
        .route("/v1/threads/{thread_id}", get(show))
        .route("/v1/threads/{thread_id}/events", get(events))
}

pub(crate) fn pause_routes() -> Router<Threadbox> {
    Router::new().route("/v1/threads/{thread_id}/pause", post(pause))
}

pub(crate) fn resume_routes() -> Router<Threadbox> {
    Router::new().route("/v1/threads/{thread_id}/resume", post(resume))
}

/// A session as the API shows it: the record plus how long it has been idle, and in a listing
/// that asks for it (`?usage=true`) what its sandbox used.
#[derive(Serialize)]
pub(super) struct SessionView {
    #[serde(flatten)]
    session: Session,
    idle_seconds: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

impl SessionView {
    pub(super) fn new(mut session: Session, now: Millis) -> Self {
        let idle_seconds = now.since(session.last_activity_at).as_secs();
        // The default environment's names, not its values (often credentials).
        for value in session.env.values_mut() {
            *value = "<redacted>".to_owned();
        }
        Self {
            session,
            idle_seconds,
            usage: None,
        }
    }
}

/// The body of a resolve (optional) and of `PUT .../network` (required):
/// `{"network": "restricted" | "networked" | {"networked": {"allow": [...]}}}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkBody {
    network: Option<serde_json::Value>,
}

/// Read a network body. An empty body, `null` or `{}` is `None` (a resolve without one); anything
/// else must be JSON, sent as JSON, whose profile is valid: a bad allowlist entry is a 400 naming
/// it.
pub(super) fn network_body(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Option<NetworkProfile>, ApiError> {
    // `null` too: clients that always send a JSON body send it for "nothing".
    let body: Option<NetworkBody> = optional_body(headers, body, r#"{"network": ...}"#)?;
    body.and_then(|b| b.network)
        .map(|value| {
            serde_json::from_value::<NetworkProfile>(value)
                .map_err(|e| ApiError::bad_request("invalid_network", format!("network: {e}")))
        })
        .transpose()
}

/// The body of a resolve (optional): `{"network": ..., "image": NAME}`, each optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResolveBody {
    network: Option<serde_json::Value>,
    image: Option<serde_json::Value>,
}

/// Get-or-create the thread's sandbox: 201 when this call created it, 200 otherwise. An
/// optional body `{"network": ..., "image": NAME}` chooses the profile and the image of a
/// thread this call creates; a thread that exists with another is a 409 (`PUT .../network`
/// and `PUT .../image` change them). An image no one registered is a 400 naming those that are.
async fn resolve(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let body: Option<ResolveBody> = optional_body(
        &headers,
        &body,
        r#"{"network": ... (optional), "image": "NAME" (optional)}"#,
    )?;
    let (network, image) = body.map_or((None, None), |b| (b.network, b.image));
    let network = network
        .filter(|v| !v.is_null())
        .map(|value| {
            serde_json::from_value::<NetworkProfile>(value)
                .map_err(|e| ApiError::bad_request("invalid_network", format!("network: {e}")))
        })
        .transpose()?;
    let image = image_name(image)?;
    let handle = tb
        .resolve_with(
            &thread_id,
            ResolveOptions {
                network,
                image,
                ..ResolveOptions::default()
            },
        )
        .await?;
    let status = if handle.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(handle)))
}

#[derive(Serialize)]
struct NetworkView {
    session: SessionView,
    /// `live`: the sandbox was changed in place, files kept; `next_sandbox`: recorded, and the
    /// thread's next sandbox (a reset, or a recreate) is made with it; `unchanged`: it was
    /// already the thread's profile.
    applied: NetworkApplied,
    message: &'static str,
}

/// Change the thread's network profile: recorded with a `user` event, applied to the sandbox
/// where the provider can do that live, otherwise to the thread's next sandbox.
async fn set_network(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<NetworkView>, ApiError> {
    let Some(network) = network_body(&headers, &body)? else {
        return Err(ApiError::bad_request(
            "invalid_json",
            r#"the body must be {"network": "restricted" | "networked" | {"networked": {"allow": [...]}}}"#,
        ));
    };
    let change = tb.set_network(&thread_id, network).await?;
    let message = match change.applied {
        NetworkApplied::Live => "the sandbox's network was changed in place; its files are kept",
        NetworkApplied::NextSandbox if change.session.sandbox_id.is_none() => {
            "recorded; the thread's next sandbox is made with it"
        }
        NetworkApplied::NextSandbox => {
            "recorded; the sandbox keeps the network it was made with (the provider cannot \
             change it in place) and the thread's next one gets this profile (POST .../reset \
             for one now: its files are lost)"
        }
        NetworkApplied::Unchanged => "the thread already has this profile",
    };
    Ok(Json(NetworkView {
        session: SessionView::new(change.session, tb.clock.now()),
        applied: change.applied,
        message,
    }))
}

async fn pause(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
) -> Result<Json<SessionView>, ApiError> {
    let session = tb.pause(&thread_id).await?;
    Ok(Json(SessionView::new(session, tb.clock.now())))
}

/// Resume a paused sandbox; never creates one (404 for a thread without a session).
async fn resume(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
) -> Result<Json<SandboxHandle>, ApiError> {
    Ok(Json(tb.resume(&thread_id).await?))
}

#[derive(Serialize)]
struct ResetView {
    #[serde(flatten)]
    handle: SandboxHandle,
    /// Always true: a reset destroys the old sandbox with every file in it.
    files_lost: bool,
    message: &'static str,
}

async fn reset(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
) -> Result<Json<ResetView>, ApiError> {
    let handle = tb.reset(&thread_id).await?;
    Ok(Json(ResetView {
        handle,
        files_lost: true,
        message: "the previous sandbox and every file in it were destroyed; this is a fresh one",
    }))
}

#[derive(Serialize)]
struct ShowView {
    session: SessionView,
    /// The most recent events, oldest first.
    events: Vec<LifecycleEvent>,
    /// The sandbox as the provider sees it now (state, disk usage); absent when the thread has
    /// none it can use, or the provider could not be asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<SandboxStatus>,
    /// Running and paused time from the thread's events, and what it cost (`domain::usage`).
    usage: Usage,
    /// What the thread's checkpoints hold (outside the sandbox's own quota); absent where
    /// there are no checkpoints to count.
    #[serde(skip_serializing_if = "Option::is_none")]
    checkpoints: Option<CheckpointUse>,
}

/// How many checkpoints a thread keeps and the bytes they hold, against its limits, and what
/// holding them costs a month where a storage price is set (`THREADBOX_PRICE_STORAGE_GIB_MONTH`).
#[derive(Serialize)]
struct CheckpointUse {
    count: usize,
    bytes: u64,
    keep: u32,
    max_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    usd_per_month: Option<f64>,
}

async fn show(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
) -> Result<Json<ShowView>, ApiError> {
    let (session, events) = tb
        .session_with_recent_events(&thread_id, RECENT_EVENTS)
        .await?;
    let now = tb.clock.now();
    let usage = tb.usage_of(&session, None, now).await?;
    // Best effort: the record is the answer, the provider's view an addition to it.
    let sandbox = match tb.peek_sandbox(&thread_id).await {
        Ok(sandbox) => Some(sandbox),
        Err(e) => {
            tracing::debug!(%thread_id, error = %e, "no sandbox view for show");
            None
        }
    };
    // Best effort too, and only where checkpoints are kept.
    let checkpoints = match &tb.checkpoints {
        Some(kept) => match kept.store.list(&thread_id).await {
            Ok(all) => {
                let bytes = all.iter().map(|c| c.bytes).sum();
                Some(CheckpointUse {
                    count: all.len(),
                    bytes,
                    keep: kept.retention.keep,
                    max_bytes: kept.retention.max_bytes,
                    usd_per_month: tb.config.pricing.stored_usd_per_month(bytes),
                })
            }
            Err(e) => {
                tracing::debug!(%thread_id, error = %e, "no checkpoint view for show");
                None
            }
        },
        None => None,
    };
    Ok(Json(ShowView {
        checkpoints,
        session: SessionView::new(session, now),
        events,
        sandbox,
        usage,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    limit: Option<usize>,
    cursor: Option<String>,
    /// With each thread's usage (its events are read: for operators, not for polling).
    usage: Option<bool>,
    /// Count usage from this time (epoch milliseconds) rather than each thread's start.
    usage_since: Option<i64>,
}

#[derive(Serialize)]
struct ListView {
    threads: Vec<SessionView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

async fn list(
    ForCaller(tb): ForCaller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<ListView>, ApiError> {
    let limit = page_size("limit", query.limit, DEFAULT_PAGE, MAX_PAGE)?;
    // A cursor is the last thread id of the page before (keyset paging), so anything else was
    // not handed out by this API.
    let after = query
        .cursor
        .as_deref()
        .map(ThreadId::parse)
        .transpose()
        .map_err(|e| {
            ApiError::bad_request(
                "invalid_query",
                format!("cursor must be the `next` value of an earlier page: {e}"),
            )
        })?;
    let now = tb.clock.now();
    if query.usage_since.is_some() && query.usage != Some(true) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "usage_since needs usage=true",
        ));
    }
    if query.usage == Some(true) {
        let since = query.usage_since.map(Millis);
        let page = tb.sessions_with_usage(limit, after.as_ref(), since).await?;
        return Ok(Json(ListView {
            threads: page
                .items
                .into_iter()
                .map(|(s, usage)| SessionView {
                    usage: Some(usage),
                    ..SessionView::new(s, now)
                })
                .collect(),
            next: page.next,
        }));
    }
    let page = tb.sessions(limit, after.as_ref()).await?;
    Ok(Json(ListView {
        threads: page
            .items
            .into_iter()
            .map(|s| SessionView::new(s, now))
            .collect(),
        next: page.next,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    after_seq: Option<u64>,
    limit: Option<usize>,
}

#[derive(Serialize)]
struct EventsView {
    events: Vec<LifecycleEvent>,
    /// Pass as `after_seq` to continue from here.
    next_after_seq: u64,
}

async fn events(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Json<EventsView>, ApiError> {
    let limit = page_size("limit", query.limit, DEFAULT_EVENTS_PAGE, MAX_EVENTS_PAGE)?;
    let after_seq = query.after_seq.unwrap_or(0);
    if after_seq > MAX_SEQ {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("after_seq must be at most {MAX_SEQ}; got {after_seq}"),
        ));
    }
    let events = tb.events(&thread_id, after_seq, limit).await?;
    let next_after_seq = events.last().map_or(after_seq, |e| e.seq);
    Ok(Json(EventsView {
        events,
        next_after_seq,
    }))
}

fn page_size(
    name: &str,
    asked: Option<usize>,
    default: usize,
    max: usize,
) -> Result<usize, ApiError> {
    match asked {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::bad_request(
            "invalid_query",
            format!("{name} must be between 1 and {max}; got {n}"),
        )),
    }
}
