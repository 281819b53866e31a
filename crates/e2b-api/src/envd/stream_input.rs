//! envd's `process.Process/StreamInput`: a client stream whose first message names a process
//! (`start`), then input for it (`data`) and `keepalive`s, each written to the process as it
//! arrives; the answer, once the client ends its stream, is one empty message. The body is read
//! frame by frame, never held whole: one message is at most [`MAX_JSON_BODY`], and the stream as
//! long as the client keeps sending.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;

use threadbox_core::ports::{ProcessInfo, MAX_INPUT_BYTES};
use threadbox_e2b::wire::{end_stream_frame, message_frame};

use super::process::{selected, stream_response, Input, Selector};
use super::Reached;
use crate::error::ConnectError;
use crate::{header, MAX_JSON_BODY};

/// A Connect envelope's header: flags (bit 0 compressed, bit 1 end of stream), then the
/// payload's length, big-endian.
const ENVELOPE: usize = 5;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
enum Message {
    Start {
        #[serde(default)]
        process: Selector,
    },
    Data {
        input: Input,
    },
    Keepalive {},
}

/// `StreamInput`.
pub(super) async fn stream_input(Extension(at): Extension<Reached>, request: Request) -> Response {
    let connect = header(request.headers(), "content-type")
        .is_some_and(|t| t.starts_with("application/connect+json"));
    if !connect {
        return (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "envd's streaming calls take application/connect+json",
        )
            .into_response();
    }
    let answer = match feed(&at, request).await {
        Ok(()) => vec![message_frame(&json!({})), end_stream_frame(None)],
        Err(error) => vec![end_stream_frame(Some((error.code, &error.message)))],
    };
    let (tx, rx) = mpsc::channel(answer.len());
    for frame in answer {
        let _ = tx.try_send(frame);
    }
    drop(tx);
    stream_response(rx)
}

/// Read the client's messages and carry them out, until its stream ends.
async fn feed(at: &Reached, request: Request) -> Result<(), ConnectError> {
    let mut body = request.into_body().into_data_stream();
    let mut pending: Vec<u8> = Vec::new();
    let mut process: Option<ProcessInfo> = None;
    loop {
        while let Some(message) = next_message(&mut pending)? {
            carry_out(at, &mut process, message).await?;
        }
        match body.next().await {
            Some(Ok(chunk)) => pending.extend_from_slice(&chunk),
            Some(Err(e)) => {
                return Err(ConnectError::new(
                    "canceled",
                    format!("the input stream broke: {e}"),
                ))
            }
            None => break,
        }
    }
    if !pending.is_empty() {
        return Err(ConnectError::invalid(
            "the input stream ended inside a message",
        ));
    }
    if process.is_none() {
        return Err(ConnectError::invalid(
            "the input stream named no process (its first message is `start`)",
        ));
    }
    Ok(())
}

/// The next whole message at the front of `pending`, taken off it; `None` until one is there.
fn next_message(pending: &mut Vec<u8>) -> Result<Option<Message>, ConnectError> {
    if pending.len() < ENVELOPE {
        return Ok(None);
    }
    let flags = pending[0];
    let length = u32::from_be_bytes([pending[1], pending[2], pending[3], pending[4]]) as usize;
    if flags & 0x01 != 0 {
        return Err(ConnectError::new(
            "unimplemented",
            "compressed messages are not supported",
        ));
    }
    if length > MAX_JSON_BODY {
        return Err(ConnectError::new(
            "resource_exhausted",
            format!("a message of {length} bytes; at most {MAX_JSON_BODY}"),
        ));
    }
    if pending.len() < ENVELOPE + length {
        return Ok(None);
    }
    let message: Message = serde_json::from_slice(&pending[ENVELOPE..ENVELOPE + length])
        .map_err(|e| ConnectError::invalid(format!("invalid message: {e}")))?;
    pending.drain(..ENVELOPE + length);
    Ok(Some(message))
}

async fn carry_out(
    at: &Reached,
    process: &mut Option<ProcessInfo>,
    message: Message,
) -> Result<(), ConnectError> {
    match (message, process.as_ref()) {
        (Message::Start { process: selector }, None) => {
            *process = Some(selected(at, &selector).await?);
        }
        (Message::Start { .. }, Some(_)) => {
            return Err(ConnectError::invalid("the input stream started twice"));
        }
        (Message::Data { .. } | Message::Keepalive {}, None) => {
            return Err(ConnectError::invalid(
                "the input stream's first message is `start`, naming the process",
            ));
        }
        (Message::Data { input }, Some(info)) => {
            let encoded = input
                .stdin
                .or(input.pty)
                .ok_or_else(|| ConnectError::invalid("input holds neither stdin nor pty"))?;
            let data = BASE64
                .decode(encoded)
                .map_err(|e| ConnectError::invalid(format!("input is not base64: {e}")))?;
            for piece in data.chunks(MAX_INPUT_BYTES) {
                at.tb
                    .write_process_input(&at.thread, &info.id, piece)
                    .await?;
            }
        }
        (Message::Keepalive {}, Some(_)) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut frame = vec![flags];
        frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(payload);
        frame
    }

    #[test]
    fn messages_are_taken_whole_one_at_a_time() {
        let start = envelope(0, br#"{"start": {"process": {"pid": 7}}}"#);
        let keepalive = envelope(0, br#"{"keepalive": {}}"#);
        let mut pending = start[..3].to_vec();
        assert!(
            next_message(&mut pending).unwrap().is_none(),
            "half a header"
        );
        pending.extend_from_slice(&start[3..start.len() - 1]);
        assert!(
            next_message(&mut pending).unwrap().is_none(),
            "half a message"
        );
        pending.extend_from_slice(&start[start.len() - 1..]);
        pending.extend_from_slice(&keepalive);
        assert!(matches!(
            next_message(&mut pending).unwrap(),
            Some(Message::Start { process }) if process.pid == Some(7)
        ));
        assert!(matches!(
            next_message(&mut pending).unwrap(),
            Some(Message::Keepalive {})
        ));
        assert!(pending.is_empty());
    }

    #[test]
    fn compressed_oversized_and_unknown_messages_are_refused() {
        let mut compressed = envelope(1, b"{}");
        assert_eq!(
            next_message(&mut compressed).err().unwrap().code,
            "unimplemented"
        );
        let mut huge = vec![0u8];
        huge.extend_from_slice(&((MAX_JSON_BODY + 1) as u32).to_be_bytes());
        assert_eq!(
            next_message(&mut huge).err().unwrap().code,
            "resource_exhausted"
        );
        let mut unknown = envelope(0, br#"{"close": {}}"#);
        assert_eq!(
            next_message(&mut unknown).err().unwrap().code,
            "invalid_argument"
        );
    }
}
