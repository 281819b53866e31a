//! The Connect protocol's streaming envelope with the JSON codec, and the messages of envd's
//! `process.Process` service (docs/e2b.md §7).
//!
//! A stream is a sequence of frames `[flags u8][length u32 big-endian][payload]`. Flag `0x02`
//! marks the end-of-stream frame, which is always last and carries `{}` on success or
//! `{"error": {"code", "message"}}`; handler errors in a streaming call still come with
//! HTTP 200, so this frame is where they are. Flag `0x01` (compressed) is never negotiated:
//! we send no `Connect-Accept-Encoding`, so such a frame is a protocol error.

use std::collections::BTreeMap;

use base64::Engine;
use serde::{Deserialize, Serialize};

pub(crate) const FLAG_COMPRESSED: u8 = 0x01;
pub(crate) const FLAG_END_STREAM: u8 = 0x02;
const HEADER: usize = 5;
/// Largest frame accepted. envd's frames are output chunks of a few KiB; anything near this is
/// a broken stream, and refusing it bounds memory.
pub(crate) const MAX_FRAME: usize = 16 * 1024 * 1024;

pub(crate) fn encode_frame(flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.push(flags);
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub flags: u8,
    pub payload: Vec<u8>,
}

impl Frame {
    pub fn is_end_stream(&self) -> bool {
        self.flags & FLAG_END_STREAM != 0
    }
}

/// Cuts frames out of a byte stream that arrives in arbitrary chunks.
#[derive(Default)]
pub(crate) struct FrameDecoder {
    buf: Vec<u8>,
}

impl FrameDecoder {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, String> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        let flags = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if flags & FLAG_COMPRESSED != 0 {
            return Err("compressed frame, but no compression was negotiated".into());
        }
        if len > MAX_FRAME {
            return Err(format!("frame of {len} bytes is larger than {MAX_FRAME}"));
        }
        if self.buf.len() < HEADER + len {
            return Ok(None);
        }
        let payload = self.buf[HEADER..HEADER + len].to_vec();
        self.buf.drain(..HEADER + len);
        Ok(Some(Frame { flags, payload }))
    }

    /// Bytes that do not make a whole frame yet (a stream must not end with any).
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// `StartRequest`.
#[derive(Serialize)]
pub(crate) struct StartRequest<'a> {
    pub process: ProcessConfig<'a>,
    /// Whether the process gets a stdin pipe. Omitted means true for legacy clients, so it is
    /// always sent.
    pub stdin: bool,
}

#[derive(Serialize)]
pub(crate) struct ProcessConfig<'a> {
    pub cmd: &'a str,
    pub args: &'a [String],
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub envs: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<&'a str>,
}

/// The `end` event. protojson omits zero values, so success has no `exitCode`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub(crate) struct EndEvent {
    #[serde(rename = "exitCode", alias = "exit_code", default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub exited: bool,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
}

impl EndEvent {
    /// The exit code, `None` when a signal ended the process (envd reports -1 then).
    pub fn code(&self) -> Option<i32> {
        match self.exit_code.unwrap_or(0) {
            -1 => None,
            code => Some(code),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event {
    Start {
        pid: u32,
    },
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// Terminal output; only with a PTY, which threadbox never asks for.
    Pty(Vec<u8>),
    Keepalive,
    End(EndEvent),
}

#[derive(Deserialize)]
struct StartResponse {
    event: RawEvent,
}

#[derive(Deserialize)]
struct RawEvent {
    #[serde(default)]
    start: Option<RawStart>,
    #[serde(default)]
    data: Option<RawData>,
    #[serde(default)]
    end: Option<EndEvent>,
    #[serde(default)]
    keepalive: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawStart {
    #[serde(default)]
    pid: u32,
}

#[derive(Deserialize)]
struct RawData {
    #[serde(default)]
    stdout: Option<String>,
    #[serde(default)]
    stderr: Option<String>,
    #[serde(default)]
    pty: Option<String>,
}

/// One message frame of a `Start` (or `Connect`) stream.
pub(crate) fn parse_event(payload: &[u8]) -> Result<Event, String> {
    let message: StartResponse =
        serde_json::from_slice(payload).map_err(|e| format!("bad process event: {e}"))?;
    let RawEvent {
        start,
        data,
        end,
        keepalive,
    } = message.event;
    if let Some(start) = start {
        return Ok(Event::Start { pid: start.pid });
    }
    if let Some(data) = data {
        return match (data.stdout, data.stderr, data.pty) {
            (Some(b), _, _) => Ok(Event::Stdout(decode_bytes(&b)?)),
            (_, Some(b), _) => Ok(Event::Stderr(decode_bytes(&b)?)),
            (_, _, Some(b)) => Ok(Event::Pty(decode_bytes(&b)?)),
            // Empty bytes are omitted by protojson: an empty chunk.
            (None, None, None) => Ok(Event::Stdout(Vec::new())),
        };
    }
    if let Some(end) = end {
        return Ok(Event::End(end));
    }
    if keepalive.is_some() {
        return Ok(Event::Keepalive);
    }
    Err("process event with no known kind".into())
}

/// A Connect error: a code string (`invalid_argument`, `deadline_exceeded`, ...) and a message.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub(crate) struct ConnectError {
    pub code: String,
    #[serde(default)]
    pub message: Option<String>,
}

#[derive(Deserialize)]
struct EndStream {
    #[serde(default)]
    error: Option<ConnectError>,
}

/// The end-of-stream frame: `Ok(None)` for a clean end, `Ok(Some(error))` for a handler error.
pub(crate) fn parse_end_stream(payload: &[u8]) -> Result<Option<ConnectError>, String> {
    if payload.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice::<EndStream>(payload)
        .map(|end| end.error)
        .map_err(|e| format!("bad end-of-stream frame: {e}"))
}

/// protojson writes `bytes` as standard base64 with padding, and accepts URL-safe on input;
/// take either.
fn decode_bytes(text: &str) -> Result<Vec<u8>, String> {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    STANDARD
        .decode(text)
        .or_else(|_| URL_SAFE.decode(text))
        .map_err(|e| format!("bad base64 in process output: {e}"))
}

pub(crate) fn encode_bytes(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(bytes: &[u8], chunk: usize) -> Vec<Frame> {
        let mut d = FrameDecoder::default();
        let mut out = Vec::new();
        for piece in bytes.chunks(chunk) {
            d.push(piece);
            while let Some(f) = d.next_frame().unwrap() {
                out.push(f);
            }
        }
        assert_eq!(d.pending(), 0);
        out
    }

    #[test]
    fn frames_survive_any_chunking() {
        let mut stream = encode_frame(0, br#"{"event":{"start":{"pid":7}}}"#);
        stream.extend(encode_frame(0, br#"{"event":{"data":{"stdout":"aGk="}}}"#));
        stream.extend(encode_frame(FLAG_END_STREAM, b"{}"));
        for chunk in [1, 2, 5, 7, 1000] {
            let f = frames(&stream, chunk);
            assert_eq!(f.len(), 3, "chunk {chunk}");
            assert!(f[2].is_end_stream());
            assert_eq!(parse_event(&f[0].payload).unwrap(), Event::Start { pid: 7 });
            assert_eq!(
                parse_event(&f[1].payload).unwrap(),
                Event::Stdout(b"hi".to_vec())
            );
        }
    }

    #[test]
    fn a_missing_exit_code_is_zero_and_minus_one_is_a_signal() {
        let ok =
            parse_event(br#"{"event":{"end":{"exited":true,"status":"exit status 0"}}}"#).unwrap();
        let Event::End(end) = ok else { panic!() };
        assert_eq!(end.code(), Some(0));
        let killed =
            parse_event(br#"{"event":{"end":{"exitCode":-1,"status":"signal: killed"}}}"#).unwrap();
        let Event::End(end) = killed else { panic!() };
        assert_eq!(end.code(), None);
        let failed = parse_event(br#"{"event":{"end":{"exitCode":3,"exited":true}}}"#).unwrap();
        let Event::End(end) = failed else { panic!() };
        assert_eq!(end.code(), Some(3));
    }

    #[test]
    fn end_stream_carries_errors() {
        assert_eq!(parse_end_stream(b"{}").unwrap(), None);
        assert_eq!(
            parse_end_stream(br#"{"metadata":{"a":["b"]}}"#).unwrap(),
            None
        );
        assert_eq!(
            parse_end_stream(br#"{"error":{"code":"invalid_argument","message":"no such file"}}"#)
                .unwrap(),
            Some(ConnectError {
                code: "invalid_argument".into(),
                message: Some("no such file".into())
            })
        );
    }

    #[test]
    fn compressed_and_oversized_frames_are_refused() {
        let mut d = FrameDecoder::default();
        d.push(&encode_frame(FLAG_COMPRESSED, b"x"));
        assert!(d.next_frame().is_err());
        let mut d = FrameDecoder::default();
        d.push(&[0, 0xff, 0xff, 0xff, 0xff]);
        assert!(d.next_frame().is_err());
    }

    #[test]
    fn keepalives_and_stderr_parse() {
        assert_eq!(
            parse_event(br#"{"event":{"keepalive":{}}}"#).unwrap(),
            Event::Keepalive
        );
        assert_eq!(
            parse_event(br#"{"event":{"data":{"stderr":"b29wcw=="}}}"#).unwrap(),
            Event::Stderr(b"oops".to_vec())
        );
    }
}
