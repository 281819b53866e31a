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
        let held = |current: &Session, now| {
            if current.status == Status::Active && current.has_live_hold(now) {
                return Err(UseCaseError::Held(current.thread_id.clone()));
            }
            Ok(())
        };
        self.claim_then_finish(
            thread_id,
            Command::Pause,
            Cause::User,
            Status::Paused,
            held,
            |claimed| async move {
                match self.finish_pause(claimed, Cause::User).await? {
                    PauseOutcome::Paused(s) => Ok(Some(s)),
                    PauseOutcome::Busy => Err(UseCaseError::Held(thread_id.clone())),
                    PauseOutcome::Changed => Ok(None),
                }
            },
        )
        .await
    }

    /// Destroy the thread's sandbox and its files. The record stays, `destroyed`, with its
    /// history; the next resolve starts a new generation.
    #[tracing::instrument(skip(self), fields(thread_id = %thread_id))]
    pub async fn destroy(
        &self,
        thread_id: &ThreadId,
        cause: Cause,
    ) -> Result<Session, UseCaseError> {
        self.claim_then_finish(
            thread_id,
            Command::Destroy,
            cause,
            Status::Destroyed,
            |_, _| Ok(()),
            |claimed| self.finish_destroy(claimed, cause),
        )
        .await
    }

    /// The claim-and-retry loop of a transition asked for by a caller: read the record, `check`
    /// it, claim `command` on it (one conditional write), and `finish` the claimed record (the
    /// provider call and its result, `None` when the record changed meanwhile). Another writer
    /// first, or a finish that found the record changed, means: read again and decide again. A
    /// thread another transition holds is waited for (or recovered once its lease ran out). A
    /// thread already `settled` is returned as it is.
    async fn claim_then_finish<C, F, Fut>(
        &self,
        thread_id: &ThreadId,
        command: Command,
        cause: Cause,
        settled: Status,
        check: C,
        finish: F,
    ) -> Result<Session, UseCaseError>
    where
        C: Fn(&Session, crate::domain::Millis) -> Result<(), UseCaseError>,
        F: Fn(Session) -> Fut,
        Fut: std::future::Future<Output = Result<Option<Session>, UseCaseError>>,
    {
        let waiting_since = tokio::time::Instant::now();
        loop {
            let current = self.load(thread_id).await?;
            check(&current, self.clock.now())?;
            match self.step(&current, command, cause, None, |_| {}).await {
                Ok(Step::Moved(claimed)) => {
                    if let Some(done) = finish(claimed).await? {
                        return Ok(done);
                    }
                }
                Ok(Step::NoOp) if current.status == settled => return Ok(current),
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
