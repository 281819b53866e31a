//! The DynamoDB session store (feature `dynamo`): the production backend of the `SessionStore`
//! port, passing the same conformance suites as the SQLite store.
//!
//! # Tables (mirror this exactly in the SAM template)
//!
//! Every table uses on-demand billing (`PAY_PER_REQUEST`). The session and event tables' names come
//! from [`DynamoConfig`]; the dedupe table's from `THREADBOX_DEDUPE_TABLE`, the Slack status
//! table's from `THREADBOX_SLACK_STATUS_TABLE`.
//!
//! **Sessions table**: one item per thread.
//!
//! | | attribute | type |
//! |---|---|---|
//! | partition key | `thread_id` | S |
//!
//! | GSI | partition key | sort key | projection | why |
//! |---|---|---|---|---|
//! | `due` | `due_shard` (N) | `due_at` (N) | `ALL` | the janitor's due work, oldest first, per shard |
//! | `by_thread` | `kind` (S) | `thread_id` (S) | `KEYS_ONLY` | the operator listing in thread-id order |
//!
//! `due_shard` and `due_at` are present only while the session has a next action
//! (`next_action_at`), so the `due` index is sparse: a destroyed thread is not in it at all.
//! `due_shard` is the thread id's FNV-1a hash modulo the shard count (`ThreadId::shard`) and
//! `due_at` is `next_action_at` in epoch milliseconds. `kind` is always `"session"`: the listing
//! index has one partition, which only new threads write to (keys only, so updates never touch
//! it). Every other attribute is the session record, mapped by `serde_dynamo` (see `items.rs`);
//! `version` is the optimistic-concurrency counter every write is conditional on.
//!
//! The sessions table also holds one item per warm pool member (the `WarmPoolStore` port, see
//! `warm_pool.rs`), with partition key `#pool#{member_id}` (a thread id never contains `#`).
//! While the member is `creating` or `ready` its `kind` is `pool#{pool}#{state}`, so each pool's
//! members of each state are a partition of `by_thread` (a new thread's claim queries only the
//! ready one's keys and reads the few it picks); a claimed
//! member has no `kind` and leaves the index. Members never have `due_shard`/`due_at` (so they
//! are never in `due`) nor `expires_at`. Every other attribute is the member record, with
//! `state` (S: `creating`, `ready`, `claimed`) the attribute every member write is conditional
//! on; a claim is one `TransactWriteItems` of the member (on `state = ready`), the thread's
//! session (on its version) and its events. No operation scans the table.
//!
//! **Events table**: the outbox and the history of lifecycle events.
//!
//! | | attribute | type |
//! |---|---|---|
//! | partition key | `thread_id` | S |
//! | sort key | `seq` | N |
//!
//! | GSI | partition key | sort key | projection | why |
//! |---|---|---|---|---|
//! | `unsent` | `unsent_shard` (N) | `unsent_at` (N) | `ALL` | events not yet sent to the lifecycle queue |
//!
//! `unsent_shard`/`unsent_at` (the thread's shard and the event's time in epoch milliseconds)
//! are written with the event and removed by `mark_sent`, so the index holds only the outbox.
//! TTL is enabled on `expires_at` (epoch seconds, default 30 days after the write): it removes old
//! events as garbage and never decides anything the state machine times.
//!
//! The events table also holds one guard item per event id, with partition key
//! `#event_id#{event_id}` and `seq` 0 (a thread id can never contain `#`). The guard is put in
//! the same transaction as its event on `attribute_not_exists`, so an event id is used once:
//! consumers deduplicate on it, and a repeat would make them drop a real event.
//!
//! **Dedupe table** ([`DynamoDedupe`], the `DedupeStore` port): one item per remembered key.
//!
//! | | attribute | type |
//! |---|---|---|
//! | partition key | `dedupe_key` | S |
//!
//! No indexes. TTL is enabled on `expires_at` (epoch seconds). Claims are conditional on the key
//! being absent or expired, so TTL's lag never lets a key count twice or stick past its expiry.
//!
//! **Slack status table** ([`DynamoSlackStatusStore`] and [`DynamoSlackUserThreads`], feature
//! `slack`): which Slack message shows each thread's status, and which threads each person used.
//!
//! | | attribute | type |
//! |---|---|---|
//! | partition key | `thread_id` | S |
//!
//! A thread's row: `channel` (S), `ts` (S), `seq` (N). A person's row, keyed
//! `slack-user:{team}:{user}` (never a thread id, which starts `slack:`): `threads` (M, thread id to
//! last use in milliseconds, at most 100 entries). No indexes. TTL on `expires_at` (epoch
//! seconds), the record retention after each row's last write.
//!
//! **Subscriptions table** ([`DynamoSubscriptionStore`], feature `live`): live-events connections
//! and their subscriptions, keyed as `ports::subscription_store` documents.
//!
//! | | attribute | type |
//! |---|---|---|
//! | partition key | `pk` (`conn#{connection_id}`) | S |
//! | sort key | `sk` (`conn`, or `sub#{thread_id}`) | S |
//!
//! | GSI | partition key | sort key | projection | why |
//! |---|---|---|---|---|
//! | `by_thread` | `thread_id` (S) | `connection_id` (S) | `ALL` | a thread's subscribers, for fan-out (sparse) |
//!
//! TTL is enabled on `ttl` (epoch seconds: the token's expiry plus an hour), so connections whose
//! `$disconnect` never ran age out.
//!
//! The sessions table also holds one item per thread with checkpoints (the `CheckpointStore`
//! port, see `checkpoints.rs`), partition key `#checkpoints#{thread_id}`: its records as a list
//! and a `version` every write is conditional on; in no index; `expires_at` (TTL) once emptied.
//!
//! # Requests per call
//!
//! | call | requests |
//! |---|---|
//! | `load` | 1 `GetItem` (strongly consistent) |
//! | `insert_new`, `save` without events | 1 conditional `PutItem` |
//! | `insert_new`, `save` with events | 1 `TransactWriteItems` |
//! | `due` | 1 `Query` of `due` per page |
//! | `events_after` | 1 `Query` (strongly consistent) per 1 MB |
//! | `unsent_events` | 1 `Query` of `unsent` per shard, run concurrently |
//! | `mark_sent` | 1 conditional `UpdateItem` per event, 8 at a time |
//! | `list` | 1 `Query` of `by_thread` + 1 `BatchGetItem` per page (at most 100) |
//! | pool `add_member` / `update_member` / `remove_member` / `member` | 1 conditional `PutItem` / `PutItem` / `DeleteItem` / 1 `GetItem` (strongly consistent) |
//! | pool `unclaimed` | 1 `Query` of `by_thread` + 1 `BatchGetItem` per 100 members |
//! | pool `claim_member` | 1 `TransactWriteItems` |
//! | dedupe `claim` / `contains` / `release` | 1 conditional `PutItem` / `GetItem` / `DeleteItem` |
//! | Slack status `get` / `put` | 1 `GetItem` (strongly consistent) / 1 conditional `PutItem` |
//! | Slack user threads `touch` | 1 conditional `UpdateItem`; a person's first also 1 conditional `PutItem`; past 100 threads 1 more `UpdateItem` trims |
//! | Slack user threads `recent` | 1 `GetItem` (strongly consistent) |
//! | checkpoints `get` / `list` | 1 `GetItem` (strongly consistent) |
//! | checkpoints `add` / `remove` | 1 `GetItem` + 1 conditional `PutItem`, again on a lost race |
//!
//! So resolving an active thread is two requests: one read, one conditional write.
//!
//! Index reads (`due`, `unsent_events`, `list`'s keys) are eventually consistent, as every GSI
//! read is. That is safe here: the janitor's claims are conditional on the version it read, an
//! outbox re-drive is deduplicated by event id, and listed items are fetched consistently.

mod capacity;
mod checkpoints;
mod config;
mod dedupe;
mod errors;
mod items;
mod lost_answers;
mod schema;
mod session_store;
mod slack_status;
mod slack_user_threads;
mod subscriptions;
mod table;
mod ttl;
mod warm_pool;
mod window_counter;

pub use capacity::{query_read_units, session_item_bytes, Consistency, READ_BLOCK_BYTES};
pub use checkpoints::DynamoCheckpointStore;
pub use config::{DynamoConfig, DEFAULT_RETENTION, DEFAULT_SHARDS};
pub use dedupe::DynamoDedupe;
pub use schema::create_slack_status_table;
pub use schema::create_subscriptions_table;
pub use schema::{create_dedupe_table, create_tables, DUE_INDEX, LIST_INDEX, UNSENT_INDEX};
pub use session_store::DynamoSessionStore;
pub use slack_status::DynamoSlackStatusStore;
pub use slack_user_threads::DynamoSlackUserThreads;
pub use subscriptions::{DynamoSubscriptionStore, SUBSCRIBERS_INDEX};
pub use window_counter::DynamoWindowCounter;
