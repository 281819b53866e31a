//! The `SlackUserThreads` conformance suite, against `SqliteSlackUserThreads` and (with the `aws`
//! feature) `DynamoSlackUserThreads` on the Slack status table, on whatever endpoint
//! `AWS_ENDPOINT_URL` names (moto's server under `scripts/test.sh`). Without it the DynamoDB
//! tests print why they are skipped and pass, unless `THREADBOX_REQUIRE_AWS=1`.
//!
//! Besides the port's behaviour, each adapter proves its stored record stays bounded (the port
//! shows at most 100 threads either way, so only a look at the storage can tell).

#![cfg(feature = "slack")]

/// The suite: every `SlackUserThreads` adapter runs these.
mod suite {
    use std::sync::Arc;

    use threadbox_core::domain::{Millis, ThreadId};
    use threadbox_core::ports::{SlackUserThreads, UserThread, MAX_USER_THREADS};

    fn thread(raw: &str) -> ThreadId {
        ThreadId::parse(raw).unwrap()
    }

    fn listing(pairs: &[(&str, i64)]) -> Vec<UserThread> {
        pairs
            .iter()
            .map(|(id, at)| UserThread {
                thread_id: thread(id),
                last_used: Millis(*at),
            })
            .collect()
    }

    pub async fn recent_lists_the_newest_first(store: Arc<dyn SlackUserThreads>) {
        assert_eq!(
            store.recent("T1", "U1", 10).await.unwrap(),
            vec![],
            "new user"
        );
        let a = thread("slack:T1:C1:1.000001");
        let b = thread("slack:T1:C1:2.000002");
        let c = thread("slack:T1:C2:3.000003");
        store.touch("T1", "U1", &a, Millis(1_000)).await.unwrap();
        store.touch("T1", "U1", &b, Millis(3_000)).await.unwrap();
        store.touch("T1", "U1", &c, Millis(2_000)).await.unwrap();
        // Equal times list by thread id, so every adapter returns the same order.
        let d = thread("slack:T1:C0:4.000004");
        store.touch("T1", "U1", &d, Millis(2_000)).await.unwrap();
        assert_eq!(
            store.recent("T1", "U1", 10).await.unwrap(),
            listing(&[
                ("slack:T1:C1:2.000002", 3_000),
                ("slack:T1:C0:4.000004", 2_000),
                ("slack:T1:C2:3.000003", 2_000),
                ("slack:T1:C1:1.000001", 1_000),
            ])
        );
    }

    pub async fn a_later_touch_wins_an_earlier_never_does(store: Arc<dyn SlackUserThreads>) {
        let a = thread("slack:T1:C1:1.000001");
        let b = thread("slack:T1:C1:2.000002");
        store.touch("T1", "U1", &a, Millis(100)).await.unwrap();
        store.touch("T1", "U1", &b, Millis(200)).await.unwrap();
        store.touch("T1", "U1", &a, Millis(300)).await.unwrap();
        assert_eq!(
            store.recent("T1", "U1", 10).await.unwrap(),
            listing(&[("slack:T1:C1:1.000001", 300), ("slack:T1:C1:2.000002", 200)]),
            "the later touch moves the thread up"
        );
        store.touch("T1", "U1", &a, Millis(50)).await.unwrap();
        store.touch("T1", "U1", &a, Millis(300)).await.unwrap();
        store.touch("T1", "U1", &b, Millis(199)).await.unwrap();
        assert_eq!(
            store.recent("T1", "U1", 10).await.unwrap(),
            listing(&[("slack:T1:C1:1.000001", 300), ("slack:T1:C1:2.000002", 200)]),
            "earlier and repeated touches change nothing"
        );
    }

    pub async fn limit_caps_the_listing(store: Arc<dyn SlackUserThreads>) {
        for i in 1..=5i64 {
            let id = thread(&format!("slack:T1:C1:{i}.000000"));
            store.touch("T1", "U1", &id, Millis(i * 10)).await.unwrap();
        }
        let ids = |limit| {
            let store = store.clone();
            async move {
                store
                    .recent("T1", "U1", limit)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|t| t.last_used.0)
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(ids(1).await, vec![50]);
        assert_eq!(ids(3).await, vec![50, 40, 30]);
        assert_eq!(ids(5).await, vec![50, 40, 30, 20, 10]);
        assert_eq!(ids(100).await, vec![50, 40, 30, 20, 10]);
        assert_eq!(
            ids(1_000).await,
            vec![50, 40, 30, 20, 10],
            "above the bound"
        );
        assert_eq!(ids(0).await, Vec::<i64>::new(), "zero asks for none");
    }

    pub async fn users_and_teams_are_apart(store: Arc<dyn SlackUserThreads>) {
        let places = [("T1", "U1"), ("T1", "U2"), ("T2", "U1"), ("T12", "U1")];
        for (n, (team, user)) in places.iter().enumerate() {
            let id = thread(&format!("slack:{team}:C1:{n}.000000"));
            store
                .touch(team, user, &id, Millis(n as i64))
                .await
                .unwrap();
        }
        for (n, (team, user)) in places.iter().enumerate() {
            assert_eq!(
                store.recent(team, user, 10).await.unwrap(),
                listing(&[(&format!("slack:{team}:C1:{n}.000000"), n as i64)]),
                "{team}/{user} sees only its own thread"
            );
        }
        assert_eq!(store.recent("T2", "U2", 10).await.unwrap(), vec![]);
        // A separator in an id could make two users share one record: refused, not stored.
        let id = thread("slack:T1:C1:9.000000");
        for (team, user) in [
            ("T1:U1", "X"),
            ("T1", "U1:X"),
            ("", "U1"),
            ("T1", ""),
            ("t1", "U1"),
        ] {
            assert!(
                store.touch(team, user, &id, Millis(9)).await.is_err(),
                "{team:?}/{user:?} is not a Slack id"
            );
            assert!(store.recent(team, user, 10).await.is_err());
        }
        assert_eq!(store.recent("T1", "U1", 10).await.unwrap().len(), 1);
    }

    /// Touches 105 threads (at 1..=105 ms), so the five oldest go; the caller then checks the
    /// storage holds no more than `MAX_USER_THREADS` for `T1`/`U1`.
    pub async fn only_the_newest_hundred_are_kept(store: Arc<dyn SlackUserThreads>) {
        let id = |i: i64| thread(&format!("slack:T1:C1:{i}.000000"));
        for i in 1..=105i64 {
            store.touch("T1", "U1", &id(i), Millis(i)).await.unwrap();
        }
        let recent = store.recent("T1", "U1", 100).await.unwrap();
        assert_eq!(recent.len(), MAX_USER_THREADS);
        assert_eq!(recent[0].last_used, Millis(105));
        assert_eq!(recent[99].last_used, Millis(6), "1 to 5 were dropped");

        // A dropped thread used again comes back on top, and pushes out the next oldest.
        store.touch("T1", "U1", &id(1), Millis(200)).await.unwrap();
        // A new thread older than everything kept is dropped at once.
        store.touch("T1", "U1", &id(0), Millis(0)).await.unwrap();
        let recent = store.recent("T1", "U1", 100).await.unwrap();
        assert_eq!(recent.len(), MAX_USER_THREADS);
        assert_eq!(recent[0], listing(&[("slack:T1:C1:1.000000", 200)])[0]);
        assert_eq!(recent[99].last_used, Millis(7));
        assert!(recent.iter().all(|t| t.thread_id != id(0)));
    }

    pub async fn concurrent_first_touches_are_all_recorded(store: Arc<dyn SlackUserThreads>) {
        let tasks: Vec<_> = (1..=20i64)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let id = thread(&format!("slack:T1:C1:{i}.000000"));
                    store.touch("T1", "U9", &id, Millis(i)).await
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        let recent = store.recent("T1", "U9", 100).await.unwrap();
        let times: Vec<i64> = recent.iter().map(|t| t.last_used.0).collect();
        assert_eq!(times, (1..=20).rev().collect::<Vec<_>>());

        // Racing touches of one thread leave the latest time.
        let one = thread("slack:T1:C2:1.000000");
        let tasks: Vec<_> = (1..=16i64)
            .map(|i| {
                let (store, one) = (store.clone(), one.clone());
                tokio::spawn(async move { store.touch("T1", "U8", &one, Millis(i * 100)).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!(
            store.recent("T1", "U8", 10).await.unwrap(),
            listing(&[("slack:T1:C2:1.000000", 1_600)])
        );
    }

    pub async fn unusual_thread_ids_round_trip(store: Arc<dyn SlackUserThreads>) {
        let long = format!("z{}", "-._:".repeat(31)) + "end";
        let ids = [
            "slack:T1:D0456",
            "tenant:a.b_c-d",
            "x",
            "a..b",
            "trailing:",
            ":leading",
            "-",
            // The names of the stored attributes, which a map key must not be mistaken for.
            "threads",
            "thread_id",
            "expires_at",
            "slack-user:T1:U1",
            long.as_str(),
        ];
        for (i, raw) in ids.iter().enumerate() {
            store
                .touch("T1", "U1", &thread(raw), Millis(i as i64 + 1))
                .await
                .unwrap();
        }
        let mut expected: Vec<(&str, i64)> = ids
            .iter()
            .enumerate()
            .map(|(i, raw)| (*raw, i as i64 + 1))
            .collect();
        expected.reverse();
        assert_eq!(
            store.recent("T1", "U1", 100).await.unwrap(),
            listing(&expected)
        );
        // Updates find the same entries again.
        store
            .touch("T1", "U1", &thread("threads"), Millis(1_000))
            .await
            .unwrap();
        store
            .touch("T1", "U1", &thread(&long), Millis(1))
            .await
            .unwrap();
        let recent = store.recent("T1", "U1", 2).await.unwrap();
        assert_eq!(
            recent,
            listing(&[("threads", 1_000), (long.as_str(), ids.len() as i64)])
        );
        assert_eq!(
            store.recent("T1", "U1", 100).await.unwrap().len(),
            ids.len()
        );
    }
}

/// The names of every suite test, for the runners below.
macro_rules! for_each_suite_test {
    ($runner:ident) => {
        $runner!(
            recent_lists_the_newest_first,
            a_later_touch_wins_an_earlier_never_does,
            limit_caps_the_listing,
            users_and_teams_are_apart,
            only_the_newest_hundred_are_kept,
            concurrent_first_touches_are_all_recorded,
            unusual_thread_ids_round_trip,
        );
    };
}

mod sqlite {
    use std::sync::Arc;

    use threadbox_core::ports::MAX_USER_THREADS;
    use threadbox_sqlite::{Database, SqliteSlackUserThreads};

    use super::suite;

    macro_rules! sqlite_suite {
        ($($name:ident),* $(,)?) => {$(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let dir = tempfile::tempdir().unwrap();
                let store = SqliteSlackUserThreads::open(dir.path().join("threads.db")).unwrap();
                suite::$name(Arc::new(store)).await;
            }
        )*};
    }

    for_each_suite_test!(sqlite_suite);

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn keeps_at_most_100_rows_per_user() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("threads.db");
        let store = SqliteSlackUserThreads::open(&path).unwrap();
        suite::only_the_newest_hundred_are_kept(Arc::new(store)).await;
        let rows: i64 = Database::open(&path, "")
            .unwrap()
            .call_blocking(|conn| {
                conn.query_row(
                    "SELECT COUNT(*) FROM slack_user_threads WHERE team = 'T1' AND user = 'U1'",
                    [],
                    |row| row.get(0),
                )
            })
            .unwrap();
        assert_eq!(rows, MAX_USER_THREADS as i64);
    }
}

/// On the Slack status table, as deployed: each test on its own table, made by the same helper
/// as the status store's tests (which mirrors `SlackStatusTable` in `infra/template.yaml`).
#[cfg(feature = "aws")]
mod dynamo {
    use std::sync::Arc;
    use std::time::Duration;

    use aws_sdk_dynamodb::types::AttributeValue;
    use threadbox_aws::dynamo::{
        create_slack_status_table, DynamoSlackStatusStore, DynamoSlackUserThreads,
    };
    use threadbox_core::domain::{Millis, ThreadId};
    use threadbox_core::ports::{
        SlackStatusStore, SlackUserThreads, StatusMessage, MAX_USER_THREADS,
    };
    use threadbox_tests::aws::{aws_configured, sdk_config, unique_name};

    use super::suite;

    /// A store on a fresh table, or `None` when skipped.
    async fn fresh(test: &str) -> Option<DynamoSlackUserThreads> {
        if !aws_configured(test) {
            return None;
        }
        let table = unique_name("slack-status");
        let store = DynamoSlackUserThreads::from_sdk_config(&sdk_config().await, &table);
        create_slack_status_table(store.client(), &table)
            .await
            .expect("create the Slack status table");
        Some(store)
    }

    macro_rules! dynamo_suite {
        ($($name:ident),* $(,)?) => {$(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let Some(store) = fresh(stringify!($name)).await else {
                    return;
                };
                suite::$name(Arc::new(store)).await;
            }
        )*};
    }

    for_each_suite_test!(dynamo_suite);

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn keeps_at_most_100_entries_per_user() {
        let Some(store) = fresh("keeps_at_most_100_entries_per_user").await else {
            return;
        };
        suite::only_the_newest_hundred_are_kept(Arc::new(store.clone())).await;
        let item = store
            .client()
            .get_item()
            .table_name(store.table())
            .key("thread_id", AttributeValue::S("slack-user:T1:U1".into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .expect("the user's item");
        let Some(AttributeValue::M(threads)) = item.get("threads") else {
            panic!("no threads map in {item:?}");
        };
        assert_eq!(threads.len(), MAX_USER_THREADS);
        assert!(
            item.contains_key("expires_at"),
            "the item carries the table's TTL"
        );
    }

    /// The user items share the table with the status rows without disturbing them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn status_rows_and_user_items_share_the_table() {
        let Some(store) = fresh("status_rows_and_user_items_share_the_table").await else {
            return;
        };
        let statuses = DynamoSlackStatusStore::new(store.client().clone(), store.table());
        let thread = ThreadId::parse("slack:T1:C1:1.000001").unwrap();
        let message = StatusMessage {
            channel: "C1".into(),
            ts: "9.1".into(),
            seq: 3,
        };
        assert!(statuses.put(&thread, &message).await.unwrap());
        store.touch("T1", "U1", &thread, Millis(5)).await.unwrap();
        assert_eq!(statuses.get(&thread).await.unwrap(), Some(message));
        assert_eq!(store.recent("T1", "U1", 10).await.unwrap().len(), 1);
    }

    /// An item past its TTL (DynamoDB deletes it lazily) reads as empty and is replaced whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn an_expired_user_item_is_absent() {
        let Some(store) = fresh("an_expired_user_item_is_absent").await else {
            return;
        };
        let short = store.clone().with_retention(Some(Duration::ZERO));
        let old = ThreadId::parse("slack:T1:C1:1.000001").unwrap();
        short.touch("T1", "U1", &old, Millis(10)).await.unwrap();
        // TTL counts whole seconds: wait until the expiry is strictly in the past.
        tokio::time::sleep(Duration::from_millis(2_100)).await;
        assert_eq!(store.recent("T1", "U1", 10).await.unwrap(), vec![]);
        let new = ThreadId::parse("slack:T1:C1:2.000002").unwrap();
        store.touch("T1", "U1", &new, Millis(5)).await.unwrap();
        let recent = store.recent("T1", "U1", 10).await.unwrap();
        assert_eq!(recent.len(), 1, "the expired entries went with the item");
        assert_eq!(recent[0].thread_id, new);
    }
}
