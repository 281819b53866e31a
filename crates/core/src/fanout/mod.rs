//! Fan-out: hand each lifecycle event to every target (Slack, WebSocket subscribers, a log), each
//! target seeing each event once.
//!
//! The same core runs in the fanout Lambda (SQS records, `batchItemFailures`) and in
//! `threadbox dev`'s lifecycle consumer (SQLite queue: ack, leave in flight, release towards the
//! dead-letter list). Both only turn a [`RecordOutcome`](crate::ports::RecordOutcome) (beside the queue port) into their queue's verbs.
//!
//! - the [`FanoutTarget`] port and [`DeliveryError`] (retry later or permanent) live in `ports`;
//! - `deliver`: the [`Fanout`] itself, with per-target dedupe on the durable `DedupeStore`;
//! - `log`: [`LogTarget`], which logs each event.

mod deliver;
mod log;

pub use crate::ports::{DeliveryError, FanoutTarget};
pub use deliver::{Fanout, DEFAULT_DEDUPE_TTL};
pub use log::{cause_name, LogTarget};
