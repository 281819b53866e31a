//! `DynamoCheckpointStore`: the checkpoint store port on DynamoDB, on the sessions table
//! (partition key `thread_id`), so checkpoints need no table of their own.
//!
//! One item per thread that has checkpoints, partition key `#checkpoints#{thread_id}` (a
//! thread id never contains `#`, so the key can be neither a session's nor a pool member's).
//! The item holds:
//!
//! | attribute | type | |
//! |---|---|---|
//! | `thread_id` | S | `#checkpoints#{thread_id}` |
//! | `version` | N | bumped by every write, which is conditional on it |
//! | `checkpoints` | L | the records (M each, mapped by `serde_dynamo`) |
//! | `expires_at` | N | only once the list is empty: the time it was emptied (epoch seconds) |
//!
//! The item has neither `due_shard` nor `kind`, so it is in none of the table's indexes. Once its
//! last record is removed (a delete, or the thread's destroy) it is written empty with
//! `expires_at` now, and the table's TTL deletes it: a destroyed thread leaves nothing behind, with
//! the `PutItem` every writer may already make (no `DeleteItem` grant). A later add writes the
//! item whole without `expires_at`, and TTL deletes only an item whose `expires_at` is still past
//! when it looks, so a thread that has checkpoints again keeps them. It is bounded: at most `MAX_CHECKPOINTS_PER_THREAD` records of a few hundred bytes each, well
//! under DynamoDB's 400 KB item limit.
//!
//! `add` and `remove` read the item strongly consistent and put it back conditional on the
//! version read (or on its absence), going round again when another writer came between:
//! concurrent adds all land, and retention is applied to what each write really replaces.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::{Deserialize, Serialize};
use serde_dynamo::aws_sdk_dynamodb_1::to_item;

use super::schema::attr;
use super::table::{table_store, Item, Table};
use threadbox_core::domain::{
    newest_first, Checkpoint, CheckpointId, CheckpointRetention, ThreadId,
};
use threadbox_core::ports::{CheckpointStore, StoreError, StoreKind};

const KEY_PREFIX: &str = "#checkpoints#";
/// How many read-then-write rounds a change takes before giving up: each lost round means
/// another writer changed the thread's checkpoints in between.
const ATTEMPTS: usize = 40;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ThreadItem {
    thread_id: String,
    version: u64,
    #[serde(default)]
    checkpoints: Vec<Checkpoint>,
    /// TTL (epoch seconds), only on an emptied item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<i64>,
}

/// The checkpoint records on DynamoDB. Cheap to clone; build one per process.
#[derive(Clone, Debug)]
pub struct DynamoCheckpointStore {
    table: Table,
}

table_store!(DynamoCheckpointStore, StoreKind::Checkpoints);

/// The time now in epoch seconds, as DynamoDB's TTL reads it.
fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn key(thread_id: &ThreadId) -> String {
    format!("{KEY_PREFIX}{thread_id}")
}

fn item_key(key: &str) -> Item {
    Item::from([(
        attr::THREAD_ID.to_owned(),
        AttributeValue::S(key.to_owned()),
    )])
}

impl DynamoCheckpointStore {
    /// The variable naming the table: the sessions table, which this store shares.
    pub const TABLE_VAR: &'static str = "THREADBOX_SESSIONS_TABLE";

    /// The thread's item, as read (strongly consistent), or `None`.
    async fn read(&self, thread_id: &ThreadId) -> Result<Option<ThreadItem>, StoreError> {
        let key = key(thread_id);
        let Some(raw) = self.table.get(item_key(&key)).await? else {
            return Ok(None);
        };
        let item: ThreadItem = self.table.decode(&format!("checkpoint item {key}"), raw)?;
        if let Some(stray) = item.checkpoints.iter().find(|c| &c.thread_id != thread_id) {
            return Err(self.table.corrupt(
                &format!("checkpoint item {key}"),
                format!("it holds {} of thread {}", stray.id, stray.thread_id),
            ));
        }
        Ok(Some(item))
    }

    /// Write `checkpoints` as the thread's, on the item still being as `read` found it. False
    /// when another writer came first.
    async fn write(
        &self,
        thread_id: &ThreadId,
        read: Option<&ThreadItem>,
        checkpoints: Vec<Checkpoint>,
    ) -> Result<bool, StoreError> {
        let key = key(thread_id);
        let version = read.map_or(0, |r| r.version);
        let expires_at = checkpoints.is_empty().then(now_secs);
        let item = to_item(ThreadItem {
            thread_id: key.clone(),
            version: version + 1,
            checkpoints,
            expires_at,
        })
        .map_err(|e| {
            self.table
                .failed(format!("encoding checkpoint item {key}: {e}"))
        })?;
        match read {
            None => {
                self.table
                    .put_if(
                        item,
                        "attribute_not_exists(#pk)",
                        &[("#pk", attr::THREAD_ID)],
                        &[],
                    )
                    .await
            }
            Some(_) => {
                self.table
                    .put_if(
                        item,
                        "#version = :version",
                        &[("#version", attr::VERSION)],
                        &[(":version", AttributeValue::N(version.to_string()))],
                    )
                    .await
            }
        }
    }

    /// Apply `change` to the thread's checkpoints until one write of it holds. `change` answers
    /// the new list and what to return, or `None` when there is nothing to write.
    async fn change<T, F>(&self, thread_id: &ThreadId, change: F) -> Result<T, StoreError>
    where
        F: Fn(Vec<Checkpoint>) -> (Option<Vec<Checkpoint>>, T),
    {
        for attempt in 0..ATTEMPTS {
            let read = self.read(thread_id).await?;
            let current = read
                .as_ref()
                .map(|r| r.checkpoints.clone())
                .unwrap_or_default();
            let (new, answer) = change(current);
            let Some(new) = new else { return Ok(answer) };
            if self.write(thread_id, read.as_ref(), new).await? {
                return Ok(answer);
            }
            // Spread the racing writers out a little, more on each lost round.
            let jitter = uuid::Uuid::new_v4().as_u128() as u64 % (5 + 5 * attempt as u64);
            tokio::time::sleep(Duration::from_millis(jitter)).await;
        }
        Err(self.table.failed(format!(
            "changing the checkpoints of {thread_id} in {}: the item kept changing under \
             {ATTEMPTS} attempts",
            self.table.name()
        )))
    }
}

#[async_trait]
impl CheckpointStore for DynamoCheckpointStore {
    async fn add(
        &self,
        checkpoint: &Checkpoint,
        retention: &CheckpointRetention,
    ) -> Result<Vec<Checkpoint>, StoreError> {
        self.change(&checkpoint.thread_id, |mut all| {
            all.retain(|c| c.id != checkpoint.id);
            all.push(checkpoint.clone());
            let dropped: Vec<Checkpoint> = retention
                .to_drop(&all, Some(&checkpoint.id))
                .into_iter()
                .cloned()
                .collect();
            all.retain(|c| !dropped.iter().any(|d| d.id == c.id));
            (Some(all), dropped)
        })
        .await
    }

    async fn get(
        &self,
        thread_id: &ThreadId,
        id: &CheckpointId,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let item = self.read(thread_id).await?;
        Ok(item.and_then(|i| i.checkpoints.into_iter().find(|c| &c.id == id)))
    }

    async fn list(&self, thread_id: &ThreadId) -> Result<Vec<Checkpoint>, StoreError> {
        let mut all = self
            .read(thread_id)
            .await?
            .map(|i| i.checkpoints)
            .unwrap_or_default();
        newest_first(&mut all);
        Ok(all)
    }

    async fn remove(
        &self,
        thread_id: &ThreadId,
        id: &CheckpointId,
    ) -> Result<Option<Checkpoint>, StoreError> {
        self.change(thread_id, |mut all| {
            let Some(at) = all.iter().position(|c| &c.id == id) else {
                return (None, None);
            };
            let removed = all.remove(at);
            (Some(all), Some(removed))
        })
        .await
    }
}
