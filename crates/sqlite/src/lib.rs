//! SQLite adapters for the embedded runtime: one database file holds sessions, events and queues,
//! shared safely by several processes (WAL journal, busy timeout, `BEGIN IMMEDIATE` for writes).

mod checkpoints;
mod database;
mod dedupe;
mod housekeeping;
mod queue;
mod session_store;
mod slack_sink;
mod slack_status;
mod slack_user_threads;
mod subscriptions;
mod warm_pool;
mod window_counter;

pub use checkpoints::SqliteCheckpointStore;
pub use database::{Database, DatabaseError};
pub use dedupe::SqliteDedupe;
pub use housekeeping::{delete_aged, Aged};
pub use queue::{QueueConfig, SqliteQueue};
pub use session_store::{SqliteSessionStore, DEFAULT_SHARDS};
pub use slack_sink::SqliteSlackSink;
pub use slack_status::SqliteSlackStatusStore;
pub use slack_user_threads::SqliteSlackUserThreads;
pub use subscriptions::SqliteSubscriptionStore;
pub use window_counter::SqliteWindowCounter;
