//! Serving the shared axum router inside Lambda.
//!
//! `lambda_http` turns API Gateway's HTTP API (payload v2) event into an `http::Request` (method,
//! `rawPath` and `rawQueryString` as the URI, headers, cookies, the body decoded from base64 when
//! `isBase64Encoded`) and the router's response back into the event's answer (binary bodies
//! base64-encoded). Routing is the router's own: API Gateway's path parameters are not needed,
//! because the router reads the same values from the path.
//!
//! A function answers in one of two ways, [`HttpMode`], chosen by `THREADBOX_INVOKE_MODE`:
//!
//! - `BUFFERED` (the default), behind API Gateway's HTTP API, which holds a function's whole
//!   answer until it ends and gives up after 30 s: held to the gateway's limits
//!   ([`for_api_gateway`]), and a request that asks to stream (`Accept: text/event-stream` on
//!   exec or on a process's output) is refused at once with 406 `stream_elsewhere`, naming the
//!   same request at `THREADBOX_STREAM_URL`, instead of a 503 from the gateway after 30 s;
//! - `RESPONSE_STREAM`, behind a function URL of that invoke mode: the answer goes out as the
//!   router writes it (`lambda_http::run_with_streaming_response`), so server-sent events reach
//!   the client as they happen, for as long as the function's timeout allows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use lambda_http::tower::ServiceExt;
use tracing::Instrument;

use super::env::{Env, SetupError};
use super::refresh::Rebuilt;

use threadbox_api::http::{wants_event_stream, ApiError};
use threadbox_core::config::ConfigError;
use threadbox_core::domain::ThreadId;

/// How the function answers: `BUFFERED` (the default) or `RESPONSE_STREAM`, the names of a
/// function URL's `InvokeMode`.
pub const INVOKE_MODE_VAR: &str = "THREADBOX_INVOKE_MODE";
/// Where a buffered function sends requests that ask to stream: the streaming function's URL.
pub const STREAM_URL_VAR: &str = "THREADBOX_STREAM_URL";

/// How a function serving the router answers (see the module's docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpMode {
    /// Behind API Gateway: whole answers within its limits; streaming requests are refused,
    /// naming `stream_url` (no trailing `/`) when the stack has one.
    Buffered { stream_url: Option<String> },
    /// Behind a function URL with `InvokeMode: RESPONSE_STREAM`.
    ResponseStream,
}

impl HttpMode {
    /// The mode `THREADBOX_INVOKE_MODE` and `THREADBOX_STREAM_URL` give.
    pub fn from_env(env: &Env) -> Result<Self, SetupError> {
        let invalid = |variable, reason: String| ConfigError::Invalid { variable, reason };
        match env.get(INVOKE_MODE_VAR).as_deref() {
            None | Some("BUFFERED") => {
                let stream_url = match env.get(STREAM_URL_VAR) {
                    None => None,
                    Some(url) => {
                        let valid = (url.starts_with("https://") || url.starts_with("http://"))
                            && !url.contains(|c: char| c.is_whitespace() || c == '?' || c == '#');
                        if !valid {
                            return Err(invalid(
                                STREAM_URL_VAR,
                                "not an http(s) URL without query or fragment".into(),
                            )
                            .into());
                        }
                        Some(url.trim_end_matches('/').to_owned())
                    }
                };
                Ok(HttpMode::Buffered { stream_url })
            }
            Some("RESPONSE_STREAM") => Ok(HttpMode::ResponseStream),
            Some(other) => Err(invalid(
                INVOKE_MODE_VAR,
                format!("{other:?} is neither BUFFERED nor RESPONSE_STREAM"),
            )
            .into()),
        }
    }
}

/// API Gateway's HTTP API gives an integration 30 s to answer; an exec may use this much of it
/// (the rest is for resuming the sandbox and sending the answer).
pub const GATEWAY_EXEC_LIMIT: Duration = Duration::from_secs(25);
/// Lambda's synchronous payload limit (6 MB) for an answer, less room for the JSON envelope.
pub const GATEWAY_TEXT_RESPONSE_LIMIT: usize = 6 * 1000 * 1000 - 64 * 1024;
/// A binary answer is base64-encoded into the payload: 3 bytes become 4.
pub const GATEWAY_BINARY_RESPONSE_LIMIT: usize = GATEWAY_TEXT_RESPONSE_LIMIT / 4 * 3;

/// The router as the functions serve it behind API Gateway: traced, and held to the gateway's
/// limits in threadbox's own error shape instead of the gateway's bare 503 or 413 (`threadbox
/// dev` serves the router without them, with its larger limits):
///
/// - `POST /v1/threads/{id}/exec` with a `timeout_ms` over [`GATEWAY_EXEC_LIMIT`] is refused
///   with 400 `exec_timeout_over_gateway_limit`; without one, that limit is its timeout (the
///   router's default, 60 s, would outlast the gateway);
/// - an answer larger than Lambda's payload allows (about 4.4 MB of binary file, 6 MB of JSON)
///   becomes 413 `payload_too_large` naming the limit. Requests over it never reach the
///   function: API Gateway refuses them itself.
pub fn for_api_gateway(router: Router) -> Router {
    for_api_gateway_streaming_at(router, None)
}

/// [`for_api_gateway`], with a request that asks to stream (server-sent events from exec or
/// from a process's output) refused with 406 `stream_elsewhere`, naming the same request at
/// `stream_url`; without one, 406 `streaming_unavailable` says how to read without streaming.
/// Either way the answer is immediate and nothing runs: API Gateway's HTTP API would hold the
/// events until the stream ended, and answer 503 after 30 s without any of them.
pub fn for_api_gateway_streaming_at(router: Router, stream_url: Option<String>) -> Router {
    let stream_url: Arc<Option<String>> = Arc::new(stream_url);
    traced(router).layer(middleware::from_fn_with_state(stream_url, gateway_limits))
}

/// The router as it serves in `mode` (see [`HttpMode`]).
pub fn serving(router: Router, mode: &HttpMode) -> Router {
    match mode {
        HttpMode::Buffered { stream_url } => {
            for_api_gateway_streaming_at(router, stream_url.clone())
        }
        // No answer to hold, so no gateway limits: the router's own (exec and following up to
        // 10 minutes) apply, within the function's timeout, which the template sets above them.
        HttpMode::ResponseStream => traced(router),
    }
}

async fn gateway_limits(
    axum::extract::State(stream_url): axum::extract::State<Arc<Option<String>>>,
    request: Request,
    next: Next,
) -> Response {
    if asks_to_stream(&request) {
        return stream_elsewhere(&request, stream_url.as_deref());
    }
    let request = if is_exec(&request) {
        match limit_exec_timeout(request).await {
            Ok(request) => request,
            Err(refused) => return refused,
        }
    } else {
        request
    };
    let response = next.run(request).await;
    limit_response_size(response).await
}

fn is_exec(request: &Request) -> bool {
    request.method() == axum::http::Method::POST
        && request.uri().path().starts_with("/v1/threads/")
        && request.uri().path().ends_with("/exec")
}

/// `GET /v1/threads/{id}/processes/{pid}/output`.
fn is_process_output(request: &Request) -> bool {
    let Some(rest) = request.uri().path().strip_prefix("/v1/threads/") else {
        return false;
    };
    let segments: Vec<&str> = rest.split('/').collect();
    request.method() == axum::http::Method::GET
        && matches!(segments[..], [_, "processes", _, "output"])
}

/// A request the router would answer with server-sent events (the same test the routes make).
/// The MCP endpoint's clients accept `text/event-stream` too, but it always answers JSON.
fn asks_to_stream(request: &Request) -> bool {
    (is_exec(request) || is_process_output(request)) && wants_event_stream(request.headers())
}

/// The 406 a buffered function answers a request that asks to stream.
fn stream_elsewhere(request: &Request, stream_url: Option<&str>) -> Response {
    let route = request.uri().path_and_query().map_or_else(
        || request.uri().path().to_owned(),
        |p| p.as_str().to_owned(),
    );
    let cannot = "API Gateway's HTTP API cannot stream: it holds a function's answer until the \
                  end and gives up after 30 s";
    let error = match stream_url {
        Some(base) => {
            let url = format!("{base}{route}");
            serde_json::json!({
                "code": "stream_elsewhere",
                "message": format!(
                    "{cannot}. Send this request to {url} (the stack's stream URL, output \
                     SandboxStreamUrl: the same routes and API key, answers streamed as they \
                     happen); or leave out Accept: text/event-stream for a JSON answer here."
                ),
                "stream_url": url,
            })
        }
        None => serde_json::json!({
            "code": "streaming_unavailable",
            "message": format!(
                "{cannot}, and this deployment names no stream URL ({STREAM_URL_VAR}). Leave out \
                 Accept: text/event-stream: exec answers JSON when the command ends, and a \
                 process's output reads in parts with GET .../output?after=N."
            ),
        }),
    };
    (
        axum::http::StatusCode::NOT_ACCEPTABLE,
        axum::Json(serde_json::json!({ "error": error })),
    )
        .into_response()
}

/// Refuse an exec timeout the gateway cannot wait for; give one that has none the gateway's.
async fn limit_exec_timeout(request: Request) -> Result<Request, Response> {
    let (parts, body) = request.into_parts();
    // The router caps JSON bodies at 1 MiB; a larger one is its to refuse.
    let bytes = match axum::body::to_bytes(body, 1024 * 1024).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return Err(ApiError::new(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "the JSON body is over 1 MiB",
            )
            .into_response())
        }
    };
    let limit_ms = GATEWAY_EXEC_LIMIT.as_millis() as u64;
    let body = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Object(mut fields)) => {
            match fields.get("timeout_ms").and_then(serde_json::Value::as_u64) {
                Some(ms) if ms > limit_ms => {
                    return Err(ApiError::bad_request(
                        "exec_timeout_over_gateway_limit",
                        format!(
                            "timeout_ms {ms} is over {limit_ms}: through API Gateway a command \
                             must finish within {} s (the gateway answers 503 after 30 s). Run \
                             longer work as a background process (POST \
                             /v1/threads/{{id}}/processes) and read its output with GET \
                             /v1/threads/{{id}}/processes/{{pid}}/output, or send it as a Slack \
                             code block; `threadbox dev` allows up to 10 minutes.",
                            GATEWAY_EXEC_LIMIT.as_secs()
                        ),
                    )
                    .into_response())
                }
                Some(_) => bytes,
                None => {
                    fields.insert("timeout_ms".into(), limit_ms.into());
                    serde_json::to_vec(&fields).map_or(bytes, Into::into)
                }
            }
        }
        // Not an object: the router answers it with its own 400.
        _ => bytes,
    };
    let mut request = Request::from_parts(parts, axum::body::Body::from(body));
    request
        .headers_mut()
        .remove(axum::http::header::CONTENT_LENGTH);
    Ok(request)
}

/// An answer over Lambda's payload limit as threadbox's 413, instead of the gateway's error.
async fn limit_response_size(response: Response) -> Response {
    let binary = !response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/") || t.contains("json"));
    let limit = if binary {
        GATEWAY_BINARY_RESPONSE_LIMIT
    } else {
        GATEWAY_TEXT_RESPONSE_LIMIT
    };
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => Response::from_parts(parts, axum::body::Body::from(bytes)),
        Err(_) => ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "an answer over {limit} bytes (Lambda's 6 MB payload limit{}); read the file in \
             parts or through `threadbox dev`",
                if binary { ", base64-encoded" } else { "" }
            ),
        )
        .into_response(),
    }
}

/// Serve `router` (rebuilt when the function's secrets change, see `refresh`) in `mode` until
/// the Lambda runtime stops the process: a streaming function sends its answer through the
/// runtime's streaming response (status and headers first, then the body as the router writes
/// it). A 401 answer marks the secrets stale: the caller may hold a key rotated in since the last
/// fetch (at most one fetch a minute follows from that, whoever asks).
pub(crate) async fn run_http_rebuilt(
    router: Arc<Rebuilt<Router>>,
    mode: HttpMode,
) -> Result<(), lambda_http::Error> {
    let streams = mode == HttpMode::ResponseStream;
    let mode = Arc::new(mode);
    let handler = lambda_http::service_fn(move |request: lambda_http::Request| {
        let router = router.clone();
        let mode = mode.clone();
        async move {
            let current = serving((*router.current().await).clone(), &mode);
            let response = current
                .oneshot(request)
                .await
                .unwrap_or_else(|never| match never {});
            if response.status() == axum::http::StatusCode::UNAUTHORIZED {
                router.secrets().mark_stale();
            }
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    if streams {
        lambda_http::run_with_streaming_response(handler).await
    } else {
        lambda_http::run(handler).await
    }
}

/// Wrap every request in a span naming the thread it is about, and log its outcome once.
pub fn traced(router: Router) -> Router {
    router.layer(middleware::from_fn(trace_request))
}

async fn trace_request(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let thread_id = thread_id_in_path(path).map(|t| t.to_string());
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        path,
        thread_id = thread_id.as_deref().unwrap_or(""),
    );
    let started = Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    span.in_scope(|| {
        tracing::info!(
            status = response.status().as_u16(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "request done"
        )
    });
    response
}

/// The thread a `/v1/threads/{thread_id}/...` path is about, when the id is a valid one.
pub fn thread_id_in_path(path: &str) -> Option<ThreadId> {
    let rest = path.strip_prefix("/v1/threads/")?;
    let raw = rest.split('/').next()?;
    ThreadId::parse(raw).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_invoke_mode_and_stream_url_are_read_from_the_environment() {
        let mode = |pairs: &[(&str, &str)]| HttpMode::from_env(&Env::from_pairs(pairs));
        assert_eq!(mode(&[]).unwrap(), HttpMode::Buffered { stream_url: None });
        assert_eq!(
            mode(&[
                (INVOKE_MODE_VAR, "BUFFERED"),
                (STREAM_URL_VAR, "https://abc.lambda-url.eu-west-1.on.aws/"),
            ])
            .unwrap(),
            HttpMode::Buffered {
                stream_url: Some("https://abc.lambda-url.eu-west-1.on.aws".into())
            },
            "the trailing slash goes: the request's path is appended"
        );
        assert_eq!(
            mode(&[(INVOKE_MODE_VAR, "RESPONSE_STREAM")]).unwrap(),
            HttpMode::ResponseStream
        );
        let wrong = mode(&[(INVOKE_MODE_VAR, "streaming")]).unwrap_err();
        assert!(wrong.to_string().contains(INVOKE_MODE_VAR), "{wrong}");
        for url in ["abc.lambda-url.on.aws", "https://x/?a=1", "ftp://x"] {
            let wrong = mode(&[(STREAM_URL_VAR, url)]).unwrap_err();
            assert!(wrong.to_string().contains(STREAM_URL_VAR), "{url}: {wrong}");
        }
    }

    #[test]
    fn the_thread_is_read_from_the_path_when_valid() {
        let id = |p| thread_id_in_path(p).map(|t| t.to_string());
        assert_eq!(
            id("/v1/threads/slack:T1:C1:1700000000.000100/resolve").as_deref(),
            Some("slack:T1:C1:1700000000.000100")
        );
        assert_eq!(id("/v1/threads/demo").as_deref(), Some("demo"));
        assert_eq!(id("/v1/threads"), None);
        assert_eq!(id("/v1/threads/bad id/exec"), None);
        assert_eq!(id("/healthz"), None);
    }
}
