//! The HTTP API as one axum [`Router`]: the same routes behind `threadbox dev`'s local server and
//! inside Lambda, where each function serves its [`RouteGroup`]s through `lambda_http`. It holds no
//! process concerns (no listener, signals or logging setup).
//!
//! - `threads`: resolve, pause, resume, reset, and reading sessions and events;
//! - `sandbox`: exec and files;
//! - `processes`: background processes (start, list, output, input, resize, signal);
//! - `checkpoints`: checkpoints of a thread's home (take, list, delete), restore, fork;
//! - `images`: the images sandboxes can start from, and changing a thread's;
//!
//! Routes that belong to another layer come with it, and are merged in by the caller: minting
//! live-events tokens (`live::token_routes`: the caller holds the key), the MCP endpoint
//! (`mcp::routes`), the Slack app's request URLs and sink (`slack`).
//! - `auth`: bearer API keys;
//! - `local_only`: what a server without keys answers (loopback `Host`, no cross-site browsers);
//! - `extract`: input validation with JSON errors;
//! - `error`: every failure as `{"error": {"code", "message"}}` with the right status.

mod auth;
mod checkpoints;
mod error;
mod exec_stream;
mod extract;
mod images;
mod local_only;
mod processes;
mod sandbox;
mod threads;

#[cfg(test)]
mod budget_tests;
#[cfg(test)]
mod checkpoint_tests;
#[cfg(test)]
mod image_tests;
#[cfg(test)]
mod tests;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{middleware, Json, Router};
use serde_json::{json, Value};

// The MCP endpoint takes its use cases for the request's caller as every route does.
pub use auth::ForCaller;
pub use auth::{key_scope, ApiAuth, ApiKeysError, Caller, MIN_API_KEY_LEN};
// For the routes that live with their own layer: the Slack sink's, the live-events token's, MCP's.
pub use auth::require as require_api_key;
pub use checkpoints::checkpoint_id;
pub use error::ApiError;
pub use extract::ApiQuery;
pub use local_only::{require_local, LocalOnly};
// The MCP endpoint's handler and tools (`threadbox-mcp`) and the token route read bodies, ids and
// paths as every route does.
pub use extract::JsonBody;
pub use extract::{sandbox_path, Thread};
// Behind API Gateway, the requests that would stream are told where to (`lambda::http`).
pub use processes::MAX_FOLLOW;
pub use sandbox::wants_event_stream;
pub use sandbox::{chunks_of as download_chunks, upload_chunks, MAX_EXEC_TIMEOUT, MAX_FILE_BODY};

use threadbox_core::usecases::Threadbox;

/// The largest JSON body any route accepts; file uploads have their own, larger limit.
pub const MAX_JSON_BODY: usize = 1024 * 1024;

/// The API's routes in groups, so that each Lambda function serves only its own share and
/// `threadbox dev` serves them all. Every group answers the same way: same auth, limits and errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteGroup {
    /// `POST /v1/threads/{id}/resolve` and `/reset`: bring a thread's sandbox up; and
    /// `PUT /v1/threads/{id}/network` and `/image`: the thread's network profile and image.
    Resolve,
    /// `GET /v1/threads`, `GET /v1/threads/{id}`, `GET /v1/threads/{id}/events` and
    /// `GET /v1/images`.
    Read,
    /// `POST /v1/threads/{id}/pause`.
    Pause,
    /// `POST /v1/threads/{id}/resume`.
    Resume,
    /// `POST /v1/threads/{id}/exec`, `GET/PUT/DELETE /v1/threads/{id}/files/{path}` and the
    /// background processes under `/v1/threads/{id}/processes` (the
    /// functions serving it also merge `mcp::routes`, the same operations as MCP tools), and
    /// the checkpoints: `/v1/threads/{id}/checkpoints`, `/restore` and `/fork`.
    Sandbox,
}

impl RouteGroup {
    pub const ALL: [RouteGroup; 5] = [
        RouteGroup::Resolve,
        RouteGroup::Read,
        RouteGroup::Pause,
        RouteGroup::Resume,
        RouteGroup::Sandbox,
    ];

    fn routes(self) -> Router<Threadbox> {
        match self {
            RouteGroup::Resolve => threads::resolve_routes().merge(images::change_routes()),
            RouteGroup::Read => threads::read_routes().merge(images::list_routes()),
            RouteGroup::Pause => threads::pause_routes(),
            RouteGroup::Resume => threads::resume_routes(),
            RouteGroup::Sandbox => sandbox::routes()
                .merge(processes::routes())
                .merge(checkpoints::routes()),
        }
    }
}

/// Every route. `/healthz` is public; everything under `/v1` needs an API key when `auth` has any.
pub fn router(tb: Threadbox, auth: ApiAuth) -> Router {
    router_for(tb, auth, &RouteGroup::ALL)
}

/// `/healthz` and the routes of `groups`; any other path is a 404 in the API's error shape.
pub fn router_for(tb: Threadbox, auth: ApiAuth, groups: &[RouteGroup]) -> Router {
    let api = groups
        .iter()
        .fold(Router::new(), |api, group| api.merge(group.routes()))
        // A route layer runs only for matched routes, so unknown paths stay plain 404s.
        .route_layer(middleware::from_fn_with_state(auth, auth::require));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(api)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .with_state(tb)
}

async fn healthz() -> Json<Value> {
    Json(json!({ "ok": true }))
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route; the API lives under /v1/threads")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method",
    )
}
