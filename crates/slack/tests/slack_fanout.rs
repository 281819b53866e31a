//! The Slack fan-out target through the shared `Fanout` core, against the Slack fake: one status
//! message per thread edited in place, nothing posted twice under redelivery, 429 honoured with
//! `Retry-After`, notices for expired / recreated / error, and poison for a channel Slack refuses.

#[path = "support/slack.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use threadbox_core::domain::{Cause, Status};
use threadbox_core::fanout::Fanout;
use threadbox_core::ports::RecordOutcome;
use threadbox_slack::SlackStatusTarget;
use threadbox_sqlite::{SqliteDedupe, SqliteSlackStatusStore};
use threadbox_testing::slack_fake::{Fault, SlackFake};

use support::{client, event, fake};

const THREAD: &str = "slack:T1:C1:1767225600.000100";

struct Setup {
    fake: SlackFake,
    fanout: Fanout,
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let fake = fake().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("f.db");
    let store = Arc::new(SqliteSlackStatusStore::open(&db).unwrap());
    let target = Arc::new(SlackStatusTarget::new(client(&fake), store));
    let fanout = Fanout::new(Arc::new(SqliteDedupe::open(&db).unwrap()), vec![target]);
    Setup {
        fake,
        fanout,
        _dir: dir,
    }
}

#[tokio::test]
async fn one_status_message_is_posted_then_edited_and_redelivery_posts_nothing() {
    let s = setup().await;
    let creating = event("e1", THREAD, 1, Status::Creating, Cause::User);
    let active = event("e2", THREAD, 2, Status::Active, Cause::User);
    for e in [&creating, &creating, &active, &creating, &active] {
        assert_eq!(s.fanout.deliver(e).await, RecordOutcome::Delivered);
    }
    let messages = s.fake.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    let status = &messages[0];
    assert_eq!(status.thread_ts.as_deref(), Some("1767225600.000100"));
    assert!(status.text.contains("*active*"), "{}", status.text);
    assert_eq!(status.history.len(), 1, "edited once: {:?}", status.history);
    assert!(status.history[0].contains("creating"));
    let calls: Vec<_> = s.fake.calls().into_iter().map(|c| c.method).collect();
    assert_eq!(calls, ["chat.postMessage", "chat.update"]);
    assert!(s.fake.rejections().is_empty(), "{:?}", s.fake.rejections());
}

#[tokio::test]
async fn a_late_older_event_does_not_turn_the_badge_back() {
    let s = setup().await;
    s.fanout
        .deliver(&event("e2", THREAD, 2, Status::Paused, Cause::Idle))
        .await;
    // A re-drive of an earlier event under its own id reaches the target after the later one.
    s.fanout
        .deliver(&event("e1", THREAD, 1, Status::Active, Cause::User))
        .await;
    let messages = s.fake.messages();
    assert_eq!(messages.len(), 1);
    assert!(messages[0].text.contains("*paused"), "{}", messages[0].text);
    assert!(messages[0].history.is_empty());
}

#[tokio::test]
async fn a_429_is_retried_after_retry_after_and_applied_once() {
    let s = setup().await;
    s.fanout
        .deliver(&event("e1", THREAD, 1, Status::Creating, Cause::User))
        .await;
    s.fake.fail_next(
        "chat.update",
        Fault::RateLimited {
            retry_after_secs: 7,
        },
    );
    let active = event("e2", THREAD, 2, Status::Active, Cause::User);
    assert_eq!(
        s.fanout.deliver(&active).await,
        RecordOutcome::Retry {
            retry_after: Some(Duration::from_secs(7))
        }
    );
    assert_eq!(s.fanout.deliver(&active).await, RecordOutcome::Delivered);
    assert_eq!(s.fanout.deliver(&active).await, RecordOutcome::Delivered);
    let messages = s.fake.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].history.len(), 1, "one successful edit");
}

#[tokio::test]
async fn losing_the_sandbox_is_announced_once_even_when_the_notice_is_rate_limited() {
    let s = setup().await;
    s.fanout
        .deliver(&event("e1", THREAD, 1, Status::Active, Cause::User))
        .await;
    let mut lost = event("e2", THREAD, 2, Status::Creating, Cause::Recreated);
    lost.detail = Some("sandbox sb-1 is gone; a new one replaces it".into());
    // The status edit succeeds; the notice after it meets a rate limit.
    s.fake.fail_next(
        "chat.postMessage",
        Fault::RateLimited {
            retry_after_secs: 1,
        },
    );
    assert!(matches!(
        s.fanout.deliver(&lost).await,
        RecordOutcome::Retry { .. }
    ));
    assert_eq!(s.fanout.deliver(&lost).await, RecordOutcome::Delivered);
    s.fanout
        .deliver(&event("e3", THREAD, 3, Status::Active, Cause::Recreated))
        .await;

    let messages = s.fake.messages();
    assert_eq!(messages.len(), 2, "status + one notice: {messages:?}");
    assert_eq!(messages[0].history.len(), 2, "edited for e2 and e3 only");
    let notice = &messages[1];
    assert!(notice
        .text
        .contains("files and running processes from before are gone"));
    assert!(notice.text.contains("sandbox sb-1 is gone"));
    assert_eq!(notice.thread_ts.as_deref(), Some("1767225600.000100"));
}

#[tokio::test]
async fn expired_and_error_get_notices_with_their_cause() {
    let s = setup().await;
    let mut expired = event("e1", THREAD, 1, Status::Expired, Cause::ProviderGone);
    expired.detail = Some("sandbox sb-1 is gone; the thread is expired".into());
    let mut failed = event(
        "e2",
        "slack:T1:C1:1767225700.000100",
        1,
        Status::Error,
        Cause::Error,
    );
    failed.detail = Some("create failed: out of disk".into());
    s.fanout.deliver(&expired).await;
    s.fanout.deliver(&failed).await;
    let texts: Vec<String> = s.fake.messages().into_iter().map(|m| m.text).collect();
    assert_eq!(texts.len(), 4, "{texts:?}");
    assert!(texts[1].contains("new commands are refused") && texts[1].contains("`reset`"));
    assert!(texts[1].contains("the thread is expired"));
    assert!(texts[3].contains("hit an error (error)") && texts[3].contains("out of disk"));
}

#[tokio::test]
async fn a_deleted_status_message_is_posted_again() {
    let s = setup().await;
    s.fanout
        .deliver(&event("e1", THREAD, 1, Status::Active, Cause::User))
        .await;
    let first = s.fake.messages()[0].ts.clone();
    s.fake.delete_message(&first);
    s.fanout
        .deliver(&event("e2", THREAD, 2, Status::Paused, Cause::Idle))
        .await;
    s.fanout
        .deliver(&event("e3", THREAD, 3, Status::Resuming, Cause::User))
        .await;
    let messages = s.fake.messages();
    assert_eq!(messages.len(), 1);
    assert_ne!(messages[0].ts, first);
    assert!(
        messages[0].text.contains("resuming"),
        "edits go to the new one"
    );
}

#[tokio::test]
async fn refusals_are_poison_and_other_threads_are_skipped() {
    let s = setup().await;
    s.fake
        .fail_next("chat.postMessage", Fault::Error("channel_not_found".into()));
    let outcome = s
        .fanout
        .deliver(&event("e1", THREAD, 1, Status::Active, Cause::User))
        .await;
    assert!(
        matches!(&outcome, RecordOutcome::Poison { reason } if reason.contains("channel_not_found")),
        "{outcome:?}"
    );
    // A thread made through the HTTP API has nowhere to show status in Slack.
    assert_eq!(
        s.fanout
            .deliver(&event("e2", "agent-7", 1, Status::Active, Cause::User))
            .await,
        RecordOutcome::Delivered
    );
    // A DM's status goes to its top level.
    s.fanout
        .deliver(&event("e3", "slack:T1:D1", 1, Status::Active, Cause::User))
        .await;
    let messages = s.fake.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(
        (
            messages[0].channel.as_str(),
            messages[0].thread_ts.as_deref()
        ),
        ("D1", None)
    );
}

/// With a usage source, the card carries the thread's running and paused time and their cost up
/// to the event it shows, counted from the thread's own events.
#[tokio::test]
async fn the_card_shows_what_the_thread_ran_and_cost_so_far() {
    use threadbox_core::domain::{Millis, Pricing, ThreadId};
    use threadbox_core::usecases::{Config, Threadbox};
    use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
    use threadbox_testing::{InMemoryProvider, ManualClock};

    let fake = fake().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("f.db");
    let sessions = Arc::new(SqliteSessionStore::open(&db).unwrap());
    let clock = Arc::new(ManualClock::new(Millis(1_767_225_600_000)));
    let tb = Threadbox::new(
        sessions.clone(),
        InMemoryProvider::new(),
        Arc::new(SqliteQueue::open(&db, "lifecycle", QueueConfig::default()).unwrap()),
        clock.clone(),
        Config::default(),
    );
    let thread = ThreadId::parse(THREAD).unwrap();
    tb.resolve(&thread).await.unwrap();
    clock.advance(Duration::from_secs(2 * 3600));
    tb.pause(&thread).await.unwrap();
    clock.advance(Duration::from_secs(24 * 3600));
    tb.resume(&thread).await.unwrap();

    let status = Arc::new(SqliteSlackStatusStore::open(&db).unwrap());
    let target = Arc::new(
        SlackStatusTarget::new(client(&fake), status).with_usage(sessions, Pricing::E2B_DEFAULT),
    );
    let fanout = Fanout::new(Arc::new(SqliteDedupe::open(&db).unwrap()), vec![target]);
    let events = tb.events(&thread, 0, 100).await.unwrap();
    assert_eq!(events.last().unwrap().to, Status::Active);
    for event in &events {
        assert_eq!(fanout.deliver(event).await, RecordOutcome::Delivered);
    }
    let messages = fake.messages();
    let card = serde_json::to_string(messages[0].blocks.as_ref().unwrap()).unwrap();
    // E2B's default sandbox (2 vCPU, 0.5 GiB) at its list prices: 2 h running is $0.22, and the
    // day paused would have cost $2.61.
    assert!(
        card.contains("Ran 2h · paused 1d · $0.22 so far, $2.61 saved by pausing"),
        "{card}"
    );
    // The first card was drawn at the first event, when nothing had run yet.
    let first = serde_json::to_string(&messages[0].blocks_history[0]).unwrap();
    assert!(first.contains("Ran 0s · paused 0s"), "{first}");
    assert!(!card.contains("image"), "host goes unsaid: {card}");
}

/// The card names the thread's image when it is not `host`, from the thread's record.
#[tokio::test]
async fn the_card_names_the_threads_image() {
    use threadbox_core::domain::{ImageDefaults, ImageName, Pricing, ThreadId};
    use threadbox_core::usecases::{Config, Threadbox};
    use threadbox_sqlite::{QueueConfig, SqliteQueue, SqliteSessionStore};
    use threadbox_testing::{InMemoryProvider, ManualClock};

    let fake = fake().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("f.db");
    let sessions = Arc::new(SqliteSessionStore::open(&db).unwrap());
    let provider = InMemoryProvider::new();
    provider.register_image("python");
    let tb = Threadbox::new(
        sessions.clone(),
        provider,
        Arc::new(SqliteQueue::open(&db, "lifecycle", QueueConfig::default()).unwrap()),
        Arc::new(ManualClock::default()),
        Config {
            images: ImageDefaults::new(ImageName::host())
                .with_slack_setting("T1=python")
                .unwrap(),
            ..Config::default()
        },
    );
    let thread = ThreadId::parse(THREAD).unwrap();
    tb.resolve(&thread).await.unwrap();
    let status = Arc::new(SqliteSlackStatusStore::open(&db).unwrap());
    let target = Arc::new(
        SlackStatusTarget::new(client(&fake), status).with_usage(sessions, Pricing::E2B_DEFAULT),
    );
    let fanout = Fanout::new(Arc::new(SqliteDedupe::open(&db).unwrap()), vec![target]);
    for event in tb.events(&thread, 0, 100).await.unwrap() {
        assert_eq!(fanout.deliver(&event).await, RecordOutcome::Delivered);
    }
    let card = serde_json::to_string(fake.messages()[0].blocks.as_ref().unwrap()).unwrap();
    assert!(card.contains(" · image `python`"), "{card}");
}
