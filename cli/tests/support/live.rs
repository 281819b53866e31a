//! A WebSocket client of `threadbox dev`'s live endpoint (`GET /v1/ws?token=…`), for the tests
//! that drive its frames: connect with a token, send a JSON frame, read the next one.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{client_async, WebSocketStream};

use super::DevServer;

/// Long enough for a first command to create the thread's sandbox.
pub const WAIT: Duration = Duration::from_secs(60);

pub type Socket = WebSocketStream<TcpStream>;

pub async fn connect(dev: &DevServer, token: &str) -> Socket {
    let addr = dev.url.trim_start_matches("http://");
    let stream = TcpStream::connect(addr).await.unwrap();
    let (socket, _) = client_async(format!("ws://{addr}/v1/ws?token={token}"), stream)
        .await
        .unwrap_or_else(|e| panic!("WebSocket handshake failed: {e}"));
    socket
}

pub async fn send(socket: &mut Socket, message: Value) {
    socket
        .send(Message::Text(message.to_string().into()))
        .await
        .unwrap();
}

/// The next JSON frame from the server (pings and pongs skipped).
pub async fn next(socket: &mut Socket, dev: &DevServer) -> Value {
    loop {
        let message = tokio::time::timeout(WAIT, socket.next())
            .await
            .unwrap_or_else(|_| panic!("no frame within {WAIT:?}; stderr:\n{}", dev.stderr()))
            .expect("the server closed the socket")
            .unwrap();
        match message {
            Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected frame {other:?}"),
        }
    }
}
