//! `FlakyQueue`: wraps a real queue and can be told to fail sends, to test the outbox.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use threadbox_core::ports::{DurableQueue, OutgoingMessage, QueueError, ReceivedMessage};

pub struct FlakyQueue {
    inner: Arc<dyn DurableQueue>,
    failing: AtomicBool,
}

impl FlakyQueue {
    pub fn new(inner: Arc<dyn DurableQueue>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            failing: AtomicBool::new(false),
        })
    }

    /// While on, `send` fails as an unreachable queue would.
    pub fn fail_sends(&self, on: bool) {
        self.failing.store(on, Ordering::SeqCst);
    }
}

#[async_trait]
impl DurableQueue for FlakyQueue {
    async fn send(&self, messages: &[OutgoingMessage]) -> Result<(), QueueError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(QueueError::Unavailable(
                "injected: queue unreachable".into(),
            ));
        }
        self.inner.send(messages).await
    }
    async fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        self.inner.receive(max, visibility).await
    }
    async fn ack(&self, receipt: &str) -> Result<(), QueueError> {
        self.inner.ack(receipt).await
    }
    async fn release(&self, receipt: &str) -> Result<(), QueueError> {
        self.inner.release(receipt).await
    }
    async fn dead_letters(&self, limit: usize) -> Result<Vec<ReceivedMessage>, QueueError> {
        self.inner.dead_letters(limit).await
    }
}
