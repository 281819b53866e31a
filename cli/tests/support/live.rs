//! A WebSocket client of `threadbox dev`'s live endpoint (`GET /v1/ws?token=…`), for the tests
//! that drive its frames: connect with a token, send a JSON frame, read the next one.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{client_async, WebSocketStream};

use super::DevServer;

/// Long enough for a first command to create the thread's sandbox.
pub const WAIT: Duration = Duration::from_secs(60);

pub type Socket = WebSocketStream<TcpStream>;

pub async fn connect(dev: &DevServer, token: &str) -> Socket {
    try_connect(dev, Some(token))
        .await
        .unwrap_or_else(|(status, body)| panic!("WebSocket refused: {status} {body}"))
}

/// Open `/v1/ws` with `token` (or none): the socket, or the refusal's status and JSON body.
pub async fn try_connect(dev: &DevServer, token: Option<&str>) -> Result<Socket, (u16, Value)> {
    let addr = dev.url.trim_start_matches("http://");
    let url = match token {
        Some(t) => format!("ws://{addr}/v1/ws?token={t}"),
        None => format!("ws://{addr}/v1/ws"),
    };
    let stream = TcpStream::connect(addr).await.unwrap();
    match client_async(url, stream).await {
        Ok((socket, _)) => Ok(socket),
        Err(tungstenite::Error::Http(response)) => {
            let status = response.status().as_u16();
            let body = response.into_body().unwrap_or_default();
            Err((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
        }
        Err(e) => panic!("WebSocket handshake failed: {e}"),
    }
}

/// A live-events token for `thread` minted offline by `threadbox token` over the server's data
/// directory (its secret), with the `exec` capability when `exec`.
pub fn mint_with_cli(data_dir: &Path, thread: &str, exec: bool) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_threadbox"));
    command
        .args(["token", "--thread", thread, "--ttl", "10m", "--data-dir"])
        .arg(data_dir)
        .env_remove("THREADBOX_TOKEN_SECRET");
    if exec {
        command.arg("--exec");
    }
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
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
