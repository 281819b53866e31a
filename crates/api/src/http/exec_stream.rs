//! `POST /v1/threads/{id}/exec` with `Accept: text/event-stream`: the command's output as it
//! happens, as server-sent events.
//!
//! - `stdout` / `stderr`: `{"text": "..."}`, or `{"base64": "..."}` for bytes that are not
//!   UTF-8. A character split between two reads is held back until it is whole, so text events
//!   never carry half a character.
//! - `exit`, last: `{"exit_code", "duration_ms", "timed_out", "truncated", "out_of_memory"}`.
//! - `error`, last, instead of `exit` when the command could not run: the API's error body
//!   (`code`, `message`) with the `status` a plain call would have answered and, for a limit,
//!   `retry_after` in seconds.
//!
//! The command runs in a task of its own: a client that disconnects does not stop it (it runs to
//! its end under its hold, its output dropped) unless the body asked `kill_on_disconnect`.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use tokio::sync::mpsc;

use super::error::ApiError;
use crate::wire::{self, ErrorFrame, ExitFrame, OutputFrame, Piece, Utf8Pieces};
use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{ExecRequest, ExecResult, OutputChunk, OutputStream};
use threadbox_core::usecases::{Threadbox, UseCaseError};

/// Output chunks in flight between the command and the socket: enough to ride out a slow
/// moment of the client's, few enough to bound memory (each chunk is at most 16 KiB).
const CHANNEL_CHUNKS: usize = 32;
/// A comment line this often, while the command is quiet. It keeps proxies from closing the
/// stream, and it is how a client that went away is noticed: the server learns of a closed
/// connection only when a write to it fails, so without it a silent command would run to its
/// end before `kill_on_disconnect` could act.
const KEEP_ALIVE: Duration = Duration::from_secs(1);

/// Start `request` in the thread's sandbox and answer its output as events.
pub(crate) fn exec_events(
    tb: Threadbox,
    thread_id: ThreadId,
    request: ExecRequest,
    kill_on_disconnect: bool,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (sink, output) = mpsc::channel(CHANNEL_CHUNKS);
    // The command's own task; `tb` acts for the caller, so its budgets go along.
    let command = tokio::spawn(async move { tb.exec_streaming(&thread_id, request, sink).await });
    let state = State {
        output: Some(output),
        command: Some(CommandTask {
            handle: command,
            kill_on_drop: kill_on_disconnect,
        }),
        stdout: Utf8Events::new(wire::STDOUT),
        stderr: Utf8Events::new(wire::STDERR),
        pending: Vec::new(),
    };
    let events = futures::stream::unfold(state, |mut state| async move {
        let event = state.next().await?;
        Some((Ok(event), state))
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

/// The running command; dropped with the response (the client went away), it is aborted if
/// asked, which kills the command's process tree.
struct CommandTask {
    handle: tokio::task::JoinHandle<Result<ExecResult, UseCaseError>>,
    kill_on_drop: bool,
}

impl Drop for CommandTask {
    fn drop(&mut self) {
        if self.kill_on_drop {
            self.handle.abort();
        }
    }
}

struct State {
    output: Option<mpsc::Receiver<OutputChunk>>,
    command: Option<CommandTask>,
    stdout: Utf8Events,
    stderr: Utf8Events,
    /// Events made and not yet sent (a chunk can make two: text, then bytes that are not).
    pending: Vec<Event>,
}

impl State {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if !self.pending.is_empty() {
                return Some(self.pending.remove(0));
            }
            if let Some(output) = &mut self.output {
                match output.recv().await {
                    Some(OutputChunk::Stdout(bytes)) => self.pending = self.stdout.push(&bytes),
                    Some(OutputChunk::Stderr(bytes)) => self.pending = self.stderr.push(&bytes),
                    // Every sender is gone: the command has ended.
                    None => {
                        self.output = None;
                        self.pending = self.stdout.finish();
                        self.pending.extend(self.stderr.finish());
                    }
                }
                continue;
            }
            let mut command = self.command.take()?;
            let ended = (&mut command.handle).await;
            command.kill_on_drop = false;
            return Some(match ended {
                Ok(Ok(result)) => json_event(wire::EXIT, &ExitFrame::from(&result)),
                Ok(Err(error)) => error_event(ApiError::from(error)),
                Err(join) => error_event(ApiError::new(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    format!("the command's task failed: {join}"),
                )),
            });
        }
    }
}

pub(super) fn error_event(error: ApiError) -> Event {
    json_event(wire::ERROR, &ErrorFrame::from(error))
}

pub(super) fn json_event<T: serde::Serialize>(name: &str, frame: &T) -> Event {
    Event::default().event(name).data(wire::frame_json(frame))
}

/// One output stream turned into events: text where the bytes are UTF-8, base64 where not
/// (each sequence that is not on its own), with a character cut at the end of a read held back
/// for the next one. With an offset (a background process's output), each event also says where
/// in the output its bytes start.
pub(super) struct Utf8Events {
    name: &'static str,
    pieces: Utf8Pieces,
    offset: Option<u64>,
    stream: Option<OutputStream>,
}

impl Utf8Events {
    pub(super) fn new(name: &'static str) -> Self {
        Self {
            name,
            pieces: Utf8Pieces::separate(),
            offset: None,
            stream: None,
        }
    }

    /// A process's output from `offset`, of one stream: each event says which.
    pub(super) fn of_stream(name: &'static str, offset: u64, stream: OutputStream) -> Self {
        Self {
            offset: Some(offset),
            stream: Some(stream),
            ..Self::new(name)
        }
    }

    /// The stream its events name, if they name one.
    pub(super) fn stream(&self) -> Option<OutputStream> {
        self.stream
    }

    /// With an offset: where the next bytes pushed are expected to start.
    pub(super) fn expects(&self) -> Option<u64> {
        self.offset.map(|o| o + self.pieces.held() as u64)
    }

    pub(super) fn push(&mut self, bytes: &[u8]) -> Vec<Event> {
        let pieces = self.pieces.push(bytes);
        self.events(pieces)
    }

    /// What is still held when the stream ends: a cut character that never got whole.
    pub(super) fn finish(&mut self) -> Vec<Event> {
        let pieces = self.pieces.finish();
        self.events(pieces)
    }

    fn events(&mut self, pieces: Vec<Piece>) -> Vec<Event> {
        pieces.iter().map(|piece| self.event(piece)).collect()
    }

    /// The piece's event, saying where its bytes start; then past them.
    fn event(&mut self, piece: &Piece) -> Event {
        let frame = OutputFrame {
            data: piece.payload(),
            offset: self.offset,
            stream: self.stream,
        };
        if let Some(offset) = &mut self.offset {
            *offset += piece.byte_len() as u64;
        }
        json_event(self.name, &frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Utf8Events {
        fn text(&mut self, text: &str) -> Event {
            self.event(&Piece::Text(text.to_owned()))
        }

        fn bytes(&mut self, bytes: &[u8]) -> Event {
            self.event(&Piece::Bytes(bytes.to_vec()))
        }
    }

    /// The events' wire form, `event:` and `data:` lines, to compare as text.
    fn wire(events: &[Event]) -> Vec<String> {
        events.iter().map(|e| format!("{e:?}")).collect()
    }

    #[test]
    fn text_passes_whole_and_a_cut_character_waits_for_its_end() {
        let mut stream = Utf8Events::new("stdout");
        let euro = "€".as_bytes(); // three bytes
        let first = stream.push(&[b"price: ".as_slice(), &euro[..1]].concat());
        assert_eq!(wire(&first), wire(&[stream.text("price: ")]));
        let second = stream.push(&[&euro[1..], b" 5\n".as_slice()].concat());
        assert_eq!(wire(&second), wire(&[stream.text("€ 5\n")]));
        assert!(stream.finish().is_empty());
    }

    #[test]
    fn bytes_that_are_not_utf8_go_as_base64_between_text() {
        let mut stream = Utf8Events::new("stderr");
        let events = stream.push(b"ok \xff\xfe then");
        assert_eq!(
            wire(&events),
            wire(&[
                stream.text("ok "),
                stream.bytes(b"\xff"),
                stream.bytes(b"\xfe"),
                stream.text(" then"),
            ])
        );
        // A cut character the stream never finishes comes out as bytes at the end.
        assert!(stream.push(&"€".as_bytes()[..2]).is_empty());
        assert_eq!(
            wire(&stream.finish()),
            wire(&[stream.bytes(&"€".as_bytes()[..2])])
        );
    }
}
