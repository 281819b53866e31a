//! Slack's request URLs: `POST /slack/events` here, interactivity in `interactions`, the slash
//! command in `slash`; all three share the signature check and the claim-then-queue below.
//!
//! `POST /slack/events` is Slack's Events API endpoint. It only does what must happen before
//! Slack's 3-second deadline: check the signature on the raw body, answer `url_verification`,
//! drop what is not work, drop retries and duplicates (one conditional write on `event_id`),
//! and put the work on the work queue. The worker does the rest.
//!
//! No API key here: Slack cannot send one. The signature is the authentication, so the route
//! sits outside the `/v1` key check and refuses everything unsigned.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;

use super::events::{home_opened, to_work, Envelope};
use super::signature::{SigningSecret, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use super::work::WorkItem;
use threadbox_api::http::{ApiError, MAX_JSON_BODY};
use threadbox_core::ports::{Clock, DedupeStore, DurableQueue, OutgoingMessage, SlackApi};

/// How long an `event_id` is remembered. Slack retries three times within about five minutes;
/// a day covers that with a wide margin.
pub const EVENT_MEMORY: Duration = Duration::from_secs(24 * 3600);

/// The path Slack posts events to.
pub const EVENTS_PATH: &str = "/slack/events";
/// The path Slack posts button clicks and modal submissions to (the app's interactivity URL).
pub const INTERACTIONS_PATH: &str = "/slack/interactions";
/// The path Slack posts `/sandbox` to.
pub const COMMANDS_PATH: &str = "/slack/commands";

#[derive(Clone)]
pub struct SlackIngress {
    /// `None`: Slack is not configured, and the route says so (503) instead of guessing.
    secret: Option<SigningSecret>,
    pub(super) dedupe: Arc<dyn DedupeStore>,
    pub(super) queue: Arc<dyn DurableQueue>,
    clock: Arc<dyn Clock>,
    /// For what must happen within Slack's 3 seconds: opening a modal with a click's
    /// `trigger_id` (see `interactions`). `None`: a Reset click is answered without its modal.
    pub(super) api: Option<Arc<dyn SlackApi>>,
}

/// What the ingress did with a request that passed the signature check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ack {
    /// `url_verification`: echo the challenge.
    Challenge(String),
    /// Work queued.
    Accepted { thread_id: String },
    /// `app_home_opened`: the person's Home view queued for publishing.
    HomeQueued,
    /// An `event_id` seen before (a Slack retry, or a repeat).
    Duplicate,
    /// Acknowledged without work, and why.
    Ignored(String),
}

impl IntoResponse for Ack {
    fn into_response(self) -> Response {
        let body = match self {
            Ack::Challenge(challenge) => json!({ "challenge": challenge }),
            Ack::Accepted { thread_id } => {
                json!({ "ok": true, "outcome": "accepted", "thread_id": thread_id })
            }
            Ack::HomeQueued => json!({ "ok": true, "outcome": "accepted", "view": "home" }),
            Ack::Duplicate => json!({ "ok": true, "outcome": "duplicate" }),
            Ack::Ignored(reason) => json!({ "ok": true, "outcome": "ignored", "reason": reason }),
        };
        (StatusCode::OK, Json(body)).into_response()
    }
}

impl SlackIngress {
    pub fn new(
        secret: Option<SigningSecret>,
        dedupe: Arc<dyn DedupeStore>,
        queue: Arc<dyn DurableQueue>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            secret,
            dedupe,
            queue,
            clock,
            api: None,
        }
    }

    /// Call Slack for what cannot wait for the worker (a modal's `trigger_id` lasts 3 seconds).
    pub fn with_api(mut self, api: Arc<dyn SlackApi>) -> Self {
        self.api = Some(api);
        self
    }

    /// Check Slack's signature on a request: the first step of every route here.
    pub(super) fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), ApiError> {
        let secret = self.secret.as_ref().ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "slack_not_configured",
                "Slack is not configured here: set SLACK_SIGNING_SECRET to the app's signing secret",
            )
        })?;
        let now_secs = self.clock.now().0.div_euclid(1000);
        secret
            .verify(
                headers.get(TIMESTAMP_HEADER).map(|v| v.as_bytes()),
                headers.get(SIGNATURE_HEADER).map(|v| v.as_bytes()),
                body,
                now_secs,
            )
            .map_err(|error| {
                tracing::warn!(%error, "Slack request refused");
                ApiError::unauthorized(error.to_string())
            })
    }

    /// Claim `key` and queue `item` under `dedup_id`; false when the key was claimed before
    /// (a redelivery). A failed send releases the claim, so Slack's retry can queue it.
    pub(super) async fn queue_once(
        &self,
        key: &str,
        item: &WorkItem,
        dedup_id: &str,
    ) -> Result<bool, ApiError> {
        let first = self
            .dedupe
            .claim(key, EVENT_MEMORY)
            .await
            .map_err(ApiError::from)?;
        if !first {
            return Ok(false);
        }
        let outgoing = OutgoingMessage {
            group_id: item.group_id(),
            dedup_id: dedup_id.to_owned(),
            body: serde_json::to_string(item).expect("work items serialise"),
        };
        if let Err(error) = self.queue.send(std::slice::from_ref(&outgoing)).await {
            if let Err(release) = self.dedupe.release(key).await {
                tracing::error!(%release, key, "could not release a claim after a failed enqueue; Slack's retry will be dropped");
            }
            tracing::error!(%error, key, "enqueueing Slack work failed");
            return Err(ApiError::from(
                threadbox_core::usecases::UseCaseError::Queue(error),
            ));
        }
        Ok(true)
    }

    /// Handle one Events API request from its headers and raw body: the whole job, shared by
    /// the axum route and an API Gateway Lambda.
    pub async fn handle(&self, headers: &HeaderMap, body: &[u8]) -> Result<Ack, ApiError> {
        self.verify(headers, body)?;
        let envelope: Envelope = serde_json::from_slice(body).map_err(|error| {
            ApiError::bad_request("invalid_json", format!("not a Slack event: {error}"))
        })?;
        let callback = match envelope {
            Envelope::UrlVerification { challenge } => return Ok(Ack::Challenge(challenge)),
            Envelope::EventCallback(callback) => *callback,
            Envelope::AppRateLimited {
                minute_rate_limited,
            } => {
                tracing::warn!(
                    ?minute_rate_limited,
                    "Slack says it is dropping events for this app (over its hourly limit)"
                );
                return Ok(Ack::Ignored("app_rate_limited".into()));
            }
            Envelope::Other => return Ok(Ack::Ignored("envelope type not handled".into())),
        };
        if let Some(retry) = headers.get("x-slack-retry-num") {
            tracing::info!(
                event_id = %callback.event_id,
                retry = %String::from_utf8_lossy(retry.as_bytes()),
                reason = %headers
                    .get("x-slack-retry-reason")
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                    .unwrap_or_default(),
                "Slack retry"
            );
        }
        if let Some(home) = home_opened(&callback) {
            let key = format!("slack:event:{}", callback.event_id);
            let item = WorkItem::HomeOpened(home);
            return Ok(if self.queue_once(&key, &item, &callback.event_id).await? {
                Ack::HomeQueued
            } else {
                Ack::Duplicate
            });
        }
        let message = match to_work(&callback) {
            Ok(message) => message,
            Err(ignored) => {
                tracing::debug!(event_id = %callback.event_id, reason = %ignored.reason(), "event ignored");
                return Ok(Ack::Ignored(ignored.reason()));
            }
        };

        let key = format!("slack:event:{}", callback.event_id);
        let thread_id = message.thread_id.to_string();
        let item = WorkItem::Message(message);
        if !self.queue_once(&key, &item, &callback.event_id).await? {
            return Ok(Ack::Duplicate);
        }
        tracing::info!(event_id = %callback.event_id, %thread_id, "Slack work queued");
        Ok(Ack::Accepted { thread_id })
    }
}

/// Slack's three request URLs (`POST /slack/events`, `/slack/interactions`, `/slack/commands`)
/// as a router to merge into the HTTP API (outside its key check).
pub fn router(ingress: SlackIngress) -> Router {
    Router::new()
        .route(EVENTS_PATH, post(events))
        .route(INTERACTIONS_PATH, post(interactions))
        .route(COMMANDS_PATH, post(commands))
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .with_state(ingress)
}

async fn interactions(
    State(ingress): State<SlackIngress>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body?;
    ingress.handle_interaction(&headers, &body).await
}

async fn commands(
    State(ingress): State<SlackIngress>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body?;
    ingress.handle_command(&headers, &body).await
}

async fn events(
    State(ingress): State<SlackIngress>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Ack, ApiError> {
    let body = body?;
    ingress.handle(&headers, &body).await
}
