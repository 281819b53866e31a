//! Checkpoint routes: take, list and delete a thread's checkpoints, restore one in place, and
//! fork the thread into a new one.
//!
//! - `POST /v1/threads/{id}/checkpoints` (optional `{"label": "..."}`) → 201, the checkpoint;
//!   507 `checkpoint_quota` when the home holds more than the per-thread byte cap (the numbers
//!   in the message);
//! - `GET /v1/threads/{id}/checkpoints` → `{"checkpoints": [...]}`, newest first;
//! - `DELETE /v1/threads/{id}/checkpoints/{checkpoint_id}` → the checkpoint removed;
//! - `POST /v1/threads/{id}/restore` `{"checkpoint": ID}` → what was restored and the processes
//!   stopped;
//! - `POST /v1/threads/{id}/fork` `{"thread": NEW, "checkpoint": ID?, "network": PROFILE?}` →
//!   201, the new thread's resolve answer; 409 `thread_exists` when NEW exists.
//!
//! An unknown thread or checkpoint (another thread's included) is 404; a malformed id 400.

use axum::body::Bytes;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{delete, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::auth::ForCaller;
use super::error::ApiError;
use super::extract::{optional_body, Thread};
use threadbox_core::domain::{Checkpoint, CheckpointCause, CheckpointId, NetworkProfile, ThreadId};
use threadbox_core::usecases::{ForkRequest, RestoreOutcome, Threadbox};

pub(crate) fn routes() -> Router<Threadbox> {
    Router::new()
        .route("/v1/threads/{thread_id}/checkpoints", post(take).get(list))
        .route(
            "/v1/threads/{thread_id}/checkpoints/{checkpoint_id}",
            delete(remove),
        )
        .route("/v1/threads/{thread_id}/restore", post(restore))
        .route("/v1/threads/{thread_id}/fork", post(fork))
}

/// A checkpoint id read as text from a route or a body: 400 `invalid_checkpoint_id` when it
/// is not one.
pub fn checkpoint_id(raw: &str) -> Result<CheckpointId, ApiError> {
    CheckpointId::parse(raw).map_err(|e| ApiError::bad_request("invalid_checkpoint_id", e))
}

/// `{checkpoint_id}` from the route, validated.
struct CheckpointParam(CheckpointId);

impl<S: Send + Sync> FromRequestParts<S> for CheckpointParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let params = axum::extract::RawPathParams::from_request_parts(parts, state).await?;
        let raw = params
            .iter()
            .find(|(key, _)| *key == "checkpoint_id")
            .map(|(_, value)| value.to_owned())
            .unwrap_or_default();
        checkpoint_id(&raw).map(CheckpointParam)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TakeBody {
    label: Option<String>,
}

async fn take(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let body: Option<TakeBody> = optional_body(&headers, &body, r#"{"label": "..."}"#)?;
    let label = body.and_then(|b| b.label);
    let checkpoint = tb
        .checkpoint(&thread_id, label.as_deref(), CheckpointCause::User)
        .await?;
    Ok((StatusCode::CREATED, Json(checkpoint)))
}

#[derive(Serialize)]
struct ListView {
    checkpoints: Vec<Checkpoint>,
}

async fn list(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
) -> Result<Json<ListView>, ApiError> {
    let checkpoints = tb.list_checkpoints(&thread_id).await?;
    Ok(Json(ListView { checkpoints }))
}

async fn remove(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    CheckpointParam(id): CheckpointParam,
) -> Result<Json<Checkpoint>, ApiError> {
    Ok(Json(tb.delete_checkpoint(&thread_id, &id).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RestoreBody {
    checkpoint: String,
}

async fn restore(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<RestoreOutcome>, ApiError> {
    let shape = r#"{"checkpoint": "cp-..."}"#;
    let body: RestoreBody = optional_body(&headers, &body, shape)?.ok_or_else(|| {
        ApiError::bad_request("invalid_json", format!("the body must be {shape}"))
    })?;
    let id = checkpoint_id(&body.checkpoint)?;
    Ok(Json(tb.restore(&thread_id, &id).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    thread: String,
    checkpoint: Option<String>,
    network: Option<serde_json::Value>,
}

async fn fork(
    ForCaller(tb): ForCaller,
    Thread(source): Thread,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let shape = r#"{"thread": "new-thread-id", "checkpoint": "cp-..." (optional), "network": ... (optional)}"#;
    let body: ForkBody = optional_body(&headers, &body, shape)?.ok_or_else(|| {
        ApiError::bad_request("invalid_json", format!("the body must be {shape}"))
    })?;
    let thread = ThreadId::parse(&body.thread)
        .map_err(|e| ApiError::bad_request("invalid_thread_id", format!("thread: {e}")))?;
    let checkpoint = body.checkpoint.as_deref().map(checkpoint_id).transpose()?;
    let network = body
        .network
        .map(|value| {
            serde_json::from_value::<NetworkProfile>(value)
                .map_err(|e| ApiError::bad_request("invalid_network", format!("network: {e}")))
        })
        .transpose()?;
    let handle = tb
        .fork(ForkRequest {
            source,
            thread,
            checkpoint,
            network,
        })
        .await?;
    Ok((StatusCode::CREATED, Json(handle)))
}
