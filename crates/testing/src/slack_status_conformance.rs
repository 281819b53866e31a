//! The Slack status store conformance suite: every `SlackStatusStore` adapter runs these.

use std::sync::Arc;

use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{SlackStatusStore, StatusMessage};

fn at(seq: u64, ts: &str) -> StatusMessage {
    StatusMessage {
        channel: "C1".into(),
        ts: ts.into(),
        seq,
    }
}

pub async fn a_later_event_replaces_an_earlier_one_never_the_reverse(
    store: Arc<dyn SlackStatusStore>,
) {
    let thread = ThreadId::parse("slack:T1:C1:1.000001").unwrap();
    assert_eq!(store.get(&thread).await.unwrap(), None);
    assert!(store.put(&thread, &at(2, "9.1")).await.unwrap());
    assert!(!store.put(&thread, &at(1, "9.2")).await.unwrap(), "older");
    assert_eq!(store.get(&thread).await.unwrap(), Some(at(2, "9.1")));
    assert!(
        store.put(&thread, &at(2, "9.3")).await.unwrap(),
        "the same event, re-posted under a new ts"
    );
    assert!(store.put(&thread, &at(5, "9.3")).await.unwrap());
    assert_eq!(store.get(&thread).await.unwrap(), Some(at(5, "9.3")));

    let other = ThreadId::parse("slack:T1:C1:2.000002").unwrap();
    assert_eq!(store.get(&other).await.unwrap(), None, "threads are apart");
}

pub async fn racing_writers_leave_the_latest_event(store: Arc<dyn SlackStatusStore>) {
    let thread = ThreadId::parse("slack:T1:C2:3.000003").unwrap();
    let tasks: Vec<_> = (1..=16u64)
        .map(|seq| {
            let (store, thread) = (store.clone(), thread.clone());
            tokio::spawn(async move { store.put(&thread, &at(seq, &format!("9.{seq}"))).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(store.get(&thread).await.unwrap(), Some(at(16, "9.16")));
}
