//! Reading a thread's sandbox as it is, for the API's GETs: a GET must change nothing, so these
//! never create a sandbox, resume a paused one, take a hold or write the record. A thread with no
//! record is unknown (404); one without a usable sandbox right now says so (`NoSandbox`).
//!
//! The runc provider reads a paused sandbox's files from the host, so reading keeps working while
//! it is paused; a provider that cannot (E2B's data plane sleeps with the sandbox) answers
//! `NoSandbox`, and the caller resumes first if it wants to wake it.

use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::domain::{Status, ThreadId};
use crate::ports::{
    DiskUsage, FileEntry, GrepMatch, NetworkRefusals, OpenFile, ProviderError, SandboxState,
};

use super::error::UseCaseError;
use super::threadbox::Threadbox;

/// The thread's sandbox as the provider sees it now: running or paused, and what its disk
/// holds against its quota (where the provider reports one). Deserialize too, for API clients.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxStatus {
    pub sandbox_id: String,
    pub state: SandboxState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskUsage>,
    /// What its network refused, where the provider counts that (absent: it does not, or the
    /// sandbox has no network to refuse with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_refusals: Option<NetworkRefusals>,
}

/// What a thread's sandbox's network refused so far, and which sandbox that was (a count
/// belongs to one sandbox; the thread's next starts again).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxRefusals {
    pub sandbox_id: String,
    /// `None`: the provider does not count them for this sandbox.
    pub refusals: Option<NetworkRefusals>,
}

impl Threadbox {
    /// The thread's sandbox as it is now, without waking it. Its network's refusals are best
    /// effort: a provider that cannot read them leaves them out.
    pub async fn peek_sandbox(&self, thread_id: &ThreadId) -> Result<SandboxStatus, UseCaseError> {
        self.in_place(thread_id, |id| async move {
            let info = self.provider.info(&id).await?;
            let network_refusals = match self.provider.network_refusals(&id).await {
                Ok(refusals) => refusals,
                Err(error) => {
                    tracing::debug!(sandbox_id = %id, %error, "no network refusals to show");
                    None
                }
            };
            Ok(SandboxStatus {
                sandbox_id: info.sandbox_id,
                state: info.state,
                disk: info.disk,
                network_refusals,
            })
        })
        .await
    }

    /// What the thread's sandbox's network refused so far, without waking it.
    pub async fn peek_network_refusals(
        &self,
        thread_id: &ThreadId,
    ) -> Result<SandboxRefusals, UseCaseError> {
        self.in_place(thread_id, |id| async move {
            let refusals = self.provider.network_refusals(&id).await?;
            Ok(SandboxRefusals {
                sandbox_id: id,
                refusals,
            })
        })
        .await
    }

    /// A file in the thread's sandbox open for streaming, without waking it.
    pub async fn peek_open_file(
        &self,
        thread_id: &ThreadId,
        path: &str,
    ) -> Result<OpenFile, UseCaseError> {
        self.in_place(thread_id, |id| async move {
            self.provider.open_file(&id, path).await
        })
        .await
    }

    /// A directory's entries in the thread's sandbox, without waking it.
    pub async fn peek_dir(
        &self,
        thread_id: &ThreadId,
        path: &str,
    ) -> Result<Vec<FileEntry>, UseCaseError> {
        self.in_place(thread_id, |id| async move {
            self.provider.list_dir(&id, path).await
        })
        .await
    }

    /// A path's metadata in the thread's sandbox, without waking it.
    pub async fn peek_stat(
        &self,
        thread_id: &ThreadId,
        path: &str,
    ) -> Result<FileEntry, UseCaseError> {
        self.in_place(thread_id, |id| async move {
            self.provider.stat(&id, path).await
        })
        .await
    }

    /// Paths matching a glob in the thread's sandbox, without waking it.
    pub async fn peek_glob(
        &self,
        thread_id: &ThreadId,
        pattern: &str,
    ) -> Result<Vec<String>, UseCaseError> {
        self.in_place(thread_id, |id| async move {
            self.provider.glob(&id, pattern).await
        })
        .await
    }

    /// Lines matching a regular expression under `path`, without waking the sandbox.
    pub async fn peek_grep(
        &self,
        thread_id: &ThreadId,
        pattern: &str,
        path: &str,
    ) -> Result<Vec<GrepMatch>, UseCaseError> {
        self.in_place(thread_id, |id| async move {
            self.provider.grep(&id, pattern, path).await
        })
        .await
    }

    /// Run `op` on the sandbox the record names, if the thread has one it can use now.
    async fn in_place<T, F, Fut>(&self, thread_id: &ThreadId, op: F) -> Result<T, UseCaseError>
    where
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<T, ProviderError>>,
    {
        let session = self
            .store
            .load(thread_id)
            .await?
            .ok_or_else(|| UseCaseError::UnknownThread(thread_id.clone()))?;
        let no_sandbox = || UseCaseError::NoSandbox {
            thread_id: thread_id.clone(),
            status: session.status,
        };
        let usable = matches!(
            session.status,
            Status::Active | Status::Paused | Status::Pausing
        );
        let Some(sandbox_id) = session.sandbox_id.clone().filter(|_| usable) else {
            return Err(no_sandbox());
        };
        let error = match op(sandbox_id.clone()).await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        if let Some(lost) = self
            .lost_race(thread_id, &sandbox_id, session.status, &error)
            .await
        {
            return Err(lost);
        }
        match error {
            // Gone or asleep: what to do about it is a write, which is not a GET's to make.
            ProviderError::Gone(_) | ProviderError::Conflict(_) => Err(no_sandbox()),
            other => Err(other.into()),
        }
    }
}
