//! The warm pool store port: the records of sandboxes made ahead of need (`domain::warm_pool`).
//!
//! It lives beside the session store, in the same database, because a claim writes both: the
//! member goes from `ready` to `claimed` and the thread's record from `creating` to `active`, in
//! one conditional write. Every other change to a member is conditional on the state it was read
//! in, so the janitor retiring a member and a thread claiming it cannot both win.

use async_trait::async_trait;

use crate::domain::{LifecycleEvent, MemberState, PoolMember, Session};

use super::session_store::StoreError;

/// How a claim came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolClaim {
    /// The member is the thread's: both records were written.
    Bound,
    /// Someone else claimed or retired the member first; nothing was written. Try another.
    MemberTaken,
    /// The thread's record moved on from the version the claimer read (its creation lease was
    /// recovered); nothing was written and the claimer is fenced out.
    SessionChanged,
}

#[async_trait]
pub trait WarmPoolStore: Send + Sync {
    /// Record a new member (state `creating`); its id is fresh, so this never meets another.
    async fn add_member(&self, member: &PoolMember) -> Result<(), StoreError>;

    /// Replace a member's record with `member`, only if its stored state is still `expected`.
    /// `Ok(false)` when it was not (claimed or removed meanwhile).
    async fn update_member(
        &self,
        member: &PoolMember,
        expected: MemberState,
    ) -> Result<bool, StoreError>;

    /// Delete a member's record, only if its stored state is still `expected`.
    async fn remove_member(
        &self,
        member_id: &str,
        expected: MemberState,
    ) -> Result<bool, StoreError>;

    async fn member(&self, member_id: &str) -> Result<Option<PoolMember>, StoreError>;

    /// The members of `pool` that are not claimed (`creating` and `ready`), oldest first, at
    /// most `limit`.
    async fn unclaimed(&self, pool: &str, limit: usize) -> Result<Vec<PoolMember>, StoreError>;

    /// Up to `limit` of `pool`'s `ready` members, a different choice each call where there are
    /// more, so concurrent claimers spread over the pool. Reads about `limit` members, not the
    /// whole pool: this is what every new thread's create pays.
    async fn ready(&self, pool: &str, limit: usize) -> Result<Vec<PoolMember>, StoreError>;

    /// In one atomic write: `member` (its stored state `ready`, now `claimed` by the thread) and
    /// `session` with `events`, only if the thread's stored version is `expected_version`.
    async fn claim_member(
        &self,
        member: &PoolMember,
        session: &Session,
        expected_version: u64,
        events: &[LifecycleEvent],
    ) -> Result<PoolClaim, StoreError>;
}
