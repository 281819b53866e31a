//! The session store conformance suite: every `SessionStore` adapter runs these, so SQLite and
//! DynamoDB cannot drift apart. Each function takes a fresh, empty store.

use std::sync::Arc;

use super::eventually::eventually;

use threadbox_core::domain::{
    Cause, Change, Command, LifecycleEvent, Millis, Session, Status, ThreadId, Timers,
};
use threadbox_core::ports::{SessionStore, StoreError};

fn tid(s: &str) -> ThreadId {
    ThreadId::parse(s).unwrap()
}

fn change(now: i64) -> Change {
    Change {
        event_id: uuid::Uuid::new_v4().to_string(),
        now: Millis(now),
        detail: None,
    }
}

/// A new session and its first event, at `now`.
pub fn new_session(id: &str, now: i64) -> (Session, LifecycleEvent) {
    Session::new_creating(tid(id), "test", change(now), &Timers::default())
}

/// Apply `command` and bump the version as a use case would; returns the event.
fn advance(s: &mut Session, command: Command, now: i64) -> LifecycleEvent {
    let event = s
        .apply(command, Cause::User, change(now), &Timers::default())
        .unwrap()
        .unwrap();
    s.version += 1;
    event
}

pub async fn insert_then_load_round_trips(store: Arc<dyn SessionStore>) {
    let (mut s, e) = new_session("conf-a", 1_000);
    // What its creator gave the thread (E2B's metadata and envVars) is part of the record.
    s.labels = [("team".to_owned(), "red & blue".to_owned())].into();
    s.env = [("GREETING".to_owned(), "hi there".to_owned())].into();
    // And a fork's source, which decides whether the same fork may make the thread again.
    s.forked_from = Some(ThreadId::parse("conf-source").unwrap());
    assert_eq!(store.load(&s.thread_id).await.unwrap(), None);
    store
        .insert_new(&s, std::slice::from_ref(&e))
        .await
        .unwrap();
    assert_eq!(store.load(&s.thread_id).await.unwrap(), Some(s.clone()));
    assert_eq!(
        store.events_after(&s.thread_id, 0, 10).await.unwrap(),
        vec![e.clone()]
    );

    // The thread's network profile is part of the record, allowlist and all.
    let mut next = s.clone();
    let allow =
        threadbox_core::domain::Allowlist::parse(["pkg.test", "*.cdn.test", "203.0.113.0/24"])
            .unwrap();
    let noted = next
        .set_network(
            threadbox_core::domain::NetworkProfile::Networked { allow },
            change(2_000),
        )
        .unwrap();
    next.version += 1;
    store
        .save(&next, s.version, std::slice::from_ref(&noted))
        .await
        .unwrap();
    assert_eq!(store.load(&s.thread_id).await.unwrap(), Some(next));
    assert_eq!(
        store.events_after(&s.thread_id, 0, 10).await.unwrap(),
        vec![e, noted]
    );
}

/// The thread's image is part of the record: chosen at insert, changed with its `user` event,
/// and read back as written.
pub async fn an_image_round_trips_with_its_change(store: Arc<dyn SessionStore>) {
    use threadbox_core::domain::ImageName;
    let (mut s, e) = new_session("conf-image", 1_000);
    assert!(s.image.is_host());
    s.image = ImageName::parse("python-3.12").unwrap();
    store
        .insert_new(&s, std::slice::from_ref(&e))
        .await
        .unwrap();
    let loaded = store.load(&s.thread_id).await.unwrap().unwrap();
    assert_eq!(loaded.image.as_str(), "python-3.12");
    assert_eq!(loaded, s);

    let mut next = s.clone();
    let noted = next
        .set_image(ImageName::parse("node_22.x").unwrap(), change(2_000))
        .unwrap();
    next.version += 1;
    store
        .save(&next, s.version, std::slice::from_ref(&noted))
        .await
        .unwrap();
    let loaded = store.load(&s.thread_id).await.unwrap().unwrap();
    assert_eq!(loaded.image.as_str(), "node_22.x");
    assert_eq!(loaded, next);
    let events = store.events_after(&s.thread_id, 0, 10).await.unwrap();
    assert_eq!(events, vec![e, noted]);
    assert_eq!(
        events[1].detail.as_deref(),
        Some("image: node_22.x (from python-3.12)")
    );
}

pub async fn second_insert_conflicts_and_changes_nothing(store: Arc<dyn SessionStore>) {
    let (s, e) = new_session("conf-b", 1_000);
    store
        .insert_new(&s, std::slice::from_ref(&e))
        .await
        .unwrap();
    let (other, other_event) = new_session("conf-b", 2_000);
    let err = store.insert_new(&other, &[other_event]).await.unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists(_)), "{err:?}");
    assert_eq!(store.load(&s.thread_id).await.unwrap(), Some(s.clone()));
    assert_eq!(
        store.events_after(&s.thread_id, 0, 10).await.unwrap().len(),
        1
    );
}

pub async fn save_writes_session_and_events_together(store: Arc<dyn SessionStore>) {
    let (mut s, e1) = new_session("conf-c", 1_000);
    store.insert_new(&s, &[e1]).await.unwrap();
    s.bind_sandbox("sb-1".into(), None);
    let e2 = advance(&mut s, Command::CreateSucceeded, 2_000);
    store
        .save(&s, s.version - 1, std::slice::from_ref(&e2))
        .await
        .unwrap();
    assert_eq!(
        store.load(&s.thread_id).await.unwrap().unwrap().status,
        Status::Active
    );
    assert_eq!(
        store.events_after(&s.thread_id, 1, 10).await.unwrap(),
        vec![e2]
    );
}

pub async fn stale_save_conflicts_and_writes_nothing(store: Arc<dyn SessionStore>) {
    let (mut s, e1) = new_session("conf-d", 1_000);
    store.insert_new(&s, &[e1]).await.unwrap();
    let stale = s.clone();
    let e2 = advance(&mut s, Command::CreateSucceeded, 2_000);
    store.save(&s, 0, &[e2]).await.unwrap();

    let mut late = stale;
    let e_late = advance(&mut late, Command::Fail, 3_000);
    let err = store.save(&late, 0, &[e_late]).await.unwrap_err();
    assert!(
        matches!(err, StoreError::VersionConflict { expected: 0, .. }),
        "{err:?}"
    );
    assert_eq!(
        store.load(&s.thread_id).await.unwrap().unwrap(),
        s,
        "the session is untouched"
    );
    assert_eq!(
        store.events_after(&s.thread_id, 0, 10).await.unwrap().len(),
        2,
        "no event from the loser"
    );
}

pub async fn a_duplicate_event_id_fails_the_whole_write(store: Arc<dyn SessionStore>) {
    let (mut s, e1) = new_session("conf-e", 1_000);
    store
        .insert_new(&s, std::slice::from_ref(&e1))
        .await
        .unwrap();
    let before = s.clone();
    let mut e2 = advance(&mut s, Command::CreateSucceeded, 2_000);
    e2.event_id = e1.event_id.clone();
    let err = store.save(&s, 0, &[e2]).await.unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    assert_eq!(
        store.load(&s.thread_id).await.unwrap().unwrap(),
        before,
        "nothing half-written"
    );
}

pub async fn exactly_one_of_many_concurrent_saves_wins(store: Arc<dyn SessionStore>) {
    let (s, e1) = new_session("conf-f", 1_000);
    store.insert_new(&s, &[e1]).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = store.clone();
        let mut mine = s.clone();
        tasks.push(tokio::spawn(async move {
            let e = advance(&mut mine, Command::Fail, 2_000 + i);
            store.save(&mine, 0, &[e]).await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(()) => wins += 1,
            Err(e) => assert!(e.is_conflict(), "{e:?}"),
        }
    }
    assert_eq!(wins, 1);
    assert_eq!(
        store
            .events_after(&s.thread_id, 0, 100)
            .await
            .unwrap()
            .len(),
        2
    );
}

/// Due work comes from an index: only due rows of the asked shard, oldest first, in pages.
pub async fn due_reads_only_due_rows_of_a_shard_in_pages(store: Arc<dyn SessionStore>) {
    let shards = store.shard_count();
    let mut expected_due = Vec::new();
    for i in 0..40 {
        let (mut s, e) = new_session(&format!("due-{i}"), 1_000);
        // Half are due at 5_000 + i, half far in the future.
        s.next_action_at = Some(Millis(if i % 2 == 0 { 5_000 + i } else { 1_000_000 }));
        store.insert_new(&s, &[e]).await.unwrap();
        if i % 2 == 0 {
            expected_due.push((s.thread_id.shard(shards), s.thread_id.clone()));
        }
    }
    expected_due.sort();
    // `due` reads an index (DynamoDB's `due` GSI): read every shard until it shows the writes.
    let read_all = || async {
        let before = store.stats();
        let mut seen = Vec::new();
        for shard in 0..shards {
            let mut cursor = None;
            let mut last_at = Millis(i64::MIN);
            loop {
                let page = store.due(shard, Millis(10_000), 3, cursor).await.unwrap();
                assert!(page.items.len() <= 3);
                for s in &page.items {
                    assert_eq!(
                        s.thread_id.shard(shards),
                        shard,
                        "rows come from the asked shard"
                    );
                    let at = s.next_action_at.unwrap();
                    assert!(at <= Millis(10_000) && at >= last_at, "due and ordered");
                    last_at = at;
                    seen.push((shard, s.thread_id.clone()));
                }
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        seen.sort();
        (seen, store.stats().rows_read - before.rows_read)
    };
    let (seen, rows) = eventually(read_all, |(seen, _)| *seen == expected_due).await;
    assert_eq!(seen, expected_due);
    if rows > 0 {
        assert!(
            rows <= 20 + u64::from(shards),
            "read {rows} rows for 20 due; an index reads only due rows"
        );
    }
}

pub async fn events_after_and_outbox(store: Arc<dyn SessionStore>) {
    let (mut s, e1) = new_session("conf-g", 1_000);
    store
        .insert_new(&s, std::slice::from_ref(&e1))
        .await
        .unwrap();
    let e2 = advance(&mut s, Command::CreateSucceeded, 2_000);
    store.save(&s, 0, std::slice::from_ref(&e2)).await.unwrap();
    assert_eq!(
        store.events_after(&s.thread_id, 1, 10).await.unwrap(),
        vec![e2.clone()]
    );
    assert_eq!(
        store.events_after(&s.thread_id, 2, 10).await.unwrap(),
        vec![]
    );
    // Past the largest seq there is nothing; in particular no wrap back to the first event.
    for after in [
        threadbox_core::domain::MAX_SEQ,
        threadbox_core::domain::MAX_SEQ + 1,
        u64::MAX,
    ] {
        assert_eq!(
            store.events_after(&s.thread_id, after, 10).await.unwrap(),
            vec![],
            "after {after}"
        );
    }

    // `unsent_events` reads an index (DynamoDB's `unsent` GSI): wait for it to show the writes.
    let unsent = |cutoff: i64| {
        let store = &store;
        move || async move { store.unsent_events(Millis(cutoff), 10).await.unwrap() }
    };
    let expect_e1 = vec![e1.clone()];
    let read = eventually(unsent(1_500), |u| *u == expect_e1).await;
    assert_eq!(read, expect_e1, "only events written before the cutoff");
    store.mark_sent(&[e1]).await.unwrap();
    let expect_e2 = vec![e2.clone()];
    assert_eq!(
        eventually(unsent(5_000), |u| *u == expect_e2).await,
        expect_e2
    );
    store.mark_sent(&[e2]).await.unwrap();
    assert!(eventually(unsent(5_000), Vec::is_empty).await.is_empty());
}

pub async fn list_pages_through_every_session(store: Arc<dyn SessionStore>) {
    for i in 0..7 {
        let (s, e) = new_session(&format!("list-{i}"), 1_000);
        store.insert_new(&s, &[e]).await.unwrap();
    }
    let expected: Vec<String> = (0..7).map(|i| format!("list-{i}")).collect();
    // `list` reads an index (DynamoDB's `by_thread` GSI): page through until it shows them all.
    let read_all = || async {
        let mut cursor = None;
        let mut seen = Vec::new();
        loop {
            let page = store.list(3, cursor.as_ref()).await.unwrap();
            seen.extend(page.items.into_iter().map(|s| s.thread_id.to_string()));
            match page.next {
                Some(n) => cursor = Some(ThreadId::parse(&n).expect("next names a thread")),
                None => break,
            }
        }
        seen
    };
    let seen = eventually(read_all, |seen| *seen == expected).await;
    assert_eq!(seen, expected);
}

/// Retention never deletes a live thread, a thread retired after the cutoff, or one whose events
/// have not all reached the lifecycle queue (the outbox); past all three it deletes the record
/// with every event.
pub async fn purge_spares_live_recent_and_undelivered_threads(store: Arc<dyn SessionStore>) {
    let far_future = Millis(i64::MAX);
    let (mut gone, e1) = new_session("conf-purge-gone", 1_000);
    store
        .insert_new(&gone, std::slice::from_ref(&e1))
        .await
        .unwrap();
    gone.bind_sandbox("sb-gone".into(), None);
    let mut written = vec![e1];
    for (command, at) in [
        (Command::CreateSucceeded, 2_000),
        (Command::Destroy, 3_000),
        (Command::DestroySucceeded, 4_000),
    ] {
        let e = advance(&mut gone, command, at);
        store
            .save(&gone, gone.version - 1, std::slice::from_ref(&e))
            .await
            .unwrap();
        written.push(e);
    }
    assert_eq!(gone.status, Status::Destroyed);
    let (live, live_event) = new_session("conf-purge-live", 1_000);
    store
        .insert_new(&live, std::slice::from_ref(&live_event))
        .await
        .unwrap();
    store
        .mark_sent(std::slice::from_ref(&live_event))
        .await
        .unwrap();

    let purged = store.purge_retired(far_future, 10).await.unwrap();
    assert_eq!(purged.threads, 0, "undelivered events keep the thread");
    store.mark_sent(&written).await.unwrap();
    let purged = store.purge_retired(Millis(3_999), 10).await.unwrap();
    assert_eq!(purged.threads, 0, "retired after the cutoff");
    assert!(store.load(&gone.thread_id).await.unwrap().is_some());

    let purged = store.purge_retired(Millis(4_000), 10).await.unwrap();
    assert_eq!((purged.threads, purged.events), (1, written.len() as u64));
    assert_eq!(store.load(&gone.thread_id).await.unwrap(), None);
    assert!(store
        .events_after(&gone.thread_id, 0, 10)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        store.load(&live.thread_id).await.unwrap(),
        Some(live.clone())
    );
    assert_eq!(
        store.events_after(&live.thread_id, 0, 10).await.unwrap(),
        vec![live_event]
    );
}
