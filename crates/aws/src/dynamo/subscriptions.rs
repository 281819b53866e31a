//! `DynamoSubscriptionStore`: the subscription store port on one DynamoDB table, for the `ws`
//! and `fanout` Lambda functions. The key schema is the one `ports::subscription_store`
//! documents: a partition per connection holding its connection item (`sk = "conn"`) and one
//! item per subscription (`sk = "sub#{thread_id}"`), and the sparse GSI `by_thread`.
//!
//! | call | requests |
//! |---|---|
//! | `add_connection` | 1 `Query` (consistent) + `BatchWriteItem`s of a reused id's leftovers + 1 `PutItem` |
//! | `connection`, `subscription` | 1 `GetItem` (strongly consistent) |
//! | `remove_connection` | 1 `Query` (consistent) per page + 1 `BatchWriteItem` per 25 items |
//! | `subscribe` | 1 `GetItem` + 1 `TransactWriteItems` (connection exists, put the subscription) |
//! | `unsubscribe` | 1 `DeleteItem` returning the old item |
//! | `subscriptions_of` | 1 `Query` (consistent) per page |
//! | `subscribers` | 1 `Query` of `by_thread` per page (eventually consistent) |
//! | `advance` | 1 conditional `UpdateItem` (`last_seq = :from`) |
//! | `advance_many` | 1 conditional `UpdateItem` per named connection, 16 at a time |
//!
//! Compare-and-set failures are read from the SDK's typed `ConditionalCheckFailedException` and a
//! transaction's cancellation reasons, never from message text.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, DeleteRequest, Put, ReturnValue, TransactWriteItem,
    WriteRequest,
};
use futures::future::join_all;
use serde::{Deserialize, Serialize};
use serde_dynamo::aws_sdk_dynamodb_1::to_item;

use super::errors::{cancelled, Cancelled};
use super::lost_answers::request_token;
use super::table::{table_store, Item, Table};
use threadbox_core::domain::{Millis, ThreadId, ThreadScope};
use threadbox_core::ports::{Connection, StoreError, StoreKind, Subscription, SubscriptionStore};

/// Subscriptions table: every subscription of a thread, by connection id (sparse: only
/// subscription items carry `thread_id`).
pub const SUBSCRIBERS_INDEX: &str = "by_thread";

/// Attribute names, shared by the items, the expressions and the table helper.
pub(super) mod attr {
    pub const PK: &str = "pk";
    pub const SK: &str = "sk";
    pub const CONNECTION_ID: &str = "connection_id";
    pub const THREAD_ID: &str = "thread_id";
    pub const LAST_SEQ: &str = "last_seq";
    pub const TTL: &str = "ttl";
}

const CONNECTION_SK: &str = "conn";
const SUBSCRIPTION_SK_PREFIX: &str = "sub#";
/// How long after its token's expiry TTL may remove a record (TTL also lags by up to days; the
/// store never relies on it, it only keeps abandoned records from piling up).
const TTL_MARGIN_SECS: i64 = 3600;
/// Updates `advance_many` has in flight at once.
const ADVANCE_CONCURRENCY: usize = 16;
/// `BatchWriteItem`'s limit.
const BATCH_WRITE_MAX: usize = 25;
/// Attempts for a transaction that lost to another one writing the same items.
const SUBSCRIBE_ATTEMPTS: usize = 4;

fn pk(connection_id: &str) -> String {
    format!("conn#{connection_id}")
}

fn subscription_sk(thread_id: &ThreadId) -> String {
    format!("{SUBSCRIPTION_SK_PREFIX}{thread_id}")
}

fn ttl(expires_at: Millis) -> i64 {
    expires_at.0.div_euclid(1000) + TTL_MARGIN_SECS
}

#[derive(Debug, Serialize, Deserialize)]
struct ConnectionItem {
    pk: String,
    sk: String,
    connection_id: String,
    /// The token's scope as JSON (`"*"` or an array of thread ids), as the SQLite store keeps it.
    scope: String,
    expires_at: i64,
    connected_at: i64,
    ttl: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct SubscriptionItem {
    pk: String,
    sk: String,
    connection_id: String,
    thread_id: ThreadId,
    last_seq: u64,
    expires_at: i64,
    ttl: i64,
}

impl From<SubscriptionItem> for Subscription {
    fn from(item: SubscriptionItem) -> Self {
        Subscription {
            connection_id: item.connection_id,
            thread_id: item.thread_id,
            last_seq: item.last_seq,
            expires_at: Millis(item.expires_at),
        }
    }
}

/// The subscription store on DynamoDB. Cheap to clone; build one per process.
#[derive(Clone, Debug)]
pub struct DynamoSubscriptionStore {
    table: Table,
}

table_store!(DynamoSubscriptionStore, StoreKind::Subscriptions);

impl DynamoSubscriptionStore {
    /// The variable naming the table in a deployed function's environment.
    pub const TABLE_VAR: &'static str = "THREADBOX_SUBSCRIPTIONS_TABLE";

    fn key(connection_id: &str, sk: String) -> Item {
        Item::from([
            (attr::PK.to_owned(), AttributeValue::S(pk(connection_id))),
            (attr::SK.to_owned(), AttributeValue::S(sk)),
        ])
    }

    async fn get(&self, connection_id: &str, sk: String) -> Result<Option<Item>, StoreError> {
        self.table.get(Self::key(connection_id, sk)).await
    }

    /// Every item of one connection's partition (whose sort key starts with `prefix`, when
    /// given), in sort-key order (strongly consistent).
    async fn partition(
        &self,
        connection_id: &str,
        prefix: Option<&str>,
    ) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let mut query = self
                .table
                .client()
                .query()
                .table_name(self.table.name())
                .expression_attribute_names("#pk", attr::PK)
                .expression_attribute_values(":pk", AttributeValue::S(pk(connection_id)));
            query = match prefix {
                // DynamoDB refuses an empty prefix: the whole partition is the plain condition.
                None => query.key_condition_expression("#pk = :pk"),
                Some(prefix) => query
                    .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                    .expression_attribute_names("#sk", attr::SK)
                    .expression_attribute_values(":prefix", AttributeValue::S(prefix.to_owned())),
            };
            let output = query
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| self.table.unavailable("Query", e))?;
            items.extend(output.items.unwrap_or_default());
            start = output.last_evaluated_key;
            if start.is_none() {
                return Ok(items);
            }
        }
    }

    /// Delete these keys, 25 to a request, retrying what DynamoDB leaves unprocessed.
    async fn delete_keys(&self, keys: Vec<Item>) -> Result<(), StoreError> {
        for chunk in keys.chunks(BATCH_WRITE_MAX) {
            let mut requests = chunk
                .iter()
                .map(|key| {
                    DeleteRequest::builder()
                        .set_key(Some(key.clone()))
                        .build()
                        .map(|d| WriteRequest::builder().delete_request(d).build())
                        .map_err(|e| self.table.failed(format!("building a delete: {e}")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let mut backoff = Duration::from_millis(25);
            for attempt in 0.. {
                let output = self
                    .table
                    .client()
                    .batch_write_item()
                    .request_items(self.table.name(), requests)
                    .send()
                    .await
                    .map_err(|e| self.table.unavailable("BatchWriteItem", e))?;
                requests = output
                    .unprocessed_items
                    .and_then(|mut left| left.remove(self.table.name()))
                    .unwrap_or_default();
                if requests.is_empty() {
                    break;
                }
                if attempt >= 5 {
                    return Err(self.table.failed(format!(
                        "BatchWriteItem {}: {} deletes still unprocessed",
                        self.table.name(),
                        requests.len()
                    )));
                }
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
        }
        Ok(())
    }

    /// `advance` for one connection: its id when this call moved it.
    async fn advance_one(
        &self,
        connection_id: &str,
        thread_id: &ThreadId,
        from: u64,
        to: u64,
    ) -> Result<Option<String>, StoreError> {
        let won = self.advance(connection_id, thread_id, from, to).await?;
        Ok(won.then(|| connection_id.to_owned()))
    }

    fn subscription_from(&self, item: Item) -> Result<Subscription, StoreError> {
        self.table
            .decode::<SubscriptionItem>("a subscription item", item)
            .map(Subscription::from)
    }
}

/// The key attributes of an item (for deleting it).
fn key_of(item: &Item) -> Item {
    item.iter()
        .filter(|(name, _)| name.as_str() == attr::PK || name.as_str() == attr::SK)
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect()
}

#[async_trait]
impl SubscriptionStore for DynamoSubscriptionStore {
    async fn add_connection(&self, connection: &Connection) -> Result<(), StoreError> {
        let scope = serde_json::to_string(&connection.scope).map_err(|e| {
            StoreError::corrupt(
                StoreKind::Subscriptions,
                format!("cannot encode scope: {e}"),
            )
        })?;
        // A reused id starts clean: whatever its partition holds goes first.
        self.remove_connection(&connection.connection_id).await?;
        let item = to_item(ConnectionItem {
            pk: pk(&connection.connection_id),
            sk: CONNECTION_SK.to_owned(),
            connection_id: connection.connection_id.clone(),
            scope,
            expires_at: connection.expires_at.0,
            connected_at: connection.connected_at.0,
            ttl: ttl(connection.expires_at),
        })
        .map_err(|e| self.table.failed(format!("encoding a connection: {e}")))?;
        self.table
            .client()
            .put_item()
            .table_name(self.table.name())
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| self.table.unavailable("PutItem", e))?;
        Ok(())
    }

    async fn connection(&self, connection_id: &str) -> Result<Option<Connection>, StoreError> {
        let Some(item) = self.get(connection_id, CONNECTION_SK.to_owned()).await? else {
            return Ok(None);
        };
        let row: ConnectionItem = self.table.decode("a connection item", item)?;
        let scope: ThreadScope = serde_json::from_str(&row.scope)
            .map_err(|e| self.table.corrupt("a connection's scope", e))?;
        Ok(Some(Connection {
            connection_id: row.connection_id,
            scope,
            expires_at: Millis(row.expires_at),
            connected_at: Millis(row.connected_at),
        }))
    }

    async fn remove_connection(&self, connection_id: &str) -> Result<(), StoreError> {
        let items = self.partition(connection_id, None).await?;
        self.delete_keys(items.iter().map(key_of).collect()).await
    }

    async fn subscribe(
        &self,
        connection_id: &str,
        thread_id: &ThreadId,
        after_seq: u64,
    ) -> Result<bool, StoreError> {
        for _ in 0..SUBSCRIBE_ATTEMPTS {
            let Some(connection) = self.connection(connection_id).await? else {
                return Ok(false);
            };
            let item = to_item(SubscriptionItem {
                pk: pk(connection_id),
                sk: subscription_sk(thread_id),
                connection_id: connection_id.to_owned(),
                thread_id: thread_id.clone(),
                last_seq: after_seq,
                expires_at: connection.expires_at.0,
                ttl: ttl(connection.expires_at),
            })
            .map_err(|e| self.table.failed(format!("encoding a subscription: {e}")))?;
            let build = |e: aws_sdk_dynamodb::error::BuildError| {
                self.table.failed(format!("building a transaction: {e}"))
            };
            let check = ConditionCheck::builder()
                .table_name(self.table.name())
                .set_key(Some(Self::key(connection_id, CONNECTION_SK.to_owned())))
                .condition_expression("attribute_exists(#pk)")
                .expression_attribute_names("#pk", attr::PK)
                .build()
                .map_err(build)?;
            let put = Put::builder()
                .table_name(self.table.name())
                .set_item(Some(item))
                .build()
                .map_err(build)?;
            let result = self
                .table
                .client()
                .transact_write_items()
                .transact_items(TransactWriteItem::builder().condition_check(check).build())
                .transact_items(TransactWriteItem::builder().put(put).build())
                // A resend of this transaction (the SDK's, after a lost answer) is answered
                // as the first was; the put is idempotent besides.
                .client_request_token(request_token())
                .send()
                .await;
            match result {
                Ok(_) => return Ok(true),
                // The connection went away (read again: false), or another transaction was
                // writing the same items (read again: try again).
                Err(e) => match cancelled(StoreKind::Subscriptions, e)? {
                    Cancelled::Conflict => continue,
                    Cancelled::Other(codes) => {
                        return Err(self.table.failed(format!(
                            "TransactWriteItems {} cancelled: {codes}",
                            self.table.name()
                        )))
                    }
                },
            }
        }
        Err(self.table.failed(format!(
            "subscribing {connection_id} to {thread_id}: still conflicting after \
             {SUBSCRIBE_ATTEMPTS} attempts"
        )))
    }

    async fn unsubscribe(
        &self,
        connection_id: &str,
        thread_id: &ThreadId,
    ) -> Result<bool, StoreError> {
        let output = self
            .table
            .client()
            .delete_item()
            .table_name(self.table.name())
            .set_key(Some(Self::key(connection_id, subscription_sk(thread_id))))
            .return_values(ReturnValue::AllOld)
            .send()
            .await
            .map_err(|e| self.table.unavailable("DeleteItem", e))?;
        Ok(output.attributes.is_some_and(|a| !a.is_empty()))
    }

    async fn subscription(
        &self,
        connection_id: &str,
        thread_id: &ThreadId,
    ) -> Result<Option<Subscription>, StoreError> {
        self.get(connection_id, subscription_sk(thread_id))
            .await?
            .map(|item| self.subscription_from(item))
            .transpose()
    }

    async fn subscriptions_of(&self, connection_id: &str) -> Result<Vec<Subscription>, StoreError> {
        let mut subs = self
            .partition(connection_id, Some(SUBSCRIPTION_SK_PREFIX))
            .await?
            .into_iter()
            .map(|item| self.subscription_from(item))
            .collect::<Result<Vec<_>, _>>()?;
        subs.sort_by(|a, b| a.thread_id.cmp(&b.thread_id));
        Ok(subs)
    }

    async fn subscribers(&self, thread_id: &ThreadId) -> Result<Vec<Subscription>, StoreError> {
        let mut subs = Vec::new();
        let mut start = None;
        loop {
            let output = self
                .table
                .client()
                .query()
                .table_name(self.table.name())
                .index_name(SUBSCRIBERS_INDEX)
                .key_condition_expression("#thread = :thread")
                .expression_attribute_names("#thread", attr::THREAD_ID)
                .expression_attribute_values(":thread", AttributeValue::S(thread_id.to_string()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| {
                    self.table
                        .unavailable(&format!("Query {SUBSCRIBERS_INDEX}"), e)
                })?;
            for item in output.items.unwrap_or_default() {
                subs.push(self.subscription_from(item)?);
            }
            start = output.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        subs.sort_by(|a, b| a.connection_id.cmp(&b.connection_id));
        Ok(subs)
    }

    async fn advance(
        &self,
        connection_id: &str,
        thread_id: &ThreadId,
        from: u64,
        to: u64,
    ) -> Result<bool, StoreError> {
        let result = self
            .table
            .update(Self::key(connection_id, subscription_sk(thread_id)))
            .update_expression("SET #seq = :to")
            .condition_expression("attribute_exists(#pk) AND #seq = :from")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#seq", attr::LAST_SEQ)
            .expression_attribute_values(":from", AttributeValue::N(from.to_string()))
            .expression_attribute_values(":to", AttributeValue::N(to.to_string()))
            .send()
            .await;
        self.table.condition_held("UpdateItem", result)
    }

    async fn advance_many(
        &self,
        thread_id: &ThreadId,
        connection_ids: &[String],
        from: u64,
        to: u64,
    ) -> Result<Vec<String>, StoreError> {
        let mut moved = Vec::new();
        for chunk in connection_ids.chunks(ADVANCE_CONCURRENCY) {
            let results = join_all(
                chunk
                    .iter()
                    .map(|id| self.advance_one(id, thread_id, from, to)),
            )
            .await;
            for result in results {
                moved.extend(result?);
            }
        }
        moved.sort();
        moved.dedup();
        Ok(moved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_documented_schema() {
        let thread = ThreadId::parse("slack:T1:C1:1.2").unwrap();
        assert_eq!(pk("abc="), "conn#abc=");
        assert_eq!(subscription_sk(&thread), "sub#slack:T1:C1:1.2");
        assert_eq!(ttl(Millis(1_700_000_000_999)), 1_700_000_000 + 3600);
    }

    #[test]
    fn items_carry_thread_id_only_when_they_are_subscriptions() {
        let conn: Item = to_item(ConnectionItem {
            pk: pk("c1"),
            sk: CONNECTION_SK.into(),
            connection_id: "c1".into(),
            scope: "\"*\"".into(),
            expires_at: 5,
            connected_at: 1,
            ttl: 3600,
        })
        .unwrap();
        assert!(
            !conn.contains_key(attr::THREAD_ID),
            "the index stays sparse"
        );
        let sub: Item = to_item(SubscriptionItem {
            pk: pk("c1"),
            sk: subscription_sk(&ThreadId::parse("t-1").unwrap()),
            connection_id: "c1".into(),
            thread_id: ThreadId::parse("t-1").unwrap(),
            last_seq: 3,
            expires_at: 5,
            ttl: 3600,
        })
        .unwrap();
        assert_eq!(sub[attr::THREAD_ID], AttributeValue::S("t-1".into()));
        assert_eq!(sub[attr::LAST_SEQ], AttributeValue::N("3".into()));
        assert_eq!(key_of(&sub).len(), 2);
    }
}
