//! The warm pool store on DynamoDB (`WarmPoolStore for DynamoSessionStore`), against whatever
//! endpoint `AWS_ENDPOINT_URL` names (moto's server under `scripts/test.sh`): members beside the
//! sessions in the sessions table, every change conditional on the stored state, and a claim that
//! writes the member, the thread's session and its events in one transaction or not at all.
//!
//! Each test makes its own uniquely named tables (`threadbox_tests::aws`). Without an endpoint
//! every test says why it is skipped and passes, unless `THREADBOX_REQUIRE_AWS=1`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use threadbox_aws::dynamo::DynamoSessionStore;
use threadbox_core::domain::{
    MemberState, Millis, NetworkProfile, PoolMember, Session, Status, ThreadId, Timers,
};
use threadbox_core::ports::{PoolClaim, SessionStore, WarmPoolStore};
use threadbox_tests::aws::{self, aws_configured, sdk_config};
use threadbox_tests::warm_pool::{change, claim_of};

/// A store on two fresh tables, or `None` (the test returns) when no endpoint is configured.
async fn fresh_store(test: &str) -> Option<DynamoSessionStore> {
    if !aws_configured(test) {
        return None;
    }
    Some(aws::fresh_store(&sdk_config().await).await)
}

/// A new thread holding its creation lease, stored as `insert_new` leaves it.
async fn creating_session(store: &DynamoSessionStore, id: &str) -> Session {
    let (session, event) = Session::new_creating(
        ThreadId::parse(id).unwrap(),
        "test",
        change(1_000),
        &Timers::default(),
    );
    store.insert_new(&session, &[event]).await.unwrap();
    session
}

/// A member made ready: added `creating`, then moved on.
async fn ready_member(store: &DynamoSessionStore, created_at: i64) -> PoolMember {
    let mut member = PoolMember::creating(NetworkProfile::Restricted, Millis(created_at));
    store.add_member(&member).await.unwrap();
    member.state = MemberState::Ready;
    member.sandbox_id = Some(format!("sb-{}", member.member_id));
    assert!(store
        .update_member(&member, MemberState::Creating)
        .await
        .unwrap());
    member
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_are_listed_updated_and_removed_only_from_their_expected_state() {
    let Some(store) = fresh_store("members_are_listed_updated_and_removed").await else {
        return;
    };
    let mut member = PoolMember::creating(NetworkProfile::Restricted, Millis(5_000));
    store.add_member(&member).await.unwrap();
    assert_eq!(
        store.member(&member.member_id).await.unwrap(),
        Some(member.clone())
    );
    assert_eq!(
        store.unclaimed(&member.pool, 10).await.unwrap(),
        vec![member.clone()]
    );
    assert!(store.unclaimed("networked", 10).await.unwrap().is_empty());
    assert!(
        store.add_member(&member).await.is_err(),
        "a member id is recorded once"
    );

    let created = member.clone();
    member.state = MemberState::Ready;
    member.sandbox_id = Some("sb-1".into());
    member.provider_session_id = Some("ps-1".into());
    assert!(store
        .update_member(&member, MemberState::Creating)
        .await
        .unwrap());
    assert!(
        !store
            .update_member(&created, MemberState::Creating)
            .await
            .unwrap(),
        "the stored state is ready now, so a stale update loses"
    );
    assert_eq!(
        store.member(&member.member_id).await.unwrap(),
        Some(member.clone())
    );

    // Oldest first, at most `limit`.
    let older = ready_member(&store, 1_000).await;
    let newer = ready_member(&store, 9_000).await;
    assert_eq!(
        store.unclaimed(&member.pool, 10).await.unwrap(),
        vec![older.clone(), member.clone(), newer.clone()]
    );
    assert_eq!(
        store.unclaimed(&member.pool, 2).await.unwrap(),
        vec![older.clone(), member.clone()]
    );

    // `ready` leaves creating members out and reads at most `limit`, from a random place.
    let still_creating = PoolMember::creating(NetworkProfile::Restricted, Millis(500));
    store.add_member(&still_creating).await.unwrap();
    let mut seen = HashSet::new();
    for _ in 0..20 {
        let picked = store.ready(&member.pool, 2).await.unwrap();
        assert_eq!(picked.len(), 2);
        for m in picked {
            assert_eq!(m.state, MemberState::Ready, "{m:?}");
            seen.insert(m.member_id);
        }
    }
    assert_eq!(seen.len(), 3, "every ready member gets picked sometimes");
    assert!(store
        .remove_member(&still_creating.member_id, MemberState::Creating)
        .await
        .unwrap());

    assert!(!store
        .remove_member(&member.member_id, MemberState::Creating)
        .await
        .unwrap());
    assert!(store.member(&member.member_id).await.unwrap().is_some());
    assert!(store
        .remove_member(&member.member_id, MemberState::Ready)
        .await
        .unwrap());
    assert_eq!(store.member(&member.member_id).await.unwrap(), None);
    assert!(
        !store
            .remove_member(&member.member_id, MemberState::Ready)
            .await
            .unwrap(),
        "gone already"
    );
    assert_eq!(
        store.unclaimed(&member.pool, 10).await.unwrap(),
        vec![older, newer]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_binds_once_and_a_second_claim_writes_nothing() {
    let Some(store) = fresh_store("a_claim_binds_once").await else {
        return;
    };
    let member = ready_member(&store, 1_000).await;
    let first = creating_session(&store, "api:first").await;
    let (taken, next, events) = claim_of(&member, &first);
    assert_eq!(
        store
            .claim_member(&taken, &next, first.version, &events)
            .await
            .unwrap(),
        PoolClaim::Bound
    );
    assert_eq!(
        store.member(&member.member_id).await.unwrap(),
        Some(taken.clone())
    );
    let stored = store.load(&first.thread_id).await.unwrap().unwrap();
    assert_eq!(stored, next);
    assert_eq!(
        (stored.version, stored.status),
        (first.version + 1, Status::Active)
    );
    assert_eq!(
        stored.pool_member.as_deref(),
        Some(member.member_id.as_str())
    );
    let written = store.events_after(&first.thread_id, 0, 10).await.unwrap();
    assert_eq!(written.len(), 2, "{written:?}");
    assert_eq!(written[1], events[0]);
    assert!(
        store.unclaimed(&member.pool, 10).await.unwrap().is_empty(),
        "a claimed member is not listed"
    );

    // Another thread reaching for the same member: nothing of its write lands.
    let second = creating_session(&store, "api:second").await;
    let (taken2, next2, events2) = claim_of(&member, &second);
    assert_eq!(
        store
            .claim_member(&taken2, &next2, second.version, &events2)
            .await
            .unwrap(),
        PoolClaim::MemberTaken
    );
    assert_eq!(
        store.load(&second.thread_id).await.unwrap(),
        Some(second.clone())
    );
    assert_eq!(
        store
            .events_after(&second.thread_id, 0, 10)
            .await
            .unwrap()
            .len(),
        1,
        "only the creation event"
    );
    assert_eq!(store.member(&member.member_id).await.unwrap(), Some(taken));
    assert!(!store
        .remove_member(&member.member_id, MemberState::Ready)
        .await
        .unwrap());
    assert!(store
        .remove_member(&member.member_id, MemberState::Claimed)
        .await
        .unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_from_a_stale_session_is_fenced_and_leaves_the_member_ready() {
    let Some(store) = fresh_store("a_claim_from_a_stale_session_is_fenced").await else {
        return;
    };
    let member = ready_member(&store, 1_000).await;
    let read = creating_session(&store, "api:stale").await;
    // Someone else moves the thread on (its creation lease recovered, say).
    let mut moved = read.clone();
    moved.version += 1;
    moved.last_error = Some("moved on".into());
    store.save(&moved, read.version, &[]).await.unwrap();

    let (taken, next, events) = claim_of(&member, &read);
    assert_eq!(
        store
            .claim_member(&taken, &next, read.version, &events)
            .await
            .unwrap(),
        PoolClaim::SessionChanged
    );
    assert_eq!(
        store.member(&member.member_id).await.unwrap(),
        Some(member.clone())
    );
    assert_eq!(
        store.unclaimed(&member.pool, 10).await.unwrap(),
        vec![member]
    );
    assert_eq!(store.load(&read.thread_id).await.unwrap(), Some(moved));
    assert_eq!(
        store
            .events_after(&read.thread_id, 0, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_claims_bind_each_member_exactly_once() {
    let Some(store) = fresh_store("concurrent_claims_bind_each_member_exactly_once").await else {
        return;
    };
    let store = Arc::new(store);
    let mut members = Vec::new();
    for i in 0..8 {
        members.push(ready_member(&store, 1_000 + i).await);
    }
    let mut sessions = Vec::new();
    for i in 0..64 {
        sessions.push(creating_session(&store, &format!("api:race-{i}")).await);
    }
    let claims: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(i, session)| {
            let store = store.clone();
            let (taken, next, events) = claim_of(&members[i % members.len()], session);
            tokio::spawn(async move {
                let outcome = store
                    .claim_member(&taken, &next, next.version - 1, &events)
                    .await
                    .unwrap();
                (taken.member_id, next.thread_id, outcome)
            })
        })
        .collect();
    let mut bound: HashMap<String, ThreadId> = HashMap::new();
    let mut winners = HashSet::new();
    for claim in claims {
        let (member_id, thread_id, outcome) = claim.await.unwrap();
        match outcome {
            PoolClaim::Bound => {
                assert!(
                    bound.insert(member_id.clone(), thread_id.clone()).is_none(),
                    "member {member_id} bound twice"
                );
                winners.insert(thread_id);
            }
            PoolClaim::MemberTaken => {}
            PoolClaim::SessionChanged => panic!("no session moved, yet {thread_id} was fenced"),
        }
    }
    assert_eq!(bound.len(), 8, "every member bound once: {bound:?}");
    for member in &members {
        let stored = store.member(&member.member_id).await.unwrap().unwrap();
        assert_eq!(stored.state, MemberState::Claimed);
        assert_eq!(
            stored.claimed.map(|c| c.thread_id).as_ref(),
            bound.get(&member.member_id)
        );
    }
    for session in &sessions {
        let stored = store.load(&session.thread_id).await.unwrap().unwrap();
        if winners.contains(&session.thread_id) {
            assert_eq!(stored.version, session.version + 1);
            assert_eq!(stored.status, Status::Active);
        } else {
            assert_eq!(&stored, session, "a loser wrote nothing");
        }
    }
    assert!(store
        .unclaimed(&members[0].pool, 100)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listing_and_due_work_never_see_members() {
    let Some(store) = fresh_store("the_listing_and_due_work_never_see_members").await else {
        return;
    };
    let session = creating_session(&store, "api:only").await;
    assert!(session.next_action_at.is_some(), "a creating thread is due");
    let creating = PoolMember::creating(NetworkProfile::Restricted, Millis(1_000));
    store.add_member(&creating).await.unwrap();
    let ready = ready_member(&store, 1_000).await;
    let claimed = ready_member(&store, 1_000).await;
    let other = creating_session(&store, "api:other").await;
    let (taken, next, events) = claim_of(&claimed, &other);
    assert_eq!(
        store
            .claim_member(&taken, &next, other.version, &events)
            .await
            .unwrap(),
        PoolClaim::Bound
    );
    assert!(store.member(&ready.member_id).await.unwrap().is_some());

    let listed = store.list(100, None).await.unwrap();
    let ids: Vec<&str> = listed.items.iter().map(|s| s.thread_id.as_str()).collect();
    assert_eq!(ids, ["api:only", "api:other"]);
    assert_eq!(listed.next, None);

    let mut due = Vec::new();
    for shard in 0..store.shard_count() {
        let page = store.due(shard, Millis(i64::MAX), 100, None).await.unwrap();
        due.extend(page.items.into_iter().map(|s| s.thread_id.to_string()));
    }
    due.sort();
    let mut expected = vec!["api:only".to_owned()];
    if next.next_action_at.is_some() {
        expected.push("api:other".to_owned());
    }
    assert_eq!(due, expected);
}
