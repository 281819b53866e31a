//! The fanout `deliver` module's tests that need a real store (SQLite) and the test support
//! crate, which depend on the core and so cannot be its unit tests.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use threadbox_core::domain::*;
use threadbox_core::fanout::*;
use threadbox_core::ports::{DedupeStore, DeliveryError, FanoutTarget, RecordOutcome};
use threadbox_sqlite::SqliteDedupe;

/// Records what it was given and answers with the queued results (then `Ok`).
#[derive(Default)]
struct Scripted {
    name: &'static str,
    got: Mutex<Vec<String>>,
    answers: Mutex<Vec<Result<(), DeliveryError>>>,
}

impl Scripted {
    fn named(name: &'static str) -> Arc<Self> {
        Arc::new(Self {
            name,
            ..Self::default()
        })
    }
    fn answer(&self, result: Result<(), DeliveryError>) {
        self.answers.lock().unwrap().push(result);
    }
    fn got(&self) -> Vec<String> {
        self.got.lock().unwrap().clone()
    }
}

#[async_trait]
impl FanoutTarget for Scripted {
    fn name(&self) -> &str {
        self.name
    }
    async fn deliver(&self, event: &LifecycleEvent) -> Result<(), DeliveryError> {
        let answer = {
            let mut answers = self.answers.lock().unwrap();
            if answers.is_empty() {
                Ok(())
            } else {
                answers.remove(0)
            }
        };
        if answer.is_ok() {
            self.got.lock().unwrap().push(event.event_id.clone());
        }
        answer
    }
}

fn event(id: &str, thread: &str) -> LifecycleEvent {
    LifecycleEvent {
        event_id: id.to_owned(),
        thread_id: ThreadId::parse(thread).unwrap(),
        seq: 1,
        generation: 1,
        from: Some(Status::Creating),
        to: Status::Active,
        cause: Cause::User,
        at: Millis(0),
        sandbox_id: Some("sb-1".into()),
        detail: None,
    }
}

fn dedupe() -> (Arc<dyn DedupeStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteDedupe::open(dir.path().join("d.db")).unwrap();
    (Arc::new(store), dir)
}

#[tokio::test]
async fn each_target_sees_each_event_once_across_fanouts() {
    let (store, _dir) = dedupe();
    let a = Scripted::named("a");
    let b = Scripted::named("b");
    let fanout = Fanout::new(store.clone(), vec![a.clone(), b.clone()]);
    let e = event("e1", "t1");
    assert_eq!(fanout.deliver(&e).await, RecordOutcome::Delivered);
    assert_eq!(fanout.deliver(&e).await, RecordOutcome::Delivered);
    // A second process (or a restart) shares the durable record.
    let again = Fanout::new(store, vec![a.clone(), b.clone()]);
    assert_eq!(again.deliver(&e).await, RecordOutcome::Delivered);
    assert_eq!(a.got(), vec!["e1"]);
    assert_eq!(b.got(), vec!["e1"]);
}

#[tokio::test]
async fn a_retrying_target_does_not_repeat_the_others() {
    let (store, _dir) = dedupe();
    let ok = Scripted::named("ok");
    let slow = Scripted::named("slow");
    slow.answer(Err(DeliveryError::retry_after(
        "rate limited",
        Duration::from_secs(3),
    )));
    let fanout = Fanout::new(store, vec![ok.clone(), slow.clone()]);
    let e = event("e1", "t1");
    assert_eq!(
        fanout.deliver(&e).await,
        RecordOutcome::Retry {
            retry_after: Some(Duration::from_secs(3))
        }
    );
    assert_eq!(fanout.deliver(&e).await, RecordOutcome::Delivered);
    assert_eq!(ok.got(), vec!["e1"]);
    assert_eq!(slow.got(), vec!["e1"]);
}

#[tokio::test]
async fn retry_wins_over_permanent_and_permanent_alone_is_poison() {
    let (store, _dir) = dedupe();
    let broken = Scripted::named("broken");
    let busy = Scripted::named("busy");
    broken.answer(Err(DeliveryError::permanent("channel_not_found")));
    busy.answer(Err(DeliveryError::retry("timeout")));
    let fanout = Fanout::new(store, vec![broken.clone(), busy.clone()]);
    let e = event("e1", "t1");
    assert_eq!(
        fanout.deliver(&e).await,
        RecordOutcome::Retry { retry_after: None }
    );
    broken.answer(Err(DeliveryError::permanent("channel_not_found")));
    let outcome = fanout.deliver(&e).await;
    assert!(
        matches!(&outcome, RecordOutcome::Poison { reason } if reason.contains("channel_not_found")),
        "{outcome:?}"
    );
    assert!(outcome.is_failure());
    assert_eq!(busy.got(), vec!["e1"]);
}

#[tokio::test]
async fn a_body_that_is_not_an_event_is_poison() {
    let (store, _dir) = dedupe();
    let fanout = Fanout::new(store, vec![Scripted::named("a")]);
    let outcome = fanout.deliver_body("{not json").await;
    assert!(
        matches!(outcome, RecordOutcome::Poison { .. }),
        "{outcome:?}"
    );
}
