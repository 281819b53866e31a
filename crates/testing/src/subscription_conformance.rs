//! The subscription store conformance suite: every `SubscriptionStore` adapter runs these, each
//! on a fresh store.

use std::sync::Arc;

use super::eventually::eventually;

use threadbox_core::domain::{Millis, ThreadId, ThreadScope};
use threadbox_core::ports::{Connection, SubscriptionStore};

/// Where `connection`'s subscription to `thread` stands (it must have one).
async fn position(store: &dyn SubscriptionStore, connection: &str, thread: &ThreadId) -> u64 {
    let subscription = store.subscription(connection, thread).await.unwrap();
    subscription.expect("subscribed").last_seq
}

fn thread(id: &str) -> ThreadId {
    ThreadId::parse(id).unwrap()
}

/// A connection whose token allows every thread, expiring an hour after `Millis(1_000)`.
pub fn connection(id: &str) -> Connection {
    Connection {
        connection_id: id.to_owned(),
        scope: ThreadScope::Any,
        expires_at: Millis(3_601_000),
        connected_at: Millis(1_000),
    }
}

pub async fn connections_are_recorded_and_removed_with_their_subscriptions(
    store: Arc<dyn SubscriptionStore>,
) {
    let only = Connection {
        scope: ThreadScope::only([thread("t-a"), thread("slack:T1:C1:1.2")]).unwrap(),
        ..connection("c1")
    };
    store.add_connection(&only).await.unwrap();
    assert_eq!(store.connection("c1").await.unwrap(), Some(only));
    assert_eq!(store.connection("nope").await.unwrap(), None);

    assert!(store.subscribe("c1", &thread("t-a"), 0).await.unwrap());
    assert!(store.subscribe("c1", &thread("t-b"), 4).await.unwrap());
    let mine = store.subscriptions_of("c1").await.unwrap();
    assert_eq!(
        mine.iter()
            .map(|s| (s.thread_id.as_str(), s.last_seq, s.expires_at))
            .collect::<Vec<_>>(),
        vec![("t-a", 0, Millis(3_601_000)), ("t-b", 4, Millis(3_601_000))]
    );

    store.remove_connection("c1").await.unwrap();
    assert_eq!(store.connection("c1").await.unwrap(), None);
    assert!(store.subscriptions_of("c1").await.unwrap().is_empty());
    let t_a = thread("t-a");
    let left = eventually(
        || store.subscribers(&t_a),
        |r| r.as_ref().is_ok_and(Vec::is_empty),
    )
    .await;
    assert!(left.unwrap().is_empty());
    store
        .remove_connection("c1")
        .await
        .expect("removing twice is fine");
}

pub async fn subscribe_needs_a_connection_and_resubscribing_moves_the_position(
    store: Arc<dyn SubscriptionStore>,
) {
    let t = thread("t-1");
    assert!(
        !store.subscribe("ghost", &t, 0).await.unwrap(),
        "no connection, no subscription"
    );
    assert!(store.subscription("ghost", &t).await.unwrap().is_none());

    store.add_connection(&connection("c1")).await.unwrap();
    assert!(store.subscribe("c1", &t, 7).await.unwrap());
    assert_eq!(position(&*store, "c1", &t).await, 7);
    assert!(store.subscribe("c1", &t, 2).await.unwrap());
    assert_eq!(
        position(&*store, "c1", &t).await,
        2,
        "a new subscribe sets the position, back as well as forward"
    );
    assert_eq!(store.subscriptions_of("c1").await.unwrap().len(), 1);

    assert!(store.unsubscribe("c1", &t).await.unwrap());
    assert!(!store.unsubscribe("c1", &t).await.unwrap());
    assert!(store.subscription("c1", &t).await.unwrap().is_none());
}

pub async fn subscribers_are_found_by_thread(store: Arc<dyn SubscriptionStore>) {
    for id in ["c3", "c1", "c2"] {
        store.add_connection(&connection(id)).await.unwrap();
    }
    let (a, b) = (thread("t-a"), thread("t-b"));
    store.subscribe("c3", &a, 1).await.unwrap();
    store.subscribe("c1", &a, 0).await.unwrap();
    store.subscribe("c2", &b, 0).await.unwrap();
    // `subscribers` reads an index (DynamoDB's `by_thread` GSI): wait for it to show the writes.
    let on_a = eventually(
        || store.subscribers(&a),
        |r| r.as_ref().is_ok_and(|v| v.len() == 2),
    )
    .await
    .unwrap();
    assert_eq!(
        on_a.iter()
            .map(|s| (s.connection_id.as_str(), s.last_seq))
            .collect::<Vec<_>>(),
        vec![("c1", 0), ("c3", 1)]
    );
    assert!(on_a.iter().all(|s| s.thread_id == a));
    let on_b = eventually(
        || store.subscribers(&b),
        |r| r.as_ref().is_ok_and(|v| v.len() == 1),
    );
    assert_eq!(on_b.await.unwrap().len(), 1);
    assert!(store
        .subscribers(&thread("t-none"))
        .await
        .unwrap()
        .is_empty());
}

pub async fn advance_is_a_compare_and_set(store: Arc<dyn SubscriptionStore>) {
    let t = thread("t-1");
    store.add_connection(&connection("c1")).await.unwrap();
    store.subscribe("c1", &t, 3).await.unwrap();
    assert!(!store.advance("c1", &t, 2, 3).await.unwrap(), "not at 2");
    assert!(store.advance("c1", &t, 3, 4).await.unwrap());
    assert!(
        !store.advance("c1", &t, 3, 4).await.unwrap(),
        "already moved"
    );
    assert_eq!(position(&*store, "c1", &t).await, 4);
    assert!(
        store.advance("c1", &t, 4, 3).await.unwrap(),
        "moving back (undoing a failed send) is the same compare-and-set"
    );
    assert!(
        !store.advance("c1", &thread("t-2"), 0, 1).await.unwrap(),
        "no subscription, nothing to move"
    );
    store.remove_connection("c1").await.unwrap();
    assert!(!store.advance("c1", &t, 3, 4).await.unwrap());
}

pub async fn advance_many_moves_only_the_named_and_up_to_date(store: Arc<dyn SubscriptionStore>) {
    let (t, other) = (thread("t-1"), thread("t-2"));
    for (id, at) in [
        ("c-behind", 1),
        ("c-at-a", 4),
        ("c-ahead", 9),
        ("c-at-b", 4),
        ("c-at-unnamed", 4),
    ] {
        store.add_connection(&connection(id)).await.unwrap();
        store.subscribe(id, &t, at).await.unwrap();
    }
    store.subscribe("c-behind", &other, 4).await.unwrap();
    let named: Vec<String> = ["c-at-b", "c-behind", "c-ahead", "c-at-a", "c-unknown"]
        .map(String::from)
        .to_vec();
    let moved = store.advance_many(&t, &named, 4, 5).await.unwrap();
    assert_eq!(moved, vec!["c-at-a", "c-at-b"]);
    let expected = vec![
        ("c-ahead".to_owned(), 9),
        ("c-at-a".to_owned(), 5),
        ("c-at-b".to_owned(), 5),
        ("c-at-unnamed".to_owned(), 4),
        ("c-behind".to_owned(), 1),
    ];
    let positions = || async {
        store
            .subscribers(&t)
            .await
            .unwrap()
            .into_iter()
            .map(|s| (s.connection_id, s.last_seq))
            .collect::<Vec<_>>()
    };
    let now = eventually(positions, |now| *now == expected).await;
    assert_eq!(now, expected);
    assert_eq!(
        position(&*store, "c-behind", &other).await,
        4,
        "another thread's subscription is untouched"
    );
    assert!(store
        .advance_many(&t, &named, 4, 5)
        .await
        .unwrap()
        .is_empty());
    assert!(store.advance_many(&t, &[], 4, 5).await.unwrap().is_empty());
}

pub async fn concurrent_advances_have_one_winner(store: Arc<dyn SubscriptionStore>) {
    let t = thread("t-race");
    store.add_connection(&connection("c1")).await.unwrap();
    store.subscribe("c1", &t, 0).await.unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            let t = t.clone();
            tokio::spawn(async move {
                if i % 2 == 0 {
                    usize::from(store.advance("c1", &t, 0, 1).await.unwrap())
                } else {
                    let ids = ["c1".to_owned()];
                    store.advance_many(&t, &ids, 0, 1).await.unwrap().len()
                }
            })
        })
        .collect();
    let mut wins = 0;
    for task in tasks {
        wins += task.await.unwrap();
    }
    assert_eq!(wins, 1, "exactly one caller owns sending seq 1");
}

pub async fn reusing_a_connection_id_starts_clean(store: Arc<dyn SubscriptionStore>) {
    let t = thread("t-1");
    store.add_connection(&connection("c1")).await.unwrap();
    store.subscribe("c1", &t, 5).await.unwrap();
    let again = Connection {
        expires_at: Millis(9_000_000),
        ..connection("c1")
    };
    store.add_connection(&again).await.unwrap();
    assert_eq!(store.connection("c1").await.unwrap(), Some(again));
    assert!(
        store.subscriptions_of("c1").await.unwrap().is_empty(),
        "a new connection under an old id inherits nothing"
    );
}
