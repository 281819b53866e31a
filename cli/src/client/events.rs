//! The client's one reader of server-sent events, for every route that streams: a streamed exec
//! (`exec_stream`) and a followed process's output (`processes`). It reads the response's
//! chunks into events (`event:` and `data:` lines, a blank line ends an event, `:` lines are
//! keep-alives), answers an `error` event as the API's error, and hands the rest to the stream's
//! [`Events`] to make its updates. The events' `data` are `threadbox_api::wire`'s frames.

use std::collections::VecDeque;
use std::marker::PhantomData;

use threadbox_api::wire::{self, ErrorFrame, OutputFrame, PayloadError};

use super::ClientError;

/// What one kind of stream makes of its events.
pub trait Events {
    /// What the stream hands over.
    type Update;
    /// What the stream ends with, for the error when it is cut before it.
    const END: &'static str;
    /// The update an event makes; `None` for events this client does not act on (a newer
    /// server's additions). `Err` says what is wrong with the event.
    fn update(name: &str, data: &str) -> Result<Option<Self::Update>, String>;
}

/// A stream of `E`'s updates as the server sends them.
pub struct EventStream<E> {
    response: reqwest::Response,
    url: String,
    reader: EventReader,
    queued: VecDeque<SseEvent>,
    events: PhantomData<E>,
}

impl<E: Events> EventStream<E> {
    /// Read `response`, which came from `url` (as shown in errors).
    pub(super) fn new(response: reqwest::Response, url: String) -> Self {
        Self {
            response,
            url,
            reader: EventReader::default(),
            queued: VecDeque::new(),
            events: PhantomData,
        }
    }

    /// The next update. An `error` event (the stream could not go on) is the API's error, as a
    /// plain call would have answered it.
    pub async fn next(&mut self) -> Result<E::Update, ClientError> {
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
                    return Err(self.protocol(format!(
                        "the stream ended before {} (the connection was cut?)",
                        E::END
                    )))
                }
            }
        }
    }

    fn update(&self, event: SseEvent) -> Result<Option<E::Update>, ClientError> {
        if event.name == wire::ERROR {
            let error: ErrorFrame =
                parse(wire::ERROR, &event.data).map_err(|e| self.protocol(e))?;
            return Err(ClientError::Api {
                status: error.status,
                code: error.code,
                message: error.message,
                retry_after: error.retry_after,
            });
        }
        E::update(&event.name, &event.data).map_err(|e| self.protocol(e))
    }

    fn protocol(&self, detail: String) -> ClientError {
        ClientError::Protocol {
            url: self.url.clone(),
            detail,
        }
    }
}

/// An event's `data` as the frame `T`.
pub(super) fn parse<T: serde::de::DeserializeOwned>(name: &str, data: &str) -> Result<T, String> {
    serde_json::from_str(data).map_err(|e| format!("a bad {name} event ({e})"))
}

/// An output event's bytes: `{"text": ...}` or `{"base64": ...}`.
pub(super) fn output_bytes(name: &str, data: &str) -> Result<Vec<u8>, String> {
    let frame: OutputFrame = parse(name, data)?;
    frame.data.decode().map_err(|e| match e {
        PayloadError::Base64(e) => format!("an {name} event with bad base64 ({e})"),
        PayloadError::Neither => format!("an {name} event with neither text nor base64"),
        PayloadError::Both => format!("an {name} event with both text and base64"),
    })
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
        let output_bytes = |data| output_bytes("output", data);
        assert_eq!(output_bytes(r#"{"text":"é"}"#).unwrap(), "é".as_bytes());
        assert_eq!(output_bytes(r#"{"base64":"/w=="}"#).unwrap(), vec![0xff]);
        assert!(output_bytes(r#"{}"#).is_err());
        assert!(output_bytes(r#"{"base64":"!!"}"#).is_err());
        assert!(output_bytes(r#"{"text":"a","base64":"YQ=="}"#).is_err());
    }
}
