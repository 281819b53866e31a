//! What waits for one terminal session's writer (`pty`): input and resizes in order, runs of
//! either coalesced, bounded in bytes and in operations. Its own module so the connection's
//! state (`exec`) can hold the queues without `exec` and `pty` importing each other.

use super::limits::INPUT_BACKLOG_FULL;
use super::protocol::ProtocolError;
use threadbox_core::ports::{PtySize, MAX_INPUT_BYTES};

/// Something for a terminal: input to write, or a new size.
pub(super) enum TerminalOp {
    Input(Vec<u8>),
    Resize(PtySize),
}

/// Most separate operations waiting for one session (input and resizes alternating; runs of
/// either are coalesced into one).
const MAX_WAITING_OPS: usize = 32;

/// What waits for one session's writer, in order, each with the request that sent it last.
#[derive(Default)]
pub(super) struct TerminalQueue {
    ops: std::collections::VecDeque<(TerminalOp, String)>,
    bytes: usize,
}

impl TerminalQueue {
    /// Add `op`: input joins input waiting before it (up to what one write takes), a resize
    /// replaces a resize waiting before it; refused past `backlog` bytes or too many ops.
    pub(super) fn push(
        &mut self,
        op: TerminalOp,
        request_id: &str,
        backlog: usize,
    ) -> Result<(), ProtocolError> {
        let full = |what: String| {
            Err(ProtocolError::new(
                INPUT_BACKLOG_FULL,
                format!("{what} wait for this session already; wait for them to be written"),
            ))
        };
        if let TerminalOp::Input(data) = &op {
            if self.bytes + data.len() > backlog {
                return full(format!("{} bytes of input", self.bytes));
            }
        }
        match (self.ops.back_mut(), op) {
            (Some((TerminalOp::Input(waiting), by)), TerminalOp::Input(data))
                if waiting.len() + data.len() <= MAX_INPUT_BYTES =>
            {
                self.bytes += data.len();
                waiting.extend_from_slice(&data);
                request_id.clone_into(by);
            }
            (Some((TerminalOp::Resize(waiting), by)), TerminalOp::Resize(size)) => {
                *waiting = size;
                request_id.clone_into(by);
            }
            (_, op) => {
                if self.ops.len() >= MAX_WAITING_OPS {
                    return full(format!("{} inputs and resizes", self.ops.len()));
                }
                if let TerminalOp::Input(data) = &op {
                    self.bytes += data.len();
                }
                self.ops.push_back((op, request_id.to_owned()));
            }
        }
        Ok(())
    }

    pub(super) fn pop(&mut self) -> Option<(TerminalOp, String)> {
        let next = self.ops.pop_front()?;
        if let TerminalOp::Input(data) = &next.0 {
            self.bytes -= data.len();
        }
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(queue: &mut TerminalQueue, text: &str, id: &str) -> Result<(), ProtocolError> {
        queue.push(TerminalOp::Input(text.as_bytes().to_vec()), id, 10)
    }

    #[test]
    fn terminal_input_waiting_is_coalesced_in_order_and_bounded() {
        let mut queue = TerminalQueue::default();
        input(&mut queue, "ab", "i1").unwrap();
        input(&mut queue, "cd", "i2").unwrap();
        let size = |cols| TerminalOp::Resize(PtySize { cols, rows: 24 });
        queue.push(size(80), "r1", 10).unwrap();
        queue.push(size(90), "r2", 10).unwrap();
        input(&mut queue, "ef", "i3").unwrap();
        // Ten bytes at most: "abcdef" waits, five more do not fit.
        let full = input(&mut queue, "ghijk", "i4").unwrap_err();
        assert_eq!(full.code, INPUT_BACKLOG_FULL);
        input(&mut queue, "gh", "i5").unwrap();
        let mut written = Vec::new();
        while let Some((op, id)) = queue.pop() {
            written.push(match op {
                TerminalOp::Input(data) => format!("{id}:{}", String::from_utf8(data).unwrap()),
                TerminalOp::Resize(size) => format!("{id}:{}x{}", size.cols, size.rows),
            });
        }
        assert_eq!(written, ["i2:abcd", "r2:90x24", "i5:efgh"]);
        assert_eq!(queue.bytes, 0);
        // Input and resizes alternating are as many operations: bounded too.
        let mut queue = TerminalQueue::default();
        let mut refused = 0;
        for i in 0..100 {
            let op = if i % 2 == 0 {
                TerminalOp::Input(vec![b'x'])
            } else {
                size(80)
            };
            if queue.push(op, "p", 1 << 20).is_err() {
                refused += 1;
            }
        }
        assert_eq!(queue.ops.len(), MAX_WAITING_OPS);
        // Once full, what joins the last one waiting is still taken (input to its input, a
        // resize over its resize); every other one is refused.
        assert_eq!(refused, (100 - MAX_WAITING_OPS) / 2);
    }
}
