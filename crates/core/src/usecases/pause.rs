//! Pause, destroy and reset: the transitions that take a sandbox out of service; and the
//! handler of the transitions the janitor claimed and handed to the transition queue.

use tracing::Instrument;

use crate::domain::{Cause, Command, LifecycleEvent, RejectKind, Session, Status, ThreadId};
use crate::ports::{OutgoingMessage, ProviderError, RecordOutcome};

use super::error::UseCaseError;
use super::resolve::SandboxHandle;
use super::settle::Settling;
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
    /// Pause the thread's sandbox on request. Refused while a command runs or a hold is live,
    /// except a background process's: asked for, a pause freezes those with the sandbox.
    #[tracing::instrument(skip(self), fields(thread_id = %thread_id))]
    pub async fn pause(&self, thread_id: &ThreadId) -> Result<Session, UseCaseError> {
        let held = |current: &Session, now| {
            if current.status == Status::Active && current.has_live_command_hold(now) {
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
            |claimed, claim_events| async move {
                match self
                    .finish_pause_publishing(claimed, Cause::User, &claim_events)
                    .await?
                {
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
        self.destroy_with(thread_id, cause, true).await
    }

    /// `destroy`, keeping the thread's checkpoints or not.
    async fn destroy_with(
        &self,
        thread_id: &ThreadId,
        cause: Cause,
        forget_checkpoints: bool,
    ) -> Result<Session, UseCaseError> {
        self.claim_then_finish(
            thread_id,
            Command::Destroy,
            cause,
            Status::Destroyed,
            |_, _| Ok(()),
            |claimed, claim_events| async move {
                self.publish(&claim_events).await;
                self.finish_destroy(claimed, cause, forget_checkpoints)
                    .await
            },
        )
        .await
    }

    /// The claim-and-retry loop of a transition asked for by a caller: read the record, `check`
    /// it, claim `command` on it (one conditional write), and `finish` the claimed record (the
    /// provider call and its result, `None` when the record changed meanwhile), which publishes
    /// the claim's events (`Threadbox::claim`) before it writes the next. Another writer
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
        F: Fn(Session, Vec<LifecycleEvent>) -> Fut,
        Fut: std::future::Future<Output = Result<Option<Session>, UseCaseError>>,
    {
        let mut settling = Settling::start(&self.config);
        loop {
            let current = self.load(thread_id).await?;
            check(&current, self.clock.now())?;
            match self.claim(&current, command, cause).await {
                Ok((Step::Moved(claimed), claim_events)) => {
                    if let Some(done) = finish(claimed, claim_events).await? {
                        return Ok(done);
                    }
                }
                Ok((Step::NoOp, _)) if current.status == settled => return Ok(current),
                Ok((Step::Conflict, _)) => continue,
                Ok((Step::NoOp, _))
                | Err(UseCaseError::Rejected(crate::domain::Rejected {
                    kind: RejectKind::Busy,
                    ..
                })) => {
                    self.wait_or_recover(&current, &mut settling).await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Destroy the sandbox and start a fresh one: every file in it is gone.
    pub async fn reset(&self, thread_id: &ThreadId) -> Result<SandboxHandle, UseCaseError> {
        // A thread over its compute budget would be destroyed and then refused a new sandbox:
        // refuse first, and keep it (`usecases::budget`).
        let session = self.store.load(thread_id).await?;
        if let Some(exceeded) = self.compute_exceeded(thread_id, session.as_ref()).await? {
            return Err(UseCaseError::Budget(exceeded));
        }
        self.destroy_with(thread_id, Cause::User, false).await?;
        self.resolve(thread_id).await
    }

    /// Someone else holds the thread in a transition: wait for it, or recover it if its lease ran out.
    async fn wait_or_recover(
        &self,
        current: &Session,
        settling: &mut Settling,
    ) -> Result<(), UseCaseError> {
        if current.lease_expired(self.clock.now()) {
            self.recover_stuck(current).await?;
        } else {
            settling.wait(&self.config, current).await?;
        }
        Ok(())
    }

    /// We hold the pause lease on `claimed` (status pausing), whose event is already sent:
    /// pause the sandbox.
    pub(crate) async fn finish_pause(
        &self,
        claimed: Session,
        cause: Cause,
    ) -> Result<PauseOutcome, UseCaseError> {
        self.finish_pause_publishing(claimed, cause, &[]).await
    }

    /// `finish_pause`, sending the claim's events (`Threadbox::claim`) while the sandbox pauses.
    async fn finish_pause_publishing(
        &self,
        claimed: Session,
        cause: Cause,
        claim_events: &[LifecycleEvent],
    ) -> Result<PauseOutcome, UseCaseError> {
        let sandbox_id = claimed.sandbox_id.clone().unwrap_or_default();
        let (paused, ()) = tokio::join!(
            self.provider
                .pause(&sandbox_id)
                .instrument(tracing::debug_span!("provider.pause")),
            self.publish(claim_events)
        );
        match paused {
            Ok(()) => {
                crate::fault::point("after-provider-pause");
                match self
                    .finish_claimed(&claimed, Command::PauseSucceeded, cause, |_| {})
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
        forget_checkpoints: bool,
    ) -> Result<Option<Session>, UseCaseError> {
        if let Some(id) = claimed.sandbox_id.as_deref() {
            self.provider.kill(id).await?;
        }
        // The thread's checkpoints go with it, except over a reset, which keeps them so that
        // one can be put back into the fresh sandbox.
        if forget_checkpoints {
            self.forget_checkpoints(&claimed.thread_id).await;
        }
        match self
            .finish_claimed(&claimed, Command::DestroySucceeded, cause, |s| {
                s.pool_member = None;
            })
            .await?
        {
            Step::Moved(s) => {
                if let Some(member_id) = claimed.pool_member.as_deref() {
                    self.forget_claimed_member(member_id).await;
                }
                Ok(Some(s))
            }
            Step::NoOp | Step::Conflict => Ok(None),
        }
    }
}

/// Which transition a hand-off carries out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Handoff {
    /// The record is `pausing`: pause the sandbox.
    Pause,
    /// The record is `deleting`: kill the sandbox.
    Destroy,
}

impl Handoff {
    fn claimed_status(self) -> Status {
        match self {
            Handoff::Pause => Status::Pausing,
            Handoff::Destroy => Status::Deleting,
        }
    }
}

/// A transition the janitor claimed and handed to the transition queue: which thread, and the
/// exact claim (generation and version of the record the claim wrote). The handler acts only
/// while the record still shows that claim, so a repeated delivery, or one that arrives after
/// the lease was recovered, changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TransitionWork {
    pub transition: Handoff,
    pub thread_id: ThreadId,
    pub generation: u64,
    pub version: u64,
    pub cause: Cause,
}

impl TransitionWork {
    /// The work item for a record the janitor just claimed; `None` if it is not a claim.
    pub fn for_claim(claimed: &Session, cause: Cause) -> Option<Self> {
        let transition = match claimed.status {
            Status::Pausing => Handoff::Pause,
            Status::Deleting => Handoff::Destroy,
            _ => return None,
        };
        Some(Self {
            transition,
            thread_id: claimed.thread_id.clone(),
            generation: claimed.generation,
            version: claimed.version,
            cause,
        })
    }

    /// The queue message: FIFO by thread, deduplicated by the claim (thread, generation,
    /// version), which is unique because every write bumps the version.
    pub fn message(&self) -> OutgoingMessage {
        OutgoingMessage {
            group_id: self.thread_id.as_str().to_owned(),
            dedup_id: format!(
                "claim-{:016x}-{}-{}",
                fnv1a(self.thread_id.as_str()),
                self.generation,
                self.version
            ),
            body: serde_json::to_string(self).expect("a work item always serializes"),
        }
    }

    pub fn parse(body: &str) -> Result<Self, String> {
        serde_json::from_str(body).map_err(|e| format!("not a transition work item: {e}"))
    }
}

/// 64-bit FNV-1a: a short, stable name for a thread id inside a deduplication id (the queue's
/// ids are at most 128 characters, as long as a thread id alone may be).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// What a handed-off transition came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransitionOutcome {
    /// Carried out: the record is now in this state (paused, destroyed, or back to active when
    /// the provider refused a pause because a command runs).
    Done(Status),
    /// The record no longer shows the claim (a repeated delivery, or the lease was recovered
    /// meanwhile), or the claim's lease ran out (the janitor's recovery owns it then): nothing
    /// was done.
    Stale,
    /// Worth another delivery later (the store or provider was unreachable; the record still
    /// shows the claim). The lease recovers it should every retry fail.
    Retry(String),
    /// Not a work item: it can never succeed.
    Poison(String),
}

/// What the transition queue does with the message: done or stale is acked; a retry stays in
/// flight (its visibility timeout is the back-off, and the lease recovers it should every retry
/// fail); poison goes towards the dead-letter queue.
impl From<TransitionOutcome> for RecordOutcome {
    fn from(outcome: TransitionOutcome) -> Self {
        match outcome {
            TransitionOutcome::Done(_) | TransitionOutcome::Stale => RecordOutcome::Delivered,
            TransitionOutcome::Retry(_) => RecordOutcome::Retry { retry_after: None },
            TransitionOutcome::Poison(reason) => RecordOutcome::Poison { reason },
        }
    }
}

impl Threadbox {
    /// Carry out one handed-off transition (the transition queue's consumer, in the `pause`
    /// function's queue handler and in `threadbox dev`): re-read the record and act only if it
    /// still shows the claim the work item names.
    #[tracing::instrument(skip_all)]
    pub async fn run_transition(&self, body: &str) -> TransitionOutcome {
        let work = match TransitionWork::parse(body) {
            Ok(work) => work,
            Err(reason) => return TransitionOutcome::Poison(reason),
        };
        match self.try_run_transition(&work).await {
            Ok(outcome) => outcome,
            Err(error) if error.is_retryable() && self.still_claimed(&work).await => {
                tracing::warn!(thread_id = %work.thread_id, %error, "handed-off transition failed; it will be retried");
                TransitionOutcome::Retry(error.to_string())
            }
            Err(error) => {
                // The record says what happened (an error event), or changed meanwhile.
                tracing::warn!(thread_id = %work.thread_id, %error, "handed-off transition failed");
                TransitionOutcome::Done(
                    self.current_status(&work.thread_id)
                        .await
                        .unwrap_or(Status::Error),
                )
            }
        }
    }

    async fn try_run_transition(
        &self,
        work: &TransitionWork,
    ) -> Result<TransitionOutcome, UseCaseError> {
        let Some(claimed) = self.store.load(&work.thread_id).await? else {
            return Ok(TransitionOutcome::Stale);
        };
        if !shows_claim(&claimed, work) {
            tracing::debug!(thread_id = %work.thread_id, version = claimed.version, "the claim is gone; nothing to do");
            return Ok(TransitionOutcome::Stale);
        }
        // A claim past its lease belongs to the janitor's recovery (which asks the provider
        // what became of the sandbox): acting on it too would race that recovery.
        if claimed.lease_expired(self.clock.now()) {
            tracing::info!(thread_id = %work.thread_id, "the claim's lease ran out before it was carried out; the janitor recovers it");
            return Ok(TransitionOutcome::Stale);
        }
        match work.transition {
            Handoff::Pause => Ok(match self.finish_pause(claimed, work.cause).await? {
                PauseOutcome::Paused(s) => TransitionOutcome::Done(s.status),
                PauseOutcome::Busy => TransitionOutcome::Done(Status::Active),
                PauseOutcome::Changed => TransitionOutcome::Stale,
            }),
            Handoff::Destroy => Ok(
                match self.finish_destroy(claimed, work.cause, true).await? {
                    Some(s) => TransitionOutcome::Done(s.status),
                    None => TransitionOutcome::Stale,
                },
            ),
        }
    }

    async fn still_claimed(&self, work: &TransitionWork) -> bool {
        matches!(self.store.load(&work.thread_id).await, Ok(Some(s)) if shows_claim(&s, work))
    }

    async fn current_status(&self, thread_id: &ThreadId) -> Option<Status> {
        self.store
            .load(thread_id)
            .await
            .ok()
            .flatten()
            .map(|s| s.status)
    }
}

/// Whether `record` is still exactly the claim `work` names.
fn shows_claim(record: &Session, work: &TransitionWork) -> bool {
    record.version == work.version
        && record.generation == work.generation
        && record.status == work.transition.claimed_status()
}

#[cfg(test)]
mod handoff_tests {
    use super::*;

    #[test]
    fn a_work_item_round_trips_and_its_message_fits_the_queue() {
        let work = TransitionWork {
            transition: Handoff::Pause,
            thread_id: ThreadId::parse(&"t".repeat(128)).unwrap(),
            generation: 3,
            version: u64::MAX,
            cause: Cause::Idle,
        };
        let message = work.message();
        message.validate().unwrap();
        assert_eq!(TransitionWork::parse(&message.body).unwrap(), work);
        assert!(
            message.body.contains("\"transition\":\"pause\""),
            "{}",
            message.body
        );
        let other = TransitionWork {
            version: 7,
            ..work.clone()
        };
        assert_ne!(other.message().dedup_id, message.dedup_id);
        assert!(TransitionWork::parse("{}").is_err());
    }
}
