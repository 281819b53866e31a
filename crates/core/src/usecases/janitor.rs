//! The janitor sweep, run every minute by EventBridge (or a timer in `threadbox dev`).
//!
//! 1. Re-drive lifecycle events that were written but never sent.
//! 2. Reconcile with the provider: kill orphans (sandboxes tagged with a thread whose record does
//!    not point at them, or with a warm pool member that has no record) and fold provider-side
//!    pauses into records. Then tend the warm pool (`usecases::warm_pool`): retire old and lost
//!    members and make what is missing.
//! 3. Walk the due-work index and act: pause idle threads and threads over a compute budget
//!    (`usecases::budget`), destroy expired ones, recover
//!    transitions whose lease ran out, correct records whose sandbox is gone. The shards are
//!    queried concurrently (`shard_concurrency` at once), each shard's pages in order, and each
//!    page's records `concurrency` at once.
//!
//! Every claim is a conditional write on the version read from the index, so a thread that saw
//! activity after the read is left alone. With a transition queue (`Threadbox::transitions`) the
//! sweep only claims: it writes the transitional state with its lease and hands the provider
//! call (seconds per pause at E2B) to the queue's consumer, `Threadbox::run_transition`, which
//! acts only while the record still shows that claim. A lost message is a claim whose lease
//! runs out, which a later sweep recovers. Without one, the sweep carries the transition out
//! itself. The sweep checks its deadline before each item and stops early rather than overrun;
//! the next run continues where the index says.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use serde::Serialize;
use tokio::time::Instant;

use crate::domain::{Cause, Command, MemberState, Millis, Session, Status};
use crate::ports::{ProviderError, SandboxInfo, SandboxOwner, SandboxState};

use super::error::UseCaseError;
use super::pause::{PauseOutcome, TransitionWork};
use super::threadbox::{Step, Threadbox};
use super::warm_pool::{Listed, PoolReport};

#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// Stop starting new work after this instant (the Lambda deadline minus a margin).
    pub deadline: Instant,
    /// Due records read per index query.
    pub page_size: usize,
    /// Threads acted on at once within one shard.
    pub concurrency: usize,
    /// Shards of the due index walked at once (each with its own `concurrency`).
    pub shard_concurrency: usize,
    /// Also reconcile with the provider's list of sandboxes. That pass reads one record per
    /// provider sandbox, so at scale callers run it less often than the due-work pass.
    pub reconcile: bool,
}

impl SweepOptions {
    pub fn until(deadline: Instant) -> Self {
        Self {
            deadline,
            page_size: 100,
            concurrency: 8,
            shard_concurrency: 8,
            reconcile: true,
        }
    }

    pub fn for_duration(budget: Duration) -> Self {
        Self::until(Instant::now() + budget)
    }
}

/// What one sweep did. Printed by `threadbox dev`, logged by the Lambda, read by tests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    pub events_redriven: usize,
    pub orphans_killed: usize,
    /// Records corrected to match the provider (provider-side pause, sandbox gone).
    pub corrected: usize,
    pub due_examined: usize,
    pub paused: usize,
    pub destroyed: usize,
    pub recovered: usize,
    /// Pauses and destroys claimed and handed to the transition queue.
    pub queued: usize,
    /// Due threads left alone: fresh activity, a live hold, or another writer first.
    pub skipped: usize,
    pub failures: usize,
    /// What tending the warm pool did (`usecases::warm_pool`).
    pub pool: PoolReport,
    /// Destroyed or expired threads whose record and events retention deleted.
    pub threads_purged: u64,
    pub events_purged: u64,
    /// False when the deadline stopped the sweep before it finished.
    pub completed: bool,
}

impl SweepReport {
    /// Add the due pass counts of one shard.
    fn absorb(&mut self, part: &SweepReport) {
        self.corrected += part.corrected;
        self.due_examined += part.due_examined;
        self.paused += part.paused;
        self.destroyed += part.destroyed;
        self.recovered += part.recovered;
        self.queued += part.queued;
        self.skipped += part.skipped;
        self.failures += part.failures;
    }
}

/// What happened to one due thread.
enum Acted {
    /// Claimed (the record is pausing or deleting under our lease); the transition queue
    /// carries it out.
    Claimed(TransitionWork),
    Paused,
    Destroyed,
    Recovered,
    Corrected,
    Skipped,
    Failed,
}

impl Threadbox {
    #[tracing::instrument(skip_all)]
    pub async fn sweep(&self, options: SweepOptions) -> SweepReport {
        let mut report = SweepReport::default();
        let out_of_time = || Instant::now() >= options.deadline;

        match self.redrive_unsent(500).await {
            Ok(n) => report.events_redriven = n,
            Err(error) => {
                tracing::warn!(%error, "re-driving events failed");
                report.failures += 1;
            }
        }
        if out_of_time() {
            return report;
        }
        self.purge_retired(&mut report, &out_of_time).await;
        if out_of_time() {
            return report;
        }

        let listed_at = self.clock.now();
        let listed = if options.reconcile {
            Some(self.provider.list(&BTreeMap::new()).await)
        } else {
            None
        };
        let live = match listed {
            None => None,
            Some(Ok(list)) => Some(list),
            Some(Err(error)) => {
                tracing::warn!(%error, "listing provider sandboxes failed; skipping reconciliation");
                report.failures += 1;
                None
            }
        };
        if let Some(list) = &live {
            self.reconcile(list, &options, &mut report).await;
        }
        let live_ids: Option<HashSet<String>> =
            live.map(|l| l.into_iter().map(|s| s.sandbox_id).collect());
        report.pool = self
            .tend_pool(live_ids.as_ref().map(|ids| Listed { ids, at: listed_at }))
            .await;
        if out_of_time() {
            return report;
        }

        // The due pass: shards queried concurrently (bounded), each shard's pages in order.
        let now = self.clock.now();
        let live_ids = live_ids.map(Arc::new);
        let shards = stream::iter(0..self.store.shard_count())
            .map(|shard| -> BoxFuture<'_, (SweepReport, bool)> {
                Box::pin(self.sweep_shard(shard, now, options.clone(), live_ids.clone()))
            })
            .buffer_unordered(options.shard_concurrency.max(1))
            .collect::<Vec<_>>()
            .await;
        let mut finished = true;
        for (part, done) in shards {
            report.absorb(&part);
            finished &= done;
        }
        report.completed = finished && !out_of_time();
        report
    }

    /// Walk one shard's due index, a page at a time, acting on each page's records
    /// `options.concurrency` at once. Claims handed off are sent to the transition queue a page
    /// at a time. Returns what it did and whether it reached the end of the shard.
    async fn sweep_shard(
        &self,
        shard: u32,
        now: Millis,
        options: SweepOptions,
        live_ids: Option<Arc<HashSet<String>>>,
    ) -> (SweepReport, bool) {
        let mut report = SweepReport::default();
        let mut cursor = None;
        loop {
            if Instant::now() >= options.deadline {
                return (report, false);
            }
            let page = match self
                .store
                .due(shard, now, options.page_size, cursor.take())
                .await
            {
                Ok(page) => page,
                Err(error) => {
                    tracing::warn!(%error, shard, "querying due work failed");
                    report.failures += 1;
                    return (report, true);
                }
            };
            report.due_examined += page.items.len();
            let deadline = options.deadline;
            let results: Vec<Acted> = stream::iter(page.items)
                .map(|s| -> BoxFuture<'_, Acted> {
                    let live_ids = live_ids.clone();
                    Box::pin(async move {
                        if Instant::now() >= deadline {
                            return Acted::Skipped;
                        }
                        self.act_on_due(s, now, live_ids.as_deref()).await
                    })
                })
                .buffer_unordered(options.concurrency.max(1))
                .collect()
                .await;
            let mut handed = Vec::new();
            for acted in results {
                match acted {
                    Acted::Paused => report.paused += 1,
                    Acted::Destroyed => report.destroyed += 1,
                    Acted::Recovered => report.recovered += 1,
                    Acted::Corrected => report.corrected += 1,
                    Acted::Skipped => report.skipped += 1,
                    Acted::Failed => report.failures += 1,
                    Acted::Claimed(work) => handed.push(work.message()),
                }
            }
            if let (false, Some(queue)) = (handed.is_empty(), &self.transitions) {
                match queue.send(&handed).await {
                    Ok(()) => report.queued += handed.len(),
                    Err(error) => {
                        // The claims stand; their leases run out and a later sweep recovers them.
                        tracing::warn!(%error, shard, claims = handed.len(), "handing claims to the transition queue failed");
                        report.failures += 1;
                    }
                }
            }
            match page.next {
                Some(next) => cursor = Some(next),
                None => return (report, true),
            }
        }
    }

    /// Delete retired threads past their retention, a bounded batch per store transaction, until
    /// a batch comes back short or the deadline nears.
    async fn purge_retired(&self, report: &mut SweepReport, out_of_time: &impl Fn() -> bool) {
        let Some(retired_before) = self.clock.now().0.checked_sub(
            i64::try_from(self.config.record_retention.as_millis()).unwrap_or(i64::MAX),
        ) else {
            return;
        };
        let batch = self.config.purge_batch.max(1);
        loop {
            match self
                .store
                .purge_retired(Millis(retired_before), batch)
                .await
            {
                Ok(purged) => {
                    report.threads_purged += purged.threads;
                    report.events_purged += purged.events;
                    if purged.threads < batch as u64 || out_of_time() {
                        return;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "deleting retired threads failed");
                    report.failures += 1;
                    return;
                }
            }
        }
    }

    /// Kill orphans and follow provider-side state changes.
    async fn reconcile(
        &self,
        sandboxes: &[SandboxInfo],
        options: &SweepOptions,
        report: &mut SweepReport,
    ) {
        // Owned items and boxed futures: a closure taking a borrowed item trips rustc's
        // higher-ranked lifetime check (rust-lang/rust#102211) and the sweep stops being `Send`.
        let deadline = options.deadline;
        let results: Vec<Result<Option<Acted>, UseCaseError>> = stream::iter(sandboxes.to_vec())
            .map(
                |sandbox| -> BoxFuture<'_, Result<Option<Acted>, UseCaseError>> {
                    Box::pin(async move {
                        if Instant::now() >= deadline {
                            return Ok(None);
                        }
                        self.reconcile_one(&sandbox).await
                    })
                },
            )
            .buffer_unordered(options.concurrency.max(1))
            .collect()
            .await;
        for result in results {
            match result {
                Ok(Some(Acted::Destroyed)) => report.orphans_killed += 1,
                Ok(Some(Acted::Corrected)) => report.corrected += 1,
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "reconciling a sandbox failed");
                    report.failures += 1;
                }
            }
        }
    }

    async fn reconcile_one(&self, sandbox: &SandboxInfo) -> Result<Option<Acted>, UseCaseError> {
        // Sandboxes without threadbox's tags are not ours to touch.
        let Some(owner) = sandbox.owner() else {
            return Ok(None);
        };
        let Some(member_id) = owner.thread_id.pool_member_id() else {
            return self.reconcile_owned(sandbox, &owner).await;
        };
        // A warm pool member's sandbox: the pool's while its record is creating or ready, its
        // thread's once claimed, nobody's without a record.
        let member = match &self.warm_pool {
            Some(pool) => pool.store.member(member_id).await?,
            // No pool store here: leave members to a janitor that has one.
            None => return Ok(None),
        };
        match member {
            Some(m) if m.state == MemberState::Claimed => match &m.claimed {
                Some(claim) => {
                    let owner = SandboxOwner {
                        thread_id: claim.thread_id.clone(),
                        generation: claim.generation,
                    };
                    let acted = self.reconcile_owned(sandbox, &owner).await?;
                    if matches!(acted, Some(Acted::Destroyed)) {
                        self.forget_claimed_member(member_id).await;
                    }
                    Ok(acted)
                }
                None => Ok(None),
            },
            Some(m)
                if m.sandbox_id
                    .as_deref()
                    .is_none_or(|id| id == sandbox.sandbox_id) =>
            {
                Ok(None)
            }
            // No record, or one that names another sandbox (a duplicate create).
            _ => {
                tracing::info!(member_id, sandbox_id = %sandbox.sandbox_id, "killing a warm pool sandbox with no member record");
                self.provider.kill(&sandbox.sandbox_id).await?;
                Ok(Some(Acted::Destroyed))
            }
        }
    }

    /// Reconcile a sandbox whose owner is a thread: an orphan unless the thread's record binds it
    /// (or is creating it, within its lease).
    async fn reconcile_owned(
        &self,
        sandbox: &SandboxInfo,
        owner: &SandboxOwner,
    ) -> Result<Option<Acted>, UseCaseError> {
        let record = self.store.load(&owner.thread_id).await?;
        let now = self.clock.now();
        let orphan = match &record {
            None => true,
            Some(r) if r.sandbox_id.as_deref() == Some(sandbox.sandbox_id.as_str()) => {
                let drifted = matches!(
                    (r.status, sandbox.state),
                    (Status::Active, SandboxState::Paused)
                        | (Status::Paused, SandboxState::Running)
                );
                if drifted {
                    if let Step::Moved(_) = self.observe(r).await? {
                        return Ok(Some(Acted::Corrected));
                    }
                }
                false
            }
            // A create in flight: the worker has made the sandbox and is about to bind it.
            Some(r) => {
                !(r.status == Status::Creating
                    && r.generation == owner.generation
                    && !r.lease_expired(now))
            }
        };
        if !orphan {
            return Ok(None);
        }
        tracing::info!(thread_id = %owner.thread_id, sandbox_id = %sandbox.sandbox_id, generation = owner.generation, "killing orphan sandbox");
        self.provider.kill(&sandbox.sandbox_id).await?;
        Ok(Some(Acted::Destroyed))
    }

    async fn act_on_due(
        &self,
        s: Session,
        now: Millis,
        live_ids: Option<&HashSet<String>>,
    ) -> Acted {
        let thread_id = s.thread_id.clone();
        match self.try_act_on_due(s, now, live_ids).await {
            Ok(acted) => acted,
            Err(error) => {
                tracing::warn!(%thread_id, %error, "janitor action failed");
                Acted::Failed
            }
        }
    }

    async fn try_act_on_due(
        &self,
        s: Session,
        now: Millis,
        live_ids: Option<&HashSet<String>>,
    ) -> Result<Acted, UseCaseError> {
        if s.status.is_transitional() {
            if s.lease_expired(now) {
                self.recover_stuck(&s).await?;
                return Ok(Acted::Recovered);
            }
            return Ok(Acted::Skipped);
        }

        // The listing did not show this record's sandbox: confirm with the provider, then correct.
        if let (Some(id), Some(live)) = (s.sandbox_id.as_deref(), live_ids) {
            if !live.contains(id)
                && matches!(self.provider.info(id).await, Err(ProviderError::Gone(_)))
            {
                return Ok(match self.observe(&s).await? {
                    Step::Moved(_) => Acted::Corrected,
                    _ => Acted::Skipped,
                });
            }
        }

        let idle_for = now.since(s.last_activity_at);
        let timers = &self.config.timers;
        let retention_due = idle_for >= timers.retention && s.status != Status::Destroyed;
        if retention_due {
            let Step::Moved(claimed) = self
                .step(&s, Command::Destroy, Cause::Retention, None, |_| {})
                .await?
            else {
                return Ok(Acted::Skipped);
            };
            if let Some(work) = self.handoff(&claimed, Cause::Retention) {
                return Ok(Acted::Claimed(work));
            }
            return Ok(
                match self.finish_destroy(claimed, Cause::Retention, true).await? {
                    Some(_) => Acted::Destroyed,
                    None => Acted::Skipped,
                },
            );
        }
        // A running thread over a compute budget (`usecases::budget`) is paused, whether idle or not.
        if s.status == Status::Active {
            if let Some(exceeded) = self.compute_exceeded(&s.thread_id, Some(&s)).await? {
                if let Some(claimed) = self.claim_budget_pause(&s, &exceeded).await? {
                    if let Some(work) = self.handoff(&claimed, Cause::Budget) {
                        return Ok(Acted::Claimed(work));
                    }
                    return Ok(match self.finish_pause(claimed, Cause::Budget).await? {
                        PauseOutcome::Paused(_) => Acted::Paused,
                        PauseOutcome::Busy | PauseOutcome::Changed => Acted::Skipped,
                    });
                }
            }
        }
        if s.status == Status::Active && idle_for >= timers.idle_pause && !s.has_live_hold(now) {
            let Step::Moved(claimed) = self
                .step(&s, Command::Pause, Cause::Idle, None, |_| {})
                .await?
            else {
                return Ok(Acted::Skipped);
            };
            if let Some(work) = self.handoff(&claimed, Cause::Idle) {
                return Ok(Acted::Claimed(work));
            }
            return Ok(match self.finish_pause(claimed, Cause::Idle).await? {
                PauseOutcome::Paused(_) => Acted::Paused,
                PauseOutcome::Busy | PauseOutcome::Changed => Acted::Skipped,
            });
        }

        // Due but nothing to do (a hold is live, or the index entry is stale): move the entry.
        let mut next = s.clone();
        next.reschedule(now, timers);
        if next.next_action_at != s.next_action_at {
            self.write(next, s.version, vec![]).await?;
        }
        Ok(Acted::Skipped)
    }

    /// The work item for a claim, when claims go to a transition queue.
    fn handoff(&self, claimed: &Session, cause: Cause) -> Option<TransitionWork> {
        self.transitions.as_ref()?;
        TransitionWork::for_claim(claimed, cause)
    }
}

#[doc(hidden)]
impl Threadbox {
    /// Act on one due record exactly as the sweep would, given a snapshot the test controls
    /// (to prove claims are conditional on what was read).
    pub async fn act_on_due_for_tests(&self, snapshot: Session) -> &'static str {
        match self.act_on_due(snapshot, self.clock.now(), None).await {
            Acted::Claimed(_) => "claimed",
            Acted::Paused => "paused",
            Acted::Destroyed => "destroyed",
            Acted::Recovered => "recovered",
            Acted::Corrected => "corrected",
            Acted::Skipped => "skipped",
            Acted::Failed => "failed",
        }
    }
}

#[cfg(test)]
mod tests {
    /// The Lambda runtime and `tokio::spawn` need the sweep's future to be `Send`.
    #[allow(dead_code)]
    fn the_sweep_future_is_send(tb: super::Threadbox, options: super::SweepOptions) {
        fn assert_send<T: Send>(_: T) {}
        assert_send(async move { tb.sweep(options).await });
    }
}
