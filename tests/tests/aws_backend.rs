//! The store, queue, lifecycle and dedupe conformance suites against DynamoDB and SQS, on whatever
//! endpoint `AWS_ENDPOINT_URL` names (moto's server under `scripts/test.sh`), plus what only the
//! AWS adapters need proving: corrupt items, an unreachable endpoint, the request count of a
//! resolve, and SQS's handling of superseded receipts.
//!
//! Each test makes its own uniquely named tables and queues. Without `AWS_ENDPOINT_URL` every
//! test prints why it is skipped and passes, unless `THREADBOX_REQUIRE_AWS=1`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use threadbox_aws::dynamo::{create_tables, DynamoDedupe, DynamoSessionStore};
use threadbox_aws::sdk::{load_config, ClientSettings};
use threadbox_aws::sqs::{create_fifo_queue, SqsQueue};
use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{
    DedupeStore, DurableQueue, OutgoingMessage, QueueError, SessionStore, StoreError,
};
use threadbox_testing::lifecycle_conformance::Harness;
use threadbox_testing::queue_conformance as queue;
use threadbox_testing::store_conformance as store;
use threadbox_tests::aws::{
    aws_configured, fresh_queue, fresh_queue_urls, fresh_store, sdk_config, unique_name, AwsBackend,
};

/// SQS counts visibility in whole seconds.
const SHORT: Duration = Duration::from_secs(1);
const LONG: Duration = Duration::from_secs(60);
const MAX_RECEIVES: u32 = 3;

/// A fresh queue for a queue-suite test, or `None` when skipped.
async fn queue_for(test: &str, max_receives: u32) -> Option<SqsQueue> {
    if !aws_configured(test) {
        return None;
    }
    Some(fresh_queue(&sdk_config().await, max_receives).await)
}

mod store_conformance {
    use super::AwsBackend;
    threadbox_testing::store_conformance_tests!(AwsBackend::new);
}

mod lifecycle_conformance {
    use super::AwsBackend;
    threadbox_testing::lifecycle_conformance_tests!(AwsBackend::new);
}

mod queue_conformance {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn send_receive_ack_round_trip() {
        let Some(q) = queue_for("send_receive_ack_round_trip", 5).await else {
            return;
        };
        queue::send_receive_ack_round_trip(&q).await;
    }

    /// The dedup-after-ack half is left out: moto forgets a dedup id when its message is deleted
    /// (SQS keeps it for five minutes). See `adapters::sqs`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn duplicate_dedup_id_is_dropped_while_queued() {
        let Some(q) = queue_for("duplicate_dedup_id_is_dropped_while_queued", 5).await else {
            return;
        };
        queue::duplicate_dedup_id_is_dropped_while_queued(&q).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn in_flight_message_blocks_only_its_group() {
        let Some(q) = queue_for("in_flight_message_blocks_only_its_group", 5).await else {
            return;
        };
        queue::in_flight_message_blocks_only_its_group(&q).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn visibility_timeout_redelivers_with_higher_receive_count() {
        let Some(q) = queue_for("visibility_timeout_redelivers_with_higher_receive_count", 5).await
        else {
            return;
        };
        queue::visibility_timeout_redelivers_with_higher_receive_count(&q, SHORT).await;
    }

    /// SQS refuses receipts it never issued; a superseded one is covered by
    /// `a_superseded_receipt_is_harmless_on_sqs` below.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn unknown_receipt_is_rejected() {
        let Some(q) = queue_for("unknown_receipt_is_rejected", 5).await else {
            return;
        };
        queue::unknown_receipt_is_rejected(&q).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn release_makes_message_visible_at_once() {
        let Some(q) = queue_for("release_makes_message_visible_at_once", 5).await else {
            return;
        };
        queue::release_makes_message_visible_at_once(&q).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn dead_letter_after_max_receives() {
        let Some(q) = queue_for("dead_letter_after_max_receives", MAX_RECEIVES).await else {
            return;
        };
        queue::dead_letter_after_max_receives(&q, MAX_RECEIVES, SHORT).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn bad_input_is_rejected_and_nothing_written() {
        let Some(q) = queue_for("bad_input_is_rejected_and_nothing_written", 5).await else {
            return;
        };
        queue::bad_input_is_rejected_and_nothing_written(&q).await;
    }

    /// Two handles with their own clients, as two processes would have.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_receivers_deliver_each_message_once() {
        if !aws_configured("concurrent_receivers_deliver_each_message_once") {
            return;
        }
        let urls = fresh_queue_urls(&sdk_config().await, 5).await;
        let a = SqsQueue::from_sdk_config(&sdk_config().await, urls.clone());
        let b = SqsQueue::from_sdk_config(&sdk_config().await, urls);
        queue::concurrent_receivers_deliver_each_message_once(&[&a, &b]).await;
    }
}

fn message(group: &str, dedup: &str, body: &str) -> OutgoingMessage {
    OutgoingMessage {
        group_id: group.to_owned(),
        dedup_id: dedup.to_owned(),
        body: body.to_owned(),
    }
}

/// SQS does not tell a receipt superseded by a later receive from the current one (moto even
/// deletes with it). What must hold is that this is harmless: the current holder's ack succeeds
/// and the message is not delivered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_superseded_receipt_is_harmless_on_sqs() {
    let Some(q) = queue_for("a_superseded_receipt_is_harmless_on_sqs", 5).await else {
        return;
    };
    q.send(&[message("g", "d", "body")]).await.unwrap();
    let first = q.receive(10, SHORT).await.unwrap();
    assert_eq!(first.len(), 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    let again = loop {
        let got = q.receive(10, LONG).await.unwrap();
        if !got.is_empty() || Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        again.len(),
        1,
        "the message comes back after its visibility"
    );
    assert_eq!(again[0].receive_count, 2);
    match q.ack(&first[0].receipt).await {
        Ok(()) | Err(QueueError::StaleReceipt(_)) => {}
        Err(other) => panic!("a superseded ack is accepted or stale, not {other:?}"),
    }
    q.ack(&again[0].receipt)
        .await
        .expect("the current holder's ack succeeds");
    assert!(
        q.receive(10, Duration::ZERO).await.unwrap().is_empty(),
        "nothing is delivered again"
    );
}

/// More than ten messages, or more than 256 KiB of bodies, go out as several batches, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn large_sends_are_split_into_batches_in_order() {
    let Some(q) = queue_for("large_sends_are_split_into_batches_in_order", 5).await else {
        return;
    };
    let mut messages: Vec<OutgoingMessage> = (0..23)
        .map(|i| message("small", &format!("s{i}"), &i.to_string()))
        .collect();
    let big = "b".repeat(200 * 1024);
    messages.push(message("big", "b1", &big));
    messages.push(message("big", "b2", &big));
    q.send(&messages).await.unwrap();

    let mut seen: HashMap<String, Vec<String>> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.values().map(Vec::len).sum::<usize>() < messages.len() && Instant::now() < deadline {
        for m in q.receive(10, LONG).await.unwrap() {
            seen.entry(m.group_id.clone())
                .or_default()
                .push(m.dedup_id.clone());
            q.ack(&m.receipt).await.unwrap();
        }
    }
    let small: Vec<String> = (0..23).map(|i| format!("s{i}")).collect();
    assert_eq!(seen.get("small"), Some(&small));
    assert_eq!(
        seen.get("big"),
        Some(&vec!["b1".to_owned(), "b2".to_owned()])
    );
}

/// The table and queue helpers can run again on existing resources (local loops call them on
/// every start).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn creating_tables_and_queues_twice_is_harmless() {
    if !aws_configured("creating_tables_and_queues_twice_is_harmless") {
        return;
    }
    let sdk = sdk_config().await;
    let store = fresh_store(&sdk).await;
    create_tables(store.client(), store.config())
        .await
        .expect("a second create is fine");
    let client = aws_sdk_sqs::Client::new(&sdk);
    let name = unique_name("twice");
    let first = create_fifo_queue(&client, &name, 5).await.unwrap();
    let second = create_fifo_queue(&client, &name, 5).await.unwrap();
    assert_eq!(first, second);
}

/// A session item missing a field is `Corrupt`, naming the thread, for a load and a listing alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_corrupt_session_item_is_reported_with_its_thread() {
    if !aws_configured("a_corrupt_session_item_is_reported_with_its_thread") {
        return;
    }
    let store = fresh_store(&sdk_config().await).await;
    store
        .client()
        .put_item()
        .table_name(&store.config().sessions_table)
        .item("thread_id", AttributeValue::S("corrupt-1".into()))
        .item("kind", AttributeValue::S("session".into()))
        .item("version", AttributeValue::N("3".into()))
        .send()
        .await
        .unwrap();
    let thread = ThreadId::parse("corrupt-1").unwrap();
    let err = store.load(&thread).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    assert!(err.to_string().contains("corrupt-1"), "{err}");
    let err = store.list(10, None).await.unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    assert!(err.to_string().contains("corrupt-1"), "{err}");
}

/// An endpoint nobody listens on: every call is `Unavailable` within a few seconds (connect
/// timeout and a short retry budget), and nothing reaches the real tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreachable_store_is_unavailable_quickly_and_writes_nothing() {
    if !aws_configured("an_unreachable_store_is_unavailable_quickly_and_writes_nothing") {
        return;
    }
    let sdk = sdk_config().await;
    let reachable = fresh_store(&sdk).await;
    let closed_port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    // Set on each client's own configuration: there it overrides `AWS_ENDPOINT_URL`, which the
    // shared configuration's endpoint does not.
    let closed = format!("http://127.0.0.1:{closed_port}");
    let sdk = load_config(&ClientSettings::default()).await;
    let dynamodb = aws_sdk_dynamodb::config::Builder::from(&sdk)
        .endpoint_url(&closed)
        .build();
    let store = DynamoSessionStore::new(
        aws_sdk_dynamodb::Client::from_conf(dynamodb),
        reachable.config().clone(),
    );
    let (session, event) = store::new_session("unreachable-1", 1_000);

    let started = Instant::now();
    let err = store
        .insert_new(&session, std::slice::from_ref(&event))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    eprintln!("unreachable DynamoDB answered Unavailable in {took:?}: {err}");
    let err = store.load(&session.thread_id).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("session store unavailable: DynamoDB GetItem"),
        "{err}"
    );
    // Every other store names itself, not the session store.
    let dedupe = DynamoDedupe::new(store.client().clone(), "tb-unreachable-dedupe");
    let err = dedupe.contains("k").await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("dedupe store unavailable: DynamoDB GetItem tb-unreachable-dedupe"),
        "{err}"
    );

    assert_eq!(reachable.load(&session.thread_id).await.unwrap(), None);
    assert!(reachable
        .events_after(&session.thread_id, 0, 10)
        .await
        .unwrap()
        .is_empty());

    let sqs = aws_sdk_sqs::config::Builder::from(&sdk)
        .endpoint_url(&closed)
        .build();
    let queue = SqsQueue::new(
        aws_sdk_sqs::Client::from_conf(sqs),
        fresh_queue_urls(&sdk, 5).await,
    );
    let started = Instant::now();
    let err = queue.send(&[message("g", "d", "body")]).await.unwrap_err();
    assert!(matches!(err, QueueError::Unavailable(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The benchmark's figure as a test: resolving an already active thread costs at most two
/// DynamoDB requests (one read, one conditional write).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resolving_an_active_thread_costs_at_most_two_requests() {
    let Some(backend) =
        AwsBackend::new("resolving_an_active_thread_costs_at_most_two_requests").await
    else {
        return;
    };
    let h = Harness::new(backend.store.clone(), backend.events.clone());
    let thread = ThreadId::parse("requests-1").unwrap();
    h.tb.resolve(&thread).await.unwrap();
    let before = backend.store.stats();
    let runs = 20;
    for _ in 0..runs {
        h.clock.advance(Duration::from_millis(1));
        h.tb.resolve(&thread).await.unwrap();
    }
    let after = backend.store.stats();
    let requests = (after.reads - before.reads) + (after.writes - before.writes);
    let per_resolve = requests as f64 / f64::from(runs);
    eprintln!("DynamoDB requests per resolve of an active thread: {per_resolve:.2}");
    assert!(per_resolve <= 2.0, "{per_resolve} requests per resolve");
}

/// The dedupe suite against `DynamoDedupe`, each test on its own fresh table.
mod dedupe_conformance {
    use std::sync::Arc;

    use threadbox_aws::dynamo::{create_dedupe_table, DynamoDedupe};
    use threadbox_testing::dedupe_conformance as dedupe;
    use threadbox_tests::aws::{aws_configured, sdk_config, unique_name};

    macro_rules! dedupe_suite {
        ($($name:ident),* $(,)?) => {$(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                if !aws_configured(stringify!($name)) {
                    return;
                }
                let table = unique_name("dedupe");
                let store = DynamoDedupe::from_sdk_config(&sdk_config().await, &table);
                create_dedupe_table(store.client(), &table)
                    .await
                    .expect("create the dedupe table");
                dedupe::$name(Arc::new(store)).await;
            }
        )*};
    }

    dedupe_suite!(
        the_first_claim_wins_and_repeats_are_duplicates,
        released_and_expired_keys_can_be_claimed_again,
        concurrent_claims_have_exactly_one_winner,
    );
}

/// The window counter suite against `DynamoWindowCounter`, each test on its own dedupe table.
mod window_counter_conformance {
    use std::sync::Arc;

    use threadbox_aws::dynamo::{create_dedupe_table, DynamoWindowCounter};
    use threadbox_core::ports::WindowCounter;
    use threadbox_tests::aws::{aws_configured, sdk_config, unique_name};

    async fn counter(test: &str) -> Option<(Arc<dyn WindowCounter>, ())> {
        if !aws_configured(test) {
            return None;
        }
        let sdk = sdk_config().await;
        let table = unique_name("counts");
        create_dedupe_table(&aws_sdk_dynamodb::Client::new(&sdk), &table)
            .await
            .expect("create the dedupe table");
        Some((
            Arc::new(DynamoWindowCounter::from_sdk_config(&sdk, &table)),
            (),
        ))
    }

    threadbox_testing::window_counter_conformance_tests!(counter);
}

/// The warm pool suite against DynamoDB and SQS: members in the sessions table.
mod warm_pool_conformance {
    use std::sync::Arc;

    use threadbox_core::ports::{DurableQueue, SessionStore, WarmPoolStore};
    use threadbox_tests::aws::AwsBackend;

    #[allow(clippy::type_complexity)]
    async fn backend(
        test: &str,
    ) -> Option<(
        Arc<dyn SessionStore>,
        Arc<dyn WarmPoolStore>,
        Arc<dyn DurableQueue>,
        (),
    )> {
        let backend = AwsBackend::new(test).await?;
        Some((
            backend.store.clone(),
            backend.store.clone(),
            backend.events.clone(),
            (),
        ))
    }

    threadbox_testing::warm_pool_conformance_tests!(backend);
}

/// The budget suite against DynamoDB and SQS, the counters on a dedupe table of their own.
mod budget_conformance {
    use std::sync::Arc;

    use threadbox_aws::dynamo::{create_dedupe_table, DynamoWindowCounter};
    use threadbox_core::ports::{DurableQueue, SessionStore, WindowCounter};
    use threadbox_tests::aws::{unique_name, AwsBackend};

    #[allow(clippy::type_complexity)]
    async fn backend(
        test: &str,
    ) -> Option<(
        Arc<dyn SessionStore>,
        Arc<dyn DurableQueue>,
        Arc<dyn WindowCounter>,
        (),
    )> {
        let backend = AwsBackend::new(test).await?;
        let table = unique_name("budgets");
        create_dedupe_table(&aws_sdk_dynamodb::Client::new(&backend.sdk), &table)
            .await
            .expect("create the dedupe table");
        let counter = Arc::new(DynamoWindowCounter::from_sdk_config(&backend.sdk, &table));
        Some((backend.store.clone(), backend.events.clone(), counter, ()))
    }

    threadbox_testing::budget_conformance_tests!(backend);
}

/// The Slack status store suite against `DynamoSlackStatusStore`, each test on its own table.
#[cfg(feature = "slack")]
mod slack_status_conformance {
    use std::sync::Arc;

    use threadbox_aws::dynamo::{create_slack_status_table, DynamoSlackStatusStore};
    use threadbox_testing::slack_status_conformance as suite;
    use threadbox_tests::aws::{aws_configured, sdk_config, unique_name};

    macro_rules! slack_status_suite {
        ($($name:ident),* $(,)?) => {$(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                if !aws_configured(stringify!($name)) {
                    return;
                }
                let table = unique_name("slack-status");
                let store = DynamoSlackStatusStore::from_sdk_config(&sdk_config().await, &table);
                create_slack_status_table(store.client(), &table)
                    .await
                    .expect("create the Slack status table");
                suite::$name(Arc::new(store)).await;
            }
        )*};
    }

    slack_status_suite!(
        a_later_event_replaces_an_earlier_one_never_the_reverse,
        racing_writers_leave_the_latest_event,
    );
}

/// The subscription store suite against `DynamoSubscriptionStore`, each test on its own table.
mod subscription_conformance {
    use std::sync::Arc;

    use threadbox_aws::dynamo::{create_subscriptions_table, DynamoSubscriptionStore};
    use threadbox_core::ports::SubscriptionStore;
    use threadbox_tests::aws::{aws_configured, sdk_config, unique_name};

    async fn store(test: &str) -> Option<(Arc<dyn SubscriptionStore>, ())> {
        if !aws_configured(test) {
            return None;
        }
        let table = unique_name("subscriptions");
        let store = DynamoSubscriptionStore::from_sdk_config(&sdk_config().await, &table);
        create_subscriptions_table(store.client(), &table)
            .await
            .expect("create the subscriptions table");
        Some((Arc::new(store), ()))
    }

    threadbox_testing::subscription_conformance_tests!(store);
}

/// `ApiGatewaySender` against moto's Management API: a post and a close reach it (moto answers
/// every connection id; the 410 mapping is unit-tested in the adapter).
mod apigw_sender {
    use threadbox_aws::apigw::ApiGatewaySender;
    use threadbox_core::ports::{ConnectionSender, Frame};
    use threadbox_tests::aws::{aws_configured, sdk_config};

    #[tokio::test]
    async fn post_to_connection_and_close_reach_the_management_api() {
        if !aws_configured("post_to_connection_and_close_reach_the_management_api") {
            return;
        }
        let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap();
        let sender = ApiGatewaySender::from_sdk_config(&sdk_config().await, &endpoint);
        sender
            .send("conn-1", &Frame::from(r#"{"type":"pong"}"#))
            .await
            .expect("PostToConnection");
        sender.close("conn-1").await.expect("DeleteConnection");
    }
}

/// Retention on DynamoDB is TTL: the attributes must be right, and what TTL leaves behind for a
/// while (it deletes within days, not at the second) must never be read or block a new life.
mod retention {
    use super::*;
    use threadbox_core::domain::{Cause, Status};

    /// Epoch seconds now.
    fn now_secs() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    async fn session_ttl(store: &DynamoSessionStore, thread: &ThreadId) -> Option<i64> {
        let item = store
            .client()
            .get_item()
            .table_name(&store.config().sessions_table)
            .key("thread_id", AttributeValue::S(thread.to_string()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .expect("the session item");
        item.get("expires_at")
            .map(|v| v.as_n().unwrap().parse().unwrap())
    }

    /// A live record has no TTL; a destroyed one expires the retention after it was destroyed
    /// (never before its events); brought back to life, it loses the TTL again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn only_destroyed_records_carry_a_ttl_of_the_retention() {
        let Some(backend) =
            AwsBackend::new("only_destroyed_records_carry_a_ttl_of_the_retention").await
        else {
            return;
        };
        let store = backend.store.clone();
        let h = Harness::new(store.clone(), backend.events.clone());
        let thread = ThreadId::parse("ttl-1").unwrap();
        h.tb.resolve(&thread).await.unwrap();
        assert_eq!(session_ttl(&store, &thread).await, None, "live");

        let before = now_secs();
        h.tb.destroy(&thread, Cause::User).await.unwrap();
        assert_eq!(h.status(&thread).await, Status::Destroyed);
        let retention = store.config().retention.unwrap().as_secs() as i64;
        let ttl = session_ttl(&store, &thread).await.expect("destroyed");
        assert!(
            (before + retention..=now_secs() + retention + 1).contains(&ttl),
            "{ttl} for a retention of {retention} s"
        );
        for item in store
            .client()
            .query()
            .table_name(&store.config().events_table)
            .key_condition_expression("thread_id = :t")
            .expression_attribute_values(":t", AttributeValue::S(thread.to_string()))
            .send()
            .await
            .unwrap()
            .items
            .unwrap()
        {
            let event_ttl: i64 = item["expires_at"].as_n().unwrap().parse().unwrap();
            assert!(event_ttl <= ttl, "an event outlives its record: {item:?}");
        }

        h.tb.resolve(&thread).await.unwrap();
        assert_eq!(h.status(&thread).await, Status::Active);
        assert_eq!(session_ttl(&store, &thread).await, None, "alive again");
    }

    /// TTL deleted the record of a long-destroyed thread but not yet its events (it may take
    /// days): the next resolve starts a new life at seq 1, writing over the expired events it
    /// meets, and the history read back is the new life's only.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn expired_leftovers_neither_block_nor_show_in_a_new_life() {
        let Some(backend) =
            AwsBackend::new("expired_leftovers_neither_block_nor_show_in_a_new_life").await
        else {
            return;
        };
        let store = backend.store.clone();
        let client = store.client().clone();
        let h = Harness::new(store.clone(), backend.events.clone());
        let thread = ThreadId::parse("ttl-leftovers").unwrap();
        h.tb.resolve(&thread).await.unwrap();
        h.tb.destroy(&thread, Cause::User).await.unwrap();
        h.tb.resolve(&thread).await.unwrap();
        h.tb.destroy(&thread, Cause::User).await.unwrap();
        let old = h.events(&thread).await;
        assert!(old.len() >= 6, "{old:?}");

        // What TTL leaves a while after the retention: the record gone, the events expired.
        client
            .delete_item()
            .table_name(&store.config().sessions_table)
            .key("thread_id", AttributeValue::S(thread.to_string()))
            .send()
            .await
            .unwrap();
        for event in &old {
            client
                .update_item()
                .table_name(&store.config().events_table)
                .key("thread_id", AttributeValue::S(thread.to_string()))
                .key("seq", AttributeValue::N(event.seq.to_string()))
                .update_expression("SET expires_at = :past")
                .expression_attribute_values(
                    ":past",
                    AttributeValue::N((now_secs() - 60).to_string()),
                )
                .send()
                .await
                .unwrap();
        }
        assert!(
            h.events(&thread).await.is_empty(),
            "expired history is not read"
        );
        assert!(store
            .unsent_events(threadbox_core::domain::Millis(i64::MAX), 100)
            .await
            .unwrap()
            .iter()
            .all(|e| e.thread_id != thread));

        let again = h.tb.resolve(&thread).await.unwrap();
        assert!(again.created);
        assert_eq!(again.generation, 1);
        let fresh = h.events(&thread).await;
        assert!(!fresh.is_empty() && fresh.len() < old.len(), "{fresh:?}");
        assert_eq!(
            fresh.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (1..=fresh.len() as u64).collect::<Vec<_>>()
        );
        assert_eq!(fresh[0].from, None);
        assert!(fresh
            .iter()
            .all(|e| !old.iter().any(|o| o.event_id == e.event_id)));
    }

    /// A Slack status row past its TTL reads as none and any seq replaces it: the thread's next
    /// life (seqs from 1) gets a status message of its own instead of a frozen one.
    #[cfg(feature = "slack")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn an_expired_slack_status_row_is_absent() {
        use threadbox_aws::dynamo::{create_slack_status_table, DynamoSlackStatusStore};
        use threadbox_slack::{SlackStatusStore, StatusMessage};

        if !aws_configured("an_expired_slack_status_row_is_absent") {
            return;
        }
        let sdk = sdk_config().await;
        let table = unique_name("status");
        let client = aws_sdk_dynamodb::Client::new(&sdk);
        create_slack_status_table(&client, &table).await.unwrap();
        let statuses = DynamoSlackStatusStore::new(client.clone(), &table)
            .with_retention(Some(Duration::from_secs(3600)));
        let thread = ThreadId::parse("slack:T1:C1:1.000001").unwrap();
        let message = |seq| StatusMessage {
            channel: "C1".into(),
            ts: format!("9.{seq}"),
            seq,
        };
        assert!(statuses.put(&thread, &message(9)).await.unwrap());
        assert!(!statuses.put(&thread, &message(1)).await.unwrap(), "older");
        let row = client
            .get_item()
            .table_name(&table)
            .key("thread_id", AttributeValue::S(thread.to_string()))
            .send()
            .await
            .unwrap()
            .item
            .unwrap();
        let ttl: i64 = row["expires_at"].as_n().unwrap().parse().unwrap();
        assert!(
            (now_secs() + 3599..=now_secs() + 3601).contains(&ttl),
            "{ttl}"
        );

        client
            .update_item()
            .table_name(&table)
            .key("thread_id", AttributeValue::S(thread.to_string()))
            .update_expression("SET expires_at = :past")
            .expression_attribute_values(":past", AttributeValue::N((now_secs() - 60).to_string()))
            .send()
            .await
            .unwrap();
        assert_eq!(statuses.get(&thread).await.unwrap(), None);
        assert!(
            statuses.put(&thread, &message(1)).await.unwrap(),
            "a new life"
        );
        assert_eq!(statuses.get(&thread).await.unwrap(), Some(message(1)));
    }
}

/// The checkpoint store suite against `DynamoCheckpointStore`, on a fresh sessions table each.
mod checkpoint_conformance {
    use std::sync::Arc;

    use threadbox_aws::dynamo::DynamoCheckpointStore;
    use threadbox_core::ports::CheckpointStore;
    use threadbox_tests::aws::{aws_configured, fresh_store, sdk_config};

    async fn store(test: &str) -> Option<(Arc<dyn CheckpointStore>, ())> {
        if !aws_configured(test) {
            return None;
        }
        let sdk = sdk_config().await;
        let sessions = fresh_store(&sdk).await;
        let store = DynamoCheckpointStore::from_sdk_config(&sdk, &sessions.config().sessions_table);
        Some((Arc::new(store), ()))
    }

    threadbox_testing::checkpoint_conformance_tests!(store);

    /// A thread whose last checkpoint went (a delete, its destroy) leaves an item TTL removes;
    /// a record added again takes the item back, without the TTL.
    #[tokio::test]
    async fn an_emptied_item_expires_and_a_new_record_keeps_it() {
        use aws_sdk_dynamodb::types::AttributeValue;
        use threadbox_core::domain::{CheckpointRetention, ThreadId};
        use threadbox_testing::checkpoint_conformance::checkpoint;
        let test = "an_emptied_item_expires_and_a_new_record_keeps_it";
        if !aws_configured(test) {
            return;
        }
        let sdk = sdk_config().await;
        let sessions = fresh_store(&sdk).await;
        let table = sessions.config().sessions_table.clone();
        let store = DynamoCheckpointStore::from_sdk_config(&sdk, &table);
        let expires_at = || {
            let (client, table) = (sessions.client().clone(), table.clone());
            async move {
                let item = client
                    .get_item()
                    .table_name(table)
                    .key("thread_id", AttributeValue::S("#checkpoints#cp-ttl".into()))
                    .consistent_read(true)
                    .send()
                    .await
                    .unwrap()
                    .item
                    .expect("the thread's item");
                item.get("expires_at")
                    .map(|v| v.as_n().unwrap().parse::<i64>().unwrap())
            }
        };
        let thread = ThreadId::parse("cp-ttl").unwrap();
        let first = checkpoint("cp-ttl", 1_000, 10);
        store
            .add(&first, &CheckpointRetention::default())
            .await
            .unwrap();
        assert_eq!(expires_at().await, None, "a thread with records keeps them");

        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        store.remove(&thread, &first.id).await.unwrap().unwrap();
        let expiry = expires_at().await.expect("an emptied item expires");
        assert!(
            (before..before + 60).contains(&expiry),
            "{expiry} vs {before}"
        );
        assert!(store.list(&thread).await.unwrap().is_empty());

        let second = checkpoint("cp-ttl", 2_000, 10);
        store
            .add(&second, &CheckpointRetention::default())
            .await
            .unwrap();
        assert_eq!(expires_at().await, None, "records again: no expiry");
        assert_eq!(store.list(&thread).await.unwrap(), vec![second]);
    }
}
