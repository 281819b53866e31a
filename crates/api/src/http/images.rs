//! Images (`domain::image`): what this deployment's sandboxes can start from, and the image a
//! thread's next sandbox starts from.
//!
//! - `GET /v1/images` → `{"images": [{"name", "digest", "size_bytes", "source", "setup"}]}`, the
//!   provider's registered images, `host` first.
//! - `PUT /v1/threads/{id}/image` `{"image": NAME}` → the session, `"applied": "next_sandbox"`
//!   (or `"unchanged"`) and a message: recorded with a `user` event; the sandbox the thread has
//!   keeps its image, a reset (or a recreate) starts from the new one. An unknown name is a 400
//!   naming the registered ones.
//!
//! A resolve's body chooses a new thread's image (`threads::resolve`).

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::routing::{get, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::auth::ForCaller;
use super::error::ApiError;
use super::extract::{image_name, optional_body, Thread};
use super::threads::SessionView;
use threadbox_core::domain::ImageInfo;
use threadbox_core::usecases::{ImageApplied, Threadbox};

/// `PUT /v1/threads/{id}/image`, with the thread routes that bring a sandbox up.
pub(crate) fn change_routes() -> Router<Threadbox> {
    Router::new().route("/v1/threads/{thread_id}/image", put(set_image))
}

/// `GET /v1/images`, with the reading routes.
pub(crate) fn list_routes() -> Router<Threadbox> {
    Router::new().route("/v1/images", get(list))
}

#[derive(Serialize)]
struct ImagesView {
    images: Vec<ImageInfo>,
}

async fn list(ForCaller(tb): ForCaller) -> Json<ImagesView> {
    Json(ImagesView {
        images: tb.images(),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ImageBody {
    image: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct ImageView {
    session: SessionView,
    /// `next_sandbox`: recorded, and the thread's next sandbox (a reset, or a recreate) starts
    /// from it; `unchanged`: it was already the thread's image.
    applied: ImageApplied,
    message: &'static str,
}

/// Change the thread's image: recorded with a `user` event; applies to its next sandbox.
async fn set_image(
    ForCaller(tb): ForCaller,
    Thread(thread_id): Thread,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<ImageView>, ApiError> {
    let shape = r#"{"image": "NAME"}"#;
    let body: Option<ImageBody> = optional_body(&headers, &body, shape)?;
    let Some(image) = image_name(body.and_then(|b| b.image))? else {
        return Err(ApiError::bad_request(
            "invalid_json",
            format!("the body must be {shape}, a name GET /v1/images lists"),
        ));
    };
    let change = tb.set_image(&thread_id, image).await?;
    let message = match change.applied {
        ImageApplied::NextSandbox if change.session.sandbox_id.is_none() => {
            "recorded; the thread's next sandbox starts from this image"
        }
        ImageApplied::NextSandbox => {
            "recorded; the sandbox keeps the image it was made from and the thread's next one \
             starts from this (POST .../reset for one now: its files are lost)"
        }
        ImageApplied::Unchanged => "the thread already has this image",
    };
    Ok(Json(ImageView {
        session: SessionView::new(change.session, tb.clock.now()),
        applied: change.applied,
        message,
    }))
}
