//! The tables' key schema, index names and attribute names, and helpers that create them.
//!
//! Production tables come from the SAM template, which must mirror [`create_tables`]: the module
//! documentation of [`super`] spells the schema out for that purpose. The helper exists for
//! tests and local loops against a DynamoDB-compatible server.

use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, TableStatus, TimeToLiveSpecification, TimeToLiveStatus,
};
use aws_sdk_dynamodb::Client;

use super::config::DynamoConfig;
use super::errors::unavailable;
use threadbox_core::ports::{StoreError, StoreKind};

/// Attribute names, shared by the item structs and the expressions.
pub(super) mod attr {
    pub const THREAD_ID: &str = "thread_id";
    pub const KIND: &str = "kind";
    pub const VERSION: &str = "version";
    pub const DUE_SHARD: &str = "due_shard";
    pub const DUE_AT: &str = "due_at";
    pub const SEQ: &str = "seq";
    pub const UNSENT_SHARD: &str = "unsent_shard";
    pub const UNSENT_AT: &str = "unsent_at";
    pub const EXPIRES_AT: &str = "expires_at";
}

/// Sessions table: due work, by shard and next-action time (sparse).
pub const DUE_INDEX: &str = "due";
/// Sessions table: every session by thread id, for the operator listing (keys only).
pub const LIST_INDEX: &str = "by_thread";
/// Events table: events not yet handed to the lifecycle queue, by shard and time (sparse).
pub const UNSENT_INDEX: &str = "unsent";

/// Dedupe table: its partition key (a delivery's `{target}:{event_id}`, a Slack event id...).
pub(super) const DEDUPE_KEY: &str = "dedupe_key";

/// The value of `kind` on every session item: the listing index's single partition.
pub(super) const SESSION_KIND: &str = "session";
/// Partition-key prefix of the event-id guard items in the events table.
pub(super) const EVENT_ID_GUARD_PREFIX: &str = "#event_id#";

/// Create both tables with their indexes (on-demand billing) and turn on TTL (`expires_at`) for
/// both: events, and the records of destroyed threads; wait until they are active. A table that already exists is left as it is, so this is safe to run
/// on every start of a local loop.
pub async fn create_tables(client: &Client, config: &DynamoConfig) -> Result<(), StoreError> {
    create(
        client,
        StoreKind::Session,
        &config.sessions_table,
        &[(attr::THREAD_ID, KeyType::Hash)],
        &[
            index(
                StoreKind::Session,
                DUE_INDEX,
                (attr::DUE_SHARD, attr::DUE_AT),
                ProjectionType::All,
            )?,
            index(
                StoreKind::Session,
                LIST_INDEX,
                (attr::KIND, attr::THREAD_ID),
                ProjectionType::KeysOnly,
            )?,
        ],
        &[
            (attr::THREAD_ID, ScalarAttributeType::S),
            (attr::DUE_SHARD, ScalarAttributeType::N),
            (attr::DUE_AT, ScalarAttributeType::N),
            (attr::KIND, ScalarAttributeType::S),
        ],
    )
    .await?;
    create(
        client,
        StoreKind::Session,
        &config.events_table,
        &[
            (attr::THREAD_ID, KeyType::Hash),
            (attr::SEQ, KeyType::Range),
        ],
        &[index(
            StoreKind::Session,
            UNSENT_INDEX,
            (attr::UNSENT_SHARD, attr::UNSENT_AT),
            ProjectionType::All,
        )?],
        &[
            (attr::THREAD_ID, ScalarAttributeType::S),
            (attr::SEQ, ScalarAttributeType::N),
            (attr::UNSENT_SHARD, ScalarAttributeType::N),
            (attr::UNSENT_AT, ScalarAttributeType::N),
        ],
    )
    .await?;
    wait_active(client, StoreKind::Session, &config.sessions_table).await?;
    wait_active(client, StoreKind::Session, &config.events_table).await?;
    enable_ttl(client, StoreKind::Session, &config.sessions_table).await?;
    enable_ttl(client, StoreKind::Session, &config.events_table).await
}

/// Create the dedupe table (partition key `dedupe_key`, on-demand billing) with TTL on
/// `expires_at`, and wait until it is active. Like [`create_tables`], safe to repeat.
pub async fn create_dedupe_table(client: &Client, table: &str) -> Result<(), StoreError> {
    create(
        client,
        StoreKind::Dedupe,
        table,
        &[(DEDUPE_KEY, KeyType::Hash)],
        &[],
        &[(DEDUPE_KEY, ScalarAttributeType::S)],
    )
    .await?;
    wait_active(client, StoreKind::Dedupe, table).await?;
    enable_ttl(client, StoreKind::Dedupe, table).await
}

/// Create the Slack status table (partition key `thread_id`, on-demand billing) with TTL on
/// `expires_at`, and wait until it is active. Safe to repeat.
pub async fn create_slack_status_table(client: &Client, table: &str) -> Result<(), StoreError> {
    create(
        client,
        StoreKind::SlackStatus,
        table,
        &[(attr::THREAD_ID, KeyType::Hash)],
        &[],
        &[(attr::THREAD_ID, ScalarAttributeType::S)],
    )
    .await?;
    wait_active(client, StoreKind::SlackStatus, table).await?;
    enable_ttl(client, StoreKind::SlackStatus, table).await
}

/// Create the live-events subscriptions table (partition `pk`, sort `sk`, the sparse
/// [`SUBSCRIBERS_INDEX`] on `thread_id`/`connection_id`, on-demand billing) with TTL on `ttl`,
/// and wait until it is active. Safe to repeat. The schema is spelled out in
/// `ports::subscription_store`.
pub async fn create_subscriptions_table(client: &Client, table: &str) -> Result<(), StoreError> {
    use super::subscriptions::{attr as sub, SUBSCRIBERS_INDEX};
    create(
        client,
        StoreKind::Subscriptions,
        table,
        &[(sub::PK, KeyType::Hash), (sub::SK, KeyType::Range)],
        &[index(
            StoreKind::Subscriptions,
            SUBSCRIBERS_INDEX,
            (sub::THREAD_ID, sub::CONNECTION_ID),
            ProjectionType::All,
        )?],
        &[
            (sub::PK, ScalarAttributeType::S),
            (sub::SK, ScalarAttributeType::S),
            (sub::THREAD_ID, ScalarAttributeType::S),
            (sub::CONNECTION_ID, ScalarAttributeType::S),
        ],
    )
    .await?;
    wait_active(client, StoreKind::Subscriptions, table).await?;
    enable_ttl_on(client, StoreKind::Subscriptions, table, sub::TTL).await
}

fn build_error(store: StoreKind) -> impl Fn(aws_sdk_dynamodb::error::BuildError) -> StoreError {
    move |e| StoreError::unavailable(store, format!("cannot build a table definition: {e}"))
}

fn index(
    store: StoreKind,
    name: &str,
    (hash, range): (&str, &str),
    projection: ProjectionType,
) -> Result<GlobalSecondaryIndex, StoreError> {
    GlobalSecondaryIndex::builder()
        .index_name(name)
        .key_schema(key(store, hash, KeyType::Hash)?)
        .key_schema(key(store, range, KeyType::Range)?)
        .projection(Projection::builder().projection_type(projection).build())
        .build()
        .map_err(build_error(store))
}

fn key(store: StoreKind, name: &str, key_type: KeyType) -> Result<KeySchemaElement, StoreError> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(key_type)
        .build()
        .map_err(build_error(store))
}

async fn create(
    client: &Client,
    store: StoreKind,
    table: &str,
    keys: &[(&str, KeyType)],
    indexes: &[GlobalSecondaryIndex],
    attributes: &[(&str, ScalarAttributeType)],
) -> Result<(), StoreError> {
    let mut request = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        // DynamoDB refuses an empty index list; a table without indexes sends none.
        .set_global_secondary_indexes((!indexes.is_empty()).then(|| indexes.to_vec()));
    for (name, key_type) in keys {
        request = request.key_schema(key(store, name, key_type.clone())?);
    }
    for (name, attribute_type) in attributes {
        request = request.attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(*name)
                .attribute_type(attribute_type.clone())
                .build()
                .map_err(build_error(store))?,
        );
    }
    match request.send().await {
        Ok(_) => Ok(()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_resource_in_use_exception()) =>
        {
            Ok(())
        }
        Err(e) => Err(unavailable(store, &format!("CreateTable {table}"), e)),
    }
}

async fn wait_active(client: &Client, store: StoreKind, table: &str) -> Result<(), StoreError> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let described = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| unavailable(store, &format!("DescribeTable {table}"), e))?;
        let status = described.table().and_then(|t| t.table_status());
        if status == Some(&TableStatus::Active) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(StoreError::unavailable(
                store,
                format!("table {table} is still {status:?} after two minutes"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// TTL removes old events (garbage), never anything the state machine times by.
async fn enable_ttl(client: &Client, store: StoreKind, table: &str) -> Result<(), StoreError> {
    enable_ttl_on(client, store, table, attr::EXPIRES_AT).await
}

/// Turn on TTL on `attribute` (epoch seconds), unless it is already on.
async fn enable_ttl_on(
    client: &Client,
    store: StoreKind,
    table: &str,
    attribute: &str,
) -> Result<(), StoreError> {
    let described = client
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .map_err(|e| unavailable(store, &format!("DescribeTimeToLive {table}"), e))?;
    let status = described
        .time_to_live_description()
        .and_then(|d| d.time_to_live_status());
    if matches!(
        status,
        Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling)
    ) {
        return Ok(());
    }
    client
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(attribute)
                .build()
                .map_err(build_error(store))?,
        )
        .send()
        .await
        .map_err(|e| unavailable(store, &format!("UpdateTimeToLive {table}"), e))?;
    Ok(())
}
