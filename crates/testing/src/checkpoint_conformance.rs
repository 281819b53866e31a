//! The checkpoint store conformance suite: every `CheckpointStore` adapter runs these, each on
//! a fresh store (`checkpoint_conformance_tests!`).

use std::sync::Arc;

use threadbox_core::domain::{
    Checkpoint, CheckpointCause, CheckpointId, CheckpointRetention, Millis, ThreadId,
};
use threadbox_core::ports::CheckpointStore;

fn thread(id: &str) -> ThreadId {
    ThreadId::parse(id).unwrap()
}

/// A checkpoint of `thread` taken at `at` holding `bytes`.
pub fn checkpoint(thread_id: &str, at: i64, bytes: u64) -> Checkpoint {
    Checkpoint {
        id: CheckpointId::generate(),
        thread_id: thread(thread_id),
        created_at: Millis(at),
        bytes,
        files: 3,
        label: None,
        cause: CheckpointCause::Turn,
    }
}

fn roomy() -> CheckpointRetention {
    CheckpointRetention::new(100, 1 << 40).unwrap()
}

fn times(checkpoints: &[Checkpoint]) -> Vec<i64> {
    checkpoints.iter().map(|c| c.created_at.0).collect()
}

pub async fn records_round_trip_newest_first_per_thread(store: Arc<dyn CheckpointStore>) {
    let labelled = Checkpoint {
        label: Some("before the refactor ✂".into()),
        cause: CheckpointCause::User,
        ..checkpoint("slack:T1:C1:1.2", 2_000, 4096)
    };
    let older = checkpoint("slack:T1:C1:1.2", 1_000, 0);
    let newer = checkpoint("slack:T1:C1:1.2", 3_000, u64::from(u32::MAX) * 4);
    let elsewhere = checkpoint("t-other", 5_000, 1);
    for c in [&labelled, &older, &newer, &elsewhere] {
        assert!(store.add(c, &roomy()).await.unwrap().is_empty());
    }
    let t = thread("slack:T1:C1:1.2");
    let listed = store.list(&t).await.unwrap();
    assert_eq!(listed, vec![newer.clone(), labelled.clone(), older.clone()]);
    assert_eq!(
        store.get(&t, &labelled.id).await.unwrap(),
        Some(labelled.clone())
    );
    assert_eq!(
        store.get(&t, &elsewhere.id).await.unwrap(),
        None,
        "another thread's checkpoint is unknown here"
    );
    assert_eq!(
        store.get(&t, &CheckpointId::generate()).await.unwrap(),
        None
    );
    assert!(store.list(&thread("t-none")).await.unwrap().is_empty());
    assert_eq!(
        store.list(&thread("t-other")).await.unwrap(),
        vec![elsewhere]
    );
}

pub async fn equal_times_are_ordered_by_id(store: Arc<dyn CheckpointStore>) {
    let mut same: Vec<Checkpoint> = (0..4).map(|_| checkpoint("t-1", 7_000, 1)).collect();
    for c in &same {
        store.add(c, &roomy()).await.unwrap();
    }
    same.sort_by(|a, b| b.id.cmp(&a.id));
    assert_eq!(store.list(&thread("t-1")).await.unwrap(), same);
}

pub async fn retention_keeps_the_last_n_oldest_dropped_first(store: Arc<dyn CheckpointStore>) {
    let three = CheckpointRetention::new(3, 1 << 40).unwrap();
    let all: Vec<Checkpoint> = (1..=5).map(|i| checkpoint("t-1", i * 1_000, 10)).collect();
    let mut dropped = Vec::new();
    for c in &all {
        dropped.extend(store.add(c, &three).await.unwrap());
    }
    assert_eq!(times(&dropped), vec![1_000, 2_000]);
    assert_eq!(
        times(&store.list(&thread("t-1")).await.unwrap()),
        vec![5_000, 4_000, 3_000]
    );
    let one = CheckpointRetention::new(1, 1 << 40).unwrap();
    let late = checkpoint("t-1", 500, 10);
    let dropped = store.add(&late, &one).await.unwrap();
    assert_eq!(
        times(&dropped),
        vec![3_000, 4_000, 5_000],
        "the new one stays even when it is the oldest; the rest go oldest first"
    );
    assert_eq!(store.list(&thread("t-1")).await.unwrap(), vec![late]);
}

pub async fn retention_keeps_within_the_byte_cap(store: Arc<dyn CheckpointStore>) {
    let mib = 1u64 << 20;
    let cap = CheckpointRetention::new(100, 10 * mib).unwrap();
    let a = checkpoint("t-1", 1_000, 4 * mib);
    let b = checkpoint("t-1", 2_000, 4 * mib);
    let c = checkpoint("t-1", 3_000, 3 * mib);
    let other = checkpoint("t-2", 1_500, 9 * mib);
    for x in [&a, &b, &other] {
        assert!(store.add(x, &cap).await.unwrap().is_empty());
    }
    assert_eq!(store.add(&c, &cap).await.unwrap(), vec![a.clone()]);
    assert_eq!(
        times(&store.list(&thread("t-1")).await.unwrap()),
        vec![3_000, 2_000]
    );
    let big = checkpoint("t-1", 4_000, 12 * mib);
    assert_eq!(
        store.add(&big, &cap).await.unwrap(),
        vec![b, c],
        "over the cap alone, it still stays (the caller refuses such a one before taking it)"
    );
    assert_eq!(store.list(&thread("t-1")).await.unwrap(), vec![big]);
    assert_eq!(
        store.list(&thread("t-2")).await.unwrap(),
        vec![other],
        "each thread's cap is its own"
    );
}

pub async fn remove_forgets_one_and_answers_what_it_removed(store: Arc<dyn CheckpointStore>) {
    let a = checkpoint("t-1", 1_000, 1);
    let b = checkpoint("t-1", 2_000, 1);
    store.add(&a, &roomy()).await.unwrap();
    store.add(&b, &roomy()).await.unwrap();
    let t = thread("t-1");
    assert_eq!(
        store.remove(&thread("t-2"), &a.id).await.unwrap(),
        None,
        "another thread cannot remove it"
    );
    assert_eq!(store.remove(&t, &a.id).await.unwrap(), Some(a.clone()));
    assert_eq!(
        store.remove(&t, &a.id).await.unwrap(),
        None,
        "removing twice is fine"
    );
    assert_eq!(store.get(&t, &a.id).await.unwrap(), None);
    assert_eq!(store.list(&t).await.unwrap(), vec![b.clone()]);
    assert_eq!(store.remove(&t, &b.id).await.unwrap(), Some(b));
    assert!(store.list(&t).await.unwrap().is_empty());
    let again = checkpoint("t-1", 3_000, 1);
    store.add(&again, &roomy()).await.unwrap();
    assert_eq!(store.list(&t).await.unwrap(), vec![again]);
}

pub async fn concurrent_adds_all_land(store: Arc<dyn CheckpointStore>) {
    let all: Vec<Checkpoint> = (1..=12).map(|i| checkpoint("t-1", i * 10, 1)).collect();
    let adds = all.iter().map(|c| {
        let store = store.clone();
        let c = c.clone();
        tokio::spawn(async move { store.add(&c, &roomy()).await })
    });
    for add in futures::future::join_all(adds).await {
        assert!(add.unwrap().unwrap().is_empty());
    }
    let mut expected = all;
    expected.reverse();
    assert_eq!(store.list(&thread("t-1")).await.unwrap(), expected);

    // Racing under a limit: whatever the interleaving, the thread ends within it, and what
    // stays and what was dropped are the whole set between them.
    let four = CheckpointRetention::new(4, 1 << 40).unwrap();
    let more: Vec<Checkpoint> = (1..=8).map(|i| checkpoint("t-2", i * 10, 1)).collect();
    let adds = more.iter().map(|c| {
        let store = store.clone();
        let c = c.clone();
        tokio::spawn(async move { store.add(&c, &four).await })
    });
    let mut dropped = Vec::new();
    for add in futures::future::join_all(adds).await {
        dropped.extend(add.unwrap().unwrap());
    }
    let kept = store.list(&thread("t-2")).await.unwrap();
    assert!(kept.len() <= 4, "{} kept", kept.len());
    let mut ids: Vec<_> = kept.iter().chain(&dropped).map(|c| c.id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 8, "every checkpoint is kept or reported dropped");
}
