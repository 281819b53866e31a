//! `POST /slack/events` through the axum router: signatures (valid, wrong secret, stale,
//! tampered, missing headers), url_verification, retries and duplicates never enqueued twice,
//! what is not work, and the route answering 503 when Slack is not configured.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use threadbox_core::domain::Millis;
use threadbox_core::ports::{DedupeStore, DurableQueue};
use threadbox_slack::{router, SigningSecret, SlackIngress, WorkItem, EVENTS_PATH};
use threadbox_sqlite::{QueueConfig, SqliteDedupe, SqliteQueue};
use threadbox_testing::ManualClock;
use tower::ServiceExt;

const SECRET: &str = "test-signing-secret";
const NOW: i64 = 1_767_225_600;

struct Setup {
    app: axum::Router,
    queue: Arc<SqliteQueue>,
    _dir: tempfile::TempDir,
}

fn setup_with(secret: Option<&str>) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.db");
    let queue = Arc::new(SqliteQueue::open(&db, "work", QueueConfig::default()).unwrap());
    let dedupe: Arc<dyn DedupeStore> = Arc::new(SqliteDedupe::open(&db).unwrap());
    let clock = Arc::new(ManualClock::new(Millis::from_secs(NOW)));
    let ingress = SlackIngress::new(
        secret.and_then(SigningSecret::new),
        dedupe,
        queue.clone(),
        clock,
    );
    Setup {
        app: router(ingress),
        queue,
        _dir: dir,
    }
}

fn setup() -> Setup {
    setup_with(Some(SECRET))
}

fn signed(body: &str, secret: &str, ts: i64) -> Request<Body> {
    let signature = SigningSecret::new(secret)
        .unwrap()
        .sign(ts, body.as_bytes());
    Request::post(EVENTS_PATH)
        .header("content-type", "application/json")
        .header("x-slack-request-timestamp", ts.to_string())
        .header("x-slack-signature", signature)
        .body(Body::from(body.to_owned()))
        .unwrap()
}

async fn send(app: &axum::Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 1 << 20).await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, body)
}

fn mention(event_id: &str, text: &str) -> String {
    json!({
        "type": "event_callback",
        "team_id": "T1",
        "api_app_id": "A1",
        "event_id": event_id,
        "event_time": NOW,
        "event": {
            "type": "app_mention", "user": "U1", "channel": "C1",
            "text": format!("<@UBOT> {text}"), "ts": "1767225600.000100",
            "event_ts": "1767225600.000100"
        }
    })
    .to_string()
}

async fn queued(queue: &SqliteQueue) -> Vec<WorkItem> {
    queue
        .receive(10, Duration::from_secs(30))
        .await
        .unwrap()
        .into_iter()
        .map(|m| serde_json::from_str(&m.body).unwrap())
        .collect()
}

#[tokio::test]
async fn a_signed_mention_is_queued_for_its_thread() {
    let s = setup();
    let (status, body) = send(&s.app, signed(&mention("Ev1", "status"), SECRET, NOW)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["outcome"], "accepted");
    assert_eq!(body["thread_id"], "slack:T1:C1:1767225600.000100");
    let items = queued(&s.queue).await;
    assert_eq!(items.len(), 1);
    let WorkItem::Message(message) = &items[0] else {
        panic!("{items:?}")
    };
    assert_eq!(message.text, "status");
    assert_eq!(message.event_id, "Ev1");
    assert!(message.addressed);
}

#[tokio::test]
async fn url_verification_echoes_the_challenge() {
    let s = setup();
    let body = json!({"type": "url_verification", "token": "x", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}).to_string();
    let (status, answer) = send(&s.app, signed(&body, SECRET, NOW)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        answer["challenge"],
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );
    // Unsigned, it is refused like anything else.
    let unsigned = Request::post(EVENTS_PATH).body(Body::from(body)).unwrap();
    assert_eq!(send(&s.app, unsigned).await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn bad_signatures_are_refused_and_nothing_is_queued() {
    let s = setup();
    let body = mention("Ev1", "```rm -rf /tmp/x```");
    let good = signed(&body, SECRET, NOW);
    let signature = good.headers()["x-slack-signature"].clone();

    let wrong_secret = signed(&body, "not-the-secret", NOW);
    let stale = signed(&body, SECRET, NOW - 301);
    let future = signed(&body, SECRET, NOW + 301);
    let tampered = Request::post(EVENTS_PATH)
        .header("x-slack-request-timestamp", NOW.to_string())
        .header("x-slack-signature", signature.clone())
        .body(Body::from(body.replace("rm -rf", "rm -fr")))
        .unwrap();
    let no_signature = Request::post(EVENTS_PATH)
        .header("x-slack-request-timestamp", NOW.to_string())
        .body(Body::from(body.clone()))
        .unwrap();
    let no_timestamp = Request::post(EVENTS_PATH)
        .header("x-slack-signature", signature)
        .body(Body::from(body.clone()))
        .unwrap();
    let cases = [
        ("wrong secret", wrong_secret, "does not match"),
        ("stale", stale, "301 s away"),
        ("from the future", future, "-301 s away"),
        ("tampered body", tampered, "does not match"),
        ("no signature", no_signature, "missing X-Slack-Signature"),
        (
            "no timestamp",
            no_timestamp,
            "missing X-Slack-Request-Timestamp",
        ),
    ];
    for (name, request, needle) in cases {
        let (status, body) = send(&s.app, request).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{name}: {body}");
        assert_eq!(body["error"]["code"], "unauthorized", "{name}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{name}: {message}");
    }
    assert!(queued(&s.queue).await.is_empty());
}

#[tokio::test]
async fn a_retried_event_is_queued_once() {
    let s = setup();
    let body = mention("Ev7", "```echo once```");
    let (_, first) = send(&s.app, signed(&body, SECRET, NOW)).await;
    assert_eq!(first["outcome"], "accepted");
    for retry in 1..=3 {
        let mut request = signed(&body, SECRET, NOW + retry * 60);
        request
            .headers_mut()
            .insert("x-slack-retry-num", retry.to_string().parse().unwrap());
        request
            .headers_mut()
            .insert("x-slack-retry-reason", "http_timeout".parse().unwrap());
        let (status, answer) = send(&s.app, request).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(answer["outcome"], "duplicate", "retry {retry}");
    }
    assert_eq!(queued(&s.queue).await.len(), 1);
}

#[tokio::test]
async fn what_is_not_work_is_acknowledged_and_dropped() {
    let s = setup();
    let bot = json!({
        "type": "event_callback", "team_id": "T1", "event_id": "Ev2", "event_time": NOW,
        "event": {"type": "message", "channel_type": "channel", "bot_id": "B1", "user": "UBOT",
                  "channel": "C1", "ts": "1767225601.000001", "thread_ts": "1767225600.000100",
                  "text": "exit 0"}
    })
    .to_string();
    let edit = json!({
        "type": "event_callback", "team_id": "T1", "event_id": "Ev3", "event_time": NOW,
        "event": {"type": "message", "subtype": "message_changed", "channel": "C1",
                  "channel_type": "channel", "ts": "1767225602.000001"}
    })
    .to_string();
    for body in [bot, edit] {
        let (status, answer) = send(&s.app, signed(&body, SECRET, NOW)).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["outcome"], "ignored", "{answer}");
    }
    assert!(queued(&s.queue).await.is_empty());

    let (status, answer) = send(&s.app, signed("{not json", SECRET, NOW)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_json");
}

#[tokio::test]
async fn without_a_signing_secret_the_route_says_it_is_not_configured() {
    let s = setup_with(None);
    let (status, body) = send(&s.app, signed(&mention("Ev1", "status"), SECRET, NOW)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"]["code"], "slack_not_configured");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("SLACK_SIGNING_SECRET"));
}
