//! `InProcessSender`: the connection sender for a server that holds its WebSockets itself
//! (`threadbox dev`). Each connection is a bounded channel that the socket's writer task drains.
//!
//! A subscriber that stops reading is cut off rather than buffered without bound: when its
//! channel is full it counts as gone, its record is removed, and its socket closes. It reconnects
//! and subscribes with the last seq it saw; replay fills what it missed.

use std::collections::HashMap;
use std::sync::RwLock;

use async_trait::async_trait;
use tokio::sync::mpsc;

use threadbox_core::ports::{ConnectionSender, Frame, SendError};

/// Frames buffered per connection before it counts as stalled.
pub const DEFAULT_CONNECTION_BUFFER: usize = 1024;

#[derive(Debug)]
pub struct InProcessSender {
    connections: RwLock<HashMap<String, mpsc::Sender<Frame>>>,
    buffer: usize,
}

impl Default for InProcessSender {
    fn default() -> Self {
        Self::with_buffer(DEFAULT_CONNECTION_BUFFER)
    }
}

impl InProcessSender {
    pub fn with_buffer(buffer: usize) -> Self {
        Self {
            connections: RwLock::default(),
            buffer: buffer.max(1),
        }
    }

    /// Start routing frames for `connection_id`; the socket's writer reads the receiver. When the
    /// receiver yields `None`, the server closed the connection (or cut it off): close the socket.
    pub fn register(&self, connection_id: &str) -> mpsc::Receiver<Frame> {
        let (tx, rx) = mpsc::channel(self.buffer);
        self.write().insert(connection_id.to_owned(), tx);
        rx
    }

    /// Stop routing frames for `connection_id` (its socket closed).
    pub fn unregister(&self, connection_id: &str) {
        self.write().remove(connection_id);
    }

    pub fn len(&self) -> usize {
        self.connections
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, mpsc::Sender<Frame>>> {
        self.connections.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl ConnectionSender for InProcessSender {
    async fn send(&self, connection_id: &str, frame: &Frame) -> Result<(), SendError> {
        let sent = {
            let connections = self.connections.read().unwrap_or_else(|p| p.into_inner());
            match connections.get(connection_id) {
                None => return Err(SendError::Gone(connection_id.to_owned())),
                Some(tx) => tx.try_send(frame.clone()),
            }
        };
        match sent {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    connection_id,
                    buffer = self.buffer,
                    "live-events subscriber is not reading; cutting it off"
                );
                self.unregister(connection_id);
                Err(SendError::Gone(connection_id.to_owned()))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.unregister(connection_id);
                Err(SendError::Gone(connection_id.to_owned()))
            }
        }
    }

    async fn close(&self, connection_id: &str) -> Result<(), SendError> {
        // Dropping the sender ends the writer's stream after the frames already queued (a final
        // error frame, say), and the writer then closes the socket.
        self.unregister(connection_id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_reach_the_registered_connection_in_order() {
        let sender = InProcessSender::default();
        let mut rx = sender.register("c1");
        for text in ["a", "b"] {
            sender.send("c1", &Frame::from(text)).await.unwrap();
        }
        assert_eq!(&*rx.recv().await.unwrap(), "a");
        assert_eq!(&*rx.recv().await.unwrap(), "b");
        assert_eq!(
            sender.send("c2", &Frame::from("x")).await.unwrap_err(),
            SendError::Gone("c2".into())
        );
    }

    #[tokio::test]
    async fn a_stalled_or_closed_connection_is_gone() {
        let sender = InProcessSender::with_buffer(2);
        let mut rx = sender.register("slow");
        sender.send("slow", &Frame::from("1")).await.unwrap();
        sender.send("slow", &Frame::from("2")).await.unwrap();
        assert!(matches!(
            sender.send("slow", &Frame::from("3")).await,
            Err(SendError::Gone(_))
        ));
        assert!(sender.is_empty(), "cut off");
        assert_eq!(&*rx.recv().await.unwrap(), "1");
        assert_eq!(&*rx.recv().await.unwrap(), "2");
        assert!(rx.recv().await.is_none(), "then the writer sees the end");

        let rx = sender.register("dropped");
        drop(rx);
        assert!(matches!(
            sender.send("dropped", &Frame::from("x")).await,
            Err(SendError::Gone(_))
        ));

        let mut rx = sender.register("closed");
        sender.send("closed", &Frame::from("last")).await.unwrap();
        sender.close("closed").await.unwrap();
        assert_eq!(&*rx.recv().await.unwrap(), "last");
        assert!(rx.recv().await.is_none());
    }
}
