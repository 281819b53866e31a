//! `DynamoDedupe`: the dedupe port on one DynamoDB table (partition key `dedupe_key`).
//!
//! A claim is a single conditional `PutItem` on `attribute_not_exists(dedupe_key) OR
//! expires_at <= :now`: the first writer of a key wins, and so does the first writer after the
//! record expired. The condition has to check expiry itself because DynamoDB's TTL deletes expired
//! items lazily (typically within a few days), so an expired record may still be there.
//!
//! `expires_at` is epoch seconds (TTL's unit), rounded up so TTL never removes a record early;
//! "now" in conditions and reads is rounded down. A record therefore lives between its TTL and one
//! second more, which is nothing against the days a dedupe window lasts.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use serde::{Deserialize, Serialize};
use serde_dynamo::aws_sdk_dynamodb_1::to_item;

use super::lost_answers::{put_landed, stamped};
use super::schema::{attr, DEDUPE_KEY};
use super::table::{table_store, Item, Table};
use super::ttl::{expiry_in, now_secs};
use threadbox_core::ports::{DedupeStore, StoreError, StoreKind};

/// One row: a key and when it stops counting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct DedupeItem {
    dedupe_key: String,
    /// Epoch seconds; the table's TTL attribute.
    expires_at: i64,
}

/// The dedupe store on DynamoDB. Cheap to clone; build one per process.
#[derive(Clone, Debug)]
pub struct DynamoDedupe {
    table: Table,
}

table_store!(DynamoDedupe, StoreKind::Dedupe);

impl DynamoDedupe {
    /// The variable naming the table in a deployed function's environment.
    pub const TABLE_VAR: &'static str = "THREADBOX_DEDUPE_TABLE";

    fn key(key: &str) -> Item {
        Item::from([(DEDUPE_KEY.to_owned(), AttributeValue::S(key.to_owned()))])
    }
}

#[async_trait]
impl DedupeStore for DynamoDedupe {
    async fn claim(&self, key: &str, ttl: Duration) -> Result<bool, StoreError> {
        let item = to_item(DedupeItem {
            dedupe_key: key.to_owned(),
            expires_at: expiry_in(ttl),
        })
        .map_err(|e| {
            self.table
                .failed(format!("encoding dedupe key {key:?}: {e}"))
        })?;
        // Stamped, so a resend that finds the claim knows whether it is its own: two claims of
        // one key in the same second would otherwise be the same item.
        let item = stamped(item);
        let result = self
            .table
            .client()
            .put_item()
            .table_name(self.table.name())
            .set_item(Some(item.clone()))
            .condition_expression("attribute_not_exists(#key) OR #expires <= :now")
            .expression_attribute_names("#key", DEDUPE_KEY)
            .expression_attribute_names("#expires", attr::EXPIRES_AT)
            .expression_attribute_values(":now", AttributeValue::N(now_secs().to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        put_landed(
            StoreKind::Dedupe,
            &format!("PutItem {}", self.table.name()),
            &item,
            result,
        )
    }

    async fn contains(&self, key: &str) -> Result<bool, StoreError> {
        let Some(item) = self.table.get(Self::key(key)).await? else {
            return Ok(false);
        };
        let record: DedupeItem = self.table.decode(&format!("dedupe item {key:?}"), item)?;
        Ok(record.expires_at > now_secs())
    }

    async fn release(&self, key: &str) -> Result<(), StoreError> {
        self.table.delete(Self::key(key)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_rounds_up_and_now_rounds_down() {
        let before = now_secs();
        // A claim for a moment still counts until the next whole second at least.
        assert!(expiry_in(Duration::from_millis(1)) > before);
        assert!(expiry_in(Duration::from_secs(60)) >= before + 60);
    }

    #[test]
    fn items_map_to_the_documented_attributes() {
        let item = to_item(DedupeItem {
            dedupe_key: "log:e1".into(),
            expires_at: 42,
        })
        .unwrap();
        assert_eq!(item[DEDUPE_KEY], AttributeValue::S("log:e1".into()));
        assert_eq!(item[attr::EXPIRES_AT], AttributeValue::N("42".into()));
    }
}
