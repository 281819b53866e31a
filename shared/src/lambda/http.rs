//! Serving the shared axum router inside Lambda.
//!
//! `lambda_http` turns API Gateway's HTTP API (payload v2) event into an `http::Request` (method,
//! `rawPath` and `rawQueryString` as the URI, headers, cookies, the body decoded from base64 when
//! `isBase64Encoded`) and the router's response back into the event's answer (binary bodies
//! base64-encoded). Routing is the router's own: API Gateway's path parameters are not needed,
//! because the router reads the same values from the path.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use lambda_http::tower::ServiceExt;
use tracing::Instrument;

use super::refresh::Rebuilt;

use crate::domain::ThreadId;

/// Run `router` as this function's handler until the Lambda runtime stops the process.
pub async fn run_http(router: Router) -> Result<(), lambda_http::Error> {
    lambda_http::run(traced(router)).await
}

/// Like [`run_http`], with the router rebuilt when the function's secrets change (see
/// `refresh`). A 401 answer marks the secrets stale: the caller may hold a key rotated in since
/// the last fetch (at most one fetch a minute follows from that, whoever asks).
pub async fn run_http_rebuilt(router: Arc<Rebuilt<Router>>) -> Result<(), lambda_http::Error> {
    lambda_http::run(lambda_http::service_fn(
        move |request: lambda_http::Request| {
            let router = router.clone();
            async move {
                let current = traced((*router.current().await).clone());
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
