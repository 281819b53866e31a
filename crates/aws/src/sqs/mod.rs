//! The SQS queue (feature `sqs`): the production backend of the `DurableQueue` port, an SQS FIFO
//! queue with a dead-letter queue, passing the same conformance suite as the embedded queue.
//!
//! How the port maps onto SQS:
//! - `send`: every message is validated first (`OutgoingMessage::validate`), so bad input sends
//!   nothing. Then `SendMessageBatch` calls of at most ten messages and 256 KiB, in order, with
//!   `MessageGroupId` = the group (thread id) and `MessageDeduplicationId` = the dedup id. The
//!   per-entry `Failed` list that comes back with HTTP 200 is checked: the sender's fault is
//!   `Rejected`, SQS's is `Unavailable`. A failed send may have sent earlier batches; sending
//!   again is safe, as SQS drops the repeats by deduplication id for five minutes.
//! - `receive`: `ReceiveMessage` with the visibility in whole seconds, rounded up, and the
//!   system attributes `ApproximateReceiveCount`, `MessageGroupId`, `MessageDeduplicationId`.
//!   At most ten messages per call; SQS may return several of one group, in order.
//! - `ack` is `DeleteMessage`; `release` is `ChangeMessageVisibility` to 0.
//! - Dead letters: the queue's `RedrivePolicy` moves a message to the dead-letter queue after
//!   `maxReceiveCount` receives (see [`create_fifo_queue`]). `dead_letters` lists that queue by
//!   receiving with a short visibility, deletes nothing, and makes what it listed visible again.
//!
//! # Stale receipts: what is not detected, and why that is safe
//!
//! SQS issues a new receipt on every receive. An unknown or malformed receipt is refused
//! (`ReceiptHandleIsInvalid`, or `InvalidParameterValue` for an expired one), and the adapter
//! answers `StaleReceipt`. But a receipt *superseded* by a later receive is not reliably refused:
//! SQS documents that `DeleteMessage` with an older receipt "succeeds" without deleting, and moto
//! accepts any receipt a message ever had, for `DeleteMessage` (deleting it) and for
//! `ChangeMessageVisibility`. The adapter does not try to detect it: SQS keeps no state the
//! adapter could check without an extra request per ack, and the outcome is harmless under
//! at-least-once delivery: the late holder finished its work, and the current holder's ack
//! succeeds either way. The conformance suite's superseded-receipt check is therefore run only
//! against the embedded queue; the AWS tests run the unknown-receipt part and assert this
//! harmless outcome instead (`tests/tests/aws_backend.rs`).
//!
//! moto also forgets a deduplication id once its message is deleted (SQS remembers it for the
//! whole five minutes), so the AWS tests skip that one check of the dedup test; it is a property
//! of SQS the adapter relies on, not one it implements.

mod queue;
mod setup;

pub use queue::{SqsQueue, SqsQueueUrls};
pub use setup::create_fifo_queue;
