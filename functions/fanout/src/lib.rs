//! fanout: the lifecycle queue's consumer, delivering each event to every target once.
//!
//! SQS hands the function a batch of records from the FIFO lifecycle queue. Each record's body
//! should be one `LifecycleEvent`; the shared fan-out core delivers it to every target, skipping
//! targets that already have it (dedupe on `{target}:{event_id}` in DynamoDB), and says what to
//! do with the record. The handler turns that into SQS's partial batch response:
//!
//! - delivered: not reported, so SQS deletes it;
//! - a target asked to retry: reported in `batchItemFailures`, and visible again after the
//!   `retry_after` the target asked for (Slack's `Retry-After`), else a short back-off
//!   (`ChangeMessageVisibility` on that record only); after the queue's `maxReceiveCount`
//!   receives it moves to the dead-letter queue, where an operator can look at it and re-drive it;
//! - a body that is not an event, or that a target refuses for good: sent to the dead-letter
//!   queue at once (it can never succeed);
//! - the later records of a group whose earlier record failed: reported too, undelivered, as
//!   FIFO order requires, and made visible again at once so only the failed record's wait holds
//!   the group (the pipeline `threadbox_lambda::batch`, shared with `worker`).
//!
//! The invocation itself never fails: one bad record never sends a whole batch back.
//!
//! Targets: the log (every delivery is a JSON log line with the thread and sandbox), and, when the
//! function has a Slack bot token, the Slack status message of each Slack thread (edited in
//! place; its record in DynamoDB), and, when `THREADBOX_SUBSCRIPTIONS_TABLE` and
//! `THREADBOX_WS_CALLBACK_URL` are set, the WebSocket subscribers of each thread (the
//! `DynamoSubscriptionStore` and `PostToConnection`). The dedupe keeps each target's deliveries
//! apart, so adding one never repeats what the others delivered.

use std::convert::Infallible;
use std::sync::Arc;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::LambdaEvent;
use threadbox_core::fanout::{Fanout, FanoutTarget, LogTarget};
pub use threadbox_lambda::batch::BatchSettler;
use threadbox_lambda::batch::{BatchConsumer, DEFAULT_MAX_ATTEMPTS};
use threadbox_lambda::{Setup, SetupError};

/// The handler, holding the fan-out core (targets and dedupe store).
#[derive(Clone)]
pub struct FanoutHandler {
    fanout: Fanout,
    batch: BatchConsumer,
}

/// What `main` serves: the dedupe table and the targets (log, Slack status when a bot token is
/// set, WebSocket subscribers when the subscriptions table and callback URL are set) from the
/// environment, the lifecycle queue settling each batch.
pub async fn build(setup: Setup) -> Result<FanoutHandler, SetupError> {
    let Setup { sdk, env, secrets } = setup;
    let mut targets: Vec<Arc<dyn FanoutTarget>> = vec![Arc::new(LogTarget)];
    // A refused token sends the function to Secrets Manager for the rotated one.
    if let Some(slack) = threadbox_lambda::slack_status_target_watched(&sdk, &env, Some(&secrets))?
    {
        targets.push(Arc::new(slack));
    }
    if let Some(live) = threadbox_lambda::live_target(&sdk, &env)? {
        targets.push(Arc::new(live));
    }
    let dedupe = Arc::new(threadbox_lambda::dedupe(&sdk, &env)?);
    // The lifecycle queue settles each batch's records (visibility, dead letters), and the
    // dedupe table counts each record's own attempts.
    let queue = Arc::new(threadbox_lambda::lifecycle_queue(&sdk, &env)?);
    let settler = BatchSettler::new(queue).with_attempt_limit(
        dedupe.clone(),
        "lifecycle",
        DEFAULT_MAX_ATTEMPTS,
    );
    Ok(FanoutHandler::new(Fanout::new(dedupe, targets)).with_settler(settler))
}

impl FanoutHandler {
    /// A handler that reports failures only (the queue's own timeouts apply); see
    /// [`Self::with_settler`].
    pub fn new(fanout: Fanout) -> Self {
        Self {
            fanout,
            batch: BatchConsumer::default(),
        }
    }

    /// One invocation: each record's event to every target, each thread's in order.
    pub async fn handle(
        &self,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<SqsBatchResponse, Infallible> {
        let span = tracing::info_span!("batch", records = event.payload.records.len());
        let deliver = |body| self.fanout.deliver_body(body);
        Ok(self.batch.run(&event, span, deliver).await)
    }

    /// Settle records through `settler` (the lifecycle queue) before returning.
    pub fn with_settler(mut self, settler: BatchSettler) -> Self {
        self.batch = self.batch.with_settler(settler);
        self
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use async_trait::async_trait;
    use serde_json::{json, Value};
    use threadbox_aws::dynamo::{create_dedupe_table, DynamoDedupe};
    use threadbox_aws::sqs::{create_fifo_queue, SqsQueue};
    use threadbox_core::domain::LifecycleEvent;
    use threadbox_core::fanout::{DeliveryError, FanoutTarget, LogTarget};
    use threadbox_core::ports::DedupeStore;
    use threadbox_sqlite::SqliteDedupe;
    use threadbox_tests::aws::{aws_configured, sdk_config, unique_name};
    use threadbox_tests::lambda::{failed_ids, fixture_json, sqs_batch};

    use super::*;

    /// Remembers the event ids it was given; fails the first delivery of `fail_once`, asking
    /// to be retried after `retry_after` when set.
    #[derive(Default)]
    struct Recorder {
        seen: Mutex<Vec<String>>,
        fail_once: Mutex<Option<String>>,
        retry_after: Mutex<Option<Duration>>,
        fail_always: Mutex<Option<String>>,
    }

    #[async_trait]
    impl FanoutTarget for Recorder {
        fn name(&self) -> &str {
            "recorder"
        }

        async fn deliver(&self, event: &LifecycleEvent) -> Result<(), DeliveryError> {
            if self.fail_always.lock().unwrap().as_deref() == Some(event.event_id.as_str()) {
                return Err(DeliveryError::retry_after(
                    "the target is down",
                    Duration::ZERO,
                ));
            }
            let mut fail = self.fail_once.lock().unwrap();
            if fail.as_deref() == Some(event.event_id.as_str()) {
                *fail = None;
                return Err(match *self.retry_after.lock().unwrap() {
                    Some(after) => DeliveryError::retry_after("the target is busy", after),
                    None => DeliveryError::retry("the target is busy"),
                });
            }
            self.seen.lock().unwrap().push(event.event_id.clone());
            Ok(())
        }
    }

    impl Recorder {
        fn seen(&self) -> Vec<String> {
            self.seen.lock().unwrap().clone()
        }
    }

    fn handler(dedupe: Arc<dyn DedupeStore>) -> (FanoutHandler, Arc<Recorder>) {
        let recorder = Arc::new(Recorder::default());
        let fanout = Fanout::new(dedupe, vec![Arc::new(LogTarget), recorder.clone()]);
        (FanoutHandler::new(fanout), recorder)
    }

    fn sqlite_dedupe() -> (Arc<dyn DedupeStore>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteDedupe::open(dir.path().join("dedupe.db")).unwrap();
        (Arc::new(store), dir)
    }

    fn invocation(payload: Value) -> LambdaEvent<SqsEvent> {
        sqs_batch(payload, Duration::from_secs(30))
    }

    /// The fixture's batch, handled.
    async fn fixture_batch(handler: &FanoutHandler) -> SqsBatchResponse {
        let event = invocation(fixture_json("sqs-lifecycle-batch.json"));
        handler.handle(event).await.unwrap()
    }

    /// The fixture's event ids, in order (the malformed record has none).
    const E1: &str = "7d0f3c52-8a1e-4e8e-9a57-1b2c3d4e5f60";
    const E2: &str = "7d0f3c52-8a1e-4e8e-9a57-1b2c3d4e5f61";
    const MALFORMED: &str = "4f8e2a10-1c3d-4b5e-8f70-9a1b2c3d4e02";

    #[tokio::test]
    async fn a_malformed_record_fails_alone() {
        let (dedupe, _dir) = sqlite_dedupe();
        let (handler, recorder) = handler(dedupe);
        let response = fixture_batch(&handler).await;
        assert_eq!(failed_ids(&response), vec![MALFORMED]);
        assert_eq!(recorder.seen(), vec![E1, E2]);
        // The answer is what Lambda reads: `{"batchItemFailures":[{"itemIdentifier":...}]}`.
        assert_eq!(
            serde_json::to_value(&response).unwrap(),
            json!({ "batchItemFailures": [{ "itemIdentifier": MALFORMED }] })
        );
    }

    #[tokio::test]
    async fn a_redelivered_batch_reaches_each_target_once() {
        let (dedupe, _dir) = sqlite_dedupe();
        let (handler, recorder) = handler(dedupe);
        for _ in 0..2 {
            fixture_batch(&handler).await;
        }
        assert_eq!(recorder.seen(), vec![E1, E2]);
    }

    #[tokio::test]
    async fn a_retry_holds_back_the_rest_of_its_group_and_nothing_else() {
        let (dedupe, _dir) = sqlite_dedupe();
        let (handler, recorder) = handler(dedupe);
        *recorder.fail_once.lock().unwrap() = Some(E1.to_owned());
        let response = fixture_batch(&handler).await;
        let first = "4f8e2a10-1c3d-4b5e-8f70-9a1b2c3d4e01";
        let third = "4f8e2a10-1c3d-4b5e-8f70-9a1b2c3d4e03";
        // E2 shares E1's group (thread): it waits, undelivered, so order holds.
        assert_eq!(failed_ids(&response), vec![first, MALFORMED, third]);
        assert!(recorder.seen().is_empty());
    }

    #[tokio::test]
    async fn an_empty_batch_is_an_empty_answer() {
        let (dedupe, _dir) = sqlite_dedupe();
        let (handler, _) = handler(dedupe);
        let response = handler
            .handle(invocation(json!({ "Records": [] })))
            .await
            .unwrap();
        assert!(response.batch_item_failures.is_empty());
    }

    /// With a bot token the fanout function adds the Slack status target: a Slack thread gets
    /// one status message, edited in place as its events arrive, and a redelivery posts nothing.
    #[tokio::test]
    async fn slack_threads_get_one_status_message_edited_in_place() {
        use threadbox_slack::SlackStatusTarget;
        use threadbox_slack_web::{BotToken, SlackClientConfig, SlackWebClient};
        use threadbox_sqlite::SqliteSlackStatusStore;
        use threadbox_testing::slack_fake::SlackFake;

        let (dedupe, dir) = sqlite_dedupe();
        let slack = SlackFake::start("xoxb-fanout").await;
        let api = SlackWebClient::new(
            SlackClientConfig::new(BotToken::new("xoxb-fanout").unwrap())
                .with_api_url(&slack.api_url())
                .unwrap(),
        )
        .unwrap();
        let store = SqliteSlackStatusStore::open(dir.path().join("status.db")).unwrap();
        let target = SlackStatusTarget::new(Arc::new(api), Arc::new(store));
        let handler = FanoutHandler::new(Fanout::new(
            dedupe,
            vec![Arc::new(LogTarget), Arc::new(target)],
        ));
        for _ in 0..2 {
            let response = fixture_batch(&handler).await;
            assert_eq!(failed_ids(&response), vec![MALFORMED]);
        }
        let messages = slack.messages();
        let status: Vec<_> = messages
            .iter()
            .filter(|m| m.channel == "C0001" && m.thread_ts.as_deref() == Some("1700000000.000100"))
            .collect();
        assert_eq!(status.len(), 1, "one status message: {messages:?}");
        assert_eq!(
            status[0].history.len(),
            1,
            "edited once, for the second event"
        );
    }

    /// The SQS event source mapping, emulated against a real queue: receive a batch, call the
    /// handler, delete what it did not report; reported records come back after their
    /// visibility timeout, and the queue's redrive policy moves them to the dead-letter queue
    /// after `maxReceiveCount` receives. Dedupe is the real DynamoDB adapter.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_malformed_record_reaches_the_dead_letter_queue() {
        if !aws_configured("a_malformed_record_reaches_the_dead_letter_queue") {
            return;
        }
        const MAX_RECEIVES: u32 = 2;
        let sdk = sdk_config().await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let urls = create_fifo_queue(&sqs, &unique_name("fanout"), MAX_RECEIVES)
            .await
            .unwrap();
        let table = unique_name("dedupe");
        let dedupe = DynamoDedupe::from_sdk_config(&sdk, &table);
        create_dedupe_table(dedupe.client(), &table).await.unwrap();
        let (handler, recorder) = handler(Arc::new(dedupe));

        send_fixture(&sqs, &urls.queue_url).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut dead = Vec::new();
        while dead.is_empty() && Instant::now() < deadline {
            let received = receive(&sqs, &urls.queue_url, 1).await;
            if !received.is_empty() {
                let failed = hand_over(&handler, &received).await;
                delete_unreported(&sqs, &urls.queue_url, &received, &failed).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            dead = receive(&sqs, &urls.dead_letter_url, 30).await;
        }
        let fixture = fixture_json("sqs-lifecycle-batch.json");
        assert_eq!(dead.len(), 1, "the malformed record is dead-lettered");
        assert_eq!(
            dead[0].body(),
            fixture["Records"][1]["body"].as_str(),
            "and it is that record"
        );
        assert_eq!(
            recorder.seen(),
            vec![E1, E2],
            "the others were delivered once"
        );
    }

    /// Receive up to ten messages as the event source mapping does, hidden for `visibility`.
    async fn receive(
        sqs: &aws_sdk_sqs::Client,
        url: &str,
        visibility: i32,
    ) -> Vec<aws_sdk_sqs::types::Message> {
        sqs.receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(visibility)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default()
    }

    /// `received` handed to `handler` as the event source mapping hands it: the message ids
    /// the handler reported.
    async fn hand_over(
        handler: &FanoutHandler,
        received: &[aws_sdk_sqs::types::Message],
    ) -> Vec<String> {
        let records: Vec<Value> = received.iter().map(as_lambda_record).collect();
        let response = handler
            .handle(invocation(json!({ "Records": records })))
            .await
            .unwrap();
        failed_ids(&response)
    }

    /// Delete what the handler did not report, as the event source mapping does.
    async fn delete_unreported(
        sqs: &aws_sdk_sqs::Client,
        url: &str,
        received: &[aws_sdk_sqs::types::Message],
        failed: &[String],
    ) {
        for message in received {
            if !failed.iter().any(|f| f == message.message_id().unwrap()) {
                sqs.delete_message()
                    .queue_url(url)
                    .receipt_handle(message.receipt_handle().unwrap())
                    .send()
                    .await
                    .unwrap();
            }
        }
    }

    fn receive_count_of(message: &aws_sdk_sqs::types::Message) -> u32 {
        message
            .attributes()
            .and_then(|a| {
                a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount)
            })
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    /// Against moto's SQS, with the event source mapping emulated and a queue visibility far
    /// longer than the test: a target's `retry_after` (2 s) is applied to the failed record
    /// alone with `ChangeMessageVisibility`, the record held back behind it is given back at
    /// once (so only the failed record's wait blocks the group), and the malformed record goes
    /// to the dead-letter queue at once, after one receive, not after `maxReceiveCount`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retry_after_holds_only_the_failed_record_and_poison_is_dead_lettered_at_once() {
        if !aws_configured(
            "retry_after_holds_only_the_failed_record_and_poison_is_dead_lettered_at_once",
        ) {
            return;
        }
        const QUEUE_VISIBILITY: i32 = 600;
        let sdk = sdk_config().await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let urls = create_fifo_queue(&sqs, &unique_name("fanout-retry"), 5)
            .await
            .unwrap();
        let (dedupe, _dir) = sqlite_dedupe();
        let (handler, recorder) = handler(dedupe);
        let handler = handler.with_settler(BatchSettler::new(Arc::new(SqsQueue::new(
            sqs.clone(),
            urls.clone(),
        ))));
        *recorder.fail_once.lock().unwrap() = Some(E1.to_owned());
        *recorder.retry_after.lock().unwrap() = Some(Duration::from_secs(2));
        send_fixture(&sqs, &urls.queue_url).await;

        let started = Instant::now();
        let received = receive(&sqs, &urls.queue_url, QUEUE_VISIBILITY).await;
        assert_eq!(received.len(), 3, "the whole fixture in one batch");
        let failed = hand_over(&handler, &received).await;
        let first = "4f8e2a10-1c3d-4b5e-8f70-9a1b2c3d4e01";
        let third = "4f8e2a10-1c3d-4b5e-8f70-9a1b2c3d4e03";
        let id_of = |fixture_id: &str| {
            let index = [first, MALFORMED, third]
                .iter()
                .position(|i| *i == fixture_id)
                .unwrap();
            received[index].message_id().unwrap().to_owned()
        };
        assert_eq!(
            failed,
            vec![id_of(first), id_of(third)],
            "E1 failed, E2 held back"
        );
        delete_unreported(&sqs, &urls.queue_url, &received, &failed).await;

        let dead = receive(&sqs, &urls.dead_letter_url, 30).await;
        assert_eq!(dead.len(), 1, "the malformed record, dead-lettered at once");
        let fixture = fixture_json("sqs-lifecycle-batch.json");
        assert_eq!(dead[0].body(), fixture["Records"][1]["body"].as_str());

        // Within the 2 s the group stays blocked by E1 alone; then both come back together,
        // long before the queue's 600 s visibility would have let them.
        let mut again = Vec::new();
        while again.is_empty() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "E1 never came back"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
            again = receive(&sqs, &urls.queue_url, QUEUE_VISIBILITY).await;
        }
        assert!(
            started.elapsed() >= Duration::from_millis(1_500),
            "the retry_after was waited"
        );
        let bodies: Vec<Value> = again
            .iter()
            .map(|m| serde_json::from_str(m.body().unwrap()).unwrap())
            .collect();
        assert_eq!(
            bodies
                .iter()
                .map(|b| b["event_id"].as_str().unwrap())
                .collect::<Vec<_>>(),
            vec![E1, E2],
            "in order"
        );
        assert_eq!(
            again.iter().map(receive_count_of).collect::<Vec<_>>(),
            vec![2, 2],
            "received once before, each"
        );
        assert!(hand_over(&handler, &again).await.is_empty());
        assert_eq!(
            recorder.seen(),
            vec![E1, E2],
            "each delivered once, in order"
        );
    }

    /// Against moto's SQS: a record that keeps failing is dead-lettered after its own attempts
    /// (two here), while the record held back behind it, received as often, is not: it is
    /// delivered once the failing one is out of the way. The queue's `maxReceiveCount` (3 here)
    /// would have dead-lettered both: the held-back record's receive count rises with every
    /// retry of the one ahead of it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_back_record_is_not_dead_lettered_with_the_record_ahead_of_it() {
        if !aws_configured("a_held_back_record_is_not_dead_lettered_with_the_record_ahead_of_it") {
            return;
        }
        let sdk = sdk_config().await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let urls = create_fifo_queue(&sqs, &unique_name("fanout-held"), 3)
            .await
            .unwrap();
        let (dedupe, _dir) = sqlite_dedupe();
        let (handler, recorder) = handler(dedupe.clone());
        let settler = BatchSettler::new(Arc::new(SqsQueue::new(sqs.clone(), urls.clone())))
            .with_attempt_limit(dedupe, "lifecycle", 2);
        let handler = handler.with_settler(settler);
        *recorder.fail_always.lock().unwrap() = Some(E1.to_owned());
        send_fixture(&sqs, &urls.queue_url).await;

        let mut counts_of_e2 = Vec::new();
        for _ in 0..8 {
            let received = receive(&sqs, &urls.queue_url, 600).await;
            if received.is_empty() {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            for message in &received {
                if message.body().unwrap().contains(E2) {
                    counts_of_e2.push(receive_count_of(message));
                }
            }
            let failed = hand_over(&handler, &received).await;
            delete_unreported(&sqs, &urls.queue_url, &received, &failed).await;
            if recorder.seen() == vec![E2.to_owned()] {
                break;
            }
        }
        assert_eq!(recorder.seen(), vec![E2], "E2 delivered, after E1 left");
        assert_eq!(
            counts_of_e2,
            vec![1, 2, 3],
            "E2 was received as often as E1 failed"
        );
        let dead: Vec<String> = receive(&sqs, &urls.dead_letter_url, 30)
            .await
            .iter()
            .map(|m| m.body().unwrap().to_owned())
            .collect();
        assert_eq!(dead.len(), 2, "E1 and the malformed record: {dead:?}");
        assert!(dead.iter().any(|b| b.contains(E1)));
        assert!(!dead.iter().any(|b| b.contains(E2)));
    }

    async fn send_fixture(sqs: &aws_sdk_sqs::Client, url: &str) {
        let fixture = fixture_json("sqs-lifecycle-batch.json");
        for record in fixture["Records"].as_array().unwrap() {
            sqs.send_message()
                .queue_url(url)
                .message_body(record["body"].as_str().unwrap())
                .message_group_id(record["attributes"]["MessageGroupId"].as_str().unwrap())
                .message_deduplication_id(
                    record["attributes"]["MessageDeduplicationId"]
                        .as_str()
                        .unwrap(),
                )
                .send()
                .await
                .unwrap();
        }
    }

    /// An SDK message as the event source mapping hands it to the function.
    fn as_lambda_record(message: &aws_sdk_sqs::types::Message) -> Value {
        let attributes: HashMap<&str, &str> = message
            .attributes()
            .map(|a| a.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect())
            .unwrap_or_default();
        json!({
            "messageId": message.message_id(),
            "receiptHandle": message.receipt_handle(),
            "body": message.body(),
            "attributes": attributes,
            "messageAttributes": {},
            "md5OfBody": message.md5_of_body(),
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:threadbox-lifecycle.fifo",
            "awsRegion": "us-east-1",
        })
    }
}
