//! `DynamoWindowCounter`: the window counter port on the dedupe table (partition key
//! `dedupe_key`, TTL attribute `expires_at`), which every function that needs a counter can
//! already reach. An increment is one `UpdateItem` with `ADD`, which DynamoDB applies atomically
//! and answers with the new value, so concurrent increments each see their own number. A capped
//! take, a give-back and a raise are the same `UpdateItem` with a condition on the count, so
//! DynamoDB decides each against the count as it is at that moment.
//!
//! Counter keys start with `count:`, which no dedupe key does, so the two never meet.

use async_trait::async_trait;
use std::collections::HashMap;

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};

use super::schema::{attr, DEDUPE_KEY};
use super::table::{table_store, Table};
use threadbox_core::domain::Millis;
use threadbox_core::ports::{StoreError, StoreKind, WindowCounter};

const COUNT: &str = "count";

/// Window counters on the dedupe table. Cheap to clone; build one per process.
#[derive(Clone, Debug)]
pub struct DynamoWindowCounter {
    table: Table,
}

table_store!(DynamoWindowCounter, StoreKind::WindowCounter);

impl DynamoWindowCounter {
    /// One conditional update of the count under `key` (its expiry set with it). `Ok(Ok(new))`
    /// with the attributes `returned` asks for, `Ok(Err(old))` with the count as it was when the
    /// condition failed (`None`: no count yet).
    async fn update(
        &self,
        key: &str,
        update: &str,
        condition: Option<&str>,
        values: &[(&str, i64)],
        expires_at: Millis,
        returned: ReturnValue,
    ) -> Result<Result<Option<u64>, Option<u64>>, StoreError> {
        let counter = [(
            DEDUPE_KEY.to_owned(),
            AttributeValue::S(format!("count:{key}")),
        )];
        let mut request = self
            .table
            .update(counter.into())
            .update_expression(update)
            .expression_attribute_names("#count", COUNT)
            .expression_attribute_names("#expires", attr::EXPIRES_AT)
            .expression_attribute_values(
                ":expires",
                AttributeValue::N(expires_secs(expires_at).to_string()),
            )
            .return_values(returned)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if let Some(condition) = condition {
            request = request.condition_expression(condition);
        }
        for (name, value) in values {
            request =
                request.expression_attribute_values(*name, AttributeValue::N(value.to_string()));
        }
        match request.send().await {
            Ok(output) => Ok(Ok(output.attributes().and_then(count_in))),
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                    Ok(Err(failed.item().and_then(count_in)))
                }
                _ => Err(self.table.unavailable("UpdateItem", e)),
            },
        }
    }

    fn missing_count(&self) -> StoreError {
        self.table.failed(format!(
            "UpdateItem {} answered without the new count",
            self.table.name()
        ))
    }
}

/// TTL is epoch seconds; round up so DynamoDB never drops a count before its window ends (and
/// it drops expired items lazily, which costs nothing here: the key names a window).
fn expires_secs(expires_at: Millis) -> i64 {
    expires_at.0.div_euclid(1000) + i64::from(expires_at.0 % 1000 != 0)
}

fn count_in(attributes: &HashMap<String, AttributeValue>) -> Option<u64> {
    attributes
        .get(COUNT)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse::<u64>().ok())
}

#[async_trait]
impl WindowCounter for DynamoWindowCounter {
    async fn increment(
        &self,
        key: &str,
        expires_at: Millis,
        _now: Millis,
    ) -> Result<u64, StoreError> {
        // Unconditional, so it is always written and answers the new count.
        let written = self
            .update(
                key,
                "ADD #count :one SET #expires = :expires",
                None,
                &[(":one", 1)],
                expires_at,
                ReturnValue::UpdatedNew,
            )
            .await?;
        written.ok().flatten().ok_or_else(|| self.missing_count())
    }

    async fn add(
        &self,
        key: &str,
        amount: i64,
        expires_at: Millis,
        _now: Millis,
    ) -> Result<u64, StoreError> {
        // A give-back applies only while the count covers it.
        let condition = (amount < 0).then_some("#count >= :need");
        let mut values = vec![(":amount", amount)];
        if amount < 0 {
            values.push((":need", amount.saturating_neg()));
        }
        match self
            .update(
                key,
                "ADD #count :amount SET #expires = :expires",
                condition,
                &values,
                expires_at,
                // The whole item: an add of zero changes nothing, so "updated" would name nothing.
                ReturnValue::AllNew,
            )
            .await?
        {
            Ok(count) => count.ok_or_else(|| self.missing_count()),
            Err(old) => Ok(old.unwrap_or(0)),
        }
    }

    async fn take_below(
        &self,
        key: &str,
        cap: u64,
        expires_at: Millis,
        _now: Millis,
    ) -> Result<Option<u64>, StoreError> {
        if cap == 0 {
            return Ok(None);
        }
        match self
            .update(
                key,
                "ADD #count :one SET #expires = :expires",
                Some("attribute_not_exists(#count) OR #count < :cap"),
                &[
                    (":one", 1),
                    (":cap", i64::try_from(cap).unwrap_or(i64::MAX)),
                ],
                expires_at,
                ReturnValue::UpdatedNew,
            )
            .await?
        {
            Ok(count) => Ok(Some(count.ok_or_else(|| self.missing_count())?)),
            Err(_) => Ok(None),
        }
    }

    async fn raise(
        &self,
        key: &str,
        to: u64,
        expires_at: Millis,
        _now: Millis,
    ) -> Result<u64, StoreError> {
        if to == 0 {
            return Ok(0);
        }
        let to_n = i64::try_from(to).unwrap_or(i64::MAX);
        match self
            .update(
                key,
                "SET #count = :to, #expires = :expires",
                Some("attribute_not_exists(#count) OR #count < :to"),
                &[(":to", to_n)],
                expires_at,
                ReturnValue::UpdatedOld,
            )
            .await?
        {
            // The old count (none on a new key) is what the raise started from.
            Ok(before) => Ok(to.saturating_sub(before.unwrap_or(0))),
            Err(_) => Ok(0),
        }
    }
}
