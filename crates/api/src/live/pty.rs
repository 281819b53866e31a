//! `pty` frames: terminal sessions over a live-events connection.
//!
//! A session is a background process on a PTY (`usecases::processes`), so it belongs to the
//! sandbox, not to the connection: closing the socket, or `pty_detach`, ends the attachment and
//! the session runs on, and a later connection re-attaches with the session id and the offset it
//! had reached (`pty_output` frames carry it). While attached, output is followed as the
//! terminal writes it and sent as `pty_output` frames; `pty_exit` closes the attachment when the
//! session ends. Input and resizes are queued per connection and session and written by one
//! task at a time, in order, what arrives meanwhile coalesced into the next write, within the
//! frame limits of `limits` (so a flood of `pty_input` frames costs one write at a time, not a
//! task each). Attachments count against the connection's commands
//! ([`MAX_EXECS_PER_CONNECTION`](super::MAX_EXECS_PER_CONNECTION)), under the same admission as
//! `exec` frames: a token with the `exec` capability, for a thread in its scope.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::exec::{Command, ConnectionExec, Inner};
use super::limits::{InFlight, Refusal};
use super::protocol::{request_error, ProtocolError, PtyAction, PtyFrame, ServerFrame};
use super::terminal_queue::{TerminalOp, TerminalQueue};
use crate::http::MAX_FOLLOW;
use crate::wire::{Piece, Utf8Pieces};
use threadbox_core::domain::ThreadId;
use threadbox_core::ports::ProcessState;
use threadbox_core::usecases::ProcessRequest;

/// Bytes of terminal output per frame: escaped as JSON (a control byte takes six), a frame stays
/// under API Gateway's 32 KiB.
const PIECE_BYTES: usize = 4 * 1024;

impl ConnectionExec {
    /// Act on a `pty*` frame, or say why not. Returns at once; frames follow on the exec lane.
    pub fn pty(&self, frame: PtyFrame) -> Result<(), Refusal> {
        let inner = &self.inner;
        let PtyFrame {
            request_id,
            thread_id,
            action,
        } = frame;
        let (open, session, after) = match action {
            PtyAction::Open(request) => (Some(request), None, 0),
            PtyAction::Attach { session, after } => (None, Some(session), after),
            PtyAction::Detach => {
                let mut running = inner.admit(&request_id, &thread_id, false)?;
                if let Some(attached) = running.commands.remove(&request_id) {
                    attached.abort.abort();
                }
                return Ok(());
            }
            PtyAction::Input { session, data } => {
                return self.queue(request_id, thread_id, session, TerminalOp::Input(data))
            }
            PtyAction::Resize { session, size } => {
                return self.queue(request_id, thread_id, session, TerminalOp::Resize(size))
            }
        };
        let mut running = inner.admit(&request_id, &thread_id, true)?;
        inner
            .limiter
            .thread_frame(&inner.connection_id, &thread_id)
            .map_err(|r| r.naming(&request_id, &thread_id))?;
        let attachment = tokio::spawn(attach(
            inner.clone(),
            request_id.clone(),
            thread_id,
            open,
            session,
            after,
        ));
        // Closing the connection ends the attachment, never the session.
        running.commands.insert(
            request_id,
            Command {
                abort: attachment.abort_handle(),
                kill_on_disconnect: true,
            },
        );
        Ok(())
    }

    /// Queue terminal input or a resize for `session`: behind the write running for it on
    /// this connection, if any (coalesced with what waits there), or with a writer of its own,
    /// within the limits of [`FrameLimits`](super::FrameLimits).
    fn queue(
        &self,
        request_id: String,
        thread_id: ThreadId,
        session: String,
        op: TerminalOp,
    ) -> Result<(), Refusal> {
        let inner = &self.inner;
        let mut running = inner.admit(&request_id, &thread_id, false)?;
        let limiter = &inner.limiter;
        let connection = &inner.connection_id;
        limiter
            .thread_frame(connection, &thread_id)
            .map_err(|r| r.naming(&request_id, &thread_id))?;
        let backlog = limiter.limits().pty_input_backlog;
        let key = (thread_id, session);
        let refuse = |error: ProtocolError| {
            limiter
                .refuse(connection, error)
                .naming(&request_id, &key.0)
        };
        if let Some(waiting) = running.terminals.get_mut(&key) {
            return waiting.push(op, &request_id, backlog).map_err(refuse);
        }
        let place = limiter
            .start(connection, &key.0)
            .map_err(|r| r.naming(&request_id, &key.0))?;
        let mut waiting = TerminalQueue::default();
        waiting.push(op, &request_id, backlog).map_err(refuse)?;
        running.terminals.insert(key.clone(), waiting);
        drop(running);
        tokio::spawn(write_terminal(inner.clone(), key, place));
        Ok(())
    }
}

/// Write what waits for one session, in order, until nothing does; an error frame names the
/// last request whose input or resize a failed write carried. Holds its place in flight.
async fn write_terminal(inner: Arc<Inner>, key: (ThreadId, String), _place: InFlight) {
    let (thread_id, session) = &key;
    loop {
        let next = {
            let mut running = inner.lock();
            let Some(waiting) = running.terminals.get_mut(&key) else {
                return;
            };
            match waiting.pop() {
                Some(next) => next,
                None => {
                    running.terminals.remove(&key);
                    return;
                }
            }
        };
        let (op, request_id) = next;
        let done = match op {
            TerminalOp::Input(data) => {
                inner
                    .tb
                    .write_process_input(thread_id, session, &data)
                    .await
            }
            TerminalOp::Resize(size) => inner.tb.resize_process(thread_id, session, size).await,
        };
        if let Err(error) = done {
            inner
                .send(request_error(&request_id, thread_id, error.into()))
                .await;
        }
    }
}

/// Open (or take) a session and send its output until it ends, the client goes or detaches.
/// Dropped midway (aborted), it drops the follow's receiver, which stops the follow in the
/// sandbox and releases its hold.
async fn attach(
    inner: Arc<Inner>,
    request_id: String,
    thread_id: ThreadId,
    open: Option<ProcessRequest>,
    session: Option<String>,
    after: u64,
) {
    let done = |inner: &Arc<Inner>| {
        inner.lock().commands.remove(&request_id);
    };
    let session = match (open, session) {
        (Some(request), _) => match inner.tb.start_process(&thread_id, request).await {
            Ok(info) => info.id,
            Err(error) => {
                inner
                    .send(request_error(&request_id, &thread_id, error.into()))
                    .await;
                return done(&inner);
            }
        },
        (None, Some(session)) => session,
        (None, None) => return done(&inner),
    };
    let attached = ServerFrame::PtyAttached {
        request_id: &request_id,
        thread_id: thread_id.as_str(),
        session: &session,
        offset: after,
    };
    if !inner.send(attached.to_frame()).await {
        return done(&inner);
    }
    let mut offset = after;
    loop {
        let (sink, mut output) = mpsc::channel(32);
        let tb = inner.tb.clone();
        let (thread, id) = (thread_id.clone(), session.clone());
        let follow = tokio::spawn(async move {
            tb.follow_process_output(&thread, &id, offset, MAX_FOLLOW, sink)
                .await
        });
        let mut pieces = Utf8Pieces::default();
        // Where the next output starts: `offset` plus a character held back unfinished.
        let mut expected = offset;
        while let Some(chunk) = output.recv().await {
            if chunk.offset != expected {
                // Output left the ring meanwhile: what was held belongs before the gap.
                let held = pieces.finish();
                if !send_pieces(&inner, &request_id, &session, &mut offset, held).await {
                    return done(&inner);
                }
                offset = chunk.offset;
            }
            expected = chunk.offset + chunk.data.len() as u64;
            let ready = pieces.push(&chunk.data);
            if !send_pieces(&inner, &request_id, &session, &mut offset, ready).await {
                return done(&inner);
            }
        }
        if !send_pieces(&inner, &request_id, &session, &mut offset, pieces.finish()).await {
            return done(&inner);
        }
        match follow.await {
            Ok(Ok((next, info))) => {
                offset = offset.max(next);
                let running = info.as_ref().map(|i| i.state) == Some(ProcessState::Running);
                if !running {
                    let exit = ServerFrame::PtyExit {
                        request_id: &request_id,
                        session: &session,
                        exit_code: info.and_then(|i| i.exit_code),
                        next: offset,
                    };
                    inner.send(exit.to_frame()).await;
                    return done(&inner);
                }
                // The follow's time ran out with the session still running: follow on.
            }
            Ok(Err(error)) => {
                inner
                    .send(request_error(&request_id, &thread_id, error.into()))
                    .await;
                return done(&inner);
            }
            Err(_) => return done(&inner),
        }
    }
}

/// Send `pieces` as `pty_output` frames, each at most [`PIECE_BYTES`] of output, moving
/// `offset` past them. False when the client is gone.
async fn send_pieces(
    inner: &Inner,
    request_id: &str,
    session: &str,
    offset: &mut u64,
    pieces: Vec<Piece>,
) -> bool {
    for piece in pieces {
        for part in split(piece) {
            let frame = ServerFrame::PtyOutput {
                request_id,
                session,
                offset: *offset,
                data: part.payload(),
            }
            .to_frame();
            *offset += part.byte_len() as u64;
            if !inner.send(frame).await {
                return false;
            }
        }
    }
    true
}

/// A piece cut into parts of at most [`PIECE_BYTES`], text at character boundaries.
fn split(piece: Piece) -> Vec<Piece> {
    match piece {
        Piece::Text(text) => {
            let mut parts = Vec::new();
            let mut rest = text.as_str();
            while rest.len() > PIECE_BYTES {
                let mut cut = PIECE_BYTES;
                while !rest.is_char_boundary(cut) {
                    cut -= 1;
                }
                parts.push(Piece::Text(rest[..cut].to_owned()));
                rest = &rest[cut..];
            }
            if !rest.is_empty() {
                parts.push(Piece::Text(rest.to_owned()));
            }
            parts
        }
        Piece::Bytes(bytes) => bytes
            .chunks(PIECE_BYTES)
            .map(|c| Piece::Bytes(c.to_vec()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_output_is_cut_into_frames_at_character_boundaries() {
        let text = "é".repeat(PIECE_BYTES); // two bytes each
        let parts = split(Piece::Text(text.clone()));
        assert_eq!(parts.len(), 2);
        let joined: String = parts
            .iter()
            .map(|p| match p {
                Piece::Text(t) => {
                    assert!(t.len() <= PIECE_BYTES);
                    t.as_str()
                }
                Piece::Bytes(_) => panic!("text stays text"),
            })
            .collect();
        assert_eq!(joined, text);
        assert_eq!(split(Piece::Bytes(vec![0xff; PIECE_BYTES + 1])).len(), 2);
    }
}
