//! Test support for the Lambda functions (feature `lambda`): the event fixtures in
//! `tests/fixtures/` (the same files `cargo lambda invoke --data-file` sends), an HTTP function's
//! router driven through `lambda_http` exactly as the runtime drives it, and a Threadbox on the
//! embedded backends for handlers that only need the ports.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use base64::Engine;
use lambda_http::request::LambdaRequest;
use lambda_http::tower::ServiceExt;
use lambda_http::{Adapter, Context, LambdaEvent};
use serde_json::{json, Value};
use threadbox_api::http::ApiAuth;
use threadbox_core::usecases::{Config, Threadbox};
use threadbox_testing::lifecycle_conformance::Harness;
use threadbox_testing::{InMemoryProvider, ManualClock};

use crate::SqliteBackend;

/// The API key the HTTP fixtures present (and the local loop's `THREADBOX_API_KEYS`).
pub const FIXTURE_API_KEY: &str = "local-dev-key-0123456789abcdef0123456789";

/// `tests/fixtures/`, from any crate of the workspace.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// A fixture's text.
pub fn fixture(name: &str) -> String {
    let path = fixtures_dir().join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading fixture {}: {e}", path.display()))
}

/// A fixture as JSON, to edit before use.
pub fn fixture_json(name: &str) -> Value {
    serde_json::from_str(&fixture(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// An API Gateway HTTP API event for `method path` with a JSON `body`, from the exec fixture.
pub fn http_event(method: &str, path: &str, query: &str, body: Option<Value>) -> Value {
    let mut event = fixture_json("apigw-http-exec.json");
    event["rawPath"] = json!(path);
    event["rawQueryString"] = json!(query);
    event["routeKey"] = json!("$default");
    event["requestContext"]["routeKey"] = json!("$default");
    event["requestContext"]["http"]["method"] = json!(method);
    event["requestContext"]["http"]["path"] = json!(path);
    let headers = event["headers"].as_object_mut().unwrap();
    headers.remove("content-length");
    match body {
        Some(body) => event["body"] = json!(body.to_string()),
        None => {
            headers.remove("content-type");
            event["body"] = Value::Null;
        }
    }
    event
}

/// Fail, naming `what`, the status and the body, unless `answer` is a success.
#[track_caller]
pub fn assert_ok(answer: &ApiAnswer, what: &str) {
    assert!(
        (200..300).contains(&answer.status),
        "{what}: {} {}",
        answer.status,
        String::from_utf8_lossy(&answer.body)
    );
}

/// The time now, in epoch seconds (what Slack signs).
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A Slack request fixture signed now with `secret` (over the body as Slack
/// sent it: API Gateway may have base64-encoded it).
pub fn signed(mut event: Value, secret: &str) -> Value {
    let engine = base64::engine::general_purpose::STANDARD;
    let text = event["body"].as_str().unwrap().to_owned();
    let body = if event["isBase64Encoded"].as_bool() == Some(true) {
        engine.decode(&text).unwrap()
    } else {
        text.into_bytes()
    };
    let now = now_secs();
    let signature = threadbox_slack::SigningSecret::new(secret)
        .unwrap()
        .sign(now, &body);
    let headers = event["headers"].as_object_mut().unwrap();
    headers.insert("x-slack-request-timestamp".into(), json!(now.to_string()));
    headers.insert("x-slack-signature".into(), json!(signature));
    headers.remove("content-length");
    event
}

/// An invocation context whose deadline is `remaining` from now, as the runtime gives one.
pub fn context_with_deadline(remaining: Duration) -> Context {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let mut context = Context::default();
    context.request_id = "test-request-id".into();
    context.deadline = (now + remaining).as_millis() as u64;
    context
}

/// A scheduled janitor event without a time, so the janitor takes the clock's (every minute
/// reconciles when `ReconcileEveryMinutes` is 1).
pub fn scheduled_now() -> LambdaEvent<aws_lambda_events::eventbridge::EventBridgeEvent> {
    let mut json = fixture_json("eventbridge-scheduled.json");
    json.as_object_mut().unwrap().remove("time");
    let payload: aws_lambda_events::eventbridge::EventBridgeEvent =
        serde_json::from_value(json).unwrap();
    assert!(payload.time.is_none());
    LambdaEvent::new(payload, context_with_deadline(Duration::from_secs(60)))
}

/// An SQS batch event with `payload`'s records (`{"Records": [...]}`), as the event source
/// mapping hands a consumer, `remaining` of the invocation left.
pub fn sqs_batch(payload: Value, remaining: Duration) -> LambdaEvent<SqsEvent> {
    let event: SqsEvent = serde_json::from_value(payload).expect("an SQS event");
    LambdaEvent::new(event, context_with_deadline(remaining))
}

/// The message ids a consumer's answer reports (`batchItemFailures`), in order.
pub fn failed_ids(response: &SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

/// What API Gateway would send back to the client.
#[derive(Debug)]
pub struct ApiAnswer {
    pub status: u16,
    pub headers: serde_json::Map<String, Value>,
    /// The body as the client receives it (decoded when the function base64-encoded it).
    pub body: Vec<u8>,
    pub base64_encoded: bool,
}

impl ApiAnswer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The API's error code, checking the error shape on the way.
    pub fn error_code(&self) -> String {
        let body = self.json();
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "an error without a message: {body}"
        );
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(Value::as_str)
    }
}

/// Send an API Gateway HTTP API (v2) event through `router` the way `lambda_http::run` does:
/// deserialize the event, convert it to a request, call the router, convert the response to
/// the event's answer and serialize it; then read that answer as API Gateway would.
pub async fn invoke_http(router: axum::Router, event: &Value) -> ApiAnswer {
    let request: LambdaRequest = serde_json::from_value(event.clone())
        .unwrap_or_else(|e| panic!("not an API Gateway event: {e}"));
    let response = Adapter::from(router)
        .oneshot(LambdaEvent::new(request, Context::default()))
        .await
        .unwrap_or_else(|e: std::convert::Infallible| match e {});
    let answer = serde_json::to_value(response).expect("the answer serializes");
    let base64_encoded = answer["isBase64Encoded"].as_bool().unwrap_or(false);
    let text = answer["body"].as_str().unwrap_or_default();
    let body = if base64_encoded {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .expect("a base64 body")
    } else {
        text.as_bytes().to_vec()
    };
    ApiAnswer {
        status: answer["statusCode"].as_u64().expect("statusCode") as u16,
        headers: answer["headers"].as_object().cloned().unwrap_or_default(),
        body,
        base64_encoded,
    }
}

/// A Threadbox on a temporary SQLite file, the in-memory provider and a manual clock: what a
/// handler test needs when the handler only uses the ports.
pub struct LocalThreadbox {
    pub tb: Threadbox,
    pub provider: Arc<InMemoryProvider>,
    pub clock: Arc<ManualClock>,
    pub backend: SqliteBackend,
    /// Where a test's own stores go (see [`Self::path`]).
    dir: tempfile::TempDir,
}

impl LocalThreadbox {
    pub fn new() -> Self {
        let backend = SqliteBackend::new();
        let config = Config {
            settle_poll: Duration::from_millis(5),
            ..Config::default()
        };
        // The conformance suites' harness: the same use cases over the embedded backends.
        let Harness {
            tb,
            provider,
            clock,
            ..
        } = Harness::with_config(backend.store.clone(), backend.events.clone(), config);
        Self {
            tb,
            provider,
            clock,
            backend,
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// A file in a temporary directory that lives as long as this: for the test's own SQLite
    /// stores (a dedupe table, a work queue, subscriptions).
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// The keys the fixtures present.
    pub fn auth() -> ApiAuth {
        ApiAuth::new([FIXTURE_API_KEY])
    }
}

impl Default for LocalThreadbox {
    fn default() -> Self {
        Self::new()
    }
}

/// The AWS resources the functions' environment names, created on whatever endpoint the SDK's
/// standard settings point at (moto's server locally). Used by the local-loop test and by the
/// `lambda_local_resources` example the local loop (docs/aws.md#the-local-lambda-loop) runs.
#[cfg(feature = "aws")]
pub mod local {
    use threadbox_aws::dynamo::{
        create_dedupe_table, create_slack_status_table, create_tables, DynamoConfig,
        DynamoSessionStore,
    };
    use threadbox_aws::sdk::SdkConfig;
    use threadbox_aws::sqs::{create_fifo_queue, SqsQueueUrls};

    /// Receives before the queue itself dead-letters a record, as in the template: only the
    /// backstop, since the consumers dead-letter a record after its own failed attempts.
    pub const MAX_RECEIVES: u32 = 50;

    #[derive(Clone, Debug)]
    pub struct LocalResources {
        pub sessions_table: String,
        pub events_table: String,
        pub dedupe_table: String,
        pub slack_status_table: String,
        pub lifecycle: SqsQueueUrls,
        pub work: SqsQueueUrls,
    }

    impl LocalResources {
        /// Create the tables `{prefix}-sessions`, `-events`, `-dedupe` and `-slack-status`, and
        /// the FIFO queues `{prefix}-lifecycle.fifo` and `{prefix}-work.fifo` with their
        /// dead-letter queues. Existing ones are kept, so this is safe to run again.
        pub async fn create(sdk: &SdkConfig, prefix: &str) -> Result<Self, String> {
            let config =
                DynamoConfig::new(format!("{prefix}-sessions"), format!("{prefix}-events"));
            let store = DynamoSessionStore::from_sdk_config(sdk, config.clone());
            create_tables(store.client(), &config)
                .await
                .map_err(|e| e.to_string())?;
            let dedupe_table = format!("{prefix}-dedupe");
            create_dedupe_table(store.client(), &dedupe_table)
                .await
                .map_err(|e| e.to_string())?;
            let slack_status_table = format!("{prefix}-slack-status");
            create_slack_status_table(store.client(), &slack_status_table)
                .await
                .map_err(|e| e.to_string())?;
            let sqs = aws_sdk_sqs::Client::new(sdk);
            let lifecycle = create_fifo_queue(&sqs, &format!("{prefix}-lifecycle"), MAX_RECEIVES)
                .await
                .map_err(|e| e.to_string())?;
            let work = create_fifo_queue(&sqs, &format!("{prefix}-work"), MAX_RECEIVES)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Self {
                sessions_table: config.sessions_table,
                events_table: config.events_table,
                dedupe_table,
                slack_status_table,
                lifecycle,
                work,
            })
        }

        /// The functions' variables for these resources.
        pub fn env(&self) -> Vec<(&'static str, String)> {
            vec![
                ("THREADBOX_SESSIONS_TABLE", self.sessions_table.clone()),
                ("THREADBOX_EVENTS_TABLE", self.events_table.clone()),
                ("THREADBOX_DEDUPE_TABLE", self.dedupe_table.clone()),
                (
                    "THREADBOX_LIFECYCLE_QUEUE_URL",
                    self.lifecycle.queue_url.clone(),
                ),
                (
                    "THREADBOX_LIFECYCLE_DLQ_URL",
                    self.lifecycle.dead_letter_url.clone(),
                ),
                (
                    "THREADBOX_SLACK_STATUS_TABLE",
                    self.slack_status_table.clone(),
                ),
                ("THREADBOX_WORK_QUEUE_URL", self.work.queue_url.clone()),
                ("THREADBOX_WORK_DLQ_URL", self.work.dead_letter_url.clone()),
            ]
        }
    }
}
