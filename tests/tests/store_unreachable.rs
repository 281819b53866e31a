//! The session store unreachable, as a Lambda function sees it: the HTTP API over a DynamoDB
//! store whose endpoint is a closed loopback port. Every call must fail fast with 503
//! `store_unavailable`, a message naming DynamoDB and the cause, and `Retry-After`; and nothing
//! may be half done (no sandbox made for a thread the store never recorded).

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use threadbox_api::http::{router, ApiAuth};
use threadbox_aws::dynamo::{DynamoConfig, DynamoSessionStore};
use threadbox_core::usecases::Threadbox;
use threadbox_sqlite::{QueueConfig, SqliteQueue};
use threadbox_testing::lifecycle_conformance::test_config;
use threadbox_testing::{InMemoryProvider, ManualClock};
use tower::ServiceExt;

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A DynamoDB client for `endpoint`, built by hand: the standard configuration chain would look
/// for credentials and a region beyond loopback (the instance metadata service).
fn dynamo_client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .endpoint_url(endpoint)
        .http_client(http)
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_answers_503_naming_the_store_and_nothing_is_half_done() {
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let store = DynamoSessionStore::new(
        dynamo_client(&endpoint),
        DynamoConfig::new("tb-unreachable-sessions", "tb-unreachable-events"),
    );
    let dir = tempfile::tempdir().unwrap();
    let queue =
        SqliteQueue::open(dir.path().join("q.db"), "lifecycle", QueueConfig::default()).unwrap();
    let provider = InMemoryProvider::new();
    let tb = Threadbox::new(
        Arc::new(store),
        provider.clone(),
        Arc::new(queue),
        Arc::new(ManualClock::default()),
        test_config(),
    );
    let app = router(tb, ApiAuth::new(&[] as &[String]));

    for (method, uri) in [
        ("POST", "/v1/threads/unreachable-1/resolve"),
        ("POST", "/v1/threads/unreachable-1/pause"),
        ("GET", "/v1/threads/unreachable-1"),
        ("GET", "/v1/threads"),
    ] {
        let started = Instant::now();
        let response = app
            .clone()
            .oneshot(
                Request::builder()
                    .method(method)
                    .uri(uri)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let took = started.elapsed();
        let status = response.status();
        let retry_after = response.headers().get("retry-after").cloned();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{method} {uri}: {body}"
        );
        assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("DynamoDB"), "names the store: {message}");
        assert!(retry_after.is_some(), "{method} {uri}: no Retry-After");
        // Refused connections fail at once; three attempts with short backoffs stay well
        // inside a Lambda's timeout.
        assert!(
            took < Duration::from_secs(10),
            "{method} {uri} took {took:?}"
        );
    }
    assert_eq!(
        provider.creates(),
        0,
        "no sandbox for a thread never recorded"
    );
    assert!(provider.live_ids().is_empty());
}
