//! `POST /v1/threads/{id}/exec` with `Accept: text/event-stream`: the command's output as it
//! happens (the server's side is `crates/api/src/http/exec_stream.rs`), read by the client's one
//! event reader (`events`).

use std::time::Duration;

use reqwest::Method;
use threadbox_api::wire::{self, ExecBody, ExitFrame};
use threadbox_core::ports::{ExecResult, OutputChunk};

use super::events::{output_bytes, parse, EventStream, Events};
use super::{Client, ClientError, REQUEST_TIMEOUT};

/// What a streamed exec hands over, in order: output, then the end.
#[derive(Debug)]
pub enum ExecUpdate {
    Output(OutputChunk),
    /// The command ended; its `stdout` and `stderr` are empty (they came as output).
    Exit(ExecResult),
}

/// A streamed exec's events: `stdout` and `stderr`, then `exit`.
pub struct ExecEvents;

impl Events for ExecEvents {
    type Update = ExecUpdate;
    const END: &'static str = "the command's exit";

    fn update(name: &str, data: &str) -> Result<Option<ExecUpdate>, String> {
        Ok(Some(match name {
            wire::STDOUT => ExecUpdate::Output(OutputChunk::Stdout(output_bytes(name, data)?)),
            wire::STDERR => ExecUpdate::Output(OutputChunk::Stderr(output_bytes(name, data)?)),
            wire::EXIT => ExecUpdate::Exit(parse::<ExitFrame>(name, data)?.into_result()),
            _ => return Ok(None),
        }))
    }
}

/// A command's output as the server sends it; read it with [`EventStream::next`].
pub type ExecStream = EventStream<ExecEvents>;

impl Client {
    /// Start a command with its output streamed; read it with [`EventStream::next`]. A refusal
    /// before anything runs (a bad request, an unknown key) is an error here already.
    pub async fn exec_streaming(
        &self,
        thread_id: &str,
        spec: &ExecBody,
    ) -> Result<ExecStream, ClientError> {
        let url = self.url(Some(thread_id), Some("exec"));
        let command = spec.timeout_ms.map_or(
            threadbox_core::ports::DEFAULT_EXEC_TIMEOUT,
            Duration::from_millis,
        );
        let (response, shown) = self
            .open_stream(Method::POST, url, |request| {
                request.json(spec).timeout(command + REQUEST_TIMEOUT)
            })
            .await?;
        Ok(EventStream::new(response, shown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deployed stack's HTTP API answers a streaming exec 406 `stream_elsewhere`, naming the
    /// stream URL: the client sends it there, with its key, and streams from it; a stream URL on
    /// another host over plain http is not followed (the key would go in the clear).
    #[tokio::test]
    async fn a_stream_elsewhere_answer_is_followed_to_the_stream_url() {
        use axum::http::{HeaderMap, StatusCode};
        use axum::response::IntoResponse;
        use axum::routing::post;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let elsewhere = std::sync::Arc::new(std::sync::Mutex::new(format!(
            "http://127.0.0.1:{port}/stream/v1/threads/t1/exec"
        )));
        let named = elsewhere.clone();
        let app = axum::Router::new()
            .route(
                "/v1/threads/t1/exec",
                post(move || {
                    let named = named.lock().unwrap().clone();
                    async move {
                        let body = serde_json::json!({"error": {
                            "code": "stream_elsewhere",
                            "message": "the gateway cannot stream",
                            "stream_url": named,
                        }});
                        (StatusCode::NOT_ACCEPTABLE, axum::Json(body))
                    }
                }),
            )
            .route(
                "/stream/v1/threads/t1/exec",
                post(|headers: HeaderMap, body: String| async move {
                    let authorized = headers["authorization"] == "Bearer key-0123456789";
                    let streams = headers["accept"] == "text/event-stream";
                    if !(authorized && streams && body.contains("echo hi")) {
                        return StatusCode::BAD_REQUEST.into_response();
                    }
                    (
                        [("content-type", "text/event-stream")],
                        "event: stdout\ndata: {\"text\":\"hi\\n\"}\n\nevent: exit\ndata: \
                         {\"exit_code\":0,\"duration_ms\":1,\"timed_out\":false,\
                         \"truncated\":false,\"out_of_memory\":false}\n\n",
                    )
                        .into_response()
                }),
            );
        let server = tokio::spawn(async move { axum::serve(listener, app).await });

        let client =
            Client::new(&format!("http://127.0.0.1:{port}"), Some("key-0123456789")).unwrap();
        let spec = ExecBody {
            cmd: Some("echo hi".into()),
            ..Default::default()
        };
        let mut stream = client.exec_streaming("t1", &spec).await.unwrap();
        match stream.next().await.unwrap() {
            ExecUpdate::Output(OutputChunk::Stdout(bytes)) => assert_eq!(bytes, b"hi\n"),
            other => panic!("{other:?}"),
        }
        match stream.next().await.unwrap() {
            ExecUpdate::Exit(result) => assert_eq!(result.exit_code, Some(0)),
            other => panic!("{other:?}"),
        }

        // Another host over plain http: the 406 is the answer, not followed.
        *elsewhere.lock().unwrap() = "http://203.0.113.9/v1/threads/t1/exec".into();
        let refused = client.exec_streaming("t1", &spec).await.err().unwrap();
        assert!(
            matches!(&refused, ClientError::Api { status: 406, code, .. } if code == "stream_elsewhere"),
            "{refused:?}"
        );
        server.abort();
    }
}
