//! What can go wrong talking to the API. Which exit status each failure means is `exit`'s
//! business, not the client's.

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The API answered with an error. Displayed as `<message> (<code>)`: the message for people,
    /// the stable code for searching and scripts.
    #[error("{message} ({code})")]
    Api {
        status: u16,
        code: String,
        message: String,
        /// Seconds from `Retry-After`, when the API said how long to wait.
        retry_after: Option<u64>,
    },
    /// No answer at all: connection refused, DNS, TLS, or a timeout.
    #[error("cannot reach threadbox at {url}: {detail}{hint}")]
    Unreachable {
        url: String,
        detail: String,
        hint: &'static str,
    },
    /// An answer the API never gives (not JSON, or the wrong shape): most likely `--url` names
    /// something else.
    #[error("unexpected answer from {url}: {detail}")]
    Protocol { url: String, detail: String },
    /// The client's own settings are wrong (a base URL that is not one).
    #[error("{0}")]
    Config(String),
}

impl ClientError {
    /// Worth retrying unchanged: what `events --follow` rides out instead of exiting. No
    /// answer at all, or a busy, rate-limited or timed-out one.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } => true,
            ClientError::Api { status, code, .. } => is_busy(*status) || code == "busy",
            ClientError::Protocol { .. } | ClientError::Config(_) => false,
        }
    }

    /// An error answer, from its status and body. The API's bodies are
    /// `{"error": {"code", "message"}}`; anything else (a proxy's HTML page, say) still yields
    /// a readable error named after the status.
    pub(crate) fn from_response(status: u16, retry_after: Option<u64>, body: &[u8]) -> Self {
        #[derive(serde::Deserialize)]
        struct Body {
            error: Inner,
        }
        #[derive(serde::Deserialize)]
        struct Inner {
            code: String,
            message: String,
        }
        match serde_json::from_slice::<Body>(body) {
            Ok(Body { error }) => ClientError::Api {
                status,
                code: error.code,
                message: error.message,
                retry_after,
            },
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                let text = text.trim();
                let message = if text.is_empty() {
                    format!("HTTP {status} with no body")
                } else {
                    // Enough to recognise the page, not a screenful of HTML.
                    let short: String = text.chars().take(200).collect();
                    format!("HTTP {status}: {short}")
                };
                ClientError::Api {
                    status,
                    code: format!("http_{status}"),
                    message,
                    retry_after,
                }
            }
        }
    }

    /// A transport failure, named by its root cause: reqwest's own message only repeats the URL
    /// ("error sending request for url …"), the useful part ("Connection refused") is the
    /// innermost source.
    pub(crate) fn unreachable(url: &str, error: &reqwest::Error) -> Self {
        let mut root: &dyn std::error::Error = error;
        while let Some(cause) = root.source() {
            root = cause;
        }
        let (detail, hint) = if error.is_timeout() {
            (
                "timed out".to_owned(),
                " (the API may be overloaded; try again)",
            )
        } else if error.is_connect() {
            (
                format!("cannot connect: {root}"),
                " (is `threadbox dev` running? set --url or THREADBOX_URL to reach another)",
            )
        } else {
            (root.to_string(), "")
        };
        ClientError::Unreachable {
            url: url.to_owned(),
            detail,
            hint,
        }
    }
}

/// Busy, rate-limited, or a backend or gateway that did not answer in time.
pub fn is_busy(status: u16) -> bool {
    matches!(status, 429 | 503 | 504)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_error_bodies_are_shown_as_message_and_code() {
        let body = br#"{"error":{"code":"unknown_thread","message":"no thread demo"}}"#;
        let error = ClientError::from_response(404, None, body);
        assert_eq!(error.to_string(), "no thread demo (unknown_thread)");
        assert!(!error.is_transient());

        let busy = br#"{"error":{"code":"busy","message":"retry shortly"}}"#;
        let error = ClientError::from_response(409, Some(2), busy);
        assert!(error.is_transient());
        assert!(matches!(
            error,
            ClientError::Api {
                retry_after: Some(2),
                ..
            }
        ));
    }

    #[test]
    fn foreign_bodies_still_make_a_readable_error() {
        let page = format!("<html>{}</html>", "x".repeat(1000));
        let error = ClientError::from_response(502, None, page.as_bytes());
        let shown = error.to_string();
        assert!(shown.starts_with("HTTP 502: <html>xxx"), "{shown}");
        assert!(shown.ends_with("(http_502)"), "{shown}");
        assert!(shown.len() < 260, "{shown}");
        assert_eq!(
            ClientError::from_response(404, None, b"").to_string(),
            "HTTP 404 with no body (http_404)"
        );
    }
}
