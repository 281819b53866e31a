//! `SqsQueue`: the durable queue port on an SQS FIFO queue and its dead-letter queue.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
use aws_sdk_sqs::types::{
    BatchResultErrorEntry, ChangeMessageVisibilityBatchRequestEntry, Message,
    MessageSystemAttributeName, SendMessageBatchRequestEntry,
};
use aws_sdk_sqs::Client;

use threadbox_core::ports::{DurableQueue, OutgoingMessage, QueueError, ReceivedMessage};

/// SQS's most messages per send, receive or visibility batch.
const SQS_BATCH: usize = 10;
/// SQS's limit on the sum of the bodies in one `SendMessageBatch`.
const SQS_BATCH_BYTES: usize = 256 * 1024;
/// SQS's longest visibility timeout: 12 hours.
const MAX_VISIBILITY_SECS: u64 = 12 * 60 * 60;
/// How long `dead_letters` hides what it lists while it pages through the dead-letter queue;
/// it makes them visible again when done.
const PEEK_VISIBILITY: Duration = Duration::from_secs(10);
/// How long a redrive hides a dead letter between receiving it and deleting it once re-sent.
const REDRIVE_VISIBILITY: Duration = Duration::from_secs(60);

/// The queue and its dead-letter queue, by URL (what SQS's API addresses queues by).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqsQueueUrls {
    pub queue_url: String,
    pub dead_letter_url: String,
}

/// One FIFO queue. Cheap to clone; build one per process.
#[derive(Clone, Debug)]
pub struct SqsQueue {
    client: Client,
    urls: Arc<SqsQueueUrls>,
    receive_wait: Duration,
}

impl SqsQueue {
    pub fn new(client: Client, urls: SqsQueueUrls) -> Self {
        Self {
            client,
            urls: Arc::new(urls),
            receive_wait: Duration::ZERO,
        }
    }

    /// A queue whose client is built from the SDK configuration (see `adapters::aws::load_config`).
    pub fn from_sdk_config(sdk: &aws_config::SdkConfig, urls: SqsQueueUrls) -> Self {
        Self::new(Client::new(sdk), urls)
    }

    /// Long-poll receives for up to `wait` (whole seconds, at most 20) when the queue is empty.
    /// The default is zero, like the embedded queue: `receive` answers at once. Keep `wait` below
    /// the SDK's per-attempt timeout (`ClientSettings::attempt_timeout`).
    pub fn with_receive_wait(mut self, wait: Duration) -> Self {
        self.receive_wait = wait.min(Duration::from_secs(20));
        self
    }

    pub fn urls(&self) -> &SqsQueueUrls {
        &self.urls
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// One `ReceiveMessage` call, returning SQS's messages as they came.
    async fn receive_raw(
        &self,
        url: &str,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<Message>, QueueError> {
        let output = self
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(i32::try_from(max.min(SQS_BATCH)).unwrap_or(1))
            .visibility_timeout(visibility_secs(visibility))
            .wait_time_seconds(whole_secs(wait))
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .message_system_attribute_names(MessageSystemAttributeName::MessageDeduplicationId)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .message_system_attribute_names(MessageSystemAttributeName::SequenceNumber)
            // If the SDK retries this call after a lost response, SQS answers the retry with the
            // same messages and receipts instead of hiding them from everyone for a whole
            // visibility timeout.
            .receive_request_attempt_id(uuid::Uuid::new_v4().to_string())
            .send()
            .await
            .map_err(|e| unavailable("ReceiveMessage", e))?;
        Ok(output.messages.unwrap_or_default())
    }
}

/// Where a message stands in send order: (sent time in ms, FIFO sequence number).
fn send_order(message: &Message) -> (u64, u128) {
    let get = |name: MessageSystemAttributeName| {
        message
            .attributes
            .as_ref()
            .and_then(|a| a.get(&name))
            .map(String::as_str)
    };
    (
        get(MessageSystemAttributeName::SentTimestamp)
            .and_then(|t| t.parse().ok())
            .unwrap_or(u64::MAX),
        get(MessageSystemAttributeName::SequenceNumber)
            .and_then(|n| n.parse().ok())
            .unwrap_or(u128::MAX),
    )
}

/// Whole seconds, rounded up: SQS counts visibility in seconds, and a shorter visibility than
/// asked for could hand the message to someone else while its holder still works on it.
fn visibility_secs(visibility: Duration) -> i32 {
    let secs = visibility.as_secs() + u64::from(visibility.subsec_nanos() > 0);
    i32::try_from(secs.min(MAX_VISIBILITY_SECS)).unwrap_or(i32::MAX)
}

fn whole_secs(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX)
}

pub(super) fn unavailable<E, R>(operation: &str, err: SdkError<E, R>) -> QueueError
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug,
{
    QueueError::Unavailable(format!("SQS {operation}: {}", DisplayErrorContext(&err)))
}

/// Split a batch into `SendMessageBatch` calls: at most ten messages and 256 KiB of bodies each,
/// in the original order (FIFO order across calls follows from sending them one after another).
fn send_batches(messages: &[OutgoingMessage]) -> Vec<&[OutgoingMessage]> {
    let mut batches = Vec::new();
    let mut start = 0;
    let mut bytes = 0;
    for (i, m) in messages.iter().enumerate() {
        let full = i - start == SQS_BATCH || bytes + m.body.len() > SQS_BATCH_BYTES;
        if full && i > start {
            batches.push(&messages[start..i]);
            start = i;
            bytes = 0;
        }
        bytes += m.body.len();
    }
    if start < messages.len() {
        batches.push(&messages[start..]);
    }
    batches
}

/// The per-entry failures of a `SendMessageBatch` that came back with HTTP 200. The sender's
/// fault (a message SQS refuses) is `Rejected`; SQS's own fault is `Unavailable`, and retrying
/// the whole send is safe because the sent entries are dropped as duplicates.
fn batch_failures(batch: &[OutgoingMessage], failed: &[BatchResultErrorEntry]) -> QueueError {
    let describe = |f: &BatchResultErrorEntry| {
        let dedup = f
            .id()
            .parse::<usize>()
            .ok()
            .and_then(|i| batch.get(i))
            .map_or("?", |m| m.dedup_id.as_str());
        format!(
            "message {dedup:?}: {} {}",
            f.code(),
            f.message().unwrap_or_default()
        )
    };
    let text = failed.iter().map(describe).collect::<Vec<_>>().join("; ");
    if failed.iter().any(|f| f.sender_fault()) {
        QueueError::Rejected(format!("SQS refused part of a batch: {text}"))
    } else {
        QueueError::Unavailable(format!("SQS failed part of a batch: {text}"))
    }
}

fn received(message: Message) -> Result<ReceivedMessage, QueueError> {
    let message_id = message.message_id.unwrap_or_default();
    let mut attributes = message.attributes.unwrap_or_default();
    let mut attribute = |name: MessageSystemAttributeName| {
        attributes.remove(&name).ok_or_else(|| {
            // Only a FIFO queue has these; a standard queue here is a deployment mistake.
            QueueError::Unavailable(format!(
                "SQS message {message_id} came without its {name} attribute; is the queue FIFO?"
            ))
        })
    };
    let group_id = attribute(MessageSystemAttributeName::MessageGroupId)?;
    let dedup_id = attribute(MessageSystemAttributeName::MessageDeduplicationId)?;
    let count = attribute(MessageSystemAttributeName::ApproximateReceiveCount)?;
    let receive_count = count.parse().map_err(|_| {
        QueueError::Unavailable(format!(
            "SQS message {message_id} has a receive count of {count:?}"
        ))
    })?;
    Ok(ReceivedMessage {
        message_id,
        receipt: message.receipt_handle.unwrap_or_default(),
        group_id,
        dedup_id,
        body: message.body.unwrap_or_default(),
        receive_count,
    })
}

/// Whether SQS said the receipt is not (or no longer) valid. Matched on error codes: the modelled
/// ones, and `InvalidParameterValue`, which SQS returns for an expired receipt and which ack and
/// release can only mean about the receipt (the URL and visibility are ours and fixed).
/// The outcome of `operation` on one received message: a receipt SQS calls invalid is
/// `StaleReceipt`, any other failure `Unavailable`.
fn by_receipt<T, E, R>(
    receipt: &str,
    operation: &str,
    result: Result<T, SdkError<E, R>>,
) -> Result<(), QueueError>
where
    E: std::error::Error + ProvideErrorMetadata + 'static,
    R: std::fmt::Debug,
{
    match result {
        Ok(_) => Ok(()),
        Err(e) if e.as_service_error().is_some_and(is_stale) => {
            Err(QueueError::StaleReceipt(receipt.to_owned()))
        }
        Err(e) => Err(unavailable(operation, e)),
    }
}

fn is_stale<E: ProvideErrorMetadata>(err: &E) -> bool {
    matches!(
        err.code(),
        Some(
            "ReceiptHandleIsInvalid"
                | "InvalidIdFormat"
                | "MessageNotInflight"
                | "InvalidParameterValue"
                | "AWS.SimpleQueueService.MessageNotInflight"
        )
    )
}

#[async_trait]
impl DurableQueue for SqsQueue {
    async fn send(&self, messages: &[OutgoingMessage]) -> Result<(), QueueError> {
        // Validate the whole batch first so bad input sends nothing.
        for message in messages {
            message.validate()?;
        }
        for batch in send_batches(messages) {
            let entries = batch
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(&m.body)
                        .message_group_id(&m.group_id)
                        .message_deduplication_id(&m.dedup_id)
                        .build()
                        .map_err(|e| {
                            QueueError::Rejected(format!("cannot build an SQS entry: {e}"))
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let output = self
                .client
                .send_message_batch()
                .queue_url(&self.urls.queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| match e.as_service_error() {
                    Some(
                        SendMessageBatchError::BatchRequestTooLong(_)
                        | SendMessageBatchError::BatchEntryIdsNotDistinct(_)
                        | SendMessageBatchError::InvalidBatchEntryId(_)
                        | SendMessageBatchError::TooManyEntriesInBatchRequest(_)
                        | SendMessageBatchError::EmptyBatchRequest(_),
                    ) => QueueError::Rejected(format!(
                        "SQS refused a batch: {}",
                        DisplayErrorContext(&e)
                    )),
                    _ => unavailable("SendMessageBatch", e),
                })?;
            if !output.failed.is_empty() {
                return Err(batch_failures(batch, &output.failed));
            }
        }
        Ok(())
    }

    /// At most ten messages (SQS's limit), possibly several of one group, in group order.
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        self.receive_raw(&self.urls.queue_url, max, visibility, self.receive_wait)
            .await?
            .into_iter()
            .map(received)
            .collect()
    }

    /// Delete the message. A receipt SQS calls invalid is `StaleReceipt`. SQS cannot tell a
    /// receipt superseded by a later receive from the current one here: see the module docs.
    async fn ack(&self, receipt: &str) -> Result<(), QueueError> {
        if receipt.is_empty() {
            return Err(QueueError::StaleReceipt(String::new()));
        }
        let result = self
            .client
            .delete_message()
            .queue_url(&self.urls.queue_url)
            .receipt_handle(receipt)
            .send()
            .await;
        by_receipt(receipt, "DeleteMessage", result)
    }

    /// Visible again at once (visibility 0); the receive count stays.
    async fn release(&self, receipt: &str) -> Result<(), QueueError> {
        self.change_visibility(receipt, Duration::ZERO).await
    }

    /// Messages in the dead-letter queue, oldest sent first. They are listed, not taken: each is
    /// received with a short visibility, none is deleted, and all are made visible again before
    /// returning. As with the embedded queue, `receipt` is empty. `receive_count` is SQS's
    /// approximate count, which also counts these listings.
    async fn dead_letters(&self, limit: usize) -> Result<Vec<ReceivedMessage>, QueueError> {
        let mut listed: Vec<Message> = Vec::new();
        while listed.len() < limit {
            let page = self
                .receive_raw(
                    &self.urls.dead_letter_url,
                    limit - listed.len(),
                    PEEK_VISIBILITY,
                    Duration::ZERO,
                )
                .await?;
            if page.is_empty() {
                break;
            }
            listed.extend(page);
        }
        self.give_back_dead_letters(&listed).await;
        listed.sort_by_key(send_order);
        listed
            .into_iter()
            .take(limit)
            .map(|m| {
                received(m).map(|m| ReceivedMessage {
                    receipt: String::new(),
                    ..m
                })
            })
            .collect()
    }
}

impl SqsQueue {
    /// `ChangeMessageVisibility` on one received message of the queue: it becomes visible again
    /// after `visibility` (0: at once). What a Lambda consumer uses to honour a `Retry-After` on
    /// the one record that asked for it, and to give back records it held back or never
    /// started, instead of leaving them hidden for the queue's whole visibility timeout.
    pub async fn change_visibility(
        &self,
        receipt: &str,
        visibility: Duration,
    ) -> Result<(), QueueError> {
        if receipt.is_empty() {
            return Err(QueueError::StaleReceipt(String::new()));
        }
        let result = self
            .client
            .change_message_visibility()
            .queue_url(&self.urls.queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(visibility_secs(visibility))
            .send()
            .await;
        by_receipt(receipt, "ChangeMessageVisibility", result)
    }

    /// Send one message straight to the dead-letter queue (same group, body and deduplication
    /// id), for a record that can never be handled: it need not wait out `maxReceiveCount`
    /// receives, holding its thread's later records back each time.
    pub async fn send_to_dead_letter(&self, message: &OutgoingMessage) -> Result<(), QueueError> {
        self.send_one(
            &self.urls.dead_letter_url,
            message,
            "SendMessage (dead-letter queue)",
        )
        .await
    }

    /// Validate and send one message to `queue_url`; `operation` names it in an error.
    async fn send_one(
        &self,
        queue_url: &str,
        message: &OutgoingMessage,
        operation: &str,
    ) -> Result<(), QueueError> {
        message.validate()?;
        self.client
            .send_message()
            .queue_url(queue_url)
            .message_body(&message.body)
            .message_group_id(&message.group_id)
            .message_deduplication_id(&message.dedup_id)
            .send()
            .await
            .map_err(|e| unavailable(operation, e))?;
        Ok(())
    }

    /// Move up to `limit` dead letters back to the queue, oldest first within what each receive
    /// returns (a group's messages stay in order), and return how many moved. Each is sent with
    /// its group and body and the deduplication id `redrive:{dead-letter message id}` (the
    /// original id may still be inside SQS's five-minute deduplication window, which would
    /// drop the redriven copy; the consumers deduplicate on what the body says, not on this id),
    /// then deleted from the dead-letter queue. A crash between the two leaves the message in
    /// both; redriving it again within five minutes is dropped as a duplicate, and a later
    /// one is deduplicated by the consumers (event id, Slack message claim).
    pub async fn redrive_dead_letters(&self, limit: usize) -> Result<usize, QueueError> {
        let mut moved = 0;
        while moved < limit {
            let mut page = self
                .receive_raw(
                    &self.urls.dead_letter_url,
                    limit - moved,
                    REDRIVE_VISIBILITY,
                    Duration::ZERO,
                )
                .await?;
            if page.is_empty() {
                break;
            }
            page.sort_by_key(send_order);
            for message in page {
                let receipt = message.receipt_handle.clone().unwrap_or_default();
                let dead = received(message)?;
                let outgoing = OutgoingMessage {
                    group_id: dead.group_id,
                    dedup_id: format!("redrive:{}", dead.message_id),
                    body: dead.body,
                };
                self.send_one(&self.urls.queue_url, &outgoing, "SendMessage (redrive)")
                    .await?;
                self.client
                    .delete_message()
                    .queue_url(&self.urls.dead_letter_url)
                    .receipt_handle(receipt)
                    .send()
                    .await
                    .map_err(|e| unavailable("DeleteMessage (dead-letter queue)", e))?;
                moved += 1;
            }
        }
        Ok(moved)
    }

    /// Make listed dead letters visible again, so the next listing (or a redrive) sees them at
    /// once. Not fatal when it fails: they come back by themselves when the peek ends.
    async fn give_back_dead_letters(&self, listed: &[Message]) {
        for chunk in listed.chunks(SQS_BATCH) {
            let entries = chunk
                .iter()
                .enumerate()
                .filter_map(|(i, m)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(i.to_string())
                        .set_receipt_handle(m.receipt_handle.clone())
                        .visibility_timeout(0)
                        .build()
                        .ok()
                })
                .collect::<Vec<_>>();
            let result = self
                .client
                .change_message_visibility_batch()
                .queue_url(&self.urls.dead_letter_url)
                .set_entries(Some(entries))
                .send()
                .await;
            match result {
                Ok(o) if !o.failed.is_empty() => tracing::debug!(
                    failed = o.failed.len(),
                    "some dead letters stay hidden until their peek visibility ends"
                ),
                Ok(_) => {}
                Err(e) => tracing::debug!(
                    error = %DisplayErrorContext(&e),
                    "dead letters stay hidden until their peek visibility ends"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(dedup: &str, bytes: usize) -> OutgoingMessage {
        OutgoingMessage {
            group_id: "g".into(),
            dedup_id: dedup.into(),
            body: "x".repeat(bytes),
        }
    }

    #[test]
    fn visibility_rounds_up_to_whole_seconds_and_is_capped() {
        assert_eq!(visibility_secs(Duration::ZERO), 0);
        assert_eq!(visibility_secs(Duration::from_millis(200)), 1);
        assert_eq!(visibility_secs(Duration::from_secs(2)), 2);
        assert_eq!(visibility_secs(Duration::from_millis(2_001)), 3);
        assert_eq!(visibility_secs(Duration::from_secs(10 * 86_400)), 43_200);
    }

    #[test]
    fn batches_hold_at_most_ten_messages_and_256_kib_in_order() {
        let small: Vec<_> = (0..23).map(|i| message(&i.to_string(), 10)).collect();
        let sizes: Vec<usize> = send_batches(&small).iter().map(|b| b.len()).collect();
        assert_eq!(sizes, [10, 10, 3]);

        let big = [
            message("a", 200 * 1024),
            message("b", 56 * 1024),
            message("c", 1),
            message("d", OutgoingMessage::MAX_BODY_BYTES),
        ];
        let batches = send_batches(&big);
        let ids: Vec<Vec<&str>> = batches
            .iter()
            .map(|b| b.iter().map(|m| m.dedup_id.as_str()).collect())
            .collect();
        assert_eq!(ids, [vec!["a", "b"], vec!["c"], vec!["d"]]);
        assert!(send_batches(&[]).is_empty());
    }

    #[test]
    fn per_entry_failures_name_the_message_and_who_is_at_fault() {
        let batch = [message("event-1", 1), message("event-2", 1)];
        let failure = |sender_fault| {
            BatchResultErrorEntry::builder()
                .id("1")
                .code("InternalError")
                .message("try again")
                .sender_fault(sender_fault)
                .build()
                .unwrap()
        };
        match batch_failures(&batch, &[failure(false)]) {
            QueueError::Unavailable(why) => assert!(why.contains("event-2"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            batch_failures(&batch, &[failure(true)]),
            QueueError::Rejected(_)
        ));
    }
}
