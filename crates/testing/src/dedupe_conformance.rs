//! The dedupe conformance suite: every `DedupeStore` adapter runs these.

use std::sync::Arc;
use std::time::Duration;

use threadbox_core::ports::DedupeStore;

pub async fn the_first_claim_wins_and_repeats_are_duplicates(store: Arc<dyn DedupeStore>) {
    assert!(store
        .claim("slack:Ev1", Duration::from_secs(60))
        .await
        .unwrap());
    assert!(!store
        .claim("slack:Ev1", Duration::from_secs(60))
        .await
        .unwrap());
    assert!(store.contains("slack:Ev1").await.unwrap());
    assert!(!store.contains("slack:Ev2").await.unwrap());
}

pub async fn released_and_expired_keys_can_be_claimed_again(store: Arc<dyn DedupeStore>) {
    assert!(store
        .claim("k-release", Duration::from_secs(60))
        .await
        .unwrap());
    store.release("k-release").await.unwrap();
    assert!(!store.contains("k-release").await.unwrap());
    assert!(store
        .claim("k-release", Duration::from_secs(60))
        .await
        .unwrap());

    assert!(store
        .claim("k-expire", Duration::from_millis(1))
        .await
        .unwrap());
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(
        !store.contains("k-expire").await.unwrap(),
        "an expired key is not contained"
    );
    assert!(
        store
            .claim("k-expire", Duration::from_secs(60))
            .await
            .unwrap(),
        "and can be claimed"
    );
}

pub async fn concurrent_claims_have_exactly_one_winner(store: Arc<dyn DedupeStore>) {
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .claim("k-race", Duration::from_secs(60))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut wins = 0;
    for t in tasks {
        wins += usize::from(t.await.unwrap());
    }
    assert_eq!(wins, 1);
}
