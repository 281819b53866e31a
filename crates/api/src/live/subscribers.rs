//! `Subscribers`: the WebSocket fan-out target, and the one place that sends events to
//! connections (replay after a subscribe goes through it too).
//!
//! The rule that makes every path safe to overlap: a subscription's `last_seq` moves only by
//! compare-and-set from the previous event's seq to this one's, and only the caller whose move
//! succeeded sends that event. So a connection never gets an event twice (redelivery, a replay
//! racing a live send, two processes) and never gets one out of order or with a gap before it:
//! a subscriber found behind the event being fanned out is first sent what it missed, from the
//! event log. Within a process a per-connection lock also orders the sends themselves, so a replay's
//! event N is on the wire before a live event N+1 (across processes the moves stay exclusive, and
//! the window for a reordered pair is the time between one process's move and its send).

use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::{self, StreamExt};

use super::locks::ConnectionLocks;
use super::protocol::{ProtocolError, ServerFrame};
use super::token::TokenError;
use threadbox_core::domain::{LifecycleEvent, Millis, ThreadId};
use threadbox_core::ports::{
    Clock, ConnectionSender, Frame, SendError, SessionStore, StoreError, SubscriptionStore,
};
use threadbox_core::ports::{DeliveryError, FanoutTarget};

/// The target's name: part of the fan-out dedupe key, so it never changes.
pub const TARGET_NAME: &str = "ws";
/// Events read from the log per step of a replay.
const REPLAY_PAGE: usize = 100;
/// Connections sent to at once for one event (API Gateway sends are network round trips).
const SEND_CONCURRENCY: usize = 32;

/// A send that did not finish and may succeed later.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Send(SendError),
}

/// What became of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    Open,
    /// Gone (or expired): its record is removed.
    Gone,
}

pub struct Subscribers {
    subscriptions: Arc<dyn SubscriptionStore>,
    sender: Arc<dyn ConnectionSender>,
    /// The event log (the session store's events), for replay and for filling gaps.
    events: Arc<dyn SessionStore>,
    clock: Arc<dyn Clock>,
    locks: ConnectionLocks,
}

impl Subscribers {
    pub fn new(
        subscriptions: Arc<dyn SubscriptionStore>,
        sender: Arc<dyn ConnectionSender>,
        events: Arc<dyn SessionStore>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            subscriptions,
            sender,
            events,
            clock,
            locks: ConnectionLocks::default(),
        }
    }

    pub(crate) fn subscriptions(&self) -> &dyn SubscriptionStore {
        self.subscriptions.as_ref()
    }

    pub(crate) fn events(&self) -> &dyn SessionStore {
        self.events.as_ref()
    }

    pub(crate) fn now(&self) -> Millis {
        self.clock.now()
    }

    pub(crate) fn locks(&self) -> &ConnectionLocks {
        &self.locks
    }

    /// Deliver one event to every subscriber of its thread. An error means at least one
    /// connection should be tried again later; the others already have the event and will skip
    /// it then.
    pub async fn deliver_event(&self, event: &LifecycleEvent) -> Result<(), LiveError> {
        let thread = &event.thread_id;
        let subscribers = self.subscriptions.subscribers(thread).await?;
        if subscribers.is_empty() {
            return Ok(());
        }
        let now = self.clock.now();
        let prev = event.seq.saturating_sub(1);
        let (mut next, mut behind) = (Vec::new(), Vec::new());
        for sub in subscribers {
            if sub.expires_at <= now {
                self.expire(&sub.connection_id, sub.expires_at).await?;
            } else if sub.last_seq == prev {
                next.push(sub.connection_id);
            } else if sub.last_seq < prev {
                behind.push(sub.connection_id);
            } // else it has this event already
        }
        // Those exactly one event behind are claimed together in one write. Their locks are
        // taken first (in id order, so two fan-outs cannot deadlock): a claim made without the
        // lock could be overtaken by a replay holding it, which would see the position already
        // moved and send the next events before ours. A connection that subscribed since the
        // read is not named, so not claimed here: its own replay sends this event.
        next.sort();
        let mut held = Vec::with_capacity(next.len());
        for connection_id in &next {
            held.push(self.locks.lock(connection_id).await);
        }
        let claimed = self
            .subscriptions
            .advance_many(thread, &next, prev, event.seq)
            .await?;
        let frame = ServerFrame::Event { event }.to_frame();
        let sends = stream::iter(claimed)
            .map(|connection_id| {
                let frame = &frame;
                async move {
                    self.send_claimed(&connection_id, thread, prev, event.seq, frame)
                        .await
                }
            })
            .buffer_unordered(SEND_CONCURRENCY)
            .collect::<Vec<_>>();
        let catch_ups = stream::iter(behind)
            .map(|connection_id| async move {
                let _order = self.locks.lock(&connection_id).await;
                self.catch_up_locked(&connection_id, thread, Some(event.seq))
                    .await
            })
            .buffer_unordered(SEND_CONCURRENCY)
            .collect::<Vec<_>>();
        let (sent, caught_up) = futures::join!(sends, catch_ups);
        drop(held);
        sent.into_iter()
            .chain(caught_up)
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }

    /// Send the connection the thread's events after its position, up to `up_to` (everything in
    /// the log when `None`). The caller holds the connection's lock.
    pub(crate) async fn catch_up_locked(
        &self,
        connection_id: &str,
        thread: &ThreadId,
        up_to: Option<u64>,
    ) -> Result<Reach, LiveError> {
        let target = up_to.unwrap_or(u64::MAX);
        loop {
            let Some(sub) = self
                .subscriptions
                .subscription(connection_id, thread)
                .await?
            else {
                // Unsubscribed or disconnected meanwhile: nothing is owed.
                return Ok(Reach::Open);
            };
            if sub.last_seq >= target {
                return Ok(Reach::Open);
            }
            let want = (target - sub.last_seq).min(REPLAY_PAGE as u64) as usize;
            let events = self.events.events_after(thread, sub.last_seq, want).await?;
            let mut prev = sub.last_seq;
            let mut raced = false;
            for event in events.iter().take_while(|e| e.seq <= target) {
                // Moving from the last seq sent (not from `seq - 1`) skips seqs the log no longer
                // has instead of waiting for them forever.
                if !self
                    .subscriptions
                    .advance(connection_id, thread, prev, event.seq)
                    .await?
                {
                    raced = true;
                    break;
                }
                let frame = ServerFrame::Event { event }.to_frame();
                let reach = self
                    .send_claimed(connection_id, thread, prev, event.seq, &frame)
                    .await?;
                if reach == Reach::Gone {
                    return Ok(Reach::Gone);
                }
                prev = event.seq;
            }
            // Someone else moved the position (re-read it), or there may be more in the log.
            if !raced && events.len() < want {
                return Ok(Reach::Open);
            }
        }
    }

    /// Send event `seq`, which this caller claimed by moving the position from `prev`.
    async fn send_claimed(
        &self,
        connection_id: &str,
        thread: &ThreadId,
        prev: u64,
        seq: u64,
        frame: &Frame,
    ) -> Result<Reach, LiveError> {
        match self.send_or_forget(connection_id, frame).await? {
            Ok(reach) => Ok(reach),
            Err(error) => {
                // Give the claim back so the retry sends it. If the position moved meanwhile (a
                // second process), the retry cannot: say so rather than hide the gap.
                match self
                    .subscriptions
                    .advance(connection_id, thread, seq, prev)
                    .await
                {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!(
                        connection_id,
                        thread_id = %thread,
                        seq,
                        "send failed and the position moved on; this connection misses the event"
                    ),
                    Err(store) => tracing::warn!(
                        connection_id,
                        thread_id = %thread,
                        seq,
                        error = %store,
                        "send failed and the claim could not be given back"
                    ),
                }
                Err(LiveError::Send(error))
            }
        }
    }

    /// Send a frame that is not an event (subscribed, pong, errors); a gone connection is
    /// forgotten.
    pub(crate) async fn send_control(
        &self,
        connection_id: &str,
        frame: &Frame,
    ) -> Result<Reach, LiveError> {
        self.send_or_forget(connection_id, frame)
            .await?
            .map_err(LiveError::Send)
    }

    /// Send `frame`; a gone connection is forgotten. Any other failure to send is the caller's
    /// to handle.
    async fn send_or_forget(
        &self,
        connection_id: &str,
        frame: &Frame,
    ) -> Result<Result<Reach, SendError>, LiveError> {
        match self.sender.send(connection_id, frame).await {
            Ok(()) => Ok(Ok(Reach::Open)),
            Err(SendError::Gone(_)) => {
                self.forget(connection_id).await?;
                Ok(Ok(Reach::Gone))
            }
            Err(error) => Ok(Err(error)),
        }
    }

    /// The token ran out: a last error frame, then close and forget the connection.
    pub(crate) async fn expire(
        &self,
        connection_id: &str,
        expired_at: Millis,
    ) -> Result<(), LiveError> {
        let error = TokenError::Expired(expired_at);
        let frame = ProtocolError::new(error.code(), error.to_string()).frame();
        self.evict(connection_id, &frame).await?;
        tracing::info!(
            connection_id,
            "live-events token expired; connection closed"
        );
        Ok(())
    }

    /// A last error frame saying why, then close and forget the connection.
    pub(crate) async fn evict(&self, connection_id: &str, last: &Frame) -> Result<(), LiveError> {
        // Best effort: the connection is closed either way.
        let _ = self.sender.send(connection_id, last).await;
        if let Err(error) = self.sender.close(connection_id).await {
            tracing::debug!(connection_id, %error, "closing a live-events connection failed");
        }
        self.forget(connection_id).await?;
        Ok(())
    }

    async fn forget(&self, connection_id: &str) -> Result<(), StoreError> {
        tracing::debug!(connection_id, "live-events connection gone; removing it");
        self.subscriptions.remove_connection(connection_id).await
    }
}

#[async_trait]
impl FanoutTarget for Subscribers {
    fn name(&self) -> &str {
        TARGET_NAME
    }

    async fn deliver(&self, event: &LifecycleEvent) -> Result<(), DeliveryError> {
        self.deliver_event(event)
            .await
            .map_err(|error| DeliveryError::retry(format!("WebSocket subscribers: {error}")))
    }
}
