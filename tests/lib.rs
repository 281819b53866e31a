//! Shared set-up for the integration tests in `tests/`: fresh backends on temporary files,
//! (feature `aws`) on fresh DynamoDB tables and SQS queues, and (feature `lambda`) the Lambda
//! functions' event fixtures and harness; the warm pool's writes as the use case builds them.

#[cfg(feature = "aws")]
pub mod aws;
#[cfg(all(feature = "aws", feature = "lambda"))]
pub mod iam;
#[cfg(feature = "lambda")]
pub mod lambda;
#[cfg(feature = "aws")]
pub mod warm_pool;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use threadbox_core::ports::{DurableQueue, SessionStore, WarmPoolStore};
use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};

/// The repository's root, for the tests that read its files as text.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The repository's file at `relative` (from its root), as text; a panic names a missing one.
pub fn read_repo_file(relative: &str) -> String {
    let path = repo().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `infra/template.yaml`'s resources, as `(logical id, its block of text)`: every
/// two-space-indented key under `Resources:`, up to the next one (the template read as text).
pub fn template_resources(template: &str) -> Vec<(String, String)> {
    let body = template
        .split_once("\nResources:\n")
        .expect("a Resources section")
        .1;
    let body = body.split("\nOutputs:\n").next().unwrap();
    let mut resources: Vec<(String, String)> = Vec::new();
    for line in body.lines() {
        let is_key = line.len() > 2
            && line.starts_with("  ")
            && !line.starts_with("   ")
            && !line.trim_start().starts_with('#')
            && line.ends_with(':');
        if is_key {
            resources.push((line.trim().trim_end_matches(':').to_owned(), String::new()));
        } else if let Some((_, block)) = resources.last_mut() {
            block.push_str(line);
            block.push('\n');
        }
    }
    resources
}

/// A fresh SQLite store and lifecycle queue in one temporary database file.
pub struct SqliteBackend {
    pub store: Arc<dyn SessionStore>,
    /// The warm pool's records, in the same file as the sessions they are claimed by.
    pub pool: Arc<dyn WarmPoolStore>,
    pub events: Arc<dyn DurableQueue>,
    /// The janitor's transition queue, in the same file.
    pub transitions: Arc<dyn DurableQueue>,
    _dir: tempfile::TempDir,
}

impl SqliteBackend {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("threadbox.db");
        let store = SqliteSessionStore::open(&path).expect("open store");
        let events =
            SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).expect("open queue");
        let transitions =
            SqliteQueue::open(&path, "transitions", QueueConfig::default()).expect("open queue");
        let store = Arc::new(store);
        Self {
            pool: store.clone(),
            store,
            events: Arc::new(events),
            transitions: Arc::new(transitions),
            _dir: dir,
        }
    }
}

impl Default for SqliteBackend {
    fn default() -> Self {
        Self::new()
    }
}
