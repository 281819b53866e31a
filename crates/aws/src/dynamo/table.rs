//! The table kit every single-table DynamoDB store is built on (dedupe, window counters,
//! subscriptions, Slack status, Slack user threads): the handle (client, table name, and which
//! store it serves), the requests they all make the same way (a consistent read, a conditional
//! put, a delete), and their errors, each naming the store and the table.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use serde::de::DeserializeOwned;
use serde_dynamo::aws_sdk_dynamodb_1::from_item;

use super::config::DEFAULT_RETENTION;
use super::errors::{condition_held, unavailable};
use super::ttl::expiry_in;
use threadbox_core::ports::{StoreError, StoreKind};

pub(super) type Item = HashMap<String, AttributeValue>;

/// One DynamoDB table as one store uses it. Cheap to clone.
#[derive(Clone, Debug)]
pub(super) struct Table {
    client: Client,
    name: Arc<str>,
    store: StoreKind,
    /// How long a row lives after its last write (its TTL), for the stores that set one.
    retention: Option<Duration>,
}

impl Table {
    pub(super) fn new(client: Client, name: impl Into<String>, store: StoreKind) -> Self {
        Self {
            client,
            name: Arc::from(name.into()),
            store,
            retention: Some(DEFAULT_RETENTION),
        }
    }

    pub(super) fn client(&self) -> &Client {
        &self.client
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn set_retention(&mut self, retention: Option<Duration>) {
        self.retention = retention;
    }

    /// The TTL of a row written now (epoch seconds), `None` when rows are kept forever.
    pub(super) fn expiry(&self) -> Option<i64> {
        self.retention.map(expiry_in)
    }

    /// `operation` on this table failed: the store is unavailable.
    pub(super) fn unavailable<E, R>(&self, operation: &str, err: SdkError<E, R>) -> StoreError
    where
        E: std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        unavailable(self.store, &format!("{operation} {}", self.name), err)
    }

    /// The store could not do what was asked for a reason of its own (`detail`).
    pub(super) fn failed(&self, detail: impl Into<String>) -> StoreError {
        StoreError::unavailable(self.store, detail)
    }

    /// `what`, read from this table, does not decode.
    pub(super) fn corrupt(&self, what: &str, e: impl std::fmt::Display) -> StoreError {
        StoreError::corrupt(
            self.store,
            format!("{what} in {} is malformed: {e}", self.name),
        )
    }

    /// A row decoded, or [`Table::corrupt`] naming `what`.
    pub(super) fn decode<T: DeserializeOwned>(
        &self,
        what: &str,
        item: Item,
    ) -> Result<T, StoreError> {
        from_item(item).map_err(|e| self.corrupt(what, e))
    }

    /// A conditional write's outcome (see `errors::condition_held`) for `operation` on this
    /// table: `Ok(false)` when its condition failed.
    pub(super) fn condition_held<T, E: ConditionFailed, R: std::fmt::Debug>(
        &self,
        operation: &str,
        result: Result<T, SdkError<E, R>>,
    ) -> Result<bool, StoreError> {
        let operation = format!("{operation} {}", self.name);
        condition_held(self.store, &operation, result, E::condition_failed)
    }

    /// The item under `key`, read strongly consistent.
    pub(super) async fn get(&self, key: Item) -> Result<Option<Item>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(self.name())
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| self.unavailable("GetItem", e))?;
        Ok(output.item)
    }

    /// Put `item` on `condition` (its `#names` and `:values`): `Ok(false)` when the condition
    /// failed.
    pub(super) async fn put_if(
        &self,
        item: Item,
        condition: &str,
        names: &[(&str, &str)],
        values: &[(&str, AttributeValue)],
    ) -> Result<bool, StoreError> {
        let mut request = self
            .client
            .put_item()
            .table_name(self.name())
            .set_item(Some(item))
            .condition_expression(condition);
        for (name, attribute) in names {
            request = request.expression_attribute_names(*name, *attribute);
        }
        for (name, value) in values {
            request = request.expression_attribute_values(*name, value.clone());
        }
        self.condition_held("PutItem", request.send().await)
    }

    /// An `UpdateItem` of the item under `key`, for the caller to finish and send.
    pub(super) fn update(&self, key: Item) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(self.name())
            .set_key(Some(key))
    }

    /// Delete the item under `key`, if there is one.
    pub(super) async fn delete(&self, key: Item) -> Result<(), StoreError> {
        self.client
            .delete_item()
            .table_name(self.name())
            .set_key(Some(key))
            .send()
            .await
            .map_err(|e| self.unavailable("DeleteItem", e))?;
        Ok(())
    }
}

/// A write operation's error that can say its condition failed.
pub(super) trait ConditionFailed:
    std::error::Error + ProvideErrorMetadata + 'static
{
    fn condition_failed(&self) -> bool;
}

impl ConditionFailed for PutItemError {
    fn condition_failed(&self) -> bool {
        self.is_conditional_check_failed_exception()
    }
}

impl ConditionFailed for UpdateItemError {
    fn condition_failed(&self) -> bool {
        self.is_conditional_check_failed_exception()
    }
}

/// The public constructors and accessors of a store kept in one [`Table`] (its only field,
/// `table`), written here once: `new`, `from_sdk_config`, `client`, `table`, and with
/// `retention`, `with_retention`.
macro_rules! table_store {
    ($store:ident, $kind:expr) => {
        impl $store {
            pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
                Self {
                    table: super::table::Table::new(client, table, $kind),
                }
            }

            /// A store whose client is built from the SDK configuration (see `sdk::load_config`).
            pub fn from_sdk_config(sdk: &aws_config::SdkConfig, table: impl Into<String>) -> Self {
                Self::new(aws_sdk_dynamodb::Client::new(sdk), table)
            }

            pub fn client(&self) -> &aws_sdk_dynamodb::Client {
                self.table.client()
            }

            pub fn table(&self) -> &str {
                self.table.name()
            }
        }
    };
    ($store:ident, $kind:expr, retention) => {
        table_store!($store, $kind);

        impl $store {
            /// Keep each row `retention` after its last write (`None`: forever; the default is
            /// the session records' retention, `DynamoConfig::retention`). Stores sharing a
            /// table share its TTL, so give them the same.
            pub fn with_retention(mut self, retention: Option<std::time::Duration>) -> Self {
                self.table.set_retention(retention);
                self
            }
        }
    };
}
pub(super) use table_store;
