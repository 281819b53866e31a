//! Errors in E2B's shapes: the control plane's and `/files`' `{"code": <status>, "message"}`,
//! and Connect's `{"code": "<name>", "message"}` for envd's unary calls. Every failure of a use
//! case goes through the HTTP API's own mapping (`ApiError`), so a status means the same here as
//! there; only the body changes.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use threadbox_api::http::ApiError;
use threadbox_core::usecases::UseCaseError;
use threadbox_e2b::wire::error_body;

/// A failure as the control plane (and envd's `/files`) answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2bError {
    pub status: StatusCode,
    pub message: String,
    pub retry_after: Option<u64>,
}

impl E2bError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// What threadbox does not do, named (E2B's own status for a route it lacks is 404; a
    /// feature it does not offer is a 501 here, so a caller can tell it from a typo).
    pub fn unsupported(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_IMPLEMENTED,
            format!("{what} is not supported by threadbox's E2B API (see docs/e2b-api.md)"),
        )
    }

    /// E2B's message for a sandbox that is not there (Go's `%q` of the id).
    pub fn sandbox_not_found(sandbox_id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            format!("Sandbox {sandbox_id:?} doesn't exist or you don't have access to it"),
        )
    }

    /// A body too large for the route.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than {limit} bytes"),
        )
    }
}

impl From<ApiError> for E2bError {
    fn from(error: ApiError) -> Self {
        Self {
            status: error.status,
            message: error.message,
            retry_after: error.retry_after,
        }
    }
}

impl From<UseCaseError> for E2bError {
    fn from(error: UseCaseError) -> Self {
        ApiError::from(error).into()
    }
}

impl IntoResponse for E2bError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            Json(error_body(self.status.as_u16(), &self.message)),
        )
            .into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// Connect's error codes, by the HTTP status threadbox's mapping gives (Connect's own
/// "HTTP to error code" table, read backwards).
pub fn connect_code(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "invalid_argument",
        401 => "unauthenticated",
        403 => "permission_denied",
        404 => "not_found",
        409 => "already_exists",
        412 => "failed_precondition",
        413 | 429 | 507 => "resource_exhausted",
        499 => "canceled",
        501 => "unimplemented",
        502 | 503 => "unavailable",
        504 => "deadline_exceeded",
        _ => "internal",
    }
}

/// The HTTP status of a unary Connect error (Connect's table).
fn connect_status(code: &str) -> StatusCode {
    match code {
        "invalid_argument" | "failed_precondition" | "out_of_range" => StatusCode::BAD_REQUEST,
        "unauthenticated" => StatusCode::UNAUTHORIZED,
        "permission_denied" => StatusCode::FORBIDDEN,
        "not_found" => StatusCode::NOT_FOUND,
        "already_exists" | "aborted" => StatusCode::CONFLICT,
        "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
        "canceled" => StatusCode::from_u16(499).expect("a valid status"),
        "unimplemented" => StatusCode::NOT_IMPLEMENTED,
        "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
        "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A failure of one of envd's Connect calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectError {
    pub code: &'static str,
    pub message: String,
}

impl ConnectError {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new("invalid_argument", message)
    }
}

impl From<E2bError> for ConnectError {
    fn from(error: E2bError) -> Self {
        Self::new(connect_code(error.status), error.message)
    }
}

impl From<UseCaseError> for ConnectError {
    fn from(error: UseCaseError) -> Self {
        E2bError::from(error).into()
    }
}

impl IntoResponse for ConnectError {
    /// A unary call's error: a non-200 status and a JSON body (Connect's "Unary-Response").
    fn into_response(self) -> Response {
        (
            connect_status(self.code),
            Json(json!({ "code": self.code, "message": self.message })),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_codes_round_trip_through_their_status() {
        for code in [
            "invalid_argument",
            "unauthenticated",
            "permission_denied",
            "not_found",
            "already_exists",
            "resource_exhausted",
            "unimplemented",
            "unavailable",
            "deadline_exceeded",
            "internal",
        ] {
            assert_eq!(connect_code(connect_status(code)), code);
        }
    }

    #[test]
    fn use_case_failures_keep_the_api_s_status() {
        let thread = threadbox_core::domain::ThreadId::parse("t").unwrap();
        let e = E2bError::from(UseCaseError::UnknownThread(thread.clone()));
        assert_eq!(e.status, StatusCode::NOT_FOUND);
        let c = ConnectError::from(UseCaseError::Held(thread));
        assert_eq!(c.code, "already_exists");
    }
}
