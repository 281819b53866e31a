//! The work-queue loop of `threadbox dev`: receive Slack work and hand each item to the shared
//! worker, a few at a time, then turn its outcome into the queue's verbs.
//!
//! The queue hands out one message per thread at a time (FIFO groups), so items running
//! together belong to different threads and each thread's work stays in order. A long command
//! in one thread does not hold up the others: each item runs in its own task, up to
//! `concurrency`.

use std::sync::Arc;
use std::time::Duration;

use threadbox_core::fanout::RecordOutcome;
use threadbox_core::ports::{DurableQueue, ReceivedMessage};
use threadbox_slack::SlackWorker;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

#[derive(Clone, Debug)]
pub struct WorkConfig {
    /// Items handled at once (each may run a command for up to the exec timeout).
    pub concurrency: usize,
    /// How long a received item stays hidden: longer than the longest command plus replies,
    /// so an item is not handed out again while it still runs.
    pub visibility: Duration,
    /// Pause between receives that found nothing.
    pub idle_wait: Duration,
    /// The wait before retrying an item that asked to be retried without saying when.
    pub default_retry: Duration,
    /// The longest wait honoured in place before an item is given back to the queue.
    pub max_retry_wait: Duration,
}

impl WorkConfig {
    pub fn for_exec_timeout(exec_timeout: Duration) -> Self {
        Self {
            concurrency: 4,
            visibility: exec_timeout + Duration::from_secs(5 * 60),
            idle_wait: Duration::from_millis(200),
            default_retry: Duration::from_secs(1),
            max_retry_wait: Duration::from_secs(30),
        }
    }
}

pub struct WorkLoop {
    queue: Arc<dyn DurableQueue>,
    worker: SlackWorker,
    config: WorkConfig,
}

impl WorkLoop {
    pub fn new(queue: Arc<dyn DurableQueue>, worker: SlackWorker, config: WorkConfig) -> Self {
        Self {
            queue,
            worker,
            config,
        }
    }

    /// Poll until `shutdown` turns true; items already running finish first (their commands are
    /// bounded by the exec timeout).
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let permits = Arc::new(Semaphore::new(self.config.concurrency.max(1)));
        let mut running = JoinSet::new();
        while !*shutdown.borrow() {
            while running.try_join_next().is_some() {}
            let free = permits.available_permits();
            if free == 0 {
                tokio::select! {
                    _ = running.join_next() => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            let received = self.queue.receive(free, self.config.visibility).await;
            let messages = match received {
                Ok(messages) => messages,
                Err(error) => {
                    tracing::warn!(%error, "receiving Slack work failed; retrying");
                    Vec::new()
                }
            };
            if messages.is_empty() {
                tokio::select! {
                    _ = tokio::time::sleep(self.config.idle_wait) => {}
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            for message in messages {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break;
                };
                let queue = self.queue.clone();
                let worker = self.worker.clone();
                let config = self.config.clone();
                running.spawn(async move {
                    let outcome = worker.handle_body(&message.body).await;
                    settle(queue.as_ref(), &message, outcome, &config).await;
                    drop(permit);
                });
            }
        }
        while running.join_next().await.is_some() {}
        tracing::debug!("Slack work loop stopped");
    }
}

/// Ack what is done; give back what should be retried after its wait; release poison so the
/// queue dead-letters it after its last receive.
async fn settle(
    queue: &dyn DurableQueue,
    message: &ReceivedMessage,
    outcome: RecordOutcome,
    config: &WorkConfig,
) {
    let result = match outcome {
        RecordOutcome::Delivered => queue.ack(&message.receipt).await,
        RecordOutcome::Retry { retry_after } => {
            // The queue has no per-message visibility change: wait here (bounded), then give
            // the item back; each round counts towards the dead-letter limit.
            let wait = retry_after
                .unwrap_or(config.default_retry)
                .min(config.max_retry_wait);
            tokio::time::sleep(wait).await;
            queue.release(&message.receipt).await
        }
        RecordOutcome::Poison { reason } => {
            tracing::error!(
                message_id = %message.message_id,
                receive_count = message.receive_count,
                %reason,
                "Slack work item cannot be handled; it will be dead-lettered"
            );
            queue.release(&message.receipt).await
        }
    };
    if let Err(error) = result {
        tracing::warn!(%error, message_id = %message.message_id, "settling a work item failed");
    }
}
