//! What "no API keys" may mean: this machine only. Without keys anything that can reach the
//! port can use the API, and a web page the developer visits can reach loopback too. So a
//! keyless server answers only requests that can only have come from this machine's own tools:
//!
//! - `Host` names loopback (`127.0.0.1`, `[::1]` or `localhost`) and, when the server knows it,
//!   its own port. A DNS-rebinding page reaches 127.0.0.1 under its own name, and its requests
//!   carry that name; they get 403 `forbidden_host`. (A request without `Host` cannot come from
//!   a browser, so it passes: some HTTP/1.0 tools omit it.)
//! - No cross-site browser request: `Sec-Fetch-Site: cross-site`, an `Origin` that is not
//!   loopback, or `Origin: null` (sandboxed frames, some redirects) get 403 `forbidden_origin`.
//!   Browsers send these on every request they make for a page, including `<img>` loads and the
//!   WebSocket upgrade; curl, SDKs and the CLI send none and pass.
//!
//! With keys, none of this applies: a keyed server may be reached under any name, and a browser
//! attaches no bearer key cross-site without a CORS preflight the API never grants.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

const LOOPBACK_NAMES: [&str; 3] = ["127.0.0.1", "[::1]", "localhost"];

/// The keyless policy; `port` is the server's, when known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalOnly {
    port: Option<u16>,
}

impl LocalOnly {
    /// For a server listening on `port`: `Host` must name it.
    pub fn on_port(port: u16) -> Self {
        Self { port: Some(port) }
    }

    /// Where the port is not known (the router on its own): `Host` must name loopback.
    pub fn any_port() -> Self {
        Self { port: None }
    }

    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        self.check_host(headers)?;
        check_not_cross_site(headers)
    }

    fn check_host(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(value) = headers.get(header::HOST) else {
            return Ok(());
        };
        let accepted = value
            .to_str()
            .ok()
            .and_then(split_authority)
            .is_some_and(|(name, port)| {
                LOOPBACK_NAMES.contains(&name.to_ascii_lowercase().as_str())
                    && match (self.port, port) {
                        (None, _) => true,
                        (Some(ours), Some(theirs)) => ours == theirs,
                        // HTTP leaves the default port out of `Host`.
                        (Some(ours), None) => ours == 80,
                    }
            });
        if accepted {
            Ok(())
        } else {
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                "authentication is off, so this server answers only requests addressed to \
                 loopback (127.0.0.1, [::1] or localhost with its port); configure API keys to \
                 serve other names",
            ))
        }
    }
}

fn check_not_cross_site(headers: &HeaderMap) -> Result<(), ApiError> {
    let forbidden = |why: &str| {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden_origin",
            format!(
                "authentication is off, so browsers may call this API only from loopback pages \
                 ({why}); configure API keys to allow others"
            ),
        ))
    };
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
    if cross_site {
        return forbidden("this request is cross-site");
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let loopback = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .and_then(|(_, authority)| split_authority(authority))
        .is_some_and(|(name, _)| LOOPBACK_NAMES.contains(&name.to_ascii_lowercase().as_str()));
    if loopback {
        Ok(())
    } else {
        forbidden("its Origin is not loopback")
    }
}

/// `name[:port]` or `[v6]:port` into the name (brackets kept) and the port; `None` when the
/// port is not a number or anything trails.
fn split_authority(authority: &str) -> Option<(&str, Option<u16>)> {
    let (name, rest) = if authority.starts_with('[') {
        let end = authority.find(']')? + 1;
        authority.split_at(end)
    } else {
        match authority.find(':') {
            Some(colon) => authority.split_at(colon),
            None => (authority, ""),
        }
    };
    let port = match rest {
        "" => None,
        _ => Some(rest.strip_prefix(':')?.parse().ok()?),
    };
    Some((name, port))
}

/// Middleware: answer 403 unless the request passes `policy`.
pub async fn require_local(
    State(policy): State<LocalOnly>,
    request: Request,
    next: Next,
) -> Response {
    match policy.check(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(error) => error.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn code(policy: LocalOnly, pairs: &[(&str, &str)]) -> Option<&'static str> {
        policy.check(&headers(pairs)).err().map(|e| e.code)
    }

    #[test]
    fn host_must_name_loopback_and_the_port() {
        let on = LocalOnly::on_port(8787);
        for ok in [
            "127.0.0.1:8787",
            "localhost:8787",
            "LOCALHOST:8787",
            "[::1]:8787",
        ] {
            assert_eq!(code(on, &[("host", ok)]), None, "{ok}");
        }
        assert_eq!(code(on, &[]), None, "no Host: not a browser");
        for bad in [
            "rebind.evil.example:8787",
            "127.0.0.1:9999",
            "localhost",
            "127.0.0.1.evil.example:8787",
            "localhost.:8787",
            "[::1]",
            "127.0.0.1:8787x",
            "0.0.0.0:8787",
        ] {
            assert_eq!(code(on, &[("host", bad)]), Some("forbidden_host"), "{bad}");
        }
        assert_eq!(code(LocalOnly::on_port(80), &[("host", "localhost")]), None);
        assert_eq!(
            code(LocalOnly::any_port(), &[("host", "localhost:1")]),
            None
        );
        assert_eq!(
            code(LocalOnly::any_port(), &[("host", "evil.example")]),
            Some("forbidden_host")
        );
    }

    #[test]
    fn cross_site_browser_requests_are_refused() {
        let on = LocalOnly::on_port(8787);
        let host = ("host", "127.0.0.1:8787");
        for ok in [
            vec![host, ("sec-fetch-site", "same-origin")],
            vec![host, ("sec-fetch-site", "none")],
            vec![host, ("origin", "http://localhost:3000")],
            vec![host, ("origin", "http://[::1]:8787")],
        ] {
            assert_eq!(code(on, &ok), None, "{ok:?}");
        }
        for bad in [
            vec![host, ("sec-fetch-site", "cross-site")],
            vec![host, ("origin", "https://evil.example")],
            vec![host, ("origin", "http://127.0.0.1.evil.example")],
            vec![host, ("origin", "null")],
        ] {
            assert_eq!(code(on, &bad), Some("forbidden_origin"), "{bad:?}");
        }
    }
}
