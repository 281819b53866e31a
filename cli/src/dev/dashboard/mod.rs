//! The dev dashboard: one static page served by `threadbox dev` at `/` and `/dashboard`.
//!
//! The HTML, CSS and JavaScript are plain files embedded in the binary (`include_str!`), so there
//! is no build step and nothing to install. The page holds no secrets and talks only to the API
//! beside it (see the header of `dashboard.js` for how it gets credentials); the headers below
//! keep it that way: scripts, styles and connections from this origin only, and no framing.

use axum::http::{header, HeaderValue};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

const INDEX_HTML: &str = include_str!("index.html");
const DASHBOARD_CSS: &str = include_str!("dashboard.css");
const DASHBOARD_JS: &str = include_str!("dashboard.js");

/// `connect-src 'self'` covers the API and, in current browsers, the WebSocket on the same host
/// and port; `frame-ancestors 'none'` stops another page from framing the buttons.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

pub fn routes() -> Router {
    Router::new()
        .route("/", get(index))
        .route("/dashboard", get(index))
        .route("/dashboard/dashboard.css", get(css))
        .route("/dashboard/dashboard.js", get(js))
}

async fn index() -> impl IntoResponse {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn css() -> impl IntoResponse {
    asset("text/css; charset=utf-8", DASHBOARD_CSS)
}

async fn js() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", DASHBOARD_JS)
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CSP),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
            // A rebuilt binary serves a new page: never let the browser keep an old one.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    use super::*;

    async fn get(path: &str) -> (StatusCode, String, String) {
        let response = routes()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        if status == StatusCode::OK {
            assert!(response
                .headers()
                .contains_key(header::CONTENT_SECURITY_POLICY));
        }
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            content_type,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn the_page_and_its_assets_are_served_with_their_types() {
        for path in ["/", "/dashboard"] {
            let (status, kind, body) = get(path).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert!(kind.starts_with("text/html"), "{path}: {kind}");
            assert!(body.contains("<title>threadbox dashboard</title>"));
        }
        let (status, kind, _) = get("/dashboard/dashboard.css").await;
        assert_eq!(
            (status, kind.as_str()),
            (StatusCode::OK, "text/css; charset=utf-8")
        );
        let (status, kind, _) = get("/dashboard/dashboard.js").await;
        assert_eq!(
            (status, kind.as_str()),
            (StatusCode::OK, "text/javascript; charset=utf-8")
        );
        assert_eq!(get("/dashboard/other.js").await.0, StatusCode::NOT_FOUND);
    }

    /// The script finds its elements by id: every id it asks for must be in the page, or a
    /// renamed element would only show up as a broken page in a browser.
    #[test]
    fn every_element_the_script_uses_is_in_the_page() {
        let mut rest = DASHBOARD_JS;
        let mut ids = Vec::new();
        while let Some(at) = rest.find("$(\"") {
            rest = &rest[at + 3..];
            let end = rest.find('"').unwrap();
            ids.push(&rest[..end]);
        }
        assert!(ids.len() > 10, "{ids:?}");
        for id in ids {
            assert!(
                INDEX_HTML.contains(&format!("id=\"{id}\"")),
                "dashboard.js uses #{id}, which index.html lacks"
            );
        }
        for asset in ["/dashboard/dashboard.css", "/dashboard/dashboard.js"] {
            assert!(INDEX_HTML.contains(asset), "{asset}");
        }
    }
}
