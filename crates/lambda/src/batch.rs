//! The one SQS record pipeline of the Lambda consumers (`worker`, `fanout`, `pause-queue`), each
//! of which keeps a [`BatchConsumer`] and says only what it does with one record's body:
//! [`process_fifo_batch`] runs a batch's records through the consumer's handler (groups
//! concurrently, each group's records in order, a record started only while enough of the
//! invocation is left, a group's later records held back after one fails), then settles them:
//! which records to report in `batchItemFailures`, and what to tell SQS about each one before
//! returning.
//!
//! Lambda's event source mapping deletes the records a handler does not report and leaves the
//! reported ones in flight until the queue's visibility timeout ends (18 minutes for the work
//! queue). A FIFO group is blocked while *any* of its messages is in flight, so a thread whose
//! record failed would wait that long whatever its failure asked for. So, before returning:
//!
//! | disposition | reported | what SQS is told |
//! |---|---|---|
//! | done | no | deleted as soon as it is done, not when the batch returns: its thread's next message must not wait for another thread's slow record (Lambda's own delete then finds nothing) |
//! | failed (retry) | yes | `ChangeMessageVisibility` to its `retry_after` (Slack's or a provider's `Retry-After`), else a back-off by receive count from [`BASE_BACKOFF`] to [`MAX_BACKOFF`] |
//! | poison | no, once sent | sent to the dead-letter queue at once (same group, body and dedup id): it can never succeed, and waiting out `maxReceiveCount` receives would hold its thread back each time |
//! | held back (after a failure in its group) | yes | visibility 0: the group stays blocked by the failed record alone, so only that record's wait applies |
//! | not started (too little time left) | yes | visibility 0: the next invocation takes it at once |
//!
//! **Dead-lettering counts a record's own attempts, not its receives.** A held-back record is
//! received again with its group's failed record (SQS hands a group's messages out together),
//! so its `ApproximateReceiveCount` rises with every retry of the record ahead of it; with the
//! queue's `maxReceiveCount` as the limit it would be dead-lettered without ever being tried.
//! So the settler counts the attempts a record really had (one conditional write per attempt in
//! the dedupe store, `attempt:{scope}:{message id}:{n}`) and moves a record to the dead-letter
//! queue itself once it failed [`DEFAULT_MAX_ATTEMPTS`] times; the queue's `maxReceiveCount`
//! (50 in the template) is only the backstop for a handler that could not settle at all.
//!
//! A change that fails is logged and the record keeps the queue's own timeout and redrive:
//! never worse than without it.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures::future::join_all;
use lambda_runtime::LambdaEvent;
use tracing::Instrument;

use threadbox_aws::sqs::SqsQueue;
use threadbox_core::ports::RecordOutcome;
use threadbox_core::ports::{DedupeStore, OutgoingMessage, QueueError};

/// SQS system attributes a FIFO record carries.
const GROUP_ATTRIBUTE: &str = "MessageGroupId";
const DEDUP_ATTRIBUTE: &str = "MessageDeduplicationId";
const RECEIVE_COUNT_ATTRIBUTE: &str = "ApproximateReceiveCount";

/// The first retry's wait when the failure did not say how long (doubled per receive).
pub const BASE_BACKOFF: Duration = Duration::from_secs(5);
/// The longest back-off, and the longest `retry_after` honoured.
pub const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);
/// Failed attempts of its own after which a record is dead-lettered.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;
/// How long attempt counts are kept: the queues keep a message four days.
const ATTEMPT_MEMORY: Duration = Duration::from_secs(4 * 24 * 3600);

/// Settles a batch's records on their queue, counting each record's own attempts.
#[derive(Clone)]
pub struct BatchSettler {
    queue: Arc<dyn RecordSettler>,
    attempts: Option<AttemptCount>,
}

#[derive(Clone)]
struct AttemptCount {
    store: Arc<dyn DedupeStore>,
    scope: String,
    max: u32,
}

impl BatchSettler {
    /// Settle on `queue`; without [`Self::with_attempt_limit`] failed records are left to the
    /// queue's redrive policy.
    pub fn new(queue: Arc<dyn RecordSettler>) -> Self {
        Self {
            queue,
            attempts: None,
        }
    }

    /// Dead-letter a record after `max` failed attempts of its own, counted in `store` under
    /// `scope` (the queue's name: message ids are unique per queue).
    pub fn with_attempt_limit(
        mut self,
        store: Arc<dyn DedupeStore>,
        scope: impl Into<String>,
        max: u32,
    ) -> Self {
        self.attempts = Some(AttemptCount {
            store,
            scope: scope.into(),
            max: max.max(1),
        });
        self
    }

    /// Record one more failed attempt of `message_id`; true when that was its last allowed.
    /// A store failure counts as not the last (the redrive policy remains the backstop).
    async fn attempts_exhausted(&self, message_id: &str) -> bool {
        let Some(count) = &self.attempts else {
            return false;
        };
        for n in 1..=count.max {
            let key = format!("attempt:{}:{message_id}:{n}", count.scope);
            match count.store.claim(&key, ATTEMPT_MEMORY).await {
                Ok(true) => return n >= count.max,
                Ok(false) => continue,
                Err(error) => {
                    tracing::warn!(%error, message_id, "could not count the record's attempt");
                    return false;
                }
            }
        }
        true
    }
}

/// What an SQS consumer keeps besides what it does with a record: the queue it settles records
/// on, and whether it paces a batch by the invocation's deadline. [`Self::run`] takes a batch.
#[derive(Clone, Default)]
pub struct BatchConsumer {
    settler: Option<BatchSettler>,
    /// `Some`: a record starts only while this much of the invocation is left; `None`: the
    /// deadline is not read (fanout's deliveries are short).
    start_reserve: Option<Duration>,
}

impl BatchConsumer {
    /// Records start only while `start_reserve` of the invocation is left.
    pub fn paced(start_reserve: Duration) -> Self {
        Self {
            settler: None,
            start_reserve: Some(start_reserve),
        }
    }

    /// Settle records on `settler`'s queue before returning; without one, failures are only
    /// reported (the queue's own timeouts and redrive apply).
    pub fn with_settler(mut self, settler: BatchSettler) -> Self {
        self.settler = Some(settler);
        self
    }

    /// Start a record only while `reserve` of the invocation is left.
    pub fn with_start_reserve(mut self, reserve: Duration) -> Self {
        self.start_reserve = Some(reserve);
        self
    }

    /// `event`'s records through `handle` (given each body) and settled, in `span`: the answer
    /// for Lambda (see [`process_fifo_batch`]).
    pub async fn run<'a, F, Fut>(
        &self,
        event: &'a LambdaEvent<SqsEvent>,
        span: tracing::Span,
        handle: F,
    ) -> SqsBatchResponse
    where
        F: Fn(&'a str) -> Fut,
        Fut: Future<Output = RecordOutcome>,
    {
        let options = BatchOptions {
            deadline: self
                .start_reserve
                .and(invocation_deadline(event.context.deadline)),
            start_reserve: self.start_reserve.unwrap_or_default(),
            settler: self.settler.as_ref(),
        };
        process_fifo_batch(&event.payload.records, options, handle)
            .instrument(span)
            .await
    }
}

/// How [`process_fifo_batch`] paces a batch.
#[derive(Clone, Copy, Default)]
pub struct BatchOptions<'a> {
    /// The invocation's deadline (see [`invocation_deadline`]); `None`: no limit.
    pub deadline: Option<Instant>,
    /// A record starts only while at least this much is left before the deadline.
    pub start_reserve: Duration,
    /// Settle records on their queue; `None` reports failures only.
    pub settler: Option<&'a BatchSettler>,
}

/// Run `records` through `handle` and settle them; the answer for Lambda. Groups (threads) run
/// concurrently and each group's records one after another; once a record of a group fails or
/// is not started, that group's later records are held back undelivered, as FIFO order
/// requires. `handle` gets each record's body.
pub async fn process_fifo_batch<'a, F, Fut>(
    records: &'a [SqsMessage],
    options: BatchOptions<'_>,
    handle: F,
) -> SqsBatchResponse
where
    F: Fn(&'a str) -> Fut,
    Fut: Future<Output = RecordOutcome>,
{
    let batch: Vec<BatchRecord<'a>> = records.iter().map(BatchRecord::of).collect();
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for (index, record) in batch.iter().enumerate() {
        match groups.iter_mut().find(|(g, _)| *g == record.group_id) {
            Some((_, indexes)) => indexes.push(index),
            None => groups.push((record.group_id, vec![index])),
        }
    }
    let (batch_ref, handle) = (&batch, &handle);
    let per_group = join_all(groups.into_iter().map(|(_, indexes)| async move {
        let mut dispositions = Vec::with_capacity(indexes.len());
        let mut blocked = false;
        for index in indexes {
            let disposition = if blocked {
                Disposition::HeldBack
            } else if !may_start(options.deadline, options.start_reserve) {
                Disposition::NotStarted
            } else {
                match handle(batch_ref[index].body).await {
                    RecordOutcome::Delivered => {
                        if let Some(settler) = options.settler {
                            delete_now(settler.queue.as_ref(), &batch_ref[index]).await;
                        }
                        Disposition::Done
                    }
                    RecordOutcome::Retry { retry_after } => Disposition::Failed { retry_after },
                    RecordOutcome::Poison { reason } => Disposition::Poison { reason },
                }
            };
            blocked |= disposition.blocks_group();
            dispositions.push((index, disposition));
        }
        dispositions
    }))
    .await;
    let mut dispositions: Vec<(usize, Disposition)> = per_group.into_iter().flatten().collect();
    dispositions.sort_by_key(|(index, _)| *index);
    let dispositions: Vec<Disposition> = dispositions.into_iter().map(|(_, d)| d).collect();
    for (record, disposition) in batch.iter().zip(&dispositions) {
        log_disposition(record, disposition);
    }
    let mut response = SqsBatchResponse::default();
    // Lambda always sets the message id. Should one be missing, the empty identifier makes
    // Lambda retry the whole batch: the only safe answer for a record that cannot be named.
    for message_id in settle(options.settler, &batch, &dispositions).await {
        response.add_failure(message_id);
    }
    tracing::info!(
        records = batch.len(),
        failed = response.batch_item_failures.len(),
        "batch done"
    );
    response
}

fn log_disposition(record: &BatchRecord<'_>, disposition: &Disposition) {
    let (message_id, thread_id) = (record.message_id, record.group_id);
    match disposition {
        Disposition::Done => {}
        Disposition::Failed { retry_after } => tracing::info!(
            message_id,
            thread_id,
            retry_after_ms = retry_after.map(|d| d.as_millis() as u64),
            "record left for a retry"
        ),
        Disposition::Poison { reason } => tracing::warn!(
            message_id,
            thread_id,
            receive_count = record.receive_count,
            %reason,
            "record cannot be handled"
        ),
        Disposition::HeldBack => tracing::info!(
            message_id,
            thread_id,
            "record held back behind its thread's failed record"
        ),
        Disposition::NotStarted => tracing::info!(
            message_id,
            thread_id,
            "record not started: too little of the invocation was left"
        ),
    }
}

/// One record of the batch, as settling needs it.
#[derive(Clone, Debug)]
struct BatchRecord<'a> {
    message_id: &'a str,
    receipt: &'a str,
    /// The FIFO group (the thread id); a record without one stands alone.
    group_id: &'a str,
    dedup_id: &'a str,
    body: &'a str,
    receive_count: u32,
}

impl<'a> BatchRecord<'a> {
    /// What SQS's record says. A record without a group (a standard queue) is its own group.
    fn of(record: &'a SqsMessage) -> Self {
        let message_id = record.message_id.as_deref().unwrap_or_default();
        Self {
            message_id,
            receipt: record.receipt_handle.as_deref().unwrap_or_default(),
            group_id: record
                .attributes
                .get(GROUP_ATTRIBUTE)
                .map_or(message_id, String::as_str),
            dedup_id: record
                .attributes
                .get(DEDUP_ATTRIBUTE)
                .map_or(message_id, String::as_str),
            body: record.body.as_deref().unwrap_or_default(),
            receive_count: record
                .attributes
                .get(RECEIVE_COUNT_ATTRIBUTE)
                .and_then(|n| n.parse().ok())
                .unwrap_or(1),
        }
    }
}

/// What became of one record in this invocation.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Disposition {
    Done,
    Failed {
        retry_after: Option<Duration>,
    },
    Poison {
        reason: String,
    },
    /// Not tried: an earlier record of its group failed, or was not started.
    HeldBack,
    /// Not tried: too little of the invocation was left to start it.
    NotStarted,
}

impl Disposition {
    /// Whether it stops the rest of its group in this batch.
    fn blocks_group(&self) -> bool {
        !matches!(self, Disposition::Done)
    }
}

/// What settling needs of the queue: SQS in production; a fake or none in unit tests.
#[async_trait]
pub trait RecordSettler: Send + Sync {
    async fn set_visibility(&self, receipt: &str, visibility: Duration) -> Result<(), QueueError>;
    async fn dead_letter(&self, message: &OutgoingMessage) -> Result<(), QueueError>;
    /// Delete a record that is done.
    async fn delete(&self, receipt: &str) -> Result<(), QueueError>;
}

#[async_trait]
impl RecordSettler for SqsQueue {
    async fn set_visibility(&self, receipt: &str, visibility: Duration) -> Result<(), QueueError> {
        self.change_visibility(receipt, visibility).await
    }

    async fn delete(&self, receipt: &str) -> Result<(), QueueError> {
        threadbox_core::ports::DurableQueue::ack(self, receipt).await
    }

    async fn dead_letter(&self, message: &OutgoingMessage) -> Result<(), QueueError> {
        self.send_to_dead_letter(message).await
    }
}

/// The invocation's deadline as an `Instant`, from the context's epoch milliseconds; `None`
/// when the context has none (0, as `Context::default()`).
pub fn invocation_deadline(deadline_epoch_ms: u64) -> Option<Instant> {
    if deadline_epoch_ms == 0 {
        return None;
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Some(Instant::now() + Duration::from_millis(deadline_epoch_ms.saturating_sub(now_ms)))
}

/// Whether a record may start: at least `reserve` left before `deadline` (always without one).
pub fn may_start(deadline: Option<Instant>, reserve: Duration) -> bool {
    deadline.is_none_or(|d| d.saturating_duration_since(Instant::now()) >= reserve)
}

/// The wait before a failed record is tried again.
pub fn retry_wait(retry_after: Option<Duration>, receive_count: u32) -> Duration {
    match retry_after {
        Some(wait) => wait.min(MAX_BACKOFF),
        None => {
            let doublings = receive_count.saturating_sub(1).min(16);
            (BASE_BACKOFF * 2u32.pow(doublings)).min(MAX_BACKOFF)
        }
    }
}

/// Tell SQS what became of each record (see the module docs) and return the message ids to
/// report in `batchItemFailures`, in record order. Without a settler every record that is not
/// done is reported and nothing else happens (the queue's own timeouts and redrive apply).
async fn settle(
    settler: Option<&BatchSettler>,
    records: &[BatchRecord<'_>],
    dispositions: &[Disposition],
) -> Vec<String> {
    let mut failures = Vec::new();
    for (record, disposition) in records.iter().zip(dispositions) {
        let report = match (disposition, settler) {
            (Disposition::Done, _) => false,
            (_, None) => true,
            (Disposition::Poison { reason }, Some(settler)) => {
                !dead_letter(settler.queue.as_ref(), record, reason).await
            }
            (Disposition::Failed { retry_after }, Some(settler)) => {
                if settler.attempts_exhausted(record.message_id).await {
                    let reason = "it failed every attempt it was allowed";
                    !dead_letter(settler.queue.as_ref(), record, reason).await
                } else {
                    let wait = retry_wait(*retry_after, record.receive_count);
                    change(settler.queue.as_ref(), record, wait).await;
                    true
                }
            }
            (Disposition::HeldBack | Disposition::NotStarted, Some(settler)) => {
                change(settler.queue.as_ref(), record, Duration::ZERO).await;
                true
            }
        };
        if report {
            failures.push(record.message_id.to_owned());
        }
    }
    failures
}

/// Send the record to the dead-letter queue; true when it is there (Lambda may delete it).
async fn dead_letter(queue: &dyn RecordSettler, record: &BatchRecord<'_>, reason: &str) -> bool {
    let message = OutgoingMessage {
        group_id: record.group_id.to_owned(),
        dedup_id: record.dedup_id.to_owned(),
        body: record.body.to_owned(),
    };
    match queue.dead_letter(&message).await {
        Ok(()) => {
            tracing::warn!(
                message_id = record.message_id,
                thread_id = record.group_id,
                reason,
                "record sent to the dead-letter queue"
            );
            true
        }
        Err(error) => {
            tracing::warn!(
                message_id = record.message_id,
                %error,
                "could not dead-letter the record; the queue's redrive policy will"
            );
            false
        }
    }
}

/// Delete a done record now. A failure only logs: the record is not reported, so Lambda
/// deletes it when the batch returns, as it always did.
async fn delete_now(settler: &dyn RecordSettler, record: &BatchRecord<'_>) {
    if let Err(error) = settler.delete(record.receipt).await {
        tracing::warn!(
            message_id = record.message_id,
            %error,
            "could not delete the done record early; Lambda deletes it with the batch"
        );
    }
}

async fn change(settler: &dyn RecordSettler, record: &BatchRecord<'_>, visibility: Duration) {
    match settler.set_visibility(record.receipt, visibility).await {
        Ok(()) => tracing::debug!(
            message_id = record.message_id,
            visibility_s = visibility.as_secs(),
            "record's visibility changed"
        ),
        Err(error) => tracing::warn!(
            message_id = record.message_id,
            %error,
            "could not change the record's visibility; it keeps the queue's timeout"
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn record(id: &str, group: &str) -> SqsMessage {
        let mut message = SqsMessage::default();
        message.message_id = Some(id.to_owned());
        message.body = Some(id.to_owned());
        message
            .attributes
            .insert(GROUP_ATTRIBUTE.to_owned(), group.to_owned());
        message
    }

    /// A failed record holds back the rest of its group, undelivered, and nothing else; both
    /// are reported, the other group's record is not.
    #[tokio::test]
    async fn a_failed_record_holds_back_the_rest_of_its_group_only() {
        let records = [record("e1", "g1"), record("e2", "g1"), record("e3", "g2")];
        let seen = Mutex::new(Vec::new());
        let response = process_fifo_batch(&records, BatchOptions::default(), |body| {
            seen.lock().unwrap().push(body.to_owned());
            let outcome = if body == "e1" {
                RecordOutcome::Retry { retry_after: None }
            } else {
                RecordOutcome::Delivered
            };
            async move { outcome }
        })
        .await;
        let failed: Vec<_> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        assert_eq!(failed, ["e1", "e2"]);
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert_eq!(seen, ["e1", "e3"], "e2 waits for e1");
    }

    /// Records what the settler is told, and wakes a waiter on each delete.
    #[derive(Default)]
    struct Recording {
        deleted: Mutex<Vec<String>>,
        deleted_one: tokio::sync::Notify,
    }

    #[async_trait]
    impl RecordSettler for Recording {
        async fn set_visibility(&self, _: &str, _: Duration) -> Result<(), QueueError> {
            Ok(())
        }
        async fn dead_letter(&self, _: &OutgoingMessage) -> Result<(), QueueError> {
            Ok(())
        }
        async fn delete(&self, receipt: &str) -> Result<(), QueueError> {
            self.deleted.lock().unwrap().push(receipt.to_owned());
            self.deleted_one.notify_waiters();
            Ok(())
        }
    }

    /// One thread's quick record is deleted while another thread's slow record still runs, so
    /// SQS can hand out the quick thread's next message: the slow record here finishes only
    /// once it sees that delete.
    #[tokio::test]
    async fn a_done_record_is_deleted_at_once_not_when_the_slow_thread_ends() {
        let mut quick = record("quick", "g-quick");
        quick.receipt_handle = Some("receipt-quick".into());
        let mut slow = record("slow", "g-slow");
        slow.receipt_handle = Some("receipt-slow".into());
        let records = [slow, quick];
        let recording = Arc::new(Recording::default());
        let settler = BatchSettler::new(recording.clone());
        let options = BatchOptions {
            settler: Some(&settler),
            ..BatchOptions::default()
        };
        let response = tokio::time::timeout(
            Duration::from_secs(10),
            process_fifo_batch(&records, options, |body| {
                let recording = recording.clone();
                async move {
                    if body == "slow" {
                        let deleted = recording.deleted_one.notified();
                        if !recording
                            .deleted
                            .lock()
                            .unwrap()
                            .contains(&"receipt-quick".into())
                        {
                            deleted.await;
                        }
                    }
                    RecordOutcome::Delivered
                }
            }),
        )
        .await
        .expect("the quick record was not deleted while the slow one ran");
        assert!(response.batch_item_failures.is_empty());
        assert_eq!(
            *recording.deleted.lock().unwrap(),
            ["receipt-quick", "receipt-slow"]
        );
    }

    /// Past the start reserve nothing starts, and every record is reported for the next
    /// invocation.
    #[tokio::test]
    async fn records_are_not_started_without_the_reserve() {
        let records = [record("e1", "g1"), record("e2", "g2")];
        let options = BatchOptions {
            deadline: Some(Instant::now() + Duration::from_secs(1)),
            start_reserve: Duration::from_secs(10),
            settler: None,
        };
        let response =
            process_fifo_batch(&records, options, |_| async { panic!("nothing may start") }).await;
        assert_eq!(response.batch_item_failures.len(), 2);
    }

    #[test]
    fn retries_wait_what_was_asked_or_back_off_by_receive_count() {
        assert_eq!(
            retry_wait(Some(Duration::from_secs(7)), 1),
            Duration::from_secs(7)
        );
        assert_eq!(
            retry_wait(Some(Duration::from_secs(86_400)), 1),
            MAX_BACKOFF
        );
        assert_eq!(retry_wait(None, 1), BASE_BACKOFF);
        assert_eq!(retry_wait(None, 3), BASE_BACKOFF * 4);
        assert_eq!(retry_wait(None, 40), MAX_BACKOFF);
    }

    #[test]
    fn the_deadline_comes_from_epoch_milliseconds() {
        assert_eq!(invocation_deadline(0), None);
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let deadline = invocation_deadline(now_ms + 60_000).unwrap();
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(left > Duration::from_secs(58) && left <= Duration::from_secs(60));
        assert!(may_start(Some(deadline), Duration::from_secs(30)));
        assert!(!may_start(Some(deadline), Duration::from_secs(90)));
        assert!(may_start(None, Duration::from_secs(90)));
        // A deadline already past leaves nothing.
        assert!(!may_start(invocation_deadline(1), Duration::from_millis(1)));
    }
}
