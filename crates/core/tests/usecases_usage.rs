//! The usecases `usage` module's tests that need a real store (SQLite) and the test support
//! crate, which depend on the core and so cannot be its unit tests.

use std::sync::Arc;
use std::time::Duration;

use threadbox_core::domain::{Pricing, Status, ThreadId};
use threadbox_core::usecases::{Config, Threadbox};
use threadbox_testing::ManualClock;

mod support;
use support::world_with;

async fn threadbox() -> (Threadbox, Arc<ManualClock>, tempfile::TempDir) {
    let world = world_with(Config {
        pricing: Pricing::E2B_DEFAULT,
        settle_poll: Duration::from_millis(5),
        ..Config::default()
    });
    (world.tb, world.clock, world._dir)
}

#[tokio::test]
async fn usage_follows_a_thread_through_pause_and_resume() {
    let (tb, clock, _dir) = threadbox().await;
    let t1 = ThreadId::parse("t1").unwrap();
    tb.resolve(&t1).await.unwrap();
    clock.advance(Duration::from_secs(3600));
    tb.pause(&t1).await.unwrap();
    clock.advance(Duration::from_secs(7200));
    let usage = tb.usage(&t1, None).await.unwrap();
    assert_eq!(usage.running_ms, 3_600_000);
    assert_eq!(usage.paused_ms, 7_200_000);
    assert_eq!(
        usage.idle_paused_ms, 0,
        "a user's pause is not the idle setting's"
    );
    assert!(usage.complete);
    let cost = usage.cost.unwrap();
    assert!((cost.usd.unwrap() - 0.1089).abs() < 1e-9, "{cost:?}");

    // A second thread, and a page of both, with a window that starts after t1's pause.
    let t2 = ThreadId::parse("t2").unwrap();
    tb.resolve(&t2).await.unwrap();
    clock.advance(Duration::from_secs(60));
    let since = tb.clock.now().minus(Duration::from_secs(120));
    let page = tb.sessions_with_usage(10, None, Some(since)).await.unwrap();
    let rows: Vec<_> = page
        .items
        .iter()
        .map(|(s, u)| {
            (
                s.thread_id.as_str().to_owned(),
                s.status,
                u.running_ms,
                u.paused_ms,
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("t1".to_owned(), Status::Paused, 0, 120_000),
            ("t2".to_owned(), Status::Active, 60_000, 0),
        ]
    );
    assert!(tb
        .usage(&ThreadId::parse("nope").unwrap(), None)
        .await
        .is_err());
}
