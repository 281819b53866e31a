//! Resolve: get-or-create a thread's sandbox, resuming it when paused.
//!
//! Creation happens under a lease: the caller whose conditional insert (or `Create` claim) wins
//! creates the sandbox; everyone else re-reads until the winner settles. The sandbox is tagged with
//! the thread and generation, so a late worker whose lease was recovered by someone else is
//! fenced out by the version check on its final write, kills what it made, and re-reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tracing::Instrument;

use crate::domain::CheckpointId;
use crate::domain::{
    Cause, Command, ImageName, Millis, NetworkProfile, Observed, RejectKind, Rejected, Session,
    Status, ThreadId,
};
use crate::ports::{CreateSandbox, ForkSandbox, ProviderError, SandboxOwner, SandboxState};

use super::error::UseCaseError;
use super::hold_request::{HoldRequest, PendingHold};
use super::settle::Settling;
use super::threadbox::{Step, Threadbox};
use super::warm_pool::PoolTake;

/// What a caller gets back: enough to talk to the sandbox. Deserialize too, for API clients.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxHandle {
    pub thread_id: ThreadId,
    pub sandbox_id: String,
    pub generation: u64,
    pub status: Status,
    pub provider: String,
    pub provider_session_id: Option<String>,
    /// This call created the sandbox.
    pub created: bool,
    /// This call resumed a paused sandbox.
    pub resumed: bool,
    /// The previous sandbox was gone and this one replaced it: its files and processes were lost.
    pub recreated: bool,
    /// The sandbox came from the warm pool (made ahead) rather than a create this call waited for.
    #[serde(default)]
    pub pooled: bool,
    /// The hold taken with the resolve, when one was asked for.
    pub hold_id: Option<String>,
}

#[derive(Clone, Debug)]
pub struct ResolveOptions {
    /// Create a sandbox for a thread that has none (resolve); `false` for a plain resume.
    pub create: bool,
    /// Take a hold in the same write that marks the thread active.
    pub hold: Option<HoldRequest>,
    /// The network profile of a thread this call creates (`None`: the configured default). A
    /// thread that exists keeps its own: asking for a different one is
    /// [`UseCaseError::NetworkConflict`] (`set_network` changes it).
    pub network: Option<NetworkProfile>,
    /// The image of a thread this call creates (`None`: the configured default). It must be
    /// one the provider has ([`UseCaseError::UnknownImage`]); a thread that exists keeps its
    /// own: asking for a different one is [`UseCaseError::ImageConflict`] (`set_image` changes
    /// it).
    pub image: Option<ImageName>,
    /// The labels of a thread this call creates (`Session::labels`); a thread that exists keeps
    /// its own.
    pub labels: BTreeMap<String, String>,
    /// The default environment of a thread this call creates (`Session::env`).
    pub env: BTreeMap<String, String>,
}

impl Default for ResolveOptions {
    fn default() -> Self {
        Self {
            create: true,
            hold: None,
            network: None,
            image: None,
            labels: BTreeMap::new(),
            env: BTreeMap::new(),
        }
    }
}

/// Where a fork's sandbox comes from (`Threadbox::fork`, carried through the resolve that
/// creates its thread).
#[derive(Clone, Debug)]
pub(crate) struct ForkFrom {
    /// The source's thread (the new thread's `forked_from`).
    pub thread: ThreadId,
    /// The source's sandbox.
    pub source: String,
    pub checkpoint: Option<CheckpointId>,
}

impl ForkFrom {
    fn request(&self, create: CreateSandbox) -> ForkSandbox {
        ForkSandbox {
            source: self.source.clone(),
            checkpoint: self.checkpoint.clone(),
            create,
        }
    }
}

/// Flags gathered along the way for the handle.
#[derive(Default)]
struct Trail {
    created: bool,
    resumed: bool,
    recreated: bool,
    pooled: bool,
    /// The sandbox to make is a fork of another (`Threadbox::fork`): the thread must be new.
    fork: Option<ForkFrom>,
}

impl Threadbox {
    /// Get-or-create the thread's sandbox, resuming it if paused.
    pub async fn resolve(&self, thread_id: &ThreadId) -> Result<SandboxHandle, UseCaseError> {
        self.resolve_with(thread_id, ResolveOptions::default())
            .await
    }

    /// Resume the thread's sandbox; unlike resolve, never creates one.
    pub async fn resume(&self, thread_id: &ThreadId) -> Result<SandboxHandle, UseCaseError> {
        self.resolve_with(
            thread_id,
            ResolveOptions {
                create: false,
                ..ResolveOptions::default()
            },
        )
        .await
    }

    #[tracing::instrument(skip(self, options), fields(thread_id = %thread_id))]
    pub async fn resolve_with(
        &self,
        thread_id: &ThreadId,
        options: ResolveOptions,
    ) -> Result<SandboxHandle, UseCaseError> {
        self.resolve_trail(thread_id, options, Trail::default())
            .await
    }

    /// Create `thread_id`, which must not exist, with a fork of another sandbox.
    pub(crate) async fn resolve_fork(
        &self,
        thread_id: &ThreadId,
        options: ResolveOptions,
        fork: ForkFrom,
    ) -> Result<SandboxHandle, UseCaseError> {
        let trail = Trail {
            fork: Some(fork),
            ..Trail::default()
        };
        self.resolve_trail(thread_id, options, trail).await
    }

    async fn resolve_trail(
        &self,
        thread_id: &ThreadId,
        options: ResolveOptions,
        mut trail: Trail,
    ) -> Result<SandboxHandle, UseCaseError> {
        if let Some(image) = &options.image {
            self.check_image(image)?;
        }
        let mut settling = Settling::start(&self.config);
        let hold = options.hold.as_ref().map(HoldRequest::pending);
        // Each step either answers or leaves the record changed (or contended): read it again.
        loop {
            let now = self.clock.now();
            let loaded = self
                .store
                .load(thread_id)
                .instrument(tracing::debug_span!("store.load"))
                .await?;
            let Some(current) = loaded else {
                if !options.create {
                    return Err(UseCaseError::UnknownThread(thread_id.clone()));
                }
                if let Some(handle) = self
                    .create_thread(thread_id, &options, &hold, &mut trail)
                    .await?
                {
                    return Ok(handle);
                }
                continue;
            };
            if let Some(fork) = trail.fork.as_ref().filter(|_| !trail.created) {
                // Made by someone else since the fork checked: a fork never takes a thread
                // over, except this fork's own that an earlier attempt left without a sandbox
                // (still being made: wait for it; failed or crashed: make it again).
                if !current.is_unfinished_fork_of(&fork.thread) {
                    return Err(UseCaseError::ThreadExists(thread_id.clone()));
                }
            }
            if let Some(wanted) = &options.network {
                if *wanted != current.network {
                    return Err(UseCaseError::NetworkConflict {
                        thread_id: thread_id.clone(),
                        current: current.network.describe(),
                    });
                }
            }
            if let Some(wanted) = &options.image {
                if *wanted != current.image {
                    return Err(UseCaseError::ImageConflict {
                        thread_id: thread_id.clone(),
                        current: current.image.clone(),
                    });
                }
            }

            let answered = match current.status {
                Status::Active => self.touch_active(&current, now, &hold, &trail).await?,
                Status::Paused => self.resume_paused(&current, &hold, &mut trail).await?,
                Status::Creating | Status::Pausing | Status::Resuming | Status::Deleting => {
                    if current.lease_expired(now) {
                        self.recover_stuck(&current).await?;
                    } else {
                        settling.wait(&self.config, &current).await?;
                    }
                    None
                }
                Status::Error if current.sandbox_id.is_some() => {
                    // The sandbox may be fine: ask the provider before replacing it.
                    self.observe(&current).await?;
                    None
                }
                Status::Destroyed | Status::Error | Status::Expired => {
                    self.replace_retired(&current, options.create, &hold, &mut trail)
                        .await?
                }
            };
            if let Some(handle) = answered {
                return Ok(handle);
            }
        }
    }

    /// A thread with no record: insert one in `Creating` and create its sandbox. `None` when
    /// another resolve created the thread first (read it again).
    async fn create_thread(
        &self,
        thread_id: &ThreadId,
        options: &ResolveOptions,
        hold: &Option<PendingHold>,
        trail: &mut Trail,
    ) -> Result<Option<SandboxHandle>, UseCaseError> {
        // Budgets refuse before anything is written (`usecases::budget`).
        if let Some(exceeded) = self.compute_exceeded(thread_id, None).await? {
            return Err(UseCaseError::Budget(exceeded));
        }
        let slot = self.take_create_slot(thread_id).await?;
        let (mut session, event) = Session::new_creating(
            thread_id.clone(),
            self.provider.name(),
            self.change(None),
            &self.config.timers,
        );
        session.network = options
            .network
            .clone()
            .unwrap_or_else(|| self.config.network.for_thread(thread_id).clone());
        session.image = options
            .image
            .clone()
            .unwrap_or_else(|| self.config.images.for_thread(thread_id).clone());
        session.labels = options.labels.clone();
        session.env = options.env.clone();
        session.forked_from = trail.fork.as_ref().map(|f| f.thread.clone());
        match self
            .store
            .insert_new(&session, std::slice::from_ref(&event))
            .instrument(tracing::debug_span!("store.insert_new"))
            .await
        {
            Ok(()) => {
                trail.created = true;
                self.create_sandbox(session, vec![event], Cause::User, hold, trail)
                    .await
            }
            Err(e) => {
                // Another resolve created the thread (or the write failed): the slot made
                // nothing.
                if let Some(slot) = slot {
                    self.give_back(slot).await;
                }
                if !e.is_conflict() {
                    return Err(e.into());
                }
                Ok(None)
            }
        }
    }

    /// The common case, an active thread: one read, one conditional write recording the
    /// activity (and the hold). `None` when the write lost a race.
    async fn touch_active(
        &self,
        current: &Session,
        now: Millis,
        hold: &Option<PendingHold>,
        trail: &Trail,
    ) -> Result<Option<SandboxHandle>, UseCaseError> {
        if let Some(exceeded) = self
            .compute_exceeded(&current.thread_id, Some(current))
            .await?
        {
            self.pause_for_budget(current, &exceeded).await;
            return Err(UseCaseError::Budget(exceeded));
        }
        let mut next = current.clone();
        next.touch(now, &self.config.timers);
        if let Some(h) = hold {
            next.acquire_hold(h.at(now), now, &self.config.timers);
        }
        Ok(match self.write(next, current.version, vec![]).await? {
            Step::Moved(s) => Some(handle(&s, trail, hold)),
            Step::NoOp | Step::Conflict => None,
        })
    }

    /// A paused thread: claim the resume and wake the sandbox. `None` when someone else moved
    /// the record first.
    async fn resume_paused(
        &self,
        current: &Session,
        hold: &Option<PendingHold>,
        trail: &mut Trail,
    ) -> Result<Option<SandboxHandle>, UseCaseError> {
        if let Some(exceeded) = self
            .compute_exceeded(&current.thread_id, Some(current))
            .await?
        {
            return Err(UseCaseError::Budget(exceeded));
        }
        match self.claim(current, Command::Resume, Cause::User).await? {
            (Step::Moved(s), claim_events) => {
                self.resume_sandbox(s, &claim_events, hold, trail).await
            }
            (Step::NoOp | Step::Conflict, _) => Ok(None),
        }
    }

    /// A destroyed, expired or failed thread: with `create`, claim a new sandbox for it (budget
    /// and create slot first); a plain resume claims `Resume`, which the state machine refuses.
    /// `None` when the claim lost a race.
    async fn replace_retired(
        &self,
        current: &Session,
        create: bool,
        hold: &Option<PendingHold>,
        trail: &mut Trail,
    ) -> Result<Option<SandboxHandle>, UseCaseError> {
        let command = if create {
            Command::Create
        } else {
            Command::Resume
        };
        let mut slot = None;
        if create {
            if let Some(exceeded) = self
                .compute_exceeded(&current.thread_id, Some(current))
                .await?
            {
                return Err(UseCaseError::Budget(exceeded));
            }
            slot = self.take_create_slot(&current.thread_id).await?;
        }
        let claimed = self.step(current, command, Cause::User, None, |_| {}).await;
        if !matches!(claimed, Ok(Step::Moved(_))) {
            if let Some(slot) = slot {
                self.give_back(slot).await;
            }
        }
        match claimed? {
            Step::Moved(s) => {
                trail.created = true;
                self.create_sandbox(s, Vec::new(), Cause::User, hold, trail)
                    .await
            }
            Step::NoOp | Step::Conflict => Ok(None),
        }
    }

    /// Ask the provider for the sandbox and fold what it says into the record.
    pub(crate) async fn observe(&self, current: &Session) -> Result<Step, UseCaseError> {
        let Some(sandbox_id) = current.sandbox_id.as_deref() else {
            return Ok(Step::NoOp);
        };
        let observed = match self.provider.info(sandbox_id).await {
            Ok(info) => match info.state {
                SandboxState::Running => Observed::Running,
                SandboxState::Paused => Observed::Paused,
            },
            Err(ProviderError::Gone(_)) => Observed::Gone(self.gone_policy(&current.thread_id)),
            Err(e) => return Err(e.into()),
        };
        let step = self
            .step(
                current,
                Command::Observe(observed),
                Cause::Reconcile,
                None,
                |_| {},
            )
            .await?;
        if let Step::Moved(s) = &step {
            if s.status == Status::Creating {
                // The recreate policy: replace the sandbox now, under the lease just taken.
                let mut trail = Trail {
                    recreated: true,
                    ..Trail::default()
                };
                self.create_sandbox(s.clone(), Vec::new(), Cause::Recreated, &None, &mut trail)
                    .await?;
            }
        }
        Ok(step)
    }

    /// The provider lost the sandbox: apply the thread's policy. Under `recreate` the record is
    /// left `creating` under our lease and this creates the replacement; under `expire` the
    /// caller gets the expiry as an error.
    async fn handle_gone(
        &self,
        current: &Session,
        hold: &Option<PendingHold>,
        trail: &mut Trail,
    ) -> Result<Option<SandboxHandle>, UseCaseError> {
        let policy = self.gone_policy(&current.thread_id);
        let detail = Some(format!(
            "sandbox {} is gone; {}",
            current.sandbox_id.as_deref().unwrap_or("?"),
            match policy {
                crate::domain::GonePolicy::Recreate =>
                    "a new one replaces it and earlier files are lost",
                crate::domain::GonePolicy::Expire => "the thread is expired",
            }
        ));
        match self
            .step(
                current,
                Command::Observe(Observed::Gone(policy)),
                Cause::ProviderGone,
                detail,
                |_| {},
            )
            .await?
        {
            Step::Moved(s) if s.status == Status::Creating => {
                trail.recreated = true;
                self.create_sandbox(s, Vec::new(), Cause::Recreated, hold, trail)
                    .await
            }
            Step::Moved(s) if s.status == Status::Expired => Err(Rejected {
                kind: RejectKind::Expired,
                from: Some(Status::Expired),
                command: Command::Resume,
            }
            .into()),
            _ => Ok(None),
        }
    }

    /// We hold the creation lease on `claimed` (status creating), whose `claim_events` are not
    /// sent yet (`Threadbox::claim`): bind a warm pool member, or make the sandbox (sending
    /// them meanwhile) and bind it.
    /// `Ok(None)` means we were fenced out and the caller should re-read.
    async fn create_sandbox(
        &self,
        claimed: Session,
        mut claim_events: Vec<crate::domain::LifecycleEvent>,
        cause: Cause,
        hold: &Option<PendingHold>,
        trail: &mut Trail,
    ) -> Result<Option<SandboxHandle>, UseCaseError> {
        // A warm pool member an earlier sandbox of this thread came from (lost, so being
        // replaced): its record goes once the replacement is bound.
        let replaced_member = claimed.pool_member.clone();
        let pool_on = trail.fork.is_none() && self.warm_pool.as_ref().is_some_and(|p| p.size > 0);
        if pool_on {
            // Binding a member writes and sends the next event: this one goes first.
            self.publish(&std::mem::take(&mut claim_events)).await;
        }
        let pool = match trail.fork {
            // A fork's sandbox is made from its source, never taken from the pool.
            Some(_) => PoolTake::Empty,
            None => {
                self.take_pool_member(&claimed, cause, hold)
                    .instrument(tracing::debug_span!("pool.take"))
                    .await?
            }
        };
        match pool {
            PoolTake::Bound(s) => {
                trail.pooled = true;
                if let Some(member_id) = &replaced_member {
                    self.forget_claimed_member(member_id).await;
                }
                return Ok(Some(handle(&s, trail, hold)));
            }
            PoolTake::Fenced => return Ok(None),
            PoolTake::Empty => {}
        }
        let owner = SandboxOwner {
            thread_id: claimed.thread_id.clone(),
            generation: claimed.generation,
        };
        let request = CreateSandbox {
            // The thread's own image (set when it was created, or changed since).
            image: claimed.image.clone(),
            owner,
            // The thread's own profile (set when it was created, or changed since).
            network: claimed.network.clone(),
            timeout: self.config.sandbox_timeout,
            env: Default::default(),
        };
        let made = async {
            match &trail.fork {
                Some(fork) => self.provider.fork(fork.request(request)).await,
                None => self.provider.create(request).await,
            }
        };
        let (made, ()) = tokio::join!(
            made.instrument(tracing::debug_span!("provider.create")),
            self.publish(&claim_events)
        );
        let created = match made {
            Ok(created) => created,
            Err(error) => {
                tracing::warn!(thread_id = %claimed.thread_id, %error, "sandbox create failed");
                self.step(
                    &claimed,
                    Command::Fail,
                    Cause::Error,
                    Some(format!("create failed: {error}")),
                    |_| {},
                )
                .await?;
                return Err(error.into());
            }
        };
        tracing::info!(thread_id = %claimed.thread_id, sandbox_id = %created.sandbox_id, generation = claimed.generation, "sandbox created");
        crate::fault::point("after-provider-create");
        let now = self.clock.now();
        let step = self
            .step(&claimed, Command::CreateSucceeded, cause, None, |s| {
                s.bind_sandbox(
                    created.sandbox_id.clone(),
                    created.provider_session_id.clone(),
                );
                if let Some(h) = hold {
                    s.acquire_hold(h.at(now), now, &self.config.timers);
                }
            })
            .await?;
        match step {
            Step::Moved(s) => {
                if let Some(member_id) = &replaced_member {
                    self.forget_claimed_member(member_id).await;
                }
                Ok(Some(handle(&s, trail, hold)))
            }
            Step::NoOp | Step::Conflict => {
                // Fenced: our lease was recovered by someone else. What we made is nobody's.
                tracing::warn!(thread_id = %claimed.thread_id, sandbox_id = %created.sandbox_id, "fenced out after create; killing the sandbox");
                if let Err(error) = self.provider.kill(&created.sandbox_id).await {
                    tracing::warn!(%error, "kill after fencing failed; reconciliation will reap it");
                }
                Ok(None)
            }
        }
    }

    /// We hold the resume lease on `claimed` (status resuming): connect, resuming the sandbox,
    /// while the claim's events go to the queue.
    async fn resume_sandbox(
        &self,
        claimed: Session,
        claim_events: &[crate::domain::LifecycleEvent],
        hold: &Option<PendingHold>,
        trail: &mut Trail,
    ) -> Result<Option<SandboxHandle>, UseCaseError> {
        let sandbox_id = claimed.sandbox_id.clone().unwrap_or_default();
        let (connected, ()) = tokio::join!(
            self.provider
                .connect(&sandbox_id)
                .instrument(tracing::debug_span!("provider.connect")),
            self.publish(claim_events)
        );
        match connected {
            Ok(connected) => {
                let now = self.clock.now();
                let step = self
                    .step(&claimed, Command::ResumeSucceeded, Cause::User, None, |s| {
                        if connected.provider_session_id.is_some() {
                            s.provider_session_id = connected.provider_session_id.clone();
                        }
                        if let Some(h) = hold {
                            s.acquire_hold(h.at(now), now, &self.config.timers);
                        }
                    })
                    .await?;
                trail.resumed = true;
                Ok(match step {
                    Step::Moved(s) => Some(handle(&s, trail, hold)),
                    Step::NoOp | Step::Conflict => None,
                })
            }
            Err(ProviderError::Gone(_)) => self.handle_gone(&claimed, hold, trail).await,
            Err(error) => {
                self.step(
                    &claimed,
                    Command::Fail,
                    Cause::ResumeFailed,
                    Some(format!("resume failed: {error}")),
                    |_| {},
                )
                .await?;
                Err(error.into())
            }
        }
    }

    /// A transitional state whose lease ran out: the worker that held it is presumed dead.
    /// Bring the record back in line with the provider.
    pub(crate) async fn recover_stuck(&self, stuck: &Session) -> Result<Step, UseCaseError> {
        tracing::warn!(thread_id = %stuck.thread_id, status = %stuck.status, "recovering a transition whose lease expired");
        match stuck.status {
            Status::Creating => {
                // Whatever the dead worker may have created is tagged with this generation and
                // bound to nothing: reconciliation kills it as an orphan.
                self.step(
                    stuck,
                    Command::Fail,
                    Cause::Error,
                    Some("creation lease expired; the creating worker stopped".into()),
                    |_| {},
                )
                .await
            }
            Status::Pausing | Status::Resuming => self.observe(stuck).await,
            Status::Deleting => {
                if let Some(id) = stuck.sandbox_id.as_deref() {
                    self.provider.kill(id).await?;
                }
                self.step(
                    stuck,
                    Command::DestroySucceeded,
                    Cause::Reconcile,
                    None,
                    |_| {},
                )
                .await
            }
            _ => Ok(Step::NoOp),
        }
    }
}

fn handle(s: &Session, trail: &Trail, hold: &Option<PendingHold>) -> SandboxHandle {
    SandboxHandle {
        thread_id: s.thread_id.clone(),
        sandbox_id: s.sandbox_id.clone().unwrap_or_default(),
        generation: s.generation,
        status: s.status,
        provider: s.provider.clone(),
        provider_session_id: s.provider_session_id.clone(),
        created: trail.created,
        resumed: trail.resumed,
        recreated: trail.recreated,
        pooled: trail.pooled,
        hold_id: hold.as_ref().map(|h| h.hold_id.clone()),
    }
}
