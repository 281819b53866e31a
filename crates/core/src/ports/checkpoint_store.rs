//! The checkpoint store port: the records of each thread's checkpoints (what was taken, when,
//! why, how big). The copies themselves are the provider's; a record is written once its copy
//! is complete and removed before its copy is deleted, so a record always names a copy that
//! exists, and a crash between the two leaves at most an unnamed copy for the sweep.
//!
//! Retention is the store's: [`CheckpointStore::add`] keeps the thread within its limits,
//! dropping the oldest (by `created_at`, then id) and answering which it dropped, so the caller
//! deletes their copies. Every adapter drops the same ones ([`CheckpointRetention::to_drop`]).

use async_trait::async_trait;

use super::StoreError;
use crate::domain::{Checkpoint, CheckpointId, CheckpointRetention, ThreadId};

#[async_trait]
pub trait CheckpointStore: Send + Sync {
    /// Record `checkpoint` (a new id: recording an id twice replaces the record) and drop the
    /// thread's oldest records until what stays is within `retention`, never the new one. The
    /// dropped records, oldest first.
    async fn add(
        &self,
        checkpoint: &Checkpoint,
        retention: &CheckpointRetention,
    ) -> Result<Vec<Checkpoint>, StoreError>;

    /// The thread's checkpoint `id`; `None` when the thread has no such checkpoint (another
    /// thread's is none of this one's).
    async fn get(
        &self,
        thread_id: &ThreadId,
        id: &CheckpointId,
    ) -> Result<Option<Checkpoint>, StoreError>;

    /// The thread's checkpoints, newest first (by `created_at`, then id).
    async fn list(&self, thread_id: &ThreadId) -> Result<Vec<Checkpoint>, StoreError>;

    /// Forget the thread's checkpoint `id`: the record removed, or `None` when there was none.
    async fn remove(
        &self,
        thread_id: &ThreadId,
        id: &CheckpointId,
    ) -> Result<Option<Checkpoint>, StoreError>;
}
