//! What the use-case tests here share: a `Threadbox` over a real store and queue (SQLite, in a
//! temporary file), the in-memory provider and a manual clock.

// Each test crate uses a different part of this module.
#![allow(dead_code)]

use std::sync::Arc;

use threadbox_core::usecases::{Config, Threadbox};
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
use threadbox_testing::{InMemoryProvider, ManualClock};

/// A `Threadbox` with `config`, and its provider and clock; the database goes with `_dir`.
pub struct World {
    pub tb: Threadbox,
    pub provider: Arc<InMemoryProvider>,
    pub clock: Arc<ManualClock>,
    pub _dir: tempfile::TempDir,
}

pub fn world_with(config: Config) -> World {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("threadbox.db");
    let store = Arc::new(SqliteSessionStore::open(&path).unwrap());
    let queue = Arc::new(SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap());
    let provider = InMemoryProvider::new();
    let clock = Arc::new(ManualClock::default());
    let tb = Threadbox::new(store, provider.clone(), queue, clock.clone(), config);
    World {
        tb,
        provider,
        clock,
        _dir: dir,
    }
}
