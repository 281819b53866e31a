//! Calls that lose a race with a pause, reset or destroy of their thread.
//!
//! A pause, reset or destroy asked for by someone else does not wait for calls already running
//! on the thread's sandbox (a reset never does; a pause goes ahead over a process's hold). Such
//! a call then fails however the provider happened to notice: a script killed with its
//! container, a frozen or vanished container, envd gone from under a stream. None of that is a
//! provider fault, and the caller should hear what happened, not a 502. The transition writes the
//! record before it asks the provider (the claim), so by the time a call fails the record says
//! whether its sandbox was taken away: this is the one place that reads it and decides.

use crate::domain::{Status, ThreadId};
use crate::ports::ProviderError;

use super::error::UseCaseError;
use super::threadbox::Threadbox;

impl Threadbox {
    /// What a call that used `sandbox_id` (found active) and failed with `error` answers:
    /// `Interrupted` when it lost a race with a pause, reset or destroy of the thread, else the
    /// provider's error.
    pub(crate) async fn call_error(
        &self,
        thread_id: &ThreadId,
        sandbox_id: &str,
        error: ProviderError,
    ) -> UseCaseError {
        match self
            .lost_race(thread_id, sandbox_id, Status::Active, &error)
            .await
        {
            Some(lost) => lost,
            None => error.into(),
        }
    }

    /// After a call on the thread's `sandbox_id` (found active) failed with `error`: whether to
    /// make it again. A call that lost a race with a pause, reset or destroy is `Interrupted`,
    /// and not made again in whatever the thread has now. A sandbox the provider says is gone or
    /// not running (E2B's autoPause) is folded into the record (recreated or expired by policy,
    /// or marked paused) and `Ok` says to try once more, so the next resolve acts on the truth;
    /// `retried` keeps that to once. Anything else is the provider's error.
    pub(crate) async fn retry_once_after(
        &self,
        thread_id: &ThreadId,
        sandbox_id: &str,
        error: ProviderError,
        retried: &mut bool,
    ) -> Result<(), UseCaseError> {
        if let Some(lost) = self
            .lost_race(thread_id, sandbox_id, Status::Active, &error)
            .await
        {
            return Err(lost);
        }
        match error {
            ProviderError::Gone(_) | ProviderError::Conflict(_) if !*retried => {
                *retried = true;
                let current = self.load(thread_id).await?;
                self.observe(&current).await?;
                Ok(())
            }
            other => Err(other.into()),
        }
    }

    /// `Interrupted` when `error` may come from the sandbox being taken away (not the request's
    /// own fault, nor a limit) and the record says it was since the call found the thread
    /// `started`.
    pub(crate) async fn lost_race(
        &self,
        thread_id: &ThreadId,
        sandbox_id: &str,
        started: Status,
        error: &ProviderError,
    ) -> Option<UseCaseError> {
        let may_be_a_race = matches!(
            error,
            ProviderError::Gone(_)
                | ProviderError::Conflict(_)
                | ProviderError::Internal(_)
                | ProviderError::Unavailable(_)
        );
        if !may_be_a_race {
            return None;
        }
        let interrupted = self.interrupted(thread_id, sandbox_id, started).await;
        if interrupted.is_some() {
            tracing::info!(%thread_id, sandbox_id, %error, "a call lost a race with a pause, reset or destroy");
        }
        interrupted
    }

    /// `Interrupted` when the record no longer shows `sandbox_id` as the thread's sandbox as
    /// the call found it (`started`): paused since (or pausing, or resuming after a pause),
    /// destroyed, or replaced by a new one. `None` when it still does (the failure is the
    /// provider's own, or the provider lost the sandbox, which the caller's policy handles) or
    /// the record cannot be read.
    pub(crate) async fn interrupted(
        &self,
        thread_id: &ThreadId,
        sandbox_id: &str,
        started: Status,
    ) -> Option<UseCaseError> {
        let session = self.store.load(thread_id).await.ok()??;
        let same_sandbox = session.sandbox_id.as_deref() == Some(sandbox_id);
        let asleep = |s: Status| matches!(s, Status::Pausing | Status::Paused | Status::Resuming);
        let what = match session.status {
            Status::Active | Status::Error if same_sandbox => return None,
            now if same_sandbox && asleep(now) => {
                if asleep(started) {
                    // Asleep already when the call began: no race, the provider's answer stands.
                    return None;
                }
                "paused"
            }
            _ => "reset or destroyed",
        };
        Some(UseCaseError::Interrupted {
            thread_id: thread_id.clone(),
            what,
            status: session.status,
        })
    }
}
