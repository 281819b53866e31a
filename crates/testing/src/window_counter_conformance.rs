//! The window counter conformance suite: every `WindowCounter` adapter runs these, from the one
//! list in `suites.rs`.

use std::sync::Arc;

use threadbox_core::domain::Millis;
use threadbox_core::ports::WindowCounter;

const NOW: Millis = Millis(1_767_225_600_000);

fn later() -> Millis {
    NOW.plus(std::time::Duration::from_secs(60))
}

pub async fn counts_start_at_one_and_each_key_counts_alone(counter: Arc<dyn WindowCounter>) {
    for expected in 1..=3 {
        let n = counter.increment("rate:a:1", later(), NOW).await.unwrap();
        assert_eq!(n, expected);
    }
    assert_eq!(
        counter.increment("rate:b:1", later(), NOW).await.unwrap(),
        1
    );
    assert_eq!(
        counter.increment("rate:a:2", later(), NOW).await.unwrap(),
        1,
        "a new window"
    );
    assert_eq!(
        counter.increment("rate:a:1", later(), NOW).await.unwrap(),
        4
    );
}

pub async fn concurrent_increments_each_get_their_own_number(counter: Arc<dyn WindowCounter>) {
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let counter = counter.clone();
            tokio::spawn(async move { counter.increment("rate:race", later(), NOW).await })
        })
        .collect();
    let mut seen = Vec::new();
    for task in tasks {
        seen.push(task.await.unwrap().unwrap());
    }
    seen.sort_unstable();
    assert_eq!(seen, (1..=32).collect::<Vec<u64>>());
}

/// A capped take under a storm: 40 concurrent takes of 7 slots give exactly 7 slots, numbered
/// 1 to 7; the refused ones write nothing, so a slot given back is the next taker's.
pub async fn capped_takes_give_exactly_the_cap_and_refusals_cost_nothing(
    counter: Arc<dyn WindowCounter>,
) {
    const CAP: u64 = 7;
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let counter = counter.clone();
            tokio::spawn(async move { counter.take_below("cap:storm", CAP, later(), NOW).await })
        })
        .collect();
    let mut taken = Vec::new();
    for task in tasks {
        if let Some(n) = task.await.unwrap().unwrap() {
            taken.push(n);
        }
    }
    taken.sort_unstable();
    assert_eq!(taken, (1..=CAP).collect::<Vec<u64>>());
    let take = || {
        let counter = counter.clone();
        async move {
            counter
                .take_below("cap:storm", CAP, later(), NOW)
                .await
                .unwrap()
        }
    };
    assert_eq!(take().await, None);
    // One given back: exactly one more take succeeds, then the cap holds again.
    assert_eq!(
        counter.add("cap:storm", -1, later(), NOW).await.unwrap(),
        CAP - 1
    );
    assert_eq!(take().await, Some(CAP));
    assert_eq!(take().await, None);
    assert_eq!(
        counter
            .take_below("cap:none", 0, later(), NOW)
            .await
            .unwrap(),
        None,
        "a cap of zero takes nothing"
    );
}

/// Adds return the total; a give-back never takes a count below zero.
pub async fn adds_total_and_never_go_below_zero(counter: Arc<dyn WindowCounter>) {
    assert_eq!(
        counter.add("sum:a", 1_500, later(), NOW).await.unwrap(),
        1_500
    );
    assert_eq!(
        counter.add("sum:a", 250, later(), NOW).await.unwrap(),
        1_750
    );
    assert_eq!(counter.add("sum:a", 0, later(), NOW).await.unwrap(), 1_750);
    assert_eq!(
        counter.add("sum:a", -750, later(), NOW).await.unwrap(),
        1_000
    );
    assert_eq!(
        counter.add("sum:a", -5_000, later(), NOW).await.unwrap(),
        1_000,
        "a give-back larger than the count is not applied"
    );
    assert_eq!(counter.add("sum:b", -1, later(), NOW).await.unwrap(), 0);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let counter = counter.clone();
            tokio::spawn(async move { counter.add("sum:race", 10, later(), NOW).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(counter.add("sum:race", 0, later(), NOW).await.unwrap(), 160);
}

/// Raises report how much they rose, so concurrent raisers charge each unit once: the rises sum
/// to the highest target.
pub async fn raises_rise_by_each_unit_once(counter: Arc<dyn WindowCounter>) {
    assert_eq!(
        counter.raise("high:a", 100, later(), NOW).await.unwrap(),
        100
    );
    assert_eq!(counter.raise("high:a", 80, later(), NOW).await.unwrap(), 0);
    assert_eq!(counter.raise("high:a", 100, later(), NOW).await.unwrap(), 0);
    assert_eq!(
        counter.raise("high:a", 130, later(), NOW).await.unwrap(),
        30
    );
    assert_eq!(
        counter.raise("high:zero", 0, later(), NOW).await.unwrap(),
        0
    );
    let tasks: Vec<_> = (1..=24u64)
        .map(|i| {
            let counter = counter.clone();
            tokio::spawn(async move { counter.raise("high:race", i * 10, later(), NOW).await })
        })
        .collect();
    let mut risen = 0;
    for task in tasks {
        risen += task.await.unwrap().unwrap();
    }
    assert_eq!(risen, 240);
    assert_eq!(
        counter.add("high:race", 0, later(), NOW).await.unwrap(),
        240
    );
}
