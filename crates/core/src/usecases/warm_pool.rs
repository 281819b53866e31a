//! The warm pool (`domain::warm_pool`): a new thread takes a sandbox made ahead of need instead of
//! waiting for a create, and the janitor keeps every pooled profile's pool filled.
//!
//! - **Claim** (`take_pool_member`, from `resolve`'s create): the creator holds the thread's
//!   creation lease; it writes the member `ready` → `claimed` and the thread `creating` → `active`
//!   bound to the member's sandbox in one conditional write. A member someone else took is
//!   skipped; a thread record that moved on fences the claimer out exactly as a create would.
//!   Nothing else reaches a member before that write, so its home is as fresh as when it was made.
//! - **Tending** (`tend_pool`, each sweep): members older than `max_age` or missing from the
//!   provider are retired (record removed on its `ready` state first, so a claim and a retire
//!   never both win, then the sandbox killed); members whose creator died are dropped; the rest
//!   is topped up to `size` per kind. A size of 0 drains the pool.
//! - **Kinds**: members are kept per (network profile, image) a new thread can get from the
//!   operator's defaults (`Config::network`, `Config::images`: the defaults and every Slack
//!   scope either names), each kind in its own pool (`image_pool_key`). A thread takes only a
//!   member of its own profile and image.
//! - **Reconciliation** (`janitor`) reads a pool-tagged sandbox's member: creating or ready is
//!   the pool's, claimed is its thread's, no record is an orphan.

use std::collections::HashSet;

use futures::stream::{self, StreamExt};
use serde::Serialize;
use tracing::Instrument;

use crate::domain::{
    image_pool_key, Cause, Command, ImageName, MemberClaim, MemberState, Millis, NetworkProfile,
    PoolMember, Session,
};
use crate::ports::{CreateSandbox, PoolClaim, ProviderError, SandboxOwner};

use super::error::UseCaseError;
use super::hold_request::PendingHold;
use super::threadbox::{Threadbox, WarmPool};

/// The most members one profile may keep ready.
pub const MAX_POOL_SIZE: usize = 64;
/// Members a creator tries before it creates instead: each one someone else took first cost a
/// conditional write, and a burst of new threads larger than the pool must not become a storm of
/// failed claims (64 creators over 16 members on DynamoDB would otherwise try up to 1,024).
const CLAIM_ATTEMPTS: usize = 3;
/// Members made at once while tending.
const CREATE_CONCURRENCY: usize = 4;

/// What one tending pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PoolReport {
    pub created: usize,
    /// Ready members killed: too old, lost by the provider, or over the size.
    pub retired: usize,
    /// `creating` records whose creator died; their sandbox, if any, is an orphan now.
    pub abandoned: usize,
    pub failures: usize,
}

/// What a claim attempt came to.
#[allow(clippy::large_enum_variant)] // short-lived, like `Step`
pub(super) enum PoolTake {
    /// The thread is active on a member's sandbox: the record as written.
    Bound(Session),
    /// No ready member for the thread's profile: create one as usual.
    Empty,
    /// The thread's record moved on; like a fenced create, the caller re-reads.
    Fenced,
}

/// The provider's sandboxes as a sweep listed them, to find members the provider lost.
pub(super) struct Listed<'a> {
    pub ids: &'a HashSet<String>,
    /// Members made after the listing may be missing from it without being lost.
    pub at: Millis,
}

impl Threadbox {
    /// The same threadbox with a warm pool; see the module documentation.
    pub fn with_warm_pool(mut self, pool: WarmPool) -> Self {
        self.warm_pool = Some(pool);
        self
    }

    /// The same threadbox, which wakes `taken` each time a new thread takes a warm pool member,
    /// so that a process able to run work in the background refills the pool at once
    /// ([`Threadbox::refill_pool`]) rather than at the next sweep: a burst of new threads then
    /// finds members beyond the first `size`. A take while a refill runs leaves `taken`'s permit
    /// set, so it is seen by the refill after.
    pub fn with_pool_refills(mut self, taken: std::sync::Arc<tokio::sync::Notify>) -> Self {
        self.pool_taken = Some(taken);
        self
    }

    /// Top every pooled profile's pool up to its size now (retiring old and abandoned members as
    /// a sweep does, without the provider's listing): what a sweep's tending does, for the
    /// refill after a take.
    pub async fn refill_pool(&self) -> PoolReport {
        let report = self.tend_pool(None).await;
        if report.failures > 0 {
            tracing::warn!(
                ?report,
                "refilling the warm pool failed; the next sweep tries again"
            );
        }
        report
    }

    /// We hold the creation lease on `claimed`: bind a ready member of its profile, if any.
    pub(super) async fn take_pool_member(
        &self,
        claimed: &Session,
        cause: Cause,
        hold: &Option<PendingHold>,
    ) -> Result<PoolTake, UseCaseError> {
        let Some(pool) = self.warm_pool.as_ref().filter(|p| p.size > 0) else {
            return Ok(PoolTake::Empty);
        };
        let listed = match pool
            .store
            .ready(
                &image_pool_key(&claimed.network, &claimed.image),
                CLAIM_ATTEMPTS,
            )
            .instrument(tracing::debug_span!("store.pool_ready"))
            .await
        {
            Ok(listed) => listed,
            Err(error) => {
                // The pool only saves time: a create still works.
                tracing::warn!(%error, "reading the warm pool failed; creating instead");
                return Ok(PoolTake::Empty);
            }
        };
        // The store picks from a random place, so concurrent creators rarely collide.
        let ready: Vec<PoolMember> = listed
            .into_iter()
            .filter(|m| {
                m.state == MemberState::Ready
                    && m.sandbox_id.is_some()
                    && m.network == claimed.network
                    && m.image == claimed.image
            })
            .collect();
        for member in ready {
            let now = self.clock.now();
            let mut next = claimed.clone();
            next.bind_sandbox(
                member.sandbox_id.clone().unwrap_or_default(),
                member.provider_session_id.clone(),
            );
            next.pool_member = Some(member.member_id.clone());
            if let Some(h) = hold {
                next.acquire_hold(h.at(now), now, &self.config.timers);
            }
            let change = self.change(Some(format!(
                "a warm pool sandbox (member {})",
                member.member_id
            )));
            let Some(event) =
                next.apply(Command::CreateSucceeded, cause, change, &self.config.timers)?
            else {
                return Ok(PoolTake::Empty);
            };
            next.version = claimed.version + 1;
            self.due_for_budget_check(&mut next);
            let mut taken = member.clone();
            taken.state = MemberState::Claimed;
            taken.claimed = Some(MemberClaim {
                thread_id: claimed.thread_id.clone(),
                generation: claimed.generation,
                at: now,
            });
            let events = [event];
            match pool
                .store
                .claim_member(&taken, &next, claimed.version, &events)
                .instrument(tracing::debug_span!("store.claim_member"))
                .await?
            {
                PoolClaim::Bound => {
                    if let Some(taken) = &self.pool_taken {
                        taken.notify_one();
                    }
                    self.publish(&events).await;
                    tracing::info!(thread_id = %claimed.thread_id, sandbox_id = ?next.sandbox_id, member_id = %member.member_id, "warm pool sandbox bound");
                    return Ok(PoolTake::Bound(next));
                }
                PoolClaim::MemberTaken => continue,
                PoolClaim::SessionChanged => return Ok(PoolTake::Fenced),
            }
        }
        Ok(PoolTake::Empty)
    }

    /// Keep every pooled profile's pool at its size: retire old and lost members, drop records
    /// of creators that died, and make what is missing. Called by the janitor each sweep;
    /// `listed` is the provider's listing when the sweep made one.
    pub(super) async fn tend_pool(&self, listed: Option<Listed<'_>>) -> PoolReport {
        let mut report = PoolReport::default();
        let Some(pool) = &self.warm_pool else {
            return report;
        };
        for (network, image) in self.pooled_kinds() {
            if let Err(error) = self
                .tend_one(pool, &network, &image, listed.as_ref(), &mut report)
                .await
            {
                tracing::warn!(%error, pool = %image_pool_key(&network, &image), "tending the warm pool failed");
                report.failures += 1;
            }
        }
        report
    }

    /// Every (network profile, image) the operator's defaults give a new thread: the defaults'
    /// own, then each Slack scope either setting names, each kind once.
    pub fn pooled_kinds(&self) -> Vec<(NetworkProfile, ImageName)> {
        let (network, images) = (&self.config.network, &self.config.images);
        let mut kinds = vec![(network.default.clone(), images.default.clone())];
        for scope in network.scopes().chain(images.scopes()) {
            let kind = (
                network.for_scope(scope).clone(),
                images.for_scope(scope).clone(),
            );
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        kinds
    }

    async fn tend_one(
        &self,
        pool: &WarmPool,
        network: &NetworkProfile,
        image: &ImageName,
        listed: Option<&Listed<'_>>,
        report: &mut PoolReport,
    ) -> Result<(), UseCaseError> {
        let size = pool.size.min(MAX_POOL_SIZE);
        let members = pool
            .store
            .unclaimed(&image_pool_key(network, image), MAX_POOL_SIZE * 2)
            .await?;
        let now = self.clock.now();
        let mut kept = 0;
        for member in members {
            match member.state {
                MemberState::Creating if member.create_lease_expired(now) => {
                    if pool
                        .store
                        .remove_member(&member.member_id, MemberState::Creating)
                        .await?
                    {
                        report.abandoned += 1;
                    }
                }
                MemberState::Creating => kept += 1,
                MemberState::Ready => {
                    let lost = listed.is_some_and(|l| {
                        member.created_at < l.at
                            && member
                                .sandbox_id
                                .as_ref()
                                .is_some_and(|id| !l.ids.contains(id))
                    });
                    let old = now.since(member.created_at) >= pool.max_age;
                    if lost || old || kept >= size {
                        if self.retire_member(pool, &member).await? {
                            report.retired += 1;
                        }
                    } else {
                        kept += 1;
                    }
                }
                MemberState::Claimed => {}
            }
        }
        let missing = size.saturating_sub(kept);
        let made: Vec<Result<(), UseCaseError>> = stream::iter(0..missing)
            .map(|_| self.make_member(pool, network.clone(), image.clone()))
            .buffer_unordered(CREATE_CONCURRENCY)
            .collect()
            .await;
        for result in made {
            match result {
                Ok(()) => report.created += 1,
                Err(error) => {
                    tracing::warn!(%error, "making a warm pool member failed");
                    report.failures += 1;
                }
            }
        }
        Ok(())
    }

    /// Take a ready member out of the pool and kill its sandbox. False when a thread claimed it
    /// first (it is theirs now) or it was already gone.
    async fn retire_member(
        &self,
        pool: &WarmPool,
        member: &PoolMember,
    ) -> Result<bool, UseCaseError> {
        if !pool
            .store
            .remove_member(&member.member_id, MemberState::Ready)
            .await?
        {
            return Ok(false);
        }
        if let Some(id) = member.sandbox_id.as_deref() {
            match self.provider.kill(id).await {
                Ok(()) | Err(ProviderError::Gone(_)) => {}
                // The record is gone, so reconciliation kills it as an orphan.
                Err(error) => {
                    tracing::warn!(%error, sandbox_id = id, "killing a retired warm pool member failed")
                }
            }
        }
        Ok(true)
    }

    /// Record a member, make its sandbox (tagged with the member, not a thread), mark it ready.
    async fn make_member(
        &self,
        pool: &WarmPool,
        network: NetworkProfile,
        image: ImageName,
    ) -> Result<(), UseCaseError> {
        let mut member =
            PoolMember::creating_from(network.clone(), image.clone(), self.clock.now());
        pool.store.add_member(&member).await?;
        let request = CreateSandbox {
            image,
            owner: SandboxOwner {
                thread_id: member.tag(),
                generation: 0,
            },
            network,
            timeout: pool.max_age + self.config.sandbox_timeout,
            env: Default::default(),
        };
        let created = match self.provider.create(request).await {
            Ok(created) => created,
            Err(error) => {
                pool.store
                    .remove_member(&member.member_id, MemberState::Creating)
                    .await?;
                return Err(error.into());
            }
        };
        member.state = MemberState::Ready;
        member.sandbox_id = Some(created.sandbox_id.clone());
        member.provider_session_id = created.provider_session_id;
        if !pool
            .store
            .update_member(&member, MemberState::Creating)
            .await?
        {
            // Dropped as abandoned while we worked: what we made is nobody's.
            self.provider.kill(&created.sandbox_id).await.ok();
        }
        Ok(())
    }

    /// The sandbox the thread took from `member_id` is gone (destroyed with the thread, or lost
    /// and replaced): drop the member's record.
    pub(super) async fn forget_claimed_member(&self, member_id: &str) {
        let Some(pool) = &self.warm_pool else {
            return;
        };
        if let Err(error) = pool
            .store
            .remove_member(member_id, MemberState::Claimed)
            .await
        {
            tracing::warn!(%error, member_id, "dropping a claimed warm pool member's record failed");
        }
    }
}
