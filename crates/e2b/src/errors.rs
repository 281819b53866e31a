//! E2B's failures, typed, and how they map onto the provider port's errors.
//!
//! Error bodies are `{"code": <int>, "message": "...", "error_code"?: "..."}` on the control
//! plane and from envd, `{"sandboxId", "message", "code": 502}` from the sandbox proxy, and
//! `{"code": "<connect code>", "message"}` from Connect unary calls. Not every body is JSON
//! (a plain-text `504 upstream request timeout`, an nginx HTML 502, an empty 302), so the
//! message falls back to the raw text, as the Python SDK does.

use std::time::Duration;

use reqwest::{Response, StatusCode};
use serde_json::Value;

use threadbox_core::ports::ProviderError;

/// Which side answered: a 404 means "no such sandbox" on the control plane but "no such
/// path" from envd's file API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plane {
    Control,
    Envd,
    /// envd's `/files`: a 404 is a path that does not exist, a 507 a full disk.
    Files,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum E2bError {
    /// 404 from the control plane: the sandbox never existed, was killed, or is another team's.
    #[error("E2B does not know this sandbox: {message}")]
    NotFound { message: String },
    /// 409: being killed or paused, already paused, an idempotent create still in flight.
    #[error("E2B conflict: {message}")]
    Conflict {
        message: String,
        error_code: Option<String>,
    },
    #[error("E2B rate limit: {message}")]
    RateLimited {
        message: String,
        retry_after: Option<Duration>,
    },
    /// 401 or 403: a bad API key or envd access token, or a blocked team.
    #[error("E2B refused the credentials ({status}): {message}")]
    Unauthorized { status: u16, message: String },
    /// 5xx: E2B's side failed; trying again later may work.
    #[error("E2B server error {status}: {message}")]
    Server {
        status: u16,
        message: String,
        error_code: Option<String>,
    },
    /// Any other 4xx: the request itself is wrong (validation, unknown template, missing path).
    #[error("E2B rejected the request ({status}): {message}")]
    Rejected {
        status: u16,
        message: String,
        error_code: Option<String>,
    },
    /// 404 from envd's `/files`: no such path in the sandbox.
    #[error("{message}")]
    PathNotFound { message: String },
    /// 507 from envd's `/files`: the sandbox's disk is full.
    #[error("no space left in the sandbox: {message}")]
    NoSpace { message: String },
    /// The sandbox proxy has no running sandbox behind this id (paused, killed or unknown).
    #[error("the sandbox is not running: {message}")]
    SandboxNotRunning { message: String },
    /// No answer: connection refused or reset, DNS, TLS, or the request timed out.
    #[error("E2B unreachable: {0}")]
    Transport(String),
    /// An answer that breaks the contract (bad JSON in a success, a broken stream frame).
    #[error("E2B answered something unexpected: {0}")]
    Protocol(String),
}

/// Longest error text kept; an HTML error page is not worth more.
const MAX_MESSAGE: usize = 300;
/// Error bodies are read up to this size and the rest is discarded.
const MAX_ERROR_BODY: usize = 64 * 1024;

impl E2bError {
    /// Type a non-success response, reading (a bounded prefix of) its body.
    pub(crate) async fn from_response(mut response: Response, plane: Plane) -> Self {
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let mut body = Vec::new();
        while body.len() < MAX_ERROR_BODY {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        Self::from_parts(status, retry_after, &body, plane)
    }

    pub(crate) fn from_parts(
        status: StatusCode,
        retry_after: Option<Duration>,
        body: &[u8],
        plane: Plane,
    ) -> Self {
        let parsed = ErrorBody::parse(body, status);
        let ErrorBody {
            message,
            error_code,
            from_proxy,
        } = parsed;
        match status.as_u16() {
            401 | 403 => E2bError::Unauthorized {
                status: status.as_u16(),
                message,
            },
            404 if plane == Plane::Control => E2bError::NotFound { message },
            404 if plane == Plane::Files => E2bError::PathNotFound { message },
            507 if plane == Plane::Files => E2bError::NoSpace { message },
            409 => E2bError::Conflict {
                message,
                error_code,
            },
            429 => E2bError::RateLimited {
                message,
                retry_after,
            },
            502 if from_proxy && plane != Plane::Control => E2bError::SandboxNotRunning { message },
            400..=499 => E2bError::Rejected {
                status: status.as_u16(),
                message,
                error_code,
            },
            500..=599 => E2bError::Server {
                status: status.as_u16(),
                message,
                error_code,
            },
            other => E2bError::Protocol(format!("unexpected HTTP status {other}: {message}")),
        }
    }

    pub(crate) fn from_transport(error: reqwest::Error) -> Self {
        // reqwest's Display never includes headers, so the API key cannot leak through here;
        // the URL it may include holds only the sandbox id.
        let what = if error.is_timeout() {
            "timed out"
        } else if error.is_connect() {
            "could not connect"
        } else {
            "transport failure"
        };
        E2bError::Transport(format!("{what}: {}", error_chain(&error)))
    }

    /// The port's error for this failure, for an operation on `sandbox_id`.
    pub(crate) fn into_provider(self, sandbox_id: &str) -> ProviderError {
        match self {
            E2bError::NotFound { .. } => ProviderError::Gone(sandbox_id.to_owned()),
            E2bError::Conflict { message, .. } => ProviderError::Conflict(message),
            E2bError::RateLimited { retry_after, .. } => ProviderError::RateLimited { retry_after },
            E2bError::Unauthorized { message, .. } => ProviderError::Unauthorized(message),
            e @ (E2bError::Server { .. } | E2bError::Transport(_)) => {
                ProviderError::Unavailable(e.to_string())
            }
            E2bError::SandboxNotRunning { message } => ProviderError::Unavailable(format!(
                "sandbox {sandbox_id} is not running: {message}"
            )),
            E2bError::Rejected { message, .. } => ProviderError::InvalidRequest(message),
            E2bError::PathNotFound { message } => ProviderError::NotFound(message),
            e @ E2bError::NoSpace { .. } => ProviderError::NoSpace(e.to_string()),
            e @ E2bError::Protocol(_) => ProviderError::Internal(e.to_string()),
        }
    }
}

struct ErrorBody {
    message: String,
    error_code: Option<String>,
    /// The body has the sandbox proxy's shape (`sandboxId` beside the message).
    from_proxy: bool,
}

impl ErrorBody {
    fn parse(body: &[u8], status: StatusCode) -> Self {
        if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) {
            let text = |key: &str| map.get(key).and_then(Value::as_str).map(str::to_owned);
            if let Some(message) = text("message") {
                return Self {
                    message: tidy(&message, status),
                    // Connect errors carry their code as a string in `code`.
                    error_code: text("error_code").or_else(|| text("code")),
                    from_proxy: map.contains_key("sandboxId"),
                };
            }
        }
        Self {
            message: tidy(&String::from_utf8_lossy(body), status),
            error_code: None,
            from_proxy: false,
        }
    }
}

/// One line, bounded, never empty.
fn tidy(text: &str, status: StatusCode) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        return status.canonical_reason().unwrap_or("no message").to_owned();
    }
    match line.char_indices().nth(MAX_MESSAGE) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `Retry-After` as delta-seconds: digits only, at most ten of them, at most 2^31−1.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let raw = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if raw.is_empty() || raw.len() > 10 || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = raw.parse().ok()?;
    (secs <= i32::MAX as u64).then(|| Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(status: u16, body: &str, plane: Plane) -> E2bError {
        E2bError::from_parts(
            StatusCode::from_u16(status).unwrap(),
            None,
            body.as_bytes(),
            plane,
        )
    }

    #[test]
    fn json_bodies_give_their_message_and_code() {
        let e = parse(
            503,
            r#"{"code":503,"message":"no capacity","error_code":"sandbox_capacity_unavailable"}"#,
            Plane::Control,
        );
        assert_eq!(
            e,
            E2bError::Server {
                status: 503,
                message: "no capacity".into(),
                error_code: Some("sandbox_capacity_unavailable".into())
            }
        );
    }

    #[test]
    fn plain_text_and_html_bodies_are_kept_as_text() {
        let e = parse(504, "upstream request timeout\n", Plane::Control);
        assert_eq!(
            e.to_string(),
            "E2B server error 504: upstream request timeout"
        );
        let html = format!("<html><body>{}</body></html>", "x".repeat(2000));
        match parse(502, &html, Plane::Control) {
            E2bError::Server { message, .. } => assert!(message.chars().count() <= MAX_MESSAGE + 1),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse(500, "", Plane::Control).to_string(),
            "E2B server error 500: Internal Server Error"
        );
    }

    #[test]
    fn statuses_map_to_the_port() {
        let p =
            |status, plane| parse(status, r#"{"code":1,"message":"m"}"#, plane).into_provider("i1");
        assert_eq!(p(404, Plane::Control), ProviderError::Gone("i1".into()));
        assert!(matches!(
            p(404, Plane::Envd),
            ProviderError::InvalidRequest(_)
        ));
        assert_eq!(p(404, Plane::Files), ProviderError::NotFound("m".into()));
        assert!(matches!(p(507, Plane::Files), ProviderError::NoSpace(_)));
        assert!(matches!(p(507, Plane::Envd), ProviderError::Unavailable(_)));
        assert!(matches!(p(409, Plane::Control), ProviderError::Conflict(_)));
        assert!(matches!(
            p(401, Plane::Control),
            ProviderError::Unauthorized(_)
        ));
        assert!(matches!(
            p(403, Plane::Envd),
            ProviderError::Unauthorized(_)
        ));
        assert!(matches!(
            p(429, Plane::Control),
            ProviderError::RateLimited { .. }
        ));
        assert!(matches!(
            p(400, Plane::Control),
            ProviderError::InvalidRequest(_)
        ));
        assert!(matches!(
            p(500, Plane::Control),
            ProviderError::Unavailable(_)
        ));
    }

    #[test]
    fn the_proxy_not_found_page_is_recognised_on_the_data_plane_only() {
        let body = r#"{"sandboxId":"i1","message":"The sandbox was not found","code":502}"#;
        assert!(matches!(
            parse(502, body, Plane::Envd),
            E2bError::SandboxNotRunning { .. }
        ));
        assert!(matches!(
            parse(502, body, Plane::Control),
            E2bError::Server { .. }
        ));
    }

    #[test]
    fn connect_unary_errors_carry_string_codes() {
        let e = parse(
            404,
            r#"{"code":"not_found","message":"process with pid 7 not found"}"#,
            Plane::Envd,
        );
        assert_eq!(
            e,
            E2bError::Rejected {
                status: 404,
                message: "process with pid 7 not found".into(),
                error_code: Some("not_found".into())
            }
        );
    }
}
