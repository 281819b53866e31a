//! `SqliteQueue` against the queue conformance suite, plus what only the embedded queue promises:
//! several handles (processes) on one file, several named queues per file, durability across
//! reopening, a configurable dedup window and clear errors for a bad file.

use std::time::Duration;

use tempfile::TempDir;
use threadbox_core::ports::{DurableQueue, OutgoingMessage, QueueError};
use threadbox_sqlite::{QueueConfig, SqliteQueue};
use threadbox_testing::queue_conformance as suite;

/// Short enough to keep the suite fast, long enough that a loaded 2-core machine is not racing it.
const SHORT: Duration = Duration::from_millis(200);
const LONG: Duration = Duration::from_secs(60);
const MAX_RECEIVES: u32 = 3;

/// A fresh queue on its own temp file; keep the `TempDir` alive for the test's length.
fn fresh(config: QueueConfig) -> (TempDir, SqliteQueue) {
    let dir = tempfile::tempdir().expect("temp dir");
    let queue = SqliteQueue::open(dir.path().join("queue.db"), "work", config).expect("open");
    (dir, queue)
}

fn fresh_default() -> (TempDir, SqliteQueue) {
    fresh(QueueConfig::default())
}

fn message(group: &str, dedup: &str, body: &str) -> OutgoingMessage {
    OutgoingMessage {
        group_id: group.to_owned(),
        dedup_id: dedup.to_owned(),
        body: body.to_owned(),
    }
}

// ---- the conformance suite ----

#[tokio::test]
async fn conformance_send_receive_ack_round_trip() {
    let (_dir, q) = fresh_default();
    suite::send_receive_ack_round_trip(&q).await;
}

#[tokio::test]
async fn conformance_duplicate_dedup_id_is_dropped() {
    let (_dir, q) = fresh_default();
    suite::duplicate_dedup_id_is_dropped(&q).await;
}

#[tokio::test]
async fn conformance_in_flight_message_blocks_only_its_group() {
    let (_dir, q) = fresh_default();
    suite::in_flight_message_blocks_only_its_group(&q).await;
}

#[tokio::test]
async fn conformance_visibility_timeout_redelivers_with_higher_receive_count() {
    let (_dir, q) = fresh_default();
    suite::visibility_timeout_redelivers_with_higher_receive_count(&q, SHORT).await;
}

#[tokio::test]
async fn conformance_stale_receipt_is_rejected() {
    let (_dir, q) = fresh_default();
    suite::stale_receipt_is_rejected(&q, SHORT).await;
}

#[tokio::test]
async fn conformance_release_makes_message_visible_at_once() {
    let (_dir, q) = fresh_default();
    suite::release_makes_message_visible_at_once(&q).await;
}

#[tokio::test]
async fn conformance_dead_letter_after_max_receives() {
    let (_dir, q) = fresh(QueueConfig {
        max_receives: MAX_RECEIVES,
        ..QueueConfig::default()
    });
    suite::dead_letter_after_max_receives(&q, MAX_RECEIVES, SHORT).await;
}

#[tokio::test]
async fn conformance_dead_letter_after_a_single_receive() {
    let (_dir, q) = fresh(QueueConfig {
        max_receives: 1,
        ..QueueConfig::default()
    });
    suite::dead_letter_after_max_receives(&q, 1, SHORT).await;
}

#[tokio::test]
async fn conformance_bad_input_is_rejected_and_nothing_written() {
    let (_dir, q) = fresh_default();
    suite::bad_input_is_rejected_and_nothing_written(&q).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_concurrent_receivers_on_one_handle() {
    let (_dir, q) = fresh_default();
    suite::concurrent_receivers_deliver_each_message_once(&[&q]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_concurrent_receivers_on_two_handles_to_one_file() {
    let (dir, a) = fresh_default();
    // A second connection to the same file stands in for a second process.
    let b = SqliteQueue::open(dir.path().join("queue.db"), "work", QueueConfig::default())
        .expect("open a second handle");
    suite::concurrent_receivers_deliver_each_message_once(&[&a, &b]).await;
}

// ---- what only the embedded queue promises ----

/// The adapter's documented choice: one receive returns at most one message per group, and that
/// holds with a zero visibility too (the taken message is visible again, but not within the call).
#[tokio::test]
async fn one_receive_returns_at_most_one_message_per_group() {
    let (_dir, q) = fresh_default();
    q.send(&[
        message("a", "a1", "a1"),
        message("a", "a2", "a2"),
        message("b", "b1", "b1"),
        message("a", "a3", "a3"),
    ])
    .await
    .unwrap();
    let got = q.receive(10, Duration::ZERO).await.unwrap();
    let bodies: Vec<_> = got.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(bodies, ["a1", "b1"]);
    assert!(got.iter().all(|m| m.receive_count == 1));
    // Zero visibility: both are visible again at once, still at the head of their groups.
    let again = q.receive(10, LONG).await.unwrap();
    let bodies: Vec<_> = again.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(bodies, ["a1", "b1"]);
    assert!(again.iter().all(|m| m.receive_count == 2));
}

/// Dead-lettering a head makes the receive look again for newly exposed heads; with a zero
/// visibility the messages it already took are still visible then, and must not come twice.
#[tokio::test]
async fn a_receive_that_dead_letters_still_returns_each_message_once() {
    let (_dir, q) = fresh(QueueConfig {
        max_receives: 2,
        ..QueueConfig::default()
    });
    q.send(&[
        message("a", "poison", "poison"),
        message("a", "a2", "a2"),
        message("b", "b1", "b1"),
    ])
    .await
    .unwrap();
    for _ in 0..2 {
        let poison = q.receive(1, LONG).await.unwrap().remove(0);
        assert_eq!(poison.body, "poison");
        q.release(&poison.receipt).await.unwrap();
    }

    let got = q.receive(10, Duration::ZERO).await.unwrap();
    let mut bodies: Vec<_> = got.iter().map(|m| m.body.as_str()).collect();
    bodies.sort_unstable();
    assert_eq!(bodies, ["a2", "b1"]);
    assert!(got.iter().all(|m| m.receive_count == 1), "{got:?}");
    let dead = q.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].body, "poison");
}

#[tokio::test]
async fn two_handles_on_one_file_share_one_queue() {
    let (dir, a) = fresh_default();
    let b = SqliteQueue::open(dir.path().join("queue.db"), "work", QueueConfig::default()).unwrap();
    a.send(&[message("g", "d1", "one"), message("h", "d2", "two")])
        .await
        .unwrap();
    // The dedup memory is shared too.
    b.send(&[message("g", "d1", "duplicate via b")])
        .await
        .unwrap();

    let got_b = b.receive(1, LONG).await.unwrap();
    assert_eq!(got_b.len(), 1);
    assert_eq!(got_b[0].body, "one");
    let got_a = a.receive(10, LONG).await.unwrap();
    let bodies: Vec<_> = got_a.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(bodies, ["two"], "what b holds is invisible to a");

    // A receipt is good on any handle: acks travel between processes.
    a.ack(&got_b[0].receipt).await.unwrap();
    b.ack(&got_a[0].receipt).await.unwrap();
    assert!(a.receive(10, Duration::ZERO).await.unwrap().is_empty());
    assert!(b.receive(10, Duration::ZERO).await.unwrap().is_empty());
}

#[tokio::test]
async fn named_queues_in_one_file_are_independent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("threadbox.db");
    let lifecycle = SqliteQueue::open(&path, "lifecycle", QueueConfig::default()).unwrap();
    let work = SqliteQueue::open(&path, "work", QueueConfig::default()).unwrap();
    lifecycle
        .send(&[message("t1", "same-id", "event")])
        .await
        .unwrap();
    // The same dedup id in another queue is a different message.
    work.send(&[message("t1", "same-id", "command")])
        .await
        .unwrap();
    let from_work = work.receive(10, LONG).await.unwrap();
    assert_eq!(from_work.len(), 1);
    assert_eq!(from_work[0].body, "command");
    // Group t1 is in flight in "work" only; "lifecycle" still delivers it.
    let from_lifecycle = lifecycle.receive(10, LONG).await.unwrap();
    assert_eq!(from_lifecycle.len(), 1);
    assert_eq!(from_lifecycle[0].body, "event");
    // A receipt of one queue means nothing to another.
    assert!(matches!(
        lifecycle.ack(&from_work[0].receipt).await,
        Err(QueueError::StaleReceipt(_))
    ));
    work.ack(&from_work[0].receipt).await.unwrap();
}

#[tokio::test]
async fn messages_survive_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    {
        let q = SqliteQueue::open(&path, "work", QueueConfig::default()).unwrap();
        q.send(&[message("g", "d1", "one"), message("g", "d2", "two")])
            .await
            .unwrap();
        let held = q.receive(1, LONG).await.unwrap();
        assert_eq!(held[0].body, "one");
    }
    let q = SqliteQueue::open(&path, "work", QueueConfig::default()).unwrap();
    // Dedup memory survives too: this one is dropped, though its group is free.
    q.send(&[message("other", "d1", "duplicate")])
        .await
        .unwrap();
    assert!(
        q.receive(10, LONG).await.unwrap().is_empty(),
        "the in-flight message still blocks its group after a restart"
    );
}

#[tokio::test]
async fn dedup_id_is_accepted_again_after_the_window() {
    let (_dir, q) = fresh(QueueConfig {
        // Wide enough that the second send surely lands inside it, even on a loaded machine.
        dedup_window: Duration::from_millis(500),
        ..QueueConfig::default()
    });
    q.send(&[message("g", "d", "first")]).await.unwrap();
    q.send(&[message("g", "d", "inside the window")])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    q.send(&[message("g", "d", "after the window")])
        .await
        .unwrap();
    let mut bodies = Vec::new();
    loop {
        let got = q.receive(10, LONG).await.unwrap();
        if got.is_empty() {
            break;
        }
        for m in got {
            bodies.push(m.body.clone());
            q.ack(&m.receipt).await.unwrap();
        }
    }
    assert_eq!(bodies, ["first", "after the window"]);
}

#[tokio::test]
async fn ack_and_release_spend_the_receipt() {
    let (_dir, q) = fresh_default();
    q.send(&[message("g", "d1", "one"), message("g", "d2", "two")])
        .await
        .unwrap();
    let one = q.receive(1, LONG).await.unwrap().remove(0);
    q.release(&one.receipt).await.unwrap();
    assert!(
        matches!(q.ack(&one.receipt).await, Err(QueueError::StaleReceipt(_))),
        "a released message's receipt is given back with it"
    );
    let one = q.receive(1, LONG).await.unwrap().remove(0);
    q.ack(&one.receipt).await.unwrap();
    assert!(
        matches!(q.ack(&one.receipt).await, Err(QueueError::StaleReceipt(_))),
        "a second ack finds nothing"
    );
}

#[tokio::test]
async fn an_expired_receipt_still_acks_until_someone_else_receives() {
    let (_dir, q) = fresh_default();
    q.send(&[message("g", "d", "slow work")]).await.unwrap();
    let held = q
        .receive(1, Duration::from_millis(50))
        .await
        .unwrap()
        .remove(0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    q.ack(&held.receipt).await.unwrap();
    assert!(q.receive(10, LONG).await.unwrap().is_empty());
}

#[tokio::test]
async fn dead_letters_are_listed_oldest_first_and_limited() {
    let (_dir, q) = fresh(QueueConfig {
        max_receives: 1,
        ..QueueConfig::default()
    });
    q.send(&[message("a", "a1", "a1"), message("b", "b1", "b1")])
        .await
        .unwrap();
    for m in q.receive(10, LONG).await.unwrap() {
        q.release(&m.receipt).await.unwrap();
    }
    assert!(q.receive(10, LONG).await.unwrap().is_empty());
    let dead = q.dead_letters(10).await.unwrap();
    let bodies: Vec<_> = dead.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(bodies, ["a1", "b1"]);
    assert!(dead.iter().all(|m| m.receive_count == 1));
    assert_eq!(q.dead_letters(1).await.unwrap().len(), 1);
    assert!(q.dead_letters(0).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_corrupt_database_file_names_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corrupt-queue.db");
    std::fs::write(&path, vec![0x5a_u8; 16 * 1024]).unwrap();
    match SqliteQueue::open(&path, "work", QueueConfig::default()) {
        Err(QueueError::Unavailable(why)) => {
            assert!(why.contains(&path.display().to_string()), "{why}")
        }
        other => panic!("expected Unavailable naming the path, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_settings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queue.db");
    assert!(matches!(
        SqliteQueue::open(&path, "", QueueConfig::default()),
        Err(QueueError::Rejected(_))
    ));
    let zero = QueueConfig {
        max_receives: 0,
        ..QueueConfig::default()
    };
    match SqliteQueue::open(&path, "work", zero) {
        Err(QueueError::Rejected(why)) => assert!(why.contains("max_receives"), "{why}"),
        other => panic!("expected Rejected, got {other:?}"),
    }
}

#[tokio::test]
async fn a_queue_can_share_an_open_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = threadbox_sqlite::Database::open(
        dir.path().join("shared.db"),
        "CREATE TABLE IF NOT EXISTS other (x)",
    )
    .unwrap();
    let q = SqliteQueue::new(db, "lifecycle", QueueConfig::default())
        .await
        .unwrap();
    suite::send_receive_ack_round_trip(&q).await;
}
