//! A transactional write whose response is lost: the SDK retries it, and DynamoDB answers the
//! retry by its `ClientRequestToken` (the same token, within ten minutes: the first attempt's
//! success), or, without one, by applying it again, when the version condition the first attempt
//! moved fails it.
//!
//! The adapters set no token themselves: the Rust SDK fills `ClientRequestToken` (an idempotency
//! token in DynamoDB's model) with a fresh UUID per call when it is unset, and keeps it across its
//! retries. This test holds that guarantee in place, for the session store's outbox write, so an
//! SDK change or a hand-built request that lost it would be caught.
//!
//! moto does not implement the token, so this runs against a small stand-in
//! endpoint on 127.0.0.1 that behaves as DynamoDB documents: it applies the first attempt and
//! drops its answer (500), then answers a retry with the same token 200 and one without a token
//! with `TransactionCanceledException` (`ConditionalCheckFailed`).

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use threadbox_aws::dynamo::{DynamoConfig, DynamoSessionStore};
use threadbox_core::ports::SessionStore;
use threadbox_testing::store_conformance::new_session;

#[derive(Default)]
struct Seen {
    /// The token of each TransactWriteItems attempt (empty: none).
    tokens: Vec<String>,
}

async fn dynamodb(
    seen: axum::extract::State<Arc<Mutex<Seen>>>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let json = |status: StatusCode, body: &str| {
        (
            status,
            [("content-type", "application/x-amz-json-1.0")],
            body.to_owned(),
        )
            .into_response()
    };
    if !target.ends_with("TransactWriteItems") {
        return json(
            StatusCode::BAD_REQUEST,
            r#"{"__type":"ValidationException"}"#,
        );
    }
    let request: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let token = request["ClientRequestToken"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut seen = seen.lock().unwrap();
    let first = seen.tokens.is_empty();
    let repeat = !token.is_empty() && seen.tokens.contains(&token);
    seen.tokens.push(token);
    if first {
        // Applied, but the answer never reaches the caller.
        json(
            StatusCode::INTERNAL_SERVER_ERROR,
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"the answer was lost"}"#,
        )
    } else if repeat {
        json(StatusCode::OK, "{}")
    } else {
        json(
            StatusCode::BAD_REQUEST,
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","message":"Transaction cancelled","CancellationReasons":[{"Code":"ConditionalCheckFailed"},{"Code":"None"}]}"#,
        )
    }
}

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
async fn a_retried_transaction_whose_first_answer_was_lost_is_a_success() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let app = axum::Router::new()
        .fallback(axum::routing::post(dynamodb))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let store = DynamoSessionStore::new(
        dynamo_client(&endpoint),
        DynamoConfig::new("tb-retry-sessions", "tb-retry-events"),
    );
    let (session, event) = new_session("retried-write", 1_000);
    store
        .insert_new(&session, std::slice::from_ref(&event))
        .await
        .expect("the retry of a write that succeeded is a success, not a conflict");

    let tokens = seen.lock().unwrap().tokens.clone();
    assert_eq!(tokens.len(), 2, "one attempt and one retry: {tokens:?}");
    assert!(
        !tokens[0].is_empty(),
        "the write carries a ClientRequestToken"
    );
    assert_eq!(tokens[0], tokens[1], "and the retry carries the same one");
}
