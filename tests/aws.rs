//! Fresh AWS backends for the integration tests: uniquely named DynamoDB tables and SQS queues on
//! whatever endpoint the SDK's standard settings name (moto's server under `scripts/test.sh`).
//!
//! Nothing here knows it is talking to moto: the endpoint comes from `AWS_ENDPOINT_URL`. When it
//! is unset the tests skip with a message, unless `THREADBOX_REQUIRE_AWS=1` (CI) makes that a
//! failure. Tables and queues are not deleted afterwards: each test's names are unique, and the
//! test server lives only as long as the test run.

use std::sync::Arc;

use threadbox_aws::dynamo::{create_tables, DynamoConfig, DynamoSessionStore};
use threadbox_aws::sdk::{load_config, ClientSettings, SdkConfig};
use threadbox_aws::sqs::{create_fifo_queue, SqsQueue, SqsQueueUrls};

/// Whether the AWS tests can run here. Panics with a clear message when CI requires them but no
/// endpoint is configured; prints why a test is skipped otherwise.
pub fn aws_configured(test: &str) -> bool {
    if std::env::var_os("AWS_ENDPOINT_URL").is_some_and(|v| !v.is_empty()) {
        return true;
    }
    if std::env::var("THREADBOX_REQUIRE_AWS").as_deref() == Ok("1") {
        panic!(
            "THREADBOX_REQUIRE_AWS=1 but AWS_ENDPOINT_URL is unset: start moto's server \
             (scripts/test.sh does) and export AWS_ENDPOINT_URL, AWS_REGION and credentials"
        );
    }
    eprintln!(
        "skipped {test}: AWS_ENDPOINT_URL is unset (scripts/test.sh starts moto's server and sets \
         it; set THREADBOX_REQUIRE_AWS=1 to make this a failure)"
    );
    false
}

/// A name no other test uses, valid for DynamoDB tables and SQS queues.
pub fn unique_name(kind: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("tb-{kind}-{}", &id[..12])
}

/// The SDK configuration from the environment, with the adapters' timeouts and retries.
pub async fn sdk_config() -> SdkConfig {
    load_config(&ClientSettings::default()).await
}

/// A store on two fresh tables.
pub async fn fresh_store(sdk: &SdkConfig) -> DynamoSessionStore {
    let name = unique_name("store");
    let config = DynamoConfig::new(format!("{name}-sessions"), format!("{name}-events"));
    let store = DynamoSessionStore::from_sdk_config(sdk, config);
    create_tables(store.client(), store.config())
        .await
        .expect("create the tables");
    store
}

/// A fresh FIFO queue (and its dead-letter queue) that dead-letters after `max_receives`.
pub async fn fresh_queue_urls(sdk: &SdkConfig, max_receives: u32) -> SqsQueueUrls {
    let client = aws_sdk_sqs::Client::new(sdk);
    create_fifo_queue(&client, &unique_name("queue"), max_receives)
        .await
        .expect("create the queues")
}

pub async fn fresh_queue(sdk: &SdkConfig, max_receives: u32) -> SqsQueue {
    SqsQueue::from_sdk_config(sdk, fresh_queue_urls(sdk, max_receives).await)
}

/// A fresh DynamoDB store and SQS lifecycle queue.
pub struct AwsBackend {
    pub sdk: SdkConfig,
    pub store: Arc<DynamoSessionStore>,
    pub events: Arc<SqsQueue>,
    /// The janitor's transition queue.
    pub transitions: Arc<SqsQueue>,
}

impl AwsBackend {
    /// `None` (the test should return) when no endpoint is configured; see [`aws_configured`].
    pub async fn new(test: &str) -> Option<Self> {
        if !aws_configured(test) {
            return None;
        }
        let sdk = sdk_config().await;
        let store = fresh_store(&sdk).await;
        let events = fresh_queue(&sdk, 5).await;
        let transitions = fresh_queue(&sdk, 5).await;
        Some(Self {
            sdk,
            store: Arc::new(store),
            events: Arc::new(events),
            transitions: Arc::new(transitions),
        })
    }
}
