//! Checkpoints of a thread's home: take (kept within the thread's limits, oldest dropped
//! first), list, delete, restore in place, and fork into a new thread.
//!
//! The copy is the provider's, the record the checkpoint store's. A checkpoint is recorded only
//! once its copy is complete, and its record is removed before its copy is deleted: a record
//! always names a copy that exists. A crash between a copy and its record leaves an unnamed copy
//! (the provider's own cleanup or the thread's destroy removes it), never a record of nothing.
//!
//! Each is a lifecycle event in the thread's stream (`checkpoint`, `restore`, `fork`), not a
//! change of state: a restore keeps the thread's sandbox and generation, and says which
//! processes it stopped; a fork writes an event on both threads, each naming the other.

use std::sync::Arc;

use crate::domain::{
    check_label, Cause, Checkpoint, CheckpointCause, CheckpointId, CheckpointRetention,
    NetworkProfile, Session, ThreadId, THREAD_LABEL,
};
use crate::ports::{CheckpointStore, ProviderError, Restored, StoppedProcess};

use super::error::UseCaseError;
use super::hold_request::HoldRequest;
use super::resolve::{ForkFrom, ResolveOptions, SandboxHandle};
use super::threadbox::{Checkpoints, Step, Threadbox};

/// How long a checkpoint, restore or fork may hold its thread (against the janitor's pause).
const COPY_HOLD: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// What a restore did: the checkpoint put back and the processes it stopped.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RestoreOutcome {
    pub thread_id: ThreadId,
    pub checkpoint: Checkpoint,
    /// The sandbox restored into (the thread's, unchanged).
    pub sandbox_id: String,
    pub generation: u64,
    pub stopped: Vec<StoppedProcess>,
}

/// A fork's request: the new thread, and where its home comes from.
#[derive(Clone, Debug)]
pub struct ForkRequest {
    pub source: ThreadId,
    pub thread: ThreadId,
    /// Start from this checkpoint of the source rather than its home as it is now.
    pub checkpoint: Option<CheckpointId>,
    /// The new thread's network (`None`: the source's).
    pub network: Option<NetworkProfile>,
}

impl Threadbox {
    /// The same threadbox, keeping checkpoint records in `store` within `retention`.
    pub fn with_checkpoints(
        mut self,
        store: Arc<dyn CheckpointStore>,
        retention: CheckpointRetention,
    ) -> Self {
        self.checkpoints = Some(Checkpoints { store, retention });
        self
    }

    fn checkpoint_store(&self) -> Result<&Checkpoints, UseCaseError> {
        self.checkpoints.as_ref().ok_or_else(|| {
            ProviderError::Unsupported("checkpoints are not configured on this server".into())
                .into()
        })
    }

    /// The checkpoint store, when the provider can also copy homes: what taking, restoring
    /// and forking need, asked before anything is resumed, held or written.
    fn copying_store(&self) -> Result<&Checkpoints, UseCaseError> {
        let checkpoints = self.checkpoint_store()?;
        self.provider.checkpoint_support()?;
        Ok(checkpoints)
    }

    /// The checkpoint store, once the thread is known: an unknown thread is 404 before any
    /// checkpoint of it is looked for.
    async fn store_for(&self, thread_id: &ThreadId) -> Result<&Checkpoints, UseCaseError> {
        let checkpoints = self.checkpoint_store()?;
        self.existing(thread_id).await?;
        Ok(checkpoints)
    }

    /// The thread's record; unknown is 404 (a checkpoint never creates a thread).
    async fn existing(&self, thread_id: &ThreadId) -> Result<Session, UseCaseError> {
        self.load(thread_id).await
    }

    /// Take a checkpoint of the thread's home (resuming its sandbox first if it is paused).
    #[tracing::instrument(skip(self, label), fields(thread_id = %thread_id))]
    pub async fn checkpoint(
        &self,
        thread_id: &ThreadId,
        label: Option<&str>,
        cause: CheckpointCause,
    ) -> Result<Checkpoint, UseCaseError> {
        let checkpoints = self.copying_store()?.clone();
        let label = check_label(label).map_err(UseCaseError::BadRequest)?;
        self.existing(thread_id).await?;
        let id = CheckpointId::generate();
        let cap = checkpoints.retention.max_bytes;
        let taken = self
            .with_sandbox(
                thread_id,
                HoldRequest::new("checkpoint", COPY_HOLD),
                |sandbox| {
                    let id = id.clone();
                    async move { self.provider.checkpoint(&sandbox, &id, cap).await }
                },
            )
            .await
            .map_err(|e| match e {
                UseCaseError::Provider(ProviderError::NoSpace(message)) => {
                    UseCaseError::CheckpointQuota(message)
                }
                other => other,
            })?;
        crate::fault::point("after-checkpoint-copy");
        let record = Checkpoint {
            id: id.clone(),
            thread_id: thread_id.clone(),
            created_at: self.clock.now(),
            bytes: taken.bytes,
            files: taken.files,
            label,
            cause,
        };
        let dropped = match checkpoints.store.add(&record, &checkpoints.retention).await {
            Ok(dropped) => dropped,
            Err(e) => {
                // Not recorded: the copy is nobody's.
                self.delete_copy(thread_id, &id).await;
                return Err(e.into());
            }
        };
        for old in &dropped {
            self.delete_copy(thread_id, &old.id).await;
        }
        let mut detail = format!(
            "checkpoint {id} taken ({} bytes, {} files, the sandbox stalled {} ms)",
            taken.bytes,
            taken.files,
            taken.stalled.as_millis()
        );
        if !dropped.is_empty() {
            let ids: Vec<&str> = dropped.iter().map(|c| c.id.as_str()).collect();
            detail.push_str(&format!("; dropped the oldest: {}", ids.join(", ")));
        }
        self.note_event(thread_id, Cause::Checkpoint, detail)
            .await?;
        Ok(record)
    }

    /// The thread's checkpoints, newest first.
    pub async fn list_checkpoints(
        &self,
        thread_id: &ThreadId,
    ) -> Result<Vec<Checkpoint>, UseCaseError> {
        let checkpoints = self.store_for(thread_id).await?;
        Ok(checkpoints.store.list(thread_id).await?)
    }

    /// One of the thread's checkpoints; another thread's is unknown here.
    pub async fn get_checkpoint(
        &self,
        thread_id: &ThreadId,
        id: &CheckpointId,
    ) -> Result<Checkpoint, UseCaseError> {
        let checkpoints = self.store_for(thread_id).await?;
        let found = checkpoints.store.get(thread_id, id).await?;
        found.ok_or_else(|| unknown_checkpoint(thread_id, id))
    }

    /// Delete one of the thread's checkpoints (its record, then its copy).
    pub async fn delete_checkpoint(
        &self,
        thread_id: &ThreadId,
        id: &CheckpointId,
    ) -> Result<Checkpoint, UseCaseError> {
        let checkpoints = self.store_for(thread_id).await?;
        let removed = checkpoints.store.remove(thread_id, id).await?;
        let removed = removed.ok_or_else(|| unknown_checkpoint(thread_id, id))?;
        self.delete_copy(thread_id, id).await;
        Ok(removed)
    }

    /// Put the thread's home back to checkpoint `id`, in place: the same thread, sandbox and
    /// generation; its running processes are stopped and named.
    #[tracing::instrument(skip(self), fields(thread_id = %thread_id))]
    pub async fn restore(
        &self,
        thread_id: &ThreadId,
        id: &CheckpointId,
    ) -> Result<RestoreOutcome, UseCaseError> {
        self.copying_store()?;
        let checkpoint = self.get_checkpoint(thread_id, id).await?;
        let (sandbox_id, restored): (String, Restored) = self
            .with_sandbox(
                thread_id,
                HoldRequest::new("restore", COPY_HOLD),
                |sandbox| async move {
                    let restored = self.provider.restore(&sandbox, id).await?;
                    Ok::<_, ProviderError>((sandbox, restored))
                },
            )
            .await?;
        crate::fault::point("after-restore");
        let mut detail = format!("restored checkpoint {id}");
        if let Some(label) = &checkpoint.label {
            detail.push_str(&format!(" ({label})"));
        }
        match restored.stopped.len() {
            0 => detail.push_str("; no process was running"),
            n => {
                let names: Vec<String> = restored
                    .stopped
                    .iter()
                    .take(10)
                    .map(|p| {
                        format!(
                            "{} {}",
                            p.pid,
                            p.command.chars().take(60).collect::<String>()
                        )
                    })
                    .collect();
                detail.push_str(&format!("; stopped {n} processes: {}", names.join("; ")));
            }
        }
        let session = self.note_event(thread_id, Cause::Restore, detail).await?;
        Ok(RestoreOutcome {
            thread_id: thread_id.clone(),
            checkpoint,
            sandbox_id,
            generation: session.generation,
            stopped: restored.stopped,
        })
    }

    /// Start `request.thread` with a copy of the source's home (now, or at a checkpoint):
    /// another machine, with the source's default environment and labels (the one naming a
    /// thread names the fork), and the source's network profile unless another is asked for.
    /// The source runs on. Refused when the new thread exists (`ThreadExists`), unless it is
    /// this fork left unfinished by an earlier attempt (failed, or crashed mid-copy), which is
    /// made again.
    #[tracing::instrument(skip(self, request), fields(thread_id = %request.source, fork = %request.thread))]
    pub async fn fork(&self, request: ForkRequest) -> Result<SandboxHandle, UseCaseError> {
        if request.thread == request.source {
            return Err(UseCaseError::BadRequest(
                "a thread cannot be forked into itself".into(),
            ));
        }
        // A provider without checkpoints refuses before a thread is written.
        self.provider.checkpoint_support()?;
        let source = self.existing(&request.source).await?;
        if let Some(id) = &request.checkpoint {
            self.get_checkpoint(&request.source, id).await?;
        }
        if let Some(taken) = self.store.load(&request.thread).await? {
            if !taken.is_unfinished_fork_of(&request.source) {
                return Err(UseCaseError::ThreadExists(request.thread.clone()));
            }
        }
        let network = request.network.clone().unwrap_or(source.network.clone());
        let mut labels = source.labels.clone();
        if let Some(named) = labels.get_mut(THREAD_LABEL) {
            *named = request.thread.to_string();
        }
        let hold = HoldRequest::new("fork", COPY_HOLD);
        let (source_handle, handle) = {
            let held = self.acquire_hold(&request.source, hold).await?;
            let forked = self
                .resolve_fork(
                    &request.thread,
                    ResolveOptions {
                        create: true,
                        hold: None,
                        network: Some(network),
                        // The fork's root starts from the image its source's did.
                        image: Some(source.image.clone()),
                        // The fork runs commands as its source does, and carries its labels.
                        env: source.env.clone(),
                        labels,
                    },
                    ForkFrom {
                        thread: request.source.clone(),
                        source: held.sandbox_id.clone(),
                        checkpoint: request.checkpoint.clone(),
                    },
                )
                .await;
            if let Some(hold_id) = held.hold_id.as_deref() {
                if let Err(error) = self.release_hold(&request.source, hold_id).await {
                    tracing::warn!(%error, "releasing a hold failed; it expires on its own");
                }
            }
            (held, forked?)
        };
        crate::fault::point("after-fork");
        let from = match &request.checkpoint {
            Some(id) => format!("{} at checkpoint {id}", request.source),
            None => format!("{} as it was", request.source),
        };
        self.note_event(&request.thread, Cause::Fork, format!("forked from {from}"))
            .await?;
        self.note_event(
            &request.source,
            Cause::Fork,
            format!(
                "forked into {} (sandbox {} of generation {})",
                request.thread, handle.sandbox_id, source_handle.generation
            ),
        )
        .await?;
        Ok(handle)
    }

    /// Forget every checkpoint of the thread (its destroy): records first, then copies.
    pub(crate) async fn forget_checkpoints(&self, thread_id: &ThreadId) {
        let Some(checkpoints) = self.checkpoints.clone() else {
            return;
        };
        let all = match checkpoints.store.list(thread_id).await {
            Ok(all) => all,
            Err(error) => {
                tracing::warn!(%thread_id, %error, "cannot list a destroyed thread's checkpoints");
                return;
            }
        };
        for checkpoint in all {
            match checkpoints.store.remove(thread_id, &checkpoint.id).await {
                Ok(_) => self.delete_copy(thread_id, &checkpoint.id).await,
                Err(error) => {
                    tracing::warn!(%thread_id, %error, "cannot forget a destroyed thread's checkpoint")
                }
            }
        }
        // And any copy a crash left without a record.
        if let Err(error) = self.provider.delete_thread_checkpoints(thread_id).await {
            tracing::warn!(%thread_id, %error, "cannot delete a destroyed thread's checkpoint copies");
        }
    }

    /// Delete a checkpoint's copy; a failure is logged (the record is gone already).
    async fn delete_copy(&self, thread_id: &ThreadId, id: &CheckpointId) {
        if let Err(error) = self.provider.delete_checkpoint(thread_id, id).await {
            tracing::warn!(checkpoint = %id, %error, "cannot delete a checkpoint's copy");
        }
    }

    /// Write a note (an event that changes no state) in the thread's stream.
    async fn note_event(
        &self,
        thread_id: &ThreadId,
        cause: Cause,
        detail: String,
    ) -> Result<Session, UseCaseError> {
        loop {
            let current = self.load(thread_id).await?;
            let mut next = current.clone();
            let event = next.note(cause, self.change(Some(detail.clone())));
            if let Step::Moved(s) = self.write(next, current.version, vec![event]).await? {
                return Ok(s);
            }
        }
    }
}

/// A checkpoint this thread does not have (another thread's included).
fn unknown_checkpoint(thread_id: &ThreadId, id: &CheckpointId) -> UseCaseError {
    UseCaseError::UnknownCheckpoint {
        thread_id: thread_id.clone(),
        checkpoint: id.clone(),
    }
}
