//! `POST /v1/tokens`: mint a live-events subscription token, behind the API's bearer keys.
//!
//! Body `{"threads": ["t1", …] | "*", "ttl_seconds": 3600, "exec": false}` (ttl optional, one hour
//! by default, at most a day); answer 201 `{"token", "expires_at", "threads", "exec"}`. Whoever
//! holds an API key may watch any thread anyway (it can read every thread's events), so the key
//! may mint any scope. `"exec": true` lets the token also run commands in those threads'
//! sandboxes over the socket (`exec` frames); the key can run them over HTTP anyway, and a token
//! only gets the capability when asked for, and names the key that minted it, whose budgets its
//! commands are charged to.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::routing::post;
use axum::{middleware, Json, Router};
use serde::Deserialize;

use super::{MintedToken, TokenKey};
use crate::http::{require_api_key, ApiAuth, ApiError, Caller, JsonBody, MAX_JSON_BODY};
use threadbox_core::domain::ThreadScope;
use threadbox_core::ports::Clock;

/// How long a token lives when the request does not say.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(3600);

#[derive(Clone)]
struct Minter {
    key: TokenKey,
    clock: Arc<dyn Clock>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenRequest {
    threads: ThreadScope,
    ttl_seconds: Option<u64>,
    #[serde(default)]
    exec: bool,
}

/// The token route, to merge into the API's router (`http::router`; it has its own state: the
/// key).
pub fn token_routes(key: TokenKey, clock: Arc<dyn Clock>, auth: ApiAuth) -> Router {
    Router::new()
        .route("/v1/tokens", post(mint))
        .route_layer(middleware::from_fn_with_state(auth, require_api_key))
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .with_state(Minter { key, clock })
}

async fn mint(
    State(minter): State<Minter>,
    Caller(caller): Caller,
    JsonBody(request): JsonBody<TokenRequest>,
) -> Result<(StatusCode, Json<MintedToken>), ApiError> {
    let ttl = request
        .ttl_seconds
        .map_or(DEFAULT_TOKEN_TTL, Duration::from_secs);
    let minted = minter
        .key
        .mint_with_exec(
            request.threads,
            ttl,
            minter.clock.now(),
            request.exec,
            caller,
        )
        .map_err(|e| ApiError::bad_request("invalid_ttl", e.to_string()))?;
    Ok((StatusCode::CREATED, Json(minted)))
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{header, Request};
    use serde_json::{json, Value};
    use tower::ServiceExt;

    use super::*;
    use crate::live::TokenSecret;
    use threadbox_core::domain::{Millis, ThreadId};
    use threadbox_testing::ManualClock;

    fn key() -> TokenKey {
        TokenKey::new(TokenSecret::new("http-token-route-test-secret-0123456789").unwrap())
    }

    async fn post(auth: ApiAuth, bearer: Option<&str>, body: Value) -> (StatusCode, Value) {
        let clock = Arc::new(ManualClock::default());
        let app = token_routes(key(), clock, auth);
        let mut request =
            Request::post("/v1/tokens").header(header::CONTENT_TYPE, "application/json");
        if let Some(b) = bearer {
            request = request.header(header::AUTHORIZATION, format!("Bearer {b}"));
        }
        let response = app
            .oneshot(request.body(Body::from(body.to_string())).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn mints_a_token_the_key_verifies() {
        let auth = ApiAuth::new(["k1"]);
        let (status, body) = post(
            auth,
            Some("k1"),
            json!({"threads": ["t1"], "ttl_seconds": 60}),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["threads"], json!(["t1"]));
        let now = ManualClock::default().now();
        assert_eq!(body["expires_at"], json!(now.0 + 60_000));
        let granted = key().verify(body["token"].as_str().unwrap(), now).unwrap();
        granted
            .check_thread(&ThreadId::parse("t1").unwrap())
            .unwrap();
        assert_eq!(granted.expires_at, Millis(now.0 + 60_000));
        assert!(!granted.exec, "watch-only unless asked");
        assert_eq!(body["exec"], false);

        let (status, body) = post(
            ApiAuth::new(["k1"]),
            Some("k1"),
            json!({"threads": ["t1"], "exec": true}),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["exec"], true);
        let granted = key().verify(body["token"].as_str().unwrap(), now).unwrap();
        assert!(granted.exec);
        assert_eq!(
            granted.caller,
            Some(crate::http::key_scope("k1")),
            "its commands are charged to the key that minted it"
        );

        let (status, body) = post(ApiAuth::disabled(), None, json!({"threads": "*"})).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["threads"], "*");
        assert_eq!(
            body["expires_at"],
            json!(now.0 + 3_600_000),
            "an hour by default"
        );
    }

    #[tokio::test]
    async fn needs_an_api_key_when_keys_are_configured() {
        let (status, body) = post(ApiAuth::new(["k1"]), None, json!({"threads": "*"})).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(body["error"]["code"], "unauthorized");
        let (status, _) = post(ApiAuth::new(["k1"]), Some("k2"), json!({"threads": "*"})).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }

    #[tokio::test]
    async fn bad_requests_say_what_is_wrong() {
        for (body, code, why) in [
            (
                json!({"threads": []}),
                "invalid_json",
                "at least one thread",
            ),
            (
                json!({"threads": ["bad id"]}),
                "invalid_json",
                "thread id contains",
            ),
            (json!({"threads": "all"}), "invalid_json", "\"*\" or a list"),
            (
                json!({"ttl_seconds": 60}),
                "invalid_json",
                "missing field `threads`",
            ),
            (
                json!({"threads": "*", "exec": "yes"}),
                "invalid_json",
                "invalid type",
            ),
            (
                json!({"threads": "*", "ttl_seconds": 0}),
                "invalid_ttl",
                "between 1 second",
            ),
            (
                json!({"threads": "*", "ttl_seconds": 86_401}),
                "invalid_ttl",
                "24 hours",
            ),
        ] {
            let (status, reply) = post(ApiAuth::disabled(), None, body.clone()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {reply}");
            assert_eq!(reply["error"]["code"], code, "{body}: {reply}");
            let message = reply["error"]["message"].as_str().unwrap();
            assert!(message.contains(why), "{body}: {message}");
        }
    }
}
