//! envd, the agent E2B runs in each sandbox, as threadbox serves it: under the same base URL as
//! the control plane, each request naming its sandbox with `E2b-Sandbox-Id` (what the SDKs send
//! when `E2B_SANDBOX_URL` is set) and carrying the sandbox's `X-Access-Token`.
//!
//! - `process`: `process.Process` (Start and Connect stream; List, SendInput, SendSignal,
//!   Update) over threadbox's background processes;
//! - `filesystem`: `filesystem.Filesystem` (Stat, MakeDir, Move, ListDir, Remove), and
//!   `watch`: its directory watching (WatchDir, CreateWatcher, GetWatcherEvents, RemoveWatcher);
//! - `files`: `GET`/`POST /files`.
//!
//! The sandbox's token is checked first (envd's 401), `/health` included: sandbox ids are
//! thread names in hex, which can be guessed, so without its token no caller learns whether a
//! thread exists. Then the proxy's check (no such sandbox, or gone: 502, which the SDKs read as
//! a sandbox that is not running). A paused sandbox is resumed by the call, as E2B's
//! auto-resume does.

mod files;
mod filesystem;
mod process;
mod stream_input;
mod watch;

pub(crate) use watch::Watchers;

use std::collections::BTreeMap;

use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde_json::json;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use threadbox_api::http::{sandbox_path, Caller};
use threadbox_core::domain::{BudgetScope, Session, ThreadId};
use threadbox_core::ports::SandboxUser;
use threadbox_core::usecases::Threadbox;
use threadbox_e2b::wire::error_body;

use super::error::ConnectError;
use super::ids::{check_envd_token, thread_of};
use super::{header, read_body, E2bApi, MAX_JSON_BODY};

/// The port envd listens on; the SDKs name it in `E2b-Sandbox-Port`.
const ENVD_PORT: &str = "49983";
/// The sandbox user's home, where relative paths start.
const HOME: &str = "/home/user";

/// Who a call runs as: envd's basic authentication's username (`Authorization: Basic` of
/// `name:`, what the SDKs send for `user=`), `root` or `user`; none is the sandbox's user, as on
/// envd 0.4 and later. Another name is envd's `unauthenticated` (it names no account here).
pub(crate) fn user_of(headers: &HeaderMap) -> Result<SandboxUser, ConnectError> {
    let Some(value) = header(headers, "authorization") else {
        return Ok(SandboxUser::User);
    };
    let name = value
        .strip_prefix("Basic ")
        .and_then(|b| BASE64.decode(b.trim()).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .map(|s| s.split(':').next().unwrap_or_default().to_owned())
        .ok_or_else(|| {
            ConnectError::new(
                "unauthenticated",
                "the Authorization header is not basic authentication",
            )
        })?;
    match name.as_str() {
        "" | "user" => Ok(SandboxUser::User),
        "root" => Ok(SandboxUser::Root),
        other => {
            let shown: String = other.chars().take(64).collect();
            Err(ConnectError::new(
                "unauthenticated",
                format!("invalid username: '{shown}' (a sandbox here has `user` and `root`)"),
            ))
        }
    }
}

/// The sandbox a request reached, and the use cases acting for the caller its token names; put
/// in the request's extensions by [`gate`].
#[derive(Clone)]
pub(crate) struct Reached {
    pub thread: ThreadId,
    pub tb: Threadbox,
    /// The thread's default environment (the create's `envVars`), under each command's own.
    pub env: BTreeMap<String, String>,
}

pub(super) fn routes(api: E2bApi) -> Router<E2bApi> {
    let gated = process::routes()
        // StreamInput reads a stream of its own; it builds on `process`, so it is routed here.
        .merge(connect_service(
            "process.Process",
            vec![("StreamInput", post(stream_input::stream_input))],
        ))
        .merge(filesystem::routes())
        .merge(files::routes())
        .route_layer(middleware::from_fn_with_state(api, gate));
    Router::new().route("/health", get(health)).merge(gated)
}

/// A Connect service's routes: each of its methods a `POST /{service}/{method}`, as the Connect
/// protocol names unary and server-streaming calls alike.
fn connect_service(
    service: &str,
    methods: Vec<(&str, axum::routing::MethodRouter<E2bApi>)>,
) -> Router<E2bApi> {
    methods
        .into_iter()
        .fold(Router::new(), |router, (method, handler)| {
            router.route(&format!("/{service}/{method}"), handler)
        })
}

/// Why an envd request is not served, in the order E2B's proxy and envd check.
enum Refused {
    /// The proxy's 502: no such sandbox, or gone (`sandboxId` as the request named it).
    NotFound(String),
    /// The proxy's 502 for a port other than envd's.
    PortClosed(String),
    /// envd's 401: no token, or not this sandbox's, or minted for a key since removed.
    Unauthorized,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            Refused::NotFound(id) => (
                StatusCode::BAD_GATEWAY,
                json!({ "sandboxId": id, "message": "The sandbox was not found", "code": 502 }),
            ),
            Refused::PortClosed(id) => (
                StatusCode::BAD_GATEWAY,
                json!({
                    "sandboxId": id,
                    "message": "The sandbox is running but port is not open",
                    "code": 502,
                }),
            ),
            Refused::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                error_body(
                    401,
                    "unauthorized access, please provide a valid access token or method signing if supported",
                ),
            ),
        };
        (status, Json(body)).into_response()
    }
}

/// The sandbox a request names (`E2b-Sandbox-Id`, what the SDKs send), its session, and the
/// caller its `X-Access-Token` names. The token is checked before anything is looked up
/// (sandbox ids are thread names in hex, which can be guessed, so without its token no caller
/// learns whether a thread exists): it must be the sandbox's own (E2B's legacy
/// `<id>-<clientID>` form takes the sandbox's own) and its key still configured. Then the
/// proxy's routing: the thread has a sandbox E2B would route to.
async fn checked(
    api: &E2bApi,
    headers: &HeaderMap,
) -> Result<(Session, Option<BudgetScope>), Refused> {
    let id = header(headers, "e2b-sandbox-id").ok_or(Refused::NotFound(String::new()))?;
    if header(headers, "e2b-sandbox-port").is_some_and(|p| p != ENVD_PORT) {
        return Err(Refused::PortClosed(id.to_owned()));
    }
    let own = id.split_once('-').map_or(id, |(own, _)| own);
    let scope = header(headers, "x-access-token")
        .and_then(|token| check_envd_token(&api.key, own, token))
        .filter(|scope| api.auth.knows_scope(scope.as_ref()))
        .ok_or(Refused::Unauthorized)?;
    let thread = thread_of(id).map_err(|_| Refused::NotFound(id.to_owned()))?;
    match api.tb.session(&thread).await {
        Ok(Some(session)) if super::control::reachable(&session) => Ok((session, scope)),
        _ => Err(Refused::NotFound(id.to_owned())),
    }
}

/// Every envd call but `/health`: checked ([`checked`]), then served for the token's caller.
async fn gate(State(api): State<E2bApi>, mut request: Request, next: Next) -> Response {
    let (session, scope) = match checked(&api, request.headers()).await {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    request.extensions_mut().insert(Reached {
        thread: session.thread_id,
        tb: api.for_caller(&Caller(scope)),
        env: session.env,
    });
    next.run(request).await
}

/// `GET /health`: envd's 204 for a sandbox that is there (the SDKs' `is_running`, which sends
/// the token), the proxy's 502 for one that is not; without a sandbox header, the API's own
/// health.
async fn health(State(api): State<E2bApi>, headers: HeaderMap) -> Response {
    if header(&headers, "e2b-sandbox-id").is_none() {
        return Json(json!({ "status": "ok" })).into_response();
    }
    match checked(&api, &headers).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(refused) => refused.into_response(),
    }
}

/// A path as envd takes it (absolute, or relative to the user's home), checked as threadbox's
/// API checks every path.
pub(crate) fn envd_path(path: &str) -> Result<String, ConnectError> {
    let absolute = if path.starts_with('/') {
        path.to_owned()
    } else if path.is_empty() {
        HOME.to_owned()
    } else {
        format!("{HOME}/{}", path.trim_start_matches("./"))
    };
    sandbox_path(&absolute).map_err(|e| ConnectError::invalid(e.message))
}

/// A unary Connect call's request: `application/json`, one JSON message, at most
/// [`MAX_JSON_BODY`] bytes (Connect's 415 for another content type). Handlers answer
/// `Result<Json<_>, ConnectError>`: the message, or Connect's unary error.
pub(crate) struct Unary<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Unary<T> {
    type Rejection = Response;

    async fn from_request(request: Request, _: &S) -> Result<Self, Self::Rejection> {
        let json = header(request.headers(), "content-type")
            .is_some_and(|t| t.starts_with("application/json"));
        if !json {
            return Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "envd's unary calls take application/json",
            )
                .into_response());
        }
        let bytes = read_body(request.into_body(), MAX_JSON_BODY)
            .await
            .map_err(|e| ConnectError::new("resource_exhausted", e.message).into_response())?;
        serde_json::from_slice(&bytes)
            .map(Unary)
            .map_err(|e| ConnectError::invalid(format!("invalid request: {e}")).into_response())
    }
}

/// A unary call's answer.
pub(crate) type Answer = Result<Json<serde_json::Value>, ConnectError>;

/// The unimplemented methods of a service, named.
pub(crate) async fn unimplemented(request: Request) -> Response {
    ConnectError::new(
        "unimplemented",
        format!(
            "{} is not supported by threadbox's E2B API (see docs/e2b-api.md)",
            request.uri().path().trim_start_matches(super::BASE_PATH)
        ),
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envd_paths_start_at_home() {
        assert_eq!(envd_path("a/b.txt").unwrap(), "/home/user/a/b.txt");
        assert_eq!(envd_path("./a").unwrap(), "/home/user/a");
        assert_eq!(envd_path("/tmp/x").unwrap(), "/tmp/x");
        assert_eq!(envd_path("").unwrap(), "/home/user");
        assert_eq!(envd_path("../etc").unwrap_err().code, "invalid_argument");
        assert!(envd_path("/a/\0").is_err());
    }

    #[test]
    fn the_basic_auth_username_names_the_user() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("authorization", value.parse().unwrap());
            user_of(&headers)
        };
        assert_eq!(user_of(&HeaderMap::new()).unwrap(), SandboxUser::User);
        // What the SDKs send for `user="root"` and `user="user"`.
        assert_eq!(with("Basic cm9vdDo=").unwrap(), SandboxUser::Root);
        assert_eq!(with("Basic dXNlcjo=").unwrap(), SandboxUser::User);
        assert_eq!(with("Basic Og==").unwrap(), SandboxUser::User);
        for bad in ["Basic YWRtaW46", "Bearer x", "Basic !!"] {
            assert_eq!(with(bad).unwrap_err().code, "unauthenticated", "{bad}");
        }
        assert!(with("Basic YWRtaW46")
            .unwrap_err()
            .message
            .contains("'admin'"));
    }
}
