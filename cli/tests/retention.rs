//! Retention through the real `threadbox dev`: a thread destroyed for idleness loses its record
//! and events to the janitor once `--record-retention` has passed, while a thread in use keeps
//! every row it has, and the janitor's log counts what it deleted. Needs root and runc, like the
//! other end-to-end tests.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{dev_missing, prerequisites_met, DevServer};

/// Rows the database holds for `thread`: (session records, events).
fn rows(db: &Path, thread: &str) -> (i64, i64) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let count = |table: &str| -> i64 {
        conn.query_row(
            &format!("SELECT count(*) FROM {table} WHERE thread_id = ?1"),
            [thread],
            |r| r.get(0),
        )
        .unwrap()
    };
    (count("sessions"), count("events"))
}

async fn status(dev: &DevServer, thread: &str) -> Option<String> {
    let response = dev
        .http
        .get(format!("{}/v1/threads/{thread}", dev.url))
        .send()
        .await
        .unwrap();
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return None;
    }
    let body: serde_json::Value = response.json().await.unwrap();
    body["session"]["status"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroyed_threads_are_deleted_after_the_record_retention_and_live_ones_kept() {
    if !prerequisites_met(
        "destroyed_threads_are_deleted_after_the_record_retention_and_live_ones_kept",
        &dev_missing(),
    ) {
        return;
    }
    let dev = DevServer::start(&[
        "--idle-pause",
        "1s",
        "--retention",
        "2s",
        "--record-retention",
        "4s",
    ])
    .await;
    let db = dev.data_dir().join("threadbox.db");
    dev.post("/v1/threads/gone/exec", Some(json!({"cmd": "true"})))
        .await;
    assert_eq!(rows(&db, "gone").0, 1);

    // Idle past the retention: the janitor destroys the sandbox; the record stays for now.
    let deadline = Instant::now() + Duration::from_secs(60);
    while status(&dev, "gone").await.as_deref() != Some("destroyed") {
        assert!(
            Instant::now() < deadline,
            "never destroyed:\n{}",
            dev.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (records, events) = rows(&db, "gone");
    assert_eq!(records, 1, "kept for the record retention");
    assert!(events >= 4, "{events} events");

    // Meanwhile another thread is in use; after the record retention the destroyed one goes.
    let mut kept = (0, 0);
    while status(&dev, "gone").await.is_some() {
        assert!(
            Instant::now() < deadline,
            "never deleted:\n{}",
            dev.stderr()
        );
        dev.post("/v1/threads/busy/exec", Some(json!({"cmd": "true"})))
            .await;
        kept = rows(&db, "busy");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(rows(&db, "gone"), (0, 0), "record and events deleted");
    assert_eq!(status(&dev, "busy").await.as_deref(), Some("active"));
    let now = rows(&db, "busy");
    assert_eq!(now.0, 1);
    assert!(
        now.1 >= kept.1 && kept.1 >= 2,
        "the busy thread kept its events: {kept:?} {now:?}"
    );
    // The sweep's line is logged once its aged-rows pass is done too, a moment after the
    // deletion is visible.
    let logged = |log: &str| {
        log.lines()
            .any(|l| l.contains("janitor sweep") && l.contains("threads_purged: 1"))
    };
    let waited_until = Instant::now() + Duration::from_secs(10);
    while !logged(&dev.stderr()) && Instant::now() < waited_until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(logged(&dev.stderr()), "{}", dev.stderr());

    // Used again, the deleted thread starts over as a brand-new one.
    let first = dev.post("/v1/threads/gone/resolve", None).await;
    assert_eq!(first["created"], true, "{first}");
    assert_eq!(first["generation"], 1, "{first}");
}
