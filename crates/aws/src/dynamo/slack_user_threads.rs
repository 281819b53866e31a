//! `DynamoSlackUserThreads`: which threads each Slack user used recently, on the Slack status
//! table (partition key `thread_id`), so the Slack app needs no table of its own.
//!
//! One item per user, partition key `slack-user:{team}:{user}`. The status table only ever
//! holds Slack threads (`slack:...`, the status target skips every other thread), and team and
//! user ids are checked to be upper-case letters and digits, so the key can neither collide with
//! a status row nor be shared by two users. The item holds:
//!
//! | attribute | type | |
//! |---|---|---|
//! | `thread_id` | S | `slack-user:{team}:{user}` |
//! | `threads` | M | thread id -> last used (N, epoch milliseconds) |
//! | `expires_at` | N | TTL, epoch seconds: the retention after the last write, as status rows |
//!
//! An item past its TTL is treated as absent (read as no threads, replaced by the next touch)
//! before DynamoDB deletes it.
//!
//! `touch` is one conditional `UpdateItem` setting the map entry, on the item existing (and live)
//! and the entry being absent or older. When it fails, DynamoDB returns the item as it was
//! (`ReturnValuesOnConditionCheckFailure`), which says why: an entry at least as recent means
//! nothing to do; no item means a conditional `PutItem` creates it. Two first touches racing
//! both get there: the one whose create loses retries its update on the winner's item.
//!
//! The map is bounded at `MAX_USER_THREADS` entries: a touch that leaves more (it sees the new
//! item, `ReturnValues::AllNew`), or a read that finds more, removes the oldest in one
//! `UpdateItem`, conditional on each removed entry not having been touched since it was read.

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use serde::{Deserialize, Serialize};
use serde_dynamo::aws_sdk_dynamodb_1::to_item;

use super::schema::attr;
use super::slack_status::DynamoSlackStatusStore;
use super::table::{table_store, Item, Table};
use super::ttl::now_secs;
use threadbox_core::domain::{Millis, ThreadId};
use threadbox_core::ports::{
    check_slack_user, SlackUserThreads, StoreError, StoreKind, UserThread, MAX_USER_THREADS,
};

/// The prefix of a user item's partition key.
const KEY_PREFIX: &str = "slack-user:";
/// The map of thread id to last-used millis.
const THREADS: &str = "threads";
/// How many times `touch` goes round update-then-create before giving up. Each lost round means
/// another writer changed the item in between, so a handful covers any real contention.
const TOUCH_ATTEMPTS: usize = 6;
/// Most entries one trim removes: its condition names each, and DynamoDB caps an expression
/// at 4 KB. A larger excess (only many concurrent first touches can build one) takes several.
const TRIM_BATCH: usize = 50;

/// One user's item.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct UserItem {
    /// The partition key, `slack-user:{team}:{user}` (not a `ThreadId`).
    thread_id: String,
    #[serde(default)]
    threads: BTreeMap<String, i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<i64>,
}

impl UserItem {
    fn expired(&self) -> bool {
        self.expires_at.is_some_and(|at| at < now_secs())
    }
}

/// The recent-threads store on DynamoDB. Cheap to clone; build one per process.
#[derive(Clone, Debug)]
pub struct DynamoSlackUserThreads {
    table: Table,
}

table_store!(
    DynamoSlackUserThreads,
    StoreKind::SlackUserThreads,
    retention
);

/// What a conditional touch update found.
enum Updated {
    /// Written; the item as it now is.
    Written(UserItem),
    /// The condition failed; the item as it was, if there was one.
    Rejected(Option<UserItem>),
}

impl DynamoSlackUserThreads {
    /// The variable naming the table: the Slack status table, which this store shares.
    pub const TABLE_VAR: &'static str = DynamoSlackStatusStore::TABLE_VAR;

    fn decode(&self, key: &str, item: Item) -> Result<UserItem, StoreError> {
        self.table.decode(&format!("Slack user item {key}"), item)
    }

    /// Set the entry if the item exists, is live, and holds no later use of the thread.
    async fn update_entry(
        &self,
        key: &str,
        thread_id: &ThreadId,
        at: Millis,
    ) -> Result<Updated, StoreError> {
        let expires = self.table.expiry();
        let update = match expires {
            Some(_) => "SET #threads.#tid = :at, #expires = :expires",
            None => "SET #threads.#tid = :at REMOVE #expires",
        };
        let mut request = self
            .table
            .update(user_item_key(key))
            .update_expression(update)
            .condition_expression(
                "attribute_exists(#pk) \
                 AND (attribute_not_exists(#threads.#tid) OR #threads.#tid < :at) \
                 AND (attribute_not_exists(#expires) OR #expires >= :now)",
            )
            .expression_attribute_names("#pk", attr::THREAD_ID)
            .expression_attribute_names("#threads", THREADS)
            .expression_attribute_names("#tid", thread_id.as_str())
            .expression_attribute_names("#expires", attr::EXPIRES_AT)
            .expression_attribute_values(":at", AttributeValue::N(at.0.to_string()))
            .expression_attribute_values(":now", AttributeValue::N(now_secs().to_string()))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if let Some(expires) = expires {
            request = request
                .expression_attribute_values(":expires", AttributeValue::N(expires.to_string()));
        }
        match request.send().await {
            Ok(output) => {
                let item = self.decode(key, output.attributes.unwrap_or_default())?;
                Ok(Updated::Written(item))
            }
            Err(e) => match e.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                    let old = match failed.item() {
                        Some(item) if !item.is_empty() => Some(self.decode(key, item.clone())?),
                        _ => None,
                    };
                    Ok(Updated::Rejected(old))
                }
                _ => Err(self.table.unavailable("UpdateItem", e)),
            },
        }
    }

    /// Create the user's item holding just this entry, unless a live one exists. True when
    /// created; false when another writer created it first.
    async fn create(
        &self,
        key: &str,
        thread_id: &ThreadId,
        at: Millis,
    ) -> Result<bool, StoreError> {
        let item = to_item(UserItem {
            thread_id: key.to_owned(),
            threads: BTreeMap::from([(thread_id.to_string(), at.0)]),
            expires_at: self.table.expiry(),
        })
        .map_err(|e| {
            self.table
                .failed(format!("encoding Slack user item {key}: {e}"))
        })?;
        self.table
            .put_if(
                item,
                "attribute_not_exists(#pk) OR #expires < :now",
                &[("#pk", attr::THREAD_ID), ("#expires", attr::EXPIRES_AT)],
                &[(":now", AttributeValue::N(now_secs().to_string()))],
            )
            .await
    }

    /// Remove the entries beyond the newest `MAX_USER_THREADS` of `item`, each only if it has
    /// not been touched since `item` was read. A failed condition is left alone: whoever
    /// changed the item sees the excess too, and the next touch or read trims it.
    async fn trim(&self, key: &str, item: &UserItem) -> Result<(), StoreError> {
        let mut entries: Vec<(&str, i64)> = item
            .threads
            .iter()
            .map(|(id, at)| (id.as_str(), *at))
            .collect();
        // The port's order (newest first, ties by thread id); the tail past the bound goes.
        entries.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let excess = entries.get(MAX_USER_THREADS..).unwrap_or_default();
        // Oldest first, so a trim cut short by a failed batch has dropped the right ones.
        for batch in excess.rchunks(TRIM_BATCH) {
            let mut request = self
                .table
                .update(user_item_key(key))
                .expression_attribute_names("#pk", attr::THREAD_ID)
                .expression_attribute_names("#threads", THREADS);
            let mut removes = Vec::with_capacity(batch.len());
            let mut conditions = vec!["attribute_exists(#pk)".to_owned()];
            for (i, (id, at)) in batch.iter().enumerate() {
                removes.push(format!("#threads.#r{i}"));
                conditions.push(format!(
                    "(attribute_not_exists(#threads.#r{i}) OR #threads.#r{i} <= :r{i})"
                ));
                request = request
                    .expression_attribute_names(format!("#r{i}"), *id)
                    .expression_attribute_values(
                        format!(":r{i}"),
                        AttributeValue::N(at.to_string()),
                    );
            }
            let result = request
                .update_expression(format!("REMOVE {}", removes.join(", ")))
                .condition_expression(conditions.join(" AND "))
                .send()
                .await;
            match result {
                Ok(_) => {}
                Err(e)
                    if e.as_service_error()
                        .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
                {
                    return Ok(());
                }
                Err(e) => return Err(self.table.unavailable("UpdateItem", e)),
            }
        }
        Ok(())
    }
}

fn user_key(team: &str, user: &str) -> String {
    format!("{KEY_PREFIX}{team}:{user}")
}

/// The key of the item under `user_key`.
fn user_item_key(key: &str) -> Item {
    Item::from([(
        attr::THREAD_ID.to_owned(),
        AttributeValue::S(key.to_owned()),
    )])
}

#[async_trait]
impl SlackUserThreads for DynamoSlackUserThreads {
    async fn touch(
        &self,
        team: &str,
        user: &str,
        thread_id: &ThreadId,
        at: Millis,
    ) -> Result<(), StoreError> {
        check_slack_user(team, user)?;
        let key = user_key(team, user);
        for _ in 0..TOUCH_ATTEMPTS {
            match self.update_entry(&key, thread_id, at).await? {
                Updated::Written(item) => {
                    if item.threads.len() > MAX_USER_THREADS {
                        self.trim(&key, &item).await?;
                    }
                    return Ok(());
                }
                Updated::Rejected(Some(item)) if !item.expired() => {
                    if item
                        .threads
                        .get(thread_id.as_str())
                        .is_some_and(|&last| last >= at.0)
                    {
                        // Already recorded at this time or later: a touch never goes back.
                        return Ok(());
                    }
                    // The item changed between the condition and its read-back (recreated
                    // after expiring, or the entry trimmed): try again on what is there now.
                }
                Updated::Rejected(_) => {
                    if self.create(&key, thread_id, at).await? {
                        return Ok(());
                    }
                    // Another first touch created the item first: update theirs.
                }
            }
        }
        Err(self.table.failed(format!(
            "recording {thread_id} for Slack user {team}/{user} in {}: the item kept changing \
             under {TOUCH_ATTEMPTS} attempts",
            self.table.name()
        )))
    }

    async fn recent(
        &self,
        team: &str,
        user: &str,
        limit: usize,
    ) -> Result<Vec<UserThread>, StoreError> {
        check_slack_user(team, user)?;
        let key = user_key(team, user);
        let Some(raw) = self.table.get(user_item_key(&key)).await? else {
            return Ok(Vec::new());
        };
        let item = self.decode(&key, raw)?;
        if item.expired() {
            return Ok(Vec::new());
        }
        if item.threads.len() > MAX_USER_THREADS {
            // The read has what it needs; a failed trim only postpones the bound to the next
            // touch or read, so it must not fail the listing.
            if let Err(e) = self.trim(&key, &item).await {
                tracing::warn!(key = %key, error = %e, "trimming a Slack user's threads failed");
            }
        }
        let mut threads = item
            .threads
            .iter()
            .map(|(id, &last_used)| {
                let thread_id = ThreadId::parse(id).map_err(|e| {
                    StoreError::corrupt(
                        StoreKind::SlackUserThreads,
                        format!(
                            "Slack user item {key} in {} holds an invalid thread id {id:?}: {e}",
                            self.table.name()
                        ),
                    )
                })?;
                Ok(UserThread {
                    thread_id,
                    last_used: Millis(last_used),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        threads.sort_by(|a, b| {
            b.last_used
                .cmp(&a.last_used)
                .then_with(|| a.thread_id.cmp(&b.thread_id))
        });
        threads.truncate(limit.min(MAX_USER_THREADS));
        Ok(threads)
    }
}
