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

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};
use serde_dynamo::aws_sdk_dynamodb_1::to_item;

use super::schema::attr;
use super::table::{table_store, Table};
use super::ttl::now_secs;
use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{SlackStatusStore, StatusMessage, StoreError, StoreKind};

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
    table: Table,
}

table_store!(DynamoSlackStatusStore, StoreKind::SlackStatus, retention);

impl DynamoSlackStatusStore {
    /// The variable naming the table in a deployed function's environment.
    pub const TABLE_VAR: &'static str = "THREADBOX_SLACK_STATUS_TABLE";
}

#[async_trait]
impl SlackStatusStore for DynamoSlackStatusStore {
    async fn get(&self, thread_id: &ThreadId) -> Result<Option<StatusMessage>, StoreError> {
        let key = HashMap::from([(
            attr::THREAD_ID.to_owned(),
            AttributeValue::S(thread_id.to_string()),
        )]);
        let Some(item) = self.table.get(key).await? else {
            return Ok(None);
        };
        let row: StatusItem = self
            .table
            .decode(&format!("Slack status item of {thread_id}"), item)?;
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
            expires_at: self.table.expiry(),
        })
        .map_err(|e| {
            self.table
                .failed(format!("encoding {thread_id}'s status: {e}"))
        })?;
        self.table
            .put_if(
                item,
                "attribute_not_exists(#thread) OR #seq <= :seq OR #expires < :now",
                &[
                    ("#thread", attr::THREAD_ID),
                    ("#seq", attr::SEQ),
                    ("#expires", attr::EXPIRES_AT),
                ],
                &[
                    (":seq", AttributeValue::N(message.seq.to_string())),
                    (":now", AttributeValue::N(now_secs().to_string())),
                ],
            )
            .await
    }
}
