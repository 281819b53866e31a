//! The outbox: events are written with the session that made them and handed to the lifecycle
//! queue right after. If the process dies in between, the janitor finds them unsent and re-drives.

use tracing::Instrument;

use crate::domain::LifecycleEvent;
use crate::ports::OutgoingMessage;

use super::error::UseCaseError;
use super::threadbox::Threadbox;

impl Threadbox {
    /// Send events to the lifecycle queue and mark them sent. Failures are logged, not returned:
    /// the events are safely stored and the janitor will send them.
    pub(crate) async fn publish(&self, events: &[LifecycleEvent]) {
        if events.is_empty() {
            return;
        }
        let published = self
            .try_publish(events)
            .instrument(tracing::debug_span!("events.publish"))
            .await;
        if let Err(error) = published {
            tracing::warn!(%error, count = events.len(), "lifecycle events not sent yet; the janitor will re-drive them");
        }
    }

    async fn try_publish(&self, events: &[LifecycleEvent]) -> Result<(), UseCaseError> {
        let messages = events
            .iter()
            .map(|e| OutgoingMessage {
                group_id: e.thread_id.to_string(),
                dedup_id: e.event_id.clone(),
                body: serde_json::to_string(e).expect("events always serialise"),
            })
            .collect::<Vec<_>>();
        self.events
            .send(&messages)
            .instrument(tracing::debug_span!("events.send"))
            .await?;
        self.store
            .mark_sent(events)
            .instrument(tracing::debug_span!("store.mark_sent"))
            .await?;
        Ok(())
    }

    /// Send events that were written at least `redrive_after` ago and never marked sent.
    /// Returns how many were re-driven.
    pub async fn redrive_unsent(&self, limit: usize) -> Result<usize, UseCaseError> {
        let cutoff = self.clock.now().minus(self.config.redrive_after);
        let events = self.store.unsent_events(cutoff, limit).await?;
        if !events.is_empty() {
            self.try_publish(&events).await?;
            tracing::info!(count = events.len(), "re-drove unsent lifecycle events");
        }
        Ok(events.len())
    }
}
