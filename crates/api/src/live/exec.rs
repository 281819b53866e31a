//! `exec` frames: a command run in a thread's sandbox for a live-events connection, its output
//! streamed back as frames while it runs (with the exec body the HTTP API shares).
//!
//! [`ConnectionExec`] belongs to one connection and answers its `exec` frames:
//! - only a token with the `exec` capability, for a thread in its scope, runs anything
//!   (`exec_not_allowed`, `thread_not_allowed`, `token_expired` otherwise; nothing runs);
//! - at most [`MAX_EXECS_PER_CONNECTION`] commands at once (`too_many_commands` past it), each
//!   under a `request_id` of its own (`duplicate_request_id` while one of that name runs);
//! - output goes out as `exec_output` frames (text, or base64 for bytes that are not UTF-8, a
//!   character cut between two reads held back until it is whole, as the HTTP exec's events do),
//!   each under [`MAX_EXEC_FRAME`] bytes; then `exec_exit`, or an error frame naming the request;
//! - memory is bounded: output waits in a channel of 32 chunks, and frames in the connection's
//!   exec lane (a channel of [`EXEC_LANE_FRAMES`] frames the socket's writer drains). A client
//!   that leaves the lane full for [`SLOW_READER`] (30 s, the HTTP stream's policy) is closed
//!   as gone;
//! - when the connection closes, [`ConnectionExec::disconnect`] kills the commands whose frame
//!   asked `kill_on_disconnect`; the others run to their end under their hold, output dropped.
//!
//! The frames share the socket with lifecycle events but not their channel: a command's output
//! can fill its own lane without the connection counting as stalled for its events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinHandle};

use super::limits::{FrameLimiter, Refusal};
use super::protocol::{request_error, ExecFrame, ProtocolError, ServerFrame, MAX_EXEC_FRAME};
use super::terminal_queue::TerminalQueue;
use super::token::SubscriptionToken;
use crate::http::ApiError;
use crate::wire::{ExitFrame, Piece, Utf8Pieces};
use threadbox_core::domain::ThreadId;
use threadbox_core::ports::{ConnectionSender, ExecResult, Frame, OutputChunk, SLOW_READER};
use threadbox_core::usecases::{Threadbox, UseCaseError};

/// Commands one connection may run at once.
pub const MAX_EXECS_PER_CONNECTION: usize = 4;
/// Frames of command output queued for one connection's socket.
pub const EXEC_LANE_FRAMES: usize = 64;
/// Output chunks in flight between a command and its frames (each chunk at most 16 KiB).
const CHANNEL_CHUNKS: usize = 32;

/// One connection's commands. Dropping it is disconnecting it.
pub struct ConnectionExec {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) tb: Threadbox,
    sender: Arc<dyn ConnectionSender>,
    pub(super) connection_id: String,
    grant: SubscriptionToken,
    lane: mpsc::Sender<Frame>,
    running: Mutex<Running>,
    pub(super) limiter: Arc<FrameLimiter>,
}

#[derive(Default)]
pub(super) struct Running {
    pub(super) closed: bool,
    /// Commands, and terminal attachments (`pty`), by request id.
    pub(super) commands: HashMap<String, Command>,
    /// Terminal input and resizes waiting, by thread and session; each has one writer.
    pub(super) terminals: HashMap<(ThreadId, String), TerminalQueue>,
}

pub(super) struct Command {
    pub(super) abort: AbortHandle,
    pub(super) kill_on_disconnect: bool,
}

impl ConnectionExec {
    /// The commands of connection `connection_id`, opened with `grant`. The receiver is its exec
    /// lane: the socket's writer sends what it yields, beside the connection's other frames.
    /// `sender` is used only to close a connection that stopped reading. What it runs acts for
    /// `grant`'s caller (the key that minted the token), whatever `tb` acted for.
    /// `limiter` is the gateway's ([`LiveGateway::frame_limiter`](super::LiveGateway)): the
    /// frames of every connection count in one place.
    pub fn new(
        tb: Threadbox,
        sender: Arc<dyn ConnectionSender>,
        connection_id: &str,
        grant: SubscriptionToken,
        limiter: Arc<FrameLimiter>,
    ) -> (Self, mpsc::Receiver<Frame>) {
        let (lane, frames) = mpsc::channel(EXEC_LANE_FRAMES);
        let inner = Inner {
            // Everything the connection runs is charged to the key that minted its token.
            tb: tb.for_caller(grant.caller.clone()),
            sender,
            connection_id: connection_id.to_owned(),
            grant,
            lane,
            running: Mutex::default(),
            limiter,
        };
        (
            Self {
                inner: Arc::new(inner),
            },
            frames,
        )
    }

    /// Start the command `frame` asks for, or say why not (an error frame naming the request;
    /// nothing ran). Returns at once: the command's frames follow on the exec lane.
    pub fn start(&self, frame: ExecFrame) -> Result<(), Refusal> {
        let inner = &self.inner;
        let mut running = inner.admit(&frame.request_id, &frame.thread_id, true)?;
        inner
            .limiter
            .thread_frame(&inner.connection_id, &frame.thread_id)
            .map_err(|r| r.naming(&frame.request_id, &frame.thread_id))?;
        let ExecFrame {
            request_id,
            thread_id,
            request,
            kill_on_disconnect,
        } = frame;
        let (sink, output) = mpsc::channel(CHANNEL_CHUNKS);
        let tb = inner.tb.clone();
        let thread = thread_id.clone();
        let command = tokio::spawn(async move { tb.exec_streaming(&thread, request, sink).await });
        running.commands.insert(
            request_id.clone(),
            Command {
                abort: command.abort_handle(),
                kill_on_disconnect,
            },
        );
        tracing::debug!(
            connection_id = %inner.connection_id,
            request_id,
            %thread_id,
            kill_on_disconnect,
            "live-events exec started"
        );
        // The entry is in before the pump can remove it: the pump takes the same lock.
        tokio::spawn(pump(inner.clone(), request_id, thread_id, output, command));
        Ok(())
    }

    /// Commands running now.
    pub fn running(&self) -> usize {
        self.inner.lock().commands.len()
    }

    /// The connection closed: start nothing more, and kill the commands that asked for it.
    /// Returns how many were killed. Safe to call more than once.
    pub fn disconnect(&self) -> usize {
        let mut running = self.inner.lock();
        running.closed = true;
        let mut killed = 0;
        for command in running.commands.values_mut() {
            if std::mem::take(&mut command.kill_on_disconnect) {
                command.abort.abort();
                killed += 1;
            }
        }
        if killed > 0 {
            tracing::debug!(
                connection_id = %self.inner.connection_id,
                killed,
                "live-events connection closed; killed its kill_on_disconnect commands"
            );
        }
        killed
    }
}

impl Drop for ConnectionExec {
    fn drop(&mut self) {
        self.disconnect();
    }
}

impl Inner {
    /// Whether this connection may run something for `request_id` in `thread_id` now; with
    /// `new_request`, also that it has room for one more and the name is free. The lock is
    /// returned held, so the caller's insert cannot race another frame's check.
    pub(super) fn admit(
        &self,
        request_id: &str,
        thread_id: &ThreadId,
        new_request: bool,
    ) -> Result<std::sync::MutexGuard<'_, Running>, ProtocolError> {
        let refuse = |code: &'static str, message: String| {
            Err(ProtocolError::new(code, message)
                .for_request(request_id)
                .about(thread_id.as_str()))
        };
        if !self.grant.exec {
            return refuse(
                "exec_not_allowed",
                "this token may watch threads but not run commands; mint one that may \
                 (POST /v1/tokens with \"exec\": true, or threadbox token --exec)"
                    .into(),
            );
        }
        if self.grant.expires_at <= self.tb.clock.now() {
            return refuse(
                "token_expired",
                "the connection's token has expired; reconnect with a new one".into(),
            );
        }
        if let Err(error) = self.grant.check_thread(thread_id) {
            return refuse(error.code(), error.to_string());
        }
        let running = self.lock();
        if running.closed {
            return refuse("not_connected", "this connection is closing".into());
        }
        if !new_request {
            return Ok(running);
        }
        if running.commands.contains_key(request_id) {
            return refuse(
                "duplicate_request_id",
                format!(
                    "a command named {request_id:?} is still running on this connection; pick \
                     another request_id"
                ),
            );
        }
        if running.commands.len() >= MAX_EXECS_PER_CONNECTION {
            return refuse(
                "too_many_commands",
                format!(
                    "a connection may run at most {MAX_EXECS_PER_CONNECTION} commands and \
                     terminal attachments at once; wait for one to end"
                ),
            );
        }
        Ok(running)
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Running> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue `frame` for the socket; false when the client is gone or stopped reading (then it
    /// is closed, and nothing more should be sent for this command).
    pub(super) async fn send(&self, frame: Frame) -> bool {
        match tokio::time::timeout(SLOW_READER, self.lane.send(frame)).await {
            Ok(Ok(())) => true,
            Ok(Err(_)) => false,
            Err(_) => {
                tracing::warn!(
                    connection_id = %self.connection_id,
                    "live-events client left command output unread for {SLOW_READER:?}; \
                     closing it"
                );
                let _ = self.sender.close(&self.connection_id).await;
                false
            }
        }
    }
}

/// Turn one command's output into frames as it comes, then its end.
async fn pump(
    inner: Arc<Inner>,
    request_id: String,
    thread_id: ThreadId,
    mut output: mpsc::Receiver<OutputChunk>,
    command: JoinHandle<Result<ExecResult, UseCaseError>>,
) {
    let mut stdout = Utf8Pieces::default();
    let mut stderr = Utf8Pieces::default();
    let mut reading = true;
    'output: while let Some(chunk) = output.recv().await {
        let (stream, pieces) = match chunk {
            OutputChunk::Stdout(bytes) => ("stdout", stdout.push(&bytes)),
            OutputChunk::Stderr(bytes) => ("stderr", stderr.push(&bytes)),
        };
        for frame in output_frames(&request_id, stream, pieces) {
            if !inner.send(frame).await {
                reading = false;
                break 'output;
            }
        }
    }
    // A client that is gone reads nothing more: the command's further output is dropped.
    drop(output);
    if reading {
        let mut rest = output_frames(&request_id, "stdout", stdout.finish());
        rest.extend(output_frames(&request_id, "stderr", stderr.finish()));
        for frame in rest {
            if !inner.send(frame).await {
                reading = false;
                break;
            }
        }
    }
    let ended = command.await;
    if reading {
        inner.send(end_frame(&request_id, &thread_id, ended)).await;
    }
    inner.lock().commands.remove(&request_id);
}

fn end_frame(
    request_id: &str,
    thread_id: &ThreadId,
    ended: Result<Result<ExecResult, UseCaseError>, tokio::task::JoinError>,
) -> Frame {
    let error = match ended {
        Ok(Ok(result)) => {
            return ServerFrame::ExecExit {
                request_id,
                exit: ExitFrame::from(&result),
            }
            .to_frame()
        }
        Ok(Err(error)) => ApiError::from(error),
        Err(join) if join.is_cancelled() => ApiError::new(
            axum::http::StatusCode::GONE,
            "command_killed",
            "the command was killed when its connection closed",
        ),
        Err(join) => ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("the command's task failed: {join}"),
        ),
    };
    request_error(request_id, thread_id, error)
}

/// `pieces` of `stream` as `exec_output` frames, each at most [`MAX_EXEC_FRAME`] bytes: a piece
/// whose frame would be bigger is split in two (text at a character boundary) until it fits.
fn output_frames(request_id: &str, stream: &str, pieces: Vec<Piece>) -> Vec<Frame> {
    let mut frames = Vec::new();
    for piece in pieces {
        push_frames(request_id, stream, &piece, &mut frames);
    }
    frames
}

fn push_frames(request_id: &str, stream: &str, piece: &Piece, frames: &mut Vec<Frame>) {
    let frame = ServerFrame::ExecOutput {
        request_id,
        stream,
        data: piece.payload(),
    }
    .to_frame();
    if frame.len() <= MAX_EXEC_FRAME {
        frames.push(frame);
        return;
    }
    let (first, second) = match piece {
        Piece::Text(text) => {
            let mut cut = text.len() / 2;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            if cut == 0 {
                // One character always fits; this cannot happen with a sane request_id.
                frames.push(frame);
                return;
            }
            (
                Piece::Text(text[..cut].to_owned()),
                Piece::Text(text[cut..].to_owned()),
            )
        }
        Piece::Bytes(bytes) => {
            let cut = bytes.len() / 2;
            (
                Piece::Bytes(bytes[..cut].to_vec()),
                Piece::Bytes(bytes[cut..].to_vec()),
            )
        }
    };
    push_frames(request_id, stream, &first, frames);
    push_frames(request_id, stream, &second, frames);
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn text(s: &str) -> Piece {
        Piece::Text(s.to_owned())
    }

    #[test]
    fn text_passes_whole_and_a_cut_character_waits_for_its_end() {
        let mut stream = Utf8Pieces::default();
        let euro = "€".as_bytes();
        let first = stream.push(&[b"price: ".as_slice(), &euro[..1]].concat());
        assert_eq!(first, vec![text("price: ")]);
        let second = stream.push(&[&euro[1..], b" 5\n".as_slice()].concat());
        assert_eq!(second, vec![text("€ 5\n")]);
        assert!(stream.finish().is_empty());
    }

    #[test]
    fn bytes_that_are_not_utf8_go_as_bytes_between_text() {
        let mut stream = Utf8Pieces::default();
        assert_eq!(
            stream.push(b"ok \xff\xfe then"),
            vec![
                text("ok "),
                Piece::Bytes(b"\xff\xfe".to_vec()),
                text(" then")
            ]
        );
        assert!(stream.push(&"€".as_bytes()[..2]).is_empty());
        assert_eq!(
            stream.finish(),
            vec![Piece::Bytes("€".as_bytes()[..2].to_vec())]
        );
    }

    /// The output the frames carry, decoded and joined, and the largest frame.
    fn decode(frames: &[Frame]) -> (Vec<u8>, usize) {
        let mut out = Vec::new();
        for frame in frames {
            let v: Value = serde_json::from_str(frame).unwrap();
            assert_eq!(v["type"], "exec_output");
            assert_eq!(v["request_id"], "r1");
            assert_eq!(v["stream"], "stdout");
            match (v["text"].as_str(), v["base64"].as_str()) {
                (Some(t), None) => out.extend_from_slice(t.as_bytes()),
                (None, Some(b)) => {
                    use base64::Engine as _;
                    out.extend(base64::engine::general_purpose::STANDARD.decode(b).unwrap())
                }
                other => panic!("{other:?}"),
            }
        }
        (out, frames.iter().map(|f| f.len()).max().unwrap_or(0))
    }

    #[test]
    fn big_pieces_are_split_to_fit_a_frame() {
        // Control characters grow six-fold when escaped in JSON: 16 KiB of them is 96 KiB.
        let nasty: String = "\u{1}é€\"".repeat(8 * 1024);
        let frames = output_frames("r1", "stdout", vec![text(&nasty)]);
        let (out, largest) = decode(&frames);
        assert_eq!(out, nasty.as_bytes());
        assert!(largest <= MAX_EXEC_FRAME, "{largest}");
        assert!(frames.len() > 2, "{}", frames.len());

        let bytes: Vec<u8> = (0..64 * 1024).map(|i| (i % 7) as u8 | 0x80).collect();
        let frames = output_frames("r1", "stdout", vec![Piece::Bytes(bytes.clone())]);
        let (out, largest) = decode(&frames);
        assert_eq!(out, bytes);
        assert!(largest <= MAX_EXEC_FRAME, "{largest}");

        let small = output_frames("r1", "stdout", vec![text("hi\n")]);
        assert_eq!(
            serde_json::from_str::<Value>(&small[0]).unwrap(),
            serde_json::json!({"type":"exec_output","request_id":"r1","stream":"stdout","text":"hi\n"})
        );
    }
}
