//! E2B's wire formats as a server writes and reads them: envd's Connect stream envelopes and
//! error bodies, and the list's `metadata` filter. One copy for everything that serves E2B's API
//! (`threadbox-e2b-api`, and the contract fake in `threadbox-testing`); the client side of the
//! same formats is `connect` and `control` in this crate.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::connect::{encode_frame, FLAG_END_STREAM, MAX_FRAME};

/// The Connect envelope's header: flags, then the payload's length (u32, big-endian).
const HEADER: usize = 5;

/// A message envelope of a Connect stream, `payload` as JSON.
pub fn message_frame(payload: &Value) -> Vec<u8> {
    encode_frame(0, payload.to_string().as_bytes())
}

/// One of envd's process events, `{"event": {kind: body}}` (`start`, `data`, `end`, `keepalive`).
pub fn event_frame(kind: &str, body: Value) -> Vec<u8> {
    message_frame(&json!({ "event": { kind: body } }))
}

/// The end-of-stream envelope that closes every Connect stream: `{}`, or the call's error as
/// `{"error": {"code", "message"}}` (a streaming call's errors come with HTTP 200, here).
pub fn end_stream_frame(error: Option<(&str, &str)>) -> Vec<u8> {
    let body = match error {
        None => json!({}),
        Some((code, message)) => json!({ "error": { "code": code, "message": message } }),
    };
    encode_frame(FLAG_END_STREAM, body.to_string().as_bytes())
}

/// The one message of a server-streaming call's request body: exactly one uncompressed
/// envelope, nothing after it.
pub fn request_frame(body: &[u8]) -> Result<&[u8], String> {
    if body.len() < HEADER {
        return Err("missing request envelope".into());
    }
    if body[0] != 0 {
        return Err(format!(
            "unexpected envelope flags {} (no compression is negotiated)",
            body[0]
        ));
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if len > MAX_FRAME {
        return Err(format!(
            "envelope of {len} bytes is larger than {MAX_FRAME}"
        ));
    }
    if body.len() != HEADER + len {
        return Err("request envelope length does not match the body".into());
    }
    Ok(&body[HEADER..])
}

/// `process.Process/Start`'s request as envd reads it (protojson: lowerCamelCase names, zero
/// values left out).
#[derive(Debug, Deserialize)]
pub struct StartRequest {
    pub process: ProcessConfig,
    #[serde(default)]
    pub pty: Option<Pty>,
    #[serde(default)]
    pub tag: Option<String>,
    /// Whether the process gets a stdin pipe; omitted means true, for legacy clients.
    #[serde(default)]
    pub stdin: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub struct ProcessConfig {
    pub cmd: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub envs: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
}

/// A terminal, by its size.
#[derive(Debug, Deserialize)]
pub struct Pty {
    pub size: PtySize,
}

#[derive(Debug, Clone, Copy, Deserialize)]
pub struct PtySize {
    pub cols: u32,
    pub rows: u32,
}

/// The control plane's error body, `{"code": <status>, "message": ...}`, which the SDKs read
/// (`AuthenticationException` for 401, `SandboxNotFoundException` for 404 on most calls, ...).
pub fn error_body(status: u16, message: &str) -> Value {
    json!({ "code": status, "message": message })
}

/// Go's `url.QueryUnescape`: `+` is a space, `%XX` a byte, anything else malformed.
pub fn query_unescape(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The list's `metadata` value, already decoded once by the query parser: unescape it, split it
/// into pairs, unescape each key and value (docs/e2b.md §2). `None` when malformed (E2B: 400).
pub fn parse_metadata_filter(raw: &str) -> Option<BTreeMap<String, String>> {
    let whole = query_unescape(raw)?;
    let mut out = BTreeMap::new();
    for pair in whole.split('&').filter(|p| !p.is_empty()) {
        let mut parts = pair.split('=');
        let (k, v) = (parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        out.insert(query_unescape(k)?, query_unescape(v)?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::FrameDecoder;

    #[test]
    fn frames_read_back_with_the_client_decoder() {
        let mut decoder = FrameDecoder::default();
        decoder.push(&event_frame("start", json!({"pid": 7})));
        decoder.push(&end_stream_frame(Some(("not_found", "gone"))));
        let first = decoder.next_frame().unwrap().unwrap();
        assert!(!first.is_end_stream());
        assert_eq!(
            serde_json::from_slice::<Value>(&first.payload).unwrap(),
            json!({"event": {"start": {"pid": 7}}})
        );
        let last = decoder.next_frame().unwrap().unwrap();
        assert!(last.is_end_stream());
        assert_eq!(
            serde_json::from_slice::<Value>(&last.payload).unwrap(),
            json!({"error": {"code": "not_found", "message": "gone"}})
        );
    }

    #[test]
    fn a_request_is_exactly_one_plain_envelope() {
        let frame = message_frame(&json!({"a": 1}));
        assert_eq!(request_frame(&frame).unwrap(), br#"{"a":1}"#);
        assert!(request_frame(&frame[..4]).is_err());
        let mut longer = frame.clone();
        longer.push(0);
        assert!(request_frame(&longer).is_err());
        let mut compressed = frame;
        compressed[0] = 1;
        assert!(request_frame(&compressed).is_err());
    }

    #[test]
    fn the_metadata_filter_reads_back_what_the_client_writes() {
        let wanted = BTreeMap::from([
            ("thread id".to_owned(), "a&b=c/d".to_owned()),
            ("k".to_owned(), "v".to_owned()),
        ]);
        let sent = crate::control::metadata_query(&wanted);
        assert_eq!(parse_metadata_filter(&sent).unwrap(), wanted);
        assert!(parse_metadata_filter("a=b=c").is_none());
        assert!(parse_metadata_filter("%zz").is_none());
    }
}
