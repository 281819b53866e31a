//! `DynamoWindowCounter`: the window counter port on the dedupe table (partition key
//! `dedupe_key`, TTL attribute `expires_at`), which every function that needs a counter can
//! already reach. An increment is one `UpdateItem` with `ADD`, which DynamoDB applies atomically
//! and answers with the new value, so concurrent increments each see their own number.
//!
//! Counter keys start with `count:`, which no dedupe key does, so the two never meet.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use aws_sdk_dynamodb::Client;

use super::errors::unavailable;
use super::schema::{attr, DEDUPE_KEY};
use crate::domain::Millis;
use crate::ports::{StoreError, WindowCounter};

const COUNT: &str = "count";

/// Window counters on the dedupe table. Cheap to clone; build one per process.
#[derive(Clone, Debug)]
pub struct DynamoWindowCounter {
    client: Client,
    table: Arc<str>,
}

impl DynamoWindowCounter {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: Arc::from(table.into()),
        }
    }

    /// Counters whose client is built from the SDK configuration.
    pub fn from_sdk_config(sdk: &aws_config::SdkConfig, table: impl Into<String>) -> Self {
        Self::new(Client::new(sdk), table)
    }
}

#[async_trait]
impl WindowCounter for DynamoWindowCounter {
    async fn increment(
        &self,
        key: &str,
        expires_at: Millis,
        _now: Millis,
    ) -> Result<u64, StoreError> {
        // TTL is epoch seconds; round up so DynamoDB never drops a count before its window ends
        // (and it drops expired items lazily, which costs nothing here: the key names a window).
        let expires_secs = expires_at.0.div_euclid(1000) + i64::from(expires_at.0 % 1000 != 0);
        let output = self
            .client
            .update_item()
            .table_name(self.table.as_ref())
            .key(DEDUPE_KEY, AttributeValue::S(format!("count:{key}")))
            .update_expression("ADD #count :one SET #expires = :expires")
            .expression_attribute_names("#count", COUNT)
            .expression_attribute_names("#expires", attr::EXPIRES_AT)
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .expression_attribute_values(":expires", AttributeValue::N(expires_secs.to_string()))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(|e| unavailable(&format!("UpdateItem {}", self.table), e))?;
        let count = output
            .attributes()
            .and_then(|a| a.get(COUNT))
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| {
                StoreError::Unavailable(format!(
                    "UpdateItem {} answered without the new count",
                    self.table
                ))
            })?;
        Ok(count)
    }
}
