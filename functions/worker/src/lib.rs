//! worker: the Slack work queue's consumer. Each record is one thing a Slack thread asked for (a
//! code block, a command, shared files) or a reply that had to wait; the shared Slack worker runs
//! it in the thread's sandbox and replies in the thread.
//!
//! The queue is FIFO with one group per thread, and Lambda may hand one batch several records of
//! a thread and records of several threads. Threads run concurrently (a long command in one does
//! not hold up the others); a thread's own records run one after another, and once one of them
//! fails, the rest of that thread's records are reported undelivered with it, so a thread's work
//! never runs out of order. Only failed records are reported in `batchItemFailures`: a body that
//! is not work fails alone and reaches the dead-letter queue after its last receive. The
//! invocation itself never fails.

use std::convert::Infallible;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures::future::join_all;
use lambda_runtime::LambdaEvent;
use threadbox_shared::fanout::RecordOutcome;
use threadbox_shared::slack::SlackWorker;
use tracing::Instrument;

/// The SQS system attribute holding a FIFO record's group (threadbox's thread id).
const GROUP_ATTRIBUTE: &str = "MessageGroupId";

/// The handler, holding the shared worker (the use cases, Slack's API, dedupe, the work queue).
#[derive(Clone)]
pub struct WorkHandler {
    worker: SlackWorker,
}

impl WorkHandler {
    pub fn new(worker: SlackWorker) -> Self {
        Self { worker }
    }

    pub async fn handle(
        &self,
        event: LambdaEvent<SqsEvent>,
    ) -> Result<SqsBatchResponse, Infallible> {
        let records = &event.payload.records;
        let span = tracing::info_span!("batch", records = records.len());
        let outcomes = self.run_by_thread(records).instrument(span.clone()).await;

        let mut response = SqsBatchResponse::default();
        let _entered = span.enter();
        for (record, outcome) in records.iter().zip(outcomes) {
            // An empty identifier makes Lambda retry the whole batch: the only safe answer for a
            // record that cannot be named (Lambda always sets the id).
            let message_id = record.message_id.as_deref().unwrap_or_default();
            match &outcome {
                RecordOutcome::Delivered => continue,
                RecordOutcome::Retry { retry_after } => tracing::info!(
                    message_id,
                    thread_id = group_of(record),
                    retry_after_ms = retry_after.map(|d| d.as_millis() as u64),
                    "work left for a retry"
                ),
                RecordOutcome::Poison { reason } => tracing::warn!(
                    message_id,
                    thread_id = group_of(record),
                    %reason,
                    "work cannot be done; it goes to the dead-letter queue after its last receive"
                ),
            }
            response.add_failure(message_id);
        }
        tracing::info!(failed = response.batch_item_failures.len(), "batch done");
        Ok(response)
    }

    /// Each record's outcome, in record order: threads concurrently, each thread's records in
    /// order, and a thread's records after a failure failed undelivered.
    async fn run_by_thread(&self, records: &[SqsMessage]) -> Vec<RecordOutcome> {
        let mut threads: Vec<(&str, Vec<usize>)> = Vec::new();
        for (index, record) in records.iter().enumerate() {
            let group = group_of(record);
            match threads.iter_mut().find(|(g, _)| *g == group) {
                Some((_, indexes)) => indexes.push(index),
                None => threads.push((group, vec![index])),
            }
        }
        let per_thread = join_all(threads.into_iter().map(|(_, indexes)| async move {
            let mut outcomes = Vec::with_capacity(indexes.len());
            let mut held_back = false;
            for index in indexes {
                let outcome = if held_back {
                    RecordOutcome::Retry { retry_after: None }
                } else {
                    let body = records[index].body.as_deref().unwrap_or_default();
                    self.worker.handle_body(body).await
                };
                held_back |= outcome.is_failure();
                outcomes.push((index, outcome));
            }
            outcomes
        }))
        .await;
        let mut outcomes: Vec<(usize, RecordOutcome)> = per_thread.into_iter().flatten().collect();
        outcomes.sort_by_key(|(index, _)| *index);
        outcomes.into_iter().map(|(_, outcome)| outcome).collect()
    }
}

/// A record's FIFO group: the thread id. A record without one (a standard queue) is its own.
fn group_of(record: &SqsMessage) -> &str {
    record
        .attributes
        .get(GROUP_ATTRIBUTE)
        .or(record.message_id.as_ref())
        .map_or("", String::as_str)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::{json, Value};
    use threadbox_shared::adapters::sqlite::{QueueConfig, SqliteDedupe, SqliteQueue};
    use threadbox_shared::slack::client::{BotToken, SlackClientConfig, SlackWebClient};
    use threadbox_shared::slack::SlackWorkerConfig;
    use threadbox_shared::testing::slack_fake::SlackFake;
    use threadbox_tests::lambda::{context_with_deadline, fixture_json, LocalThreadbox};

    use super::*;

    const TOKEN: &str = "xoxb-fixture-token";
    const MALFORMED: &str = "9a1b2c3d-0000-4e5f-8a9b-000000000002";

    struct Local {
        handler: WorkHandler,
        slack: SlackFake,
        threadbox: LocalThreadbox,
        _dir: tempfile::TempDir,
    }

    async fn local() -> Local {
        let threadbox = LocalThreadbox::new();
        let slack = SlackFake::start(TOKEN).await;
        let config = SlackClientConfig::new(BotToken::new(TOKEN).unwrap())
            .with_api_url(&slack.api_url())
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("work.db");
        let worker = SlackWorker::new(
            threadbox.tb.clone(),
            Arc::new(SlackWebClient::new(config).unwrap()),
            Arc::new(SqliteDedupe::open(&path).unwrap()),
            Arc::new(SqliteQueue::open(&path, "work", QueueConfig::default()).unwrap()),
            SlackWorkerConfig::default(),
        );
        Local {
            handler: WorkHandler::new(worker),
            slack,
            threadbox,
            _dir: dir,
        }
    }

    fn invocation(payload: Value) -> LambdaEvent<SqsEvent> {
        let event: SqsEvent = serde_json::from_value(payload).expect("an SQS event");
        LambdaEvent::new(event, context_with_deadline(Duration::from_secs(120)))
    }

    fn failed_ids(response: &SqsBatchResponse) -> Vec<&str> {
        response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect()
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
        let runs = local
            .threadbox
            .provider
            .commands()
            .iter()
            .filter(|c| c.contains("echo hello from slack"))
            .count();
        assert_eq!(runs, 1, "the code block ran once");
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
}
