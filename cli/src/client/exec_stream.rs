//! `POST /v1/threads/{id}/exec` with `Accept: text/event-stream`: the command's output as it
//! happens (the server's side is `crates/api/src/http/exec_stream.rs`). A small reader of
//! server-sent events over the response's chunks: `event:` and `data:` lines, a blank line ends
//! an event, `:` lines are keep-alives.

use std::time::Duration;

use base64::Engine as _;
use reqwest::Method;
use serde::Deserialize;
use threadbox_core::ports::{ExecResult, OutputChunk};

use super::{Client, ClientError, ExecSpec, REQUEST_TIMEOUT};

/// What a streamed exec hands over, in order: output, then the end.
#[derive(Debug)]
pub enum ExecUpdate {
    Output(OutputChunk),
    /// The command ended; its `stdout` and `stderr` are empty (they came as output).
    Exit(ExecResult),
}

/// A command's output as the server sends it.
pub struct ExecStream {
    response: reqwest::Response,
    url: String,
    reader: EventReader,
    queued: std::collections::VecDeque<SseEvent>,
}

impl Client {
    /// Start a command with its output streamed; read it with [`ExecStream::next`]. A refusal
    /// before anything runs (a bad request, an unknown key) is an error here already.
    pub async fn exec_streaming(
        &self,
        thread_id: &str,
        spec: &ExecSpec,
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
        Ok(ExecStream {
            response,
            url: shown,
            reader: EventReader::default(),
            queued: Default::default(),
        })
    }
}

impl ExecStream {
    /// The next piece of output, or the command's end. An `error` event (the command could not
    /// run) is the API's error, as a plain call would have answered it.
    pub async fn next(&mut self) -> Result<ExecUpdate, ClientError> {
        loop {
            while let Some(event) = self.queued.pop_front() {
                if let Some(update) = self.update(event)? {
                    return Ok(update);
                }
            }
            let chunk = self
                .response
                .chunk()
                .await
                .map_err(|e| ClientError::unreachable(&self.url, &e))?;
            match chunk {
                Some(chunk) => self.queued.extend(self.reader.push(&chunk)),
                None => {
                    return Err(self.protocol(
                        "the stream ended before the command's exit (the connection was cut?)"
                            .into(),
                    ))
                }
            }
        }
    }

    fn update(&self, event: SseEvent) -> Result<Option<ExecUpdate>, ClientError> {
        Ok(Some(match event.name.as_str() {
            "stdout" => ExecUpdate::Output(OutputChunk::Stdout(
                output_bytes(&event.data).map_err(|e| self.protocol(e))?,
            )),
            "stderr" => ExecUpdate::Output(OutputChunk::Stderr(
                output_bytes(&event.data).map_err(|e| self.protocol(e))?,
            )),
            "exit" => {
                let exit: Exit = serde_json::from_str(&event.data)
                    .map_err(|e| self.protocol(format!("a bad exit event ({e})")))?;
                ExecUpdate::Exit(exit.into_result())
            }
            "error" => {
                let error: StreamError = serde_json::from_str(&event.data)
                    .map_err(|e| self.protocol(format!("a bad error event ({e})")))?;
                return Err(ClientError::Api {
                    status: error.status,
                    code: error.code,
                    message: error.message,
                    retry_after: error.retry_after,
                });
            }
            // Events a newer server adds are not this client's to act on.
            _ => return Ok(None),
        }))
    }

    fn protocol(&self, detail: String) -> ClientError {
        ClientError::Protocol {
            url: self.url.clone(),
            detail,
        }
    }
}

/// `{"text": ...}` or `{"base64": ...}`.
fn output_bytes(data: &str) -> Result<Vec<u8>, String> {
    #[derive(Deserialize)]
    struct Output {
        text: Option<String>,
        base64: Option<String>,
    }
    let output: Output =
        serde_json::from_str(data).map_err(|e| format!("a bad output event ({e})"))?;
    match (output.text, output.base64) {
        (Some(text), None) => Ok(text.into_bytes()),
        (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|e| format!("an output event with bad base64 ({e})")),
        _ => Err("an output event with neither text nor base64".into()),
    }
}

#[derive(Deserialize)]
struct Exit {
    exit_code: Option<i32>,
    duration_ms: u64,
    timed_out: bool,
    truncated: bool,
    out_of_memory: bool,
}

impl Exit {
    fn into_result(self) -> ExecResult {
        ExecResult {
            exit_code: self.exit_code,
            stdout: String::new(),
            stderr: String::new(),
            duration_ms: self.duration_ms,
            timed_out: self.timed_out,
            truncated: self.truncated,
            out_of_memory: self.out_of_memory,
        }
    }
}

#[derive(Deserialize)]
struct StreamError {
    status: u16,
    code: String,
    message: String,
    retry_after: Option<u64>,
}

/// One server-sent event.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SseEvent {
    pub(super) name: String,
    pub(super) data: String,
}

/// Server-sent events out of a byte stream cut anywhere.
#[derive(Default)]
pub(super) struct EventReader {
    /// Bytes after the last complete line.
    partial: Vec<u8>,
    name: String,
    data: Vec<String>,
}

impl EventReader {
    pub(super) fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.partial.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() || !self.name.is_empty() {
                    events.push(SseEvent {
                        name: std::mem::take(&mut self.name),
                        data: std::mem::take(&mut self.data).join("\n"),
                    });
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => self.name = value.to_owned(),
                "data" => self.data.push(value.to_owned()),
                _ => {}
            }
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_read_across_any_cut_and_keep_alives_skipped() {
        let wire = b": keep-alive\n\nevent: stdout\ndata: {\"text\":\"hi\\n\"}\n\nevent:exit\r\ndata:{}\r\n\r\n";
        for cut in 0..wire.len() {
            let mut reader = EventReader::default();
            let mut events = reader.push(&wire[..cut]);
            events.extend(reader.push(&wire[cut..]));
            assert_eq!(
                events,
                vec![
                    SseEvent {
                        name: "stdout".into(),
                        data: r#"{"text":"hi\n"}"#.into()
                    },
                    SseEvent {
                        name: "exit".into(),
                        data: "{}".into()
                    },
                ],
                "cut at {cut}"
            );
        }
    }

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
        let spec = ExecSpec {
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

    #[test]
    fn output_is_text_or_base64() {
        assert_eq!(output_bytes(r#"{"text":"é"}"#).unwrap(), "é".as_bytes());
        assert_eq!(output_bytes(r#"{"base64":"/w=="}"#).unwrap(), vec![0xff]);
        assert!(output_bytes(r#"{}"#).is_err());
        assert!(output_bytes(r#"{"base64":"!!"}"#).is_err());
    }
}
