//! Pause, destroy and reset: the transitions that take a sandbox out of service.

use crate::domain::{Cause, Command, RejectKind, Session, Status, ThreadId};
use crate::ports::ProviderError;

use super::error::UseCaseError;
use super::resolve::SandboxHandle;
use super::threadbox::{Step, Threadbox};

/// What a pause attempt ended in, for callers that must not wait (the janitor).
#[allow(clippy::large_enum_variant)] // short-lived; boxing would only add noise
pub(crate) enum PauseOutcome {
    Paused(Session),
    /// The provider is running a command: the record went back to active.
    Busy,
    /// The record changed under us (another writer, or the sandbox was gone and the policy
    /// applied): re-read and decide again.
    Changed,
}

impl Threadbox {
    /// Pause the thread's sandbox on request. Refused while a command runs or a hold is live.
    #[tracing::instrument(skip(self), fields(thread_id = %thread_id))]
    pub async fn pause(&self, thread_id: &ThreadId) -> Result<Session, UseCaseError> {
        let waiting_since = tokio::time::Instant::now();
        loop {
            let current = self.load(thread_id).await?;
            let now = self.clock.now();
            if current.status == Status::Active && current.has_live_hold(now) {
                return Err(UseCaseError::Held(thread_id.clone()));
            }
            match self
                .step(&current, Command::Pause, Cause::User, None, |_| {})
                .await
            {
                Ok(Step::Moved(claimed)) => match self.finish_pause(claimed, Cause::User).await? {
                    PauseOutcome::Paused(s) => return Ok(s),
                    PauseOutcome::Busy => return Err(UseCaseError::Held(thread_id.clone())),
                    PauseOutcome::Changed => continue,
                },
                Ok(Step::NoOp) if current.status == Status::Paused => return Ok(current),
                Ok(Step::Conflict) => continue,
                Ok(Step::NoOp)
                | Err(UseCaseError::Rejected(crate::domain::Rejected {
                    kind: RejectKind::Busy,
                    ..
                })) => {
                    self.wait_or_recover(&current, waiting_since).await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Destroy the thread's sandbox and its files. The record stays, `destroyed`, with its
    /// history; the next resolve starts a new generation.
    #[tracing::instrument(skip(self), fields(thread_id = %thread_id))]
    pub async fn destroy(
        &self,
        thread_id: &ThreadId,
        cause: Cause,
    ) -> Result<Session, UseCaseError> {
        let waiting_since = tokio::time::Instant::now();
        loop {
            let current = self.load(thread_id).await?;
            match self
                .step(&current, Command::Destroy, cause, None, |_| {})
                .await
            {
                Ok(Step::Moved(claimed)) => {
                    if let Some(s) = self.finish_destroy(claimed, cause).await? {
                        return Ok(s);
                    }
                }
                Ok(Step::NoOp) if current.status == Status::Destroyed => return Ok(current),
                Ok(Step::Conflict) => continue,
                Ok(Step::NoOp)
                | Err(UseCaseError::Rejected(crate::domain::Rejected {
                    kind: RejectKind::Busy,
                    ..
                })) => {
                    self.wait_or_recover(&current, waiting_since).await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Destroy the sandbox and start a fresh one: every file in it is gone.
    pub async fn reset(&self, thread_id: &ThreadId) -> Result<SandboxHandle, UseCaseError> {
        self.destroy(thread_id, Cause::User).await?;
        self.resolve(thread_id).await
    }

    /// Someone else holds the thread in a transition: wait for it, or recover it if its lease ran out.
    async fn wait_or_recover(
        &self,
        current: &Session,
        since: tokio::time::Instant,
    ) -> Result<(), UseCaseError> {
        if current.lease_expired(self.clock.now()) {
            self.recover_stuck(current).await?;
        } else if since.elapsed() >= self.config.settle_wait {
            return Err(UseCaseError::Busy {
                thread_id: current.thread_id.clone(),
                status: current.status,
            });
        } else {
            tokio::time::sleep(self.config.settle_poll).await;
        }
        Ok(())
    }

    /// We hold the pause lease on `claimed` (status pausing): pause the sandbox.
    pub(crate) async fn finish_pause(
        &self,
        claimed: Session,
        cause: Cause,
    ) -> Result<PauseOutcome, UseCaseError> {
        let sandbox_id = claimed.sandbox_id.clone().unwrap_or_default();
        match self.provider.pause(&sandbox_id).await {
            Ok(()) => {
                crate::fault::point("after-provider-pause");
                match self
                    .step(&claimed, Command::PauseSucceeded, cause, None, |_| {})
                    .await?
                {
                    Step::Moved(s) => Ok(PauseOutcome::Paused(s)),
                    Step::NoOp | Step::Conflict => Ok(PauseOutcome::Changed),
                }
            }
            Err(ProviderError::Conflict(why)) => {
                // The provider is running a command we did not know about: stay active.
                tracing::info!(thread_id = %claimed.thread_id, %why, "pause refused by the provider; staying active");
                self.observe(&claimed).await?;
                Ok(PauseOutcome::Busy)
            }
            Err(ProviderError::Gone(_)) => {
                self.observe(&claimed).await?;
                Ok(PauseOutcome::Changed)
            }
            Err(error) => {
                self.step(
                    &claimed,
                    Command::Fail,
                    Cause::Error,
                    Some(format!("pause failed: {error}")),
                    |_| {},
                )
                .await?;
                Err(error.into())
            }
        }
    }

    /// We hold the delete lease on `claimed` (status deleting): kill the sandbox, then record it.
    /// A failed kill leaves the record deleting; its lease runs out and the janitor retries.
    pub(crate) async fn finish_destroy(
        &self,
        claimed: Session,
        cause: Cause,
    ) -> Result<Option<Session>, UseCaseError> {
        if let Some(id) = claimed.sandbox_id.as_deref() {
            self.provider.kill(id).await?;
        }
        match self
            .step(&claimed, Command::DestroySucceeded, cause, None, |_| {})
            .await?
        {
            Step::Moved(s) => Ok(Some(s)),
            Step::NoOp | Step::Conflict => Ok(None),
        }
    }
}
