//! `DynamoSlackStatusStore`: which Slack message shows each thread's status, on one DynamoDB
//! table (partition key `thread_id`), for the Slack status fan-out target in Lambda.
//!
//! `put` is one conditional `PutItem` on `attribute_not_exists(thread_id) OR seq <= :seq`: a
//! later event replaces the record, an older one arriving late (a re-drive) never does, and an
//! equal one may (a status message re-posted under a new ts shows the same event).
//!
//! Each row carries a TTL `expires_at` of the store's retention after its last write, the same
//! retention as the session records (`DynamoConfig::retention`). A row past it is treated as
//! absent (read as none, replaced by any seq) before DynamoDB deletes it: the thread's record
//! has gone by then too, and its next life counts seqs from 1 again.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use serde::{Deserialize, Serialize};
use serde_dynamo::aws_sdk_dynamodb_1::{from_item, to_item};

use super::config::DEFAULT_RETENTION;
use super::errors::{condition_held, unavailable};
use super::schema::attr;
use super::ttl::{expiry_in, now_secs};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use threadbox_core::domain::ThreadId;
use threadbox_core::ports::StoreError;
use threadbox_core::ports::{SlackStatusStore, StatusMessage};

/// One row: the thread and its status message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StatusItem {
    thread_id: ThreadId,
    channel: String,
    ts: String,
    seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<i64>,
}

/// The Slack status store on DynamoDB. Cheap to clone; build one per process.
#[derive(Clone, Debug)]
pub struct DynamoSlackStatusStore {
    client: Client,
    table: Arc<str>,
    retention: Option<Duration>,
}

impl DynamoSlackStatusStore {
    /// The variable naming the table in a deployed function's environment.
    pub const TABLE_VAR: &'static str = "THREADBOX_SLACK_STATUS_TABLE";

    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: Arc::from(table.into()),
            retention: Some(DEFAULT_RETENTION),
        }
    }

    /// Keep rows `retention` after their last write (`None`: forever); see the module docs.
    pub fn with_retention(mut self, retention: Option<Duration>) -> Self {
        self.retention = retention;
        self
    }

    /// A store whose client is built from the SDK configuration (see `adapters::aws::load_config`).
    pub fn from_sdk_config(sdk: &aws_config::SdkConfig, table: impl Into<String>) -> Self {
        Self::new(Client::new(sdk), table)
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn table(&self) -> &str {
        &self.table
    }
}

#[async_trait]
impl SlackStatusStore for DynamoSlackStatusStore {
    async fn get(&self, thread_id: &ThreadId) -> Result<Option<StatusMessage>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(self.table.as_ref())
            .key(attr::THREAD_ID, AttributeValue::S(thread_id.to_string()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable(&format!("GetItem {}", self.table), e))?;
        let Some(item) = output.item else {
            return Ok(None);
        };
        let row: StatusItem = from_item(item).map_err(|e| {
            StoreError::Corrupt(format!(
                "Slack status item of {thread_id} in {} is malformed: {e}",
                self.table
            ))
        })?;
        if row.expires_at.is_some_and(|at| at < now_secs()) {
            return Ok(None);
        }
        Ok(Some(StatusMessage {
            channel: row.channel,
            ts: row.ts,
            seq: row.seq,
        }))
    }

    async fn put(&self, thread_id: &ThreadId, message: &StatusMessage) -> Result<bool, StoreError> {
        let item = to_item(StatusItem {
            thread_id: thread_id.clone(),
            channel: message.channel.clone(),
            ts: message.ts.clone(),
            seq: message.seq,
            expires_at: self.retention.map(expiry_in),
        })
        .map_err(|e| StoreError::Unavailable(format!("encoding {thread_id}'s status: {e}")))?;
        let result = self
            .client
            .put_item()
            .table_name(self.table.as_ref())
            .set_item(Some(item))
            .condition_expression(
                "attribute_not_exists(#thread) OR #seq <= :seq OR #expires < :now",
            )
            .expression_attribute_names("#thread", attr::THREAD_ID)
            .expression_attribute_names("#seq", attr::SEQ)
            .expression_attribute_names("#expires", attr::EXPIRES_AT)
            .expression_attribute_values(":seq", AttributeValue::N(message.seq.to_string()))
            .expression_attribute_values(":now", AttributeValue::N(now_secs().to_string()))
            .send()
            .await;
        condition_held(
            &format!("PutItem {}", self.table),
            result,
            PutItemError::is_conditional_check_failed_exception,
        )
    }
}
