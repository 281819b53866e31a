//! `Threadbox`: the ports plus configuration, and the small steps every use case is built from.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::domain::{
    BudgetScope, Budgets, Cause, Change, CheckpointRetention, Command, GonePolicy, ImageDefaults,
    LifecycleEvent, NetworkDefaults, Pricing, Session, ThreadId, Timers,
};
use crate::ports::{
    CheckpointStore, Clock, DurableQueue, SandboxProvider, SessionStore, WarmPoolStore,
    WindowCounter,
};

use super::error::UseCaseError;

#[derive(Clone, Debug)]
pub struct Config {
    pub timers: Timers,
    /// What happens to a Slack thread whose sandbox the provider lost (design default: recreate).
    pub gone_policy_slack: GonePolicy,
    /// The same for threads created through the HTTP API.
    pub gone_policy_api: GonePolicy,
    /// The provider-side timeout set on create and extended by keep-alives.
    pub sandbox_timeout: Duration,
    /// The network profile a new thread gets when its creator names none (per Slack workspace
    /// and channel, else the default).
    pub network: NetworkDefaults,
    /// The image a new thread starts from when its creator names none (per Slack workspace and
    /// channel, else the default; `host` unless the operator says otherwise).
    pub images: ImageDefaults,
    /// How long a caller waits for another worker's transition before getting `Busy`
    /// (`usecases::settle`). Behind API Gateway it must end well before the gateway's 30 s.
    pub settle_wait: Duration,
    /// A waiting caller's first re-read of the record; each later wait is twice the last...
    pub settle_poll: Duration,
    /// ...up to this, which is also the `retry_after` a `Busy` answer gives.
    pub settle_poll_max: Duration,
    /// Events not marked sent this long after being written are re-driven by the janitor.
    pub redrive_after: Duration,
    /// How long a destroyed or expired thread's record and events are kept (for the dashboard,
    /// the events API and audits) before the janitor deletes them.
    pub record_retention: Duration,
    /// Threads deleted per store transaction by the janitor's retention pass.
    pub purge_batch: usize,
    /// What a thread's running time is priced at (`usage`): the sandbox's size and the
    /// provider's prices, each when known.
    pub pricing: Pricing,
    /// Compute budgets per day and the cap on new sandboxes per hour (`usecases::budget`); all
    /// off by default.
    pub budgets: Budgets,
}

/// The default of `Config::record_retention`: 30 days.
pub const DEFAULT_RECORD_RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

impl Default for Config {
    fn default() -> Self {
        Self {
            timers: Timers::default(),
            gone_policy_slack: GonePolicy::Recreate,
            gone_policy_api: GonePolicy::Recreate,
            sandbox_timeout: Duration::from_secs(15 * 60),
            network: NetworkDefaults::default(),
            images: ImageDefaults::default(),
            settle_wait: Duration::from_secs(30),
            settle_poll: Duration::from_millis(20),
            settle_poll_max: Duration::from_millis(500),
            redrive_after: Duration::from_secs(10),
            record_retention: DEFAULT_RECORD_RETENTION,
            purge_batch: 200,
            pricing: Pricing::UNKNOWN,
            budgets: Budgets::default(),
        }
    }
}

/// The default of [`WarmPool::max_age`]: 30 minutes.
pub const DEFAULT_POOL_MAX_AGE: Duration = Duration::from_secs(30 * 60);

/// The pool's store and settings (`Threadbox::with_warm_pool`).
#[derive(Clone)]
pub struct WarmPool {
    pub store: Arc<dyn WarmPoolStore>,
    /// Members kept ready per pooled profile (every profile the network defaults name); 0 keeps
    /// none and drains what is there.
    pub size: usize,
    /// A ready member older than this is retired and replaced, so the pool never hands out a
    /// sandbox near the provider's timeout (members are made with `max_age` plus the usual
    /// sandbox timeout).
    pub max_age: Duration,
}

/// The checkpoint store and the per-thread limits (`Threadbox::with_checkpoints`).
#[derive(Clone)]
pub struct Checkpoints {
    pub store: Arc<dyn CheckpointStore>,
    pub retention: CheckpointRetention,
}

/// Everything a use case needs. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct Threadbox {
    pub store: Arc<dyn SessionStore>,
    pub provider: Arc<dyn SandboxProvider>,
    /// The lifecycle event queue (the outbox drains into it).
    pub events: Arc<dyn DurableQueue>,
    pub clock: Arc<dyn Clock>,
    pub config: Config,
    /// Where the janitor hands the transitions it claimed (pause, destroy) for a handler to
    /// carry out (`Threadbox::run_transition`); `None`: the sweep carries them out itself.
    pub transitions: Option<Arc<dyn DurableQueue>>,
    /// Where scope budgets are counted (`with_budget_counter`); needed only when a scope limit
    /// is set.
    pub budget_counter: Option<Arc<dyn WindowCounter>>,
    /// Sandboxes made ahead for new threads (`with_warm_pool`); `None`: every create waits.
    pub warm_pool: Option<WarmPool>,
    /// Woken each time a new thread takes a warm pool member (`with_pool_refills`).
    pub(crate) pool_taken: Option<Arc<tokio::sync::Notify>>,
    /// Where checkpoint records are kept and the limits (`with_checkpoints`); `None`: the
    /// checkpoint calls answer `unsupported`.
    pub checkpoints: Option<Checkpoints>,
    /// Whose budgets this handle's work is charged to (`for_caller`, `usecases::budget`).
    /// Private, so only `for_caller` sets it; a clone carries it into any task it is moved to.
    pub(crate) caller: Option<BudgetScope>,
}

/// The result of one conditional write.
#[allow(clippy::large_enum_variant)] // short-lived; boxing would only add noise
pub(crate) enum Step {
    /// Written; here is the record as stored.
    Moved(Session),
    /// The table says there is nothing to do.
    NoOp,
    /// Someone else wrote first; re-read and decide again.
    Conflict,
}

impl Threadbox {
    pub fn new(
        store: Arc<dyn SessionStore>,
        provider: Arc<dyn SandboxProvider>,
        events: Arc<dyn DurableQueue>,
        clock: Arc<dyn Clock>,
        config: Config,
    ) -> Self {
        Self {
            store,
            provider,
            events,
            clock,
            config,
            transitions: None,
            budget_counter: None,
            warm_pool: None,
            pool_taken: None,
            checkpoints: None,
            caller: None,
        }
    }

    /// The same threadbox, whose janitor hands each claimed pause or destroy to `queue` instead
    /// of carrying it out in the sweep.
    pub fn with_transition_queue(mut self, queue: Arc<dyn DurableQueue>) -> Self {
        self.transitions = Some(queue);
        self
    }

    pub(crate) fn change(&self, detail: Option<String>) -> Change {
        Change {
            event_id: uuid::Uuid::new_v4().to_string(),
            now: self.clock.now(),
            detail,
        }
    }

    pub(crate) fn gone_policy(&self, thread_id: &ThreadId) -> GonePolicy {
        if thread_id.is_slack() {
            self.config.gone_policy_slack
        } else {
            self.config.gone_policy_api
        }
    }

    /// Apply `command` to a copy of `current` (after `edit`), and write it conditionally on the
    /// version `current` was read at, together with its event. Publishes the event on success.
    pub(crate) async fn step(
        &self,
        current: &Session,
        command: Command,
        cause: Cause,
        detail: Option<String>,
        edit: impl FnOnce(&mut Session),
    ) -> Result<Step, UseCaseError> {
        let mut next = current.clone();
        edit(&mut next);
        match next.apply(command, cause, self.change(detail), &self.config.timers)? {
            None => Ok(Step::NoOp),
            Some(event) => self.write(next, current.version, vec![event]).await,
        }
    }

    /// `step` for the finish of a transition this caller claimed (`claimed`: pausing or
    /// deleting, under its lease). Calls still running on the thread take and release holds
    /// meanwhile, which moves the record's version but not the claim: a conflict is retried on
    /// the record as it is now for as long as it still shows the same claim (status, generation
    /// and lease), rather than dropping the finish and leaving the claimer to wait out its own
    /// lease (a reset racing a command answered 503 `busy` after 30 s).
    pub(crate) async fn finish_claimed(
        &self,
        claimed: &Session,
        command: Command,
        cause: Cause,
        edit: impl Fn(&mut Session),
    ) -> Result<Step, UseCaseError> {
        let mut current = claimed.clone();
        loop {
            match self.step(&current, command, cause, None, &edit).await? {
                Step::Conflict => {}
                done => return Ok(done),
            }
            let Some(now) = self
                .store
                .load(&claimed.thread_id)
                .instrument(tracing::debug_span!("store.load"))
                .await?
            else {
                return Ok(Step::Conflict);
            };
            let same_claim = now.status == claimed.status
                && now.generation == claimed.generation
                && now.lease_until == claimed.lease_until;
            if !same_claim {
                return Ok(Step::Conflict);
            }
            current = now;
        }
    }

    /// `step` for a claim (a transition's first write, which takes its lease) whose event the
    /// caller publishes itself, at the same time as the provider call the claim is for: the
    /// event is stored with the claim whatever happens (the outbox), and the queue send and
    /// its mark overlap the runtime's work instead of adding to it. The caller must have
    /// published it before it writes the thread's next event, so they reach the queue in order.
    pub(crate) async fn claim(
        &self,
        current: &Session,
        command: Command,
        cause: Cause,
    ) -> Result<(Step, Vec<LifecycleEvent>), UseCaseError> {
        let mut next = current.clone();
        match next.apply(command, cause, self.change(None), &self.config.timers)? {
            None => Ok((Step::NoOp, Vec::new())),
            Some(event) => {
                let events = vec![event];
                let step = self.save(next, current.version, &events).await?;
                Ok((step, events))
            }
        }
    }

    /// Write `next` if the stored version is still `expected`, with `events` in the same write.
    pub(crate) async fn write(
        &self,
        next: Session,
        expected: u64,
        events: Vec<LifecycleEvent>,
    ) -> Result<Step, UseCaseError> {
        let step = self.save(next, expected, &events).await?;
        if let Step::Moved(_) = step {
            self.publish(&events).await;
        }
        Ok(step)
    }

    /// `write` without publishing the events.
    async fn save(
        &self,
        mut next: Session,
        expected: u64,
        events: &[LifecycleEvent],
    ) -> Result<Step, UseCaseError> {
        next.version = expected + 1;
        self.due_for_budget_check(&mut next);
        let saved = self
            .store
            .save(&next, expected, events)
            .instrument(tracing::debug_span!("store.save", events = events.len()))
            .await;
        match saved {
            Ok(()) => Ok(Step::Moved(next)),
            Err(e) if e.is_conflict() => Ok(Step::Conflict),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn load(&self, thread_id: &ThreadId) -> Result<Session, UseCaseError> {
        self.store
            .load(thread_id)
            .instrument(tracing::debug_span!("store.load"))
            .await?
            .ok_or_else(|| UseCaseError::UnknownThread(thread_id.clone()))
    }
}
