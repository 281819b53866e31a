//! The subscription store port: live-events connections, the threads each one watches, and how
//! far each subscription has been delivered.
//!
//! A subscription's `last_seq` is the sequence number of the last event of that thread the
//! connection was sent (or, right after subscribing, the `after_seq` it asked to start after).
//! It only moves by compare-and-set from `seq - 1` to `seq` ([`SubscriptionStore::advance`]), so
//! whoever moves it is the one caller that sends that event: a connection gets each event once,
//! in order and without gaps, however replay, live fan-out and redelivery interleave.
//!
//! # DynamoDB key schema (for the adapter that comes with the Lambda functions)
//! One table, two item kinds under one partition per connection:
//! - connection item: `pk = "conn#{connection_id}"`, `sk = "conn"`, with `scope`,
//!   `expires_at` (ms) and `ttl` (epoch seconds, the token's expiry plus a margin, so connections
//!   whose `$disconnect` never ran age out);
//! - subscription item: `pk = "conn#{connection_id}"`, `sk = "sub#{thread_id}"`, with
//!   `connection_id`, `thread_id`, `last_seq`, `expires_at` and the same `ttl`.
//!
//! A sparse GSI `by_thread` (partition `thread_id`, sort `connection_id`, projection ALL) serves
//! [`SubscriptionStore::subscribers`]; only subscription items carry `thread_id`. `subscribe` is a
//! transaction (condition check that the connection item exists, put the subscription) so a
//! subscribe racing `$disconnect` cannot leave an orphan. `advance` is an `UpdateItem` with
//! `last_seq = :from`; `advance_many` issues those updates one item at a time
//! (each atomic on its own, which is all the contract asks). `remove_connection` queries the
//! partition and batch-deletes it. GSI reads are eventually consistent: a subscription made a
//! moment before an event may miss that event's live send; it then gets it, in order, with the
//! thread's next event (the fan-out fills gaps from the event log) or on its next subscribe.

use async_trait::async_trait;

use super::StoreError;
use crate::domain::{Millis, ThreadId, ThreadScope};

/// One live-events connection, as recorded when it connected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    /// Opaque and unique: API Gateway's `connectionId`, or a uuid in `threadbox dev`.
    pub connection_id: String,
    /// What the connection's token allows it to watch.
    pub scope: ThreadScope,
    /// When the token expires: no subscription or delivery after this.
    pub expires_at: Millis,
    pub connected_at: Millis,
}

/// One connection watching one thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    pub connection_id: String,
    pub thread_id: ThreadId,
    /// The last event seq this connection has been sent for this thread.
    pub last_seq: u64,
    /// The connection's token expiry, copied here so fan-out needs one query per event.
    pub expires_at: Millis,
}

#[async_trait]
pub trait SubscriptionStore: Send + Sync {
    /// Record a new connection (replacing a record with the same id, which only a reused id
    /// from a dead process could leave behind).
    async fn add_connection(&self, connection: &Connection) -> Result<(), StoreError>;

    async fn connection(&self, connection_id: &str) -> Result<Option<Connection>, StoreError>;

    /// Forget the connection and all its subscriptions. Removing an unknown one is not an error.
    async fn remove_connection(&self, connection_id: &str) -> Result<(), StoreError>;

    /// Watch `thread_id` starting after `after_seq`, replacing an existing subscription's
    /// position (a client that re-subscribes asks to be replayed from there). False, and nothing
    /// written, when the connection is not recorded (it disconnected meanwhile).
    async fn subscribe(
        &self,
        connection_id: &str,
        thread_id: &ThreadId,
        after_seq: u64,
    ) -> Result<bool, StoreError>;

    /// Stop watching; true when there was a subscription to remove.
    async fn unsubscribe(
        &self,
        connection_id: &str,
        thread_id: &ThreadId,
    ) -> Result<bool, StoreError>;

    async fn subscription(
        &self,
        connection_id: &str,
        thread_id: &ThreadId,
    ) -> Result<Option<Subscription>, StoreError>;

    /// Every subscription of one connection, ordered by thread id.
    async fn subscriptions_of(&self, connection_id: &str) -> Result<Vec<Subscription>, StoreError>;

    /// Every subscription to `thread_id`, ordered by connection id (an index, never a scan).
    async fn subscribers(&self, thread_id: &ThreadId) -> Result<Vec<Subscription>, StoreError>;

    /// Move one subscription's `last_seq` from `from` to `to`, only if it is still `from`.
    /// True when this call moved it: the caller now owns sending event `to`.
    async fn advance(
        &self,
        connection_id: &str,
        thread_id: &ThreadId,
        from: u64,
        to: u64,
    ) -> Result<bool, StoreError>;

    /// [`advance`](Self::advance) for each of `connection_ids`' subscriptions to `thread_id`
    /// that is at `from`; returns the connection ids this call moved, sorted. (The caller names
    /// the connections because it must hold their send locks before it claims.)
    async fn advance_many(
        &self,
        thread_id: &ThreadId,
        connection_ids: &[String],
        from: u64,
        to: u64,
    ) -> Result<Vec<String>, StoreError>;
}
