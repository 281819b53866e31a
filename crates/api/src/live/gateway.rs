//! `LiveGateway`: the WebSocket routes as plain functions over the ports, taking what API
//! Gateway hands a Lambda (connection id, the `token` query parameter, a message body).
//!
//! - `$connect` → [`LiveGateway::connect`]: an `Err` refuses the connection (401 for a token
//!   problem, 503 when the store is down).
//! - `$disconnect` → [`LiveGateway::disconnect`].
//! - `$default` → [`LiveGateway::message`]: replies (subscribed, replayed events, pong, error
//!   frames) go through the connection sender, like live events, so they share one order.
//!   `exec` frames are answered `exec_not_supported_here` (naming the HTTP route that streams a
//!   command's output) unless the server runs commands for its connections: `threadbox dev`
//!   calls [`LiveGateway::message_with_exec`] with the connection's `ConnectionExec`.
//!
//! `threadbox dev` calls the same three from its own WebSocket endpoint.

use std::sync::Arc;

use super::limits::{FrameLimiter, FrameLimits, Refusal};
use super::protocol::{self, ClientMessage, ProtocolError, ServerFrame};
use super::subscribers::{LiveError, Reach, Subscribers};
use super::token::{SubscriptionToken, TokenError, TokenKey};
use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{Connection, StoreError};

/// What runs a connection's commands: `ConnectionExec` where the HTTP API's exec body exists.
type ExecRunner = super::exec::ConnectionExec;

/// Threads one connection may watch at once.
pub const MAX_SUBSCRIPTIONS_PER_CONNECTION: usize = 50;

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ConnectError {
    /// The client's fault (refuse with 401) rather than ours (503, try again).
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, ConnectError::Token(_))
    }

    pub fn code(&self) -> &'static str {
        match self {
            ConnectError::Token(e) => e.code(),
            ConnectError::Store(_) => "unavailable",
        }
    }
}

#[derive(Clone)]
pub struct LiveGateway {
    subscribers: Arc<Subscribers>,
    key: TokenKey,
    /// Frames per second and work in flight, per connection and per thread: one count for
    /// the whole process.
    limiter: Arc<FrameLimiter>,
}

impl LiveGateway {
    /// A gateway under the default [`FrameLimits`].
    pub fn new(subscribers: Arc<Subscribers>, key: TokenKey) -> Self {
        Self {
            subscribers,
            key,
            limiter: Arc::default(),
        }
    }

    /// The same, under `limits`.
    pub fn with_frame_limits(mut self, limits: FrameLimits) -> Self {
        self.limiter = Arc::new(FrameLimiter::new(limits));
        self
    }

    /// The count every connection's commands share (`ConnectionExec::new` takes it).
    pub fn frame_limiter(&self) -> Arc<FrameLimiter> {
        self.limiter.clone()
    }

    /// `$connect`: check the token and record the connection with what the token grants.
    pub async fn connect(
        &self,
        connection_id: &str,
        token: Option<&str>,
    ) -> Result<Connection, ConnectError> {
        Ok(self.connect_granting(connection_id, token).await?.0)
    }

    /// [`LiveGateway::connect`], with all the token grants (the record keeps only what watching
    /// needs; a server that runs commands keeps the rest with its socket).
    pub async fn connect_granting(
        &self,
        connection_id: &str,
        token: Option<&str>,
    ) -> Result<(Connection, SubscriptionToken), ConnectError> {
        let now = self.subscribers.now();
        let granted = self.key.verify(token.unwrap_or_default(), now)?;
        let connection = Connection {
            connection_id: connection_id.to_owned(),
            scope: granted.scope.clone(),
            expires_at: granted.expires_at,
            connected_at: now,
        };
        self.subscribers
            .subscriptions()
            .add_connection(&connection)
            .await?;
        tracing::debug!(connection_id, scope = %connection.scope, exec = granted.exec, "live-events connection opened");
        Ok((connection, granted))
    }

    /// `$disconnect`: forget the connection and its subscriptions.
    pub async fn disconnect(&self, connection_id: &str) -> Result<(), StoreError> {
        tracing::debug!(connection_id, "live-events connection closed");
        self.limiter.forget(connection_id);
        self.subscribers
            .subscriptions()
            .remove_connection(connection_id)
            .await
    }

    /// `$default`: act on one client frame. A frame the server cannot use is answered with an
    /// error frame and the connection stays open; `Err` only for a store or sender failure.
    pub async fn message(&self, connection_id: &str, body: &str) -> Result<(), LiveError> {
        self.dispatch(connection_id, body, None).await
    }

    /// [`LiveGateway::message`] on a server that runs commands for its connections: `exec`
    /// frames start a command in `exec`, whose frames follow on its own lane.
    pub async fn message_with_exec(
        &self,
        connection_id: &str,
        body: &str,
        exec: &super::exec::ConnectionExec,
    ) -> Result<(), LiveError> {
        self.dispatch(connection_id, body, Some(exec)).await
    }

    async fn dispatch(
        &self,
        connection_id: &str,
        body: &str,
        exec: Option<&ExecRunner>,
    ) -> Result<(), LiveError> {
        // Held through the replay, so live events for this connection wait behind it.
        let _order = self.subscribers.locks().lock(connection_id).await;
        let parsed = protocol::parse(body);
        // Every frame counts, read or not; a refused one does nothing.
        if let Err(refused) = self.limiter.frame(connection_id) {
            let refused = match &parsed {
                Ok(message) => name_refusal(refused, message),
                Err(_) => refused,
            };
            return self.refuse(connection_id, refused).await;
        }
        let reply = match parsed {
            Err(error) => error.frame(),
            Ok(ClientMessage::Ping) => ServerFrame::Pong.to_frame(),
            Ok(ClientMessage::Unsubscribe { thread_id }) => {
                self.subscribers
                    .subscriptions()
                    .unsubscribe(connection_id, &thread_id)
                    .await?;
                ServerFrame::Unsubscribed {
                    thread_id: &thread_id,
                }
                .to_frame()
            }
            Ok(ClientMessage::Subscribe {
                thread_id,
                after_seq,
            }) => return self.subscribe(connection_id, &thread_id, after_seq).await,
            Ok(ClientMessage::Exec(frame)) => match exec {
                Some(exec) => match exec.start(frame) {
                    Ok(()) => return Ok(()),
                    Err(refused) => return self.refuse(connection_id, refused).await,
                },
                _ => ProtocolError::new(
                    "exec_not_supported_here",
                    "this server does not run commands over the WebSocket; stream a command's \
                     output with POST /v1/threads/{id}/exec and Accept: text/event-stream (on \
                     AWS, at the stack's SandboxStreamUrl)",
                )
                .for_request(&frame.request_id)
                .about(frame.thread_id.as_str())
                .frame(),
            },
            Ok(ClientMessage::Pty(frame)) => match exec {
                Some(exec) => match exec.pty(frame) {
                    Ok(()) => return Ok(()),
                    Err(refused) => return self.refuse(connection_id, refused).await,
                },
                _ => ProtocolError::new(
                    "pty_not_supported_here",
                    "this server does not attach terminals over the WebSocket; use the HTTP \
                     process routes (POST /v1/threads/{id}/processes with a pty, its output \
                     with Accept: text/event-stream; on AWS, at the stack's SandboxStreamUrl)",
                )
                .for_request(&frame.request_id)
                .about(frame.thread_id.as_str())
                .frame(),
            },
        };
        self.subscribers
            .send_control(connection_id, &reply)
            .await
            .map(drop)
    }

    /// Answer a refused frame with its error frame; a connection that kept sending past its
    /// refusals is closed and forgotten after it.
    async fn refuse(&self, connection_id: &str, refused: Refusal) -> Result<(), LiveError> {
        let frame = refused.error.frame();
        if !refused.close {
            return self
                .subscribers
                .send_control(connection_id, &frame)
                .await
                .map(drop);
        }
        tracing::warn!(
            connection_id,
            code = refused.error.code,
            "live-events connection kept sending past its limits; closing it"
        );
        self.limiter.forget(connection_id);
        self.subscribers.evict(connection_id, &frame).await
    }

    async fn subscribe(
        &self,
        connection_id: &str,
        thread: &ThreadId,
        after_seq: Option<u64>,
    ) -> Result<(), LiveError> {
        let subs = &self.subscribers;
        let refuse = |error: ProtocolError| async move {
            subs.send_control(connection_id, &error.about(thread.as_str()).frame())
                .await
                .map(drop)
        };
        let Some(connection) = subs.subscriptions().connection(connection_id).await? else {
            return refuse(ProtocolError::new(
                "not_connected",
                "this connection is not recorded (it was closed); reconnect",
            ))
            .await;
        };
        if connection.expires_at <= subs.now() {
            return subs.expire(connection_id, connection.expires_at).await;
        }
        if !connection.scope.allows(thread) {
            let error = TokenError::ThreadNotAllowed(thread.clone());
            return refuse(ProtocolError::new(error.code(), error.to_string())).await;
        }
        let mine = subs.subscriptions().subscriptions_of(connection_id).await?;
        if mine.len() >= MAX_SUBSCRIPTIONS_PER_CONNECTION
            && !mine.iter().any(|s| &s.thread_id == thread)
        {
            return refuse(ProtocolError::new(
                "too_many_subscriptions",
                format!(
                    "a connection may watch at most {MAX_SUBSCRIPTIONS_PER_CONNECTION} threads; \
                     unsubscribe from one first"
                ),
            ))
            .await;
        }
        // A thread without a session yet is fine: its first event will be seq 1.
        let session = subs.events().load(thread).await?;
        let last_seq = session.as_ref().map_or(0, |s| s.last_seq);
        let after_seq = after_seq.unwrap_or(last_seq);
        if !subs
            .subscriptions()
            .subscribe(connection_id, thread, after_seq)
            .await?
        {
            return Ok(()); // disconnected meanwhile
        }
        let subscribed = ServerFrame::Subscribed {
            thread_id: thread,
            after_seq,
            last_seq,
            status: session.map(|s| s.status),
        }
        .to_frame();
        if subs.send_control(connection_id, &subscribed).await? == Reach::Gone {
            return Ok(());
        }
        subs.catch_up_locked(connection_id, thread, None)
            .await
            .map(drop)
    }
}

/// A refusal naming the request and thread of the frame it refuses, where it has them.
fn name_refusal(refused: Refusal, message: &ClientMessage) -> Refusal {
    match message {
        ClientMessage::Exec(frame) => refused.naming(&frame.request_id, &frame.thread_id),
        ClientMessage::Pty(frame) => refused.naming(&frame.request_id, &frame.thread_id),
        ClientMessage::Subscribe { thread_id, .. } | ClientMessage::Unsubscribe { thread_id } => {
            Refusal {
                error: refused.error.about(thread_id.as_str()),
                close: refused.close,
            }
        }
        _ => refused,
    }
}
