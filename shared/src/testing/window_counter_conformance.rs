//! The window counter conformance suite: every `WindowCounter` adapter runs these, from the one
//! list in `suites.rs`.

use std::sync::Arc;

use crate::domain::Millis;
use crate::ports::WindowCounter;

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
