//! Serving the shared axum router inside Lambda.
//!
//! `lambda_http` turns API Gateway's HTTP API (payload v2) event into an `http::Request` (method,
//! `rawPath` and `rawQueryString` as the URI, headers, cookies, the body decoded from base64 when
//! `isBase64Encoded`) and the router's response back into the event's answer (binary bodies
//! base64-encoded). Routing is the router's own: API Gateway's path parameters are not needed,
//! because the router reads the same values from the path.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use lambda_http::tower::ServiceExt;
use tracing::Instrument;

use super::refresh::Rebuilt;

use crate::domain::ThreadId;
use crate::http::ApiError;

/// Run `router` as this function's handler until the Lambda runtime stops the process.
pub async fn run_http(router: Router) -> Result<(), lambda_http::Error> {
    lambda_http::run(for_api_gateway(router)).await
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
    traced(router).layer(middleware::from_fn(gateway_limits))
}

async fn gateway_limits(request: Request, next: Next) -> Response {
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

/// Like [`run_http`], with the router rebuilt when the function's secrets change (see
/// `refresh`). A 401 answer marks the secrets stale: the caller may hold a key rotated in since
/// the last fetch (at most one fetch a minute follows from that, whoever asks).
pub async fn run_http_rebuilt(router: Arc<Rebuilt<Router>>) -> Result<(), lambda_http::Error> {
    lambda_http::run(lambda_http::service_fn(
        move |request: lambda_http::Request| {
            let router = router.clone();
            async move {
                let current = for_api_gateway((*router.current().await).clone());
                let response = current
                    .oneshot(request)
                    .await
                    .unwrap_or_else(|never| match never {});
                if response.status() == axum::http::StatusCode::UNAUTHORIZED {
                    router.secrets().mark_stale();
                }
                Ok::<_, std::convert::Infallible>(response)
            }
        },
    ))
    .await
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
