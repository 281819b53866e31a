//! SQLite adapters for the embedded runtime: one database file holds sessions, events and queues,
//! shared safely by several processes (WAL journal, busy timeout, `BEGIN IMMEDIATE` for writes).

mod database;

pub use database::{Database, DatabaseError};
