//! E2B's API, served by threadbox: E2B's control plane and envd under one base URL, so code
//! written for E2B's SDKs gets a thread's persistent sandbox by setting `E2B_API_URL` and
//! `E2B_SANDBOX_URL` to `<threadbox>/e2b` and `E2B_API_KEY` to a threadbox API key
//! (docs/e2b-api.md).
//!
//! - `control`: create, get, list, kill, pause, connect and resume, timeout and refreshes, over
//!   the use cases; a create names its thread by `Idempotency-Key` or `threadbox_thread`
//!   metadata;
//! - `envd`: the process and filesystem services over Connect, `/files` and `/health`;
//! - `ids`: a thread's stable sandbox id, and each sandbox's envd access token;
//! - `error`: E2B's error bodies.
//!
//! Every call goes through the same keys, budgets and limits as threadbox's own API: the
//! control plane's `X-API-Key` is checked by `ApiAuth`, and envd's token names the key it was
//! minted for, whose budgets its calls are charged to.

mod control;
mod envd;
pub mod error;
pub mod ids;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;

use threadbox_api::http::{ApiAuth, Caller};
use threadbox_api::live::TokenKey;
use threadbox_core::usecases::Threadbox;

use error::E2bError;

/// Where the API is mounted on threadbox's server.
pub const BASE_PATH: &str = "/e2b";

/// The envd version the sandboxes report: the SDKs pick features by it (0.5.7 has raw-body
/// uploads; file metadata and watch-event entries, 0.6.x, are not offered).
pub const ENVD_VERSION: &str = "0.5.7";

/// The largest JSON body a control-plane or envd call takes (files have their own limit).
pub const MAX_JSON_BODY: usize = threadbox_api::http::MAX_JSON_BODY;

/// What every route shares: the use cases, the API keys, and the secret envd tokens are
/// signed with (the live-events token secret, under a context of its own).
#[derive(Clone)]
pub struct E2bApi {
    tb: Threadbox,
    auth: ApiAuth,
    key: TokenKey,
    /// envd's directory watchers served from here.
    watchers: std::sync::Arc<envd::Watchers>,
}

impl E2bApi {
    pub fn new(tb: Threadbox, auth: ApiAuth, key: TokenKey) -> Self {
        Self {
            tb,
            auth,
            key,
            watchers: Default::default(),
        }
    }

    /// The use cases acting for `caller` (charged to its key's budgets).
    fn for_caller(&self, Caller(scope): &Caller) -> Threadbox {
        self.tb.for_caller(scope.clone())
    }
}

/// The whole API under [`BASE_PATH`], to merge into threadbox's router.
pub fn routes(api: E2bApi) -> Router {
    let control =
        control::routes().route_layer(middleware::from_fn_with_state(api.clone(), require_key));
    let inner = control
        .merge(envd::routes(api.clone()))
        .fallback(no_route)
        .with_state(api);
    Router::new().nest(BASE_PATH, inner)
}

/// The control plane's key check: `X-API-Key` against threadbox's keys, E2B's 401 when it fails
/// (which the SDKs raise as `AuthenticationException`); passing, who the caller is.
async fn require_key(State(api): State<E2bApi>, mut request: Request, next: Next) -> Response {
    let presented = request.headers().get("x-api-key").map(|v| v.as_bytes());
    match api.auth.check_key(presented, request.headers()) {
        Ok(scope) => {
            request.extensions_mut().insert(Caller(scope));
            next.run(request).await
        }
        Err(refused) => E2bError::from(refused).into_response(),
    }
}

async fn no_route(request: Request) -> E2bError {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    if control::is_unsupported(&path) {
        return E2bError::unsupported(&format!("{method} {BASE_PATH}{path}"));
    }
    E2bError::new(
        axum::http::StatusCode::NOT_FOUND,
        format!("threadbox's E2B API has no route {method} {BASE_PATH}{path}"),
    )
}

/// A request body of at most `limit` bytes, else E2B's 413.
async fn read_body(body: Body, limit: usize) -> Result<Bytes, E2bError> {
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| E2bError::too_large(limit))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}
