//! `POST /v1/threads/{id}/exec` with `Accept: text/event-stream`: the command's output as it
//! happens (the server's side is `shared/src/http/exec_stream.rs`). A small reader of
//! server-sent events over the response's chunks: `event:` and `data:` lines, a blank line ends
//! an event, `:` lines are keep-alives.

use std::time::Duration;

use base64::Engine as _;
use reqwest::header::ACCEPT;
use reqwest::Method;
use serde::Deserialize;
use threadbox_shared::ports::{ExecResult, OutputChunk};

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
        let shown = url.to_string();
        let command = spec.timeout_ms.map_or(
            threadbox_shared::ports::DEFAULT_EXEC_TIMEOUT,
            Duration::from_millis,
        );
        let response = self
            .request(Method::POST, url)
            .header(ACCEPT, "text/event-stream")
            .json(spec)
            .timeout(command + REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|e| ClientError::unreachable(&shown, &e))?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            let body = response
                .bytes()
                .await
                .map_err(|e| ClientError::unreachable(&shown, &e))?;
            return Err(ClientError::from_response(
                status.as_u16(),
                retry_after,
                &body,
            ));
        }
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

    #[test]
    fn output_is_text_or_base64() {
        assert_eq!(output_bytes(r#"{"text":"é"}"#).unwrap(), "é".as_bytes());
        assert_eq!(output_bytes(r#"{"base64":"/w=="}"#).unwrap(), vec![0xff]);
        assert!(output_bytes(r#"{}"#).is_err());
        assert!(output_bytes(r#"{"base64":"!!"}"#).is_err());
    }
}
