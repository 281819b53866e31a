//! `POST /slack/events`: Slack's Events API endpoint. It only does what must happen before
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

use super::events::{to_work, Envelope};
use super::signature::{SigningSecret, SIGNATURE_HEADER, TIMESTAMP_HEADER};
use super::work::WorkItem;
use crate::http::{ApiError, MAX_JSON_BODY};
use crate::ports::{Clock, DedupeStore, DurableQueue, OutgoingMessage};

/// How long an `event_id` is remembered. Slack retries three times within about five minutes;
/// a day covers that with a wide margin.
pub const EVENT_MEMORY: Duration = Duration::from_secs(24 * 3600);

/// The path Slack posts to.
pub const EVENTS_PATH: &str = "/slack/events";

#[derive(Clone)]
pub struct SlackIngress {
    /// `None`: Slack is not configured, and the route says so (503) instead of guessing.
    secret: Option<SigningSecret>,
    dedupe: Arc<dyn DedupeStore>,
    queue: Arc<dyn DurableQueue>,
    clock: Arc<dyn Clock>,
}

/// What the ingress did with a request that passed the signature check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ack {
    /// `url_verification`: echo the challenge.
    Challenge(String),
    /// Work queued.
    Accepted { thread_id: String },
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
        }
    }

    /// Handle one request from its headers and raw body: the whole job, shared by the axum
    /// route and an API Gateway Lambda.
    pub async fn handle(&self, headers: &HeaderMap, body: &[u8]) -> Result<Ack, ApiError> {
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
            })?;

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
        let message = match to_work(&callback) {
            Ok(message) => message,
            Err(ignored) => {
                tracing::debug!(event_id = %callback.event_id, reason = %ignored.reason(), "event ignored");
                return Ok(Ack::Ignored(ignored.reason()));
            }
        };

        let key = format!("slack:event:{}", callback.event_id);
        let first = self
            .dedupe
            .claim(&key, EVENT_MEMORY)
            .await
            .map_err(ApiError::from)?;
        if !first {
            return Ok(Ack::Duplicate);
        }
        let thread_id = message.thread_id.to_string();
        let item = WorkItem::Message(message);
        let outgoing = OutgoingMessage {
            group_id: thread_id.clone(),
            dedup_id: callback.event_id.clone(),
            body: serde_json::to_string(&item).expect("work items serialise"),
        };
        if let Err(error) = self.queue.send(std::slice::from_ref(&outgoing)).await {
            // Forget the event so Slack's retry can enqueue it; answering 5xx asks for one.
            if let Err(release) = self.dedupe.release(&key).await {
                tracing::error!(%release, event_id = %callback.event_id, "could not release the event after a failed enqueue; Slack's retry will be dropped");
            }
            tracing::error!(%error, event_id = %callback.event_id, "enqueueing Slack work failed");
            return Err(ApiError::from(crate::usecases::UseCaseError::Queue(error)));
        }
        tracing::info!(event_id = %callback.event_id, %thread_id, "Slack work queued");
        Ok(Ack::Accepted { thread_id })
    }
}

/// `POST /slack/events` as a router to merge into the HTTP API (outside its key check).
pub fn router(ingress: SlackIngress) -> Router {
    Router::new()
        .route(EVENTS_PATH, post(events))
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .with_state(ingress)
}

async fn events(
    State(ingress): State<SlackIngress>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Ack, ApiError> {
    let body = body?;
    ingress.handle(&headers, &body).await
}
