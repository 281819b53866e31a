//! `GET /v1/ws?token=…`: the live-events WebSocket of `threadbox dev`.
//!
//! The token travels in the query string because browsers cannot set headers on a WebSocket.
//! A bad or missing token is refused before the upgrade (401 with the API's JSON error); after
//! it, each text frame goes to the shared [`LiveGateway`], exactly what API Gateway's routes
//! call in production, and every frame for the client (replies, replayed and live events) comes
//! through the connection's channel in the [`InProcessSender`], so they share one order.
//!
//! `exec` frames run commands for the connection (a token with the `exec` capability only): a
//! [`ConnectionExec`] per socket starts them, and their output frames come through an exec lane
//! of their own that the writer drains beside the channel, so a chatty command never makes the
//! connection look stalled to the live-events fan-out. When the socket closes, the commands whose
//! frame asked `kill_on_disconnect` are killed; the others run to their end.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::{SinkExt, StreamExt};
use serde::Deserialize;
use threadbox_api::http::ApiError;
use threadbox_api::live::{
    ConnectionExec, InProcessSender, LiveGateway, ProtocolError, SubscriptionToken,
    MAX_EXEC_MESSAGE,
};
use threadbox_core::ports::{ConnectionSender, Frame};
use threadbox_core::usecases::Threadbox;
use tokio::sync::{mpsc, watch};

use super::ws_limits::{Admission, ConnectionCounter};

/// Close codes (RFC 6455): the server is stopping; the server ended the connection on purpose.
const GOING_AWAY: u16 = 1001;
const POLICY: u16 = 1008;
/// How long a socket the server closed waits for the client's close.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Clone)]
pub struct LiveSocket {
    pub gateway: LiveGateway,
    pub sender: Arc<InProcessSender>,
    /// Runs the commands of `exec` frames.
    pub threadbox: Threadbox,
    pub shutdown: watch::Receiver<bool>,
    pub connections: ConnectionCounter,
}

pub fn routes(live: LiveSocket) -> Router {
    Router::new().route("/v1/ws", get(upgrade)).with_state(live)
}

#[derive(Deserialize)]
struct WsQuery {
    token: Option<String>,
}

async fn upgrade(
    State(live): State<LiveSocket>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    query: Result<Query<WsQuery>, axum::extract::rejection::QueryRejection>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => {
            return ApiError::bad_request(
                "websocket_required",
                format!("GET /v1/ws is a WebSocket endpoint: {rejection}"),
            )
            .into_response()
        }
    };
    let token = query.ok().and_then(|Query(q)| q.token);
    // Over a cap: upgrade and close at once with the reason, which a browser's WebSocket shows
    // (a refused upgrade only reaches its script as a bare 1006).
    let admission = match live
        .connections
        .admit(token.as_deref().unwrap_or_default(), client.ip())
    {
        Ok(admission) => admission,
        Err(reason) => {
            tracing::warn!(%client, %reason, "live-events connection refused");
            return ws.on_upgrade(move |mut socket| async move {
                let _ = socket.send(close(POLICY, reason)).await;
            });
        }
    };
    let connection_id = uuid::Uuid::new_v4().to_string();
    // Routed before the connection is recorded, so no frame for it can find no route.
    let frames = live.sender.register(&connection_id);
    let grant = match live
        .gateway
        .connect_granting(&connection_id, token.as_deref())
        .await
    {
        Ok((_, grant)) => grant,
        Err(error) => {
            live.sender.unregister(&connection_id);
            let status = if error.is_unauthorized() {
                StatusCode::UNAUTHORIZED
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            return ApiError::new(status, error.code(), error.to_string()).into_response();
        }
    };
    let failed = (live.clone(), connection_id.clone());
    // `exec` frames may carry stdin up to this; the protocol holds the others to less.
    ws.max_message_size(MAX_EXEC_MESSAGE)
        .on_failed_upgrade(move |error| {
            let (live, connection_id) = failed;
            tracing::debug!(%error, %connection_id, "WebSocket upgrade failed");
            tokio::spawn(async move { forget(&live, &connection_id).await });
        })
        .on_upgrade(move |socket| serve(live, connection_id, grant, socket, frames, admission))
}

/// Pump one connection: frames out from the channel, client messages in to the gateway, until
/// either side closes or the server stops.
async fn serve(
    live: LiveSocket,
    connection_id: String,
    grant: SubscriptionToken,
    socket: WebSocket,
    mut frames: mpsc::Receiver<Frame>,
    // Held while the connection is open: its place under the caps.
    _admission: Admission,
) {
    let sender: Arc<dyn ConnectionSender> = live.sender.clone();
    let (exec, mut exec_frames) = ConnectionExec::new(
        live.threadbox.clone(),
        sender,
        &connection_id,
        grant,
        live.gateway.frame_limiter(),
    );
    let (mut sink, mut stream) = socket.split();
    let stop = stopping(live.shutdown.clone());
    tokio::pin!(stop);
    let writer = async {
        loop {
            tokio::select! {
                frame = frames.recv() => match frame {
                    Some(frame) => {
                        if sink.send(Message::Text(frame.as_ref().into())).await.is_err() {
                            return;
                        }
                    }
                    // The server closed it (an expired token, frames past its limits: the last
                    // error frame says which) or cut it off (not reading).
                    None => {
                        let _ = sink.send(close(POLICY, "closed by the server (token expired, too many frames, or not reading); reconnect with your last seq")).await;
                        return;
                    }
                },
                // Commands' output; the lane lives as long as `exec`, so it never ends here.
                Some(frame) = exec_frames.recv() => {
                    if sink.send(Message::Text(frame.as_ref().into())).await.is_err() {
                        return;
                    }
                }
                () = &mut stop => {
                    let _ = sink.send(close(GOING_AWAY, "threadbox dev is stopping")).await;
                    return;
                }
            }
        }
    };
    let reader = async {
        while let Some(Ok(message)) = stream.next().await {
            match message {
                Message::Text(text) => {
                    let handled = live
                        .gateway
                        .message_with_exec(&connection_id, text.as_str(), &exec)
                        .await;
                    if let Err(error) = handled {
                        tracing::warn!(connection_id, %error, "live-events message failed");
                        let reply = ProtocolError::new(
                            "unavailable",
                            "the server could not act on that message; try again",
                        );
                        let _ = live.sender.send(&connection_id, &reply.frame()).await;
                    }
                }
                Message::Binary(_) => {
                    let reply =
                        ProtocolError::new("bad_message", "send JSON text frames, not binary");
                    let _ = live.sender.send(&connection_id, &reply.frame()).await;
                }
                Message::Close(_) => return,
                // axum answers pings itself.
                Message::Ping(_) | Message::Pong(_) => {}
            }
        }
    };
    let server_closed = tokio::select! {
        _ = writer => true,
        _ = reader => false,
    };
    if server_closed {
        // The server sent its close (or the client is gone): read, and drop, what the client
        // still sends until its own close, for a moment, so it reads the close frame and its
        // reason rather than a reset of a socket that went with its frames unread.
        let _ = tokio::time::timeout(CLOSE_GRACE, async {
            while let Some(Ok(message)) = stream.next().await {
                if matches!(message, Message::Close(_)) {
                    return;
                }
            }
        })
        .await;
    }
    exec.disconnect();
    forget(&live, &connection_id).await;
}

/// Resolves once the server is stopping (never, if the signal's sender is gone).
async fn stopping(mut shutdown: watch::Receiver<bool>) {
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        if shutdown.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

fn close(code: u16, reason: impl Into<String>) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.into().into(),
    }))
}

async fn forget(live: &LiveSocket, connection_id: &str) {
    live.sender.unregister(connection_id);
    if let Err(error) = live.gateway.disconnect(connection_id).await {
        tracing::warn!(connection_id, %error, "forgetting a closed live-events connection failed");
    }
}
