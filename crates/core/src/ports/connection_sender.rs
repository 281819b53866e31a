//! The connection sender port: push a frame down one live-events connection.
//!
//! In production this is API Gateway's Management API (`PostToConnection`, and
//! `DeleteConnection` to close); in `threadbox dev` it is the local server's own WebSocket.

use std::sync::Arc;

use async_trait::async_trait;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The connection no longer exists (API Gateway's 410 Gone; a closed or stalled local
    /// socket). Permanent: the caller forgets the connection.
    #[error("connection {0} is gone")]
    Gone(String),
    /// The send could not be made now (throttled, network, 5xx); the same send may succeed later.
    #[error("sending to connection {connection_id} failed: {reason}")]
    Unavailable {
        connection_id: String,
        reason: String,
    },
}

/// One text frame, serialized once and shared by every connection it goes to.
pub type Frame = Arc<str>;

#[async_trait]
pub trait ConnectionSender: Send + Sync {
    async fn send(&self, connection_id: &str, frame: &Frame) -> Result<(), SendError>;

    /// Close the connection from the server's side (after a final error frame, say). Closing a
    /// connection that is already gone is not an error.
    async fn close(&self, connection_id: &str) -> Result<(), SendError>;
}
