//! The E2B API is one more way in to the same budgets (design invariant 11): a key's hourly
//! create cap is counted across threadbox's own API and E2B's creates, and envd calls are
//! charged to the key their token names, refused as threadbox's API refuses them.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

use threadbox_api::http::{router, ApiAuth};
use threadbox_api::live::{TokenKey, TokenSecret};
use threadbox_core::domain::{Budgets, Millis, Status, ThreadId};
use threadbox_core::usecases::{Config, Threadbox};
use threadbox_e2b_api::{routes, E2bApi};
use threadbox_sqlite::{
    Database, QueueConfig, SqliteQueue, SqliteSessionStore, SqliteWindowCounter,
};
use threadbox_testing::{InMemoryProvider, ManualClock};

const KEY_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const KEY_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
/// 2026-11-01T10:45:00Z.
const START: Millis = Millis(1_793_491_200_000 + 10 * 3_600_000 + 45 * 60_000);

struct Reply {
    status: StatusCode,
    retry_after: Option<String>,
    body: Value,
}

async fn send(app: &Router, request: Request<Body>) -> Reply {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Reply {
        status,
        retry_after,
        body,
    }
}

async fn e2b_create(app: &Router, key: &str, thread: &str) -> Reply {
    let request = Request::post("/e2b/v2/sandboxes")
        .header("x-api-key", key)
        .header("idempotency-key", thread)
        .header("content-type", "application/json")
        .body(Body::from(json!({"templateID": "base"}).to_string()))
        .unwrap();
    send(app, request).await
}

#[tokio::test]
async fn e2b_creates_and_envd_calls_count_against_the_same_budgets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("threadbox.db");
    let store = Arc::new(SqliteSessionStore::open(&path).unwrap());
    let queue = Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap());
    let counter =
        SqliteWindowCounter::new(Database::open(dir.path().join("counts.db"), "").unwrap())
            .await
            .unwrap();
    let config = Config {
        settle_poll: Duration::from_millis(5),
        budgets: Budgets {
            scope_creates_per_hour: Some(1),
            thread_compute_per_day: Some(60),
            ..Budgets::default()
        },
        ..Config::default()
    };
    let clock = Arc::new(ManualClock::new(START));
    let tb = Threadbox::new(store, InMemoryProvider::new(), queue, clock.clone(), config)
        .with_budget_counter(Arc::new(counter));
    let auth = ApiAuth::new([KEY_A, KEY_B]);
    let key = TokenKey::new(TokenSecret::new("a-test-token-secret-of-32-bytes-or-more").unwrap());
    let app = router(tb.clone(), auth.clone()).merge(routes(E2bApi::new(tb.clone(), auth, key)));

    // Key A's one create of the hour, through threadbox's own API.
    let made = send(
        &app,
        Request::post("/v1/threads/api-1/resolve")
            .header(header::AUTHORIZATION, format!("Bearer {KEY_A}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
    // Through E2B's door, a new thread is past the cap: E2B's 429, Retry-After, nothing made.
    let refused = e2b_create(&app, KEY_A, "e2b-2").await;
    assert_eq!(
        refused.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        refused.body
    );
    assert_eq!(refused.body["code"], 429);
    assert_eq!(
        refused.retry_after.as_deref(),
        Some("900"),
        "until 11:00 UTC"
    );
    let e2b_2 = ThreadId::parse("e2b-2").unwrap();
    assert!(tb.store.load(&e2b_2).await.unwrap().is_none());
    // The thread key A already has is no new sandbox; another key has its own cap.
    let again = e2b_create(&app, KEY_A, "api-1").await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.body);
    let other = e2b_create(&app, KEY_B, "e2b-2").await;
    assert_eq!(other.status, StatusCode::CREATED, "{}", other.body);

    // Past the thread's compute budget, an envd call is refused (Connect's resource_exhausted,
    // HTTP 429) and the thread is paused, as an exec through threadbox's API would be.
    clock.advance(Duration::from_secs(61));
    let stat = send(
        &app,
        Request::post("/e2b/filesystem.Filesystem/Stat")
            .header("e2b-sandbox-id", again.body["sandboxID"].as_str().unwrap())
            .header(
                "x-access-token",
                again.body["envdAccessToken"].as_str().unwrap(),
            )
            .header("content-type", "application/json")
            .body(Body::from(json!({"path": "/home/user"}).to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(stat.status, StatusCode::TOO_MANY_REQUESTS, "{}", stat.body);
    assert_eq!(stat.body["code"], "resource_exhausted");
    let api_1 = ThreadId::parse("api-1").unwrap();
    assert_eq!(
        tb.store.load(&api_1).await.unwrap().unwrap().status,
        Status::Paused
    );
}
