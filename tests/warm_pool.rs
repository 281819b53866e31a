//! The warm pool's writes as the use case builds them, for the stores' tests.

use threadbox_core::domain::{
    Cause, Change, Command, LifecycleEvent, MemberClaim, MemberState, Millis, PoolMember, Session,
    Timers,
};

/// A change at `now` (epoch milliseconds) with a fresh event id.
pub fn change(now: i64) -> Change {
    Change {
        event_id: uuid::Uuid::new_v4().to_string(),
        now: Millis(now),
        detail: None,
    }
}

/// What a thread taking `member` writes, as the use case builds it: the member claimed by the
/// thread, and the session bound to its sandbox (active, one version on) with the event.
pub fn claim_of(
    member: &PoolMember,
    current: &Session,
) -> (PoolMember, Session, Vec<LifecycleEvent>) {
    let mut next = current.clone();
    next.bind_sandbox(member.sandbox_id.clone().unwrap(), None);
    next.pool_member = Some(member.member_id.clone());
    let event = next
        .apply(
            Command::CreateSucceeded,
            Cause::User,
            change(2_000),
            &Timers::default(),
        )
        .unwrap()
        .unwrap();
    next.version = current.version + 1;
    let mut taken = member.clone();
    taken.state = MemberState::Claimed;
    taken.claimed = Some(MemberClaim {
        thread_id: current.thread_id.clone(),
        generation: current.generation,
        at: Millis(2_000),
    });
    (taken, next, vec![event])
}
