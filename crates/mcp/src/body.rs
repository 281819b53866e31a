//! What the MCP endpoint takes as a request body, checked before the SDK parses it: one JSON-RPC
//! message, at most [`MAX_JSON_BODY`] bytes (the limit of every other `/v1` JSON route), and
//! anything else answered as JSON-RPC 2.0 says, in the MCP streamable HTTP transport's terms (an
//! HTTP error status whose body is a JSON-RPC error response, without an id when there is none
//! to name):
//!
//! | body | status | JSON-RPC error |
//! |---|---|---|
//! | over the limit (by `Content-Length`, or once read past it) | 413 | −32600 invalid request |
//! | empty, not JSON, truncated | 400 | −32700 parse error |
//! | a batch (an array: MCP 2025-06-18 removed batching) | 400 | −32600 |
//! | more than [`MAX_MESSAGE_VALUES`] JSON values, or nested past [`MAX_MESSAGE_DEPTH`] | 400 | −32600 |
//! | JSON but not a message object, `jsonrpc` not `"2.0"` | 400 | −32600 (with its `id`) |
//! | a message the SDK cannot read (bad `params`) | 400 | −32600 (with its `id`) |
//!
//! The body is read in chunks and given up on as soon as it passes the limit, so a request holds
//! at most the limit in memory before the SDK's own parse. That parse builds a JSON value tree,
//! about 32 bytes a value: a dense megabyte (`[0,0,0,…]`, half a million values) would cost it
//! some 32 MiB. So the check walks the body first without keeping anything, and refuses a
//! message of more than [`MAX_MESSAGE_VALUES`] values (a tool call has a few dozen; a file's
//! content is one string however long), which bounds the tree to a few MiB.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{json, Value};

use threadbox_api::http::MAX_JSON_BODY;

/// JSON-RPC 2.0: "Invalid JSON was received by the server."
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0: "The JSON sent is not a valid Request object."
pub const INVALID_REQUEST: i64 = -32600;

/// The most JSON values (each string, number, array, object…) one message may hold.
pub const MAX_MESSAGE_VALUES: usize = 16 * 1024;
/// The deepest one message may nest (below serde_json's own 128, so the refusal says why).
pub const MAX_MESSAGE_DEPTH: usize = 64;

/// A body refused: the JSON-RPC error response to answer it with, and its HTTP status.
#[derive(Debug)]
pub(super) struct Refusal {
    status: StatusCode,
    id: Value,
    code: i64,
    message: String,
}

impl Refusal {
    fn bad(id: Value, code: i64, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            id,
            code,
            message: message.into(),
        }
    }

    fn too_large() -> Self {
        Self {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            id: Value::Null,
            code: INVALID_REQUEST,
            message: format!(
                "the request body is over {MAX_JSON_BODY} bytes, the limit of the API's JSON \
                 bodies; send larger files with PUT /v1/threads/{{id}}/files/{{path}}"
            ),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = json!({
            "jsonrpc": "2.0",
            "id": self.id,
            "error": {"code": self.code, "message": self.message},
        });
        (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }
}

/// Whether the request says its body is JSON (the same test the SDK makes; a request that does
/// not is left to the SDK, which answers 415 without reading the body).
pub(super) fn says_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// The body, read up to [`MAX_JSON_BODY`] bytes; past it, or when it cannot be read, the answer.
pub(super) async fn read(headers: &HeaderMap, body: Body) -> Result<Bytes, Refusal> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_JSON_BODY as u64) {
        return Err(Refusal::too_large());
    }
    let mut collected = Vec::with_capacity(declared.map_or(0, |length| length as usize));
    let mut chunks = body.into_data_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|error| {
            Refusal::bad(
                Value::Null,
                INVALID_REQUEST,
                format!("the request body could not be read: {error}"),
            )
        })?;
        if collected.len() + chunk.len() > MAX_JSON_BODY {
            return Err(Refusal::too_large());
        }
        collected.extend_from_slice(&chunk);
    }
    Ok(collected.into())
}

/// The members of a message this check reads; the rest is skipped unread (not kept).
#[derive(Deserialize)]
struct Envelope {
    jsonrpc: Option<Value>,
    id: Option<Value>,
}

/// Check that `body` is one JSON-RPC message; the id to answer it with (`null` when it has none
/// a response may name), or the answer that refuses it.
pub(super) fn check(body: &[u8]) -> Result<Value, Refusal> {
    let parse_error = |why: String| Err(Refusal::bad(Value::Null, PARSE_ERROR, why));
    let invalid = |id: Value, why: &str| Err(Refusal::bad(id, INVALID_REQUEST, why));
    let Some(&first) = body.iter().find(|b| !b.is_ascii_whitespace()) else {
        return parse_error("the request body is empty; send one JSON-RPC message".into());
    };
    if first != b'{' {
        // Syntax first: a broken array is a parse error, not a batch.
        if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            return parse_error(format!("the request body is not JSON: {error}"));
        }
        return invalid(
            Value::Null,
            if first == b'[' {
                "a JSON-RPC batch; MCP takes one message per request (batching was removed in \
                 2025-06-18)"
            } else {
                "the request body is not a JSON-RPC message object"
            },
        );
    }
    // The whole body, walked once and kept nowhere: its size in values and its depth.
    let left = Cell::new(MAX_MESSAGE_VALUES);
    let mut walk = serde_json::Deserializer::from_slice(body);
    let walked = Walk {
        left: &left,
        depth: 0,
    }
    .deserialize(&mut walk)
    .and_then(|()| walk.end());
    match walked {
        Ok(()) => {}
        Err(error) if error.is_data() => return invalid(Value::Null, &error.to_string()),
        Err(error) => return parse_error(format!("the request body is not JSON: {error}")),
    }
    let envelope: Envelope = match serde_json::from_slice(body) {
        Ok(envelope) => envelope,
        Err(error) if error.is_data() => {
            return invalid(
                Value::Null,
                "the request body is not a JSON-RPC message object",
            )
        }
        Err(error) => return parse_error(format!("the request body is not JSON: {error}")),
    };
    // Only an id a response may carry is echoed back.
    let id = envelope
        .id
        .filter(|id| id.is_string() || id.is_number())
        .unwrap_or(Value::Null);
    if envelope.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
        return invalid(id, "\"jsonrpc\" must be \"2.0\"");
    }
    Ok(id)
}

/// The SDK's answer to a body that passed [`check`]: as it is, unless it is the SDK's plain-text
/// 415 for a message it could not read, which becomes a JSON-RPC invalid request naming `id`.
pub(super) async fn answer(id: Value, response: Response) -> Response {
    if response.status() != StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return response;
    }
    // The SDK's text is one short line; read a bounded prefix of it for the message.
    let text = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let why = text
        .strip_prefix("fail to deserialize request body ")
        .unwrap_or(&text);
    Refusal::bad(
        id,
        INVALID_REQUEST,
        format!("not an MCP message this server can read: {why}"),
    )
    .into_response()
}

/// A walk over one JSON value that keeps nothing, counting values down from `left` and refusing
/// past [`MAX_MESSAGE_DEPTH`].
struct Walk<'a> {
    left: &'a Cell<usize>,
    depth: usize,
}

impl Walk<'_> {
    fn take<E: de::Error>(&self) -> Result<(), E> {
        match self.left.get() {
            0 => Err(E::custom(format_args!(
                "the message holds more than {MAX_MESSAGE_VALUES} JSON values"
            ))),
            n => {
                self.left.set(n - 1);
                Ok(())
            }
        }
    }

    fn inner<E: de::Error>(&self) -> Result<Self, E> {
        self.take()?;
        if self.depth >= MAX_MESSAGE_DEPTH {
            return Err(E::custom(format_args!(
                "the message nests deeper than {MAX_MESSAGE_DEPTH} levels"
            )));
        }
        Ok(Walk {
            left: self.left,
            depth: self.depth + 1,
        })
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.take()
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.take()
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.take()
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.take()
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.take()
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.take()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let inner = self.inner()?;
        while seq
            .next_element_seed(Walk {
                left: inner.left,
                depth: inner.depth,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let inner = self.inner()?;
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value_seed(Walk {
                left: inner.left,
                depth: inner.depth,
            })?;
        }
        Ok(())
    }
}
