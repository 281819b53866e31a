//! SQLite adapters for the embedded runtime: one database file holds sessions, events and queues,
//! shared safely by several processes (WAL journal, busy timeout, `BEGIN IMMEDIATE` for writes).

mod database;
mod dedupe;
mod queue;
mod session_store;
mod subscriptions;

pub use database::{Database, DatabaseError};
pub use dedupe::SqliteDedupe;
pub use queue::{QueueConfig, SqliteQueue};
pub use session_store::{SqliteSessionStore, DEFAULT_SHARDS};
pub use subscriptions::SqliteSubscriptionStore;
