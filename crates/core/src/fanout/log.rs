//! `LogTarget`: writes each lifecycle event to the log. What `threadbox dev` shows when no other
//! target is configured, and a trace of deliveries in a Lambda's logs.

use async_trait::async_trait;

use crate::domain::LifecycleEvent;
use crate::ports::{DeliveryError, FanoutTarget};

pub struct LogTarget;

#[async_trait]
impl FanoutTarget for LogTarget {
    fn name(&self) -> &str {
        "log"
    }

    async fn deliver(&self, event: &LifecycleEvent) -> Result<(), DeliveryError> {
        let from = event.from.map_or("none", |s| s.as_str());
        tracing::info!(
            thread_id = %event.thread_id,
            seq = event.seq,
            generation = event.generation,
            sandbox_id = event.sandbox_id.as_deref().unwrap_or("-"),
            detail = event.detail.as_deref().unwrap_or(""),
            "lifecycle {from} -> {} ({})",
            event.to,
            cause_name(event),
        );
        Ok(())
    }
}

/// The cause as the API spells it (`provider_gone`, not `ProviderGone`).
pub fn cause_name(event: &LifecycleEvent) -> String {
    serde_json::to_value(event.cause)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{:?}", event.cause))
}
