//! Adapters: one module per technology, each implementing one or more ports.

#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(feature = "runc")]
pub mod runc;
