//! Every error the API returns, as one shape: `{"error": {"code", "message"}}`.
//!
//! `code` is stable and machine-readable (clients branch on it); `message` is for people. Status
//! codes follow what a client should do next:
//! - 400: the request is wrong; retrying it unchanged will not help.
//! - 401: no or wrong API key (with `WWW-Authenticate: Bearer`).
//! - 404: no such thread, process, checkpoint or file (or route).
//! - 409: the thread's state forbids this now: an illegal transition, a live hold, or an expired
//!   thread (`thread_expired`). Also `busy` with `Retry-After`: another worker's transition of
//!   the thread did not settle within the wait (`usecases::settle`); the same call will succeed
//!   once it has. 409 rather than 503: nothing is down, and a gateway's own 503 must not be
//!   mistaken for it. Expired is 409 rather than 410 because it is not permanent:
//!   resetting the thread brings it back, and 410 tells caches and clients "gone for good".
//!   Also a call that lost a race with a pause, reset or destroy of its thread (`interrupted`).
//! - 413: the body is over the route's limit.
//! - 429 with `Retry-After`: a budget refused (`create_budget_exceeded`: the scope's new
//!   sandboxes for this hour; `compute_budget_exceeded`: the day's compute, the thread paused);
//!   `Retry-After` is when the window resets. Also a thread's own command limits.
//! - 503 with `Retry-After`: a backend is unavailable; the same call may succeed later.
//! - 507: the sandbox's disk (its home's quota, or its `/tmp`) is full (`no_space`), or a
//!   checkpoint would hold more than the thread's checkpoint byte cap (`checkpoint_quota`).

use axum::extract::rejection::{
    BytesRejection, JsonRejection, QueryRejection, RawPathParamsRejection,
};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use threadbox_core::ports::{ProviderError, StoreError};
use threadbox_core::usecases::UseCaseError;

/// What a retryable error tells clients to wait, when the cause does not say.
const DEFAULT_RETRY_AFTER_SECS: u64 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds for a `Retry-After` header.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A request that is wrong as sent: `code` names the kind of mistake.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs.max(1));
        self
    }
}

impl From<UseCaseError> for ApiError {
    fn from(error: UseCaseError) -> Self {
        let code = error.code();
        let message = error.public_message();
        let status = status_of(&error);
        let mut api = ApiError::new(status, code, message);
        if error.is_busy() {
            let secs = match &error {
                UseCaseError::Busy { retry_after, .. } => retry_after.as_secs_f64().ceil() as u64,
                _ => DEFAULT_RETRY_AFTER_SECS,
            };
            api = api.with_retry_after(secs);
        } else if status == StatusCode::SERVICE_UNAVAILABLE
            || status == StatusCode::TOO_MANY_REQUESTS
        {
            let secs = match &error {
                UseCaseError::Provider(
                    ProviderError::RateLimited {
                        retry_after: Some(d),
                    }
                    | ProviderError::LimitReached { retry_after: d, .. },
                ) => d.as_secs_f64().ceil() as u64,
                UseCaseError::Budget(b) => b.retry_after().as_secs_f64().ceil() as u64,
                _ => DEFAULT_RETRY_AFTER_SECS,
            };
            api = api.with_retry_after(secs);
        }
        api
    }
}

fn status_of(error: &UseCaseError) -> StatusCode {
    use threadbox_core::domain::RejectKind;
    match error {
        UseCaseError::UnknownThread(_)
        | UseCaseError::UnknownProcess { .. }
        | UseCaseError::UnknownCheckpoint { .. } => StatusCode::NOT_FOUND,
        UseCaseError::ThreadExists(_) => StatusCode::CONFLICT,
        UseCaseError::BadRequest(_) | UseCaseError::UnknownImage(_) => StatusCode::BAD_REQUEST,
        // Like a full disk: nothing the server can fix; deleting checkpoints or files makes room.
        UseCaseError::CheckpointQuota(_) => StatusCode::INSUFFICIENT_STORAGE,
        UseCaseError::Rejected(r) => match r.kind {
            RejectKind::Busy | RejectKind::Illegal | RejectKind::Expired => StatusCode::CONFLICT,
        },
        UseCaseError::Busy { .. } => StatusCode::CONFLICT,
        UseCaseError::Budget(_) => StatusCode::TOO_MANY_REQUESTS,
        UseCaseError::Held(_)
        | UseCaseError::NoSandbox { .. }
        | UseCaseError::NetworkConflict { .. }
        | UseCaseError::ImageConflict { .. }
        | UseCaseError::Interrupted { .. } => StatusCode::CONFLICT,
        UseCaseError::Provider(p) => match p {
            ProviderError::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            // What this server's provider (or set-up) does not do, named in the message: not
            // the request's fault, and no retry helps (E2B's API answers the same, `e2b-api`).
            ProviderError::Unsupported(_) => StatusCode::NOT_IMPLEMENTED,
            ProviderError::Conflict(_) => StatusCode::CONFLICT,
            ProviderError::NotFound(_) => StatusCode::NOT_FOUND,
            // The sandbox's own disk is full: nothing the server can fix, and retrying will not
            // help until the caller frees room; what envd answers too.
            ProviderError::NoSpace(_) => StatusCode::INSUFFICIENT_STORAGE,
            // The caller's own thread is busy enough: 429. The host is full: 503.
            ProviderError::LimitReached { limit, .. } if limit.is_per_thread() => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ProviderError::LimitReached { .. } => StatusCode::SERVICE_UNAVAILABLE,
            // Gone survives here only when the replacement vanished too: worth another try.
            ProviderError::Gone(_)
            | ProviderError::RateLimited { .. }
            | ProviderError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            // Our credentials or the provider itself are broken: not the caller's fault, and
            // retrying will not fix it.
            ProviderError::Unauthorized(_) | ProviderError::Internal(_) => StatusCode::BAD_GATEWAY,
        },
        UseCaseError::Store(StoreError::Corrupt(_)) => StatusCode::INTERNAL_SERVER_ERROR,
        UseCaseError::Store(_) | UseCaseError::Queue(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        UseCaseError::from(error).into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(code = self.code, message = %self.message, "request failed");
        }
        let mut body = json!({ "error": { "code": self.code, "message": self.message } });
        // In the body too, for clients behind proxies that drop the header.
        if let Some(secs) = self.retry_after {
            body["error"]["retry_after"] = json!(secs);
        }
        let mut response = (self.status, Json(body)).into_response();
        let headers = response.headers_mut();
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"threadbox\""),
            );
        }
        response
    }
}

/// axum answers a body over the limit with 413 and other body failures with 400; keep its status,
/// use our shape.
fn body_error(status: StatusCode, detail: String) -> ApiError {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(status, "payload_too_large", detail)
    } else {
        ApiError::new(status, "invalid_body", detail)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::JsonSyntaxError(e) => ApiError::bad_request(
                "invalid_json",
                format!("malformed JSON body: {}", e.body_text()),
            ),
            // Valid JSON of the wrong shape (a missing field, a wrong type, an unknown field) is
            // as much the caller's mistake as a syntax error: 400, not axum's 422.
            JsonRejection::JsonDataError(e) => ApiError::bad_request("invalid_json", e.body_text()),
            // Requiring the JSON content type is deliberate: a browser cannot send it cross-site
            // without a CORS preflight, which this API never grants.
            JsonRejection::MissingJsonContentType(e) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                e.body_text(),
            ),
            JsonRejection::BytesRejection(e) => body_error(e.status(), e.body_text()),
            other => body_error(other.status(), other.body_text()),
        }
    }
}

impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        body_error(rejection.status(), rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::bad_request("invalid_query", rejection.body_text())
    }
}

impl From<RawPathParamsRejection> for ApiError {
    fn from(rejection: RawPathParamsRejection) -> Self {
        ApiError::bad_request("invalid_path", rejection.body_text())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use threadbox_core::domain::{Command, RejectKind, Rejected, Status, ThreadId};
    use threadbox_core::ports::StoreKind;

    fn status_and_code(error: UseCaseError) -> (StatusCode, &'static str, Option<u64>) {
        let api = ApiError::from(error);
        (api.status, api.code, api.retry_after)
    }

    #[test]
    fn use_case_errors_map_to_what_the_client_should_do() {
        let t = ThreadId::parse("t1").unwrap();
        let rejected = |kind| {
            UseCaseError::Rejected(Rejected {
                kind,
                from: Some(Status::Destroyed),
                command: Command::Pause,
            })
        };
        let cases = [
            (
                UseCaseError::UnknownThread(t.clone()),
                (StatusCode::NOT_FOUND, "unknown_thread", None),
            ),
            (
                rejected(RejectKind::Illegal),
                (StatusCode::CONFLICT, "illegal_transition", None),
            ),
            (
                rejected(RejectKind::Expired),
                (StatusCode::CONFLICT, "thread_expired", None),
            ),
            (
                rejected(RejectKind::Busy),
                (StatusCode::CONFLICT, "busy", Some(1)),
            ),
            (
                UseCaseError::Busy {
                    thread_id: t.clone(),
                    status: Status::Creating,
                    retry_after: Duration::from_millis(500),
                },
                (StatusCode::CONFLICT, "busy", Some(1)),
            ),
            (
                UseCaseError::Busy {
                    thread_id: t.clone(),
                    status: Status::Creating,
                    retry_after: Duration::from_millis(2100),
                },
                (StatusCode::CONFLICT, "busy", Some(3)),
            ),
            (
                UseCaseError::Held(t.clone()),
                (StatusCode::CONFLICT, "held", None),
            ),
            (
                ProviderError::InvalidRequest("bad path".into()).into(),
                (StatusCode::BAD_REQUEST, "invalid_request", None),
            ),
            (
                ProviderError::NotFound("/home/user/x: no such file or directory".into()).into(),
                (StatusCode::NOT_FOUND, "file_not_found", None),
            ),
            (
                ProviderError::NoSpace("/tmp/x: no space left in the sandbox".into()).into(),
                (StatusCode::INSUFFICIENT_STORAGE, "no_space", None),
            ),
            (
                UseCaseError::Interrupted {
                    thread_id: t.clone(),
                    what: "reset",
                    status: Status::Active,
                },
                (StatusCode::CONFLICT, "interrupted", None),
            ),
            (
                ProviderError::RateLimited {
                    retry_after: Some(Duration::from_millis(2500)),
                }
                .into(),
                (StatusCode::SERVICE_UNAVAILABLE, "provider_error", Some(3)),
            ),
            (
                ProviderError::Unavailable("down".into()).into(),
                (StatusCode::SERVICE_UNAVAILABLE, "provider_error", Some(1)),
            ),
            (
                ProviderError::Internal("boom".into()).into(),
                (StatusCode::BAD_GATEWAY, "provider_error", None),
            ),
            (
                StoreError::unavailable(StoreKind::Session, "locked").into(),
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    Some(1),
                ),
            ),
            (
                StoreError::corrupt(StoreKind::Session, "row 1").into(),
                (StatusCode::INTERNAL_SERVER_ERROR, "store_unavailable", None),
            ),
        ];
        for (error, expected) in cases {
            let shown = format!("{error:?}");
            assert_eq!(status_and_code(error), expected, "{shown}");
        }
    }

    #[tokio::test]
    async fn responses_carry_the_shape_and_headers() {
        let response = ApiError::from(UseCaseError::Busy {
            thread_id: ThreadId::parse("t1").unwrap(),
            status: Status::Pausing,
            retry_after: Duration::from_millis(500),
        })
        .into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], "busy");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("retry shortly"));
        assert_eq!(body["error"]["retry_after"], 1);

        let response = ApiError::unauthorized("no key").into_response();
        assert_eq!(
            response.headers()[header::WWW_AUTHENTICATE],
            "Bearer realm=\"threadbox\""
        );
    }
}
