//! worker: the Slack work queue's consumer. Each record is one thing a Slack thread asked for (a
//! code block, a command, shared files) or a reply that had to wait; the shared Slack worker runs
//! it in the thread's sandbox and replies in the thread.
//!
//! The queue is FIFO with one group per thread, and Lambda may hand one batch several records of
//! a thread and records of several threads. Threads run concurrently (a long command in one does
//! not hold up the others); a thread's own records run one after another, and once one of them
//! fails, the rest of that thread's records are held back, so a thread's work never runs out of
//! order. The invocation itself never fails.
//!
//! **The deadline.** The handler reads the invocation's deadline from the Lambda context and
//! starts a record only while at least `start_reserve` (by default a code block's limit plus the
//! reply and settling margins) is left; the records it does not start are reported and made
//! visible again at once, so the next invocation takes them. A started record's later code
//! blocks get what is left of the time (see `SlackWorker::handle_body_by`), so the function
//! does not time out mid-command; if it dies anyway, the redelivery says so (the worker's claims).
//!
//! **The pipeline and settling** (`threadbox_lambda::batch`, shared with `fanout`): a
//! failed record waits its `retry_after`
//! (`ChangeMessageVisibility` on that record only), held-back records are given back at once, and
//! a body that is not work goes straight to the dead-letter queue.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::LambdaEvent;
use threadbox_core::ports::SystemClock;
pub use threadbox_lambda::batch::BatchSettler;
use threadbox_lambda::batch::{invocation_deadline, BatchConsumer, DEFAULT_MAX_ATTEMPTS};
use threadbox_lambda::{Setup, SetupError};
use threadbox_slack::{MessageRates, SlackWorker, SlackWorkerConfig, REPLY_MARGIN};

/// Kept back from the invocation's deadline for settling the batch (a few SQS calls).
pub const SETTLE_MARGIN: Duration = Duration::from_secs(5);

/// The handler, holding the shared worker (the use cases, Slack's API, dedupe, the work queue).
#[derive(Clone)]
pub struct WorkHandler {
    worker: SlackWorker,
    batch: BatchConsumer,
}

/// What `main` serves: the use cases, Slack's Web API, the dedupe table and the work queue from
/// the environment, the work queue settling each batch.
pub async fn build(setup: Setup) -> Result<WorkHandler, SetupError> {
    let Setup { sdk, env, secrets } = setup;
    let work_queue = Arc::new(threadbox_lambda::work_queue(&sdk, &env)?);
    let dedupe = Arc::new(threadbox_lambda::dedupe(&sdk, &env)?);
    let worker = SlackWorker::new(
        // A refused key or token sends the function to Secrets Manager for the rotated one.
        threadbox_lambda::threadbox(&sdk, &env, &secrets).await?,
        threadbox_lambda::watch_slack_auth(Arc::new(threadbox_lambda::slack_api(&env)?), secrets),
        dedupe.clone(),
        work_queue.clone(),
        SlackWorkerConfig {
            // A checkpoint before each code block, and its Undo (`THREADBOX_CHECKPOINT_TURNS`).
            checkpoint_turns: threadbox_lambda::checkpoint_turns(&env)?,
            ..SlackWorkerConfig::default()
        },
    )
    .with_rates(MessageRates::new(
        Arc::new(threadbox_lambda::window_counter(&sdk, &env)?),
        threadbox_lambda::slack_rates(&env)?,
        Arc::new(SystemClock),
    ))
    .with_user_threads(Arc::new(threadbox_lambda::slack_user_threads(&sdk, &env)?));
    // The same queue settles each batch's records (visibility, dead letters), and the dedupe
    // table counts each record's own attempts.
    let settler =
        BatchSettler::new(work_queue).with_attempt_limit(dedupe, "work", DEFAULT_MAX_ATTEMPTS);
    Ok(WorkHandler::new(worker).with_settler(settler))
}

impl WorkHandler {
    /// A handler that reports failures only (the queue's own timeouts apply); see
    /// [`Self::with_settler`].
    pub fn new(worker: SlackWorker) -> Self {
        let reserve = Self::default_reserve(&SlackWorkerConfig::default());
        Self {
            worker,
            batch: BatchConsumer::paced(reserve),
        }
    }

    /// What a record needs left to start: one code block's limit, the replies and settling.
    pub fn default_reserve(config: &SlackWorkerConfig) -> Duration {
        config.exec_timeout + REPLY_MARGIN + SETTLE_MARGIN
    }

    /// Settle records through `settler` (the work queue) before returning.
    pub fn with_settler(mut self, settler: BatchSettler) -> Self {
        self.batch = self.batch.with_settler(settler);
        self
    }

    /// Start a record only while this much of the invocation is left.
    pub fn with_start_reserve(mut self, reserve: Duration) -> Self {
        self.batch = self.batch.with_start_reserve(reserve);
        self
    }

    /// One invocation: the batch's records, each thread's in order, while time is left.
    pub async fn handle(
        &self,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<SqsBatchResponse, Infallible> {
        // A started record's later code blocks get what is left, minus the settling margin.
        let work_deadline = invocation_deadline(event.context.deadline)
            .map(|d| d.checked_sub(SETTLE_MARGIN).unwrap_or(d));
        let span = tracing::info_span!("batch", records = event.payload.records.len());
        Ok(self
            .batch
            .run(&event, span, |body| {
                self.worker.handle_body_by(body, work_deadline)
            })
            .await)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::{json, Value};
    use threadbox_slack::SlackWorkerConfig;
    use threadbox_slack_web::{BotToken, SlackClientConfig, SlackWebClient};
    use threadbox_sqlite::{QueueConfig, SqliteDedupe, SqliteQueue};
    use threadbox_testing::slack_fake::SlackFake;
    use threadbox_tests::lambda::{failed_ids, fixture_json, sqs_batch, LocalThreadbox};

    use super::*;

    const TOKEN: &str = "xoxb-fixture-token";
    const MALFORMED: &str = "9a1b2c3d-0000-4e5f-8a9b-000000000002";

    struct Local {
        handler: WorkHandler,
        slack: SlackFake,
        threadbox: LocalThreadbox,
        dedupe: Arc<SqliteDedupe>,
    }

    async fn local() -> Local {
        let threadbox = LocalThreadbox::new();
        let slack = SlackFake::start(TOKEN).await;
        let config = SlackClientConfig::new(BotToken::new(TOKEN).unwrap())
            .with_api_url(&slack.api_url())
            .unwrap();
        let path = threadbox.path("work.db");
        let dedupe = Arc::new(SqliteDedupe::open(&path).unwrap());
        let worker = SlackWorker::new(
            threadbox.tb.clone(),
            Arc::new(SlackWebClient::new(config).unwrap()),
            dedupe.clone(),
            Arc::new(SqliteQueue::open(&path, "work", QueueConfig::default()).unwrap()),
            SlackWorkerConfig::default(),
        );
        Local {
            handler: WorkHandler::new(worker),
            slack,
            threadbox,
            dedupe,
        }
    }

    /// One work record: a message `ts` in the thread rooted at `thread_ts` of channel C0001.
    fn record(message_id: &str, thread_ts: &str, ts: &str, text: &str) -> Value {
        let mut record = fixture_json("sqs-work-batch.json")["Records"][0].clone();
        let mut body: Value = serde_json::from_str(record["body"].as_str().unwrap()).unwrap();
        let thread = format!("slack:T0001:C0001:{thread_ts}");
        let event_id = format!("Ev{message_id}");
        body["event_id"] = json!(event_id);
        body["thread_id"] = json!(thread);
        body["ts"] = json!(ts);
        body["reply_thread_ts"] = json!(thread_ts);
        body["text"] = json!(text);
        record["messageId"] = json!(message_id);
        record["body"] = json!(body.to_string());
        record["attributes"]["MessageGroupId"] = json!(thread);
        record["attributes"]["MessageDeduplicationId"] = json!(event_id);
        record
    }

    /// A message `ts` that starts its own thread of channel C0001, one code block running
    /// `command`.
    fn code_block(message_id: &str, ts: &str, command: &str) -> Value {
        record(message_id, ts, ts, &format!("```bash\n{command}\n```"))
    }

    /// More than any test needs of an invocation.
    const AMPLE: Duration = Duration::from_secs(120);

    fn batch_of(records: &[Value], remaining: Duration) -> LambdaEvent<SqsEvent> {
        sqs_batch(json!({ "Records": records }), remaining)
    }

    fn invocation(payload: Value) -> LambdaEvent<SqsEvent> {
        sqs_batch(payload, AMPLE)
    }

    impl Local {
        /// The records of `batch` the handler reported, `remaining` of the invocation left.
        async fn failed(&self, batch: &[Value], remaining: Duration) -> Vec<String> {
            let event = batch_of(batch, remaining);
            failed_ids(&self.handler.handle(event).await.unwrap())
        }

        fn runs_of(&self, needle: &str) -> usize {
            let commands = self.threadbox.provider.commands();
            commands.iter().filter(|c| c.contains(needle)).count()
        }

        fn replies_in(&self, thread_ts: &str) -> Vec<String> {
            self.slack
                .messages()
                .into_iter()
                .filter(|m| m.channel == "C0001" && m.thread_ts.as_deref() == Some(thread_ts))
                .map(|m| m.text)
                .collect()
        }

        /// The one reply in the thread rooted at `thread_ts`.
        fn only_reply(&self, thread_ts: &str) -> String {
            let mut replies = self.replies_in(thread_ts);
            assert_eq!(replies.len(), 1, "exactly one reply: {replies:?}");
            replies.remove(0)
        }
    }

    #[tokio::test]
    async fn the_batch_runs_each_threads_work_and_fails_only_the_malformed_record() {
        let local = local().await;
        let response = local
            .handler
            .handle(invocation(fixture_json("sqs-work-batch.json")))
            .await
            .unwrap();
        assert_eq!(failed_ids(&response), vec![MALFORMED]);

        // The code block ran in its thread's sandbox (the in-memory provider records the argv)...
        let commands = local.threadbox.provider.commands();
        assert!(
            commands.iter().any(|c| c.contains("echo hello from slack")),
            "{commands:?}"
        );
        // ...and both threads got their replies, in their own threads.
        let replies = local.slack.messages();
        let in_thread = |channel: &str, ts: &str| {
            replies
                .iter()
                .filter(|m| m.channel == channel && m.thread_ts.as_deref() == Some(ts))
                .count()
        };
        assert!(in_thread("C0001", "1767225590.000100") >= 1, "{replies:?}");
        assert!(in_thread("C0002", "1767225595.000200") >= 1, "{replies:?}");
    }

    #[tokio::test]
    async fn a_redelivered_record_does_not_run_twice() {
        let local = local().await;
        for _ in 0..2 {
            local
                .handler
                .handle(invocation(fixture_json("sqs-work-batch.json")))
                .await
                .unwrap();
        }
        assert_eq!(
            local.runs_of("echo hello from slack"),
            1,
            "the code block ran once"
        );
    }

    #[tokio::test]
    async fn a_failed_record_holds_back_the_rest_of_its_thread_only() {
        let local = local().await;
        let mut batch = fixture_json("sqs-work-batch.json");
        // A second record in the malformed record's thread, after it: it must wait.
        let mut later = batch["Records"][2].clone();
        later["messageId"] = json!("9a1b2c3d-0000-4e5f-8a9b-000000000004");
        later["attributes"]["MessageGroupId"] =
            batch["Records"][1]["attributes"]["MessageGroupId"].clone();
        batch["Records"].as_array_mut().unwrap().push(later);

        let response = local.handler.handle(invocation(batch)).await.unwrap();
        assert_eq!(
            failed_ids(&response),
            vec![MALFORMED, "9a1b2c3d-0000-4e5f-8a9b-000000000004"]
        );
    }
    /// A batch that would outrun the invocation: the second record of a thread is not started
    /// once less than the reserve is left, and is reported (not run, not claimed); another
    /// thread's record, started at once, runs.
    #[tokio::test]
    async fn records_are_not_started_when_too_little_time_is_left() {
        let mut local = local().await;
        local.handler = local
            .handler
            .clone()
            .with_start_reserve(Duration::from_secs(39));
        local
            .threadbox
            .provider
            .set_exec_delay(Duration::from_millis(1_500));
        let batch = [
            code_block("m-1", "1767225100.000001", "echo first"),
            record(
                "m-2",
                "1767225100.000001",
                "1767225100.000002",
                "```bash\necho second\n```",
            ),
            code_block("m-3", "1767225200.000001", "echo other thread"),
        ];
        let failed = local.failed(&batch, Duration::from_secs(40)).await;
        assert_eq!(failed, vec!["m-2"]);
        assert_eq!(local.runs_of("echo first"), 1);
        assert_eq!(local.runs_of("echo other thread"), 1);
        assert_eq!(local.runs_of("echo second"), 0, "not started");

        // The next invocation, with time to spare, runs it: nothing was claimed for it.
        local.threadbox.provider.set_exec_delay(Duration::ZERO);
        assert!(local.failed(&batch[1..2], AMPLE).await.is_empty());
        assert_eq!(local.runs_of("echo second"), 1);
    }

    /// A started message's code block gets only what is left of the invocation; with less than
    /// the minimum left it is not run, and the reply says so (the message is answered, once).
    #[tokio::test]
    async fn a_code_block_that_no_longer_fits_is_not_started_and_the_reply_says_so() {
        let mut local = local().await;
        local.handler = local.handler.clone().with_start_reserve(Duration::ZERO);
        let ts = "1767225300.000001";
        let batch = [code_block("m-1", ts, "echo late")];
        // 16 s: less the settling and reply margins, 1 s is left for the block.
        let failed = local.failed(&batch, Duration::from_secs(16)).await;
        assert!(failed.is_empty(), "answered, so done");
        assert_eq!(local.runs_of("echo late"), 0);
        let reply = local.only_reply(ts);
        assert!(reply.contains("was not run"), "{reply:?}");
    }

    /// The worker dies mid-command (its invocation is dropped while the command runs, as a
    /// timeout or a crash would stop it). The redelivered message is not run again, and its
    /// thread gets exactly one reply saying it was interrupted; a further redelivery says nothing.
    #[tokio::test]
    async fn a_worker_killed_mid_command_answers_interrupted_once_and_never_reruns() {
        let local = local().await;
        local
            .threadbox
            .provider
            .set_exec_delay(Duration::from_secs(30));
        let ts = "1767225400.000001";
        let batch = [code_block("m-1", ts, "echo long job")];
        let handler = local.handler.clone();
        let event = batch_of(&batch, AMPLE);
        let running = tokio::spawn(async move { handler.handle(event).await });
        let started = std::time::Instant::now();
        while local.runs_of("echo long job") == 0 {
            assert!(started.elapsed() < Duration::from_secs(10), "never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        running.abort();
        assert!(
            running.await.unwrap_err().is_cancelled(),
            "killed mid-command"
        );
        assert!(local.replies_in(ts).is_empty());

        local.threadbox.provider.set_exec_delay(Duration::ZERO);
        for _ in 0..2 {
            assert!(local.failed(&batch, AMPLE).await.is_empty());
        }
        assert_eq!(local.runs_of("echo long job"), 1, "never re-run");
        let reply = local.only_reply(ts);
        assert!(reply.contains("interrupted"), "{reply:?}");
    }

    /// A message whose claim was taken but whose run stopped before doing anything (no
    /// `started` marker) is known not to have started: the redelivery runs it, once.
    #[tokio::test]
    async fn a_claimed_message_that_never_started_is_run_on_redelivery() {
        use threadbox_core::ports::DedupeStore;

        let local = local().await;
        let ts = "1767225500.000001";
        let key = format!("slack:msg:C0001:{ts}");
        for marker in [key.clone(), format!("{key}:owner:Evm-1")] {
            assert!(local
                .dedupe
                .claim(&marker, Duration::from_secs(3600))
                .await
                .unwrap());
        }
        let batch = [code_block("m-1", ts, "echo fresh")];
        assert!(local.failed(&batch, AMPLE).await.is_empty());
        assert_eq!(local.runs_of("echo fresh"), 1);
        let reply = local.only_reply(ts);
        assert!(!reply.contains("interrupted"), "{reply:?}");
    }
    /// Slack sends two events for one mention (`app_mention` and `message`); the second finding
    /// the first's claim is a duplicate even while the first still runs its command: no
    /// "interrupted" reply, no second run.
    #[tokio::test]
    async fn the_twin_event_of_a_running_message_is_a_quiet_duplicate() {
        let local = local().await;
        local
            .threadbox
            .provider
            .set_exec_delay(Duration::from_millis(600));
        let ts = "1767225600.000001";
        let first = [code_block("m-1", ts, "echo twin")];
        let twin = [code_block("m-2", ts, "echo twin")];
        let handler = local.handler.clone();
        let running = tokio::spawn({
            let event = batch_of(&first, AMPLE);
            async move { handler.handle(event).await }
        });
        while local.runs_of("echo twin") == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(local.failed(&twin, AMPLE).await.is_empty());
        running.await.unwrap().unwrap();
        assert_eq!(local.runs_of("echo twin"), 1);
        let reply = local.only_reply(ts);
        assert!(!reply.contains("interrupted"), "{reply:?}");
    }
    /// A reply queued after a rate limit is posted once, even when its record is delivered again
    /// after the worker posted it (it died before the queue heard).
    #[tokio::test]
    async fn a_deferred_reply_is_posted_once_under_redelivery() {
        let local = local().await;
        let ts = "1767225700.000001";
        let mut reply = record("m-r", ts, ts, "unused");
        reply["body"] = json!(json!({
            "kind": "reply",
            "thread_id": format!("slack:T0001:C0001:{ts}"),
            "channel": "C0001",
            "thread_ts": ts,
            "text": "the deferred reply",
            "reply_id": "Evm-1:reply:1",
        })
        .to_string());
        for _ in 0..2 {
            assert!(local
                .failed(std::slice::from_ref(&reply), AMPLE)
                .await
                .is_empty());
        }
        assert_eq!(local.replies_in(ts), vec!["the deferred reply"]);
    }
}
